"""``gnnflow bench advise``: the advice's predictions checked against measured epochs (issue 35.4).

A grid of configurations — graphs of different shape x rank counts (default 2 and 4) — and in
each configuration every strategy (with a few of its options, :data:`BENCH_CANDIDATES`):

* ``default``: the default synthetic graph (32,768 vertices, degree 12, 32 features), METIS;
* ``products``: a products-shaped slice (80,000 vertices, degree 50.5, 100 features, 47
  classes, 8 % training vertices), METIS;
* ``halo``: a high-halo graph (32,768 vertices, degree 20, homophily 0.1) on a RANDOM partition,
  so most of every rank's neighbours live elsewhere.

The machine is calibrated first (:mod:`gnnflow.advise.calibrate`), in the same run, so the rates
and the measurements share the host's state.  Per configuration the advice predicts every
candidate (:func:`gnnflow.advise.advice.advise`) and each one that fits trains ``--epochs`` epochs
(:mod:`gnnflow.advise.measure`; the first is left out).  Reported:

* per strategy (its option variants pooled), over every configuration: the median and the worst
  ``|predicted - measured| / measured`` of the epoch time (goals: <= 25 % and <= 50 %);
* per configuration: Kendall's tau between the predicted and the measured order (goal >= 0.7)
  and whether the predicted fastest is within 10 % of the measured fastest (a ratio of two
  measured epochs: the predicted fastest's over the measured fastest's, goal <= 1.1).

The host's state (the cores 1 and P busy processes get, :func:`gnnflow.advise.calibrate.refresh_host`)
is measured before and after each configuration's measurements: when it moved by more than
:data:`HOST_TOLERANCE` in between (other work came or went on the host: a whole configuration then
measured 1.2-1.5x slower than the calibration's rates say), the configuration is measured again,
at most ``--remeasure`` times, and the summary names it (the goals are for a quiet host).

Every configuration's advice with its measurements is kept in ``--workdir`` (``<graph>-w<P>.json``);
``--reuse`` takes those measurements again and only predicts anew (to check a change of the cost
model without measuring again), and reuses the calibration there.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from gnnflow.bench.ratios import ratio

log = logging.getLogger("gnnflow.advise")
#: name -> (synthetic generator options, partition method)
GRAPHS: dict[str, tuple[dict[str, Any], str]] = {
    "default": ({}, "metis"),
    "products": ({"num_nodes": 80_000, "avg_degree": 50.5, "feature_dim": 100, "num_classes": 47,
                  "train_frac": 0.08}, "metis"),
    "halo": ({"num_nodes": 32_768, "avg_degree": 20.0, "homophily": 0.1}, "random"),
}
#: the relative change of the host's cores (1 or P busy processes) between the two ends of a
#: configuration's measurements beyond which they are taken again (a quiet host: 0-1 %)
HOST_TOLERANCE = 0.08
#: every strategy with its defaults, and the options whose effect the model should rank too
BENCH_CANDIDATES: list[tuple[str, dict[str, Any]]] = [
    ("single", {}), ("data", {}), ("data", {"pipeline": False}), ("distdgl", {}), ("split", {}), ("p3", {}),
    ("hec", {}), ("hec", {"pushes_per_rank": 500}), ("fullbatch", {}), ("dgcl", {}),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", default="results/bench-advise", help="graphs, books, calibration, advice files")
    parser.add_argument("--graphs", default=",".join(GRAPHS), help=f"subset of {','.join(GRAPHS)}")
    parser.add_argument("--workers", default="2,4", help="rank counts (default 2,4)")
    parser.add_argument("--epochs", type=int, default=6,
                        help="epochs per measured run; the first is left out, the median of the rest is kept "
                             "(default 6: 4 ranks on 2 cores move 30-40 %% between epochs)")
    parser.add_argument("--model", default="gcn", choices=("sage", "gcn", "gat"),
                        help="model of every run (default gcn: the full-batch strategies train GCN only)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=1024, help="global mini-batch (default 1024)")
    parser.add_argument("--candidates", choices=("bench", "all"), default="bench",
                        help="the bench's candidates (each strategy, a few options) or all of the advice's")
    parser.add_argument("--calibration", default=None, help="a calibration file (default: calibrate now)")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the calibration and the measurements in --workdir; predict again")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per launch of ranks")
    parser.add_argument("--remeasure", type=int, default=2,
                        help="times a configuration is measured again when the host's cores changed "
                             "during its measurements (default 2; 0: never)")
    parser.add_argument("--no-strategy-probe", action="store_true",
                        help="calibrate without the strategy probe: check the cost model alone")


# ------------------------------------------------------------------------------------------ inputs
def graph_store(workdir: Path, name: str) -> Path:
    from gnnflow.data.synthetic import prepare_synthetic

    path = workdir / "graphs" / name
    if not (path / "meta.json").exists():
        log.info("bench advise: generating graph %s", name)
        prepare_synthetic(path, overwrite=True, name=f"advise-{name}", **GRAPHS[name][0])
    return path


def book(workdir: Path, graph: Path, name: str, parts: int) -> Path:
    from gnnflow.partition.api import partition_graph

    method = GRAPHS[name][1]
    path = workdir / "books" / f"{name}-{method}{parts}"
    if not (path / "meta.json").exists():
        log.info("bench advise: partitioning %s into %d %s parts", name, parts, method)
        partition_graph(graph, method, parts, path, overwrite=True)
    return path


# ------------------------------------------------------------------------------------------ host state
def host_state(cal: Any, workers: int, measure: bool = False) -> dict[str, Any]:
    """The calibration's host figures for 1 and ``workers`` ranks (measured again with ``measure``)."""
    if measure:
        from gnnflow.advise.calibrate import refresh_host

        refresh_host(cal, [workers])
    return {"cores": {k: cal.collectives[k]["cores"] for k in ("1", str(workers)) if k in cal.collectives},
            "threads": cal.threads}


