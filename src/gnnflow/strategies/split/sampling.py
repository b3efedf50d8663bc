"""Cooperative layer-wise sampling for split parallelism (GSplit §3, §5 Algorithm 1).

One mini-batch per iteration is sampled by the whole split group together.
Every vertex belongs to exactly one split, the one its owner rank computes
(the offline partition map ``node_part``, GSplit §4: online splitting is a
lookup).  :func:`sp_sample` runs on every rank of the group::

    local_front = local targets
    for each layer, top to bottom:
        block, mixed_front = sample_layer(local_front)     # unchanged sampler
        remote = mixed_front not owned here  -> sent to their owners (all-to-all)
        local_front = owned part of mixed_front  ∪  vertices peers sent here

The exchange also builds the **shuffle index** of the layer: which rows of this
rank's local frontier each peer needs (``send_index``, the gather lists) and
where each received row lands in the mixed frontier (``gather_index``, the
scatter list).  Training (:func:`gnnflow.strategies.split.split_parallel.sp_forward`,
Algorithm 2) replays exactly these paths with activations instead of ids, and
the backward pass replays them in reverse with gradients.

Sampling a layer reuses :class:`gnnflow.sampling.NeighborSampler` unchanged on a
CSR that holds only the in-edges of this rank's own vertices (rows of other
vertices are empty), so a rank only ever reads its own part of the structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnflow.comm.collectives import CommStats, alltoallv
from gnnflow.errors import ConfigError
from gnnflow.runtime.devices import HOST
from gnnflow.sampling import Block, NeighborSampler, as_long_tensor
from gnnflow.strategies.rows import take_rows


@dataclass
class SplitGraph:
    """What one rank holds of the graph: its own vertices, their in-edges, features, labels.

    ``indptr`` is a CSR over *all* ``N`` vertex ids whose rows are empty except
    for the vertices this rank owns (``indices`` hold global source ids), so the
    single-process sampler runs on it unchanged.  ``features``/``labels`` have one
    row per owned vertex in ``inner_ids`` order (features partitioned by the same
    map as the splits, GSplit §4: caches consistent with the splits).
    """

    rank: int
    num_parts: int
    node_part: np.ndarray
    inner_ids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | None
    labels: np.ndarray | None
    #: whole-graph (in, out)-degrees of the owned vertices (``[n_inner, 2]``, ``inner_ids`` order);
    #: when set, :func:`sp_sample` puts whole-graph degrees on every block (GCN, ``gcn_degrees=graph``)
    degrees: torch.Tensor | None = None

    @property
    def num_nodes(self) -> int:
        return int(self.node_part.shape[0])

    def rows(self, ids: torch.Tensor | np.ndarray) -> np.ndarray:
        """Row of each owned global id in ``features``/``labels`` (all ids must be owned)."""
        ids_np = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        pos = np.searchsorted(self.inner_ids, ids_np)
        if ids_np.size and (pos.max() >= self.inner_ids.shape[0] or (self.inner_ids[pos] != ids_np).any()):
            raise ValueError(f"rank {self.rank}: asked for rows of vertices it does not own")
        return pos

    def load_features(self, ids: torch.Tensor) -> torch.Tensor:
        """Input features of owned vertices ``ids`` (the only features this rank reads)."""
        if self.features is None:
            raise ConfigError("split parallelism: the graph/partition has no features.npy")
        rows = self.rows(ids)
        return take_rows(self.features, rows)

    def load_labels(self, ids: torch.Tensor) -> torch.Tensor:
        assert self.labels is not None
        return torch.from_numpy(np.asarray(self.labels[self.rows(ids)], dtype=np.int64))

    @classmethod
    def from_arrays(cls, indptr: np.ndarray, indices: np.ndarray, node_part: np.ndarray, rank: int,
                    features: np.ndarray | None = None, labels: np.ndarray | None = None,
                    num_parts: int | None = None) -> SplitGraph:
        """Rank ``rank``'s share of a whole graph (CSR over destinations) under ``node_part``.

        Only the rows of owned vertices are copied (features and labels included).
        """
        node_part = np.asarray(node_part)
        indptr = np.asarray(indptr)
        owned = node_part == rank
        inner_ids = np.flatnonzero(owned).astype(np.int64)
        deg = np.diff(indptr)
        own_deg = np.where(owned, deg, 0)
        local_indptr = np.zeros(indptr.shape[0], dtype=np.int64)
        np.cumsum(own_deg, out=local_indptr[1:])
        edge_mask = np.repeat(owned, deg)
        local_indices = np.asarray(indices)[edge_mask].astype(np.int64, copy=False)
        feats = None if features is None else np.asarray(features[inner_ids], dtype=np.float32)
        labs = None if labels is None else np.asarray(labels[inner_ids], dtype=np.int64)
        parts = int(num_parts if num_parts is not None else node_part.max() + 1)
        return cls(rank, parts, node_part, inner_ids, local_indptr, local_indices, feats, labs)

    @classmethod
    def from_part(cls, part: Any, node_part: np.ndarray, num_parts: int) -> SplitGraph:
        """The share of the rank serving ``part`` (a :class:`gnnflow.partition.book.Part`).

        Features stay the part's memory map: only rows of the split's input
        vertices are ever read.
        """
        n = int(np.asarray(node_part).shape[0])
        inner = np.asarray(part.inner_ids, dtype=np.int64)
        deg = np.zeros(n, dtype=np.int64)
        deg[inner] = np.diff(np.asarray(part.indptr))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(deg, out=indptr[1:])
        # part rows follow sorted inner_ids, so their edges are already in global row order
        indices = part.local_to_global[np.asarray(part.indices)]
        return cls(int(part.part_id), int(num_parts), np.asarray(node_part), inner, indptr, indices,
                   part.features, np.asarray(part.labels))


@dataclass
class LayerShuffle:
    """The shuffle index of one layer (GSplit §3).

    * ``send_index[p]``: rows of this rank's local frontier (the layer's input
      rows) that peer ``p`` needs, in the order ``p`` asked for them;
    * ``recv_counts[p]``: how many rows come back from peer ``p``;
    * ``gather_index``: for each vertex of the mixed frontier (``block.src_ids``),
      its row in ``cat([local rows, rows received in rank order])``.
    """

    send_index: list[torch.Tensor]
    recv_counts: list[int]
    gather_index: torch.Tensor

    def to(self, device: torch.device | str) -> LayerShuffle:
        """A copy with the index tensors on ``device`` (where the activations live)."""
        return LayerShuffle([i.to(device) for i in self.send_index], list(self.recv_counts),
                            self.gather_index.to(device))

    @property
    def rows_sent(self) -> int:
        return int(sum(int(i.numel()) for i in self.send_index))

    @property
    def rows_received(self) -> int:
        return int(sum(self.recv_counts))


@dataclass
class SplitSample:
    """One rank's split of a mini-batch, ordered input -> output like DGL blocks.

    ``blocks[l]``: destinations = ``frontiers[l + 1]`` (vertices this rank
    computes at layer ``l``), sources = the mixed frontier; ``frontiers[0]`` are
    the input vertices whose features this rank loads; ``frontiers[-1]`` the
    local targets; ``shuffle[l]`` the shuffle index of layer ``l``.
    """

    blocks: list[Block]
    frontiers: list[torch.Tensor]
    shuffle: list[LayerShuffle]

    def to(self, device: torch.device | str) -> SplitSample:
        """Blocks and shuffle index on ``device`` (frontier ids stay where they are: they index host data)."""
        return SplitSample([b.to(device) for b in self.blocks], self.frontiers, [s.to(device) for s in self.shuffle])

    @property
    def input_ids(self) -> torch.Tensor:
        return self.frontiers[0]

    @property
    def targets(self) -> torch.Tensor:
        return self.frontiers[-1]

    @property
    def num_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)


def _positions(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Position of each of ``ids`` in ``table`` (every id must occur in ``table``)."""
    if ids.numel() == 0:
        return torch.empty(0, dtype=torch.int64)
    order = torch.argsort(table)
    at = torch.searchsorted(table[order], ids)
    return order[at]


