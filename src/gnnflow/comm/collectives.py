"""Collective primitives every distributed strategy shares.

* :func:`alltoallv` — each rank sends a variable number of rows to every peer
  (one ``all_to_all_single`` for the counts, one for the rows); :func:`alltoall_slots`
  does it in one when both sides know a bound, :func:`count_matrix` tells every rank
  the whole traffic matrix.
* :class:`AllToAllRows` — the same exchange as an autograd function: forward
  sends rows along the send lists, backward sends the gradients back along the
  same paths (the per-layer shuffle of split parallelism, GSplit §5).
* :class:`CommStats` — bytes sent and received per peer, the counts a run records.

With one rank (or no process group) every call is the identity, so single-
process code paths need no special case.

Every collective of the code base goes through this module, and each call names the kind of
its tensors (``HOST`` bookkeeping or ``COMPUTE`` payload, :mod:`gnnflow.runtime.devices`):
the tensors are checked to be on that kind's device, so under ``cpu:gloo,cuda:nccl`` the
bookkeeping goes over gloo and the payload over NCCL.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.runtime.buffers import BufferPool
from gnnflow.runtime.devices import (
    COMPUTE,
    HOST,
    check_placement,
    group_backend,
    stages_through_host,
)
from gnnflow.runtime.watchdog import note_progress


def world(group: Any = None) -> tuple[int, int]:
    """(rank, world_size) in ``group`` (None = the default group); (0, 1) when no process group is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


@dataclass
class CommStats:
    """Bytes moved by this rank, per peer."""

    world_size: int
    bytes_sent: list[int] = field(default_factory=list)
    bytes_received: list[int] = field(default_factory=list)
    calls: int = 0

    def __post_init__(self) -> None:
        if not self.bytes_sent:
            self.bytes_sent = [0] * self.world_size
            self.bytes_received = [0] * self.world_size

    def add(self, sent: list[int], received: list[int]) -> None:
        self.calls += 1
        for p in range(self.world_size):
            self.bytes_sent[p] += sent[p]
            self.bytes_received[p] += received[p]

    @property
    def total_sent(self) -> int:
        rank, _ = world()
        return sum(b for p, b in enumerate(self.bytes_sent) if p != rank)

    @property
    def total_received(self) -> int:
        rank, _ = world()
        return sum(b for p, b in enumerate(self.bytes_received) if p != rank)

    def reset(self) -> None:
        self.bytes_sent = [0] * self.world_size
        self.bytes_received = [0] * self.world_size
        self.calls = 0


def all_reduce(t: torch.Tensor, kind: str, op: Any = dist.ReduceOp.SUM, group: Any = None) -> None:
    """``dist.all_reduce`` of a ``kind`` tensor (in place)."""
    check_placement(kind, "all_reduce", [t], group)
    dist.all_reduce(t, op=op, group=group)


#: the most bytes (the tensor times the ranks) :func:`all_reduce_sum` sums with one all-to-all
SUM_BY_ALLTOALL_BYTES = 8 << 20


def all_reduce_sum(t: torch.Tensor, kind: str, group: Any = None) -> None:
    """Sum the contiguous ``t`` over the ranks of ``group``, in place.

    Where ``t`` is on the host (gloo carries it) and ``t`` times the ranks is at most
    :data:`SUM_BY_ALLTOALL_BYTES`, every rank sends the whole of ``t`` to every peer in one
    all-to-all and adds the copies in rank order: on a loopback gloo's ``all_reduce`` of 20,000
    floats took 1.3 ms and 0.66 ms of CPU (its ring's steps) against an all-to-all's 0.26 ms and
    0.18 ms (2 ranks, measured here), and the rank-order sum gives every rank the same bits.
    Larger tensors, and device tensors, go through ``all_reduce``.
    """
    _, size = world(group)
    if size == 1:
        return
    n = t.numel()
    if t.device.type != "cpu" or not t.is_contiguous() or n * t.element_size() * size > SUM_BY_ALLTOALL_BYTES:
        all_reduce(t, kind, group=group)
        return
    flat = t.view(-1)
    parts = _every_rank(flat, kind, group)
    flat.copy_(parts[0])
    for p in range(1, size):  # rank order on every rank: the same sum everywhere
        flat.add_(parts[p])


