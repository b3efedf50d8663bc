"""Short measured epochs of candidate configurations (``gnnflow advise --measure K``, ``gnnflow bench
advise``), to put beside the predictions.

The distributed candidates of one rank count run in ONE launch of the ranks, one after another:
each is prepared, trains ``epochs`` epochs (no evaluation: an epoch's time is training), and is
closed (its pipeline threads, sampler processes, servers stopped) before the next starts, so
nothing of one runs during another's timed epochs.  Single-process candidates run in this process
with every core's thread, as ``gnnflow train`` runs them.  The measured epoch time of a candidate
is the slowest rank's wall time of ``run_epoch``, the median over the epochs after the first (the
first fills pipelines and touches memory for the first time); the strategy is told it trains
more epochs than it runs (:func:`scheduled_epochs`: as many more as its pipeline's queues could
hold at one batch an epoch), so that its pipeline works ahead during every measured epoch as it
does in every epoch but the last few of a real run (with one epoch more, the last one alone
measured 30-40 % faster; at seven batches an epoch split parallelism's and P3's sampling queue,
25 batches, emptied over the last three, whose epochs fell from 0.235 to 0.155 s); stage
timers and counters come from each rank's :class:`~gnnflow.results.schema.Recorder`.  A
candidate that fails is reported with its error; the others still run (a failure in one rank is
the same failure in every rank: the strategies' refusals are deterministic).
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
from typing import Any

log = logging.getLogger("gnnflow.advise")


def run_candidate(ctx: Any, cfg_dict: dict[str, Any], epochs: int) -> dict[str, Any]:
    """Prepare one candidate on this rank and train ``epochs`` epochs: per epoch its wall time,
    this rank's CPU time, stage timers and counters."""
    from gnnflow.config import TrainConfig
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.base import strategy_class

    # more epochs than it runs: a pipelined strategy samples and loads batches ahead, up to its
    # queues, and stops after the last epoch, so each measured epoch is a steady one
    cfg = TrainConfig.from_dict({**cfg_dict, "epochs": scheduled_epochs(cfg_dict, epochs)})
    cls = strategy_class(cfg.strategy)
    strategy = cls(cfg, ctx)
    rows = []
    try:
        t0 = time.perf_counter()
        strategy.prepare()
        prepare_s = time.perf_counter() - t0
        for epoch in range(epochs):
            rec = Recorder(ctx.device)
            wall, cpu = time.perf_counter(), time.process_time()
            strategy.run_epoch(epoch, rec)
            rec.resolve()
            rows.append({"epoch": epoch, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                         "times": dict(rec.times), "counters": dict(rec.counters), "extra": dict(rec.extra)})
    finally:
        close = getattr(strategy, "close", None)
        if callable(close):
            close()
        del strategy
        gc.collect()
    return {"prepare_s": prepare_s, "epochs": rows}


def scheduled_epochs(cfg_dict: dict[str, Any], epochs: int) -> int:
    """The epochs a measured run tells its strategy: ``epochs``, one more, and as many more as
    its pipeline's queues hold batches (``options.capacities``, else the defaults), so that no
    measured epoch finds the pipeline done with its schedule even at one batch an epoch."""
    from gnnflow.strategies.minibatch.pipeline import DEFAULT_CAPACITIES

    caps = (cfg_dict.get("options") or {}).get("capacities") or DEFAULT_CAPACITIES
    return int(epochs) + 1 + sum(int(c) for c in caps)


#: keys of a candidate that are not training settings: its label and its own epoch count
NOT_SETTINGS = ("label", "measure_epochs")


