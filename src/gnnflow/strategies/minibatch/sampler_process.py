"""Sampler processes: the pipeline's sample and load stages in a process per rank (DistDGL's design).

DistDGLv2 §4.2.1 runs neighbour sampling and the CPU feature copy in a
sampling *thread* and worker threads of the trainer.  In CPython those threads
and the training thread share one interpreter lock: all of them make thousands
of short numpy/torch calls per mini-batch, each of which drops the lock and
takes it back, so they hand the lock to each other constantly and none runs at
full speed (docs/runtime.md: the training thread runs ~25 % slower beside the
sampling thread; the pipelined epoch stays 1.2-1.5x its slower half).  DistDGL
itself samples in separate *sampler processes* (``num_samplers``); with
``samplers=process`` a rank does the same with one sampler process:

* the child is spawned by the rank's main thread in ``prepare()``; it builds
  the rank's own strategy class with the same configuration and calls
  ``prepare_stages()`` (part, targets, sampler, feature store, degrees, cache;
  no model), so it runs exactly the rank's ``sample_stage`` and ``load_stage``
  with the same per-batch random streams.  The part's feature shard is
  memory-mapped, so its pages are shared with the rank through the page cache;
* the rank sends each scheduled batch's target ids (a few KiB) to the child,
  keeping up to ``slots`` requests ahead; the child samples, gathers the input
  rows straight into ONE shared-memory slot (a ring of ``slots`` buffers reused
  for the whole run, remade larger when a batch does not fit) and writes the
  blocks' tensors after them: the hand-over costs one small message and one
  copy out of the slot in the rank, not one shared-memory segment per tensor;
* with several ranks the children form their own process group (gloo; its
  rendezvous store is held by rank 0's trainer, which broadcasts the port), and
  the per-hop sampling exchanges and remote feature fetches run there: samplers
  talk to samplers, trainers to trainers, as DistDGL's sampler processes talk
  to the graph servers.  Every child serves the same batches in the same
  order, so the collectives match.

A child dies with its rank (``PR_SET_PDEATHSIG`` and a parent check on every
idle second); the rank notices a dead or failing child within a second and
raises :class:`~gnnflow.errors.DistributedError` naming it.  Code that starts
such a pipeline from a script needs the ``if __name__ == "__main__":`` guard of
spawned processes.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import math
import os
import queue
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from gnnflow.errors import DistributedError
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.group import init_group
from gnnflow.runtime.network import LOOPBACK, connect_store
from gnnflow.runtime.processes import die_with_parent, tune_allocator
from gnnflow.sampling import Block
from gnnflow.strategies.minibatch.pipeline import MiniBatch

#: a block's tensors, in the order they are packed into a slot (None fields are skipped)
_BLOCK_FIELDS = ("dst_ids", "src_ids", "indptr", "indices", "src_deg", "dst_deg")
_ALIGN = 64


@dataclass(frozen=True)
class SamplerSpec:
    """What a sampler process needs to rebuild its rank's stages (plain, picklable).

    ``strategy`` is the strategy class as ``"module:QualName"``; ``cfg`` its
    :class:`~gnnflow.config.TrainConfig`.  With several ranks the sampler
    processes join their own process group at ``addr:port`` (a store held by
    rank 0's trainer).
    """

    strategy: str
    cfg: Any
    rank: int
    world_size: int
    addr: str = LOOPBACK
    port: int = 0
    timeout_s: float = 60.0


def _pack(mb: MiniBatch) -> tuple[list[torch.Tensor], list[tuple[Any, ...]], int]:
    """The batch's stage outputs (input rows first, then block tensors) as tensors, their
    layout in a slot ``(key, dtype, shape, byte offset)``, and the bytes needed."""
    assert mb.blocks is not None
    named: list[tuple[Any, torch.Tensor]] = [("inputs", mb.inputs)] if mb.inputs is not None else []
    named += [((i, f), getattr(b, f)) for i, b in enumerate(mb.blocks) for f in _BLOCK_FIELDS
              if getattr(b, f) is not None]
    tensors, layout, offset = [], [], 0
    for key, t in named:
        t = t.contiguous()
        tensors.append(t)
        layout.append((key, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset))
        offset += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    return tensors, layout, offset


def _unpack(buf: torch.Tensor, layout: list[tuple[Any, ...]], mb: MiniBatch) -> None:
    """Copy the packed outputs out of slot ``buf`` into ``mb`` (blocks, inputs)."""
    blocks: dict[int, dict[str, torch.Tensor]] = collections.defaultdict(dict)
    for key, dtype_name, shape, off in layout:
        dtype = getattr(torch, dtype_name)
        n = math.prod(shape) * dtype.itemsize
        t = buf[off:off + n].view(dtype).view(shape).clone()
        if key == "inputs":
            mb.inputs = t
        else:
            blocks[key[0]][key[1]] = t
    mb.blocks = [Block(**blocks[i]) for i in range(len(blocks))]


class _Slots(dict):
    """The child's shared-memory slots by index, made (or remade larger) on demand."""

    def __init__(self, min_bytes: int) -> None:
        super().__init__()
        self.min_bytes = min_bytes

    def ensure(self, slot: int, nbytes: int) -> torch.Tensor | None:
        """Make ``slot`` hold ``nbytes``; returns the new buffer when it was (re)made, else None.
        Tensors viewing the old buffer stay valid (they hold its storage)."""
        if slot in self and self[slot].numel() >= nbytes:
            return None
        self[slot] = torch.empty(max(nbytes + nbytes // 4, self.min_bytes), dtype=torch.uint8).share_memory_()
        return self[slot]


def _take_slot(free: Any, parent_pid: int) -> int | None:
    """A free slot index; None when the parent is gone."""
    while True:
        try:
            return int(free.get(timeout=1.0))
        except queue.Empty:
            if os.getppid() != parent_pid:
                return None


def _build_stages(spec: SamplerSpec) -> Any:
    """The rank's strategy, prepared up to its stages (no model), sampling in-process."""
    module, _, name = spec.strategy.partition(":")
    cls = getattr(importlib.import_module(module), name)
    options = cls.Options.parse(spec.cfg.options, cls.name)
    cfg = dataclasses.replace(spec.cfg, options=dataclasses.replace(options, samplers="thread"))
    strategy = cls(cfg, RankContext(rank=spec.rank, world_size=spec.world_size, device=torch.device("cpu")))
    strategy.prepare_stages()
    return strategy


def _serve(spec: SamplerSpec, parent_pid: int, requests: Any, results: Any, free: Any,
           min_slot_bytes: int) -> None:
    """Body of a sampler process: run the sample and load stages of every requested batch
    and hand the outputs over in a free slot."""
    die_with_parent()
    tune_allocator()
    torch.set_num_threads(1)
    os.environ["GNNFLOW_RANK"] = str(spec.rank)
    try:
        if spec.world_size > 1:  # the samplers' own group; rank 0's trainer holds its store
            store = connect_store(spec.addr, spec.port, spec.world_size, spec.timeout_s)
            init_group(spec.rank, spec.world_size, store, "gloo", spec.timeout_s)
        strategy = _build_stages(spec)
        slots = _Slots(min_slot_bytes)
        results.put(("ready",))
        while True:
            try:
                req = requests.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent_pid:
                    return
                continue
            if req is None:
                return
            epoch, index, targets = req
            mb = MiniBatch(epoch=epoch, index=index, targets=torch.from_numpy(targets))
            t0 = time.perf_counter()
            strategy.sample_stage(mb)
            t1 = time.perf_counter()
            slot = _take_slot(free, parent_pid)
            if slot is None:
                return
            # the load stage gathers the input rows straight into the slot (offset 0)
            rows = (mb.blocks[0].num_src, strategy.in_dim)
            rows_bytes = 4 * rows[0] * rows[1]
            grown = slots.ensure(slot, -(-rows_bytes // _ALIGN) * _ALIGN + _pack(mb)[2])
            if strategy.feature_store is not None:
                mb.meta["inputs_out"] = slots[slot][:rows_bytes].view(torch.float32).view(rows)
            t2 = time.perf_counter()
            strategy.load_stage(mb)
            times = {"sample": t1 - t0, "load": time.perf_counter() - t2}
            tensors, layout, nbytes = _pack(mb)  # degrees the load stage added may need more room
            grown = slots.ensure(slot, nbytes) or grown  # the old buffer lives on in ``tensors``
            buf = slots[slot]
            for t, (_, _, _, off) in zip(tensors, layout, strict=True):
                dest = buf[off:off + t.numel() * t.element_size()].view(t.dtype)
                if dest.data_ptr() != t.data_ptr():
                    dest.copy_(t.reshape(-1))
            results.put(("batch", epoch, index, slot, grown, layout, mb.counters, times))
    except BaseException as exc:  # report to the rank, which raises it
        results.put(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # pragma: no cover - the process is ending anyway
                pass


class SamplerProcess:
    """One rank's sampler process and the slots it hands batches over in."""

    def __init__(self, spec: SamplerSpec, slots: int = 4, timeout_s: float = 120.0,
                 min_slot_bytes: int = 1 << 20) -> None:
        if slots < 1:
            raise DistributedError(f"sampler process: at least one slot, got {slots}")
        ctx = torch.multiprocessing.get_context("spawn")
        self.spec = spec
        self.slots = slots
        self.timeout_s = timeout_s
        self._requests = ctx.Queue()
        self._results = ctx.Queue()
        self._free = ctx.Queue()
        for k in range(slots):
            self._free.put(k)
        self._buffers: dict[int, torch.Tensor] = {}
        self.proc = ctx.Process(target=_serve, args=(spec, os.getpid(), self._requests, self._results, self._free,
                                                      int(min_slot_bytes)),
                                name=f"gnnflow-sampler{spec.rank}", daemon=True)
        self.proc.start()
        self._ready = False
        self._abandoned = 0  # batches requested by an abandoned map() and not yet received
        self.slots_made = 0  # slots the child made (first use, or remade larger for a bigger batch)
        self.store: Any = None  # rank 0's rendezvous store of the sampler processes, closed with them

    def _receive(self) -> tuple[Any, ...]:
        t0 = time.perf_counter()
        while True:
            try:
                msg = self._results.get(timeout=1.0)
            except queue.Empty:
                if not self.proc.is_alive():
                    raise DistributedError(f"sampler process of rank {self.spec.rank} died "
                                           f"(exit code {self.proc.exitcode})") from None
                if time.perf_counter() - t0 > self.timeout_s:
                    raise DistributedError(f"sampler process of rank {self.spec.rank}: no reply for "
                                           f"{self.timeout_s:.0f}s") from None
                continue
            if msg[0] == "error":
                raise DistributedError(f"sampler process of rank {self.spec.rank} failed: {msg[1]}\n{msg[2]}")
            return msg

    def _adopt(self, slot: int, grown: torch.Tensor | None) -> torch.Tensor:
        """Slot ``slot``'s buffer, taking ``grown`` when the child made it anew (first use, or a
        larger batch)."""
        if grown is not None:
            self._buffers[slot] = grown
            self.slots_made += 1
        return self._buffers[slot]

    def _release(self, msg: tuple[Any, ...]) -> None:
        """Hand a batch message's slot back unread."""
        self._adopt(msg[3], msg[4])
        self._free.put(msg[3])

    def wait_ready(self) -> None:
        """Block until the child has opened its part and built its sampler."""
        if not self._ready:
            self._receive()
            self._ready = True

    def map(self, schedule: Iterable[MiniBatch]) -> Iterator[MiniBatch]:
        """The scheduled batches with ``blocks`` and ``inputs`` made by the child (in schedule order).

        Up to ``slots`` requests are outstanding, so the child samples ahead
        while this rank copies the previous batch out of its slot.
        """
        self.wait_ready()
        self._drain_abandoned()
        pending: collections.deque[MiniBatch] = collections.deque()
        batches = iter(schedule)

        def refill() -> None:
            while len(pending) < self.slots:
                mb = next(batches, None)
                if mb is None:
                    return
                self._requests.put((mb.epoch, mb.index, mb.targets.numpy()))
                pending.append(mb)

        refill()
        try:
            yield from self._collect(pending, refill)
        finally:
            # abandoned early (a run stopping mid-schedule): the child still owes these batches;
            # a later map() takes them first, close() does not need them
            self._abandoned += len(pending)

    def _drain_abandoned(self) -> None:
        while self._abandoned:
            self._release(self._receive())
            self._abandoned -= 1

    def _collect(self, pending: collections.deque[MiniBatch], refill: Any) -> Iterator[MiniBatch]:
        while pending:
            _, epoch, index, slot, grown, layout, counters, times = self._receive()
            mb = pending.popleft()
            if (epoch, index) != (mb.epoch, mb.index):
                raise DistributedError(f"sampler process of rank {self.spec.rank}: got batch {(epoch, index)}, "
                                       f"expected {(mb.epoch, mb.index)}")
            _unpack(self._adopt(slot, grown), layout, mb)
            self._free.put(slot)
            refill()
            mb.counters.update(counters)
            for name, seconds in times.items():
                mb.times[name] = mb.times.get(name, 0.0) + float(seconds)
            yield mb

    def cpu_seconds(self) -> float:
        """CPU time the child has used so far (Linux ``/proc``; 0.0 where unavailable)."""
        try:
            fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the child and release the slots.

        Batches the child finishes after the stop request are drained (their
        slots handed back) so that it never waits for a slot nobody frees.
        """
        if self.proc.is_alive():
            try:
                self._requests.put(None)
            except (OSError, ValueError):  # pragma: no cover - queue already closed
                pass
        deadline = time.perf_counter() + timeout_s
        while self.proc.is_alive() and time.perf_counter() < deadline:
            try:
                msg = self._results.get(timeout=0.2)
            except queue.Empty:
                continue
            if msg[0] == "batch":
                self._release(msg)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout_s)
        self._buffers.clear()
        for q in (self._requests, self._results, self._free):
            q.cancel_join_thread()
            q.close()
        if self.store is not None:
            self.store.close()
            self.store = None


def start_sampler_process(strategy: Any) -> SamplerProcess:
    """Spawn ``strategy``'s sampler process (``samplers=process``), which runs its sample and load
    stages.  Collective with several ranks: rank 0 holds the rendezvous store of the sampler
    processes' own process group (closed with its process)."""
    import torch.distributed as dist

    from gnnflow.comm.collectives import world
    from gnnflow.runtime.group import dist_timeout_s
    from gnnflow.runtime.network import run_address, start_store

    cls = type(strategy)
    rank, size = world()
    addr, port, store = run_address(), 0, None
    if size > 1:
        if rank == 0:  # the store outlives the samplers' rendezvous; bound to the run's address only
            store = start_store(addr, size, dist_timeout_s())
            port = store.port
        box = [addr, port]
        dist.broadcast_object_list(box, 0)
        addr, port = str(box[0]), int(box[1])
    spec = SamplerSpec(strategy=f"{cls.__module__}:{cls.__qualname__}", cfg=strategy.cfg, rank=rank,
                       world_size=size, addr=addr, port=port)
    proc = SamplerProcess(spec)
    proc.store = store
    return proc