def _every_rank(flat: torch.Tensor, kind: str, group: Any = None) -> torch.Tensor:
    """``[P, n]``: every rank's 1-D ``flat`` (n elements), row q from rank q, by one all-to-all of
    ``flat`` to every peer (an all-gather that takes the all-to-all's path)."""
    size = world(group)[1]
    rows = torch.empty(size * flat.numel(), dtype=flat.dtype, device=flat.device)
    all_to_all_single(rows, flat.repeat(size), kind, group)
    return rows.view(size, -1)


def all_gather(out: list[torch.Tensor], t: torch.Tensor, kind: str, group: Any = None) -> None:
    """``dist.all_gather`` of a ``kind`` tensor into ``out``."""
    check_placement(kind, "all_gather", [t, *out], group)
    dist.all_gather(out, t, group=group)


def broadcast(t: torch.Tensor, src: int, kind: str, group: Any = None, async_op: bool = False) -> Any:
    """``dist.broadcast`` of a ``kind`` tensor from ``src``."""
    check_placement(kind, "broadcast", [t], group)
    return dist.broadcast(t, src=src, group=group, async_op=async_op)


class _Done:
    """The work handle of an exchange that completed before it returned."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


# process group -> its LocalMesh, or None (gloo carries it); weak: a destroyed group is not kept
# alive to the interpreter's end (a gloo group freed that late aborted its process)
_meshes: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _local_mesh(group: Any) -> Any:
    """``group``'s :class:`gnnflow.comm.local.LocalMesh` (made on first use: collective), or None
    where its ranks are not all on this host (:mod:`gnnflow.comm.local`)."""
    from gnnflow.comm import local
    from gnnflow.runtime.group import dist_timeout_s

    g = group if group is not None else dist.group.WORLD
    if g in _meshes:
        return _meshes[g]
    rank, size = world(group)

    def gather(t: torch.Tensor) -> torch.Tensor:
        rows = [torch.empty_like(t) for _ in range(size)]
        dist.all_gather(rows, t, group=group)
        return torch.stack(rows)

    _meshes[g] = mesh = local.connect_mesh(rank, size, gather, dist_timeout_s())
    return mesh


def all_to_all_single(recv: torch.Tensor, send: torch.Tensor, kind: str, group: Any = None,
                      async_op: bool = False, **splits: Any) -> Any:
    """``dist.all_to_all_single`` of ``kind`` tensors (``splits``: its split-size arguments).
    Host tensors of a group whose ranks share this host go over Unix sockets
    (:mod:`gnnflow.comm.local`; an asynchronous one completes before it returns)."""
    check_placement(kind, "all_to_all_single", [recv, send], group)
    if send.device.type == "cpu" and recv.device.type == "cpu":
        mesh = _local_mesh(group)
        if mesh is not None:
            mesh.all_to_all(recv, send, splits.get("output_split_sizes"), splits.get("input_split_sizes"))
            return _Done() if async_op else None
    return dist.all_to_all_single(recv, send, group=group, async_op=async_op, **splits)


def exchange_point_to_point(sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]],
                            kind: str, tag: int = 0) -> None:
    """Send ``(peer, tensor)`` of ``sends`` and receive into ``recvs`` as one batch of point-to-point
    operations (``dist.batch_isend_irecv``: NCCL posts them as one group, so no pair of ranks waits
    on each other's order); returns when all are done.  Where gloo carries CUDA tensors (ranks
    sharing a GPU) the tensors are staged through host copies, since gloo sends host memory only
    (:func:`~gnnflow.runtime.devices.stages_through_host`); the copies are checked as ``HOST``
    tensors staging ``kind``."""
    tensors = [t for _, t in sends] + [t for _, t in recvs]
    check_placement(kind, "batch_isend_irecv", tensors)
    if not tensors:
        return
    staged = stages_through_host(tensors[0].device, group_backend())
    if staged:
        sends = [(p, torch.empty_like(t, device="cpu").copy_(t)) for p, t in sends]
        host_recvs = [(p, torch.empty_like(t, device="cpu")) for p, t in recvs]
        check_placement(HOST, "batch_isend_irecv", [t for _, t in sends] + [t for _, t in host_recvs],
                        staged=kind)
    else:
        host_recvs = recvs
    ops = [dist.P2POp(dist.irecv, t, p, tag=tag) for p, t in host_recvs]
    ops += [dist.P2POp(dist.isend, t, p, tag=tag) for p, t in sends]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    if staged:
        for (_, t), (_, h) in zip(recvs, host_recvs, strict=True):
            t.copy_(h)


def exchange_counts(counts: list[int] | torch.Tensor, group: Any = None) -> list[int]:
    """Send ``counts[p]`` to rank p; return what every peer sent to this rank.

    ``group``: a process group spanning all ranks (e.g. from ``dist.new_group``)
    so a background thread's collectives never interleave with the training
    thread's (see ``gnnflow.strategies.minibatch.pipeline``), or a sub-group of ranks (split
    groups, GSplit §6.4; ``counts`` then has one entry per group rank); None =
    the default group.
    """
    _, size = world(group)
    send = torch.as_tensor(counts, dtype=torch.int64).reshape(size)
    if size == 1:
        return send.tolist()
    recv = torch.empty_like(send)
    all_to_all_single(recv, send, HOST, group)
    return recv.tolist()


def count_matrix(counts: list[int] | torch.Tensor, group: Any = None) -> np.ndarray:
    """Every rank's ``counts`` (one per peer): ``m[q, p]`` = what rank q sends rank p.  One collective.

    Where :func:`exchange_counts` tells a rank only what comes to it, this tells every rank the
    whole traffic matrix, so decisions that must agree (e.g. the rounds of
    :func:`exchange_rows_in_rounds`) need no further collective.  It is an all-to-all of the
    row to every peer: gloo's all-gather of a few integers took about twice an all-to-all's time
    and CPU on a loopback (measured here).
    """
    _, size = world(group)
    send = torch.as_tensor(counts, dtype=torch.int64).reshape(size)
    if size == 1:
        return send.numpy().reshape(1, 1).copy()
    return _every_rank(send, HOST, group).numpy()


def alltoall_slots(
    send: list[torch.Tensor],
    send_slots: list[int],
    recv_slots: list[int],
    stats: CommStats | None = None,
    group: Any = None,
    *,
    kind: str,
) -> list[torch.Tensor]:
    """Send ``send[p]`` (at most ``send_slots[p]`` rows) to rank p in a slot of ``send_slots[p]``
    rows; return the ``recv_slots[p]``-row slot from each peer (unfilled rows are zero).

    One collective where :func:`alltoallv` needs two: both sides know the slot sizes in advance
    (e.g. an upper bound on a reply) and the payload itself says how much of its slot it fills.
    ``stats`` counts the slots, i.e. the bytes that travel.
    """
    _, size = world(group)
    if size == 1:
        return list(send)
    if len(send) != size:
        raise ValueError(f"alltoall_slots needs one tensor per rank ({size}), got {len(send)}")
    ref = send[0]
    tail = tuple(ref.shape[1:])
    flat = torch.zeros((sum(send_slots), *tail), dtype=ref.dtype, device=ref.device)
    at = 0
    for t, slot in zip(send, send_slots, strict=True):
        n = int(t.shape[0])
        if n > slot:
            raise ValueError(f"alltoall_slots: {n} rows for a slot of {slot}")
        flat[at:at + n] = t
        at += slot
    recv = torch.empty((sum(recv_slots), *tail), dtype=ref.dtype, device=ref.device)
    note_progress()
    all_to_all_single(recv, flat, kind, group, output_split_sizes=list(recv_slots),
                      input_split_sizes=list(send_slots))
    if stats is not None:
        row_bytes = ref.element_size() * (int(np.prod(tail)) if tail else 1)
        stats.add([c * row_bytes for c in send_slots], [c * row_bytes for c in recv_slots])
    return list(torch.split(recv, list(recv_slots), 0))


class PendingAllToAll:
    """A started variable-size all-to-all; :meth:`wait` returns the rows from each peer."""

    def __init__(self, work: Any, recv: torch.Tensor, recv_counts: list[int]) -> None:
        self._work = work
        self._recv = recv
        self.recv_counts = recv_counts

    def wait(self) -> list[torch.Tensor]:
        if self._work is not None:
            self._work.wait()
            self._work = None
        return list(torch.split(self._recv, self.recv_counts, 0))


def start_alltoallv(
    send: list[torch.Tensor],
    stats: CommStats | None = None,
    recv_counts: list[int] | None = None,
    group: Any = None,
    *,
    kind: str,
) -> PendingAllToAll:
    """Non-blocking :func:`alltoallv`: counts are exchanged now (unless given), rows are in
    flight until :meth:`PendingAllToAll.wait`.  A collective: every rank calls it in the
    same order.  With one rank the rows are returned as they are."""
    rank, size = world(group)
    note_progress()
    if size == 1:
        return PendingAllToAll(None, torch.cat(send, 0) if send else torch.empty(0),
                               [int(t.shape[0]) for t in send])
    if len(send) != size:
        raise ValueError(f"alltoallv needs one tensor per rank ({size}), got {len(send)}")
    send_counts = [int(t.shape[0]) for t in send]
    if recv_counts is None:
        recv_counts = exchange_counts(send_counts, group)
    ref = send[0]
    tail = tuple(ref.shape[1:])
    flat_send = torch.cat([t.reshape(t.shape[0], *tail) for t in send], 0).contiguous()
    recv = torch.empty((sum(recv_counts), *tail), dtype=ref.dtype, device=ref.device)
    work = all_to_all_single(recv, flat_send, kind, group, async_op=True, output_split_sizes=recv_counts,
                             input_split_sizes=send_counts)
    if stats is not None:
        row_bytes = ref.element_size() * (int(torch.tensor(tail).prod().item()) if tail else 1)
        stats.add([c * row_bytes for c in send_counts], [c * row_bytes for c in recv_counts])
    return PendingAllToAll(work, recv, recv_counts)


def alltoallv(
    send: list[torch.Tensor],
    stats: CommStats | None = None,
    recv_counts: list[int] | None = None,
    group: Any = None,
    *,
    kind: str,
) -> list[torch.Tensor]:
    """Send ``send[p]`` (rows) to rank p; return the list of rows received from each peer.

    All tensors share dtype and trailing shape, and live where ``kind`` says (``HOST`` or
    ``COMPUTE``, :mod:`gnnflow.runtime.devices`); the counts go over the host.
    ``recv_counts`` skips the count exchange when the caller already knows it (e.g. a
    precomputed shuffle index).  ``group`` as in :func:`exchange_counts` (a group over all
    ranks, same rank order).
    """
    if world(group)[1] == 1:
        return list(send)
    return start_alltoallv(send, stats, recv_counts, group, kind=kind).wait()


def exchange_rows_in_rounds(
    gather: Any,
    matrix: np.ndarray,
    scatter: Any,
    row_shape: tuple[int, ...],
    max_bytes: int,
    stats: CommStats | None = None,
    group: Any = None,
    buffers: BufferPool | None = None,
) -> int:
    """An all-to-all of rows in rounds of at most ~``max_bytes`` sent and received per rank.

    ``gather(peer, lo, hi, out)`` writes rows ``lo:hi`` of what this rank sends ``peer`` into
    ``out`` (a view of the round's send buffer); ``scatter(peer, lo, hi, rows)`` takes rows
    ``lo:hi`` of what ``peer`` sent.  Round ``j`` of ``R`` carries rows
    ``[j*c//R, (j+1)*c//R)`` of each pair's ``c`` rows, a cut both sides compute alike.
    ``matrix`` is the exchange's whole traffic matrix in rows (:func:`count_matrix`:
    ``matrix[q, p]`` rows go from rank q to rank p), so every rank derives the same ``R``, the
    largest any rank needs, with no further collective.  The buffers of an exchange are two
    rounds' worth, not the whole exchange, and rows are gathered straight into the send buffer;
    ``buffers`` (a pool of at least two) gives them, so that exchange after exchange reuses them.
    Collective; returns the number of rounds.
    """
    rank, size = world(group)
    send_counts = [int(c) for c in matrix[rank]]
    recv_counts = [int(c) for c in matrix[:, rank]]
    row_bytes = 4 * int(np.prod(row_shape)) if row_shape else 4
    note_progress()
    most = int(max(matrix.sum(axis=0).max(), matrix.sum(axis=1).max())) if matrix.size else 0
    rounds_n = max(1, -(-most * row_bytes // max(1, max_bytes)))
    new = buffers.take if buffers is not None else \
        (lambda rows, tail: torch.empty((rows, *tail), dtype=torch.float32))
    for j in range(rounds_n):
        s_lo = [c * j // rounds_n for c in send_counts]
        s_hi = [c * (j + 1) // rounds_n for c in send_counts]
        r_lo = [c * j // rounds_n for c in recv_counts]
        r_hi = [c * (j + 1) // rounds_n for c in recv_counts]
        s_n = [h - lo for lo, h in zip(s_lo, s_hi, strict=True)]
        r_n = [h - lo for lo, h in zip(r_lo, r_hi, strict=True)]
        flat = new(sum(s_n), row_shape)
        at = 0
        for p in range(size):
            if s_n[p]:
                gather(p, s_lo[p], s_hi[p], flat[at:at + s_n[p]])
            at += s_n[p]
        recv = new(sum(r_n), row_shape)
        if size > 1:
            all_to_all_single(recv, flat, HOST, group, output_split_sizes=r_n, input_split_sizes=s_n)
        else:
            recv.copy_(flat)
        if stats is not None:
            stats.add([n * row_bytes for n in s_n], [n * row_bytes for n in r_n])
        del flat
        at = 0
        for p in range(size):
            if r_n[p]:
                scatter(p, r_lo[p], r_hi[p], recv[at:at + r_n[p]])
            at += r_n[p]
        del recv  # free for the next round's take
    return rounds_n


class AllToAllRows(torch.autograd.Function):
    """Rows ``x[send_index[p]]`` go to rank p; rows from peers are concatenated in rank order.

    Backward: the gradient of each received row is sent back to where it came
    from and summed into ``x``'s gradient at the send positions (a row sent to
    several peers gets the sum of their gradients).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, send_index: list[torch.Tensor], recv_counts: list[int],
                stats: CommStats | None, group: Any = None) -> torch.Tensor:  # type: ignore[override]
        ctx.send_index = send_index
        ctx.recv_counts = recv_counts
        ctx.num_rows = x.shape[0]
        ctx.stats = stats
        ctx.group = group
        parts = alltoallv([x[idx] for idx in send_index], stats, recv_counts, group, kind=COMPUTE)
        return torch.cat(parts, 0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        send_counts = [int(i.numel()) for i in ctx.send_index]
        back = alltoallv(list(torch.split(grad.contiguous(), ctx.recv_counts, 0)), ctx.stats, send_counts,
                         ctx.group, kind=COMPUTE)
        gx = grad.new_zeros((ctx.num_rows, *grad.shape[1:]))
        for idx, g in zip(ctx.send_index, back, strict=True):
            gx.index_add_(0, idx, g)
        return gx, None, None, None, None


def all_to_all_rows(x: torch.Tensor, send_index: list[torch.Tensor], recv_counts: list[int],
                    stats: CommStats | None = None, group: Any = None) -> torch.Tensor:
    """Differentiable row exchange; see :class:`AllToAllRows` (``group``: as in :func:`alltoallv`)."""
    return AllToAllRows.apply(x, send_index, recv_counts, stats, group)


def all_reduce_gradients(module: torch.nn.Module, average: bool = True) -> None:
    """Sum (or average) every parameter gradient across ranks, flattened into one call."""
    _, size = world()
    note_progress()
    if size == 1:
        return
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce_sum(flat, COMPUTE)
    if average:
        flat /= size
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def part_degrees(part: Any, node_part: Any, group: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Whole-graph in- and out-degree (int64) of ``part``'s inner vertices, from the parts alone.
    Collective over ``group`` (rank i holds part i).

    A source's out-edges are spread over the parts holding their destinations:
    every part counts them, the partial counts of halo vertices go to their
    owners (one exchange), which sum them.
    """
    n_in = part.num_inner
    partial = np.bincount(np.asarray(part.indices), minlength=part.num_local).astype(np.int64)
    out_inner = partial[:n_in].copy()
    if world(group)[1] > 1:
        halo = np.asarray(part.halo_ids, dtype=np.int64)
        owner = np.asarray(node_part[halo], dtype=np.int64)
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=world(group)[1]).tolist()
        ids_in = alltoallv(list(torch.split(torch.from_numpy(halo[order]), counts)), group=group, kind=HOST)
        deg_in = alltoallv(list(torch.split(torch.from_numpy(partial[n_in:][order]), counts)),
                           recv_counts=[int(t.numel()) for t in ids_in], group=group, kind=HOST)
        np.add.at(out_inner, part.global_to_local(torch.cat(ids_in).numpy()), torch.cat(deg_in).numpy())
    in_deg = np.diff(np.asarray(part.indptr, dtype=np.int64))
    return in_deg, out_inner