def measure_rank(ctx: Any, cfg_dicts: list[dict[str, Any]], epochs: int) -> list[dict[str, Any]]:
    """Every candidate in turn on this rank (module-level: the spawner imports it), each for its
    ``measure_epochs`` where it has one, else ``epochs``."""
    out = []
    for d in cfg_dicts:
        if ctx.rank == 0:
            log.info("measuring %s", d.get("label", d["strategy"]))
        try:
            out.append(run_candidate(ctx, {k: v for k, v in d.items() if k not in NOT_SETTINGS},
                                     int(d.get("measure_epochs", epochs))))
        except Exception as exc:  # noqa: BLE001 - reported beside the prediction, the others go on
            out.append({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
    return out


def summarize(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One candidate's figures over its ranks: the measured epoch time (slowest rank, median over
    the epochs after the first), its stage times (slowest rank) and counts (summed over ranks)."""
    errors = [r["error"] for r in per_rank if "error" in r]
    if errors:
        return {"error": errors[0]}
    epochs = len(per_rank[0]["epochs"])
    use = range(1, epochs) if epochs > 1 else range(epochs)
    walls = [max(r["epochs"][e]["wall"] for r in per_rank) for e in use]
    stages: dict[str, float] = {}
    for name in {k for r in per_rank for k in r["epochs"][use[0]]["times"]}:
        stages[name] = statistics.median(max(r["epochs"][e]["times"].get(name, 0.0) for r in per_rank) for e in use)
    counts: dict[str, float] = {}
    for name in {k for r in per_rank for k in r["epochs"][use[0]]["counters"]}:
        counts[name] = statistics.median(sum(r["epochs"][e]["counters"].get(name, 0.0) for r in per_rank)
                                         for e in use)
    return {"epoch_s": float(statistics.median(walls)), "epochs_s": walls, "stages": stages, "counts": counts,
            "cpu_s": [statistics.median(r["epochs"][e]["cpu"] for e in use) for r in per_rank],
            "per_rank": [r["epochs"] for r in per_rank], "prepare_s": max(r["prepare_s"] for r in per_rank)}


def measure(candidates: list[dict[str, Any]], epochs: int = 2, timeout_s: float = 1800.0) -> list[dict[str, Any]]:
    """Measure ``candidates`` (training settings as :meth:`TrainConfig.to_dict` gives them, with an
    optional ``label`` and an optional ``measure_epochs`` of their own); returns one summary per
    candidate, in order."""
    from gnnflow.advise.collectives import rank_threads
    from gnnflow.config import STRATEGIES
    from gnnflow.runtime.context import RankContext
    from gnnflow.runtime.launch import run_ranks
    from gnnflow.strategies.base import strategy_class

    out: list[dict[str, Any] | None] = [None] * len(candidates)
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(candidates):
        if c["strategy"] not in STRATEGIES:
            out[i] = {"error": f"unknown strategy {c['strategy']!r}"}
        elif not strategy_class(c["strategy"]).distributed:
            import torch

            from gnnflow.advise.collectives import usable_cores

            ctx = RankContext(device=torch.device(c.get("device", "cpu")))
            before = torch.get_num_threads()
            torch.set_num_threads(usable_cores())  # as `gnnflow train` runs one process
            try:
                got = measure_rank(ctx, [c], epochs)[0]
            finally:
                torch.set_num_threads(before)
            out[i] = summarize([got])
        else:
            groups.setdefault(int(c["workers"]), []).append(i)
    for workers, idx in sorted(groups.items()):
        # the DistDGL peer initialises DGL's client once per process: each gets its own launch
        dgl = [i for i in idx if candidates[i]["strategy"] == "distdgl"]
        rest = [i for i in idx if candidates[i]["strategy"] != "distdgl"]
        for chunk in ([rest] if rest else []) + [[i] for i in dgl]:
            device = candidates[chunk[0]].get("device", "cpu")
            try:
                ranks = run_ranks(measure_rank, workers, [candidates[i] for i in chunk], epochs, device=device,
                                  timeout_s=timeout_s, threads_per_rank=rank_threads(workers))
            except Exception as exc:  # noqa: BLE001 - a launch that fails reports on its candidates
                for i in chunk:
                    out[i] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
                continue
            for k, i in enumerate(chunk):
                out[i] = summarize([r[k] for r in ranks])
    return [o if o is not None else {"error": "not measured"} for o in out]
