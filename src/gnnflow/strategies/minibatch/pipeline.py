"""The asynchronous multi-stage mini-batch pipeline (DistDGLv2 §4.2.1, Fig. 5).

Stages, each a plain function of a :class:`MiniBatch` supplied by the strategy::

    scheduling -> neighbour sampling -> CPU feature copy -> device copy -> (training thread)
      (targets)     (blocks)             (input rows)        (to cuda)

With ``asynchronous=True`` the stages run ahead of training in background
threads joined by bounded queues:

* the *sampling thread* iterates the schedule and samples (its output queue
  holds at most ``capacities[0]`` sampled mini-batches, default 25: ids only,
  cheap);
* a *worker thread* copies features into contiguous CPU memory (output queue
  ``capacities[1]``, default 5: feature rows, the memory-heavy stage);
* a second worker moves the batch to the device (output queue
  ``capacities[2]``, default 1: scarce GPU memory).

On the CPU the device copy is nothing, and its thread and queue are left out.

The queues are bounded in count (DistDGLv2's capacities) and in bytes
(``max_bytes``, default 256 MiB, the ``pipeline_mib`` option).  Each stage has
a budget for the bytes IT added to the batches in flight (queued downstream or
being trained on; an eighth of ``max_bytes`` for the sampler's blocks, all of
it for the loaded rows and the device copies): a stage that has produced a
batch waits before handing it on while its budget is spent, and only the
training thread releases it, so no stage waits on a batch that waits on it.
On a products-sized graph a loaded batch of 1000 targets with fanouts 15,10,5
holds ~240 MB of input rows, so 25 + 5 + 1 queued batches would cost several
GB; bounded in bytes, a rank holds the batch it trains on and the next one (a
single batch larger than its budget still passes).

The training thread only takes finished batches (:meth:`MiniBatchPipeline.get`)
and records the time it waited.  The schedule is one stream across all epochs
(DistDGLv2: "we run the asynchronous sampling pipeline throughout the entire
training without stopping"), so the pipeline is not drained or refilled at
epoch boundaries.  With ``asynchronous=False`` (``--no-pipeline``) the same
stage functions run inline in :meth:`get`.

Collectives from background threads.  Distributed sampling and remote feature
fetches are collectives.  Collectives on one process group must be issued in
the same order on every rank; a background thread's calls interleave
unpredictably with the training thread's gradient all-reduce, so each
collective-issuing stage gets a DEDICATED process group
(``torch.distributed.new_group`` over all ranks, created by :func:`stage_groups`
in the same order on every rank, before the threads start):

* the sampling thread issues only sampling exchanges, on group ``sample``;
* the feature-copy worker issues only feature exchanges, on group ``load``;
* the training thread issues the all-reduce (and evaluation) on the default group.

Within one thread the order of collectives is the schedule's order, which is
identical on every rank (every rank runs the same number of batches per
epoch), so each group sees the same sequence everywhere.  The paper's worker
*priority queue* (later stages first) is replaced by one worker per stage: a
later stage never waits behind an earlier one's job.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from gnnflow.comm.collectives import world
from gnnflow.errors import DistributedError

DEFAULT_CAPACITIES = (25, 5, 1)
DEFAULT_MAX_BYTES = 256 << 20
#: share of ``max_bytes`` each stage's additions may take (sampled blocks, loaded rows, device copies)
STAGE_SHARES = {"sample": 0.125, "load": 1.0, "device": 1.0}
_DONE = object()


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors reachable from ``obj`` (tensors, lists, tuples, dicts, dataclasses)."""
    if isinstance(obj, torch.Tensor):
        return obj.element_size() * obj.numel()
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(x) for x in obj.values())
    if hasattr(obj, "__dataclass_fields__"):
        return sum(tensor_bytes(getattr(obj, f)) for f in obj.__dataclass_fields__ if f != "cache")
    return 0


