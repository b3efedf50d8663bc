"""``gnnflow advise``: which strategy to use for a graph on this cluster (docs/advise.md).

::

    gnnflow advise --graph G [--partition B] --workers P [--nnodes N] [--device cpu|cuda]
                   [--model M --hidden H --fanouts 10,10 --batch-size B ...] [--calibration FILE]
                   [--measure K] [--format text|json|markdown] [--out FILE]
    gnnflow advise --calibrate [--calibration FILE] [--calibrate-workers 2,4] [--no-strategy-probe]

The training settings are ``gnnflow train``'s flags (or ``--config``); ``--strategy`` (or
``--strategies a,b``) keeps those candidates only.  Without ``--partition`` a METIS book of
``--workers`` parts is made in ``--workdir`` (once).  Without a calibration file the machine is
calibrated first and the file kept (``--calibration``, default
``$GNNFLOW_CALIBRATION`` or ``~/.cache/gnnflow/advise/calibration-<host>.json``).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
from pathlib import Path

log = logging.getLogger("gnnflow.advise")
FORMATS = ("text", "json", "markdown")


def default_calibration() -> Path:
    env = os.environ.get("GNNFLOW_CALIBRATION")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return Path(base) / "gnnflow" / "advise" / f"calibration-{platform.node() or 'host'}.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gnnflow.config import add_train_arguments

    add_train_arguments(parser)
    group = parser.add_argument_group("advice")
    group.add_argument("--nnodes", type=int, default=1, help="hosts the ranks are spread over (default 1)")
    group.add_argument("--strategies", default=None, help="comma-separated strategies to consider (default: all)")
    group.add_argument("--calibration", default=None, metavar="FILE",
                       help=f"this machine's rates (default: $GNNFLOW_CALIBRATION or {default_calibration()}; "
                            "made when missing)")
    group.add_argument("--calibrate", action="store_true",
                       help="measure this machine's rates now and write --calibration (then advise if --graph)")
    group.add_argument("--calibrate-workers", default="2,4",
                       help="rank counts whose collectives the calibration measures (default 2,4; --workers too)")
    group.add_argument("--no-strategy-probe", action="store_true",
                       help="calibrate without training every candidate on the probe graphs (faster; the "
                            "predictions are then the cost model's alone, docs/advise.md)")
    group.add_argument("--measure", type=int, default=0, metavar="K",
                       help="train the K best candidates for a short run each and print measured beside predicted")
    group.add_argument("--measure-epochs", type=int, default=2, help="epochs of a measured run; the first is "
                       "left out of the figure (default 2)")
    group.add_argument("--probe-batches", type=int, default=None, metavar="K",
                       help="sample only the first K batches of each rank (default: the whole epoch)")
    group.add_argument("--format", choices=FORMATS, default="text")
    group.add_argument("--workdir", default="results/advise", help="where a missing partition book is made")
    group.add_argument("--report", nargs="+", default=None, metavar="ADVICE.json",
                       help="write advice.md (--out) and its figure (--figure) from advice files (--format json) "
                            "and the measured epochs of the runs in --runs")
    group.add_argument("--runs", nargs="*", default=[], metavar="RUNDIR", help="with --report: run directories")
    group.add_argument("--figure", default=None, help="with --report: the predicted vs measured figure (PNG)")


def main(args: argparse.Namespace) -> int:
    from gnnflow.errors import ConfigError

    if args.report:
        return _report(args)
    cal_path = Path(args.calibration) if args.calibration else default_calibration()
    workers = [int(w) for w in str(args.calibrate_workers).split(",") if w.strip()]
    if args.workers and args.workers > 1:
        workers = sorted(set(workers) | {int(args.workers)})
    if args.calibrate:
        _calibrate(cal_path, workers, args)
        if not args.graph:
            return 0
    if not args.graph:
        raise ConfigError("--graph is required (or --calibrate alone)")
    if not args.workers:
        raise ConfigError("--workers P is required: the ranks to advise for")
    cal = _calibration(cal_path, workers, args)
    from gnnflow.advise.advice import advise, measure_top
    from gnnflow.advise.report import format_advice
    from gnnflow.config import config_from_args

    out = args.out
    args.out = None
    base = config_from_args(args)
    strategies = [s for s in (args.strategies or args.strategy or "").split(",") if s] or None
    book = args.partition or _default_book(base, args.workdir)
    adv = advise(base, book, cal, nnodes=args.nnodes, strategies=strategies, max_batches=args.probe_batches,
                 calibration_path=str(cal_path))
    if args.measure:
        measure_top(adv, args.measure, epochs=max(1, args.measure_epochs))
    text = format_advice(adv, args.format)
    if out:
        from gnnflow.io import atomic_file

        with atomic_file(out) as tmp:
            tmp.write_text(text)
        log.info("advice written to %s", out)
    else:
        sys.stdout.write(text)
    return 0


def _report(args: argparse.Namespace) -> int:
    from gnnflow.advise.report import advice_figure, advice_markdown, attach_runs, load_advice
    from gnnflow.errors import ConfigError
    from gnnflow.io import atomic_file

    if not args.out:
        raise ConfigError("--report: give --out FILE.md")
    advices = [load_advice(p) for p in args.report]
    for adv in advices:
        attach_runs(adv, args.runs)
    if args.figure:
        advice_figure(advices, args.figure)
    with atomic_file(args.out) as tmp:
        tmp.write_text(advice_markdown(advices, args.figure))
    return 0


def _calibrate(path: Path, workers: list[int], args: argparse.Namespace) -> None:
    from gnnflow.advise.calibrate import calibrate
    from gnnflow.io import atomic_file

    models = tuple(dict.fromkeys(["sage", "gcn", *([args.model] if args.model in ("gat",) else [])]))
    probe = None if args.no_strategy_probe else _probe_settings(args)  # a bad --config fails before measuring
    cal = calibrate(workers, device=args.device or "cpu", models=models)
    if probe is not None and cal.device == "cpu":
        from gnnflow.advise.strategy_probe import probe_into

        probe_into(cal, workers, probe)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp:
        tmp.write_text(cal.to_json())
    log.info("calibration written to %s", path)


def _probe_settings(args: argparse.Namespace) -> dict[str, object]:
    """The strategy probe's training settings: the command's model (a built-in homogeneous one;
    else GraphSAGE), hidden width, fanouts and batch size (flags, else ``--config``'s keys), else
    ``gnnflow train``'s defaults."""
    from gnnflow.advise.strategy_probe import probe_settings
    from gnnflow.config import TrainConfig, load_settings, parse_fanouts

    d = TrainConfig(graph="-")
    given = load_settings(args.config) if getattr(args, "config", None) else {}

    def pick(key: str) -> object:
        value = getattr(args, key, None)
        return value if value is not None else given.get(key)

    fanouts = pick("fanouts") or d.fanouts
    fanouts = parse_fanouts(fanouts) if isinstance(fanouts, str) else fanouts
    if not all(isinstance(f, int) for f in fanouts):  # per-relation fanouts: a relational model's
        fanouts = d.fanouts
    model = pick("model")
    return probe_settings(model=model if model in ("sage", "gcn", "gat") else d.model,
                          hidden=int(pick("hidden") or d.hidden), fanouts=tuple(fanouts),
                          batch_size=int(pick("batch_size") or d.batch_size))


def _calibration(path: Path, workers: list[int], args: argparse.Namespace) -> object:
    from gnnflow.advise.calibrate import read_calibration

    if not path.exists() and not args.calibration:
        log.info("no calibration of this machine yet: measuring it (once) into %s", path)
        _calibrate(path, workers, args)
    cal = read_calibration(path)
    model = args.model or "sage"
    if model in ("sage", "gcn", "gat") and model not in cal.layers:
        log.info("the calibration has no %s layers: measuring them", model)
        import torch

        from gnnflow.advise.calibrate import calibrate_layers, calibration_graph

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            cal.layers.update(calibrate_layers(*calibration_graph(), models=(model,)))
        finally:
            torch.set_num_threads(before)
        path.write_text(cal.to_json())
    return cal


def _default_book(cfg: object, workdir: str) -> str | None:
    """A METIS book of ``--workers`` parts in ``workdir`` (made once)."""
    from gnnflow.data.store import open_store
    from gnnflow.partition.api import partition_graph

    workers = int(getattr(cfg, "workers", 1))
    if workers <= 1:
        return None
    graph = Path(str(cfg.graph))
    out = Path(workdir) / f"{graph.name}-metis{workers}"
    if (out / "meta.json").exists():
        from gnnflow.partition.book import check_book_matches_graph

        check_book_matches_graph(out, graph)
        return str(out)
    log.info("no --partition: partitioning %s into %d METIS parts in %s", graph, workers, out)
    partition_graph(open_store(graph), "metis", workers, out, overwrite=True)
    return str(out)
