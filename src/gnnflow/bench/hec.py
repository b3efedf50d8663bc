"""``gnnflow bench hec``: remote bytes and epoch time, HEC vs data-parallel (DistGNN-MB §4.4, §4.6).

The systems train the same model on the same partition book with the same
ranks, batch size and fanouts, alternately (``--repeat`` rounds of
data-parallel, DistDGL, then HEC at each push cap, each a fresh set of ranks),
all with the same pipeline setting (``--pipeline``; default off, as
DistGNN-MB samples synchronously, §3.3): data-parallel and HEC run their
asynchronous pipeline or not, DistDGL its sampler processes
(``--dgl-samplers`` per trainer) or none:

* **data-parallel** (``--strategy data``, DistDGLv2 style, the peer DistGNN-MB
  compares with in §4.6): samples through the owners and fetches every remote
  input feature row of every mini-batch;
* **DistDGL** (``--strategy distdgl``, DGL 1.1.3 on the same partitions): the
  peer library's data-parallel training, for epoch time (DGL counts no bytes);
* **HEC** (``--strategy hec``): samples locally, fetches nothing, and pushes at
  most ``nc`` solid-vertex embeddings per remote rank and layer (AEP); by default
  only those the peer is expected to read, and none at layer 0, whose cache is
  filled once at setup (``push=use``, docs/hec.md; ``--opt push=degree``:
  Algorithm 2 as published).

Per epoch it sums over ranks the bytes received from other ranks; figures are
medians over epochs and rounds.  The headline ratio is HEC's remote bytes
(pushed rows with their tags and row counts: everything HEC receives) over
data-parallel's remote *feature* bytes (the feature rows alone, without their
request ids or the sampling traffic): the conservative one, since it can only
overstate HEC's share.  The ratio over everything data-parallel receives
(feature rows, request ids, remote sampling) is reported next to it; the
gradient all-reduce, the same size in both, is left out of both.  Algorithm 2
drains the push pipeline at each epoch end (no push in the last ``d`` of the
``M`` iterations), so ``ratio_steady = ratio x M / (M - d)`` is also given: the
per-iteration ratio, which a short epoch would otherwise understate.  What each
side receives once before training is reported apart (``setup_bytes``):
data-parallel's feature cache fill, HEC's read rates and layer-0 fill.

Epoch time is the slowest rank's, averaged over a run's epochs (a pipeline
samples ahead across epoch boundaries, so single epochs are not comparable),
then the median over rounds; HEC's time is compared with data-parallel's and
with DistDGL's.

Presets (``--preset``): ``small`` (default) is the default synthetic graph
(32,768 vertices, 32 features, half of them training vertices) with batch 512,
fanouts 10,10, hidden 64; ``paper`` is DistGNN-MB's model (§4.2 Table 2:
batch 1000, fanouts 5,10,15, hidden 256, i.e. 3 GraphSAGE layers) on a
synthetic graph shaped like OGBN-Papers100M (128 features, 1 % training
vertices, mean degree 29) with 1M vertices.  Options given explicitly
override the preset's values.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.data.synthetic import DEFAULTS as SYNTHETIC
from gnnflow.runtime.launch import run_ranks
from gnnflow.strategies.distdgl import DEFAULT_SAMPLERS

#: ``--preset``: graph (generated when no ``--graph``) and model settings; explicit options win.
PRESETS: dict[str, dict[str, Any]] = {
    # the default synthetic graph and the model every small test here uses
    "small": {"nodes": SYNTHETIC["num_nodes"], "avg_degree": SYNTHETIC["avg_degree"],
              "feature_dim": SYNTHETIC["feature_dim"], "train_frac": SYNTHETIC["train_frac"],
              "batch_size": 512, "fanouts": "10,10", "hidden": 64},
    # DistGNN-MB §4.2 Table 2 (batch 1000, fanouts 5,10,15, hidden 256, 2 hidden layers) on an
    # OGBN-Papers100M-shaped graph (Table 1: 128 features, ~1.1 % training vertices, mean degree 29)
    "paper": {"nodes": 1_000_000, "avg_degree": 29.0, "feature_dim": 128, "train_frac": 0.01,
              "batch_size": 1000, "fanouts": "5,10,15", "hidden": 256},
}
GRAPH_KEYS = ("nodes", "avg_degree", "feature_dim", "train_frac")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small",
                        help="small: default synthetic graph, batch 512, fanouts 10,10, hidden 64 (default); "
                             "paper: DistGNN-MB's batch 1000, fanouts 5,10,15, hidden 256 on a "
                             "1M-vertex papers100M-shaped synthetic graph (128 features, 1%% training)")
    parser.add_argument("--graph", help="graph store (default: a synthetic graph of the preset, generated)")
    parser.add_argument("--partition", help="partition book with --workers parts (default: metis on --graph)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per run")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of (data-parallel, HEC)")
    parser.add_argument("--model", default="sage")
    parser.add_argument("--batch-size", type=int, default=None, help="targets per rank and iteration (preset)")
    parser.add_argument("--fanouts", default=None, help="fanouts, input layer first (preset)")
    parser.add_argument("--hidden", type=int, default=None, help="hidden width (preset)")
    parser.add_argument("--nc", default="2000,500,200",
                        help="HEC push caps to compare; the first is the headline (default: the paper's 2000)")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                        help="other HEC option (cs, ls, d), repeatable")
    parser.add_argument("--pipeline", action="store_true",
                        help="every side pipelined: data-parallel's and HEC's asynchronous pipeline, DistDGL's "
                             "sampler processes (default: none, DistGNN-MB §3.3)")
    parser.add_argument("--dgl-samplers", type=int, default=DEFAULT_SAMPLERS,
                        help=f"DistDGL sampler processes per trainer with --pipeline (default {DEFAULT_SAMPLERS})")
    parser.add_argument("--no-distdgl", action="store_true", help="leave the DistDGL peer out")
    parser.add_argument("--nodes", type=int, default=None, help="vertices of the generated synthetic graph (preset)")
    parser.add_argument("--avg-degree", type=float, default=None, help="its mean degree (preset)")
    parser.add_argument("--feature-dim", type=int, default=None, help="its feature width (preset)")
    parser.add_argument("--train-frac", type=float, default=None, help="its fraction of training vertices (preset)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")


def resolve_preset(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options left unset from ``--preset``; graph options only make sense without ``--graph``."""
    from gnnflow.errors import ConfigError

    if args.graph is not None:
        given = [k for k in GRAPH_KEYS if getattr(args, k) is not None]
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise ConfigError(f"{flags}: options of the generated graph; drop them or drop --graph")
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def train_rank(ctx: Any, cfg_dict: dict[str, Any], epochs: int, evaluate: bool = False) -> list[dict[str, Any]]:
    """Train ``epochs`` epochs through the Strategy interface; this rank's per-epoch figures.

    A module-level function so that :func:`~gnnflow.runtime.launch.run_ranks` can start it;
    with ``evaluate`` each epoch also records the (collective) accuracies.
    """
    from gnnflow.config import TrainConfig
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.base import strategy_class

    cfg = TrainConfig.from_dict(cfg_dict)
    strategy = strategy_class(cfg.strategy)(cfg, ctx)
    strategy.prepare()
    out = []
    try:
        for epoch in range(epochs):
            rec = Recorder()
            loss = strategy.run_epoch(epoch, rec)
            row = {"time": rec.elapsed(), "loss": loss, "counters": dict(rec.counters),
                   "times": dict(rec.times), "extra": dict(rec.extra)}
            if evaluate:
                row.update(strategy.evaluate())
            out.append(row)
    finally:
        close = getattr(strategy, "close", None)
        if close is not None:
            close()
    return out


