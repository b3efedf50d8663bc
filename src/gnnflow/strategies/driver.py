"""The training driver: runs any strategy for ``cfg.epochs`` epochs on ``cfg.workers`` ranks.

For each epoch and rank: a fresh :class:`Recorder`, ``run_epoch``, evaluation
every ``eval_every`` epochs (and after the last), one :class:`EpochRecord`.
Per-rank records are gathered to rank 0 (``torch.distributed.gather_object``),
which alone writes the run directory::

    RUNDIR/run.json        config, "batch" (global mini-batch and per-rank share), provenance
                           (+ status, "final" and "best" epochs at the end)
    RUNDIR/records.jsonl   one row per epoch x rank (results.schema)
    RUNDIR/ckpt/last.pt    after every epoch: epoch, world size, torch/numpy/python
                           RNG states and every rank's ``Strategy.state_dict()``
                           (loadable with ``torch.load(weights_only=True)``)
    RUNDIR/model.pt        rank 0's final model weights
    RUNDIR/ckpt/best.pt    as last.pt, of the evaluation epoch with the best validation accuracy
                           (ties: lower validation loss; gnnflow.results.selection)
    RUNDIR/model-best.pt   rank 0's model weights of that epoch

``resume=True`` loads ``ckpt/last.pt`` (rank 0 reads it and hands every rank its
state, so across hosts only rank 0's host needs the run directory), drops any records of
epochs after the checkpoint (written before a crash that preceded the next
checkpoint) and continues from the next epoch, so records (up to timing
columns) and weights equal those of an uninterrupted run.  The best epoch so
far is read back from the kept records.  Strategies that own
random generators beyond torch's, numpy's and Python's global ones put their
states into ``state_dict`` (as :class:`~gnnflow.strategies.single.SingleProcess` does).

Test hook: the option ``stop_after_epoch = k`` ends the run right after epoch
``k``'s checkpoint, as if the process had been killed there.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError, StoreError
from gnnflow.io import proc_memory, provenance, save_tensors, write_json
from gnnflow.results.schema import EpochRecord, Recorder, write_records
from gnnflow.results.selection import best_of_records, best_row, better
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.watchdog import note_progress
from gnnflow.strategies.base import Strategy, strategy_class
from gnnflow.strategies.common import drop_rows_after_epoch

log = logging.getLogger("gnnflow.train")

CKPT = Path("ckpt") / "last.pt"
BEST_CKPT = Path("ckpt") / "best.pt"
BEST_MODEL = Path("model-best.pt")


def run_id_for(cfg: TrainConfig) -> str:
    """``cfg.run_id``, else the run directory's name, else a fresh id."""
    if cfg.run_id:
        return cfg.run_id
    if cfg.out:
        return Path(cfg.out).name
    return f"{cfg.strategy}-{cfg.model}-w{cfg.workers}-s{cfg.seed}-{uuid.uuid4().hex[:6]}"


def dataset_name(graph: str) -> str:
    from gnnflow.data.meta import read_store_meta

    try:
        return read_store_meta(graph).name
    except StoreError:
        return Path(graph).name


def _global_rng_state() -> dict[str, Any]:
    state = {
        "torch": torch.get_rng_state(),
        "numpy": json.dumps(np.random.get_state(legacy=False), default=_np_json),
        "python": json.dumps(random.getstate()),
    }
    if torch.cuda.is_available():  # dropout on the GPU draws from the CUDA generators
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _np_json(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    raise TypeError(type(obj).__name__)


def _set_global_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))
    np_state = json.loads(state["numpy"])
    np.random.set_state(np_state)
    py = json.loads(state["python"])
    random.setstate((py[0], tuple(py[1]), py[2]))


def load_checkpoint(run_dir: str | Path) -> dict[str, Any]:
    """The run's last checkpoint (``weights_only`` load)."""
    return torch.load(Path(run_dir) / CKPT, map_location="cpu", weights_only=True)


