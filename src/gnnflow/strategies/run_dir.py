"""A run directory: one run at a time, its ``run.json``, and how the run ended.

``RUNDIR/.lock`` is held by the run that writes the directory, for the run's whole life
(:class:`RunLock`): an exclusive ``flock`` taken atomically by the launcher of rank 0, the file
holding that process's host, pid and start time.  A second run on the same directory fails at
once, in one line naming the holder.  The kernel drops the lock when the holder's process ends,
however it ends (SIGKILL included), so a lock can never outlive its run: the next run takes it
and says in its log which run held it last without releasing it (that run died).

``run.json`` records the config, the batch shares and provenance at the start (status
``running``), restarts as they happen, and at the end the status (``done``, ``stopped`` by the
``stop_after_epoch`` test hook, ``failed`` with the error) with the final and best epochs.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError
from gnnflow.io import provenance, write_json

log = logging.getLogger("gnnflow.train")

LOCK = ".lock"


class RunLock:
    """The exclusive lock of a run directory (see the module docstring).  Use as a context manager."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / LOCK
        self._fh: Any = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115  (held for the run's life; closed in __exit__)
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder(fh)
            fh.close()
            raise ConfigError(f"{self.path.parent}: in use by another run ({holder}); wait for it to end, "
                              "or train into another --out") from None
        previous = self._holder(fh)
        if previous:
            log.warning("%s: taken over from a run that ended without releasing it (%s)", self.path.parent,
                        previous)
        fh.seek(0)
        fh.truncate()
        fh.write(f"host {socket.gethostname()}, pid {os.getpid()}, since "
                 f"{datetime.datetime.now().isoformat(timespec='seconds')}\n")
        fh.flush()
        self._fh = fh
        return self

    @staticmethod
    def _holder(fh: Any) -> str:
        fh.seek(0)
        return fh.read().strip()

    def __exit__(self, *exc: Any) -> None:
        if self._fh is not None:
            self._fh.seek(0)
            self._fh.truncate()  # released in order: the next run has nothing to report
            self._fh.close()  # closing drops the flock
            self._fh = None


def prepare_run_dir(cfg: TrainConfig, batch: dict[str, float] | None = None) -> None:
    """Make the run directory and its ``run.json`` (a resumed run keeps its own); refuse one that
    holds a finished or running run's records unless resuming."""
    run_dir = cfg.run_dir
    if run_dir is None:
        return
    if (run_dir / "records.jsonl").exists() and not cfg.resume:
        raise ConfigError(f"{run_dir}: already holds a run; pass --resume to continue it or remove it")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (cfg.resume and (run_dir / "run.json").exists()):
        write_json(run_dir / "run.json", {"config": cfg.to_dict(), "batch": batch, "provenance": provenance(),
                                          "status": "running"})


def update_run_json(run_dir: Path, **changes: Any) -> None:
    """Set keys of ``run.json`` (atomically)."""
    info = json.loads((run_dir / "run.json").read_text())
    info.update(changes)
    write_json(run_dir / "run.json", info)


def mark_ended(run_dir: Path, status: str, error: str | None = None, extra: dict[str, Any] | None = None) -> None:
    """Write the run's end into ``run.json``: ``done``/``stopped``, or ``failed`` with the error."""
    changes: dict[str, Any] = {"status": status, **(extra or {})}
    if error is not None:
        changes["error"] = error
    update_run_json(run_dir, **changes)


def note_restart(run_dir: Path, attempt: int, cause: str, after_epoch: int | None, at_batch: int | None) -> None:
    """Append a restart to ``run.json``'s ``restarts``: its cause and where it resumes (after
    epoch ``after_epoch``, None: from the start; at mini-batch ``at_batch`` of the next epoch)."""
    info = json.loads((run_dir / "run.json").read_text())
    info.setdefault("restarts", []).append({
        "attempt": attempt, "cause": cause, "resumed_after_epoch": after_epoch, "resumed_at_batch": at_batch,
        "at": datetime.datetime.now().isoformat(timespec="seconds")})
    info["status"] = "running"
    write_json(run_dir / "run.json", info)