def host_change(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """How the host's cores moved between two states when by more than :data:`HOST_TOLERANCE`
    (e.g. ``cores of 2 busy processes 1.98 -> 1.68``), else None."""
    for key, was in before["cores"].items():
        now = after["cores"].get(key)
        if now is not None and abs(now - was) > HOST_TOLERANCE * max(was, 1e-9):
            return f"cores of {key} busy process{'es' if key != '1' else ''} {was:.2f} -> {now:.2f}"
    return None


def apply_host(cal: Any, host: dict[str, Any]) -> None:
    """Put a host state (or the mean of a ``before``/``after`` pair) into the calibration."""
    states = [host["before"], host["after"]] if "before" in host else [host]
    for key in states[0]["cores"]:
        cal.collectives.setdefault(key, dict(cal.net(int(key))))["cores"] = statistics.mean(
            s["cores"][key] for s in states)
    cal.threads = statistics.mean(s["threads"] for s in states)


def _repredict(adv: Any, base: Any, bk: str, cal: Any, candidates: Any, cal_path: str) -> Any:
    """The advice predicted again with the calibration's current host state, measurements kept."""
    from gnnflow.advise.advice import advise

    new = advise(base, bk, cal, candidates=candidates, calibration_path=cal_path)
    measured = {r.label: r.measured for r in adv.rows}
    for r in new.rows:
        r.measured = measured.get(r.label)
    return new


# ------------------------------------------------------------------------------------------ statistics
def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of two orderings (ties count neither way)."""
    n = len(a)
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            x, y = a[i] - a[j], b[i] - b[j]
            if x == 0 and y == 0:
                continue
            if x == 0:
                ties_a += 1
            elif y == 0:
                ties_b += 1
            elif (x > 0) == (y > 0):
                conc += 1
            else:
                disc += 1
    den = ((conc + disc + ties_a) * (conc + disc + ties_b)) ** 0.5
    return (conc - disc) / den if den else float("nan")


def config_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Kendall's tau and the predicted fastest's measured epoch over the measured fastest's."""
    pts = [(r["label"], r["predicted_epoch_s"], r["measured"]["epoch_s"]) for r in rows
           if r.get("measured", {}).get("epoch_s") and r.get("predicted_epoch_s")]
    if len(pts) < 2:
        return {"points": len(pts)}
    tau = kendall_tau([p[1] for p in pts], [p[2] for p in pts])
    by_pred = min(pts, key=lambda p: p[1])
    by_meas = min(pts, key=lambda p: p[2])
    return {"points": len(pts), "tau": tau, "predicted_fastest": by_pred[0], "measured_fastest": by_meas[0],
            "predicted_fastest_s": by_pred[2], "measured_fastest_s": by_meas[2],
            "fastest_ratio": by_pred[2] / by_meas[2]}


def strategy_errors(configs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per strategy over every configuration: median and worst relative error of the epoch time,
    and the same of the cost model alone (``model_*``: before the strategy factor)."""
    errs: dict[str, list[tuple[float, str, float]]] = {}
    for name, rows in configs.items():
        for r in rows:
            m = r.get("measured", {}).get("epoch_s")
            if m and r.get("predicted_epoch_s") is not None:
                model = r.get("model_epoch_s", r["predicted_epoch_s"])
                errs.setdefault(r["strategy"], []).append(
                    (abs(r["predicted_epoch_s"] - m) / m, f"{name}: {r['label']}", abs(model - m) / m))
    out = {}
    for s, e in errs.items():
        worst = max(e)
        out[s] = {"median": statistics.median(x for x, _, _ in e), "worst": worst[0], "worst_at": worst[1],
                  "points": len(e), "model_median": statistics.median(x for _, _, x in e),
                  "model_worst": max(x for _, _, x in e)}
    return out


# ------------------------------------------------------------------------------------------ the run
def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.advise.advice import CANDIDATES, advise
    from gnnflow.advise.calibrate import calibrate, read_calibration
    from gnnflow.advise.strategy_probe import probe_into, probe_settings
    from gnnflow.config import TrainConfig, parse_fanouts
    from gnnflow.errors import ConfigError

    t0 = time.perf_counter()
    graphs = [g for g in str(args.graphs).split(",") if g]
    unknown = sorted(set(graphs) - set(GRAPHS))
    if unknown:
        raise ConfigError(f"--graphs: unknown {unknown}; choose from {', '.join(GRAPHS)}")
    if args.remeasure < 0:
        raise ConfigError(f"--remeasure: {args.remeasure}; give 0 (never) or more")
    workdir = Path(args.workdir)  # made once the arguments are known good: a refusal writes nothing
    workdir.mkdir(parents=True, exist_ok=True)
    workers = [int(w) for w in str(args.workers).split(",") if w]
    cal_path = Path(args.calibration) if args.calibration else workdir / "calibration.json"
    if not args.calibration and not (args.reuse and cal_path.exists()):
        log.info("bench advise: calibrating this machine")
        cal = calibrate(sorted(set(workers)), models=tuple(dict.fromkeys(["gcn", args.model])))
        if not args.no_strategy_probe:
            probe_into(cal, workers, probe_settings(model=args.model, hidden=args.hidden,
                                                    fanouts=tuple(parse_fanouts(args.fanouts)),
                                                    batch_size=args.batch_size))
        cal_path.write_text(cal.to_json())
    cal = read_calibration(cal_path)
    candidates = BENCH_CANDIDATES if args.candidates == "bench" else CANDIDATES
    configs: dict[str, list[dict[str, Any]]] = {}
    remeasured: dict[str, dict[str, Any]] = {}  # configuration -> how the host changed, whether the kept one was steady
    for g in graphs:
        store = graph_store(workdir, g)
        for p in workers:
            name = f"{g}-w{p}"
            path = workdir / f"{name}.json"
            bk = book(workdir, store, g, p)
            # the graph and book just written are flushed before timing: the kernel's writeback of
            # their dirty pages ran beside the first candidates otherwise (the host's cores of 2 busy
            # processes 1.87 instead of 2.00 at the start of products-w2, its first candidate,
            # single, measured 0.179 s against 0.140 s in products-w4 of the same run)
            os.sync()
            base = TrainConfig(graph=str(store), model=args.model, hidden=args.hidden,
                               fanouts=parse_fanouts(args.fanouts), num_layers=len(parse_fanouts(args.fanouts)),
                               batch_size=args.batch_size, workers=p,
                               gcn_degrees="block")  # what the DistDGL peer computes too
            old = json.loads(path.read_text()) if args.reuse and path.exists() else None
            if old is not None:
                host = old.get("host") or host_state(cal, p)
                apply_host(cal, host)
                adv = advise(base, str(bk), cal, candidates=candidates, calibration_path=str(cal_path))
                measured = {r["label"]: r.get("measured") for r in old["rows"]}
                for r in adv.rows:
                    r.measured = measured.get(r.label)
            else:
                adv, host = measure_config(name, p, base, str(bk), cal, candidates, str(cal_path), args)
            data = adv.to_dict()
            data["host"] = host
            path.write_text(json.dumps(data, indent=1, default=str))
            configs[name] = [r.to_dict() for r in adv.rows]
            if host.get("changed"):
                remeasured[name] = {"changed": host["changed"],
                                    "steady": host_change(host["before"], host["after"]) is None}
    return summarize(configs, cal_path, args, time.perf_counter() - t0, remeasured)


def measure_config(name: str, p: int, base: Any, bk: str, cal: Any, candidates: Any, cal_path: str,
                   args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """One configuration's advice with every candidate measured, and the host's state at both
    ends; measured again (at most ``args.remeasure`` times) while the host changed in between."""
    from gnnflow.advise.advice import advise, measure_top

    changed: list[str] = []
    for attempt in range(1 + int(args.remeasure)):
        log.info("bench advise: %s: measuring the host's state", name)
        before = host_state(cal, p, measure=True)
        adv = advise(base, bk, cal, candidates=candidates, calibration_path=cal_path)
        log.info("bench advise: %s: measuring %d candidates", name, len(adv.ranked))
        measure_top(adv, len(adv.ranked), epochs=args.epochs, timeout_s=args.timeout)
        after = host_state(cal, p, measure=True)
        change = host_change(before, after)
        if change is None:
            break
        changed.append(change)
        if attempt < args.remeasure:
            log.warning("bench advise: %s: the host changed during the measurements (%s); measuring again",
                        name, change)
    host = {"before": before, "after": after, "changed": changed}
    apply_host(cal, host)  # the host's state over the measurements: the mean of both ends
    return _repredict(adv, base, bk, cal, candidates, cal_path), host


def summarize(configs: dict[str, list[dict[str, Any]]], cal_path: Path, args: argparse.Namespace,
              wall: float, remeasured: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The statistics, ratios and summary of a grid's advice files (``remeasured``: the
    configurations measured again: how the host changed each time (``changed``) and whether it
    was steady during the measurement kept (``steady``))."""
    per_strategy = strategy_errors(configs)
    per_config = {name: config_figures(rows) for name, rows in configs.items()}
    setting = f"{args.model} {args.hidden}, fanouts {args.fanouts}, global batch {args.batch_size}"
    ratios = []
    for name, c in per_config.items():
        if "fastest_ratio" in c:
            ratios.append(ratio(f"{name}: predicted fastest / measured fastest epoch",
                                _op(c["predicted_fastest_s"], f"{c['predicted_fastest']} (predicted fastest), {name}, {setting}"),
                                _op(c["measured_fastest_s"], f"{c['measured_fastest']} (measured fastest), {name}, {setting}"),
                                goal="<= 1.1"))
    stats = {}
    for s, e in per_strategy.items():
        stats[f"{s}: median |pred - meas| / meas"] = {"value": e["median"], "goal": "<= 0.25",
                                                      "computed_from": f"{e['points']} measured epochs"}
        stats[f"{s}: worst |pred - meas| / meas"] = {"value": e["worst"], "goal": "<= 0.5",
                                                     "computed_from": f"{e['points']} measured epochs, worst {e['worst_at']}"}
    for name, c in per_config.items():
        if "tau" in c:
            stats[f"{name}: Kendall tau, predicted vs measured order"] = {
                "value": c["tau"], "goal": ">= 0.7", "computed_from": f"{c['points']} candidates"}
    head_name = "median over strategies of the median relative error"
    head = statistics.median(e["median"] for e in per_strategy.values()) if per_strategy else float("nan")
    stats[head_name] = {"value": head, "computed_from": f"{len(per_strategy)} strategies"}
    result = {"configs": per_config, "strategies": per_strategy, "statistics": stats, "ratios": ratios,
              "ratio": head, "ratio_name": head_name, "calibration": str(cal_path), "wall_s": wall,
              "setting": setting, "remeasured": dict(remeasured or {})}
    result["summary"] = summary_text(result)
    return result


def _op(value: float, what: str) -> dict[str, Any]:
    from gnnflow.bench.ratios import operand

    return operand(value, "s/epoch", what, "measured")


def summary_text(result: dict[str, Any]) -> str:
    lines = [f"bench advise ({result['setting']}; {result['wall_s'] / 60:.1f} min): per strategy |pred - meas| / meas"]
    for s, e in sorted(result["strategies"].items()):
        lines.append(f"  {s:10s} median {100 * e['median']:5.1f} %  worst {100 * e['worst']:5.1f} % "
                     f"({e['points']} points; worst {e['worst_at']}; model alone {100 * e['model_median']:.0f} / "
                     f"{100 * e['model_worst']:.0f} %)")
    lines.append("per configuration: Kendall tau; predicted fastest vs measured fastest")
    for name, c in result["configs"].items():
        if "tau" in c:
            lines.append(f"  {name:14s} tau {c['tau']:+.2f}  predicted {c['predicted_fastest']} "
                         f"{c['predicted_fastest_s']:.3f} s vs measured {c['measured_fastest']} "
                         f"{c['measured_fastest_s']:.3f} s ({100 * (c['fastest_ratio'] - 1):+.0f} %)")
    for name, r in result.get("remeasured", {}).items():
        lines.append(f"  {name}: the host changed during {len(r['changed'])} measurement(s) ({'; '.join(r['changed'])}); "
                     + ("kept the one after" if r["steady"] else "kept the last, the host changing during it too"))
    return "\n".join(lines)
