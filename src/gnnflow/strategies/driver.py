"""The training driver: runs any strategy for ``cfg.epochs`` epochs on ``cfg.workers`` ranks.

For each epoch and rank: a fresh :class:`Recorder`, ``run_epoch``, evaluation
every ``eval_every`` epochs (and after the last), one :class:`EpochRecord`.
Per-rank records are gathered to rank 0 (``torch.distributed.gather_object``),
which alone writes the run directory::

    RUNDIR/.lock           held by the run for its life (gnnflow.strategies.run_dir)
    RUNDIR/run.json        config, "batch" (global mini-batch and per-rank share), provenance,
                           restarts (+ status, "final" and "best" epochs at the end)
    RUNDIR/records.jsonl   one row per epoch x rank (results.schema)
    RUNDIR/ckpt/last.pt    after every epoch (and inside one with checkpoint_every_s): epoch, world
                           size, RNG states, every rank's ``Strategy.state_dict()``; prev.pt, the
                           one before (gnnflow.strategies.checkpoint: each with its digest)
    RUNDIR/model.pt        rank 0's final model weights
    RUNDIR/ckpt/best.pt    as last.pt, of the evaluation epoch with the best validation accuracy
                           (ties: lower validation loss; gnnflow.results.selection)
    RUNDIR/model-best.pt   rank 0's model weights of that epoch

``resume=True`` loads the newest good checkpoint (rank 0 reads it and hands every rank its
state, so across hosts only rank 0's host needs the run directory), drops any records of
epochs after the checkpoint (written before a crash that preceded the next
checkpoint) and continues from the next epoch, or from the next mini-batch of a checkpoint
written inside an epoch, so records (up to timing columns) and weights equal those of an
uninterrupted run.  The best epoch so far is read back from the kept records.  Strategies that
own random generators beyond torch's, numpy's and Python's global ones put their
states into ``state_dict`` (as :class:`~gnnflow.strategies.single.SingleProcess` does).

``max_restarts = N``: when a rank dies, stops or hangs (:class:`~gnnflow.errors.RankLost`), the
launcher stops every rank and starts them again resuming from the last good checkpoint, at most
N times; each restart is recorded in ``run.json``.  A rank's own error (a bad input, a loss
that is not finite) is not retried: it would fail again.

Test hook: the option ``stop_after_epoch = k`` ends the run right after epoch
``k``'s checkpoint, as if the process had been killed there.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gnnflow.config import TrainConfig, model_label
from gnnflow.errors import ConfigError, RankLost, StoreError
from gnnflow.io import proc_memory
from gnnflow.results.schema import EpochRecord, Recorder, write_records
from gnnflow.results.selection import best_of_records, best_row, better
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.devices import HOST
from gnnflow.runtime.watchdog import note_progress
from gnnflow.strategies.base import Strategy, strategy_class
from gnnflow.strategies.checkpoint import (
    BEST_CKPT,
    BEST_MODEL,
    MODEL,
    checkpoint_share,
    global_rng_state,
    has_checkpoint,
    save_checkpoint,
    save_verified,
    set_global_rng_state,
)
from gnnflow.strategies.common import drop_rows_after_epoch
from gnnflow.strategies.run_dir import RunLock, mark_ended, note_restart, prepare_run_dir

log = logging.getLogger("gnnflow.train")


def run_id_for(cfg: TrainConfig) -> str:
    """``cfg.run_id``, else the run directory's name, else a fresh id."""
    if cfg.run_id:
        return cfg.run_id
    if cfg.out:
        return Path(cfg.out).name
    return f"{cfg.strategy}-{model_label(cfg.model)}-w{cfg.workers}-s{cfg.seed}-{uuid.uuid4().hex[:6]}"


def dataset_name(graph: str) -> str:
    from gnnflow.data.meta import read_store_meta

    try:
        return read_store_meta(graph).name
    except StoreError:
        return Path(graph).name


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