class SplitSampler:
    """Cooperative sampler of one rank: :func:`sp_sample` with this rank's structure.

    Every vertex of a layer gets its neighbours drawn once, by its owner, from the
    keyed draws of (seed, epoch, batch, layer, vertex) (:mod:`gnnflow.sampling.draws`):
    the union of the splits is exactly the single-process sample of the same batch.
    :meth:`at` selects the batch.
    """

    def __init__(self, graph: SplitGraph, fanouts: Sequence[int], seed: int = 0, group: Any = None) -> None:
        self.graph = graph
        self.fanouts = [int(f) for f in fanouts]
        self.sampler = NeighborSampler(graph.indptr, graph.indices, self.fanouts, seed=seed)
        self.node_part = as_long_tensor(graph.node_part)
        self.group = group

    def at(self, epoch: int, batch: int) -> SplitSampler:
        self.sampler.at(epoch, batch)
        return self

    def owner(self, ids: torch.Tensor) -> torch.Tensor:
        return self.node_part[ids]

    def sample(self, local_targets: torch.Tensor, stats: CommStats | None = None) -> SplitSample:
        return sp_sample(self, local_targets, stats)


def sp_sample(sampler: SplitSampler, local_targets: torch.Tensor | np.ndarray,
              stats: CommStats | None = None) -> SplitSample:
    """GSplit Algorithm 1 on this rank; collective: every rank of the group calls it.

    ``local_targets`` are this rank's targets of the mini-batch (owned, unique).
    One all-to-all of vertex ids per layer (plus one of counts).
    """
    graph = sampler.graph
    rank, size = graph.rank, graph.num_parts
    front = as_long_tensor(local_targets)
    if front.numel() and bool((sampler.owner(front) != rank).any()):
        raise ValueError(f"rank {rank}: sp_sample got targets owned by another rank")
    blocks: list[Block] = []
    frontiers = [front]
    shuffle: list[LayerShuffle] = []
    for layer in reversed(range(len(sampler.fanouts))):
        block, mixed = sampler.sampler.sample_layer(front, sampler.fanouts[layer], layer)
        owner = sampler.owner(mixed)
        is_local = owner == rank
        local_mixed = mixed[is_local]  # starts with ``front``: destinations are owned
        remote_pos = torch.nonzero(~is_local).squeeze(1)
        remote_owner = owner[remote_pos]
        order = torch.argsort(remote_owner, stable=True)
        remote_pos, remote_owner = remote_pos[order], remote_owner[order]
        remote_ids = mixed[remote_pos]
        send_counts = torch.bincount(remote_owner, minlength=size).tolist()
        requested = alltoallv(list(torch.split(remote_ids, send_counts)), stats, group=sampler.group, kind=HOST)
        asked = torch.cat(requested) if requested else torch.empty(0, dtype=torch.int64)
        new = torch.unique(asked)
        new = new[~torch.isin(new, local_mixed)]
        next_front = torch.cat([local_mixed, new])
        send_index = [_positions(r, next_front) for r in requested]
        gather = torch.empty(mixed.shape[0], dtype=torch.int64)
        gather[is_local] = torch.arange(local_mixed.shape[0])
        gather[remote_pos] = next_front.shape[0] + torch.arange(remote_pos.shape[0])
        if graph.degrees is not None:  # owners send the out-degree of every row they send
            own = graph.degrees[torch.from_numpy(graph.rows(local_mixed))]
            sent = alltoallv([graph.degrees[torch.from_numpy(graph.rows(r)), 1] for r in requested], stats,
                             recv_counts=send_counts, group=sampler.group, kind=HOST)
            src_deg = torch.empty(mixed.shape[0], dtype=torch.float32)
            src_deg[is_local] = own[:, 1]
            src_deg[remote_pos] = torch.cat(sent) if sent else torch.empty(0)
            block.src_deg, block.dst_deg = src_deg, own[: block.num_dst, 0]
        blocks.append(block)
        shuffle.append(LayerShuffle(send_index, send_counts, gather))
        frontiers.append(next_front)
        front = next_front
    blocks.reverse()
    shuffle.reverse()
    frontiers.reverse()
    return SplitSample(blocks, frontiers, shuffle)
