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

The relational layers (RGCN, R-GAT; :mod:`gnnflow.bench.rel_peers` for the peers'
forms) run on a typed block instead: the input layer of a batch of
``--batch-size`` papers sampled per relation (the fanouts apply to each
relation) from a synthetic-hetero graph generated in-process
(``--hetero-papers``, by default 437k edges of 8 relations, the block about 330k
edges).

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

LAYERS = ("sage", "gcn-both", "gcn-right", "gat", "rgcn", "rgat")
#: the relational layers: they run on a typed block (a synthetic-hetero graph, typed sampling)
RELATIONAL = ("rgcn", "rgat")
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
    parser.add_argument("--hetero-papers", type=int, default=20_000,
                        help="rgcn/rgat: papers of the generated synthetic-hetero graph (20000: 53k vertices, "
                             "437k edges of 8 relations); the fanouts apply per relation")
    parser.add_argument("--num-bases", type=int, default=0, help="rgcn: basis matrices (0: a weight per relation)")
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


def _homogeneous(args: argparse.Namespace) -> tuple[Any, str]:
    """The benchmark block of the homogeneous layers: the input layer of a sampled batch."""
    from gnnflow.sampling import NeighborSampler

    indptr, indices, desc = bench_graph(args)
    sampler = NeighborSampler(indptr, indices, parse_fanouts(args.fanouts), seed=args.seed)
    targets = np.random.default_rng(args.seed + 1).choice(indptr.shape[0] - 1, args.batch_size, replace=False)
    return sampler.sample_blocks(torch.from_numpy(targets))[0], desc