class MidEpochCheckpoints:
    """The hook a strategy calls after every mini-batch (``checkpoint_every_s``): every
    :data:`AGREE_EVERY` batches the ranks agree, on rank 0's clock, whether the time has come,
    and if so every rank's state, RNG states and what the epoch recorded so far go into
    ``ckpt/last.pt`` with the position (the next mini-batch)."""

    #: mini-batches between the ranks' agreements (one small broadcast each)
    AGREE_EVERY = 4

    def __init__(self, strategy: Strategy, ctx: RankContext, run_dir: Path | None, seconds: float) -> None:
        self.strategy, self.ctx, self.run_dir, self.seconds = strategy, ctx, run_dir, seconds
        self.last = time.monotonic()

    def epoch_done(self) -> None:
        """An epoch checkpoint was just written: the interval starts again."""
        self.last = time.monotonic()

    def __call__(self, epoch: int, index: int, rec: Recorder, losses: list[float]) -> None:
        if (index + 1) % self.AGREE_EVERY:
            return
        due = torch.tensor([int(time.monotonic() - self.last >= self.seconds)])
        if self.ctx.is_distributed:
            from gnnflow.comm.collectives import broadcast

            broadcast(due, 0, HOST)
        if not due.item():
            return
        partial = {"counters": dict(rec.counters), "times": dict(rec.times), "extra": dict(rec.extra),
                   "losses": list(losses)}
        states = _gather({"state": self.strategy.state_dict(), "rng": global_rng_state(), "partial": partial},
                         self.ctx)
        if self.ctx.rank == 0 and self.run_dir is not None:
            assert states is not None
            save_checkpoint(self.run_dir, epoch - 1, states,
                            position={"batch": index + 1, "partial": [s["partial"] for s in states]})
            log.info("epoch %d: checkpoint after mini-batch %d", epoch, index + 1)
        self.last = time.monotonic()


def _rank_main(ctx: RankContext, cfg: TrainConfig) -> list[EpochRecord]:
    """One rank's training loop on the parsed config; returns (on rank 0) every rank's records."""
    strategy: Strategy = strategy_class(cfg.strategy)(cfg, ctx)
    try:
        return _train(strategy, cfg, ctx)
    finally:
        close = getattr(strategy, "close", None)
        if callable(close):
            close()  # e.g. DistDGL's servers, DGCL's shared-memory tables


def _resume(strategy: Strategy, run_dir: Path, ctx: RankContext) -> tuple[int, dict[str, Any] | None]:
    """Load the run's checkpoint into ``strategy``: (the first epoch to run, what that epoch had
    recorded before the checkpoint when it was written inside it)."""
    share = checkpoint_share(run_dir, ctx)
    if share is None:
        return 0, None
    strategy.load_state_dict(share["state"])
    set_global_rng_state(share["rng"])
    start = share["epoch"] + 1
    partial = None
    if share.get("batch"):
        partial = share["partial"]
        strategy.start_epoch_at(share["batch"], partial["losses"])
    if ctx.rank == 0:
        drop_rows_after_epoch(run_dir / "records.jsonl", start - 1)
        where = f"epoch {start}" + (f", mini-batch {share['batch']}" if partial else "")
        log.info("resuming %s from %s", run_dir, where)
    return start, partial


def _train(strategy: Strategy, cfg: TrainConfig, ctx: RankContext) -> list[EpochRecord]:
    run_dir = cfg.run_dir
    strategy.prepare()
    start, partial = _resume(strategy, run_dir, ctx) if cfg.resume and run_dir is not None else (0, None)
    hook = None
    if cfg.checkpoint_every_s:
        hook = MidEpochCheckpoints(strategy, ctx, run_dir, cfg.checkpoint_every_s)
        strategy.on_batch = hook
    best = best_of_records(run_dir / "records.jsonl") if run_dir is not None and ctx.rank == 0 else None
    stop_after = strategy.options.stop_after_epoch
    run_id, dataset = run_id_for(cfg), dataset_name(cfg.graph)
    all_records: list[EpochRecord] = []
    for epoch in range(start, cfg.epochs):
        note_progress()
        rec = Recorder(ctx.device)
        if partial is not None:  # the part of this epoch trained before the checkpoint
            rec.counters.update(partial["counters"])
            rec.times.update(partial["times"])
            rec.extra.update(partial["extra"])
            partial = None
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
        states = _gather({"state": strategy.state_dict(), "rng": global_rng_state()}, ctx)
        if ctx.rank == 0:
            assert gathered is not None and states is not None
            all_records.extend(gathered)
            improved = better(record.val_acc, record.val_loss, best)
            if improved:
                best = best_row([record.flat()])
            if run_dir is not None:
                write_records(run_dir, gathered)
                if improved:  # before last.pt: a crash in between re-runs this epoch, which writes it again
                    save_checkpoint(run_dir, epoch, states, BEST_CKPT)
                    assert strategy.model is not None
                    save_verified(strategy.model.state_dict(), run_dir / BEST_MODEL)
                save_checkpoint(run_dir, epoch, states)
            log.info("epoch %d: loss %.4f %s%s", epoch, loss,
                     " ".join(f"{k} {v:.4f}" for k, v in accs.items()), " (best)" if improved else "")
        if hook is not None:
            hook.epoch_done()
        if stop_after is not None and epoch >= int(stop_after):
            break
    else:
        if ctx.rank == 0 and run_dir is not None and strategy.model is not None:
            save_verified(strategy.model.state_dict(), run_dir / MODEL)
    return all_records


