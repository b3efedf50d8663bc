"""The advice: every strategy and its main options for a graph and cluster, predicted, checked
against the memory preflight, ranked (issue 35.2).

:func:`advise` takes the training settings (a :class:`~gnnflow.config.TrainConfig`: model,
widths, fanouts, batch, workers), the partition book and a calibration, and returns one
:class:`Row` per candidate of :data:`CANDIDATES`: the predicted epoch time and its stages, the
preflight's peak memory per rank and whether the run fits this host, and why a candidate is
refused when it is (its strategy's own check, in the same words ``gnnflow train`` would use).
Candidates that fit are ranked by predicted epoch time; a refused one is never ranked.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from gnnflow.advise.calibrate import Calibration
from gnnflow.advise.cost import Prediction, Setting, predict
from gnnflow.advise.counts import ProbeInput, RankWork, probe
from gnnflow.errors import GnnflowError

log = logging.getLogger("gnnflow.advise")

#: the candidates, each strategy with its main options (its defaults first)
CANDIDATES: list[tuple[str, dict[str, Any]]] = [
    ("single", {}),
    ("data", {}),
    ("data", {"pipeline": False}),
    ("data", {"samplers": "process"}),
    ("distdgl", {}),
    ("distdgl", {"num_samplers": 0}),
    ("split", {}),
    ("p3", {}),
    ("hec", {}),
    ("hec", {"pushes_per_rank": 500}),
    ("fullbatch", {}),
    ("dgcl", {}),
    ("dgcl", {"planner": "p2p"}),
]
#: options that change timings but not what a probe counts
TIMING_ONLY = frozenset({"pipeline", "samplers", "num_samplers", "seeded_sampling", "capacities", "pipeline_mib",
                         "ddp", "overlap", "memory", "transpose", "project", "norm", "topology", "trace",
                         "stop_after_epoch", "sampling", "device_cache_mib"})


def label(strategy: str, options: dict[str, Any]) -> str:
    """``data`` / ``data pipeline=false`` / ``hec pushes_per_rank=500``."""
    if not options:
        return strategy
    words = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())
    return f"{strategy} {words}"


@dataclass
class Row:
    """One candidate of the advice."""

    label: str
    strategy: str
    options: dict[str, Any]
    workers: int
    settings: dict[str, Any] = field(default_factory=dict)  # TrainConfig.to_dict() of the run it stands for
    refused: str = ""  # why the strategy (or its preflight) will not run it
    fits: bool = False
    peak_mib: float = 0.0  # per rank, the preflight's
    host_mib: float = 0.0  # every process of the run on one host, the preflight's
    prediction: Prediction | None = None
    measured: dict[str, Any] | None = None
    rank: int | None = None

    @property
    def predicted_s(self) -> float | None:
        return self.prediction.epoch_s if self.prediction else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank, "label": self.label, "strategy": self.strategy,
                               "options": self.options, "workers": self.workers, "fits": self.fits,
                               "refused": self.refused, "peak_mib_per_rank": round(self.peak_mib, 1),
                               "host_mib": round(self.host_mib, 1), "settings": self.settings}
        if self.prediction is not None:
            out.update(predicted_epoch_s=self.prediction.epoch_s, reason=self.prediction.reason(),
                       predicted_stages=self.prediction.stages, dominant=self.prediction.dominant,
                       predicted_cpu_s=self.prediction.per_rank_cpu, iterations=self.prediction.iterations,
                       factor=self.prediction.factor, overhead_s=self.prediction.overhead_s,
                       model_epoch_s=self.prediction.model_epoch_s)
        if self.measured is not None:
            out["measured"] = {k: v for k, v in self.measured.items() if k != "per_rank"}
        return out


@dataclass
class Advice:
    """The rows of one advice and what it was computed from."""

    graph: str
    partition: str | None
    workers: int
    nnodes: int
    device: str
    model: str
    rows: list[Row]
    calibration: str = ""
    available_mib: float = 0.0
    available_source: str = ""
    probe_s: float = 0.0

    @property
    def ranked(self) -> list[Row]:
        return sorted((r for r in self.rows if r.rank is not None), key=lambda r: r.rank or 0)

    def to_dict(self) -> dict[str, Any]:
        return {"graph": self.graph, "partition": self.partition, "workers": self.workers, "nnodes": self.nnodes,
                "device": self.device, "model": self.model, "calibration": self.calibration,
                "available_mib": round(self.available_mib, 1), "available_source": self.available_source,
                "probe_s": round(self.probe_s, 2), "rows": [r.to_dict() for r in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=str)


def candidate_config(base: Any, strategy: str, options: dict[str, Any], book: str | None) -> Any:
    """The training settings of one candidate: ``base`` with the strategy, its options (the
    user's ``--opt`` values that are its own, then the candidate's) and the book it trains on
    (none for single-process training and for MG-GCN, which makes its own 1D rows)."""
    from gnnflow.strategies.base import strategy_class

    cls = strategy_class(strategy)
    opts = {**cls.Options.own(base.options if isinstance(base.options, dict) else base.options.to_dict()),
            **options}
    workers = int(base.workers) if cls.distributed else 1
    partition = book if cls.distributed and strategy != "fullbatch" else None
    cfg = base.replace(strategy=strategy, options=opts, workers=workers, partition=partition)
    return cls.parse_options(cfg)


def refusal(cfg: Any) -> str:
    """Why ``cfg``'s strategy would refuse it before any rank starts ('' when it would not)."""
    from gnnflow.strategies.base import strategy_class

    cls = strategy_class(cfg.strategy)
    try:
        cls.check_relational(cfg)
        cls.check_config(cfg)
        if cfg.strategy == "distdgl" and cfg.workers < 2:
            return "runs with --workers >= 2 (DGL's servers + trainers)"
        if cls.distributed and cfg.strategy not in ("fullbatch",) and cfg.workers > 1 and not cfg.partition:
            return "needs a partition book"
        if cfg.partition:
            from gnnflow.partition.meta import read_book_meta

            want = cls.book_parts(cfg)
            have = read_book_meta(cfg.partition).num_parts
            if want is not None and have != want:
                return f"needs a book of {want} parts, {cfg.partition} has {have}"
    except GnnflowError as exc:
        return str(exc).splitlines()[0]
    return ""


