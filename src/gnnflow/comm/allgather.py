"""``graph_allgather``: fetch halo embeddings by executing a communication plan (DGCL §4.2, §6).

Forward runs the rank's stage table stage by stage: in stage ``k`` the rank posts
one ``isend`` per peer with the rows of its send table and one ``irecv`` per peer
for its receive table, waits for all of them (the stage barrier of §5.1 is
implied by the point-to-point completions), and writes the received rows into
its buffer ``[inner | halo | relay]``; relayed rows are forwarded in later stages.

Backward runs the stages in reverse with send and receive swapped (§6.1): a rank
returns the gradient of every row it received to the peer it came from, and
adds the gradients it gets to the rows it sent.  Each stage is split into
sub-stages (§6.2) so that within one sub-stage a row receives gradient from at
most one peer; the add is then a plain (non-accumulating) indexed update.

The ``swap`` baseline (NeuGraph, DGCL §7) is executed for real through host
shared memory: every rank writes all its embeddings into a shared file-backed
buffer, a barrier, every rank reads its halo rows; backward writes halo gradients
to a second shared buffer and owners sum them.  Ranks on several hosts each use
their host's buffers (its own ``/dev/shm``); after the write barrier each host's
leader (its lowest rank) sends the rows other hosts read to their leaders (one
all-to-all among the leaders, forward and backward), and a second barrier
releases the readers.  This extension is ours: NeuGraph and DGCL's swap run on
one machine.
"""

from __future__ import annotations

import atexit
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.comm.collectives import CommStats, alltoallv, exchange_point_to_point
from gnnflow.comm.plan import CommRelation, RankTable
from gnnflow.io import reserve_space
from gnnflow.runtime.devices import COMPUTE, HOST
from gnnflow.runtime.processes import run_shm_dir

_FWD_TAG = 0
_BWD_TAG = 1 << 12


@dataclass
class AllgatherStats:
    """Per-call accounting: bytes per peer and wall time per stage (forward and backward)."""

    world_size: int
    comm: CommStats = field(init=False)
    forward_stage_s: list[float] = field(default_factory=list)
    backward_stage_s: list[float] = field(default_factory=list)
    calls: int = 0

    def __post_init__(self) -> None:
        self.comm = CommStats(self.world_size)

    def _add_stage(self, which: list[float], s: int, dt: float) -> None:
        while len(which) <= s:
            which.append(0.0)
        which[s] += dt


@dataclass
class _Compiled:
    """Positions of a :class:`RankTable` as tensors (computed once per table)."""

    fwd: list[list[tuple[int, torch.Tensor, torch.Tensor]]]  # per stage: (peer, send_pos, recv_pos)
    # per stage, per sub-stage: (peer, rows whose grads to send back, rows that receive grads)
    bwd: list[list[list[tuple[int, torch.Tensor, torch.Tensor]]]]


def _compile(table: RankTable) -> _Compiled:
    fwd, bwd = [], []
    for stage in table.stages:
        row = []
        nsub = 0
        for t in stage:
            sp = torch.from_numpy(table.positions(t.send_ids))
            rp = torch.from_numpy(table.positions(t.recv_ids))
            row.append((t.peer, sp, rp))
            for lab in (t.send_sub, t.recv_sub):
                if lab.shape[0]:
                    nsub = max(nsub, int(lab.max()) + 1)
        fwd.append(row)
        subs = []
        for lvl in range(nsub):
            sub_row = []
            for t, (peer, sp, rp) in zip(stage, row, strict=True):
                send_back = rp[torch.from_numpy(t.recv_sub == lvl)]
                get_into = sp[torch.from_numpy(t.send_sub == lvl)]
                if send_back.numel() or get_into.numel():
                    sub_row.append((peer, send_back, get_into))
            subs.append(sub_row)
        bwd.append(subs)
    return _Compiled(fwd, bwd)


