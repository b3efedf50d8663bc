"""``gnnflow bench layers``: forward+backward time of our layers vs DGL's and PyG's on the same block.

One mini-batch is sampled with our sampler (1024 targets, fanouts 15,10,5)
from a graph of at least 1M vertices (generated in-process by default); the
benchmark block is its input layer (``blocks[0]``, the largest).  For each
layer (SAGE mean, GCN symmetric, GCN row-normalised, GAT multi-head) our
module, DGL 1.1.3's and PyG 2.8's (:mod:`gnnflow.bench.pyg_peer`, in both of
PyG's graph forms, ``edge_index`` and ``adj_t``), all holding our weights, run
forward and backward on the same input (which requires grad, as a hidden
layer's does).  Before anything is timed, every peer's output is checked equal
to ours (max abs difference <= 1e-4 x the output's scale; the run stops
otherwise).  The systems then alternate, in a rotating order, ``--repeats``
times; each ratio is our median time over the peer's (< 1 means faster), PyG's
being its faster form.  Each side keeps its per-block derived structures
between repeats (DGL its sparse formats, we the transposed CSR, PyG its
``edge_index`` / ``adj_t`` and GCN edge weights), as within one training
iteration.  The headline ratio is the largest over layers and peers.

``--device cuda`` runs ours and PyG on the GPU (synchronised timing); DGL
1.1.3's wheel has no CUDA kernels, so its rows are left out there, as they are
wherever DGL does not import (:func:`dgl_rows_note`; the result says why in
``notes``): our layers then keep their own initial weights, PyG takes them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
import torch

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.bench.sampler import add_graph_arguments, bench_graph, parse_fanouts, set_threads
from gnnflow.errors import GnnflowError

LAYERS = ("sage", "gcn-both", "gcn-right", "gat")
#: equal outputs: max abs difference <= this x max(1, largest |output|)
TOLERANCE = 1e-4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_graph_arguments(parser)
    parser.add_argument("--fanouts", default="15,10,5", help="fanouts of the sampled batch (input layer first)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--in-dim", type=int, default=128)
    parser.add_argument("--out-dim", type=int, default=128, help="output features (GAT: per head x heads)")
    parser.add_argument("--heads", type=int, default=4, help="GAT heads (out-dim is split among them)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per layer (median)")
    parser.add_argument("--layers", default=",".join(LAYERS), help=f"subset of {','.join(LAYERS)}")
    add_peer_arguments(parser)


def add_peer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--no-pyg`` (shared with ``bench fullbatch``)."""
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where ours and PyG run (cuda: DGL 1.1.3 has no CUDA kernels, its rows are left out)")
    parser.add_argument("--no-pyg", action="store_true", help="leave PyG (the peers extra) out")


def dgl_rows_note(device: torch.device) -> str | None:
    """Why DGL's rows are left out on ``device`` (None: they run).  DGL is imported here only,
    so a machine without it (or a GPU machine without its CPU wheel) still runs the other rows."""
    if device.type != "cpu":
        return "DGL rows left out: DGL 1.1.3's wheel has no CUDA kernels"
    try:
        os.environ.setdefault("DGLBACKEND", "pytorch")
        import dgl  # noqa: F401
    except ImportError as exc:
        return f"DGL rows left out: DGL does not import here ({exc})"
    return None


