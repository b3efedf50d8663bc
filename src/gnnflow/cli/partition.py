"""``gnnflow partition GRAPH --method M --parts P --out DIR``: write a partition book."""

from __future__ import annotations

import argparse
import inspect
import json

from gnnflow.errors import ConfigError
from gnnflow.partition.api import METHODS, get_method, partition_graph

# CLI option -> method keyword
METHOD_OPTIONS = {
    "constraints": "constraints",
    "levels": "levels",
    "presample": "presample",
    "imbalance": "imbalance",
    "backend": "backend",
    "weights": "weights",
    "np": "num_ranks",
    "idx_bits": "idx_bits",
    "library": "library",
    "launcher": "launcher",
    "permute": "permute",
    "coarsen": "coarsen",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("graph", help="graph store directory (from `gnnflow prepare`)")
    parser.add_argument("--method", required=True, choices=list(METHODS), help="partitioning method")
    parser.add_argument("--parts", type=int, default=None,
                        help="number of parts (two-level: machines*workers, may be omitted)")
    parser.add_argument("--out", required=True, help="partition book directory to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--constraints", default=None,
                        help="metis/two-level balance constraints, comma-separated among vertices,train,val,"
                             "test,edges,ntype:<name> (default vertices,train,edges)")
    parser.add_argument("--no-permute", dest="permute", action="store_false", default=None,
                        help="permute-1d: natural-order row blocks (no random permutation; MG-GCN Fig. 7 baseline)")
    parser.add_argument("--levels", default=None, help="two-level: MxW machines x workers per machine")
    parser.add_argument("--presample", default=None, help="node/presample: .npz from `gnnflow presample`")
    parser.add_argument("--weights", default=None, choices=["layer-edges", "appearances"],
                        help="node/presample: which presampled vertex weights to balance")
    parser.add_argument("--imbalance", type=float, default=None, help="METIS load imbalance target (default 1.03)")
    parser.add_argument("--backend", default=None, choices=["libmetis", "pymetis"],
                        help="metis: libmetis (multi-constraint, default) or pymetis (first constraint only)")
    parser.add_argument("--coarsen", default=None, choices=["auto", "lp", "none"],
                        help="metis-based methods: give METIS a graph coarsened by label propagation and refine "
                             "its partition (lp; a fraction of METIS's memory), the whole graph (none), or lp "
                             "from 2^21 adjacency entries on (auto, default)")
    parser.add_argument("--np", type=int, default=None, help="parmetis: number of MPI ranks (default 2)")
    parser.add_argument("--idx-bits", type=int, default=None, choices=[32, 64],
                        help="parmetis: integer width of the library's idx_t (default: detect)")
    parser.add_argument("--library", default=None, help="parmetis: path of libparmetis.so to load")
    parser.add_argument("--launcher", default=None, choices=["mpirun", "srun"],
                        help="parmetis: how to start the ranks (default mpirun)")
    parser.add_argument("--halo-hops", type=int, default=1, help="also write K-hop halo id lists")
    parser.add_argument("--replication-hops", type=int, default=0,
                        help="add the DGCL replication factor for 1..K hops to the quality metrics")
    parser.add_argument("--no-features", action="store_true", help="do not write per-part feature shards")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--json", action="store_true", help="print meta.json instead of a summary")


def method_params(method: str, args: argparse.Namespace) -> dict:
    """The options the user set, checked against what ``method`` accepts."""
    accepted = set(inspect.signature(get_method(method)).parameters)
    params = {}
    for opt, kw in METHOD_OPTIONS.items():
        value = getattr(args, opt, None)
        if value is None:
            continue
        if kw not in accepted:
            raise ConfigError(f"--method {method} does not take --{opt.replace('_', '-')}")
        params[kw] = value
    return params


def main(args: argparse.Namespace) -> int:
    params = method_params(args.method, args)
    if args.method != "two-level" and args.parts is None:
        raise ConfigError("--parts is required")
    book = partition_graph(args.graph, args.method, args.parts or 0, args.out, seed=args.seed,
                           halo_hops=args.halo_hops, overwrite=args.overwrite,
                           write_features=not args.no_features, replication_hops=args.replication_hops,
                           **params)
    if args.json:
        print(json.dumps(book.meta.to_dict(), indent=2, sort_keys=True))
    else:
        q = book.quality
        bal = ", ".join(f"{k} {v:.3f}" for k, v in q["balance"].items())
        note = book.meta.note
        print(f"{book.path}: {book.method}, {book.num_parts} parts, edge cut {q['edge_cut_pct']:.2f}%, "
              f"balance max/avg: {bal}, partition {(book.meta.timings or {})['partition_s']:.2f}s"
              + (f"\nnote: {note}" if note else ""))
    return 0