def memory_check(row: Row, cfg: Any, nnodes: int) -> None:
    """The memory preflight's estimate for ``cfg`` and whether its processes fit this host, as
    ``gnnflow train`` would decide (its local ranks: ``workers / nnodes``)."""
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.memory import (
        MIB,
        GraphSizes,
        available_memory,
        estimate,
        host_need,
        shortfall,
    )

    cls = strategy_class(cfg.strategy)
    sizes = GraphSizes.read(cfg.graph, cfg.partition if cls.distributed else None)
    est = estimate(cfg, sizes, cls)
    local = max(1, -(-int(cfg.workers) // max(1, nnodes))) if cls.distributed else 1
    need = host_need(est, cls, local)
    avail, source = available_memory()
    row.peak_mib, row.host_mib = est.max_rank / MIB, need / MIB
    row.fits = not avail or need <= avail
    if not row.fits and not cfg.force:
        row.refused = shortfall(cfg.strategy, local, need, est, avail, source)


def probe_key(cfg: Any) -> str:
    opts = {k: v for k, v in cfg.options.to_dict().items() if k not in TIMING_ONLY}
    if cfg.strategy == "dgcl" and opts.get("planner") != "replication":
        opts.pop("planner", None)
    return json.dumps([cfg.strategy, cfg.workers, opts], sort_keys=True, default=str)


def advise(base: Any, book: str | None, cal: Calibration, nnodes: int = 1, strategies: list[str] | None = None,
           candidates: list[tuple[str, dict[str, Any]]] | None = None, max_batches: int | None = None,
           calibration_path: str = "") -> Advice:
    """Predict, check and rank every candidate for the settings ``base`` (see the module docstring)."""
    from gnnflow.strategies.memory import MIB, available_memory

    chosen = [(s, o) for s, o in (candidates or CANDIDATES) if not strategies or s in strategies]
    rows: list[Row] = []
    works: dict[str, list[RankWork]] = {}
    inp: ProbeInput | None = None
    t0 = time.perf_counter()
    for strategy, options in chosen:
        name = label(strategy, options)
        try:
            cfg = candidate_config(base, strategy, options, book)
        except GnnflowError as exc:
            rows.append(Row(name, strategy, options, int(base.workers), refused=str(exc).splitlines()[0]))
            continue
        row = Row(name, strategy, options, int(cfg.workers), settings=cfg.to_dict())
        rows.append(row)
        row.refused = refusal(cfg)
        if row.refused:
            continue
        memory_check(row, cfg, nnodes)
        key = probe_key(cfg)
        if key not in works:
            log.info("advise: counting %s on %d rank(s)", name, cfg.workers)
            if inp is None:
                inp = ProbeInput.read(cfg, book, max_batches=max_batches)
            inp.cfg = cfg
            works[key] = probe(cfg, inp)
        assert inp is not None
        st = Setting(cfg=cfg, feature_dim=inp.feature_dim, num_classes=inp.num_classes, num_nodes=inp.num_nodes,
                     workers=int(cfg.workers), nnodes=nnodes if cfg.workers > 1 else 1, device=cfg.device)
        # the probe trains on CPU ranks: a GPU candidate keeps the model alone
        factor, overhead = cal.strategy_factor(str(cfg.model), int(base.workers), name, strategy) \
            if str(cfg.device) == "cpu" else (1.0, 0.0)
        row.prediction = predict(cal, st, works[key]).scaled(factor, overhead)
    ok = sorted((r for r in rows if r.prediction is not None and not r.refused), key=lambda r: r.predicted_s or 0)
    for i, r in enumerate(ok):
        r.rank = i + 1
    avail, source = available_memory()
    return Advice(graph=str(base.graph), partition=book, workers=int(base.workers), nnodes=nnodes,
                  device=str(base.device), model=str(base.model), rows=ok + [r for r in rows if r not in ok],
                  calibration=calibration_path, available_mib=avail / MIB, available_source=source,
                  probe_s=time.perf_counter() - t0)


#: a measured run covers at least this many iterations after its first epoch (more epochs for
#: a candidate with few iterations an epoch: a full-batch epoch is one, its median of two or three
#: epochs would rest on two or three iterations; with six, DGCL's epochs on the products-shaped
#: slice at 2 ranks still spread over 0.129-0.249 s in run O, docs/advise.md)
MIN_MEASURED_ITERATIONS = 12


def measure_epochs(epochs: int, iterations: int) -> int:
    """Epochs of a measured run of a candidate with ``iterations`` per epoch: ``epochs``, or more
    to cover :data:`MIN_MEASURED_ITERATIONS` after the first (at most ``3 x epochs``)."""
    need = 1 + -(-MIN_MEASURED_ITERATIONS // max(1, int(iterations)))
    return max(epochs, min(need, 3 * epochs)) if epochs > 1 else epochs


def measure_top(advice: Advice, k: int, epochs: int = 2, timeout_s: float = 1800.0) -> None:
    """Measure the ``k`` best-ranked candidates (one short run each, :mod:`gnnflow.advise.measure`;
    ``epochs`` each, more for few iterations an epoch: :func:`measure_epochs`) and put the
    figures on their rows."""
    from gnnflow.advise.measure import measure

    top = advice.ranked[:k]
    got = measure([{**r.settings, "label": r.label,
                    "measure_epochs": measure_epochs(epochs, r.prediction.iterations if r.prediction else 1)}
                   for r in top], epochs=epochs, timeout_s=timeout_s)
    for r, m in zip(top, got, strict=True):
        r.measured = m