def run_strategy(strategy: str, graph: str, partition: str, workers: int, epochs: int,
                 options: dict[str, Any], args: argparse.Namespace) -> list[dict[str, float]]:
    """Per epoch: summed bytes over ranks and the slowest rank's time."""
    fanouts = [int(f) for f in str(args.fanouts).split(",")]
    cfg = {"graph": graph, "partition": partition, "strategy": strategy, "model": args.model,
           "hidden": args.hidden, "num_layers": len(fanouts), "fanouts": fanouts,
           # --batch-size is per rank here; TrainConfig's batch_size is the global mini-batch
           "batch_size": args.batch_size * workers, "epochs": epochs, "seed": args.seed, "workers": workers,
           "options": options}
    per_rank = run_ranks(train_rank, workers, cfg, epochs, timeout_s=args.timeout)
    rows = []
    for e in range(epochs):
        recs = [r[e] for r in per_rank]

        def total(key: str, recs: list[dict[str, Any]] = recs) -> float:
            return float(sum(r["counters"].get(key, 0.0) for r in recs))

        def per_layer(prefix: str, over_ranks: Any, recs: list[dict[str, Any]] = recs) -> list[float]:
            """``over_ranks`` of each layer's ``{prefix}{i}`` extra (layers the strategy recorded)."""
            return [over_ranks(r["extra"][f"{prefix}{i}"] for r in recs) for i in range(len(fanouts))
                    if f"{prefix}{i}" in recs[0]["extra"]]

        rows.append({
            "time_s": max(r["time"] for r in recs),
            "remote_bytes": total("remote_bytes"),
            "bytes_received": total("bytes_received"),
            "sample_bytes": total("sample_bytes_received"),
            # received once before training (data-parallel's feature cache, HEC's read rates and layer-0 fill)
            "setup_bytes": float(sum(r["extra"].get("setup_bytes", 0.0) for r in recs)),
            "iterations": total("iterations") / workers,
            "d": float(recs[0]["extra"].get("d", 0.0)),
            "fwd_s": max(r["extra"].get("fwd_s", 0.0) for r in recs),
            "allreduce_s": max(r["times"].get("allreduce", 0.0) for r in recs),
            "hit_rates": per_layer("hec_hit_rate_l", statistics.fmean),
            # per layer, summed over ranks: halo vertices looked up in the HEC, rows pushed to peers
            "searched": per_layer("hec_searched_l", sum),
            "pushed": per_layer("aep_pushed_l", sum),
        })
    return rows


