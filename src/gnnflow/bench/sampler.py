"""``gnnflow bench sampler``: our layer-wise sampler vs DGL 1.1.3's ``NeighborSampler``.

Both sample the same target batches (default 1024 targets, fanouts 15,10,5,
DistDGLv2 §5 / GSplit §6.1 settings) from the same CSR graph (default: a
1M-vertex synthetic power-law graph generated in-process), in the same process,
alternating rounds of ``--batches`` batches each.  The headline ratio is our
sampled-edge throughput over DGL's (medians over rounds); > 1 means faster.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.errors import GnnflowError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_graph_arguments(parser)
    parser.add_argument("--fanouts", default="15,10,5", help="fanout per layer, input layer first")
    parser.add_argument("--batch-size", type=int, default=1024, help="targets per mini-batch")
    parser.add_argument("--batches", type=int, default=10, help="batches per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (median reported)")


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    """Options naming the benchmark graph (shared by the sampler and layer benchmarks)."""
    parser.add_argument("--graph", default=None, help="graph store directory (default: generate one)")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="vertices of the generated graph")
    parser.add_argument("--avg-degree", type=float, default=12.0, help="mean in-degree of the generated graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads for torch and DGL (0: leave the defaults)")


def set_threads(threads: int) -> int:
    """Use ``threads`` OpenMP threads in torch and DGL (when > 0); return the count in force."""
    if threads > 0:
        torch.set_num_threads(threads)
        try:
            import dgl
        except ImportError:  # DGL's rows are left out where it does not import; torch's count stands
            return torch.get_num_threads()
        dgl.utils.set_num_threads(threads)
    return torch.get_num_threads()


def bench_graph(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, str]:
    """``(indptr, indices, description)`` of the store at ``--graph`` or a generated synthetic graph."""
    if args.graph:
        from gnnflow.data.store import open_store

        store = open_store(args.graph)
        return np.asarray(store.indptr), np.asarray(store.indices), f"{store.name} ({args.graph})"
    from gnnflow.data.synthetic import generate_synthetic

    g = generate_synthetic(num_nodes=args.nodes, avg_degree=args.avg_degree, feature_dim=1, num_classes=2,
                           seed=args.seed)
    return g["indptr"], g["indices"], f"synthetic n={args.nodes} avg_degree={args.avg_degree}"


def parse_fanouts(text: str) -> list[int]:
    try:
        fanouts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise GnnflowError(f"--fanouts: expected comma-separated integers like 15,10,5, got {text!r}") from None
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise GnnflowError(f"--fanouts: each must be a positive count or -1, got {text!r}")
    return fanouts


def dgl_graph(indptr: np.ndarray, indices: np.ndarray) -> Any:
    """The same CSR as a DGL graph (our destination-major CSR is DGL's CSC)."""
    import dgl

    g = dgl.graph(("csc", (torch.from_numpy(np.ascontiguousarray(indptr)),
                           torch.from_numpy(np.ascontiguousarray(indices)),
                           torch.empty(0, dtype=torch.int64))), num_nodes=indptr.shape[0] - 1)
    return g


def run(args: argparse.Namespace) -> dict[str, Any]:
    import dgl

    from gnnflow.sampling import NeighborSampler

    fanouts = parse_fanouts(args.fanouts)
    threads = set_threads(args.threads)
    indptr, indices, desc = bench_graph(args)
    num_nodes = indptr.shape[0] - 1
    if args.batch_size > num_nodes:
        raise GnnflowError(f"--batch-size {args.batch_size} exceeds the graph's {num_nodes} vertices")
    g = dgl_graph(indptr, indices)
    theirs = dgl.dataloading.NeighborSampler(fanouts)
    ours = NeighborSampler(indptr, indices, fanouts, seed=args.seed)
    rng = np.random.default_rng(args.seed + 1)
    batches = [torch.from_numpy(rng.choice(num_nodes, args.batch_size, replace=False))
               for _ in range(args.batches)]
    torch.manual_seed(args.seed)

    def time_dgl() -> tuple[float, float, int]:
        t, c = time.perf_counter(), time.process_time()
        edges = 0
        for seeds in batches:
            _, _, blocks = theirs.sample_blocks(g, seeds)
            edges += sum(int(b.num_edges()) for b in blocks)
        return time.perf_counter() - t, time.process_time() - c, edges

    def time_ours() -> tuple[float, float, int]:
        t, c = time.perf_counter(), time.process_time()
        edges = 0
        for seeds in batches:
            edges += sum(b.num_edges for b in ours.sample_blocks(seeds))
        return time.perf_counter() - t, time.process_time() - c, edges

    time_dgl()  # warm-up: DGL builds its formats, we allocate the relabel bitmap
    time_ours()
    eps: dict[str, list[float]] = {"ours": [], "dgl": []}  # sampled edges per wall second
    cpu_eps: dict[str, list[float]] = {"ours": [], "dgl": []}  # ... per process CPU second
    ms: dict[str, list[float]] = {"ours": [], "dgl": []}
    for r in range(args.rounds):
        order = (("ours", time_ours), ("dgl", time_dgl))
        for name, fn in order if r % 2 == 0 else order[::-1]:
            wall, cpu, edges = fn()
            eps[name].append(edges / wall)
            cpu_eps[name].append(edges / max(cpu, 1e-9))
            ms[name].append(1000 * wall / len(batches))
    med = {k: statistics.median(v) for k, v in eps.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu_eps.items()}
    ms_med = {k: statistics.median(v) for k, v in ms.items()}
    setting = (f"{desc}, fanouts {args.fanouts}, batch {args.batch_size}, {args.rounds}x{args.batches} batches, "
               f"{threads} threads, median over rounds")
    ratios = [ratio("sampled edges per second: ours / DGL (higher is better)",
                    operand(med["ours"], "edges/s", f"gnnflow NeighborSampler, {setting}"),
                    operand(med["dgl"], "edges/s", f"DGL 1.1.3 NeighborSampler, {setting}"), ">= 1.0"),
              ratio("sampled edges per CPU second: ours / DGL (higher is better)",
                    operand(cpu_med["ours"], "edges/CPU s", f"gnnflow NeighborSampler, {setting}"),
                    operand(cpu_med["dgl"], "edges/CPU s", f"DGL 1.1.3 NeighborSampler, {setting}"), ">= 1.0")]
    ratio_wall, cpu_ratio = ratios[0]["value"], ratios[1]["value"]
    return headline({
        "summary": (
            f"sampler: ratio {ratio_wall:.2f} (ours {med['ours'] / 1e6:.2f} M edges/s, {ms_med['ours']:.1f} ms/batch; "
            f"DGL {med['dgl'] / 1e6:.2f} M edges/s, {ms_med['dgl']:.1f} ms/batch; per CPU-second ratio "
            f"{cpu_ratio:.2f}) on {desc}, fanouts {args.fanouts}, batch {args.batch_size}, "
            f"{args.rounds}x{args.batches} batches, {threads} threads"
        ),
        "graph": desc,
        "num_nodes": int(num_nodes),
        "num_edges": int(indices.shape[0]),
        "fanouts": fanouts,
        "batch_size": args.batch_size,
        "ours_edges_per_s": med["ours"],
        "dgl_edges_per_s": med["dgl"],
        "ours_ms_per_batch": ms_med["ours"],
        "dgl_ms_per_batch": ms_med["dgl"],
        "cpu_ratio": cpu_ratio,
        "ours_edges_per_cpu_s": cpu_med["ours"],
        "dgl_edges_per_cpu_s": cpu_med["dgl"],
        "rounds": {"ours_edges_per_s": eps["ours"], "dgl_edges_per_s": eps["dgl"]},
        "torch_threads": threads,
    }, ratios)
