"""Buffers kept for reuse: :class:`BufferPool`, the float32 buffers of a rank's batch input
rows and of an exchange's rounds, handed out again once nothing uses them.

A rank maps every buffer of :data:`gnnflow.runtime.processes.MMAP_THRESHOLD` bytes and more
afresh and unmaps it when it is freed (:func:`~gnnflow.runtime.processes.tune_allocator`: that
bounds a rank's resident memory), and the kernel zeroes each page of a new mapping at its first
touch.  On the products-shaped benchmark (4 ranks, SAGE, fanouts 15,10,5, batch 1000 a rank) a
batch's input rows are about 316,000 x 100 float32 (126 MB) and its feature exchange moves up
to 16 MiB a round each way: zeroing pages was 29 % of the loading thread's CPU (perf).  A pool
keeps those few buffers mapped instead; every other allocation stays as it was.

A pooled buffer is free when no tensor but the pool's own holds its storage (the storage's use
count: a view handed out, a numpy array over it, an autograd node that saved it each hold
one), so a batch's rows are reused only after its training step has let go of them, whoever
kept them and for however long.  When every pooled buffer is in use and the pool is full, a
plain tensor is made, as without a pool.
"""

from __future__ import annotations

import math
import threading

import torch

#: torch's count of a storage's holders (private; without it a pool hands out plain tensors)
_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)


def _users(t: torch.Tensor) -> int:
    """How many tensors (and storage objects) hold ``t``'s storage."""
    assert _USE_COUNT is not None
    return int(_USE_COUNT(t.untyped_storage()._cdata))


class BufferPool:
    """At most ``limit`` flat float32 CPU buffers, handed out as ``[rows, *tail]`` views
    (:meth:`take`).  A buffer is made ``slack`` times the size asked for, so batches a little
    larger than the last fit it too; a free buffer too small for a request is replaced."""

    def __init__(self, limit: int, slack: float = 1.0625) -> None:
        if limit < 1 or slack < 1.0:
            raise ValueError(f"BufferPool: limit {limit} (at least 1), slack {slack} (at least 1)")
        self.limit, self.slack = int(limit), float(slack)
        self._buffers: list[tuple[torch.Tensor, int]] = []  # (buffer, its use count held by the pool alone)
        self._lock = threading.Lock()
        self.made = 0  # buffers made for the pool
        self.plain = 0  # tensors made outside it (every pooled buffer in use)

    def take(self, rows: int, tail: tuple[int, ...] = ()) -> torch.Tensor:
        """An uninitialised float32 ``[rows, *tail]`` tensor: a view of a free pooled buffer (the
        smallest that fits), of a new one while the pool has room (or in place of a free one too
        small), else a plain tensor."""
        need = int(rows) * math.prod(tail)
        if need == 0:
            return torch.empty((rows, *tail), dtype=torch.float32)
        if _USE_COUNT is None:  # this torch cannot tell when a buffer is free
            self.plain += 1
            return torch.empty((rows, *tail), dtype=torch.float32)
        with self._lock:  # a buffer found free is handed out (its use count raised) before another thread looks
            free = [i for i, (buf, alone) in enumerate(self._buffers) if _users(buf) == alone]
            fits = [i for i in free if self._buffers[i][0].numel() >= need]
            if fits:
                buf = self._buffers[min(fits, key=lambda i: self._buffers[i][0].numel())][0]
            elif len(self._buffers) < self.limit or free:
                if len(self._buffers) >= self.limit:  # a free buffer too small: make a larger one instead
                    self._buffers.pop(max(free, key=lambda i: self._buffers[i][0].numel()))
                buf = torch.empty(max(need, int(need * self.slack)), dtype=torch.float32)
                self._buffers.append((buf, _users(buf)))
                self.made += 1
            else:
                self.plain += 1
                return torch.empty((rows, *tail), dtype=torch.float32)
            return buf[:need].view(rows, *tail)

    def release(self) -> None:
        """Drop the buffers nothing uses (their memory goes back to the system)."""
        with self._lock:
            self._buffers = [(buf, alone) for buf, alone in self._buffers if _users(buf) != alone]

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers the pool holds."""
        return sum(buf.numel() * buf.element_size() for buf, _ in self._buffers)
