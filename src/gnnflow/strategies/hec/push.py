"""Asynchronous Embedding Push (AEP), DistGNN-MB §3.2.1, Algorithm 2.

Every rank owns its *solid* vertices; a remote rank ``q`` holds some of them as
*halo* vertices (§3.1).  ``db_halo[q]`` lists which (Algorithm 1,
``CreateDB(Bcast(hv))``).  At each layer ``l`` of each mini-batch iteration
``k`` of an epoch with ``M`` iterations, :meth:`EmbeddingPush.exchange` does
Algorithm 2's two halves for that layer:

* **receive** (lines 7-9): if ``k >= d``, wait for the push this layer issued at
  iteration ``k - d`` and HECStore the received ``(VID_o, embedding)`` rows into
  this rank's layer-``l`` cache;
* **push** (lines 14-24): if ``k < M - d``, take the mini-batch's solid vertices
  and their layer-``l`` embeddings, keep for each remote rank ``q`` those in
  ``db_halo[q]`` (``Map``), at most ``nc`` of them sampled without replacement
  with probability proportional to degree (``Sample``), and start a
  non-blocking all-to-all of the rows (``AlltoallAsync``).

So an embedding computed at iteration ``k`` is stored by its receivers at
iteration ``k + d`` — *before* that iteration's HECSearch of the same layer —
and the communication overlaps the compute of ``d`` iterations.  ``d = 0`` is
the synchronous limit: the push is issued, waited for and stored within the
same layer of the same iteration, before the search.  The pipeline drains at
each epoch end exactly as Algorithm 2 does (no push in the last ``d``
iterations, no wait in the first ``d``), so nothing is in flight across
epochs; the caches' clock (the iteration counter used for ages and ``ls``)
runs on across epochs.

Embeddings travel as constants (detached): the paper sends no gradients back
through historical embeddings.

Between epochs the state is the clock, the generator of the ``nc`` sample and
the caches (:meth:`EmbeddingPush.state_dict`, what a checkpoint holds).

Transport: one blocking exchange of the per-peer row counts (P int64, needed
to size the receive buffer) and one ``all_to_all_single(..., async_op=True)``
of the rows (works on gloo and NCCL; between ranks of one host the host rows go over Unix sockets
and the exchange completes as it starts, :mod:`gnnflow.comm.local`).  Each row is the embedding followed by
the int64 tag reinterpreted as embedding-dtype columns, so tags and data move
in one message.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from gnnflow.comm.collectives import CommStats, PendingAllToAll, all_gather, start_alltoallv, world
from gnnflow.errors import ConfigError
from gnnflow.runtime.devices import COMPUTE, HOST
from gnnflow.strategies.hec.cache import EmbeddingCache


def _tag_columns(dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    if 8 % size:
        raise ValueError(f"cannot pack int64 tags into {dtype} rows")
    return 8 // size


def pack_rows(tags: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``[rows | tags as raw columns]`` so that tags and embeddings travel in one message."""
    cols = tags.to(torch.int64).reshape(-1, 1).contiguous().view(rows.dtype)
    return torch.cat([rows, cols.to(rows.device)], 1)


