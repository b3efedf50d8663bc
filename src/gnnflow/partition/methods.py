"""Partitioning methods besides random/metis/parmetis.

* ``edge`` (GSplit §6.3 "Edge"): min edge cut balancing edges and training
  (target) vertices, as data-parallel systems do.
* ``node`` (GSplit §6.3 "Node"): min edge cut with presampled vertex weights only.
* ``presample`` (GSplit §4): weighted min cut, vertex weights = expected load,
  edge weights = expected times sampled, both from :mod:`gnnflow.partition.presample`.
* ``permute-1d`` (MG-GCN §4.1, §5.2): a random vertex permutation, then P
  contiguous row blocks of the permuted order; the P×P tile nnz table shows the
  load balance the permutation buys.
* ``two-level`` (DistDGLv2 §4.1.2): METIS across machines, then METIS inside
  every machine's part to assign vertices (hence training vertices) to workers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnflow.errors import ConfigError
from gnnflow.partition.assignment import Assignment, parse_levels
from gnnflow.partition.metis import (
    metis_graph,
    metis_partition,
    partition_kway,
    symmetric_edge_weights,
)

# Integer scale of presampled weights (METIS takes integers; 32-bit idx_t sums must fit).
_VERTEX_TOTAL = float(1 << 24)
_EDGE_TOTAL = float(1 << 27)


def edge_partition(store: Any, num_parts: int, seed: int = 0, *, imbalance: float = 1.03,
                   coarsen: str = "auto") -> Assignment:
    """GSplit's Edge baseline: METIS balancing edges (in-degree) and training vertices."""
    return metis_partition(store, num_parts, seed, constraints=["train", "edges"], imbalance=imbalance,
                           coarsen=coarsen)


def presample_vertex_weights(p: Any, weights: str) -> tuple[np.ndarray, list[str]]:
    """Integer vertex weights [N, ncon] from a presample and the names of their columns.

    ``layer-edges`` (default): one constraint per layer, the expected sampled
    in-edges a vertex computes at that layer (the split load GSplit Fig. 5
    measures); ``appearances``: GSplit §4's single weight, the expected number
    of layers a vertex appears in per mini-batch.
    """
    if weights == "layer-edges":
        cols = p.dst_edges.T.astype(np.float64)
        names = [f"presample:layer{i}-edges" for i in range(cols.shape[1])]
    elif weights == "appearances":
        cols = p.vertex_counts[1:].sum(axis=0, dtype=np.float64)[:, None]
        names = ["presample:appearances"]
    else:
        raise ConfigError(f"presample weights must be layer-edges or appearances, got {weights!r}")
    sums = cols.sum(axis=0)
    keep = sums > 0
    cols, names = cols[:, keep], [n for n, k in zip(names, keep, strict=True) if k]
    if not names:
        raise ConfigError("the presample file has all-zero vertex weights; presample with more epochs")
    scaled = np.rint(cols * (_VERTEX_TOTAL / sums[keep])).astype(np.int64)
    return scaled, names


def _presample_edge_weights(store: Any, p: Any) -> np.ndarray:
    w = symmetric_edge_weights(np.asarray(store.indptr), np.asarray(store.indices), p.edge_counts.astype(np.float64))
    total = w.sum()
    return 1 + np.rint(w * (_EDGE_TOTAL / total)).astype(np.int64) if total > 0 else np.ones_like(w, dtype=np.int64)


def _load_presample(store: Any, presample: Any) -> Any:
    from gnnflow.partition.presample import Presample, load_for_store

    if presample is None:
        raise ConfigError("this method needs presampled weights: pass --presample FILE (from `gnnflow presample`)")
    return presample if isinstance(presample, Presample) else load_for_store(presample, store)


def node_partition(store: Any, num_parts: int, seed: int = 0, *, presample: Any = None,
                   weights: str = "layer-edges", imbalance: float = 1.03, coarsen: str = "auto") -> Assignment:
    """GSplit's Node baseline: presampled vertex weights, unweighted edges."""
    p = _load_presample(store, presample)
    vw, names = presample_vertex_weights(p, weights)
    a = metis_partition(store, num_parts, seed, vertex_weights=vw, imbalance=imbalance, coarsen=coarsen)
    a.meta.update(constraints=names, presample_weights=weights)
    a.constraints = ["vertices", "train", "edges"]
    return a


def presample_partition(store: Any, num_parts: int, seed: int = 0, *, presample: Any = None,
                        weights: str = "layer-edges", imbalance: float = 1.03, coarsen: str = "auto") -> Assignment:
    """GSplit §4: weighted min cut with presampled vertex AND edge weights."""
    if store.meta.directed:
        raise ConfigError(f"{store.path}: presample partitioning needs an undirected store")
    p = _load_presample(store, presample)
    vw, names = presample_vertex_weights(p, weights)
    ew = _presample_edge_weights(store, p)
    a = metis_partition(store, num_parts, seed, vertex_weights=vw, edge_weights=ew, imbalance=imbalance,
                        coarsen=coarsen)
    a.meta.update(constraints=names, presample_weights=weights)
    a.constraints = ["vertices", "train", "edges"]
    return a


