"""``gnnflow presample GRAPH --fanouts 10,10 --batch-size 512 --epochs 10 --out FILE`` (GSplit §4)."""

from __future__ import annotations

import argparse
import time

import numpy as np

from gnnflow.errors import ConfigError


def parse_fanouts(text: str) -> list[int]:
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--fanouts must be comma-separated integers (e.g. 10,10), got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("graph", help="graph store directory")
    parser.add_argument("--fanouts", default="10,10", help="per layer, input layer first (as training)")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=10, help="presampling epochs (GSplit §6.3: 10 suffice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="output .npz")
    parser.add_argument("--overwrite", action="store_true")


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gnnflow.partition.api import open_graph
    from gnnflow.partition.presample import hot_vertices, presample

    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ConfigError(f"{out} already exists; remove it or pass --overwrite")
    store = open_graph(args.graph)
    t0 = time.perf_counter()
    p = presample(store, parse_fanouts(args.fanouts), args.batch_size, args.epochs, args.seed)
    p.save(out)
    top = hot_vertices(p, max(1, store.num_nodes // 100))
    share = float(p.vertex_counts[0, top].sum() / max(p.vertex_counts[0].sum(), 1e-12))
    print(f"{out}: {p.num_batches} mini-batches over {p.epochs} epochs in {time.perf_counter() - t0:.1f}s; "
          f"expected inputs per batch {p.vertex_counts[0].sum():.0f}, sampled edges per batch "
          f"{p.edge_counts.sum():.0f}; hottest 1% of vertices = {100 * share:.1f}% of input loads; "
          f"max edge count {float(np.max(p.edge_counts)):.3f}")
    return 0
