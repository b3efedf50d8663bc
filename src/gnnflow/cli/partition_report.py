"""``gnnflow partition-report PARTDIR [--json]``: quality metrics of a partition book.

Edge cut, balance max/avg for every constraint (DistDGLv2 §4.1.3), halo vertices
per part (DistGNN-MB §3.1), K-hop replication factor (DGCL §3, Fig. 4) and the
split-parallel load imbalance and cross-split edge fraction measured on sampled
mini-batches (GSplit §6.3, Fig. 5).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from gnnflow.cli.presample import parse_fanouts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("partdir", help="partition book directory")
    parser.add_argument("--graph", default=None, help="graph store (default: the one recorded in meta.json)")
    parser.add_argument("--constraints", default="vertices,train,val,test,edges",
                        help="constraints whose balance to report")
    parser.add_argument("--replication-hops", type=int, default=2, help="replication factor for 1..K hops")
    parser.add_argument("--fanouts", default="10,10", help="sampler fanouts for the split metrics")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--batches", type=int, default=20, help="mini-batches sampled for the split metrics (0: skip)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")


def report(partdir: str, graph: str | None = None, constraints: str = "vertices,train,val,test,edges",
           replication_hops: int = 2, fanouts: list[int] | None = None, batch_size: int = 512,
           batches: int = 20, seed: int = 1) -> dict[str, Any]:
    from gnnflow.partition.api import open_graph
    from gnnflow.partition.book import PartitionBook
    from gnnflow.partition.constraints import parse_constraints
    from gnnflow.partition.metrics import quality, sampled_split_metrics

    book = PartitionBook.open(partdir)
    store = open_graph(graph or book.graph_path)
    node_part = np.asarray(book.node_part)
    names = [c for c in parse_constraints(constraints)
             if c not in ("train", "val", "test") or len(store.split(c)) > 0]
    stats = None
    halo_file = [book.path / f"part{i}" / "halo_ids.npy" for i in range(book.num_parts)]
    if all(f.exists() for f in halo_file):
        stats = [{"halo": int(np.load(f, mmap_mode="r").shape[0]),
                  "edges": int(np.load(book.path / f"part{i}" / "indices.npy", mmap_mode="r").shape[0])}
                 for i, f in enumerate(halo_file)]
    q = quality(store, node_part, book.num_parts, names, stats, replication_hops=replication_hops)
    out: dict[str, Any] = {"partdir": str(book.path), "method": book.method, "num_parts": book.num_parts,
                           "graph": str(store.path), **q}
    if "tile_nnz" in book.meta.extra:  # permute-1d records its tiles' non-zeros
        out["tile_nnz_max_over_mean"] = book.meta.extra.get("tile_nnz_max_over_mean")
    if book.meta.note:
        out["note"] = book.meta.note
    if batches > 0:
        out["split"] = sampled_split_metrics(store, node_part, fanouts or [10, 10], batch_size, batches, seed)
    return out


def main(args: argparse.Namespace) -> int:
    r = report(args.partdir, args.graph, args.constraints, args.replication_hops, parse_fanouts(args.fanouts),
               args.batch_size, args.batches, args.seed)
    if args.json:
        print(json.dumps(r, indent=2, sort_keys=True))
        return 0
    print(f"{r['partdir']}: {r['method']}, {r['num_parts']} parts on {r['graph']}")
    print(f"  edge cut: {r['edge_cut']} edges ({r['edge_cut_pct']:.2f}%)")
    print("  balance max/avg: " + ", ".join(f"{k} {v:.3f}" for k, v in r["balance"].items()))
    if "halo_per_part" in r:
        print(f"  halo vertices per part: {r['halo_per_part']}")
    for k, v in r.get("replication_factor", {}).items():
        print(f"  replication factor, {k}-hop: {v:.3f}")
    if "split" in r:
        s = r["split"]
        print(f"  split parallelism ({s['num_batches']} batches of {s['batch_size']}, fanouts {s['fanouts']}): "
              f"cross-split edges {100 * s['cross_fraction_mean']:.2f}%, load imbalance mean "
              f"{s['load_imbalance_mean']:.3f} max {s['load_imbalance_max']:.3f}")
    if r.get("note"):
        print(f"  note: {r['note']}")
    return 0
