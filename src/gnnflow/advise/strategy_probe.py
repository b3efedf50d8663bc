"""The strategies' own short runs on this machine: what the cost model's microbenchmarks miss,
measured once per machine (``strategies`` of the calibration file, ``gnnflow advise --calibrate``).

The cost model (:mod:`gnnflow.advise.cost`) prices each stage from counts and the rates of small
pieces timed alone.  What no rate covers is real and differs by strategy: the per-iteration Python
work between the timed pieces, the distributed sampler's owner lookups and stitching, HEC's cache
lookups and push packing, P3's column slicing, the DistDGL peer's servers and RPC, ranks
contending for the same cores at every collective (docs/advise.md, "What the model ignores").

So the calibration also trains every candidate of the advice (:data:`gnnflow.advise.advice.
CANDIDATES`) for a few epochs on four graphs of its own (:data:`PROBE_GRAPHS`: from a light one,
narrow and sparse, to a large one, wide and dense; each partitioned by METIS into P parts for every
calibrated rank count P), predicts the same candidates with the rates just measured, and fits per
rank count and candidate the **strategy factor**: measured epoch = ``factor`` x modelled epoch +
``overhead`` x iterations per rank (non-negative least squares over the graphs, each
residual over the square root of its measured epoch; :func:`fit`; a one-process candidate, which runs the same at every rank count, gets one
fit over its runs at all of them).  The advice applies it to the modelled epoch: the model gives how the epoch
grows with the graph, the batch and the layers; the factor what this machine and this
implementation add to the model's pieces, in proportion and per iteration.  No probe graph is
one of the graphs ``gnnflow bench advise`` checks the predictions on.

Fits are kept per model (the probe trains the model the calibration was asked for, with its hidden
width, fanouts and batch size); :meth:`gnnflow.advise.calibrate.Calibration.strategy_factor` finds
a candidate's (its own, else its strategy's, at the nearest rank count, else another model's,
else none: factor 1, overhead 0).  This module runs above the advice (it predicts and measures
through :mod:`gnnflow.advise.advice`); the commands call :func:`probe_into` after
:func:`gnnflow.advise.calibrate.calibrate`.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("gnnflow.advise")

#: the probe graphs (:func:`gnnflow.data.synthetic.prepare_synthetic` options): light, medium,
#: heavy and large, so that per-iteration work differs by about ten times between the ends (four
#: points for two unknowns: one noisy run moves the fit less), the large one's full-graph epoch
#: 0.6 times the products-shaped slice's (with heavy the heaviest, 0.35 times, MG-GCN's 4-rank fits
#: rested on epochs of 10-70 ms and were extrapolated to it: runs U, V and X missed it by 14-23 %); none
#: of ``bench advise``'s graphs
PROBE_GRAPHS: dict[str, dict[str, Any]] = {
    "light": {"num_nodes": 16_384, "avg_degree": 8.0, "feature_dim": 16, "num_classes": 8, "train_frac": 0.5,
              "seed": 11},
    "medium": {"num_nodes": 24_576, "avg_degree": 20.0, "feature_dim": 48, "num_classes": 16, "train_frac": 0.3,
               "seed": 13},
    "heavy": {"num_nodes": 40_000, "avg_degree": 40.0, "feature_dim": 128, "num_classes": 32, "train_frac": 0.2,
              "seed": 12},
    "large": {"num_nodes": 64_000, "avg_degree": 48.0, "feature_dim": 128, "num_classes": 32, "train_frac": 0.125,
              "seed": 14},
}
#: epochs of each probe run (the first is left out: it fills pipelines and touches memory first;
#: the median of the other five: with 3 (two kept) the 4-rank fits moved up to 2.2 times between
#: two calibrations of the same host, docs/advise.md "Measured errors")
PROBE_EPOCHS = 6
#: the factor's bounds: one outside them means a probe run went wrong (a stall, a host suddenly
#: busy): it is clipped, and logged
BOUNDS = (0.25, 8.0)


def probe_settings(model: str, hidden: int, fanouts: tuple[int, ...], batch_size: int) -> dict[str, Any]:
    """The training settings the probe runs use (kept in the calibration file beside the factors);
    the commands pass their own (``gnnflow advise``'s flags or config, ``bench advise``'s)."""
    return {"model": model, "hidden": int(hidden), "fanouts": [int(f) for f in fanouts], "batch_size": int(batch_size)}


def probe_strategies(cal: Any, workers: list[int], settings: dict[str, Any], workdir: str | Path | None = None,
                     epochs: int = PROBE_EPOCHS, timeout_s: float = 1800.0,
                     progress: Callable[[str], None] = log.info, graphs: dict[str, dict[str, Any]] | None = None,
                     candidates: list[tuple[str, dict[str, Any]]] | None = None,
                     ) -> dict[str, dict[str, list[list[float]]]]:
    """Per rank count (``"2"``, ``"4"``) and candidate label, the points of the probe graphs
    (``graphs``, default :data:`PROBE_GRAPHS`) for ``candidates`` (default the advice's), with
    ``cal``'s rates (its own factors left out): ``[modelled epoch, iterations per rank, measured
    epoch]`` per graph; a one-process candidate's, the same run at every rank count, under ``"1"``
    (:func:`fits` makes the factors of them).  ``workdir`` keeps the graphs and books (default: a
    temporary directory, removed after)."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="gnnflow-probe-") as tmp:
            return probe_strategies(cal, workers, settings, tmp, epochs, timeout_s, progress, graphs, candidates)
    from gnnflow.advise.advice import CANDIDATES, advise, measure_top
    from gnnflow.config import TrainConfig
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.base import strategy_class

    workdir = Path(workdir)
    saved, cal.strategies = cal.strategies, {}  # the model alone
    out: dict[str, dict[str, list[list[float]]]] = {}
    try:
        for p in sorted({int(w) for w in workers if int(w) > 1}):
            out[str(p)] = {}  # every probed rank count gets the one-process fits, whatever else fails
            for name, options in (graphs or PROBE_GRAPHS).items():
                graph = workdir / name
                if not (graph / "meta.json").exists():
                    progress(f"calibrating strategies: generating the {name} probe graph")
                    prepare_synthetic(graph, overwrite=True, name=f"advise-probe-{name}", **options)
                book = workdir / f"{name}-metis{p}"
                if not (book / "meta.json").exists():
                    partition_graph(graph, "metis", p, book, overwrite=True)
                base = TrainConfig(graph=str(graph), model=settings["model"], hidden=settings["hidden"],
                                   fanouts=list(settings["fanouts"]), num_layers=len(settings["fanouts"]),
                                   batch_size=settings["batch_size"], workers=p, gcn_degrees="block")
                adv = advise(base, str(book), cal, candidates=candidates or CANDIDATES)
                progress(f"calibrating strategies: {len(adv.ranked)} candidates on {p} ranks, {name} graph")
                measure_top(adv, len(adv.ranked), epochs=epochs, timeout_s=timeout_s)
                alone = {r.label for r in adv.ranked if not strategy_class(r.strategy).distributed}
                for label, point in probe_points(adv.ranked).items():
                    key = "1" if label in alone else str(p)
                    out.setdefault(key, {}).setdefault(label, []).append(list(point))
    finally:
        cal.strategies = saved
    return out