def _compiled(table: RankTable) -> _Compiled:
    c = getattr(table, "_compiled", None)
    if c is None:
        c = _compile(table)
        table._compiled = c  # type: ignore[attr-defined]
    return c


def _exchange(sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]], tag: int,
              stats: AllgatherStats | None) -> None:
    exchange_point_to_point(sends, recvs, COMPUTE, tag)
    if stats is not None:
        sent = [0] * stats.world_size
        got = [0] * stats.world_size
        for peer, buf in sends:
            sent[peer] += buf.numel() * buf.element_size()
        for peer, buf in recvs:
            got[peer] += buf.numel() * buf.element_size()
        stats.comm.add(sent, got)


class _PlannedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local: torch.Tensor, table: RankTable,  # type: ignore[override]
                stats: AllgatherStats | None) -> torch.Tensor:
        comp = _compiled(table)
        ctx.table, ctx.stats = table, stats
        n_inner = table.inner_ids.shape[0]
        if local.shape[0] != n_inner:
            raise ValueError(f"graph_allgather: rank {table.rank} has {n_inner} inner vertices, "
                             f"got {local.shape[0]} rows")
        tail = tuple(local.shape[1:])
        buf = local.new_empty((table.buffer_size, *tail))
        buf[:n_inner] = local
        for s, row in enumerate(comp.fwd):
            t0 = time.perf_counter()
            sends = [(peer, buf[sp].contiguous()) for peer, sp, _ in row if sp.numel()]
            recvs = [(peer, local.new_empty((rp.numel(), *tail)), rp) for peer, _, rp in row if rp.numel()]
            _exchange(sends, [(p, b) for p, b, _ in recvs], _FWD_TAG + s, stats)
            for _, b, rp in recvs:
                buf[rp] = b
            if stats is not None:
                stats._add_stage(stats.forward_stage_s, s, time.perf_counter() - t0)
        if stats is not None:
            stats.calls += 1
        return buf[: table.num_local].clone()

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        table: RankTable = ctx.table
        stats: AllgatherStats | None = ctx.stats
        comp = _compiled(table)
        tail = tuple(grad_out.shape[1:])
        g = grad_out.new_zeros((table.buffer_size, *tail))
        g[: table.num_local] = grad_out
        for s in reversed(range(len(comp.bwd))):
            t0 = time.perf_counter()
            for lvl, row in enumerate(comp.bwd[s]):
                sends = [(peer, g[back].contiguous()) for peer, back, _ in row if back.numel()]
                recvs = [(peer, grad_out.new_empty((into.numel(), *tail)), into)
                         for peer, _, into in row if into.numel()]
                _exchange(sends, [(p, b) for p, b, _ in recvs], _BWD_TAG + 64 * s + lvl, stats)
                if recvs:
                    pos = torch.cat([into for _, _, into in recvs])
                    vals = torch.cat([b for _, b, _ in recvs])
                    g[pos] = g[pos] + vals  # positions are unique within a sub-stage (§6.2)
            if stats is not None:
                stats._add_stage(stats.backward_stage_s, s, time.perf_counter() - t0)
        return g[: table.inner_ids.shape[0]], None, None


# --------------------------------------------------------------------------- swap through host memory


