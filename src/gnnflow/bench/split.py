"""``gnnflow bench split``: split-parallel vs data-parallel vs P3* side by side (GSplit §6.2–6.3).

One run on ``--workers`` ranks (default 4) over the same graph and partition:

* **strategies** — ``split``, ``data``, ``p3`` and the peer ``distdgl`` (DGL
  1.1.3's DistDGL on the same book, with the same per-rank batch size and
  fanouts) are prepared in the same ranks and train ``--epochs`` epochs each,
  alternating epoch by epoch; per strategy the median epoch time (slowest
  rank, first epoch left out) and its sample / load / forward-backward
  breakdown (GSplit Table 3's S, L, FB), and the machine-independent counts per
  epoch summed over ranks: sampled edges (edges computed), features loaded,
  bytes shuffled (bytes sent by all ranks; DGL counts none).  Ratios are
  data-parallel / split, p3 / split and DistDGL / split.  All run with the
  same pipeline setting: ``--pipeline`` turns on our asynchronous pipeline and
  DGL's sampler processes (``--dgl-samplers`` per trainer) together.
* **redundancy** (GSplit Table 1) — for the same targets, edges computed and
  features loaded by ``P`` data-parallel micro-batches vs one mini-batch.
* **partitions** (``--partitions``, GSplit Fig. 5) — split-parallel on each
  partition method, in the same run; the cross-split edge fraction and
  per-layer load imbalance measured inside training.
* **accuracy** (``--evaluate``, GSplit Fig. 7) — test accuracy after every
  epoch of every strategy.

Inputs: ``--graph`` (a graph store; default: the default synthetic graph,
generated into ``--workdir``) and ``--partition`` (a book with ``--workers``
parts; default: the ``presample`` partition, built into ``--workdir``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.errors import ConfigError
from gnnflow.strategies.distdgl import DEFAULT_SAMPLERS

STRATEGIES = ("split", "data", "p3", "distdgl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", help="graph store (default: the default synthetic graph in --workdir)")
    parser.add_argument("--partition", help="partition book with --workers parts (default: presample, in --workdir)")
    parser.add_argument("--workdir", default="results/bench-split", help="where default inputs are built and reused")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--model", default="sage", choices=("sage", "gcn", "gat"))
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--fanouts", default="10,10", help="fanouts, input layer first (default 10,10)")
    parser.add_argument("--batch-size", type=int, default=512, help="targets per rank per iteration (default 512)")
    parser.add_argument("--epochs", type=int, default=4,
                        help="epochs per strategy, alternating; medians over epochs after the first (default 4)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help=f"subset of {','.join(STRATEGIES)}")
    parser.add_argument("--partitions", default="presample,node,edge,random",
                        help="partition methods for the Fig. 5 sweep ('' to skip)")
    parser.add_argument("--evaluate", action="store_true", help="test accuracy after every epoch (Fig. 7)")
    parser.add_argument("--pipeline", action="store_true",
                        help="run the asynchronous pipeline and DistDGL's sampler processes (default off: "
                             "background threads of one strategy would run during another's timed epoch)")
    parser.add_argument("--dgl-samplers", type=int, default=DEFAULT_SAMPLERS,
                        help=f"DistDGL sampler processes per trainer with --pipeline (default {DEFAULT_SAMPLERS})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per distributed run")


# ------------------------------------------------------------------------- inputs
def default_graph(workdir: Path) -> Path:
    """The default synthetic graph store in ``workdir`` (generated once)."""
    from gnnflow.data.synthetic import prepare_synthetic

    path = workdir / "synthetic"
    if not (path / "meta.json").exists():
        prepare_synthetic(path, overwrite=True)
    return path


def partition_for(graph: Path, method: str, parts: int, workdir: Path, fanouts: list[int], batch_size: int,
                  seed: int = 0) -> Path:
    """A ``method`` partition book of ``graph`` in ``workdir`` (built once).

    ``node``/``presample`` weigh vertices (and edges) by presampling with the
    training fanouts and the split group's global mini-batch size (GSplit §4).
    """
    from gnnflow.data.store import open_store
    from gnnflow.partition.api import partition_graph

    out = workdir / f"{method}-{parts}"
    if (out / "meta.json").exists():
        return out
    store = open_store(graph)
    params: dict[str, Any] = {}
    if method in ("node", "presample"):
        from gnnflow.partition.presample import presample

        params["presample"] = presample(store, fanouts, batch_size, epochs=10, seed=seed)
    partition_graph(store, method, parts, out, seed=seed, overwrite=True, **params)
    return out


# ---------------------------------------------------------------------- running
def train_rank(ctx: Any, cfg_dict: dict[str, Any], evaluate: bool) -> list[dict[str, Any]]:
    """Train ``cfg.epochs`` epochs of ``cfg.strategy`` on this rank; per-epoch records."""
    return compare_rank(ctx, {"run": cfg_dict}, int(cfg_dict["epochs"]), evaluate)["run"]


def compare_rank(ctx: Any, cfg_dicts: dict[str, dict[str, Any]], epochs: int,
                 evaluate: bool) -> dict[str, list[dict[str, Any]]]:
    """Prepare every configured strategy on this rank, then alternate their epochs.

    Epoch ``e`` of every strategy runs before epoch ``e + 1`` of any, so machine
    noise spreads evenly over them (side by side in one run).  Evaluation is
    outside the timed epoch.
    """
    from gnnflow.config import TrainConfig
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.base import strategy_class

    runs = {}
    for name, d in cfg_dicts.items():
        cfg = TrainConfig.from_dict(d)
        s = strategy_class(cfg.strategy)(cfg, ctx)
        s.prepare()
        runs[name] = s
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    try:
        for epoch in range(epochs):
            for name, s in runs.items():
                rec = Recorder()
                t0 = time.perf_counter()
                loss = s.run_epoch(epoch, rec)
                wall = time.perf_counter() - t0
                row = {"epoch": epoch, "loss": loss, "time_epoch": wall, "times": dict(rec.times),
                       "counters": dict(rec.counters), "extra": dict(rec.extra)}
                if evaluate:
                    row.update(s.evaluate())
                out[name].append(row)
    finally:
        for s in runs.values():
            close = getattr(s, "close", None)
            if close is not None:
                close()
    return out


def make_cfg(strategy: str, graph: Path, partition: Path, args: argparse.Namespace, epochs: int,
             **options: Any) -> dict[str, Any]:
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.base import strategy_class

    fanouts = [int(f) for f in str(args.fanouts).split(",")]
    cfg = TrainConfig(graph=str(graph), strategy=strategy, partition=str(partition), model=args.model,
                      # --batch-size is per rank here; TrainConfig's is the global mini-batch
                      hidden=args.hidden, num_layers=len(fanouts), fanouts=fanouts,
                      batch_size=args.batch_size * args.workers,
                      epochs=epochs, seed=args.seed, workers=args.workers,
                      options=strategy_class(strategy).Options.own({"pipeline": bool(args.pipeline), **options}))
    return cfg.to_dict()


def epoch_summary(per_rank: list[list[dict[str, Any]]], skip_first: bool = True) -> dict[str, float]:
    """Figures per epoch: slowest-rank times, counts summed over ranks; medians over epochs.

    The first epoch (warm-up) is left out when there are more.
    """
    epochs = range(1 if skip_first and len(per_rank[0]) > 1 else 0, len(per_rank[0]))
    rows = []
    for e in epochs:
        recs = [r[e] for r in per_rank]
        row = {"time_epoch": max(r["time_epoch"] for r in recs)}
        for t in ("sample", "load", "forward_backward", "allreduce", "wait"):
            row[f"time_{t}"] = max(r["times"].get(t, 0.0) for r in recs)
        for c in ("sampled_edges", "features_loaded", "bytes_sent", "iterations"):
            row[c] = sum(r["counters"].get(c, 0.0) for r in recs)
        row["iterations"] /= len(recs)
        for k, v in recs[0]["extra"].items():
            row[f"x_{k}"] = float(v)
        rows.append(row)
    return {k: float(statistics.median(r[k] for r in rows)) for k in rows[0]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.runtime.launch import run_ranks

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    fanouts = [int(f) for f in str(args.fanouts).split(",")]
    strategies = [s for s in str(args.strategies).split(",") if s]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        raise ConfigError(f"--strategies: unknown {unknown}; choose from {', '.join(STRATEGIES)}")
    if args.epochs < 1:
        raise ConfigError(f"--epochs must be >= 1, got {args.epochs}")
    global_batch = args.batch_size * args.workers
    graph = Path(args.graph) if args.graph else default_graph(workdir)
    partition = Path(args.partition) if args.partition else partition_for(
        graph, "presample", args.workers, workdir, fanouts, global_batch, args.seed)
    methods = [m for m in str(args.partitions).split(",") if m]

    # every strategy (and split on every partition) in one run, epochs alternating
    cfgs = {s: make_cfg(s, graph, partition, args, args.epochs) for s in strategies}
    if "distdgl" in cfgs:  # the same pipeline setting: DGL's sampler processes with ours' pipeline
        cfgs["distdgl"]["options"]["num_samplers"] = args.dgl_samplers if args.pipeline else 0
    for method in methods:
        book = partition_for(graph, method, args.workers, workdir, fanouts, global_batch, args.seed)
        if book.resolve() != partition.resolve() or "split" not in cfgs:
            cfgs[f"split@{method}"] = make_cfg("split", graph, book, args, args.epochs)
    t0 = time.perf_counter()
    out = run_ranks(compare_rank, args.workers, cfgs, args.epochs, bool(args.evaluate), timeout_s=args.timeout)
    wall = time.perf_counter() - t0
    per_run = {name: [r[name] for r in out] for name in cfgs}
    med = {s: epoch_summary(per_run[s]) for s in strategies}
    result: dict[str, Any] = {"workers": args.workers, "model": args.model, "fanouts": fanouts,
                              "batch_size_per_rank": args.batch_size, "global_batch": global_batch,
                              "graph": str(graph), "partition": str(partition), "epochs": args.epochs,
                              "wall_s": wall, "strategies": med}

    label = {"split": "split-parallel", "data": "data-parallel", "p3": "P3*",
             "distdgl": f"DistDGL ({cfgs.get('distdgl', {}).get('options', {}).get('num_samplers', 0)} sampler "
                        "processes per trainer)"}
    setting = (f"{args.workers} ranks, {args.model}, fanouts {fanouts}, batch {args.batch_size}/rank, pipeline "
               f"{'on' if args.pipeline else 'off'}; median over epochs 2..{args.epochs} (alternating)")
    units = {"time_epoch": ("s/epoch", "epoch time (slowest rank)", "measured"),
             "sampled_edges": ("edges/epoch", "sampled edges, summed over ranks", "counted"),
             "features_loaded": ("rows/epoch", "input feature rows loaded, summed over ranks", "counted"),
             "bytes_sent": ("bytes/epoch", "bytes sent, summed over ranks", "counted")}
    ratios = []
    if "split" in med:
        for a in ("data", "p3", "distdgl"):
            for key, (unit, what, kind) in units.items():
                if a in med and med["split"].get(key) and (a != "distdgl" or key != "bytes_sent"):
                    ratios.append(ratio(f"{key}: {label[a]} / split-parallel",
                                        operand(med[a][key], unit, f"{label[a]}: {what}; {setting}", kind),
                                        operand(med["split"][key], unit, f"split-parallel: {what}; {setting}", kind)))
    result["ratios"] = ratios

    # GSplit Table 1 on the same targets (single process, counts only)
    from gnnflow.data.store import open_store
    from gnnflow.strategies.split.redundancy import redundancy

    store = open_store(graph)
    book_part = np.load(partition / "node_part.npy")
    result["table1"] = {
        "random_micro": redundancy(store.indptr, store.indices, store.train_idx, fanouts, global_batch,
                                   args.workers, iterations=8, seed=args.seed),
        "owner_micro": redundancy(store.indptr, store.indices, store.train_idx, fanouts, global_batch,
                                  args.workers, iterations=8, seed=args.seed, node_part=book_part),
    }

    # Fig. 5: split-parallel on each partition, measured inside training
    sweep = {}
    for method in methods:
        name = f"split@{method}" if f"split@{method}" in per_run else "split"
        s = epoch_summary(per_run[name])
        sweep[method] = {k[2:]: v for k, v in s.items() if k.startswith("x_")}
        sweep[method]["time_epoch"] = s["time_epoch"]
        sweep[method]["bytes_sent"] = s["bytes_sent"]
    result["partitions"] = sweep

    # Fig. 7: accuracy per epoch
    if args.evaluate:
        result["accuracy"] = {s: [float(r["test_acc"]) for r in per_run[s][0]] for s in strategies}
        if "split" in strategies and "data" in strategies:
            acc = result["accuracy"]
            result["final_test_acc_diff_points"] = 100.0 * abs(acc["split"][-1] - acc["data"][-1])

    result["summary"] = _summary(result)
    names = [r["name"] for r in ratios]
    head = "features_loaded: data-parallel / split-parallel"
    return headline(result, ratios, names.index(head) if head in names else 0) if ratios else result


def _summary(r: dict[str, Any]) -> str:
    lines = [f"bench split: {r['workers']} ranks, {r['model']}, fanouts {r['fanouts']}, "
             f"global batch {r['global_batch']}, medians over epochs 2..{r['epochs']} (alternating)"]
    lines.append(f"{'strategy':9s} {'epoch s':>8s} {'S':>6s} {'L':>6s} {'FB':>6s} {'edges':>10s} "
                 f"{'features':>10s} {'MB sent':>9s}")
    for s, m in r["strategies"].items():
        lines.append(f"{s:9s} {m['time_epoch']:8.2f} {m['time_sample']:6.2f} {m['time_load']:6.2f} "
                     f"{m['time_forward_backward']:6.2f} {m['sampled_edges']:10.0f} {m['features_loaded']:10.0f} "
                     f"{m['bytes_sent'] / 1e6:9.2f}")
    for x in r["ratios"]:
        lines.append(f"  {x['name']} = {x['value']:.2f}")
    for name, t in r["table1"].items():
        lines.append(f"Table 1 ({name}): edges micro/mini = {t['edges_micro']}/{t['edges_mini']} = "
                     f"{t['edges_ratio']:.2f}x, features micro/mini = {t['features_micro']}/{t['features_mini']} = "
                     f"{t['features_ratio']:.2f}x")
    for method, m in r["partitions"].items():
        layers = " ".join(f"l{i}={m[f'load_imbalance_l{i}']:.3f}" for i in range(len(r["fanouts"]))
                          if f"load_imbalance_l{i}" in m)
        lines.append(f"partition {method:9s}: cross-split edges {100 * m.get('cross_edge_fraction', 0):.1f}%, "
                     f"load imbalance {layers}, epoch {m['time_epoch']:.2f}s")
    if "accuracy" in r:
        lines.append("test acc per epoch: " + "; ".join(
            f"{s}: " + " ".join(f"{a:.4f}" for a in accs) for s, accs in r["accuracy"].items()))
        lines.append(f"final test accuracy difference: {r['final_test_acc_diff_points']:.2f} points")
    return "\n".join(lines)
