"""``gnnflow bench fullbatch``: full-batch GCN (MG-GCN §6.3, §6.4, §6.6) on this machine.

Three measurements, each side by side in one run:

1. **single process** (§6.6): epoch time of our full-batch GCN (buffer reuse,
   op-order choice, saved first-layer backward SpMM) vs DGL 1.1.3
   ``GraphConv`` and PyG 2.8 ``GCNConv`` (both of PyG's graph forms, the
   faster one counts; :mod:`gnnflow.bench.pyg_peer`) full-graph training on the
   same graph, model sizes, normalisation (self-loops + ``norm``), optimizer
   (Adam) and dropout.  The peers start from our weights and their logits are
   checked equal to ours before anything is timed.  All alternate epoch by
   epoch in a rotating order; medians are compared.  Headline ratio:
   ours/DGL, then ours/PyG (goal <= 0.8 each).  ``--device cuda`` runs ours
   and PyG on the GPU (DGL 1.1.3 has no CUDA kernels).
2. **P ranks** (§6.3, §6.4): epoch time (max over ranks, median over epochs)
   with overlap on/off × permutation on/off, plus the per-round comm/compute
   split and the tile-nnz balance (Fig. 7).  The graph is relabelled by
   descending degree first (as real datasets are often ordered), so the
   natural row blocks are skewed; the synthetic generator's own ids are random.
3. **memory** (§4.2, ``--memory``): per-rank peak resident memory during one
   training epoch with buffer reuse vs plain autograd (L=3, hidden 256 by
   default).  Method: the kernel's peak-RSS counter (VmHWM) is reset through
   ``/proc/self/clear_refs`` right before the epoch and read after it; the
   epoch's extra memory is that peak minus the resident size before the epoch
   (model, graph tiles, features and the Python/torch runtime are in both).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.bench.layers import add_peer_arguments
from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.config import TrainConfig
from gnnflow.errors import GnnflowError
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", help="graph store (default: generate a synthetic one into --work)")
    parser.add_argument("--work", help="directory for generated graphs (default: a temporary directory)")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--avg-degree", type=float, default=12.0)
    parser.add_argument("--feature-dim", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--norm", default="both", choices=["both", "right"])
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs per repeat (after one warm-up)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="ranks for the P-rank section")
    parser.add_argument("--skip-single", action="store_true")
    parser.add_argument("--skip-ranks", action="store_true")
    parser.add_argument("--memory", action="store_true", help="also measure reuse vs autograd peak memory")
    parser.add_argument("--memory-nodes", type=int, default=100_000)
    parser.add_argument("--memory-layers", type=int, default=3)
    parser.add_argument("--memory-feature-dim", type=int, default=32)
    parser.add_argument("--cache-input-spmm", action="store_true",
                        help="ours also keeps ÂX across epochs (exact; DGL recomputes it)")
    parser.add_argument("--timeline-out", help="write the per-round records of the P-rank runs here (JSON)")
    parser.add_argument("--timeline-plot", help="draw the last epoch's SpMM rounds per rank (Fig. 6/8) to this PNG")
    add_peer_arguments(parser)


# ----------------------------------------------------------------------------------------------
# graphs
# ----------------------------------------------------------------------------------------------


def synthetic_graph(work: Path, nodes: int, avg_degree: float, feature_dim: int, classes: int, seed: int = 0) -> str:
    from gnnflow.data.store import open_store
    from gnnflow.data.synthetic import prepare_synthetic

    out = work / f"synthetic-n{nodes}-d{avg_degree:g}-f{feature_dim}-c{classes}-s{seed}"
    if (out / "meta.json").exists():
        return str(open_store(out).path)
    return str(prepare_synthetic(out, num_nodes=nodes, avg_degree=avg_degree, feature_dim=feature_dim,
                                 num_classes=classes, seed=seed).path)


def degree_ordered_copy(graph: str, out: Path) -> str:
    """The same graph with vertices relabelled by descending in-degree (a skewed natural order)."""
    from gnnflow.data.csr import build_csr, csr_to_coo
    from gnnflow.data.store import open_store, write_store

    if (out / "meta.json").exists():
        return str(out)
    s = open_store(graph)
    order = np.argsort(-np.diff(np.asarray(s.indptr)), kind="stable")  # new id -> old id
    new_of_old = np.empty_like(order)
    new_of_old[order] = np.arange(order.shape[0])
    src, dst = csr_to_coo(np.asarray(s.indptr), np.asarray(s.indices))
    indptr, indices = build_csr(new_of_old[src], new_of_old[dst], s.num_nodes, symmetrize=False)
    write_store(out, name=f"{s.name}-degree-ordered", source="bench-relabel",
                indptr=indptr, indices=indices, features=np.asarray(s.features)[order],
                labels=np.asarray(s.labels)[order], train_idx=np.sort(new_of_old[s.train_idx]),
                val_idx=np.sort(new_of_old[s.val_idx]), test_idx=np.sort(new_of_old[s.test_idx]),
                num_classes=s.num_classes, directed=s.meta.directed)
    return str(out)


# ----------------------------------------------------------------------------------------------
# single process: ours vs DGL GraphConv
# ----------------------------------------------------------------------------------------------


def _cfg(graph: str, args: argparse.Namespace, workers: int = 1, **options: Any) -> TrainConfig:
    layers = options.pop("layers", args.layers)
    return TrainConfig(graph=graph, strategy="fullbatch", model="gcn", hidden=options.pop("hidden", args.hidden),
                       num_layers=layers, fanouts=[-1] * layers, dropout=args.dropout, lr=0.01, seed=0,
                       workers=workers, options={"norm": args.norm, **options})


class FullGraphPeer:
    """A peer library's GCN stack trained full-graph on the store (MG-GCN §6.6's comparison):
    self-loops added, ``norm``, Adam (lr 0.01), dropout between layers, cross-entropy on the
    training vertices; its weights copied from our model."""

    def __init__(self, graph: str, args: argparse.Namespace, ours: torch.nn.Module, device: torch.device) -> None:
        from gnnflow.data.store import open_store

        s = open_store(graph)
        self.device = device
        self.x = torch.from_numpy(np.array(s.features, dtype=np.float32)).to(device)
        self.y = torch.from_numpy(np.array(s.labels, dtype=np.int64)).to(device)
        self.train = torch.from_numpy(np.array(s.train_idx, dtype=np.int64)).to(device)
        self.layers = torch.nn.ModuleList(self.make_layer(layer, args.norm) for layer in ours.layers).to(device)
        self.dropout = torch.nn.Dropout(args.dropout)
        self.opt = torch.optim.Adam(self.layers.parameters(), lr=0.01)

    def make_layer(self, ours: torch.nn.Module, norm: str) -> torch.nn.Module:
        raise NotImplementedError

    def layer(self, i: int, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self) -> torch.Tensor:
        h = self.x
        for i in range(len(self.layers)):
            h = self.layer(i, h)
            if i < len(self.layers) - 1:
                h = self.dropout(torch.relu(h))
        return h

    @torch.no_grad()
    def logits(self) -> torch.Tensor:
        self.layers.eval()
        self.dropout.eval()
        return self.forward()

    def epoch(self) -> float:
        self.layers.train()
        self.dropout.train()
        self.opt.zero_grad()
        h = self.forward()
        loss = torch.nn.functional.cross_entropy(h[self.train], self.y[self.train])
        loss.backward()
        self.opt.step()
        return loss.item()


class DGLFullGraphGCN(FullGraphPeer):
    """DGL 1.1.3 ``GraphConv`` stack (CPU: DGL's wheel has no CUDA kernels)."""

    def __init__(self, graph: str, args: argparse.Namespace, ours: torch.nn.Module, device: torch.device) -> None:
        import dgl

        from gnnflow.data.store import open_store

        s = open_store(graph)
        src = torch.from_numpy(np.array(s.indices, dtype=np.int64))
        dst = torch.repeat_interleave(torch.arange(s.num_nodes), torch.from_numpy(np.diff(np.asarray(s.indptr))))
        g = dgl.add_self_loop(dgl.graph((src, dst), num_nodes=s.num_nodes))
        self.g = g.formats(["csc", "csr"])  # both directions built once, as a tuned DGL user would
        super().__init__(graph, args, ours, device)

    def make_layer(self, ours: torch.nn.Module, norm: str) -> torch.nn.Module:
        from dgl.nn import GraphConv

        layer = GraphConv(ours.in_dim, ours.out_dim, norm=norm)
        layer.load_state_dict(ours.state_dict())
        return layer

    def layer(self, i: int, h: torch.Tensor) -> torch.Tensor:
        return self.layers[i](self.g, h)


class PyGFullGraphGCN(FullGraphPeer):
    """PyG 2.8 ``GCNConv`` stack in one of PyG's graph forms (:mod:`gnnflow.bench.pyg_peer`)."""

    def __init__(self, graph: str, args: argparse.Namespace, ours: torch.nn.Module, device: torch.device,
                 form: str) -> None:
        from gnnflow.bench import pyg_peer
        from gnnflow.data.store import open_store

        s = open_store(graph)
        n = s.num_nodes
        indptr = torch.from_numpy(np.array(s.indptr, dtype=np.int64))
        dst = torch.repeat_interleave(torch.arange(n), indptr[1:] - indptr[:-1])
        # A + I, destination-major
        dst = torch.cat([dst, torch.arange(n)])
        src = torch.cat([torch.from_numpy(np.array(s.indices, dtype=np.int64)), torch.arange(n)])
        order = torch.argsort(dst, stable=True)
        loops_indptr = torch.zeros(n + 1, dtype=torch.int64)
        loops_indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
        self.form = form
        self.pg = pyg_peer.graph_for(f"gcn-{args.norm}", loops_indptr, src[order], n).to(device)
        super().__init__(graph, args, ours, device)

    def make_layer(self, ours: torch.nn.Module, norm: str) -> torch.nn.Module:
        from gnnflow.bench import pyg_peer

        return pyg_peer.from_ours(f"gcn-{norm}", ours, self.form)

    def layer(self, i: int, h: torch.Tensor) -> torch.Tensor:
        return self.layers[i](self.pg, h)


def single_process(graph: str, args: argparse.Namespace) -> dict[str, Any]:
    """Ours, DGL's and PyG's (both forms) full-graph GCN epochs, alternating; outputs checked first."""
    from gnnflow.bench import pyg_peer
    from gnnflow.bench.layers import bench_device, check_equal, dgl_rows_note, synchronize
    from gnnflow.strategies.fullbatch.row1d import FullBatch

    device = bench_device(args.device)
    dgl_note = dgl_rows_note(device)
    ours = FullBatch(_cfg(graph, args, cache_input_spmm=args.cache_input_spmm), RankContext(device=device))
    ours.prepare()
    assert ours.model is not None
    ours.model.eval()
    with torch.no_grad():
        ref = ours.forward_local(False).clone()
    runners = {"ours": lambda: ours.run_epoch(0, Recorder())}
    diffs: dict[str, float] = {}
    peers: list[tuple[str, FullGraphPeer]] = []
    if dgl_note is None:
        peers.append(("dgl", DGLFullGraphGCN(graph, args, ours.model, device)))
    if not args.no_pyg:
        pyg_peer.require_pyg()
        peers += [(f"pyg_{form}", PyGFullGraphGCN(graph, args, ours.model, device, form))
                  for form in pyg_peer.FORMS]
    for name, peer in peers:
        diffs[name] = check_equal(f"full-graph GCN: {name}", peer.logits(), ref)
        runners[name] = peer.epoch
    times: dict[str, list[float]] = {name: [] for name in runners}
    losses: dict[str, float] = {}
    names = list(runners)
    for r in range(args.repeats):
        for fn in runners.values():
            fn()  # warm-up
        for e in range(args.epochs):
            k = (r * args.epochs + e) % len(names)
            for name in names[k:] + names[:k]:  # alternate epoch by epoch, rotating the order
                synchronize(device)
                t = time.perf_counter()
                losses[name] = runners[name]()
                synchronize(device)
                times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, Any] = {"ours_epoch_s": med["ours"], "epoch_all_s": times, "last_loss": losses,
                           "max_abs_diff": diffs, "device": device.type, "notes": [dgl_note] if dgl_note else [],
                           "order_spmm_first": [ours.spmm_first(i) for i in range(args.layers)]}
    if "dgl" in med:
        out["dgl_epoch_s"] = med["dgl"]
    if not args.no_pyg:
        best = min(pyg_peer.FORMS, key=lambda f: med[f"pyg_{f}"])
        out.update(pyg_epoch_s=med[f"pyg_{best}"], pyg_form=best, pyg_version=pyg_peer.version(),
                   **{f"pyg_{f}_epoch_s": med[f"pyg_{f}"] for f in pyg_peer.FORMS})
    return out