@dataclass
class SwapTable:
    """A rank's part of the swap baseline: slots in the shared embedding and gradient buffers."""

    rank: int
    world_size: int
    inner_ids: np.ndarray
    halo_ids: np.ndarray
    num_slots: int  # rows of the shared embedding buffer (all vertices)
    write_offset: int  # this rank's inner rows go to [write_offset, write_offset + n_inner)
    read_slots: np.ndarray  # slot of each halo vertex
    num_grad_slots: int  # rows of the shared gradient buffer (all halos of all ranks)
    grad_offset: int  # this rank's halo gradients go to [grad_offset, grad_offset + n_halo)
    grad_read_slots: np.ndarray  # gradient slots holding gradients of this rank's vertices
    grad_read_pos: np.ndarray  # ... and the inner position each one belongs to
    planner: str = "swap"
    shm_dir: str | None = None
    # rows read per owner (halo rows of this rank written by rank q), and rows of this
    # rank read by each peer: the traffic through host memory, booked per peer
    read_counts: np.ndarray | None = None
    sent_counts: np.ndarray | None = None
    # ranks on several hosts: each host has its own buffers (its own /dev/shm), and the
    # host's leader (its lowest rank) passes rows between them; leaders[h] leads host h
    leaders: list[int] = field(default_factory=lambda: [0])
    host: int = 0  # this rank's host index
    # leaders only, per host h: embedding slots sent to / received from h (forward), and
    # gradient slots sent to / received from h (backward)
    emb_send: list[np.ndarray] = field(default_factory=list)
    emb_recv: list[np.ndarray] = field(default_factory=list)
    grad_send: list[np.ndarray] = field(default_factory=list)
    grad_recv: list[np.ndarray] = field(default_factory=list)

    @property
    def num_hosts(self) -> int:
        return len(self.leaders)

    @property
    def num_local(self) -> int:
        return int(self.inner_ids.shape[0] + self.halo_ids.shape[0])

    def book(self, comm: Any, row_bytes: int, backward: bool = False) -> None:
        """Count one exchange in ``comm`` (a CommStats): forward rows go owner -> reader,
        backward gradients reader -> owner."""
        sent = (self.read_counts if backward else self.sent_counts) * row_bytes
        recv = (self.sent_counts if backward else self.read_counts) * row_bytes
        comm.add([int(b) for b in sent], [int(b) for b in recv])

    def nbytes(self) -> int:
        return self.read_slots.nbytes + self.grad_read_slots.nbytes + self.grad_read_pos.nbytes


def _host_pairs(host_of: np.ndarray, src_rank: np.ndarray, dst_rank: np.ndarray, slots: np.ndarray,
                num_hosts: int) -> list[list[np.ndarray]]:
    """``pairs[a][b]``: the distinct ``slots`` whose row goes from a rank on host a to one on host
    b (a != b; empty on the diagonal), sorted."""
    ha, hb = host_of[src_rank], host_of[dst_rank]
    return [[np.unique(slots[(ha == a) & (hb == b)]) if a != b else np.zeros(0, dtype=np.int64)
             for b in range(num_hosts)] for a in range(num_hosts)]


def swap_tables(rel: CommRelation, hosts: list[str] | None = None) -> list[SwapTable]:
    """Swap baseline tables: every vertex has a slot (grouped by owner); halos read their owners' slots.

    ``hosts[r]``: the host of rank r (None: all on one).  Ranks on several hosts get one pair of
    buffers per host, and each host's leader gets the slots it passes to the other hosts' leaders.
    """
    p = rel.num_parts
    node_part = np.asarray(rel.node_part)
    order = np.argsort(node_part, kind="stable")
    slot = np.empty(node_part.shape[0], dtype=np.int64)
    slot[order] = np.arange(node_part.shape[0])
    sizes = np.bincount(node_part, minlength=p)
    offsets = np.r_[0, np.cumsum(sizes)]
    halos = [rel.halo_ids(r) for r in range(p)]
    goff = np.r_[0, np.cumsum([h.shape[0] for h in halos])]
    all_halo = np.concatenate(halos) if halos else np.zeros(0, dtype=np.int64)
    halo_owner = node_part[all_halo]
    # reads[r, q]: halo rows of rank r owned by rank q
    reads = np.stack([np.bincount(node_part[h], minlength=p) for h in halos]) if p else np.zeros((0, 0))
    names = list(hosts) if hosts is not None else [""] * p
    if len(names) != p:
        raise ValueError(f"swap_tables: {len(names)} hosts for {p} ranks")
    distinct = list(dict.fromkeys(names))  # in order of first rank: leaders ascend
    host_of = np.array([distinct.index(n) for n in names], dtype=np.int64)
    leaders = [names.index(n) for n in distinct]
    nh = len(distinct)
    if nh > 1:  # forward: owner -> reader of every halo row; backward: reader -> owner of its gradient
        reader = np.repeat(np.arange(p), [h.shape[0] for h in halos])
        emb_pairs = _host_pairs(host_of, halo_owner, reader, slot[all_halo], nh)
        grad_pairs = _host_pairs(host_of, reader, halo_owner, np.arange(all_halo.shape[0]), nh)
    out = []
    for r in range(p):
        mine = np.flatnonzero(halo_owner == r)
        h = int(host_of[r])
        lead = nh > 1 and leaders[h] == r
        out.append(SwapTable(
            r, p, order[offsets[r]:offsets[r + 1]].astype(np.int64), halos[r], int(node_part.shape[0]),
            int(offsets[r]), slot[halos[r]], int(goff[-1]), int(goff[r]), mine.astype(np.int64),
            (slot[all_halo[mine]] - offsets[r]).astype(np.int64),
            read_counts=reads[r].astype(np.int64), sent_counts=reads[:, r].astype(np.int64),
            leaders=leaders, host=h,
            emb_send=[emb_pairs[h][b] for b in range(nh)] if lead else [],
            emb_recv=[emb_pairs[a][h] for a in range(nh)] if lead else [],
            grad_send=[grad_pairs[h][b] for b in range(nh)] if lead else [],
            grad_recv=[grad_pairs[a][h] for a in range(nh)] if lead else []))
    return out