def _checkpoint_share(run_dir: Path, ctx: RankContext) -> tuple[int, dict[str, Any], Any] | None:
    """This rank's (epoch, state, RNG state) from ``ckpt/last.pt``, or None when there is none.

    Rank 0 reads the checkpoint (its host holds the run directory) and hands each rank its share,
    so the other ranks need no copy of it, e.g. on hosts without a shared filesystem.  Collective;
    a checkpoint of another world size fails every rank alike.
    """
    shares: list[Any] | None = None
    if ctx.rank == 0:
        shares = [None] * ctx.world_size
        if (run_dir / CKPT).exists():
            # a problem is every rank's share: all fail alike, none waits for a share never sent
            try:
                ckpt = load_checkpoint(run_dir)
            except Exception as e:
                shares = [f"{run_dir / CKPT}: cannot be read: {e}"] * ctx.world_size
            else:
                if int(ckpt["world_size"]) != ctx.world_size:
                    shares = [f"{run_dir / CKPT}: written by {ckpt['world_size']} ranks, resuming with "
                              f"{ctx.world_size}; resume with the same --workers"] * ctx.world_size
                else:
                    shares = [(int(ckpt["epoch"]), ckpt["ranks"][r], ckpt["rng"][r])
                              for r in range(ctx.world_size)]
    if ctx.is_distributed:
        got: list[Any] = [None]
        dist.scatter_object_list(got, shares, src=0)
        share = got[0]
    else:
        assert shares is not None
        share = shares[0]
    if isinstance(share, str):
        raise ConfigError(share)
    return share


def memory_figures(strategy: Strategy) -> dict[str, float]:
    """Peak resident memory (VmHWM, MiB) so far of this rank's process and of the processes it
    started for the strategy (a sampler process): memory is measured in every run."""
    out = {"peak_rss_mib": proc_memory("VmHWM") / 2**20}
    for name, pid in strategy.helper_pids().items():
        out[f"{name}_peak_rss_mib"] = proc_memory("VmHWM", pid) / 2**20
    return out


def _gather(obj: Any, ctx: RankContext) -> list[Any] | None:
    """Every rank's ``obj`` on rank 0 (a list), None elsewhere."""
    if not ctx.is_distributed:
        return [obj]
    out: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def _rank_main(ctx: RankContext, cfg: TrainConfig) -> list[EpochRecord]:
    """One rank's training loop on the parsed config; returns (on rank 0) every rank's records."""
    strategy: Strategy = strategy_class(cfg.strategy)(cfg, ctx)
    try:
        return _train(strategy, cfg, ctx)
    finally:
        close = getattr(strategy, "close", None)
        if callable(close):
            close()  # e.g. DistDGL's servers, DGCL's shared-memory tables


def _train(strategy: Strategy, cfg: TrainConfig, ctx: RankContext) -> list[EpochRecord]:
    run_dir = cfg.run_dir
    strategy.prepare()
    start = 0
    resumed = _checkpoint_share(run_dir, ctx) if cfg.resume and run_dir is not None else None
    if resumed is not None:
        assert run_dir is not None
        epoch, state, rng = resumed
        strategy.load_state_dict(state)
        _set_global_rng_state(rng)
        start = epoch + 1
        if ctx.rank == 0:
            drop_rows_after_epoch(run_dir / "records.jsonl", start - 1)
            log.info("resuming %s from epoch %d", run_dir, start)
    best = best_of_records(run_dir / "records.jsonl") if run_dir is not None and ctx.rank == 0 else None
    stop_after = strategy.options.stop_after_epoch
    run_id, dataset = run_id_for(cfg), dataset_name(cfg.graph)
    all_records: list[EpochRecord] = []
    for epoch in range(start, cfg.epochs):
        note_progress()
        rec = Recorder(ctx.device)
        loss = strategy.run_epoch(epoch, rec)
        accs: dict[str, float] = {}
        if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
            with rec.timer("eval"):
                accs = strategy.evaluate()
        rec.resolve()
        record = EpochRecord(
            run_id=run_id, strategy=cfg.strategy, dataset=dataset, model=cfg.model, workers=ctx.world_size,
            rank=ctx.rank, epoch=epoch, seed=cfg.seed, loss=float(loss),
            train_acc=accs.get("train_acc", float("nan")), val_acc=accs.get("val_acc", float("nan")),
            test_acc=accs.get("test_acc", float("nan")), train_loss=accs.get("train_loss", float("nan")),
            val_loss=accs.get("val_loss", float("nan")), test_loss=accs.get("test_loss", float("nan")),
            time_epoch=rec.elapsed(),
            times=dict(rec.times), counters=dict(rec.counters), extra=dict(rec.extra),
            memory=memory_figures(strategy),
        )
        gathered = _gather(record, ctx)
        states = _gather({"state": strategy.state_dict(), "rng": _global_rng_state()}, ctx)
        if ctx.rank == 0:
            assert gathered is not None and states is not None
            all_records.extend(gathered)
            improved = better(record.val_acc, record.val_loss, best)
            if improved:
                best = best_row([record.flat()])
            if run_dir is not None:
                write_records(run_dir, gathered)
                if improved:  # before last.pt: a crash in between re-runs this epoch, which writes it again
                    _save_checkpoint(run_dir, epoch, states, BEST_CKPT)
                    assert strategy.model is not None
                    save_tensors(strategy.model.state_dict(), run_dir / BEST_MODEL)
                _save_checkpoint(run_dir, epoch, states)
            log.info("epoch %d: loss %.4f %s%s", epoch, loss,
                     " ".join(f"{k} {v:.4f}" for k, v in accs.items()), " (best)" if improved else "")
        if stop_after is not None and epoch >= int(stop_after):
            break
    else:
        if ctx.rank == 0 and run_dir is not None and strategy.model is not None:
            save_tensors(strategy.model.state_dict(), run_dir / "model.pt")
    return all_records