def tile_nnz(indptr: np.ndarray, indices: np.ndarray, node_part: np.ndarray, num_parts: int) -> np.ndarray:
    """nnz of every tile A_ij (rows/destinations in part i, columns/sources in part j)."""
    from gnnflow.partition.metrics import edge_dst

    key = node_part[edge_dst(np.asarray(indptr))].astype(np.int64) * num_parts + node_part[np.asarray(indices)]
    return np.bincount(key, minlength=num_parts * num_parts).reshape(num_parts, num_parts)


def permute_1d_partition(store: Any, num_parts: int, seed: int = 0, permute: bool = True) -> Assignment:
    """MG-GCN §5.2: random permutation, then P contiguous row blocks of the permuted order.

    ``perm[i]`` is the original id of the vertex at permuted position ``i``; block
    ``p`` holds positions ``row_bounds[p]:row_bounds[p+1]``.  ``permute=False``
    keeps the natural order (the "without permutation" arm of MG-GCN Fig. 7).
    """
    n = store.num_nodes
    if permute:
        perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    else:
        perm = np.arange(n, dtype=np.int64)
    bounds = (np.arange(num_parts + 1, dtype=np.int64) * n) // num_parts
    block_of_pos = np.repeat(np.arange(num_parts, dtype=np.int32), np.diff(bounds))
    node_part = np.empty(n, dtype=np.int32)
    node_part[perm] = block_of_pos
    tiles = tile_nnz(store.indptr, store.indices, node_part, num_parts)
    # the same table for the unpermuted order shows what the permutation buys
    natural = np.repeat(np.arange(num_parts, dtype=np.int32), np.diff(bounds))
    tiles_natural = tile_nnz(store.indptr, store.indices, natural, num_parts)
    meta = {"row_bounds": bounds.tolist(), "tile_nnz": tiles.tolist(),
            "tile_nnz_max_over_mean": float(tiles.max() / tiles.mean()) if tiles.sum() else 1.0,
            "tile_nnz_unpermuted_max_over_mean": float(tiles_natural.max() / tiles_natural.mean())
            if tiles_natural.sum() else 1.0}
    return Assignment(node_part, arrays={"perm": perm}, meta=meta, constraints=["vertices", "train", "edges"])


def induced_subgraph(indptr: np.ndarray, indices: np.ndarray, vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the subgraph induced by sorted ``vertices``, relabelled to 0..len-1."""
    from gnnflow.partition.book import gather_rows

    sub_indptr, nbrs = gather_rows(indptr, indices, vertices)
    pos = np.searchsorted(vertices, nbrs)
    keep = vertices[np.minimum(pos, vertices.shape[0] - 1)] == nbrs
    row = np.repeat(np.arange(vertices.shape[0]), np.diff(sub_indptr))[keep]
    new_indptr = np.zeros(vertices.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=vertices.shape[0]), out=new_indptr[1:])
    return new_indptr, pos[keep].astype(np.int64)


def two_level_partition(store: Any, num_parts: int, seed: int = 0, *, levels: Any = None,
                        constraints: Any = None, imbalance: float = 1.03, coarsen: str = "auto") -> Assignment:
    """DistDGLv2 §4.1.2: level 1 across machines, level 2 inside each machine.

    Level 1 is exactly ``metis`` with ``M`` parts (same seed and constraints), so the
    machine-level partition is reproducible on its own.  Level 2 partitions each
    machine's induced subgraph into ``W`` worker parts with the same constraints
    (weights taken on the full graph), so every worker's training vertices are
    those of its level-2 part.  Worker ``w`` of machine ``m`` is part ``m*W + w``.
    """
    from gnnflow.partition.constraints import constraint_weights, parse_constraints

    if levels is None:
        raise ConfigError("two-level needs --levels MxW (machines x workers per machine)")
    m, w = parse_levels(levels)
    if m * w != num_parts:
        raise ConfigError(f"--levels {m}x{w} gives {m * w} workers but --parts is {num_parts}")
    names = parse_constraints(constraints)
    level1 = metis_partition(store, m, seed, constraints=names, imbalance=imbalance, coarsen=coarsen)
    node_machine = level1.node_part.astype(np.int32)
    vw = constraint_weights(store, names)
    indptr, indices = metis_graph(store)
    node_part = np.empty(store.num_nodes, dtype=np.int32)
    level2_meta = []
    for mach in range(m):
        verts = np.flatnonzero(node_machine == mach)
        if verts.shape[0] < w:
            raise ConfigError(f"machine {mach} got {verts.shape[0]} vertices, fewer than {w} workers")
        sub_indptr, sub_indices = induced_subgraph(indptr, indices, verts)
        sub_vw = vw[verts]
        # a constraint with no weight inside this machine cannot be balanced: drop it here
        cols = sub_vw.sum(axis=0) > 0
        level2: dict[str, Any] = {}
        wpart = partition_kway(sub_indptr, sub_indices, w, sub_vw[:, cols], coarsen=coarsen, meta=level2,
                               imbalance=imbalance, seed=seed)
        node_part[verts] = mach * w + wpart
        level2_meta.append(level2)
    meta = {"levels": [m, w], "constraints": names, "level2": level2_meta,
            "level1": {k: v for k, v in level1.meta.items() if k != "constraints"}}
    return Assignment(node_part, arrays={"node_machine": node_machine}, meta=meta, constraints=names)