# ----------------------------------------------------------------------------------------------
# P ranks: overlap and permutation
# ----------------------------------------------------------------------------------------------


def _bench_rank(ctx: RankContext, cfg_dict: dict[str, Any], epochs: int) -> dict[str, Any]:
    from gnnflow.strategies.fullbatch.row1d import FullBatch

    s = FullBatch(TrainConfig.from_dict(cfg_dict), ctx)
    s.prepare()
    s.run_epoch(0, Recorder())  # warm-up
    out: dict[str, Any] = {"epoch_s": [], "comm_s": [], "compute_s": []}
    for e in range(epochs):
        rec = Recorder()
        t = time.perf_counter()
        s.run_epoch(e + 1, rec)
        out["epoch_s"].append(time.perf_counter() - t)
        out["comm_s"].append(rec.extra["spmm_comm_s"])
        out["compute_s"].append(rec.extra["spmm_compute_s"])
    out["timeline"] = s.timeline()
    out["balance"] = s.balance
    out["tile_nnz"] = s.tile_nnz.tolist()
    return out


def ranks_section(graph: str, args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.runtime.launch import run_ranks

    res: dict[str, Any] = {}
    for permute in (True, False):
        for overlap in (True, False):
            key = f"{'perm' if permute else 'natural'}_{'overlap' if overlap else 'sequential'}"
            cfg = _cfg(graph, args, workers=args.workers, permute=permute, overlap=overlap)
            out = run_ranks(_bench_rank, args.workers, cfg.to_dict(), args.epochs, timeout_s=600,
                            threads_per_rank=max(1, (os.cpu_count() or 1) // args.workers))
            epoch = [max(r["epoch_s"][e] for r in out) for e in range(args.epochs)]
            res[key] = {"epoch_s": statistics.median(epoch),
                        "comm_s_per_rank": [statistics.median(r["comm_s"]) for r in out],
                        "compute_s_per_rank": [statistics.median(r["compute_s"]) for r in out],
                        "balance": out[0]["balance"], "tile_nnz": out[0]["tile_nnz"],
                        "timeline": [row for r in out for row in r["timeline"]]}
    return res


def plot_timeline(timelines: dict[str, list[dict[str, Any]]], path: str) -> None:
    """MG-GCN Fig. 6/8 style: per configuration and rank, the forward SpMM rounds of the last
    epoch's first SpMM call as communication (yellow) and computation (blue) bars, labelled by round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(timelines), 1, figsize=(9, 1.6 * len(timelines) + 0.6), squeeze=False)
    for ax, (name, rows) in zip(axes[:, 0], timelines.items(), strict=True):
        first = [dict(r) for r in rows if r["op"] == "forward" and r["call"] == min(x["call"] for x in rows)]
        for r in first:  # to one clock (the ranks' epoch starts differ)
            for k in ("comm_start", "comm_end", "compute_start", "compute_end"):
                r[k] += r.get("t0", 0.0)
        t0 = min(min(r["comm_start"], r["compute_start"]) for r in first)
        ranks = sorted({r["rank"] for r in first})
        for r in first:
            y = ranks.index(r["rank"])
            ax.barh(y + 0.2, r["comm_end"] - r["comm_start"], left=r["comm_start"] - t0, height=0.35,
                    color="#f2c14e", edgecolor="black")
            ax.barh(y - 0.2, r["compute_end"] - r["compute_start"], left=r["compute_start"] - t0, height=0.35,
                    color="#4e79a7", edgecolor="black")
            ax.text(r["compute_start"] - t0, y - 0.2, str(r["round"]), va="center", fontsize=7, color="white")
        ax.set_yticks(range(len(ranks)), [f"rank {k}" for k in ranks])
        ax.set_title(name, fontsize=9)
    axes[-1, 0].set_xlabel("seconds (yellow: broadcast, blue: SpMM)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# memory: buffer reuse vs plain autograd
# ----------------------------------------------------------------------------------------------


def _rss_kib(field: str) -> int:
    from gnnflow.io import proc_memory

    value = proc_memory(field) // 1024
    if not value:
        raise OSError(f"/proc/self/status has no {field}")
    return value


def _memory_rank(ctx: RankContext, cfg_dict: dict[str, Any]) -> dict[str, Any]:
    from gnnflow.strategies.fullbatch.row1d import FullBatch

    s = FullBatch(TrainConfig.from_dict(cfg_dict), ctx)
    s.prepare()
    peaks = []
    for e in range(2):  # the second epoch runs with every persistent buffer already allocated
        before = _rss_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM (Linux >= 4.0)
        s.run_epoch(e, Recorder())
        peaks.append({"rss_before_mib": before / 1024, "peak_mib": _rss_kib("VmHWM") / 1024})
    last = peaks[-1]
    return {"rss_before_mib": peaks[0]["rss_before_mib"], "peak_mib": max(p["peak_mib"] for p in peaks),
            "epoch_extra_mib": max(p["peak_mib"] for p in peaks) - peaks[0]["rss_before_mib"],
            "steady_rss_mib": last["rss_before_mib"], "buffer_mib": s.buffer_bytes() / 2**20,
            "rows": s.engine.num_rows if s.engine else 0}


def memory_section(graph: str, args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.runtime.launch import run_ranks

    res: dict[str, Any] = {}
    for memory in ("reuse", "autograd"):
        cfg = _cfg(graph, args, workers=args.workers, memory=memory, layers=args.memory_layers, hidden=args.hidden)
        out = run_ranks(_memory_rank, args.workers, cfg.to_dict(), timeout_s=600)
        res[memory] = {"per_rank": out, "peak_mib": max(r["peak_mib"] for r in out),
                       "epoch_extra_mib": max(r["epoch_extra_mib"] for r in out)}
    res["ratio_peak"] = res["reuse"]["peak_mib"] / res["autograd"]["peak_mib"]
    res["ratio_epoch_extra"] = res["reuse"]["epoch_extra_mib"] / res["autograd"]["epoch_extra_mib"]
    return res


# ----------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    import json

    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-fullbatch-") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        graph = args.graph or synthetic_graph(work, args.nodes, args.avg_degree, args.feature_dim, args.classes)
        from gnnflow.data.store import open_store

        num_edges = int(open_store(graph).indices.shape[0])
        result: dict[str, Any] = {"graph": graph, "num_edges": num_edges, "hidden": args.hidden,
                                  "layers": args.layers, "norm": args.norm, "workers": args.workers}
        parts = []
        ratios = []
        if not args.skip_single:
            single = single_process(graph, args)
            result.update(single)
            what = (f"full-graph GCN training epoch ({num_edges} edges + self-loops, hidden {args.hidden}, "
                    f"{args.layers} layers, {single['device']}), median of {args.repeats}x{args.epochs}")
            ours_op = operand(single["ours_epoch_s"], "s/epoch", f"gnnflow fullbatch (1 rank) {what}")
            line = f"single process ({what}): ours {single['ours_epoch_s']:.3f}s"
            if "dgl_epoch_s" in single:
                ratios.append(ratio("full-graph GCN epoch: ours / DGL", ours_op,
                                    operand(single["dgl_epoch_s"], "s/epoch", f"DGL 1.1.3 GraphConv {what}"),
                                    "<= 0.8"))
                line += f", DGL {single['dgl_epoch_s']:.3f}s (ratio {ratios[-1]['value']:.3f})"
            if "pyg_epoch_s" in single:
                ratios.append(ratio("full-graph GCN epoch: ours / PyG", ours_op,
                                    operand(single["pyg_epoch_s"], "s/epoch",
                                            f"PyG {single['pyg_version']} GCNConv ({single['pyg_form']}, its "
                                            f"faster form here) {what}"), "<= 0.8"))
                line += (f", PyG {single['pyg_epoch_s']:.3f}s ({single['pyg_form']}; ratio "
                         f"{ratios[-1]['value']:.3f})")
            parts.append(line + "; outputs equal with copied weights (max abs diff "
                         f"{max(single['max_abs_diff'].values(), default=0.0):.1e})"
                         + "".join(f"; {n}" for n in single["notes"]))
        if not args.skip_ranks:
            skewed = degree_ordered_copy(graph, work / (Path(graph).name + "-degree-ordered"))
            ranks = ranks_section(skewed, args)
            if args.timeline_out:
                Path(args.timeline_out).write_text(json.dumps({k: v["timeline"] for k, v in ranks.items()}))
            if args.timeline_plot:
                plot_timeline({k: v["timeline"] for k, v in ranks.items()}, args.timeline_plot)
            for v in ranks.values():
                v.pop("timeline")
            result["ranks"] = ranks
            p, n = ranks["perm_overlap"], ranks["natural_overlap"]

            def epoch(key: str) -> dict[str, Any]:
                return operand(ranks[key]["epoch_s"], "s/epoch", f"gnnflow fullbatch, {args.workers} ranks, "
                               f"degree-ordered graph, {key.replace('_', ' + ')}, median epoch of the slowest rank")

            ratios += [ratio(f"P={args.workers} epoch: overlap / sequential (permuted)", epoch("perm_overlap"),
                             epoch("perm_sequential")),
                       ratio(f"P={args.workers} epoch: permuted / natural order (overlap)", epoch("perm_overlap"),
                             epoch("natural_overlap"))]
            parts.append(
                f"P={args.workers}: epoch overlap {p['epoch_s']:.3f}s vs sequential "
                f"{ranks['perm_sequential']['epoch_s']:.3f}s (permuted); permuted {p['epoch_s']:.3f}s vs natural "
                f"{n['epoch_s']:.3f}s (overlap); tile nnz max/avg permuted "
                f"{p['balance']['tile_nnz_max_over_avg']:.3f} vs natural {n['balance']['tile_nnz_max_over_avg']:.3f}")
        if args.memory:
            mgraph = synthetic_graph(work, args.memory_nodes, args.avg_degree, args.memory_feature_dim, args.classes)
            mem = memory_section(mgraph, args)
            result["memory"] = mem

            def peak(key: str) -> dict[str, Any]:
                return operand(mem[key]["peak_mib"], "MiB", f"peak RSS (VmHWM) of a training epoch, {key} memory, "
                               f"{args.workers} ranks, L={args.memory_layers}, hidden {args.hidden}")

            ratios.append(ratio("epoch peak memory: buffer reuse / autograd", peak("reuse"), peak("autograd")))
            parts.append(f"memory L={args.memory_layers} hidden {args.hidden}: epoch peak above baseline reuse "
                         f"{mem['reuse']['epoch_extra_mib']:.0f} MiB vs autograd "
                         f"{mem['autograd']['epoch_extra_mib']:.0f} MiB (ratio {mem['ratio_epoch_extra']:.3f}); "
                         f"total peak {mem['reuse']['peak_mib']:.0f} vs {mem['autograd']['peak_mib']:.0f} MiB "
                         f"(ratio {mem['ratio_peak']:.3f})")
        result["summary"] = "; ".join(parts)
        if not ratios:
            raise GnnflowError("bench fullbatch: nothing measured (--skip-single and --skip-ranks without --memory)")
        return headline(result, ratios)