class ByteBudget:
    """Bytes the batches in flight may hold; :meth:`acquire` waits while they would exceed it
    (unless nothing is held: one batch larger than the budget still passes)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.used = 0
        self.high_water = 0
        self._cond = threading.Condition()

    def acquire(self, n: int, stop: threading.Event) -> bool:
        """Take ``n`` bytes; False when ``stop`` was set while waiting."""
        with self._cond:
            while self.used > 0 and self.used + n > self.capacity:
                if stop.is_set():
                    return False
                self._cond.wait(0.1)
            self.used += n
            self.high_water = max(self.high_water, self.used)
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()


@dataclass
class MiniBatch:
    """One mini-batch as it moves through the stages (plain data, no behaviour)."""

    epoch: int
    index: int
    targets: torch.Tensor
    blocks: list[Any] | None = None
    inputs: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    #: stage times (seconds) measured where the stage ran: sample, load, device
    times: dict[str, float] = field(default_factory=dict)
    #: counters the stages add: sampled_edges, features_loaded, remote_bytes, ...
    counters: dict[str, float] = field(default_factory=dict)
    #: strategy data that travels with the batch (e.g. the global batch size)
    meta: dict[str, Any] = field(default_factory=dict)


Stage = Callable[[MiniBatch], MiniBatch | None]


class DeviceCopier:
    """The device stage's host-to-device copies (DistDGLv2 §4.2.1: one data copy per byte).

    Each named tensor is copied into a pinned host buffer that is reused from batch to batch
    (grown when a batch needs more; no fresh ``pin_memory()`` per batch), then to the device
    on the copier's own CUDA stream, so the copy overlaps the training thread's kernels.  A
    call returns when its copies are done (it waits on its stream only), so the buffers can
    be refilled and the training thread may use the result on any stream; the copies are
    marked as used by the device's default stream for the caching allocator.  On a CPU
    device the tensors are returned as they are.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._pinned: dict[str, torch.Tensor] = {}

    def _staging(self, name: str, t: torch.Tensor) -> torch.Tensor:
        need = t.numel() * t.element_size()
        buf = self._pinned.get(name)
        if buf is None or buf.numel() < need:
            size = max(need, 2 * buf.numel() if buf is not None else 0)
            buf = self._pinned[name] = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        return buf[:need].view(t.dtype).view(t.shape)

    def __call__(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.stream is None:
            return {k: t.to(self.device) for k, t in tensors.items()}
        out = {}
        with torch.cuda.stream(self.stream):
            for name, t in tensors.items():
                if t.device == self.device:  # already there (served by a device-side cache)
                    out[name] = t
                    continue
                host = self._staging(name, t)
                host.copy_(t)
                out[name] = host.to(self.device, non_blocking=True)
                out[name].record_stream(torch.cuda.default_stream(self.device))
        self.stream.synchronize()
        return out


def stage_groups(names: Iterable[str] = ("sample", "load")) -> dict[str, Any]:
    """One process group over all ranks per collective-issuing stage (None with one rank).

    Must be called on every rank in the same order (``new_group`` is itself a
    collective on the default group).
    """
    _, size = world()
    if size == 1:
        return {n: None for n in names}
    return {n: dist.new_group(ranks=list(range(size))) for n in names}


def stats_totals(stats: Any) -> tuple[list[int], list[int]]:
    """A :class:`~gnnflow.comm.collectives.CommStats`' per-peer byte totals now (empty lists for None)."""
    if stats is None:
        return [], []
    return list(stats.bytes_sent), list(stats.bytes_received)


def add_stats_delta(mb: MiniBatch, stats: Any, before: tuple[list[int], list[int]], stage: str) -> None:
    """Add the bytes ``stats`` counted since ``before`` to ``mb.counters`` (per peer, and per stage)."""
    if stats is None:
        return
    rank, _ = world()
    sent = [a - b for a, b in zip(stats.bytes_sent, before[0], strict=True)]
    recv = [a - b for a, b in zip(stats.bytes_received, before[1], strict=True)]
    for p in range(len(sent)):
        if p == rank:
            continue
        mb.counters["bytes_sent"] = mb.counters.get("bytes_sent", 0) + sent[p]
        mb.counters["bytes_received"] = mb.counters.get("bytes_received", 0) + recv[p]
        mb.counters[f"{stage}_bytes_received"] = mb.counters.get(f"{stage}_bytes_received", 0) + recv[p]
        mb.counters[f"bytes_sent_peer{p}"] = mb.counters.get(f"bytes_sent_peer{p}", 0) + sent[p]


class MiniBatchPipeline:
    """Scheduling -> sampling -> CPU feature copy -> device copy, async or inline."""

    def __init__(
        self,
        schedule: Iterable[MiniBatch],
        sample: Stage,
        load: Stage,
        to_device: Stage | None,
        asynchronous: bool = True,
        capacities: tuple[int, int, int] = DEFAULT_CAPACITIES,
        timeout_s: float = 120.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if len(capacities) != 3 or any(int(c) < 1 for c in capacities):
            raise DistributedError(f"pipeline capacities must be three positive counts, got {capacities}")
        self.schedule: Iterator[MiniBatch] = iter(schedule)
        # to_device None: nothing to copy (CPU), no stage
        self.stages = [("sample", sample), ("load", load)] + ([("device", to_device)] if to_device else [])
        self.budgets = {name: ByteBudget(int(max_bytes * STAGE_SHARES[name])) for name, _ in self.stages}
        self._held: dict[str, int] = {}  # bytes each stage added to the batch the training thread has
        self.asynchronous = asynchronous
        self.capacities = tuple(int(c) for c in capacities)
        self.timeout_s = timeout_s
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self._out: queue.Queue[Any] | None = None
        self._started = False
        self.high_water = [0, 0, 0]  # most batches seen waiting in each stage's queue

    # -- running -------------------------------------------------------------------
    def start(self) -> MiniBatchPipeline:
        if self._started:
            return self
        self._started = True
        if not self.asynchronous:
            return self
        queues = [queue.Queue(maxsize=c) for c in self.capacities[: len(self.stages)]]
        names = ["gnnflow-sampler", "gnnflow-loader", "gnnflow-devcopy"]
        sources: list[Any] = [None, *queues[:-1]]
        for i, (_name, fn) in enumerate(self.stages):
            t = threading.Thread(target=self._run_stage, args=(i, fn, sources[i], queues[i]),
                                 name=names[i], daemon=True)
            self._threads.append(t)
        self._out = queues[-1]
        for t in self._threads:
            t.start()
        return self

    def _run_stage(self, i: int, fn: Stage, source: queue.Queue[Any] | None, out: queue.Queue[Any]) -> None:
        name = self.stages[i][0]
        try:
            while not self._stop.is_set():
                if source is None:
                    mb = next(self.schedule, _DONE)
                else:
                    mb = self._take(source)
                if mb is _DONE:
                    self._put(out, _DONE)
                    return
                mb = self._apply(name, fn, mb)
                added = mb.meta.setdefault("pipeline_bytes", {})
                grown = max(0, tensor_bytes(mb) - sum(added.values()))
                if not self.budgets[name].acquire(grown, self._stop):
                    return
                added[name] = grown
                self._put(out, mb)
                self.high_water[i] = max(self.high_water[i], out.qsize())
        except BaseException as exc:  # hand the error to the training thread
            if self._error is None:
                self._error = exc
            self._stop.set()

    @staticmethod
    def _apply(name: str, fn: Stage, mb: MiniBatch) -> MiniBatch:
        t, c = time.perf_counter(), time.thread_time()
        res = fn(mb)
        mb.times[name] = mb.times.get(name, 0.0) + time.perf_counter() - t
        mb.times[name + "_cpu"] = mb.times.get(name + "_cpu", 0.0) + time.thread_time() - c
        return res if res is not None else mb

    def _put(self, q: queue.Queue[Any], item: Any) -> None:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _take(self, q: queue.Queue[Any]) -> Any:
        while not self._stop.is_set():
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        return _DONE

    def get(self) -> MiniBatch:
        """The next ready mini-batch; ``StopIteration`` when the schedule is done.

        ``mb.times["wait"]`` is the time the training thread waited for it.
        """
        if not self._started:
            self.start()
        if not self.asynchronous:
            mb = next(self.schedule, _DONE)
            if mb is _DONE:
                raise StopIteration
            for name, fn in self.stages:
                mb = self._apply(name, fn, mb)
            mb.times["wait"] = 0.0
            return mb
        assert self._out is not None
        for name, n in self._held.items():  # the training thread is done with the previous batch
            self.budgets[name].release(n)
        self._held = {}
        t0 = time.perf_counter()
        while True:
            if self._error is not None:
                raise DistributedError(f"mini-batch pipeline failed: {type(self._error).__name__}: "
                                       f"{self._error}") from self._error
            try:
                item = self._out.get(timeout=0.1)
                break
            except queue.Empty:
                if time.perf_counter() - t0 > self.timeout_s:
                    raise DistributedError(f"mini-batch pipeline: no batch for {self.timeout_s:.0f}s") from None
        if item is _DONE:
            raise StopIteration
        self._held = dict(item.meta.get("pipeline_bytes", {}))
        item.times["wait"] = time.perf_counter() - t0
        return item

    def __iter__(self) -> Iterator[MiniBatch]:
        while True:
            try:
                yield self.get()
            except StopIteration:
                return

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the threads (they are daemons: a thread stuck in a collective does not block exit)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)
        if not any(t.is_alive() for t in self._threads):
            close = getattr(self.schedule, "close", None)  # a generator: let it release what it holds
            if close is not None:
                close()
        self._threads.clear()