def unpack_rows(packed: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_rows`: ``(tags, rows)``."""
    return packed[:, dim:].contiguous().view(torch.int64).reshape(-1), packed[:, :dim]


@dataclass
class LayerPushStats:
    """Per-layer AEP counts since the last reset (Fig. 1 (a)-(b))."""

    pushed: int = 0  # embeddings sent to remote ranks (after the nc cap)
    eligible: int = 0  # mini-batch solid vertices found in some db_halo (before the cap)
    received: int = 0  # embeddings received and stored
    bytes_sent: int = 0  # bytes to remote ranks: embeddings + tags + the row counts
    bytes_received: int = 0
    pushes: int = 0  # all-to-alls issued
    wait_s: float = 0.0  # time blocked in comm_wait (line 8)


@dataclass
class Arrival:
    """One delivered push: issued at ``sent_iter``, stored at ``stored_iter`` (iterations of the epoch)."""

    layer: int
    sent_iter: int
    stored_iter: int
    rows: int


class EmbeddingPush:
    """AEP on one rank (DistGNN-MB Algorithm 2) feeding one HEC per layer.

    ``inner_ids``: sorted global ids of this rank's solid vertices (local index =
    position).  ``db_halo[q]``: global ids of this rank's solid vertices that rank
    ``q`` holds as halo (``db_halo[rank]`` is empty).  ``degree``: degree of each
    solid vertex (local index), the weights of the ``nc`` sample.  ``caches[l]``:
    the layer-``l`` HEC.  ``delay`` is ``d``, ``max_per_rank`` is ``nc``.
    """

    def __init__(
        self,
        caches: list[EmbeddingCache],
        inner_ids: torch.Tensor,
        db_halo: list[torch.Tensor],
        degree: torch.Tensor,
        delay: int = 1,
        max_per_rank: int = 2000,
        seed: int = 0,
        value: list[torch.Tensor] | None = None,
        min_value: float = 1.0,
        caps: list[int] | None = None,
    ) -> None:
        if delay < 0:
            raise ValueError(f"AEP delay d must be >= 0, got {delay}")
        if max_per_rank < 0:
            raise ValueError(f"AEP nc must be >= 0, got {max_per_rank}")
        self.rank, self.world_size = world()
        if len(db_halo) != self.world_size:
            raise ValueError(f"db_halo needs one entry per rank ({self.world_size}), got {len(db_halo)}")
        self.caches = caches
        self.inner_ids = torch.as_tensor(inner_ids, dtype=torch.int64)
        self.db_halo = [torch.as_tensor(h, dtype=torch.int64) for h in db_halo]
        self.degree = torch.as_tensor(degree, dtype=torch.float32)
        self.delay = int(delay)
        self.max_per_rank = int(max_per_rank)
        # Map(sv, db_halo) as one boolean matrix: holders[v, q] = rank q has solid v as halo.
        n = self.inner_ids.numel()
        self.holders = torch.zeros((n, self.world_size), dtype=torch.bool)
        for q, ids in enumerate(self.db_halo):
            if q == self.rank or ids.numel() == 0:
                continue
            pos = torch.searchsorted(self.inner_ids, ids)
            if bool((pos >= n).any()) or not bool((self.inner_ids[pos.clamp(max=n - 1)] == ids).all()):
                raise ValueError(f"db_halo[{q}] names vertices that are not solid on rank {self.rank}")
            self.holders[pos, q] = True
        # expected use (a deviation from Algorithm 2, docs/hec.md): value[l][v, q] = reads expected
        # on rank q of the layer-l row of solid v per push; below min_value it is not pushed, and
        # the nc sample weighs by it instead of the degree.  caps[q]: rows rank q's cache can hold
        # for their life-span, per iteration (never more than nc)
        if value is not None and len(value) != len(caches):
            raise ValueError(f"AEP: {len(value)} expected-use tables for {len(caches)} layers")
        self.value = value
        self.min_value = float(min_value)
        self.caps = [self.max_per_rank] * self.world_size if caps is None else \
            [min(self.max_per_rank, int(c)) for c in caps]
        self.generator = torch.Generator().manual_seed(int(seed) * 1009 + self.rank)
        self.stats = [LayerPushStats() for _ in caches]
        self.comm = CommStats(self.world_size)
        self.arrivals: list[Arrival] = []
        self._pending: list[deque[tuple[int, PendingAllToAll]]] = [deque() for _ in caches]
        self.num_iterations = 0
        self.iteration = -1  # within the epoch
        self.clock = -1  # across epochs: the caches' age clock

    # ---- iteration structure ------------------------------------------------------------------
    def begin_epoch(self, num_iterations: int) -> None:
        """Start an epoch of ``M`` iterations (``M`` must be equal on every rank)."""
        if any(self._pending):
            raise RuntimeError("AEP: pushes still in flight from the previous epoch")
        self.num_iterations = int(num_iterations)
        self.iteration = -1
        self.arrivals = []

    def begin_iteration(self) -> list[int]:
        """Advance to the next iteration; ages every cache, returns lines purged per layer."""
        self.iteration += 1
        self.clock += 1
        if self.iteration >= self.num_iterations:
            raise RuntimeError(f"AEP: iteration {self.iteration} beyond the epoch's {self.num_iterations}")
        return [c.advance(self.clock) for c in self.caches]

    def end_epoch(self) -> None:
        """Check the pipeline drained (every push of the epoch was received)."""
        left = sum(len(p) for p in self._pending)
        if left:
            raise RuntimeError(f"AEP: {left} pushes still pending at epoch end")

    # ---- Algorithm 2, one layer ------------------------------------------------------------------
    def exchange(self, layer: int, solid_local: torch.Tensor, embeddings: torch.Tensor) -> None:
        """Receive what is due for ``layer`` and push this mini-batch's solid embeddings.

        Call on every rank, for every layer, once per iteration, *before* searching
        the layer's cache.  ``solid_local``: local indices of the mini-batch's solid
        vertices at this layer; ``embeddings``: their layer-``layer`` inputs.
        """
        k, m, d = self.iteration, self.num_iterations, self.delay
        if d == 0:
            pending = self._push(layer, solid_local, embeddings)
            self._receive(layer, k, pending)
            return
        if k >= d:
            sent_iter, pending = self._pending[layer].popleft()
            if sent_iter != k - d:  # cannot happen unless exchange was skipped
                raise RuntimeError(f"AEP layer {layer}: expected the push of iteration {k - d}, have {sent_iter}")
            self._receive(layer, sent_iter, pending)
        if k < m - d:
            self._pending[layer].append((k, self._push(layer, solid_local, embeddings)))

    def select(self, solid_local: torch.Tensor, layer: int = 0) -> list[torch.Tensor]:
        """``Map`` + ``Sample``: for each rank, the positions in ``solid_local`` of the vertices to
        push there: at most ``nc`` sampled by degree (Algorithm 2), or, with expected-use tables,
        those worth at least ``min_value`` reads, at most the receiver's cap, sampled by value."""
        solid_local = torch.as_tensor(solid_local, dtype=torch.int64)
        if self.value is None:
            member, weight = self.holders[solid_local], None
        else:
            weight = self.value[layer][solid_local]
            member = weight >= self.min_value
        out = []
        for q in range(self.world_size):
            idx = member[:, q].nonzero().flatten()
            cap = self.caps[q]
            if idx.numel() > cap:
                w = (self.degree[solid_local[idx]] if weight is None else weight[idx, q]).clamp(min=1e-6)
                pick = torch.multinomial(w, cap, replacement=False, generator=self.generator) if cap else idx[:0]
                idx = idx[pick.sort().values]
            out.append(idx)
        return out

    def _push(self, layer: int, solid_local: torch.Tensor, embeddings: torch.Tensor) -> PendingAllToAll:
        st = self.stats[layer]
        solid_local = torch.as_tensor(solid_local, dtype=torch.int64)
        emb = embeddings.detach()
        st.eligible += int(self.holders[solid_local].any(1).sum())
        sel = self.select(solid_local, layer)
        send = [pack_rows(self.inner_ids[solid_local[idx]], emb[idx]) for idx in sel]
        pending = start_alltoallv(send, self.comm, kind=COMPUTE)
        row_bytes = send[0].element_size() * send[0].shape[1]
        remote_sent = sum(int(s.shape[0]) for q, s in enumerate(send) if q != self.rank)
        st.pushed += remote_sent
        # payload rows plus the int64 row count each peer receives first
        st.bytes_sent += remote_sent * row_bytes + 8 * (self.world_size - 1)
        st.pushes += 1
        return pending

    def _receive(self, layer: int, sent_iter: int, pending: PendingAllToAll) -> None:
        st = self.stats[layer]
        t0 = time.perf_counter()
        parts = pending.wait()
        st.wait_s += time.perf_counter() - t0
        cache = self.caches[layer]
        rows = torch.cat([p for q, p in enumerate(parts) if q != self.rank], 0) if self.world_size > 1 else parts[0][:0]
        st.bytes_received += 8 * (self.world_size - 1)  # the row counts
        if rows.numel():
            tags, emb = unpack_rows(rows, cache.dim)
            cache.store(tags, emb)
            st.received += int(tags.numel())
            st.bytes_received += int(rows.numel() * rows.element_size())
        self.arrivals.append(Arrival(layer, sent_iter, self.iteration, int(rows.shape[0])))

    # ---- checkpoint ------------------------------------------------------------------------------
    def state_dict(self, in_epoch: bool = False) -> dict[str, Any]:
        """What the rest of the run depends on: the caches' clock, the ``nc`` sample's generator
        and every layer's cache.  Between epochs nothing is in flight (Algorithm 2 drains the
        pushes at each epoch end).  ``in_epoch`` (a checkpoint after an iteration inside an
        epoch): also the epoch's position and counts, and the pushes still in flight, received
        now (their rows are what the receivers store ``d`` iterations after the push; waiting
        for them early changes only when the wait happens)."""
        state: dict[str, Any] = {"clock": self.clock, "generator": self.generator.get_state(),
                                 "caches": [c.state_dict() for c in self.caches]}
        if in_epoch:
            pending = [[(it, torch.cat(p.wait(), 0).cpu(), list(p.recv_counts)) for it, p in layer]
                       for layer in self._pending]
            state["in_epoch"] = {"iteration": self.iteration, "num_iterations": self.num_iterations,
                              "pending": pending, "stats": [vars(s).copy() for s in self.stats],
                              "cache_stats": [vars(c.stats).copy() for c in self.caches],
                              "arrivals": [vars(a).copy() for a in self.arrivals]}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["caches"]) != len(self.caches):
            raise ConfigError(f"HEC checkpoint: {len(state['caches'])} layer caches, this run has "
                              f"{len(self.caches)}; resume with the same --layers")
        self.clock = int(state["clock"])
        self.generator.set_state(state["generator"])
        for cache, cs in zip(self.caches, state["caches"], strict=True):
            cache.load_state_dict(cs)
        epoch = state.get("in_epoch")
        if epoch is not None:  # inside an epoch: continue it at the next iteration
            self.iteration, self.num_iterations = int(epoch["iteration"]), int(epoch["num_iterations"])
            device = self.caches[0].device if self.caches else torch.device("cpu")
            self._pending = [deque((int(it), PendingAllToAll(None, rows.to(device), list(counts)))
                                   for it, rows, counts in layer) for layer in epoch["pending"]]
            for s, saved in zip(self.stats, epoch["stats"], strict=True):
                vars(s).update(saved)
            for c, saved in zip(self.caches, epoch["cache_stats"], strict=True):
                vars(c.stats).update(saved)
            self.arrivals = [Arrival(**a) for a in epoch["arrivals"]]

    def reset_stats(self) -> None:
        for s in self.stats:
            s.__init__()  # type: ignore[misc]
        for c in self.caches:
            c.stats.reset()
        self.comm.reset()


def build_db_halo(inner_ids: torch.Tensor, remote_halo_ids: list[torch.Tensor]) -> list[torch.Tensor]:
    """Algorithm 1's ``CreateDB``: for each rank q, my solid vertices that q holds as halo.

    ``remote_halo_ids[q]`` is rank q's halo id list (global ids, any order); the
    result lists, per rank, the sorted global ids present in both.
    """
    inner = torch.as_tensor(inner_ids, dtype=torch.int64)
    out = []
    for halo in remote_halo_ids:
        halo = torch.as_tensor(halo, dtype=torch.int64)
        out.append(torch.unique(halo[torch.isin(halo, inner)]))
    return out


def exchange_halo_ids(halo_ids: torch.Tensor) -> list[torch.Tensor]:
    """Algorithm 1's ``Bcast(hv)``: every rank's halo id list, on every rank (all-gather)."""
    rank, size = world()
    halo_ids = torch.as_tensor(halo_ids, dtype=torch.int64).cpu().contiguous()
    if size == 1:
        return [halo_ids]
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    all_gather(counts, torch.tensor([halo_ids.numel()], dtype=torch.int64), HOST)
    n_max = max(int(c) for c in counts)
    buf = torch.full((n_max,), -1, dtype=torch.int64)
    buf[: halo_ids.numel()] = halo_ids
    gathered = [torch.empty(n_max, dtype=torch.int64) for _ in range(size)]
    all_gather(gathered, buf, HOST)
    return [gathered[q][: int(counts[q])] for q in range(size)]


__all__ = [
    "Arrival",
    "EmbeddingPush",
    "LayerPushStats",
    "PendingAllToAll",
    "build_db_halo",
    "exchange_halo_ids",
    "pack_rows",
    "start_alltoallv",
    "unpack_rows",
]