def _parse_opts(items: list[str]) -> dict[str, Any]:
    from gnnflow.errors import ConfigError

    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--opt {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    args = resolve_preset(args)
    tmp = tempfile.mkdtemp(prefix="gnnflow-bench-hec-")
    try:
        graph = args.graph
        if graph is None:
            from gnnflow.data.synthetic import prepare_synthetic

            graph = str(Path(tmp) / "synthetic")
            prepare_synthetic(graph, num_nodes=args.nodes, avg_degree=args.avg_degree,
                              feature_dim=args.feature_dim, train_frac=args.train_frac, seed=args.seed)
        partition = args.partition
        if partition is None:
            from gnnflow.partition.api import partition_graph

            partition = str(Path(tmp) / f"metis{args.workers}")
            partition_graph(graph, "metis", args.workers, partition, seed=args.seed)
        hec_opts = _parse_opts(args.opt)
        caps = [int(v) for v in str(args.nc).split(",")]
        pipe = bool(args.pipeline)
        systems = {"data": ("data", {"pipeline": pipe})}  # name -> (strategy, options): one pipeline setting
        if not args.no_distdgl:
            systems["distdgl"] = ("distdgl", {"num_samplers": args.dgl_samplers if pipe else 0})
        systems.update({f"hec_nc{c}": ("hec", {**hec_opts, "nc": c, "pipeline": pipe}) for c in caps})
        runs: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in systems}
        for _ in range(args.repeat):
            for name, (strategy, options) in systems.items():
                runs[name].append(run_strategy(strategy, graph, partition, args.workers, args.epochs, options, args))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(which: str, key: str) -> float:
        return float(statistics.median(e[key] for r in runs[which] for e in r))

    def epoch_s(which: str) -> float:  # mean over a run's epochs, median over rounds
        return float(statistics.median(statistics.fmean(e["time_s"] for e in r) for r in runs[which]))

    dp_feat, dp_all, t_dp = med("data", "remote_bytes"), med("data", "bytes_received"), epoch_s("data")
    dp_setup = med("data", "setup_bytes")
    t_dgl = epoch_s("distdgl") if "distdgl" in runs else float("nan")
    dgl_samplers = args.dgl_samplers if args.pipeline else 0
    iters = med("data", "iterations")
    per_nc = []
    for c in caps:
        key = f"hec_nc{c}"
        epochs = [e for r in runs[key] for e in r]
        layers = len(epochs[0]["hit_rates"])
        b, t, d = med(key, "remote_bytes"), epoch_s(key), med(key, "d")
        bytes_ratio = b / dp_feat if dp_feat else float("nan")
        per_nc.append({"nc": c, "remote_bytes": b, "ratio": bytes_ratio, "setup_bytes": med(key, "setup_bytes"),
                       "ratio_all": b / dp_all if dp_all else float("nan"),
                       "ratio_steady": bytes_ratio * iters / (iters - d) if iters > d else float("nan"),
                       "epoch_s": t, "time_ratio": t / t_dp,
                       **({"time_ratio_distdgl": t / t_dgl} if "distdgl" in runs else {}),
                       "hit_rates": [statistics.median(e["hit_rates"][i] for e in epochs) for i in range(layers)],
                       "searched": [statistics.median(e["searched"][i] for e in epochs) for i in range(layers)],
                       "pushed": [statistics.median(e["pushed"][i] for e in epochs) for i in range(layers)]})
    head = per_nc[0]
    meets = [p["nc"] for p in per_nc if p["ratio"] <= 0.3]
    rows = "; ".join(f"nc={p['nc']}: {p['ratio']:.3f} (all {p['ratio_all']:.3f}, steady {p['ratio_steady']:.3f}, "
                     f"{p['remote_bytes'] / 2**20:.2f} MiB, {p['epoch_s']:.2f}s/epoch x{p['time_ratio']:.2f}"
                     + (f" / DistDGL x{p['time_ratio_distdgl']:.2f}" if "time_ratio_distdgl" in p else "")
                     + ", hit " + "/".join(f"{h:.0%}" for h in p["hit_rates"])
                     + f", setup {p['setup_bytes'] / 2**20:.2f} MiB)" for p in per_nc)
    setting = (f"preset {args.preset}, batch {args.batch_size}, fanouts {args.fanouts}, hidden {args.hidden}, "
               f"{args.workers} ranks, pipeline {'on' if args.pipeline else 'off'}, median of "
               f"{args.repeat}x{args.epochs} epochs")

    def op(value: float, unit: str, what: str, kind: str = "measured") -> dict[str, Any]:
        return operand(value, unit, f"{what}; {setting}", kind)

    data_feat = op(dp_feat, "bytes/epoch", "data-parallel: remote feature rows received, summed over ranks", "counted")
    ratios = []
    for p in per_nc:
        hec_bytes = op(p["remote_bytes"], "bytes/epoch", f"HEC nc={p['nc']}: everything received from other ranks",
                       "counted")
        hec_time = op(p["epoch_s"], "s/epoch", f"HEC nc={p['nc']}: epoch time (slowest rank)")
        ratios += [ratio(f"remote bytes: HEC nc={p['nc']} / data-parallel feature rows", hec_bytes, data_feat, "<= 0.3"),
                   ratio(f"epoch time: HEC nc={p['nc']} / data-parallel", hec_time,
                         op(t_dp, "s/epoch", "data-parallel: epoch time (slowest rank)"))]
        if "distdgl" in runs:
            ratios.append(ratio(f"epoch time: HEC nc={p['nc']} / DistDGL", hec_time,
                                op(t_dgl, "s/epoch", f"DistDGL ({dgl_samplers} sampler processes per trainer): "
                                   "epoch time (slowest rank)")))
    peer = (f"; DistDGL {t_dgl:.2f}s/epoch ({dgl_samplers} sampler processes)" if "distdgl" in runs else "")
    result = {
        "summary": (f"HEC/data-parallel remote bytes per epoch = {head['ratio']:.3f} at nc={head['nc']} "
                    f"(HEC's received bytes / data-parallel's remote feature rows); "
                    f"data-parallel {dp_feat / 2**20:.2f} MiB features ({dp_all / 2**20:.2f} MiB with ids and "
                    f"sampling, {dp_setup / 2**20:.2f} MiB at setup to fill its feature cache), {t_dp:.2f}s/epoch, "
                    f"{iters:g} iterations/epoch{peer}; {rows}; {setting}"),
        "data_remote_feature_bytes": dp_feat,
        "data_setup_bytes": dp_setup,
        "data_remote_bytes_all": dp_all,
        "data_epoch_s": t_dp,
        "iterations": iters,
        "hec": per_nc,
        "nc_meeting_0.3": meets,
        "workers": args.workers,
        "pipeline": bool(args.pipeline),
        "settings": {k: getattr(args, k) for k in ("preset", "batch_size", "fanouts", "hidden", *GRAPH_KEYS)},
        "runs": runs,
    }
    if "distdgl" in runs:
        result.update(distdgl_epoch_s=t_dgl, distdgl_samplers=dgl_samplers)
    return headline(result, ratios)
