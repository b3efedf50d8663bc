"""Distributed neighbour sampling with non-local vertices (DistDGLv2 §4.2.2).

A rank holds only its part's structure: the in-edges of its own (inner)
vertices.  To sample one hop for a frontier, the frontier is split by owner:

* the rank's own vertices are sampled locally from the part's CSR with the
  shared primitive :func:`gnnflow.sampling.neighbor.sample_edge_positions`;
* the others are sent to their owners, which sample them from THEIR part's
  CSR (which holds every in-edge of those vertices) and send back, per seed,
  the number of sampled neighbours and their global ids.

This is DistDGLv2's "local sampling + remote sampling requests, then stitch
the results and compute the next frontier" (§4.2.2).  Because every vertex is
sampled from its complete neighbourhood by its owner, a rank's mini-batch has
the same distribution as sampling from the whole graph, although the ego-
network reaches vertices the rank does not own.  The frontier of the next hop
is computed by the same relabelling as the single-process sampler, so blocks
have the DGL layout (destinations first, then new sources in ascending id).

Per hop the exchange is three collectives on the sampler's process group:
request counts, seed ids out, and one reply that carries per-seed counts and
sampled source ids together in a slot both sides size in advance (a seed gets at
most ``fanout`` sources; with full neighbourhoods, ``fanout=-1``, the reply is
two collectives, counts first).  Every rank must call
:meth:`DistNeighborSampler.sample_blocks` the same number of times in the same
order (all hops take part even with nothing remote).  With ``own_targets`` (the
data-parallel strategies, whose targets are the rank's own training vertices) the
first hop, over the targets, is all local and makes no exchange at all.

On a typed book (DistDGLv2 §4.1.1: each CSR entry carries its relation,
``Part.edge_types``) the sampler takes a fanout per relation
(``relations``, :class:`TypedSampling`): owners draw each relation of their
seeds with the typed primitive
:func:`gnnflow.sampling.typed.sample_typed_edge_positions` and the same keyed
draws, the replies carry each edge's relation beside its source, and the blocks
carry ``etypes`` and ``src_types`` — the blocks
:class:`gnnflow.sampling.TypedNeighborSampler` draws from the whole graph.

``replicate_structure=True`` (:func:`make_sampler`) instead keeps the whole
CSR on every rank and samples locally with
:class:`gnnflow.sampling.NeighborSampler` — the comparison point of issue 5.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnflow.comm.collectives import CommStats, alltoall_slots, alltoallv, world
from gnnflow.errors import ConfigError
from gnnflow.runtime.devices import HOST
from gnnflow.sampling import Block, NeighborSampler
from gnnflow.sampling.neighbor import (
    LayerwiseSampler,
    Relabeler,
    _as_np,
    check_fanouts,
    ragged_arange,
    sample_edge_positions,
)
from gnnflow.sampling.typed import LayerFanout, relation_fanouts, sample_typed_edge_positions
from gnnflow.strategies.minibatch.pipeline import MiniBatch, add_stats_delta, stats_totals


@dataclass(frozen=True)
class TypedSampling:
    """What typed sampling over a typed book needs beside the part: the relation count and the
    vertex type ranges of the homogenized graph (its ``meta.json``)."""

    num_rels: int
    node_type_offsets: np.ndarray


class DistNeighborSampler(LayerwiseSampler):
    """Multi-layer uniform neighbour sampler over a partitioned graph (collective).

    Same contract as :class:`gnnflow.sampling.NeighborSampler`: ``fanouts[i]``
    belongs to ``blocks[i]`` (input layer first); ``sample_blocks(targets)``
    returns blocks ordered input -> output with ``blocks[-1].dst_ids == targets``.
    With ``typed`` (a typed book's part) ``fanouts[i]`` may be ``{relation id: count}`` and the
    blocks are :class:`gnnflow.sampling.TypedNeighborSampler`'s.
    """

    def __init__(
        self,
        part: Any,
        node_part: np.ndarray,
        fanouts: Sequence[LayerFanout],
        seed: int = 0,
        group: Any = None,
        stats: CommStats | None = None,
        own_targets: bool = False,
        typed: TypedSampling | None = None,
    ) -> None:
        self.part = part
        self.node_part = node_part
        self.typed = typed
        if typed is not None and part.edge_types is None:
            raise ConfigError(f"sampler: part {part.part_id} has no edge_type.npy; per-relation sampling needs "
                              "a typed book (re-partition the homogenized store with `gnnflow partition`)")
        self.fanouts = (check_fanouts(fanouts) if typed is None  # type: ignore[assignment]
                        else [relation_fanouts(f, typed.num_rels) for f in fanouts])
        #: per-edge columns a reply carries: sources, and on a typed book their relations
        self.columns = 1 if typed is None else 2
        self.rank, self.world_size = world()
        self.group = group
        self.stats = stats if stats is not None else CommStats(self.world_size)
        # draws are keyed by (seed, epoch, batch, layer, vertex): the owner of a vertex draws for
        # it what any other sampler would; every rank samples the same batch in lock-step, so
        # the remote requests it serves belong to its own current key
        self.seed = int(seed)
        self.at(0, 0)
        self.num_nodes = int(node_part.shape[0])
        self._relabel = Relabeler(self.num_nodes)
        self.remote_seeds = 0  # seeds sampled by their owner on this rank's behalf
        # every rank's targets are its own vertices (the same setting on every rank, so the
        # first hop's skipped exchange is skipped everywhere); a target owned elsewhere is an error
        self.own_targets = bool(own_targets)

    def _sample_own(self, seeds: np.ndarray, fanout: Any, layer: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """Sample the rank's own ``seeds``: (per-seed counts, per-edge columns in CSR order: global
        source ids and, typed, their relations)."""
        if seeds.size == 0:
            return np.zeros(0, dtype=np.int64), [np.zeros(0, dtype=np.int64)] * self.columns
        rows = self.part.global_to_local(seeds)
        if (rows < 0).any() or (rows >= self.part.num_inner).any():
            raise ConfigError(f"sampler: rank {self.rank} asked to sample vertices it does not own")
        if self.typed is not None:  # each relation from the key of (seed, epoch, batch, layer, vertex, relation)
            eid, counts, rels = sample_typed_edge_positions(self.part.indptr, self.part.edge_types, rows, fanout,
                                                            self.key, layer, seeds)
            src = np.asarray(self.part.indices[eid], dtype=np.int64)
            return counts, [self.part.local_to_global[src], rels]
        eid, counts = sample_edge_positions(self.part.indptr, rows, int(fanout), self.key, layer, seeds)
        return counts, [np.take(self.part.local_to_global, np.take(self.part.indices, eid))]

    def sample_layer(self, frontier: np.ndarray | torch.Tensor, fanout: Any,  # type: ignore[override]
                     layer: int) -> tuple[Block, torch.Tensor]:
        if self.typed is None:
            return super().sample_layer(frontier, fanout, layer)
        dst = _as_np(frontier).astype(np.int64, copy=False)
        counts, (src, rels) = self.sample_edges(dst, fanout, int(layer))
        block = self.make_block(dst, counts, src, rels)
        block.src_types = torch.from_numpy(
            np.searchsorted(self.typed.node_type_offsets, block.src_ids.numpy(), side="right") - 1)
        return block, block.src_ids

    def sample_neighbors(self, frontier: np.ndarray, fanout: int, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-seed counts and source ids (CSR over ``frontier``) of one hop.  Collective."""
        counts, (src,) = self.sample_edges(frontier, fanout, layer)
        return counts, src

    def sample_edges(self, frontier: np.ndarray, fanout: Any, layer: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """Per-seed counts and per-edge columns (CSR over ``frontier``) of one hop.  Collective."""
        frontier = np.asarray(frontier, dtype=np.int64)
        owner = np.asarray(np.take(self.node_part, frontier), dtype=np.int64)
        own = np.flatnonzero(owner == self.rank)
        counts = np.zeros(frontier.shape[0], dtype=np.int64)
        own_counts, own_cols = self._sample_own(frontier[own], fanout, layer)
        counts[own] = own_counts
        if self._local_only(layer, own.size == frontier.size):
            return counts, own_cols
        remote = np.flatnonzero(owner != self.rank)
        order = remote[np.argsort(owner[remote], kind="stable")]
        send_counts = np.bincount(owner[remote], minlength=self.world_size)
        requests = alltoallv(list(torch.split(torch.from_numpy(frontier[order]), send_counts.tolist())),
                             self.stats, group=self.group, kind=HOST)
        served = [self._sample_own(req.numpy(), fanout, layer) for req in requests]  # none from this rank
        rcounts, rcols = self._reply(served, send_counts.tolist(), [int(r.shape[0]) for r in requests],
                                     self.max_edges(fanout))
        self.remote_seeds += int(order.size)
        counts[order] = rcounts
        # stitch: each seed's edges (its own or its owner's reply, in their order) into their place
        # of the CSR over the frontier
        starts = np.cumsum(counts) - counts
        at_own, at_remote = ragged_arange(starts[own], own_counts), ragged_arange(starts[order], rcounts)
        total = int(counts.sum())
        stitched = []
        for mine, theirs in zip(own_cols, rcols, strict=True):
            col = np.empty(total, dtype=np.int64)
            col[at_own] = mine
            col[at_remote] = theirs
            stitched.append(col)
        return counts, stitched

    def _local_only(self, layer: int, all_own: bool) -> bool:
        """Whether hop ``layer`` needs no exchange: one rank, or the targets' hop with
        ``own_targets`` (then every frontier vertex must be the rank's own: ``all_own``)."""
        # sample_blocks samples the output layer first, over the targets
        targets_hop = self.own_targets and layer == len(self.fanouts) - 1
        if not (self.world_size == 1 or targets_hop):
            return False
        if not all_own:
            raise ConfigError(f"sampler: rank {self.rank} got targets it does not own (own_targets)"
                              if targets_hop else
                              "sampler: a single rank cannot own remote vertices; check node_part")
        return True

    @staticmethod
    def max_edges(fanout: Any) -> int:
        """The most edges one seed's hop draws (-1: unbounded, full neighbourhoods)."""
        counts = np.atleast_1d(np.asarray(fanout, dtype=np.int64))
        return -1 if (counts < 0).any() else int(counts.sum())

    def _reply(self, served: list[tuple[np.ndarray, list[np.ndarray]]], asked: list[int], requested: list[int],
               most: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """Send each peer its seeds' counts and per-edge columns; return ours in peer order.

        ``asked[p]``: seeds this rank sent p; ``requested[p]``: seeds p sent this rank.  With a
        bounded hop (``most`` edges per seed at most) a seed's reply is at most ``1 + C most`` ids
        (``C`` columns), so one exchange of slots that size carries counts and columns together;
        with full neighbourhoods (``most = -1``) counts go first.
        """
        cols = self.columns
        if most < 0:
            reply_counts = alltoallv([torch.from_numpy(c) for c, _ in served], self.stats, recv_counts=asked,
                                     group=self.group, kind=HOST)
            edges = [int(c.sum()) for c in reply_counts]
            reply = alltoallv([torch.from_numpy(np.concatenate(cs)) for _, cs in served], self.stats,
                              recv_counts=[cols * e for e in edges], group=self.group, kind=HOST)
            return (torch.cat(reply_counts).numpy(),
                    [np.concatenate([r.numpy()[j * e:(j + 1) * e] for r, e in zip(reply, edges, strict=True)])
                     for j in range(cols)])
        slots = alltoall_slots([torch.from_numpy(np.concatenate([c, *cs])) for c, cs in served],
                               [n * (1 + cols * most) for n in requested], [n * (1 + cols * most) for n in asked],
                               self.stats, group=self.group, kind=HOST)
        rcounts: list[np.ndarray] = []
        rcols: list[list[np.ndarray]] = [[] for _ in range(cols)]
        for n, slot in zip(asked, slots, strict=True):
            c = slot[:n].numpy()
            e = int(c.sum())
            rcounts.append(c)
            for j in range(cols):
                rcols[j].append(slot[n + j * e:n + (j + 1) * e].numpy())
        return np.concatenate(rcounts), [np.concatenate(parts) for parts in rcols]


def make_sampler(part: Any, node_part: np.ndarray, fanouts: Sequence[LayerFanout], seed: int,
                 replicate_structure: bool = False, graph_path: Any = None, group: Any = None,
                 stats: CommStats | None = None, own_targets: bool = False,
                 typed: TypedSampling | None = None) -> DistNeighborSampler | NeighborSampler:
    """The partitioned sampler, or (``replicate_structure``) a full-CSR local sampler; ``typed``:
    per-relation sampling over a typed book (``fanouts`` with relation ids)."""
    if not replicate_structure:
        return DistNeighborSampler(part, node_part, fanouts, seed, group=group, stats=stats,
                                   own_targets=own_targets, typed=typed)
    if typed is not None:
        raise ConfigError("options.replicate_structure: per-relation sampling reads the typed book's parts; "
                          "turn replicate_structure off")
    from gnnflow.data.store import open_store

    store = open_store(graph_path, validate=False)
    # the full structure, read into this rank's memory (this is what the option compares against)
    return NeighborSampler(np.array(store.indptr), np.array(store.indices), fanouts, seed=seed)


def sample_minibatch(sampler: DistNeighborSampler | NeighborSampler, mb: MiniBatch,
                     stats: CommStats | None) -> MiniBatch:
    """The sample stage of the mini-batch strategies: ``mb.blocks`` for ``mb.targets``.

    The draws depend on (seed, epoch, batch, layer, vertex) only
    (:mod:`gnnflow.sampling.draws`), so a resumed run, a sampler process
    (:mod:`gnnflow.strategies.minibatch.sampler_process`) or a pipeline running ahead
    samples exactly what the uninterrupted in-process stage would, and so does
    single-process training on the union of the ranks' batches.
    Records ``sampled_edges``, ``input_vertices`` and the bytes the sampler's
    exchanges moved (``stats``) in ``mb.counters``.
    """
    before = stats_totals(stats)
    mb.blocks = sampler.at(mb.epoch, mb.index).sample_blocks(mb.targets)
    mb.counters["sampled_edges"] = float(sum(b.num_edges for b in mb.blocks))
    mb.counters["input_vertices"] = float(mb.blocks[0].num_src)
    add_stats_delta(mb, stats, before, "sample")
    return mb


def presample_input_counts(sampler: LayerwiseSampler,
                           batches: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """How often each vertex is an input vertex (``blocks[0].src_ids``) over ``batches``.

    Collective for the distributed sampler: every rank passes the same number of batches.
    Returns ``(ids, counts)`` sorted by id.  The feature cache takes its hot rows from this.
    """
    seen: list[np.ndarray] = []
    for targets in batches:
        seen.append(sampler.sample_blocks(targets)[0].src_ids.cpu().numpy())
    if not seen:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ids, counts = np.unique(np.concatenate(seen), return_counts=True)
    return ids.astype(np.int64), counts.astype(np.int64)