def run_training(cfg: TrainConfig) -> list[EpochRecord]:
    """Train ``cfg`` to completion (or resume it); return the records of the epochs the last
    attempt ran (:data:`max_restarts` attempts may run before it).

    Before anything starts, :func:`~gnnflow.strategies.preflight.check_run` checks the
    inputs and the memory estimate (``cfg.force``: run even where it exceeds what is available),
    and parses the strategy's options once: the ranks receive the parsed config.  The run
    directory is locked for the run's life (:class:`~gnnflow.strategies.run_dir.RunLock`).

    A run that fails (or is stopped by a signal) after its directory was made is
    marked ``"status": "failed"`` in ``run.json``, with the error.
    """
    from gnnflow.runtime.hosts import is_first_rank
    from gnnflow.runtime.processes import tune_allocator
    from gnnflow.strategies.preflight import check_run

    cls = strategy_class(cfg.strategy)
    cfg = check_run(cfg, cls)  # before any rank starts and before the run directory is written
    if cfg.max_restarts and not cfg.out:
        raise ConfigError("--max-restarts: needs --out, the run directory whose checkpoints a restart resumes from")
    if cfg.max_restarts and not cls.distributed:
        raise ConfigError(f"--max-restarts: strategy {cfg.strategy!r} runs in this one process; there is no "
                          "rank to restart (rerun it with --resume)")
    tune_allocator()  # this process trains too (one rank, or rank 0 under torchrun/srun)
    # under torchrun/srun every rank runs this function, across hosts every host's launcher;
    # only (the launcher of) rank 0 writes files
    is_rank0 = is_first_rank()
    run_dir = cfg.run_dir if is_rank0 else None
    if run_dir is None:
        return _attempts(cfg, cls, None)
    with RunLock(run_dir):
        batch = cls.batch_shares(cfg)
        prepare_run_dir(cfg, batch)
        if batch is not None:
            log.info("%s on %d rank(s): global mini-batch %d targets, about %.0f per rank and iteration",
                     cfg.strategy, cfg.workers if cls.distributed else 1, batch["global_batch"], batch["per_rank"])
        return _attempts(cfg, cls, run_dir)


def _attempts(cfg: TrainConfig, cls: type[Strategy], run_dir: Path | None) -> list[EpochRecord]:
    """Run the ranks, restarting them from the last good checkpoint after a lost rank
    (``cfg.max_restarts`` times at most); write the end into ``run.json``."""
    t0 = time.perf_counter()
    attempt = 0
    while True:
        try:
            records = _launch(cfg, cls)
            break
        except RankLost as exc:
            if attempt >= cfg.max_restarts:
                _failed(run_dir, exc)
                raise
            attempt += 1
            cause = str(exc).splitlines()[0]
            after, batch = _checkpoint_position(run_dir) if run_dir is not None else (None, None)
            if run_dir is not None:
                note_restart(run_dir, attempt, cause, after, batch)
            where = "from the start" if after is None else f"after epoch {after}" + (
                f", at mini-batch {batch} of the next" if batch else "")
            log.warning("restart %d of %d after: %s (resuming %s)", attempt, cfg.max_restarts, cause, where)
            cfg = cfg.replace(resume=True)
        except BaseException as exc:
            _failed(run_dir, exc)
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
        mark_ended(run_dir, "done" if finished else "stopped", extra=extra)
    return records


def _launch(cfg: TrainConfig, cls: type[Strategy]) -> list[EpochRecord]:
    if cls.distributed:
        from gnnflow.runtime.launch import run_ranks

        return run_ranks(_rank_main, cfg.workers, cfg, device=cfg.device)[0]
    return _rank_main(RankContext(device=torch.device(cfg.device)), cfg)


def _checkpoint_position(run_dir: Path) -> tuple[int | None, int | None]:
    """(the epoch the run's newest good checkpoint finished, the mini-batch of the next epoch it
    was written at, or None); (None, None) without a checkpoint."""
    from gnnflow.strategies.checkpoint import load_checkpoint

    if not has_checkpoint(run_dir):
        return None, None
    try:
        ckpt = load_checkpoint(run_dir)
    except Exception:  # the resumed run says why, in one line
        return None, None
    return int(ckpt["epoch"]), (int(ckpt["batch"]) if ckpt.get("batch") else None)


def _failed(run_dir: Path | None, exc: BaseException) -> None:
    if run_dir is not None and (run_dir / "run.json").exists():
        try:
            mark_ended(run_dir, "failed", f"{type(exc).__name__}: {exc}".splitlines()[0])
        except OSError:  # the output directory itself is what failed
            pass