def _save_checkpoint(run_dir: Path, epoch: int, states: list[dict[str, Any]], name: Path = CKPT) -> None:
    ckpt = {
        "epoch": epoch,
        "world_size": len(states),
        "ranks": [s["state"] for s in states],
        "rng": [s["rng"] for s in states],
    }
    save_tensors(ckpt, run_dir / name)


def _prepare_run_dir(cfg: TrainConfig, batch: dict[str, float] | None = None) -> None:
    run_dir = cfg.run_dir
    if run_dir is None:
        return
    if run_dir.exists() and (run_dir / "records.jsonl").exists() and not cfg.resume:
        raise ConfigError(f"{run_dir}: already holds a run; pass --resume to continue it or remove it")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (cfg.resume and (run_dir / "run.json").exists()):
        write_json(run_dir / "run.json", {"config": cfg.to_dict(), "batch": batch, "provenance": provenance(),
                                          "status": "running"})


def _mark_ended(run_dir: Path, status: str, error: str | None = None, extra: dict[str, Any] | None = None) -> None:
    """Write the run's end into ``run.json``: ``done``/``stopped``, or ``failed`` with the error."""
    info = json.loads((run_dir / "run.json").read_text())
    info["status"] = status
    if error is not None:
        info["error"] = error
    info.update(extra or {})
    write_json(run_dir / "run.json", info)


def run_training(cfg: TrainConfig) -> list[EpochRecord]:
    """Train ``cfg`` to completion (or resume it); return the records of the epochs this call ran.

    Before anything starts, :func:`~gnnflow.strategies.preflight.check_run` checks the
    inputs and the memory estimate (``cfg.force``: run even where it exceeds what is available),
    and parses the strategy's options once: the ranks receive the parsed config.

    A run that fails (or is stopped by a signal) after its directory was made is
    marked ``"status": "failed"`` in ``run.json``, with the error.
    """
    from gnnflow.runtime.processes import tune_allocator
    from gnnflow.strategies.preflight import check_run

    cls = strategy_class(cfg.strategy)
    cfg = check_run(cfg, cls)  # before any rank starts and before the run directory is written
    tune_allocator()  # this process trains too (one rank, or rank 0 under torchrun/srun)
    # under torchrun/srun every rank runs this function, across hosts every host's launcher;
    # only (the launcher of) rank 0 writes files
    from gnnflow.runtime.hosts import is_first_rank

    is_rank0 = is_first_rank()
    run_dir = cfg.run_dir if is_rank0 else None
    batch = cls.batch_shares(cfg)
    if is_rank0:
        _prepare_run_dir(cfg, batch)
        if batch is not None:
            log.info("%s on %d rank(s): global mini-batch %d targets, about %.0f per rank and iteration",
                     cfg.strategy, cfg.workers if cls.distributed else 1, batch["global_batch"], batch["per_rank"])
    t0 = time.perf_counter()
    try:
        if cls.distributed:
            from gnnflow.runtime.launch import run_ranks

            records = run_ranks(_rank_main, cfg.workers, cfg, device=cfg.device)[0]
        else:
            records = _rank_main(RankContext(device=torch.device(cfg.device)), cfg)
    except BaseException as exc:
        if run_dir is not None and (run_dir / "run.json").exists():
            try:
                _mark_ended(run_dir, "failed", f"{type(exc).__name__}: {exc}".splitlines()[0])
            except OSError:  # the output directory itself is what failed
                pass
        raise
    if run_dir is not None:
        info = json.loads((run_dir / "run.json").read_text())
        finished = not records or records[-1].epoch == cfg.epochs - 1
        extra: dict[str, Any] = {"wall_time_s": info.get("wall_time_s", 0.0) + time.perf_counter() - t0}
        if records:
            last = records[-1]
            extra["final"] = {"epoch": last.epoch, "loss": last.loss, "train_acc": last.train_acc,
                              "val_acc": last.val_acc, "test_acc": last.test_acc, "train_loss": last.train_loss,
                              "val_loss": last.val_loss, "test_loss": last.test_loss}
        extra["best"] = best_of_records(run_dir / "records.jsonl")
        _mark_ended(run_dir, "done" if finished else "stopped", extra=extra)
    return records