class _SharedBuffers:
    """File-backed shared memory (``/dev/shm``) visible to every rank of a host.

    Each host's leader makes the directory, named after the run
    (:func:`~gnnflow.runtime.processes.run_shm_dir`), so that host's launcher removes it even
    when the leader is killed before it can.  With several hosts the leaders also form a process
    group, over which :meth:`pass_rows` moves rows between the hosts' buffers.  Collective.
    """

    def __init__(self, table: SwapTable) -> None:
        rank = dist.get_rank()
        leader = table.leaders[table.host]
        made = run_shm_dir("swap") if rank == leader else None
        dirs: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(dirs, made)
        self.dir: str = dirs[leader]
        self.owner = rank == leader
        # every rank takes part in making the group; only the leaders are in it
        self.leaders = dist.new_group(table.leaders) if table.num_hosts > 1 else None
        self.maps: dict[tuple[str, int, int], torch.Tensor] = {}
        if self.owner:  # no shared files left behind even if close() is never called
            atexit.register(shutil.rmtree, self.dir, True)

    def pass_rows(self, buf: torch.Tensor, send: list[np.ndarray], recv: list[np.ndarray]) -> None:
        """Ranks on several hosts: each leader sends rows ``send[h]`` of its host's ``buf`` to host
        h's leader and writes what it gets into rows ``recv[h]``; then everyone may read.  Collective
        (every rank calls it after writing its rows and a barrier)."""
        if self.leaders is None:
            return
        if send:  # a leader
            got = alltoallv([buf[torch.from_numpy(s)] for s in send], recv_counts=[int(r.shape[0]) for r in recv],
                            group=self.leaders, kind=HOST)
            for rows, at in zip(got, recv, strict=True):
                if at.shape[0]:
                    buf[torch.from_numpy(at)] = rows
        dist.barrier()

    def get(self, name: str, rows: int, dim: int) -> torch.Tensor:
        key = (name, rows, dim)
        if key not in self.maps:
            path = os.path.join(self.dir, f"{name}-{rows}x{dim}.bin")
            nbytes = max(4, rows * dim * 4)
            with open(path, "a+b") as f:
                if os.fstat(f.fileno()).st_size < nbytes:
                    os.ftruncate(f.fileno(), nbytes)
                reserve_space(f.fileno(), nbytes)  # a full /dev/shm: an error here, not a SIGBUS later
            mm = np.memmap(path, dtype=np.float32, mode="r+", shape=(max(1, rows * dim),))
            self.maps[key] = torch.from_numpy(mm[: rows * dim].reshape(rows, dim))
        return self.maps[key]

    def close(self) -> None:
        self.maps.clear()
        if self.owner:
            shutil.rmtree(self.dir, ignore_errors=True)