def bench_device(name: str) -> torch.device:
    from gnnflow.runtime.devices import available_device

    return available_device(name)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def our_layer(kind: str, in_dim: int, out_dim: int, heads: int) -> torch.nn.Module:
    """Our module of one layer kind."""
    from gnnflow.nn import GATConv, GCNConv, SAGEConv

    if kind == "sage":
        return SAGEConv(in_dim, out_dim)
    if kind in ("gcn-both", "gcn-right"):
        return GCNConv(in_dim, out_dim, norm=kind.split("-")[1])
    if kind == "gat":
        return GATConv(in_dim, max(1, out_dim // heads), heads)
    raise ValueError(f"unknown layer {kind!r}; choose from {', '.join(LAYERS)}")


def layer_pair(kind: str, in_dim: int, out_dim: int, heads: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(ours, dgl)`` modules of one layer kind with identical weights (DGL's initialisation)."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl.nn.pytorch as dglnn

    ours = our_layer(kind, in_dim, out_dim, heads)
    if kind == "sage":
        theirs = dglnn.SAGEConv(in_dim, out_dim, "mean")
    elif kind in ("gcn-both", "gcn-right"):
        theirs = dglnn.GraphConv(in_dim, out_dim, norm=kind.split("-")[1], allow_zero_in_degree=True)
    else:
        theirs = dglnn.GATConv(in_dim, max(1, out_dim // heads), num_heads=heads, allow_zero_in_degree=True)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def check_equal(name: str, got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs difference of ``got`` from our ``ref``; a one-line error when beyond :data:`TOLERANCE`."""
    diff = float((got.reshape(ref.shape) - ref).abs().max())
    scale = max(1.0, float(ref.abs().max()))
    if not diff <= TOLERANCE * scale:
        raise GnnflowError(f"{name}: output differs from ours by {diff:.3g} (tolerance {TOLERANCE * scale:.3g}); "
                           "not timing a different computation")
    return diff


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.bench import pyg_peer
    from gnnflow.sampling import NeighborSampler

    kinds = [k.strip() for k in args.layers.split(",") if k.strip()]
    device = bench_device(args.device)
    dgl_note = dgl_rows_note(device)
    use_dgl, use_pyg = dgl_note is None, not args.no_pyg
    if not (use_dgl or use_pyg):
        raise GnnflowError(f"bench layers: no peer to compare with ({dgl_note}; --no-pyg)")
    if use_pyg:
        pyg_peer.require_pyg()
    threads = set_threads(args.threads)
    indptr, indices, desc = bench_graph(args)
    num_nodes = indptr.shape[0] - 1
    sampler = NeighborSampler(indptr, indices, parse_fanouts(args.fanouts), seed=args.seed)
    rng = np.random.default_rng(args.seed + 1)
    targets = torch.from_numpy(rng.choice(num_nodes, args.batch_size, replace=False))
    block = sampler.sample_blocks(targets)[0]
    graph = None
    if use_dgl:
        import dgl

        graph = dgl.create_block((block.indices, block.edge_dst()), num_src_nodes=block.num_src,
                                 num_dst_nodes=block.num_dst)
    torch.manual_seed(args.seed)
    x = torch.randn(block.num_src, args.in_dim, device=device)
    ours_block = block.to(device)

    def step(module: torch.nn.Module, g: Any, grad: torch.Tensor | None) -> tuple[float, float, torch.Tensor]:
        inp = x.clone().requires_grad_()
        module.zero_grad(set_to_none=True)
        synchronize(device)
        t, c = time.perf_counter(), time.process_time()
        out = module(g, inp)
        out.backward(grad.reshape(out.shape) if grad is not None else torch.ones_like(out))
        synchronize(device)
        return time.perf_counter() - t, time.process_time() - c, out.detach()

    results: dict[str, dict[str, Any]] = {}
    ratios = []
    for kind in kinds:
        if use_dgl:
            ours, theirs = layer_pair(kind, args.in_dim, args.out_dim, args.heads)
        else:
            ours, theirs = our_layer(kind, args.in_dim, args.out_dim, args.heads), None
        ours = ours.to(device)
        got = step(ours, ours_block, None)[2]  # warm-up every side; check each against ours
        systems: dict[str, tuple[torch.nn.Module, Any]] = {"ours": (ours, ours_block)}
        diffs: dict[str, float] = {}
        if use_dgl:
            systems["dgl"] = (theirs, graph)
            diffs["dgl"] = check_equal(f"{kind}: DGL", step(theirs, graph, None)[2], got)
        if use_pyg:
            pg = pyg_peer.graph_for(kind, block.indptr, block.indices, block.num_src).to(device)
            for form in pyg_peer.FORMS:
                layer = pyg_peer.from_ours(kind, ours, form).to(device)
                systems[f"pyg_{form}"] = (layer, pg)
                diffs[f"pyg_{form}"] = check_equal(f"{kind}: PyG ({form})", step(layer, pg, None)[2], got)
        grad = torch.randn_like(got)
        wall: dict[str, list[float]] = {name: [] for name in systems}
        cpu: dict[str, list[float]] = {name: [] for name in systems}
        names = list(systems)
        for r in range(args.repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                module, g = systems[name]
                w, c, _ = step(module, g, grad)
                wall[name].append(w)
                cpu[name].append(c)
        med = {name: statistics.median(v) for name, v in wall.items()}
        row: dict[str, Any] = {f"{name}_ms": 1000 * m for name, m in med.items()}
        row["cpu_s"] = {name: statistics.median(v) for name, v in cpu.items()}
        row["max_abs_diff"] = diffs

        def op(name: str, what: str, kind: str = kind, med: dict[str, float] = med) -> dict[str, Any]:
            return operand(med[name], "s", f"{what} {kind} forward+backward on the block, median of "
                           f"{args.repeats} ({device.type})")

        ours_op = op("ours", "gnnflow.nn")
        if use_dgl:
            ratios.append(ratio(f"{kind}: ours / DGL", ours_op, op("dgl", "DGL 1.1.3"), "<= 1.0"))
            row["ratio"] = ratios[-1]["value"]
            row["cpu_ratio"] = row["cpu_s"]["ours"] / row["cpu_s"]["dgl"]
        if use_pyg:
            best = min(pyg_peer.FORMS, key=lambda f: med[f"pyg_{f}"])
            ratios.append(ratio(f"{kind}: ours / PyG", ours_op,
                                op(f"pyg_{best}", f"PyG {pyg_peer.version()} ({best}, its faster form here)"),
                                "<= 1.0"))
            row["pyg_ratio"], row["pyg_form"] = ratios[-1]["value"], best
        results[kind] = row
    worst = max(range(len(ratios)), key=lambda i: ratios[i]["value"])
    parts = []
    for k, v in results.items():
        peers = ([f"DGL {v['ratio']:.2f}"] if use_dgl else []) + ([f"PyG {v['pyg_ratio']:.2f}"] if use_pyg else [])
        ms = "/".join(f"{v[n + '_ms']:.0f}" for n in ("ours", "dgl", "pyg_edge_index", "pyg_adj_t") if n + "_ms" in v)
        parts.append(f"{k} {', '.join(peers)} ({ms} ms)")
    max_diff = max((d for v in results.values() for d in v["max_abs_diff"].values()), default=0.0)
    notes = [dgl_note] if dgl_note else []
    result = {
        "summary": (
            f"layers: max ratio {ratios[worst]['value']:.2f} ({ratios[worst]['name']}); ours/peer per layer: "
            f"{'; '.join(parts)} [ms: ours/DGL/PyG edge_index/PyG adj_t]; peers' outputs equal ours (max abs "
            f"diff {max_diff:.1e}); block {block.num_dst} "
            f"dst, {block.num_src} src, {block.num_edges} edges from {desc}; dims {args.in_dim}->{args.out_dim}, "
            f"{threads} threads, {device.type}" + "".join(f"; {n}" for n in notes)
        ),
        "notes": notes,
        "graph": desc,
        "layers": results,
        "block": {"num_dst": block.num_dst, "num_src": block.num_src, "num_edges": block.num_edges},
        "in_dim": args.in_dim,
        "out_dim": args.out_dim,
        "heads": args.heads,
        "torch_threads": threads,
        "device": device.type,
        "peers": {"dgl": use_dgl, "pyg": pyg_peer.version() if use_pyg else None},
    }
    return headline(result, ratios, worst)
