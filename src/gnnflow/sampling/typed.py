"""Typed neighbour sampling: a fanout per relation (DistDGLv2 §4.1.1; DGL's ``sample_etype_neighbors``).

A homogenized heterogeneous graph (DistDGLv2 §4.1.1) is one CSR over
destinations whose edges carry a relation (``edge_type``).  Typed sampling
draws, for every destination ``v`` and relation ``r``, at most ``k_r`` of
``v``'s in-edges of relation ``r`` uniformly without replacement, as DGL's
``sample_etype_neighbors`` does; ``k_r = -1`` keeps all of them and ``0`` none.

Each row of the CSR lists its edges grouped by relation, in relation order
(``homogenize`` writes them so; :func:`sort_rows_by_type` orders any other CSR
once, a stable sort that keeps the order within a relation), so the edges of
``(v, r)`` are one contiguous slice.  Its bounds are found by a vectorised
binary search over the frontier's rows (``log2(degree)`` steps, no pass over a
hub's edges), and the slices that hold more than ``k_r`` edges draw with
Floyd's algorithm from the key ``(seed, epoch, batch, layer, v, r)``
(:meth:`~gnnflow.sampling.draws.DrawKey.relation_hashes`): whoever samples
``v`` draws what the single-process sampler draws.  The sampled edges of a
destination stay grouped by relation, so a block's ``etypes`` are sorted within
each destination, which the relational layers (:mod:`gnnflow.nn.rgcn`,
:mod:`gnnflow.nn.rgat`) rely on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from gnnflow.errors import ConfigError
from gnnflow.sampling.block import Block
from gnnflow.sampling.draws import DrawKey, floyd_choose
from gnnflow.sampling.neighbor import LayerwiseSampler, Relabeler, _as_np, ragged_arange

#: one layer's fanout: one count for every relation, or a count per relation id
LayerFanout = int | Mapping[int, int]


def relation_fanouts(spec: LayerFanout | np.ndarray, num_rels: int) -> np.ndarray:
    """One layer's fanout as a count per relation (int64 ``[num_rels]``; -1: all, 0: none).

    ``spec`` is one count for every relation (a positive count or -1) or a mapping
    ``{relation id: count}`` that names every relation (count >= -1)."""
    if isinstance(spec, np.ndarray):
        out = spec.astype(np.int64)
    elif isinstance(spec, Mapping):
        try:
            counts = {int(r): int(k) for r, k in spec.items()}
        except (TypeError, ValueError):
            raise ConfigError(f"fanouts: {dict(spec)!r}: the sampler takes relation ids; resolve relation "
                              "names against the graph's edge types first") from None
        missing = sorted(set(range(num_rels)) - set(counts))
        unknown = sorted(set(counts) - set(range(num_rels)))
        if missing or unknown:
            raise ConfigError(f"fanouts: a per-relation fanout must name each of the {num_rels} relations"
                              + (f"; missing relation ids {missing}" if missing else "")
                              + (f"; unknown relation ids {unknown}" if unknown else ""))
        out = np.array([counts[r] for r in range(num_rels)], dtype=np.int64)
    else:
        k = int(spec)
        if k == 0 or k < -1:
            raise ConfigError(f"fanouts: each must be a positive count or -1 (full), got {k}")
        out = np.full(num_rels, k, dtype=np.int64)
    if out.shape != (num_rels,) or (out < -1).any():
        raise ConfigError(f"fanouts: per-relation counts must be >= -1 (-1: all), got {out.tolist()}")
    return out


def sort_rows_by_type(indptr: np.ndarray, indices: np.ndarray,
                      etypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, etypes)`` with every row's edges grouped by relation (a stable sort by edge
    type within rows, which keeps the order within a relation); the inputs themselves when
    they are already so ordered."""
    indptr, etypes = np.asarray(indptr), np.asarray(etypes)
    if etypes.shape[0] < 2:
        return indices, etypes
    drops = np.flatnonzero(etypes[1:] < etypes[:-1]) + 1
    # a drop of the type at a row's first slot is a new row, not disorder
    if not np.isin(drops, indptr).all():
        rows = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
        order = np.lexsort((etypes, rows))  # stable: rows, then types, then CSR order
        return np.asarray(indices)[order], etypes[order]
    return indices, etypes


def relation_bounds(indptr: np.ndarray, etypes: np.ndarray, rows: np.ndarray, num_rels: int) -> np.ndarray:
    """``[len(rows), num_rels + 1]`` CSR positions: the edges of relation ``r`` of row ``rows[i]``
    are ``bounds[i, r]:bounds[i, r + 1]`` (rows grouped by relation, :func:`sort_rows_by_type`).

    A binary search per (row, relation boundary), all at once: ``ceil(log2(degree + 1))``
    vectorised steps, each over the pairs whose interval is not yet empty."""
    starts, ends = indptr[rows], indptr[rows + 1]
    n = rows.shape[0]
    if num_rels == 1:
        return np.stack([starts, ends], axis=1)
    # lower bound of type t in [start, end) for t = 1 .. R-1
    lo = np.repeat(starts, num_rels - 1)
    hi = np.repeat(ends, num_rels - 1)
    want = np.tile(np.arange(1, num_rels, dtype=etypes.dtype), n)
    active = np.flatnonzero(lo < hi)
    while active.size:
        mid = (lo[active] + hi[active]) >> 1
        right = etypes[mid] < want[active]
        lo[active] = np.where(right, mid + 1, lo[active])
        hi[active] = np.where(right, hi[active], mid)
        active = active[lo[active] < hi[active]]
    out = np.empty((n, num_rels + 1), dtype=np.int64)
    out[:, 0], out[:, -1] = starts, ends
    out[:, 1:-1] = lo.reshape(n, num_rels - 1)
    return out