def _shared(table: SwapTable) -> _SharedBuffers:
    sb = getattr(table, "_shared", None)
    if sb is None:
        sb = _SharedBuffers(table)
        table._shared = sb  # type: ignore[attr-defined]
    return sb


def close_swap(table: SwapTable) -> None:
    """Release the shared buffers of a swap table (rank 0 removes the directory)."""
    sb = getattr(table, "_shared", None)
    if sb is not None:
        dist.barrier()
        sb.close()
        table._shared = None  # type: ignore[attr-defined]


class _SwapAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local: torch.Tensor, table: SwapTable,  # type: ignore[override]
                stats: AllgatherStats | None) -> torch.Tensor:
        if local.dtype != torch.float32 or local.dim() != 2:
            raise ValueError("swap graph_allgather supports float32 [n, d] embeddings")
        sb = _shared(table)
        ctx.table, ctx.stats = table, stats
        dim = local.shape[1]
        t0 = time.perf_counter()
        emb = sb.get("emb", table.num_slots, dim)
        n = local.shape[0]
        emb[table.write_offset:table.write_offset + n] = local.detach().cpu()
        dist.barrier()
        sb.pass_rows(emb, table.emb_send, table.emb_recv)
        t1 = time.perf_counter()
        halo = emb[torch.from_numpy(table.read_slots)].to(local.device)
        dist.barrier()  # nobody overwrites the buffer before everyone has read
        if stats is not None:
            stats._add_stage(stats.forward_stage_s, 0, t1 - t0)
            stats._add_stage(stats.forward_stage_s, 1, time.perf_counter() - t1)
            stats.calls += 1
            table.book(stats.comm, dim * local.element_size())
        return torch.cat([local, halo], 0)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        table: SwapTable = ctx.table
        sb = _shared(table)
        dim = grad_out.shape[1]
        n = table.inner_ids.shape[0]
        gbuf = sb.get("grad", table.num_grad_slots, dim)
        gbuf[table.grad_offset:table.grad_offset + table.halo_ids.shape[0]] = grad_out[n:].detach().cpu()
        dist.barrier()
        sb.pass_rows(gbuf, table.grad_send, table.grad_recv)
        got = gbuf[torch.from_numpy(table.grad_read_slots)].to(grad_out.device)
        dist.barrier()
        g = grad_out[:n].clone()
        g.index_add_(0, torch.from_numpy(table.grad_read_pos).to(grad_out.device), got)
        if ctx.stats is not None:
            table.book(ctx.stats.comm, dim * grad_out.element_size(), backward=True)
        return g, None, None


def graph_allgather(local_embeddings: torch.Tensor, table: RankTable | SwapTable,
                    stats: AllgatherStats | None = None) -> torch.Tensor:
    """Rows ``[inner | halo]`` of this rank: its own embeddings plus the halo embeddings
    fetched according to ``table`` (DGCL §4.2).  Differentiable: the gradient of a
    halo row is sent back to (and summed at) its owner."""
    if table.world_size == 1:
        return local_embeddings
    if isinstance(table, SwapTable):
        return _SwapAllgather.apply(local_embeddings, table, stats)
    return _PlannedAllgather.apply(local_embeddings, table, stats)


def rank_tables(planner: str, rel: CommRelation, topology: Any = None, seed: int = 0,
                **kw: Any) -> list[RankTable] | list[SwapTable]:
    """Executable tables of every rank for ``planner`` in ``{p2p, spst, swap}`` (``hosts=[...]``:
    the ranks' hosts, for swap)."""
    from gnnflow.comm.plan import make_plan

    hosts = kw.pop("hosts", None)
    if planner == "swap":
        return swap_tables(rel, hosts)
    return make_plan(planner, rel, topology, seed, **kw).tables()
