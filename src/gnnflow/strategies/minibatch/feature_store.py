"""The distributed feature store (DistDGL's KVStore, DistDGLv2 §3.3 and §4.2.1 "CPU feature copy").

Each rank holds the feature rows of its own part's (inner) vertices only, read
from the part's memory-mapped ``features.npy``.  A request for the rows of a
set of global vertex ids is served

* locally for the rank's own vertices (one gather from the memory map),
* from an optional cache of hot remote rows (chosen from presampling counts,
  the sampling-frequency criterion GSplit §6.1 and DistDGLv2's "local CPU
  cache" of §4.2.1 use),
* and from the owning ranks for the rest, in ONE all-to-all exchange per
  request batch: an all-gather of the request counts tells every rank the whole
  request matrix, ids go out with :func:`gnnflow.comm.collectives.alltoallv`, owners
  gather their rows and the rows come back in rounds whose sizes and number every
  rank derives from that matrix (three collectives per batch with one round).

Every call is a collective: all ranks call :meth:`FeatureStore.fetch` the same
number of times in the same order on the same process group (a rank with no
remote rows still takes part).  Bytes are counted per peer in a
:class:`~gnnflow.comm.collectives.CommStats`; per-request counters (rows loaded,
remote rows, remote bytes, cache hits/misses) are added to a dict the caller
passes, so the asynchronous pipeline can attribute them to the mini-batch.

The same exchange serves any row table partitioned like the vertices, e.g. the
hidden representations of layer-wise distributed inference: pass
``local_rows`` (rows of the part's inner vertices in ``inner_ids`` order).
An exchange returns its :class:`RowPlan` (who asked whom for which rows), so that
a table that learns can send gradients back along the same paths
(:mod:`gnnflow.strategies.minibatch.relational`'s embedding rows).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnflow.comm.collectives import (
    CommStats,
    alltoallv,
    count_matrix,
    exchange_rows_in_rounds,
    world,
)
from gnnflow.errors import ConfigError
from gnnflow.runtime.buffers import BufferPool
from gnnflow.runtime.devices import HOST
from gnnflow.strategies.device_cache import hottest
from gnnflow.strategies.rows import Rows, scatter_rows, take_rows

#: rows an exchange sends (and receives) per round, at most about this many bytes
EXCHANGE_BYTES = 16 << 20
#: a fetch places its local rows through a scratch of at most this size (below the mmap threshold)
LOCAL_CHUNK_BYTES = 1 << 20


def _advise_random(table: Rows) -> None:
    """Tell the kernel a memory-mapped shard is read at random rows (no readahead).

    Mini-batches gather scattered rows; readahead would fault in neighbouring
    pages nobody asked for, inflating the rank's resident memory and I/O.
    """
    mm = getattr(table, "_mmap", None)
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        try:
            mm.madvise(mmap.MADV_RANDOM)
        except OSError:
            pass


@dataclass
class RowPlan:
    """The paths of one exchange: ``matrix[q, p]`` rows rank q asked rank p for;
    ``positions[q]``: the local table rows rank q asked this rank for; ``dest[p]``: where the
    rows this rank asked rank p for went in the request (positions of the requested ids)."""

    matrix: np.ndarray
    positions: list[np.ndarray]
    dest: list[np.ndarray]


class FeatureStore:
    """Rows of a vertex-partitioned table: local from the part, remote from their owners.

    ``node_part`` maps every global vertex id to its owning rank (the partition
    book's ``node_part`` memory map; part ``i`` is served by rank ``i``).
    ``group``: the process group the exchanges use (a background pipeline
    thread passes its own group, see :mod:`gnnflow.strategies.minibatch.pipeline`).
    ``read_rows(positions, out)``: how an owner reads the rows its peers asked for from its
    table into ``out`` (default: one gather; layer-wise inference reads its scratch tables a
    slice at a time, dropping their pages between slices).
    """

    def __init__(
        self,
        part: Any,
        node_part: np.ndarray,
        local_rows: Rows | None = None,
        stats: CommStats | None = None,
        group: Any = None,
        read_rows: Callable[[np.ndarray, torch.Tensor], Any] | None = None,
    ) -> None:
        self.part = part
        self.node_part = node_part
        self.rank, self.world_size = world(group)
        if self.world_size > 1 and part.part_id != self.rank:
            raise ConfigError(f"feature store: rank {self.rank} holds part {part.part_id}; rank i must load part i")
        table = part.features if local_rows is None else local_rows
        if table is None:
            raise ConfigError(
                f"part {part.part_id} has no features.npy; re-partition with features (gnnflow partition)"
            )
        if isinstance(table, torch.Tensor) and table.dtype != torch.float32:
            table = table.float()  # every rank must send the same dtype in the exchange
        if table.shape[0] != part.num_inner:
            raise ConfigError(f"feature store: {table.shape[0]} local rows for {part.num_inner} inner vertices")
        self.table: Rows = table
        self._read_rows = read_rows or (lambda pos, out: take_rows(self.table, pos, out=out))
        _advise_random(table)
        self.dim = int(np.prod(table.shape[1:])) if len(table.shape) > 1 else 1
        self.stats = stats if stats is not None else CommStats(self.world_size)
        self.group = group
        self.cache_ids = np.zeros(0, dtype=np.int64)
        self.cache_rows = torch.zeros((0, *table.shape[1:]), dtype=torch.float32)
        self.cache_slot = np.zeros(0, dtype=np.int32)
        self.rounds = BufferPool(2)  # the exchange's send and receive buffers, kept between fetches

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The shape of one row :meth:`fetch` returns."""
        return tuple(int(d) for d in self.table.shape[1:])

    # -- requests ----------------------------------------------------------------
    def owners(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(np.take(self.node_part, ids), dtype=np.int64)  # take: faster than node_part[ids]

    def fetch(self, ids: np.ndarray | torch.Tensor, counters: dict[str, float] | None = None,
              out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of global ``ids`` (float32 ``[len(ids), D]``), in the order of ``ids``.  Collective.

        ``out`` (float32, contiguous, that shape) receives the rows instead of a new tensor
        (a sampler process gathers straight into its hand-over slot).
        """
        ids_np = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        ids_np = ids_np.astype(np.int64, copy=False)
        n = ids_np.shape[0]
        owner = self.owners(ids_np) if n else np.zeros(0, dtype=np.int64)
        local = owner == self.rank
        lpos = np.flatnonzero(local)
        if lpos.size == n:  # all local (e.g. one rank): the gather is the answer
            out = take_rows(self.table, self.part.global_to_local(ids_np), out)
        else:
            if out is None:
                out = torch.empty((n, *self.table.shape[1:]), dtype=torch.float32)
            if lpos.size:
                self._place_local(out, lpos, self.part.global_to_local(ids_np[lpos]))
        remote = np.flatnonzero(~local)
        hits = 0
        if remote.size and self.cache_ids.size:
            slot = self.cache_slot[ids_np[remote]]
            hit = slot >= 0
            hits = int(hit.sum())
            if hits:  # one gather from the cache, one row scatter into the batch
                rows = torch.index_select(self.cache_rows, 0, torch.from_numpy(slot[hit].astype(np.int64)))
                scatter_rows(out, remote[hit], rows)
            remote = remote[~hit]
        self._exchange(ids_np[remote], owner[remote], out, remote)
        if counters is not None:
            row_bytes = 4 * self.dim
            counters["features_loaded"] = counters.get("features_loaded", 0) + n
            counters["remote_features"] = counters.get("remote_features", 0) + int(remote.size)
            counters["remote_bytes"] = counters.get("remote_bytes", 0) + int(remote.size) * row_bytes
            if self.cache_ids.size:
                counters["cache_hits"] = counters.get("cache_hits", 0) + hits
                counters["cache_misses"] = counters.get("cache_misses", 0) + int(remote.size)
        return out

    def _place_local(self, out: torch.Tensor, dest: np.ndarray, inner: np.ndarray) -> None:
        """``out[dest] = table[inner]`` through a scratch of at most :data:`LOCAL_CHUNK_BYTES`
        (reused from the heap, and in cache when the rows are placed) rather than a gathered
        copy of every local row, which would be mapped and zeroed afresh at every batch (a table
        on a device: one gather, one copy to the host)."""
        on_device = isinstance(self.table, torch.Tensor) and self.table.device.type != "cpu"
        step = max(1, dest.shape[0] if on_device else LOCAL_CHUNK_BYTES // max(1, 4 * self.dim))
        for lo in range(0, dest.shape[0], step):
            scatter_rows(out, dest[lo:lo + step], take_rows(self.table, inner[lo:lo + step]))

    def _exchange(self, ids: np.ndarray, owner: np.ndarray, out: torch.Tensor, dest: np.ndarray) -> RowPlan | None:
        """Request ``ids`` from their ``owner`` ranks and write the rows to ``out[dest]``; return the
        exchange's paths (None with one rank).

        One id exchange, then the rows in rounds of at most :data:`EXCHANGE_BYTES`
        (:func:`~gnnflow.comm.collectives.exchange_rows_in_rounds`): owners gather the
        requested rows straight into the round's send buffer and received rows are
        scattered straight into ``out``, so an exchange needs two rounds' buffers beside
        the output, whatever the batch.
        """
        shape_tail = tuple(self.table.shape[1:])
        if self.world_size == 1:
            if ids.size:
                raise ConfigError("feature store: a single rank cannot own remote vertices; check node_part")
            return None
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=self.world_size)
        send_ids = torch.split(torch.from_numpy(ids[order]), counts.tolist())
        # every rank learns the whole request matrix, so all agree on the rows' rounds unasked
        matrix = count_matrix(counts.tolist(), self.group)
        requests = alltoallv(list(send_ids), self.stats, recv_counts=matrix[:, self.rank].tolist(),
                             group=self.group, kind=HOST)
        positions = []
        for peer, req in enumerate(requests):
            pos = self.part.global_to_local(req.numpy()) if peer != self.rank else np.zeros(0, dtype=np.int64)
            if pos.size and ((pos < 0).any() or (pos >= self.part.num_inner).any()):
                raise ConfigError(f"feature store: rank {peer} asked rank {self.rank} for vertices it does not own")
            positions.append(pos)
        dest_by_peer = np.split(dest[order], np.cumsum(counts)[:-1])

        def gather(peer: int, lo: int, hi: int, buf: torch.Tensor) -> None:
            self._read_rows(positions[peer][lo:hi], buf)

        def scatter(peer: int, lo: int, hi: int, rows: torch.Tensor) -> None:
            scatter_rows(out, dest_by_peer[peer][lo:hi], rows)

        # the rows go back the way the ids came: owner p sends rank q what q asked p for
        exchange_rows_in_rounds(gather, matrix.T, scatter, shape_tail, EXCHANGE_BYTES, self.stats, self.group,
                                self.rounds)
        return RowPlan(matrix, positions, dest_by_peer)

    # -- cache -------------------------------------------------------------------
    def build_cache(self, candidate_ids: np.ndarray, candidate_counts: np.ndarray, capacity: int) -> int:
        """Cache the ``capacity`` most requested remote rows among the candidates.  Collective.

        ``candidate_counts[i]`` is how often ``candidate_ids[i]`` was an input
        vertex in presampled mini-batches on this rank.  Returns the cache size.
        """
        ids = np.asarray(candidate_ids, dtype=np.int64)
        cnt = np.asarray(candidate_counts, dtype=np.float64)
        remote = self.owners(ids) != self.rank if ids.size else np.zeros(0, dtype=bool)
        hot = hottest(ids[remote], cnt[remote], capacity)
        self.cache_ids = np.zeros(0, dtype=np.int64)
        rows = self.fetch(hot)
        # vertex -> cache row (-1: not cached): one lookup per requested row, as node_part's
        slot = np.full(self.node_part.shape[0], -1, dtype=np.int32)
        slot[hot] = np.arange(hot.shape[0], dtype=np.int32)
        self.cache_ids, self.cache_rows, self.cache_slot = hot, rows, slot
        return int(hot.shape[0])
