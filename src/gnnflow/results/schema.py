"""The common results schema: one record per run x epoch x rank.

Every strategy fills the same columns, so one table compares them all.
Accuracies and ``*_loss`` come from evaluation epochs (NaN otherwise).  Times
are seconds summed over the epoch's iterations on that rank; counters are
totals over the epoch on that rank.  Strategy-specific counters go into
``extra`` and become ``x_<name>`` columns in the table.  ``memory`` holds the
peak resident memory (VmHWM, MiB) of the rank's processes so far, as
``mem_<name>`` columns.

Times and memory are measured on the machine; every other column is a function
of the config and seed (:func:`is_measurement` tells them apart, e.g. to check
that a resumed run equals an uninterrupted one).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Timer names every strategy uses where it has the phase (missing phases stay 0).
TIMERS = ("sample", "load", "forward_backward", "allreduce", "wait", "step", "comm", "eval")
# Counters every strategy fills where it has them.
COUNTERS = (
    "iterations",
    "sampled_edges",
    "features_loaded",
    "remote_features",
    "remote_bytes",
    "bytes_sent",
    "bytes_received",
    "cache_hits",
    "cache_misses",
)


@dataclass
class EpochRecord:
    run_id: str
    strategy: str
    dataset: str
    model: str
    workers: int
    rank: int
    epoch: int
    seed: int
    loss: float = float("nan")
    train_acc: float = float("nan")
    val_acc: float = float("nan")
    test_acc: float = float("nan")
    # mean cross-entropy over each split's labelled vertices in evaluation (no dropout);
    # ``loss`` is the training loss of the epoch's steps
    train_loss: float = float("nan")
    val_loss: float = float("nan")
    test_loss: float = float("nan")
    time_epoch: float = 0.0
    times: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)

    def flat(self) -> dict[str, Any]:
        """One flat row: ``time_<timer>``, counter names, ``x_<extra>``, ``mem_<memory>``."""
        row = {k: v for k, v in asdict(self).items() if k not in ("times", "counters", "extra", "memory")}
        for t in TIMERS:
            row[f"time_{t}"] = float(self.times.get(t, 0.0))
        for t, v in self.times.items():
            row.setdefault(f"time_{t}", float(v))
        for c in COUNTERS:
            row[c] = float(self.counters.get(c, 0))
        for c, v in self.counters.items():
            row.setdefault(c, float(v))
        for k, v in self.extra.items():
            row[f"x_{k}"] = v
        for k, v in self.memory.items():
            row[f"mem_{k}"] = float(v)
        return row


def is_measurement(column: str) -> bool:
    """True for columns measured on the machine: times (``time_*``, ``x_*_s``) and memory
    (``mem_*``); the rest are a function of the config and seed (and ``run_id`` names the run)."""
    return column.startswith(("time_", "mem_")) or (column.startswith("x_") and column.endswith("_s"))


class Recorder:
    """Accumulates timers and counters for one rank during one epoch.

    On a CUDA ``device`` a timer records a CUDA event pair on the current stream instead of
    reading the host clock (kernels run asynchronously, so the host clock would time their
    launch); :meth:`resolve` waits for the device and adds the event times, once per epoch.
    """

    def __init__(self, device: Any = None) -> None:
        self.times: dict[str, float] = defaultdict(float)
        self.counters: dict[str, float] = defaultdict(float)
        self.extra: dict[str, float] = {}
        self.cuda = str(getattr(device, "type", device)).startswith("cuda")
        self._events: list[tuple[str, Any, Any]] = []
        self._t0 = time.perf_counter()

    @contextlib.contextmanager
    def timer(self, name: str) -> Iterator[None]:
        if self.cuda:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end.record()
                self._events.append((name, start, end))
            return
        t = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] += time.perf_counter() - t

    def resolve(self) -> None:
        """Add the CUDA event timers recorded so far (waits for the device)."""
        if self._events:
            import torch

            torch.cuda.synchronize()
            for name, start, end in self._events:
                self.times[name] += start.elapsed_time(end) / 1000.0
            self._events.clear()

    def add_time(self, name: str, seconds: float) -> None:
        self.times[name] += seconds

    def count(self, name: str, value: float = 1) -> None:
        self.counters[name] += float(value)

    def reset(self) -> None:
        self.times.clear()
        self.counters.clear()
        self.extra.clear()
        self._t0 = time.perf_counter()

    def elapsed(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()  # the epoch ends when its kernels do
        return time.perf_counter() - self._t0


def write_records(run_dir: str | Path, records: list[EpochRecord]) -> Path:
    """Append records as JSON lines to ``run_dir/records.jsonl`` (one per line)."""
    path = Path(run_dir) / "records.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r.flat(), sort_keys=True) + "\n" for r in records)
    try:
        with open(path, "a") as fh:
            fh.write(text)
    except OSError as exc:
        from gnnflow.io import disk_full

        if disk_full(exc):  # a cut line is dropped when the run resumes (drop_rows_after_epoch)
            from gnnflow.errors import StoreError

            raise StoreError(f"{path}: cannot be written: the disk is full ({exc.strerror or exc}); free "
                             f"space on {path.parent}, then continue with --resume") from None
        raise
    return path


def read_records(paths: list[str | Path]) -> Any:
    """Read one or more ``records.jsonl`` files (or run directories) into a DataFrame."""
    import pandas as pd

    rows = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            p = p / "records.jsonl"
        with open(p) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return pd.DataFrame(rows)