def _systems(kind: str, block: Any, rel_types: list[tuple[int, int]] | None, args: argparse.Namespace,
             device: torch.device, use_dgl: bool, use_pyg: bool) -> dict[str, tuple[torch.nn.Module, Any]]:
    """``{"ours", "dgl", "pyg_<form>": (module, graph)}`` for one layer kind, all holding our weights."""
    from gnnflow.bench import pyg_peer, rel_peers

    if rel_types is None and use_dgl:
        ours, theirs = layer_pair(kind, args.in_dim, args.out_dim, args.heads)
    elif rel_types is None:  # no DGL: our layer keeps its own initial weights, PyG takes them
        ours, theirs = our_layer(kind, args.in_dim, args.out_dim, args.heads), None
    else:
        ours, theirs = rel_peers.layer(kind, args.in_dim, args.out_dim, args.heads, args.num_bases, rel_types), None
    systems: dict[str, tuple[torch.nn.Module, Any]] = {"ours": (ours.to(device), block.to(device))}
    if use_dgl:
        if rel_types is None:
            import dgl

            graph = dgl.create_block((block.indices, block.edge_dst()), num_src_nodes=block.num_src,
                                     num_dst_nodes=block.num_dst)
            systems["dgl"] = (theirs, graph)
        else:
            systems["dgl"] = (rel_peers.dgl_from_ours(kind, ours, rel_types),
                              rel_peers.dgl_graph(kind, block, len(rel_types), rel_types))
    if use_pyg:
        if rel_types is None:
            pg = pyg_peer.graph_for(kind, block.indptr, block.indices, block.num_src).to(device)
            for form in pyg_peer.FORMS:
                systems[f"pyg_{form}"] = (pyg_peer.from_ours(kind, ours, form).to(device), pg)
        else:
            pg = rel_peers.to_device(rel_peers.pyg_graph(kind, block, len(rel_types), rel_types), device)
            for form in rel_peers.pyg_forms(kind, block.num_edges, args.in_dim, args.out_dim)[0]:
                systems[f"pyg_{form}"] = (rel_peers.pyg_from_ours(kind, ours, form, rel_types).to(device), pg)
    return systems


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.bench import pyg_peer, rel_peers

    kinds = [k.strip() for k in args.layers.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(LAYERS))
    if unknown:
        raise GnnflowError(f"--layers: unknown {', '.join(unknown)}; choose from {', '.join(LAYERS)}")
    device = bench_device(args.device)
    dgl_note = dgl_rows_note(device)
    use_dgl, use_pyg = dgl_note is None, not args.no_pyg
    if not (use_dgl or use_pyg):
        raise GnnflowError(f"bench layers: no peer to compare with ({dgl_note}; --no-pyg)")
    if use_pyg:
        pyg_peer.require_pyg()
    threads = set_threads(args.threads)
    # (block, relation types or None, description) of each family of layers asked for
    blocks: dict[str, tuple[Any, list[tuple[int, int]] | None, str]] = {}
    if set(kinds) - set(RELATIONAL):
        block, desc = _homogeneous(args)
        blocks["homogeneous"] = (block, None, desc)
    if set(kinds) & set(RELATIONAL):
        blocks["typed"] = rel_peers.bench_block(args.hetero_papers, args.fanouts, args.batch_size, args.seed)

    def step(module: torch.nn.Module, g: Any, x: torch.Tensor,
             grad: torch.Tensor | None) -> tuple[float, float, torch.Tensor]:
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
        block, rel_types, _ = blocks["typed" if kind in RELATIONAL else "homogeneous"]
        torch.manual_seed(args.seed)
        x = torch.randn(block.num_src, args.in_dim, device=device)
        systems = _systems(kind, block, rel_types, args, device, use_dgl, use_pyg)
        got = step(*systems["ours"], x, None)[2]  # warm-up every side; check each against ours
        diffs = {name: check_equal(f"{kind}: " + ("DGL" if name == "dgl" else f"PyG ({name.removeprefix('pyg_')})"),
                                   step(*systems[name], x, None)[2], got)
                 for name in systems if name != "ours"}
        grad = torch.randn_like(got)
        wall: dict[str, list[float]] = {name: [] for name in systems}
        cpu: dict[str, list[float]] = {name: [] for name in systems}
        names = list(systems)
        for r in range(args.repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                w, c, _ = step(*systems[name], x, grad)
                wall[name].append(w)
                cpu[name].append(c)
        med = {name: statistics.median(v) for name, v in wall.items()}
        row: dict[str, Any] = {f"{name}_ms": 1000 * m for name, m in med.items()}
        row["cpu_s"] = {name: statistics.median(v) for name, v in cpu.items()}
        row["max_abs_diff"] = diffs
        if use_pyg and kind in RELATIONAL:
            row["pyg_left_out"] = rel_peers.pyg_forms(kind, block.num_edges, args.in_dim, args.out_dim)[1]

        def op(name: str, what: str, kind: str = kind, med: dict[str, float] = med) -> dict[str, Any]:
            return operand(med[name], "s", f"{what} {kind} forward+backward on the block, median of "
                           f"{args.repeats} ({device.type})")

        ours_op = op("ours", "gnnflow.nn")
        if use_dgl:
            ratios.append(ratio(f"{kind}: ours / DGL", ours_op, op("dgl", "DGL 1.1.3"), "<= 1.0"))
            row["ratio"] = ratios[-1]["value"]
            row["cpu_ratio"] = row["cpu_s"]["ours"] / row["cpu_s"]["dgl"]
        if use_pyg:
            forms = [n.removeprefix("pyg_") for n in systems if n.startswith("pyg_")]
            best = min(forms, key=lambda f: med[f"pyg_{f}"])
            ratios.append(ratio(f"{kind}: ours / PyG", ours_op,
                                op(f"pyg_{best}", f"PyG {pyg_peer.version()} ({best}, its faster form here)"),
                                "<= 1.0"))
            row["pyg_ratio"], row["pyg_form"] = ratios[-1]["value"], best
        results[kind] = row
    worst = max(range(len(ratios)), key=lambda i: ratios[i]["value"])
    parts = []
    for k, v in results.items():
        peers = ([f"DGL {v['ratio']:.2f}"] if use_dgl else []) + ([f"PyG {v['pyg_ratio']:.2f}"] if use_pyg else [])
        ms = "/".join(f"{v[n]:.0f}" for n in v if n.endswith("_ms"))
        parts.append(f"{k} {', '.join(peers)} ({ms} ms)")
    max_diff = max((d for v in results.values() for d in v["max_abs_diff"].values()), default=0.0)
    notes = [dgl_note] if dgl_note else []
    described = "; ".join(f"{'typed ' if rel_types else ''}block {b.num_dst} dst, {b.num_src} src, {b.num_edges} "
                          f"edges from {desc}" for b, rel_types, desc in blocks.values())
    result = {
        "summary": (
            f"layers: max ratio {ratios[worst]['value']:.2f} ({ratios[worst]['name']}); ours/peer per layer: "
            f"{'; '.join(parts)} [ms: ours/DGL/PyG forms]; peers' outputs equal ours (max abs "
            f"diff {max_diff:.1e}); {described}; dims {args.in_dim}->{args.out_dim}, "
            f"{threads} threads, {device.type}" + "".join(f"; {n}" for n in notes)
        ),
        "notes": notes,
        "graph": "; ".join(desc for _, _, desc in blocks.values()),
        "layers": results,
        **{("block" if name == "homogeneous" else "typed_block"): {
            "num_dst": b.num_dst, "num_src": b.num_src, "num_edges": b.num_edges,
            **({"num_rels": len(rel_types)} if rel_types else {})} for name, (b, rel_types, _) in blocks.items()},
        "in_dim": args.in_dim,
        "out_dim": args.out_dim,
        "heads": args.heads,
        "num_bases": args.num_bases,
        "torch_threads": threads,
        "device": device.type,
        "peers": {"dgl": use_dgl, "pyg": pyg_peer.version() if use_pyg else None},
    }
    return headline(result, ratios, worst)