def fits(points: dict[str, dict[str, list[list[float]]]]) -> dict[str, dict[str, list[float]]]:
    """Per rank count and candidate label, ``[factor, overhead seconds per iteration]``
    (:func:`fit`) of :func:`probe_strategies`'s ``points``; a one-process candidate's (``"1"``)
    one fit over its runs at every rank count, kept under each (a fit per rank count split the
    same runs' noise in two)."""
    alone = {label: fit(pts, label) for label, pts in points.get("1", {}).items()}
    return {p: {**{label: fit(pts, label) for label, pts in per_p.items()}, **alone}
            for p, per_p in points.items() if p != "1"}


def probe_points(rows: list[Any]) -> dict[str, tuple[float, int, float]]:
    """``label -> (modelled epoch, iterations per rank, measured epoch)`` of the rows that have both."""
    out = {}
    for r in rows:
        measured = (r.measured or {}).get("epoch_s")
        if not measured or not r.predicted_s:
            if r.measured and "error" in r.measured:
                log.warning("calibrating strategies: %s failed (%s); it gets no factor", r.label, r.measured["error"])
            continue
        out[r.label] = (float(r.prediction.model_epoch_s), int(r.prediction.iterations), float(measured))
    return out


def fit(points: list[tuple[float, int, float]], label: str = "") -> list[float]:
    """``[factor, overhead]`` with ``measured = factor x modelled + overhead x iterations`` over
    ``points`` (modelled, iterations, measured): non-negative least squares, each residual
    weighted by ``1 / sqrt(measured)`` (a measured epoch's noise grows with it as a sum of
    pieces' does: variance in proportion to the time; relative errors, ``1 / measured``, let
    the light probe graph's epoch, most of it fixed costs that vary from run to run, set the
    slope as much as the heavy one's, and the 4-rank MG-GCN fit of run O came out at factor 0.80
    plus 15 ms an epoch, 11 % short on the products-shaped slice); one point, or a fit whose
    factor falls below :data:`BOUNDS`, gives the factor alone (the points' geometric mean ratio)."""
    import numpy as np

    from gnnflow.advise.calibrate import nnls

    m = np.array([p[0] for p in points])
    its = np.array([p[1] for p in points], dtype=float)
    y = np.array([p[2] for p in points])
    factor, overhead = float(np.exp(np.mean(np.log(y / m)))), 0.0
    if len(points) > 1 and len(set(zip(m / its, its, strict=True))) > 1:
        a, b = nnls(np.stack([m, its], axis=1), y, weights=1.0 / np.sqrt(y))
        if a >= BOUNDS[0]:
            factor, overhead = float(a), float(b)
    if not BOUNDS[0] <= factor <= BOUNDS[1]:
        log.warning("calibrating strategies: %s: factor %.2f clipped (measured %s s against modelled %s s)",
                    label, factor, [round(v, 3) for v in y], [round(v, 3) for v in m])
        factor = min(max(factor, BOUNDS[0]), BOUNDS[1])
    return [round(factor, 4), round(overhead, 6)]


def probe_into(cal: Any, workers: list[int], settings: dict[str, Any], workdir: str | Path | None = None,
               progress: Callable[[str], None] = log.info, **probe_options: Any) -> None:
    """Run :func:`probe_strategies` (with ``probe_options``) on the calibration ``cal`` with
    ``settings`` and keep its fits under their model (replacing that model's fits of the probed
    rank counts), with what they were measured on (``cal.strategy_probe``)."""
    import time

    points = probe_strategies(cal, workers, settings, workdir=workdir, progress=progress, **probe_options)
    cal.strategies.setdefault(settings["model"], {}).update(fits(points))
    cal.strategy_probe[settings["model"]] = {"settings": settings,
                                             "graphs": probe_options.get("graphs") or PROBE_GRAPHS,
                                             "points": points,
                                             "created": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
