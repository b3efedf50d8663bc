"""``gnnflow bench layers``: forward+backward time of our layers vs DGL's on the same block.

One mini-batch is sampled with our sampler (1024 targets, fanouts 15,10,5)
from a graph of at least 1M vertices (generated in-process by default); the
benchmark block is its input layer (``blocks[0]``, the largest).  For each
layer (SAGE mean, GCN symmetric, GCN row-normalised, GAT multi-head) our
module and DGL's, holding the same weights, run forward and backward on the
same input (which requires grad, as a hidden layer's does), alternating and
repeated; the ratio is our median time over DGL's (< 1 means faster).  Each
side keeps its per-block derived structures between repeats (DGL its sparse
formats, we the transposed CSR), as both do within one training iteration.
The headline ratio is the largest over the layers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
import torch

from gnnflow.bench.sampler import add_graph_arguments, bench_graph, parse_fanouts, set_threads

LAYERS = ("sage", "gcn-both", "gcn-right", "gat")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_graph_arguments(parser)
    parser.add_argument("--fanouts", default="15,10,5", help="fanouts of the sampled batch (input layer first)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--in-dim", type=int, default=128)
    parser.add_argument("--out-dim", type=int, default=128, help="output features (GAT: per head x heads)")
    parser.add_argument("--heads", type=int, default=4, help="GAT heads (out-dim is split among them)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per layer (median)")
    parser.add_argument("--layers", default=",".join(LAYERS), help=f"subset of {','.join(LAYERS)}")


def layer_pair(kind: str, in_dim: int, out_dim: int, heads: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(ours, dgl)`` modules of one layer kind with identical weights."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl.nn.pytorch as dglnn

    from gnnflow.nn import GATConv, GCNConv, SAGEConv

    if kind == "sage":
        ours, theirs = SAGEConv(in_dim, out_dim), dglnn.SAGEConv(in_dim, out_dim, "mean")
    elif kind in ("gcn-both", "gcn-right"):
        norm = kind.split("-")[1]
        ours, theirs = GCNConv(in_dim, out_dim, norm=norm), dglnn.GraphConv(in_dim, out_dim, norm=norm, allow_zero_in_degree=True)
    elif kind == "gat":
        per_head = max(1, out_dim // heads)
        ours, theirs = GATConv(in_dim, per_head, heads), dglnn.GATConv(in_dim, per_head, num_heads=heads, allow_zero_in_degree=True)
    else:
        raise ValueError(f"unknown layer {kind!r}; choose from {', '.join(LAYERS)}")
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def run(args: argparse.Namespace) -> dict[str, Any]:
    import dgl

    from gnnflow.sampling import NeighborSampler

    kinds = [k.strip() for k in args.layers.split(",") if k.strip()]
    threads = set_threads(args.threads)
    indptr, indices, desc = bench_graph(args)
    num_nodes = indptr.shape[0] - 1
    sampler = NeighborSampler(indptr, indices, parse_fanouts(args.fanouts), seed=args.seed)
    rng = np.random.default_rng(args.seed + 1)
    targets = torch.from_numpy(rng.choice(num_nodes, args.batch_size, replace=False))
    block = sampler.sample_blocks(targets)[0]
    graph = dgl.create_block((block.indices, block.edge_dst()), num_src_nodes=block.num_src,
                             num_dst_nodes=block.num_dst)
    torch.manual_seed(args.seed)
    x = torch.randn(block.num_src, args.in_dim)

    def step(module: torch.nn.Module, g: Any, grad: torch.Tensor | None) -> tuple[float, float, torch.Tensor]:
        inp = x.clone().requires_grad_()
        module.zero_grad(set_to_none=True)
        t, c = time.perf_counter(), time.process_time()
        out = module(g, inp)
        out.backward(grad if grad is not None else torch.ones_like(out))
        return time.perf_counter() - t, time.process_time() - c, out.detach()

    results: dict[str, dict[str, float]] = {}
    for kind in kinds:
        ours, theirs = layer_pair(kind, args.in_dim, args.out_dim, args.heads)
        ref = step(theirs, graph, None)[2]  # warm-up both; also checks they agree
        got = step(ours, block, None)[2]
        grad = torch.randn_like(ref)
        wall: dict[str, list[float]] = {"ours": [], "dgl": []}
        cpu: dict[str, list[float]] = {"ours": [], "dgl": []}
        for r in range(args.repeats):
            pair = (("ours", ours, block), ("dgl", theirs, graph))
            for name, module, g in (pair if r % 2 == 0 else pair[::-1]):
                w, c, _ = step(module, g, grad)
                wall[name].append(w)
                cpu[name].append(c)
        mo, md = statistics.median(wall["ours"]), statistics.median(wall["dgl"])
        results[kind] = {
            "ours_ms": 1000 * mo,
            "dgl_ms": 1000 * md,
            "ratio": mo / md,
            "cpu_ratio": statistics.median(cpu["ours"]) / statistics.median(cpu["dgl"]),
            "max_abs_diff": float((got - ref).abs().max()),
        }
    worst = max(results, key=lambda k: results[k]["ratio"])
    ratio = results[worst]["ratio"]
    parts = ", ".join(f"{k} {v['ratio']:.2f} ({v['ours_ms']:.0f}/{v['dgl_ms']:.0f} ms; cpu {v['cpu_ratio']:.2f})"
                      for k, v in results.items())
    return {
        "ratio": ratio,
        "ratio_name": "max over layers of ours/DGL forward+backward time (lower is better)",
        "summary": (
            f"layers: max ratio {ratio:.2f} ({worst}); per layer ours/DGL: {parts}; block {block.num_dst} dst, "
            f"{block.num_src} src, {block.num_edges} edges from {desc}; dims {args.in_dim}->{args.out_dim}, "
            f"{threads} threads"
        ),
        "graph": desc,
        "layers": results,
        "block": {"num_dst": block.num_dst, "num_src": block.num_src, "num_edges": block.num_edges},
        "in_dim": args.in_dim,
        "out_dim": args.out_dim,
        "heads": args.heads,
        "torch_threads": threads,
    }
