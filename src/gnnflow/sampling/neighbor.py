"""Layer-wise uniform neighbour sampling (GSplit §5 Algorithm 1; DistDGLv2 §3.2).

DistDGLv2 §3.2 describes the mini-batch recipe: pick target vertices, pick at
most ``K`` (the fanout) neighbours of each uniformly at random, reduce them to
a unique set, and recurse once per layer.  GSplit §5 phrases one recursion
step as ``sample_layer(frontier) -> (edges, next_frontier)``; that is the
interface here, so distributed samplers (split-parallel, partition-local) call
the same primitive on their own frontiers.

Everything is vectorized numpy over the frontier:

* rows whose degree is at most the fanout (or fanout ``-1``) keep all their
  in-edges;
* the other rows draw ``k`` distinct positions out of ``d`` with Robert
  Floyd's algorithm, run for all rows at once (``k`` vectorized steps, each
  comparing against the at most ``k`` positions already chosen), which is
  uniform over ``k``-subsets and costs ``O(k^2)`` per row independent of the
  degree (hub vertices of power-law graphs cost no more than others);
* relabelling to block-local ids uses a vertex bitmap when the graph is not
  much larger than the sample (one pass, no sort) and sorting otherwise; both
  give the same result: destinations first, then new sources in ascending id.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gnnflow.errors import ConfigError
from gnnflow.sampling.block import Block, as_long_tensor

GeneratorLike = np.random.Generator | int | None


def _as_np(x: np.ndarray | torch.Tensor | Sequence[int]) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _generator(generator: GeneratorLike) -> np.random.Generator:
    if isinstance(generator, np.random.Generator):
        return generator
    return np.random.default_rng(generator)


def ragged_arange(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concat([arange(s, s + c) for s, c in zip(starts, counts)])`` without a loop."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)


def _floyd_choose(deg: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``[R, k]`` sorted distinct positions in ``[0, deg_r)`` per row, uniform over k-subsets.

    Floyd's algorithm: for ``j = d-k .. d-1`` draw ``t`` uniform in ``[0, j]``;
    take ``t`` unless already taken, else take ``j``.
    """
    rows = deg.shape[0]
    chosen = np.empty((rows, k), dtype=np.int64)
    base = deg - k
    for i in range(k):
        j = base + i
        t = (rng.random(rows) * (j + 1)).astype(np.int64)
        np.minimum(t, j, out=t)
        if i:
            dup = (chosen[:, :i] == t[:, None]).any(axis=1)
            t[dup] = j[dup]
        chosen[:, i] = t
    chosen.sort(axis=1)
    return chosen


