"""``gnnflow bench gpu-minibatch``: a mini-batch epoch on one device, fed from the host vs from the device.

DistDGLv2 §4.2.2 and §5 (Fig. 10): a GPU fed by the CPU sampler and the CPU feature store waits
for them.  On one device, for single-process SAGE training (3 x 256, fanouts 15,10,5, batch
1024 by default) on a products-shaped synthetic graph (2,449,029 vertices, mean degree 50.5,
100 features, 47 classes, 8 % training vertices; ``--nodes`` and friends make a tiny one), one
epoch is timed, stage by stage, in four configurations, each the real ``single`` strategy:

* **(a) host** — the numpy sampler and the feature store on the host, rows copied over
  (``sampling=host``, what a GPU run did before);
* **(b) device sampling** — the tensor sampler on the device (``sampling=device``), rows still
  gathered on the host;
* **(c) device sampling + device cache** — (b) with ``device_cache_mib`` of hot rows (by
  in-degree) on the device;
* **(d) the limit** — forward + backward + step alone, on the same batches prepared beforehand
  and already on the device (each batch is prepared untimed, then its training step is timed).

The ratios (c)/(a) and (c)/(d) are printed with their operands (:mod:`gnnflow.bench.ratios`;
the issue's goals on a GPU: <= 0.35 and <= 1.5), and (b)/(a).  Evaluation (full-neighbourhood
layer-wise inference of every vertex, on the device) is timed once (``--no-eval`` skips it).
A PyG ``NeighborLoader`` row (its sampling and feature slicing over the same targets and
fanouts) is added where it runs: it needs pyg-lib or torch-sparse, and is otherwise dropped with
a note.  ``--device cpu`` runs everything on the CPU (what CI checks, on a tiny graph): those
are CPU figures, not GPU ones.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.config import TrainConfig
from gnnflow.errors import GnnflowError
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext

#: products-shaped defaults (ogbn-products: vertices, mean degree, features, classes, training share)
PRODUCTS = {"nodes": 2_449_029, "avg_degree": 50.5, "feature_dim": 100, "classes": 47, "train_frac": 0.08}
CONFIGS = {"a": "host sampling + host features", "b": "device sampling + host features",
           "c": "device sampling + device cache", "d": "forward+backward alone (batches on the device)"}
STAGES = ("sample", "load", "forward_backward", "step")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", default=None, help="graph store (default: generate a products-shaped one)")
    parser.add_argument("--work", default=None, help="directory for the generated graph (default: temporary)")
    parser.add_argument("--nodes", type=int, default=PRODUCTS["nodes"])
    parser.add_argument("--avg-degree", type=float, default=PRODUCTS["avg_degree"])
    parser.add_argument("--feature-dim", type=int, default=PRODUCTS["feature_dim"])
    parser.add_argument("--classes", type=int, default=PRODUCTS["classes"])
    parser.add_argument("--train-frac", type=float, default=PRODUCTS["train_frac"])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--fanouts", default="15,10,5", help="fanouts, input layer first (one per layer)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--cache-mib", type=float, default=512.0, help="(c)'s device cache (device_cache_mib)")
    parser.add_argument("--epochs", type=int, default=1, help="timed epochs per configuration (after a warm-up)")
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--no-eval", action="store_true", help="do not time evaluation")
    parser.add_argument("--no-pyg", action="store_true", help="leave the PyG NeighborLoader row out")
    parser.add_argument("--seed", type=int, default=0)


def bench_store(args: argparse.Namespace, work: Path) -> str:
    """The store at ``--graph``, or the synthetic graph the options describe, made under ``work``."""
    if args.graph:
        return str(args.graph)
    from gnnflow.data.store import open_store
    from gnnflow.data.synthetic import prepare_synthetic

    out = work / (f"synthetic-n{args.nodes}-d{args.avg_degree:g}-f{args.feature_dim}-c{args.classes}"
                  f"-t{args.train_frac:g}-s{args.seed}")
    if (out / "meta.json").exists():
        return str(open_store(out).path)
    return str(prepare_synthetic(out, num_nodes=args.nodes, avg_degree=args.avg_degree, feature_dim=args.feature_dim,
                                 num_classes=args.classes, train_frac=args.train_frac, seed=args.seed).path)


def _config(graph: str, args: argparse.Namespace, fanouts: list[int], **options: Any) -> TrainConfig:
    return TrainConfig(graph=graph, strategy="single", model="sage", hidden=args.hidden, num_layers=len(fanouts),
                       fanouts=fanouts, batch_size=args.batch_size, dropout=0.0, seed=args.seed, epochs=args.epochs,
                       device=args.device, options=options)


def _strategy(graph: str, args: argparse.Namespace, fanouts: list[int], **options: Any) -> Any:
    from gnnflow.strategies.single import SingleProcess

    s = SingleProcess(_config(graph, args, fanouts, **options), RankContext(device=torch.device(args.device)))
    s.prepare()
    return s


def time_epochs(s: Any, device: torch.device, epochs: int) -> dict[str, Any]:
    """A warm-up epoch, then ``epochs`` timed ones: the median epoch and its stage times (CUDA events
    on a GPU, :class:`Recorder`), with the epoch's counters."""
    s.run_epoch(0, Recorder(device))
    runs = []
    for e in range(epochs):
        rec = Recorder(device)
        _sync(device)
        t = time.perf_counter()
        s.run_epoch(e + 1, rec)
        rec.resolve()
        _sync(device)
        runs.append({"epoch_s": time.perf_counter() - t, **{k: float(rec.times.get(k, 0.0)) for k in STAGES},
                     "counters": dict(rec.counters), "extra": dict(rec.extra)})
    runs.sort(key=lambda r: r["epoch_s"])
    return runs[len(runs) // 2]


def time_limit(s: Any, device: torch.device) -> dict[str, Any]:
    """(d): every batch of an epoch prepared (sampled, loaded, on the device) untimed, then its
    forward + backward + step timed alone; the sum over the epoch."""
    import torch.nn.functional as F

    from gnnflow.strategies.common import batches

    assert s.model is not None and s.optimizer is not None and s.sampler is not None
    s.model.train()
    total, n = 0.0, 0
    for index, targets in enumerate(batches(s.train_ids, s.cfg.batch_size, s.batch_gen)):
        blocks = [b.to(device) for b in s.sampler.at(99, index).sample_blocks(targets)]
        x = s.input_rows(blocks[0].src_ids, Recorder()).to(device)
        y = s.labels[targets].to(device)
        _sync(device)
        t = time.perf_counter()
        loss = F.cross_entropy(s.model(blocks, x), y)
        s.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        s.optimizer.step()
        _sync(device)
        total += time.perf_counter() - t
        n += 1
    return {"epoch_s": total, "forward_backward": total, "batches": n}


def pyg_loader_row(graph: str, args: argparse.Namespace, fanouts: list[int],
                   device: torch.device) -> tuple[dict[str, Any] | None, str | None]:
    """PyG's ``NeighborLoader`` over the same training targets and fanouts (its sampling and
    feature slicing, rows copied to ``device``): ``(row, None)``, or ``(None, why it is left out)``."""
    if args.no_pyg:
        return None, "PyG NeighborLoader row left out: --no-pyg"
    try:
        import torch_geometric.typing as pyg_typing
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader
    except ImportError as exc:
        return None, f"PyG NeighborLoader row left out: torch_geometric does not import ({exc})"
    if not (getattr(pyg_typing, "WITH_PYG_LIB", False) or getattr(pyg_typing, "WITH_TORCH_SPARSE", False)):
        return None, "PyG NeighborLoader row left out: it needs pyg-lib or torch-sparse, neither imports here"
    from gnnflow.data.store import open_store

    store = open_store(graph)
    indptr = torch.from_numpy(np.asarray(store.indptr, dtype=np.int64))
    src = torch.from_numpy(np.asarray(store.indices, dtype=np.int64))
    dst = torch.repeat_interleave(torch.arange(store.num_nodes), indptr[1:] - indptr[:-1])
    data = Data(x=torch.from_numpy(np.asarray(store.features, dtype=np.float32)), edge_index=torch.stack([src, dst]),
                num_nodes=store.num_nodes)
    # PyG counts hops from the seeds outwards: our output layer's fanout first
    loader = NeighborLoader(data, num_neighbors=list(reversed(fanouts)), batch_size=args.batch_size,
                            input_nodes=torch.from_numpy(np.asarray(store.train_idx, dtype=np.int64)), shuffle=True)
    t = time.perf_counter()
    n = 0
    for batch in loader:
        batch.x.to(device)
        n += 1
    _sync(device)
    return {"epoch_s": time.perf_counter() - t, "batches": n}, None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.bench.sampler import parse_fanouts
    from gnnflow.runtime.devices import available_device

    device = available_device(args.device)
    fanouts = parse_fanouts(args.fanouts)
    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-gpu-") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        graph = bench_store(args, work)
        rows: dict[str, dict[str, Any]] = {}
        for key, opts in (("a", {"sampling": "host"}), ("b", {"sampling": "device"}),
                          ("c", {"sampling": "device", "device_cache_mib": args.cache_mib})):
            s = _strategy(graph, args, fanouts, **opts)
            rows[key] = time_epochs(s, device, args.epochs)
            if key == "c":
                rows["d"] = time_limit(s, device)
                if not args.no_eval:
                    _sync(device)
                    t = time.perf_counter()
                    s.evaluate()
                    _sync(device)
                    eval_s = time.perf_counter() - t
            del s
        pyg, pyg_note = pyg_loader_row(graph, args, fanouts, device)
        from gnnflow.data.store import open_store

        store = open_store(graph)
        shape = (f"{store.num_nodes} vertices, {int(store.indices.shape[0])} edges, {store.feature_dim} features; "
                 f"SAGE {len(fanouts)}x{args.hidden}, fanouts {args.fanouts}, batch {args.batch_size}")
    return _result(rows, pyg, pyg_note, None if args.no_eval else eval_s, shape, device, args)


def _result(rows: dict[str, dict[str, Any]], pyg: dict[str, Any] | None, pyg_note: str | None,
            eval_s: float | None, shape: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.io import proc_memory

    def epoch(key: str) -> dict[str, Any]:
        return operand(rows[key]["epoch_s"], "s/epoch", f"gnnflow single, {CONFIGS[key]} ({key}); {shape}; "
                       f"{device.type}")

    ratios = [ratio("(c)/(a): device sampling + device cache / host", epoch("c"), epoch("a"), "<= 0.35"),
              ratio("(c)/(d): device sampling + device cache / forward+backward alone", epoch("c"), epoch("d"),
                    "<= 1.5"),
              ratio("(b)/(a): device sampling / host", epoch("b"), epoch("a"))]
    if pyg is not None:
        ours = rows["a"]["sample"] + rows["a"]["load"]
        ratios.append(ratio("host sampling + loading: ours (a) / PyG NeighborLoader",
                            operand(ours, "s/epoch", f"gnnflow numpy sampler + feature rows (a); {shape}"),
                            operand(pyg["epoch_s"], "s/epoch", f"PyG NeighborLoader, same targets and fanouts; "
                                    f"{shape}")))
    hit = rows["c"]["extra"].get("device_cache_hit_rate", float("nan"))
    parts = [f"{k} {CONFIGS[k]}: {r['epoch_s']:.3f}s (" + ", ".join(
        f"{st} {r.get(st, 0.0):.3f}" for st in STAGES if st in r) + ")" for k, r in rows.items()]
    notes = [pyg_note] if pyg_note else []
    if device.type != "cuda":
        notes.append("CPU run: these are not GPU figures")
    result: dict[str, Any] = {
        "summary": (f"gpu-minibatch on {device.type} ({shape}): (c)/(a) {ratios[0]['value']:.3f}, "
                    f"(c)/(d) {ratios[1]['value']:.3f}, (b)/(a) {ratios[2]['value']:.3f}; " + "; ".join(parts)
                    + f"; device cache hit rate {hit:.3f}"
                    + (f"; evaluation {eval_s:.3f}s" if eval_s is not None else "")
                    + (f"; PyG NeighborLoader {pyg['epoch_s']:.3f}s" if pyg else "")
                    + "".join(f"; {n}" for n in notes)),
        "configs": rows, "pyg": pyg, "notes": notes, "eval_s": eval_s, "device": device.type, "graph": shape,
        "cache_mib": args.cache_mib, "device_cache_hit_rate": hit,
        "peak_rss_mib": proc_memory("VmHWM") / 2**20,
    }
    if device.type == "cuda":
        result["peak_device_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    if not all(r["epoch_s"] > 0 for r in rows.values()):
        raise GnnflowError("bench gpu-minibatch: an epoch took no time; nothing was measured")
    return headline(result, ratios)
