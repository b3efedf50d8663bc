"""``gnnflow homogenize``: a heterogeneous graph into one homogeneous id space (DistDGLv2 §4.1.1).

``gnnflow homogenize IN --out STORE`` reads a typed graph, either OGB's
heterogeneous raw layout (a folder with ``raw/triplet-type-list.csv.gz``, as
ogbn-mag ships) or gnnflow's typed-directory layout (``graph.json``,
``nodes/<type>/...``, ``edges/<src>___<rel>___<dst>.npy``; docs/data.md), and
writes a homogenized graph store.

``gnnflow homogenize --to-typed STORE --out DIR`` goes back: it writes a
homogenized store's per-type ids, features, labels and splits in the
typed-directory layout, so a round trip can be checked with ``diff``-like tools.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gnnflow.data.hetero import (
    heterogenize,
    read_typed_dir,
    write_hetero_store,
    write_typed_dir,
)
from gnnflow.data.store import open_store
from gnnflow.errors import GnnflowError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path,
                        help="typed graph directory or OGB heterogeneous dataset root "
                             "(with --to-typed: a homogenized graph store)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    parser.add_argument("--to-typed", action="store_true",
                        help="write a homogenized store back in the typed-directory layout")
    parser.add_argument("--name", default=None, help="dataset name recorded in meta.json")
    parser.add_argument("--ogb-name", default="ogbn-mag",
                        help="OGB dataset whose table row (classes, split) applies to an OGB root")
    parser.add_argument("--no-reverse-edges", dest="reverse_edges", action="store_false",
                        help="do not add a reverse edge type per relation")
    parser.add_argument("--feature-fill", choices=("neighbor-mean", "zero"),
                        default="neighbor-mean",
                        help="how types without features of the common dim fill features.npy")
    parser.add_argument("--seed", type=int, default=0, help="seed of random projections")


def main(args: argparse.Namespace) -> int:
    if args.to_typed:
        store = open_store(args.input)
        hg = heterogenize(store)
        write_typed_dir(hg, args.out, overwrite=args.overwrite)
        print(json.dumps({"out": str(args.out), "num_nodes": hg.num_nodes,
                          "edge_types": ["___".join(e) for e in hg.edge_types]}, indent=2))
        return 0
    inp: Path = args.input
    if (inp / "raw" / "triplet-type-list.csv.gz").exists():
        from gnnflow.data.ogb import read_ogb_hetero

        hg = read_ogb_hetero(inp, args.ogb_name)
        source = "ogb"
    elif (inp / "graph.json").exists():
        hg = read_typed_dir(inp)
        source = "typed-dir"
    else:
        raise GnnflowError(f"{inp}: neither a typed graph directory (graph.json) nor an OGB "
                           "heterogeneous root (raw/triplet-type-list.csv.gz); see docs/data.md")
    if args.name:
        hg.name = args.name
    store = write_hetero_store(hg, args.out, overwrite=args.overwrite,
                               reverse_edges=args.reverse_edges, feature_fill=args.feature_fill,
                               seed=args.seed, source=source)
    from gnnflow.data.stats import summary

    print(json.dumps(summary(store), indent=2, sort_keys=True))
    return 0