def sample_typed_edge_positions(indptr: np.ndarray, etypes: np.ndarray, rows: np.ndarray, fanouts: np.ndarray,
                                key: DrawKey, layer: int,
                                vertex_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampled edge positions into ``indices``, the per-row counts and each sampled edge's relation.

    ``fanouts[r]``: the count of relation ``r`` (-1 all, 0 none); ``vertex_ids[i]`` is the
    global id of ``rows[i]``.  The edges of a row come grouped by relation, each relation's
    in CSR order (those of a slice that keeps everything) or ascending (a Floyd draw)."""
    num_rels = fanouts.shape[0]
    n = rows.shape[0]
    if (fanouts < 0).all():  # full neighbourhoods: whole rows, already grouped by relation
        starts = indptr[rows]
        deg = indptr[rows + 1] - starts
        eid = ragged_arange(starts, deg)
        return eid, deg, np.asarray(etypes[eid], dtype=np.int64)
    bounds = relation_bounds(indptr, etypes, rows, num_rels)
    seg_start = bounds[:, :-1].reshape(-1)  # segment i * R + r: relation r of row i
    seg_deg = np.diff(bounds, axis=1).reshape(-1)
    k = np.tile(fanouts, n)
    take_all = (k < 0) | (seg_deg <= k)
    seg_count = np.where(take_all, seg_deg, k)
    eid = ragged_arange(seg_start, seg_count)
    drawn = np.flatnonzero(~take_all)  # here k > 0 (k = 0 counts nothing), degree > k
    if drawn.size:
        first_slot = (np.cumsum(seg_count) - seg_count)[drawn]
        for kv in np.unique(k[drawn]):  # one vectorised Floyd run per distinct fanout
            sel = k[drawn] == kv
            segs = drawn[sel]
            hashes = key.relation_hashes(layer, vertex_ids[segs // num_rels], segs % num_rels)
            chosen = floyd_choose(seg_deg[segs], int(kv), hashes) + seg_start[segs][:, None]
            slots = first_slot[sel][:, None] + np.arange(int(kv), dtype=np.int64)
            eid[slots.reshape(-1)] = chosen.reshape(-1)
    counts = seg_count.reshape(n, num_rels).sum(axis=1)
    rels = np.repeat(np.tile(np.arange(num_rels, dtype=np.int64), n), seg_count)
    return eid, counts, rels


class TypedNeighborSampler(LayerwiseSampler):
    """Multi-layer typed neighbour sampler: ``fanouts[i]`` (input layer first) is one count for
    every relation or ``{relation id: count}``; blocks carry ``etypes`` and, given the type
    ranges of a homogenized graph (``node_type_offsets``), ``src_types``.

    ``etypes`` is the relation of every CSR slot (the store's ``edge_type``); a CSR whose rows
    are not grouped by relation is ordered once here (:func:`sort_rows_by_type`).
    ``vertex_ids[r]``: the global id of CSR row ``r`` where rows are local ids; draws and
    vertex types use global ids.
    """

    def __init__(
        self,
        indptr: np.ndarray | torch.Tensor,
        indices: np.ndarray | torch.Tensor,
        etypes: np.ndarray | torch.Tensor,
        fanouts: Sequence[LayerFanout],
        num_rels: int | None = None,
        seed: int = 0,
        vertex_ids: np.ndarray | None = None,
        node_type_offsets: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        self.indptr = _as_np(indptr)
        etypes_np = _as_np(etypes)
        indices_np = _as_np(indices)
        if etypes_np.shape != indices_np.shape:
            raise ConfigError(f"TypedNeighborSampler: {etypes_np.shape[0]} edge types for "
                              f"{indices_np.shape[0]} edges")
        self.num_rels = int(num_rels) if num_rels is not None else int(etypes_np.max(initial=-1)) + 1
        self.indices, self.etypes = sort_rows_by_type(self.indptr, indices_np, etypes_np)
        if not fanouts:
            raise ConfigError("fanouts: give one per layer")
        self.fanouts = [relation_fanouts(f, self.num_rels) for f in fanouts]  # type: ignore[misc]
        self.num_nodes = self.indptr.shape[0] - 1
        self.seed = int(seed)
        self.vertex_ids = None if vertex_ids is None else np.asarray(vertex_ids, dtype=np.int64)
        self.node_type_offsets = (None if node_type_offsets is None
                                  else np.asarray(node_type_offsets, dtype=np.int64))
        self.at(0, 0)
        self._relabel = Relabeler(self.num_nodes)

    def sample_layer(self, frontier: np.ndarray | torch.Tensor, fanout: LayerFanout | np.ndarray,  # type: ignore[override]
                     layer: int) -> tuple[Block, torch.Tensor]:
        dst = _as_np(frontier).astype(np.int64, copy=False)
        ids = dst if self.vertex_ids is None else self.vertex_ids[dst]
        eid, counts, rels = sample_typed_edge_positions(
            self.indptr, self.etypes, dst, relation_fanouts(fanout, self.num_rels), self.key, int(layer), ids)
        block = self.make_block(dst, counts, np.asarray(self.indices[eid], dtype=np.int64), rels)
        if self.node_type_offsets is not None:
            gid = block.src_ids.numpy() if self.vertex_ids is None else self.vertex_ids[block.src_ids.numpy()]
            block.src_types = torch.from_numpy(np.searchsorted(self.node_type_offsets, gid, side="right") - 1)
        return block, block.src_ids