def sample_edge_positions(
    indptr: np.ndarray, seeds: np.ndarray, fanout: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Sampled edge positions into ``indices`` and the per-seed counts (CSR over seeds)."""
    starts = indptr[seeds]
    deg = indptr[seeds + 1] - starts
    if fanout < 0:
        return ragged_arange(starts, deg), deg
    counts = np.minimum(deg, fanout)
    eid = ragged_arange(starts, counts)
    big = np.flatnonzero(deg > fanout)
    if big.size:
        chosen = _floyd_choose(deg[big], fanout, rng)
        chosen += starts[big][:, None]
        # rows of ``big`` hold exactly ``fanout`` slots each, starting at their CSR offset
        first_slot = (np.cumsum(counts) - counts)[big]
        slots = first_slot[:, None] + np.arange(fanout, dtype=np.int64)
        eid[slots.ravel()] = chosen.ravel()
    return eid, counts


def csr_sample_neighbors(
    indptr: np.ndarray | torch.Tensor,
    indices: np.ndarray | torch.Tensor,
    seeds: np.ndarray | torch.Tensor,
    fanout: int,
    generator: GeneratorLike = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniformly sample up to ``fanout`` in-neighbours of each seed, without replacement.

    ``indptr``/``indices`` are a CSR over destinations (in-neighbours); ``fanout``
    ``-1`` keeps every in-edge.  Returns ``(edge_dst_pos, edge_src)``: for each
    sampled edge the position of its destination in ``seeds`` (non-decreasing,
    so the edges form a CSR over ``seeds``) and the global id of its source.
    """
    indptr_np, indices_np, seeds_np = _as_np(indptr), _as_np(indices), _as_np(seeds).astype(np.int64)
    eid, counts = sample_edge_positions(indptr_np, seeds_np, int(fanout), _generator(generator))
    dst_pos = np.repeat(np.arange(seeds_np.shape[0], dtype=np.int64), counts)
    return torch.from_numpy(dst_pos), torch.from_numpy(np.asarray(indices_np[eid], dtype=np.int64))


class Relabeler:
    """Maps sampled global source ids to block-local ids (destinations first)."""

    # use the bitmap when num_nodes <= _BITMAP_RATIO * number of sampled edges
    _BITMAP_RATIO = 64

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = num_nodes
        self._mark: np.ndarray | None = None
        self._pos: np.ndarray | None = None

    def __call__(self, dst_ids: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(src_ids, local)`` with ``src_ids[:len(dst_ids)] == dst_ids``."""
        if self.num_nodes <= self._BITMAP_RATIO * max(src.shape[0], 1):
            return self._bitmap(dst_ids, src)
        return self._sorted(dst_ids, src)

    def _bitmap(self, dst_ids: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._mark is None:
            self._mark = np.zeros(self.num_nodes, dtype=bool)
            # int32 positions halve the random-access footprint (cache misses dominate)
            self._pos = np.empty(self.num_nodes, dtype=np.int32 if self.num_nodes < 2**31 else np.int64)
        mark, pos = self._mark, self._pos
        assert pos is not None
        mark[src] = True
        mark[dst_ids] = False
        new = np.flatnonzero(mark)
        mark[new] = False
        src_ids = np.concatenate([dst_ids, new])
        pos[src_ids] = np.arange(src_ids.shape[0], dtype=pos.dtype)
        return src_ids, pos[src].astype(np.int64)

    @staticmethod
    def _sorted(dst_ids: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        uniq, inv = np.unique(src, return_inverse=True)
        order = np.argsort(dst_ids, kind="stable")
        sorted_dst = dst_ids[order]
        at = np.minimum(np.searchsorted(sorted_dst, uniq), max(sorted_dst.shape[0] - 1, 0))
        in_dst = sorted_dst[at] == uniq if sorted_dst.shape[0] else np.zeros(uniq.shape[0], dtype=bool)
        new = uniq[~in_dst]
        local_uniq = np.empty(uniq.shape[0], dtype=np.int64)
        local_uniq[in_dst] = order[at[in_dst]]
        local_uniq[~in_dst] = dst_ids.shape[0] + np.arange(new.shape[0], dtype=np.int64)
        return np.concatenate([dst_ids, new]), local_uniq[inv.reshape(-1)]


class LayerwiseSampler:
    """Layer-wise sampling on top of one step, ``sample_neighbors(dst, fanout) -> (counts,
    src)`` (per destination, how many sources it got, and the sources in CSR order).

    Subclasses set ``fanouts``, ``_relabel`` (a :class:`Relabeler`) and define
    ``sample_neighbors``; the blocks are assembled here, the same for every sampler.
    """

    fanouts: list[int]
    _relabel: Relabeler

    def sample_neighbors(self, dst: np.ndarray, fanout: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def sample_layer(self, frontier: np.ndarray | torch.Tensor, fanout: int) -> tuple[Block, torch.Tensor]:
        """Sample one layer for destinations ``frontier`` (unique ids); return ``(block, block.src_ids)``."""
        dst = _as_np(frontier).astype(np.int64, copy=False)
        counts, src = self.sample_neighbors(dst, int(fanout))
        src_ids, local = self._relabel(dst, src)
        indptr = np.zeros(dst.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        block = Block(
            dst_ids=torch.from_numpy(np.array(dst, copy=True)),
            src_ids=torch.from_numpy(src_ids),
            indptr=torch.from_numpy(indptr),
            indices=torch.from_numpy(local),
        )
        return block, block.src_ids

    def sample_blocks(self, targets: np.ndarray | torch.Tensor) -> list[Block]:
        """Blocks for one mini-batch, ordered input -> output (``blocks[-1].dst_ids == targets``)."""
        frontier: np.ndarray | torch.Tensor = targets
        blocks: list[Block] = []
        for fanout in reversed(self.fanouts):
            block, frontier = self.sample_layer(frontier, fanout)
            blocks.append(block)
        blocks.reverse()
        return blocks


class NeighborSampler(LayerwiseSampler):
    """Multi-layer uniform neighbour sampler producing DGL-style blocks.

    ``fanouts[i]`` is the fanout of ``blocks[i]`` (input layer first), as in
    ``dgl.dataloading.NeighborSampler``; sampling runs from the targets
    outwards, so ``fanouts[-1]`` is applied to the targets.  The same ``seed``
    and the same sequence of calls give the same blocks.
    """

    def __init__(
        self,
        indptr: np.ndarray | torch.Tensor,
        indices: np.ndarray | torch.Tensor,
        fanouts: Sequence[int],
        seed: int = 0,
    ) -> None:
        self.indptr = _as_np(indptr)
        self.indices = _as_np(indices)
        if self.indptr.ndim != 1 or self.indptr.shape[0] < 1:
            raise ConfigError("NeighborSampler: indptr must be a 1-D array of num_nodes+1 offsets")
        self.fanouts = [int(f) for f in fanouts]
        if not self.fanouts or any(f == 0 or f < -1 for f in self.fanouts):
            raise ConfigError(f"fanouts: each must be a positive count or -1 (full), got {list(fanouts)}")
        self.num_nodes = self.indptr.shape[0] - 1
        self.rng = np.random.default_rng(seed)
        self._relabel = Relabeler(self.num_nodes)

    def sample_neighbors(self, dst: np.ndarray, fanout: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniform sampling without replacement from the whole CSR."""
        eid, counts = sample_edge_positions(self.indptr, dst, fanout, self.rng)
        return counts, np.asarray(self.indices[eid], dtype=np.int64)


def full_blocks(indptr: np.ndarray | torch.Tensor, indices: np.ndarray | torch.Tensor, num_layers: int) -> list[Block]:
    """``num_layers`` copies of the whole-graph block (full-batch training)."""
    block = Block.full_graph(as_long_tensor(indptr), as_long_tensor(indices))
    return [block] * num_layers
