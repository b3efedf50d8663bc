"""Memory-bounded METIS: label-propagation coarsening around a METIS call on the coarse graph.

METIS 5.1 keeps every coarsening level in memory.  On graphs with little
locality (our Chung-Lu synthetic graph; the random part of web-scale power-law
graphs) heavy-edge matching halves the vertices per level but barely the edges,
so METIS needs ~65 bytes per adjacency entry beyond its input, several times
the graph itself (docs/partitioning.md has figures).  Partitioners built for
large graphs (KaMinPar, Mt-KaHyPar) coarsen with *size-constrained label
propagation* instead, which contracts whole clusters at once.

``lp_metis`` runs that multilevel scheme with METIS as the initial partitioner,
keeping METIS's multi-constraint balance (DistDGLv2 §4.1.3):

1. **clustering** (:func:`cluster`): every vertex starts in its own cluster and,
   in a random order, joins the neighbouring cluster it has the most edge weight
   to, provided that cluster stays at most ``total / (parts x
   clusters_per_part)`` in *every* constraint (so whole clusters can still be
   balanced in all of them).  Vertices left alone because every neighbouring
   cluster is full are grouped by the cluster they favour (KaMinPar's two-hop
   clustering), which is what lets graphs without locality shrink;
2. **contraction** (:func:`contract`): clusters become vertices (constraint
   weights summed) and parallel edges merge (weights summed); 1 and 2 repeat
   until the graph has about ``2 x parts x clusters_per_part`` vertices or
   stops shrinking;
3. **METIS** ``PartGraphKway`` on the coarsest graph: every constraint, the
   imbalance target, edge weights;
4. **refinement** (:func:`refine`) on every level on the way back: a vertex
   moves to the part it has the most edge weight to, if the gain is positive
   and the part stays under the imbalance cap in every constraint (greedy
   k-way refinement, as METIS's own and KaMinPar's label-propagation refiner).

Memory: the levels' graphs (int32 adjacency and edge weights; the first coarse
level holds about two thirds of the input's entries on a graph without
locality, the next ones a few percent) plus a few arrays of one entry per
vertex.  The kernels are C (``_lpkernels.c``, compiled by pip at install time,
called through ctypes): sequential and deterministic from ``seed``.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gnnflow.errors import GnnflowError

log = logging.getLogger("gnnflow.partition")

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_kernels: ctypes.CDLL | None = None


class KernelsUnavailable(GnnflowError):
    """The compiled label-propagation kernels are missing (package installed without building them)."""


def load_kernels() -> ctypes.CDLL:
    """The C kernels, loaded once; :class:`KernelsUnavailable` says how to build them."""
    global _kernels
    if _kernels is None:
        try:
            from gnnflow.partition import _lpkernels
        except ImportError as exc:
            raise KernelsUnavailable(
                f"gnnflow's compiled partitioning kernels are missing ({exc}); reinstall with a C compiler "
                "and the Python headers present (pip install -e .), or use --coarsen none") from None
        lib = ctypes.CDLL(_lpkernels.__file__)
        for name in ("gf_cluster", "gf_contract", "gf_refine"):
            getattr(lib, name).restype = _I64
        _kernels = lib
    return _kernels


def _ptr(a: np.ndarray | None) -> ctypes.c_void_p | None:
    return None if a is None else a.ctypes.data_as(_PTR)


def _graph(indptr: np.ndarray, indices: np.ndarray, edge_weights: np.ndarray | None,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The kernels' layout: int64 indptr, int32 neighbour ids, int32 weights or None."""
    from gnnflow.io import as_idx

    ew = None if edge_weights is None else as_idx(np.asarray(edge_weights), np.int32)
    return as_idx(indptr, np.int64), as_idx(indices, np.int32), ew


def _check(status: int, what: str) -> int:
    if status < 0:
        raise MemoryError(f"{what}: out of memory")
    return int(status)


@dataclass
class CoarsenStats:
    """What the multilevel path did, for ``meta.json``."""

    levels: list[dict[str, int]] = field(default_factory=list)  # vertices, entries per level
    seconds: dict[str, float] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"levels": self.levels, "seconds": self.seconds}


def cluster(indptr: np.ndarray, indices: np.ndarray, vw: np.ndarray, cap: np.ndarray, *, rounds: int = 5,
            seed: int = 0, edge_weights: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Size-constrained label propagation + two-hop grouping: (cluster 0..C-1 per vertex, C).

    A cluster's weight stays <= ``cap`` in every column of ``vw`` ([N, ncon]).
    """
    lib = load_kernels()
    ip, ix, ew = _graph(indptr, indices, edge_weights)
    vw = np.ascontiguousarray(vw, dtype=np.int64).reshape(ip.shape[0] - 1, -1)
    cap = np.ascontiguousarray(cap, dtype=np.int64)
    n = ip.shape[0] - 1
    labels = np.empty(n, dtype=np.int64)
    c = lib.gf_cluster(_I64(n), _ptr(ip), _ptr(ix), _ptr(ew), _I64(vw.shape[1]), _ptr(vw), _ptr(cap),
                       _I64(rounds), ctypes.c_uint64(seed), _ptr(labels))
    return labels, _check(c, "label propagation")


def contract(indptr: np.ndarray, indices: np.ndarray, cluster_of: np.ndarray, num_clusters: int,
             edge_weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coarse symmetric graph without self-loops: (int64 indptr, int32 indices, int32 weights).

    Two passes (count, then fill), so nothing of the fine graph's size is allocated.
    """
    lib = load_kernels()
    ip, ix, ew = _graph(indptr, indices, edge_weights)
    n = ip.shape[0] - 1
    cl = np.ascontiguousarray(cluster_of, dtype=np.int64)
    args = (_I64(n), _ptr(ip), _ptr(ix), _ptr(ew), _ptr(cl), _I64(num_clusters))
    total = _check(lib.gf_contract(*args, None, None, None), "contraction")
    cindptr = np.zeros(num_clusters + 1, dtype=np.int64)
    cindices = np.empty(total, dtype=np.int32)
    cweights = np.empty(total, dtype=np.int32)
    _check(lib.gf_contract(*args, _ptr(cindptr), _ptr(cindices), _ptr(cweights)), "contraction")
    return cindptr, cindices, cweights


def coarse_weights(vw: np.ndarray, cluster_of: np.ndarray, num_clusters: int) -> np.ndarray:
    """Per-cluster sums of every constraint column (int64)."""
    out = np.empty((num_clusters, vw.shape[1]), dtype=np.int64)
    for c in range(vw.shape[1]):
        out[:, c] = np.bincount(cluster_of, weights=vw[:, c], minlength=num_clusters)
    return out


def refine(indptr: np.ndarray, indices: np.ndarray, part: np.ndarray, num_parts: int, vw: np.ndarray,
           imbalance: float, *, rounds: int = 8, seed: int = 0, edge_weights: np.ndarray | None = None) -> int:
    """Greedy balance-constrained k-way refinement of ``part`` (int64, in place); returns the moves.

    A part's cap in every constraint is the imbalance target, or what the part
    already holds if that is more (so refinement never makes balance worse).
    """
    lib = load_kernels()
    ip, ix, ew = _graph(indptr, indices, edge_weights)
    vw = np.ascontiguousarray(vw, dtype=np.int64).reshape(ip.shape[0] - 1, -1)
    if part.dtype != np.int64 or not part.flags.c_contiguous:
        raise TypeError("refine works in place on a contiguous int64 part array")
    total = vw.sum(axis=0, dtype=np.int64).astype(np.float64)
    load = coarse_weights(vw, part, num_parts)  # the kernel updates it as vertices move
    cap = np.ascontiguousarray(np.maximum(np.ceil(imbalance * total / num_parts), load.max(axis=0)), dtype=np.int64)
    moves = lib.gf_refine(_I64(ip.shape[0] - 1), _ptr(ip), _ptr(ix), _ptr(ew), _I64(vw.shape[1]), _ptr(vw),
                          _ptr(part), _I64(num_parts), _ptr(load), _ptr(cap), _I64(rounds), ctypes.c_uint64(seed))
    return _check(moves, "refinement")


def lp_metis(indptr: np.ndarray, indices: np.ndarray, num_parts: int, vw: np.ndarray,
             part_fn: Callable[..., tuple[np.ndarray, int]], *, imbalance: float = 1.03, seed: int = 0,
             edge_weights: np.ndarray | None = None, clusters_per_part: int = 64,
             stats: CoarsenStats | None = None) -> np.ndarray:
    """Multilevel partition: LP coarsening, ``part_fn`` (METIS) on the coarsest graph, refinement.

    ``vw`` is [N, ncon]; ``part_fn(indptr, indices, num_parts, vwgt=, adjwgt=, ubvec=, seed=)``
    returns (part, objective).  Returns int32 part per vertex.
    """
    stats = stats if stats is not None else CoarsenStats()
    vw = np.ascontiguousarray(vw.reshape(vw.shape[0], -1))
    total = vw.sum(axis=0, dtype=np.int64)
    cap = np.maximum(1, np.ceil(total / (num_parts * clusters_per_part))).astype(np.int64)
    target = 2 * num_parts * clusters_per_part
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]] = []
    maps: list[np.ndarray] = []
    cur = (*_graph(indptr, indices, edge_weights), vw)
    stats.levels.append({"vertices": int(indptr.shape[0] - 1), "entries": int(indices.shape[0])})
    t0 = time.perf_counter()
    while cur[0].shape[0] - 1 > target and len(maps) < 20:
        n = cur[0].shape[0] - 1
        labels, c = cluster(cur[0], cur[1], cur[3], cap, seed=seed + len(maps), edge_weights=cur[2])
        if c > 0.95 * n:  # no longer shrinking
            break
        cindptr, cindices, cweights = contract(cur[0], cur[1], labels, c, cur[2])
        levels.append(cur)
        maps.append(labels)
        cur = (cindptr, cindices, cweights, coarse_weights(cur[3], labels, c))
        stats.levels.append({"vertices": int(c), "entries": int(cindices.shape[0])})
        log.info("coarsening level %d: %d vertices, %d entries", len(maps), c, cindices.shape[0])
    t1 = time.perf_counter()
    part, _ = part_fn(cur[0], cur[1], num_parts, vwgt=cur[3], adjwgt=cur[2], ubvec=imbalance,
                      seed=seed)
    part = part.astype(np.int64)
    t2 = time.perf_counter()
    if not maps:  # too small to coarsen: the METIS partition as is
        refine(cur[0], cur[1], part, num_parts, cur[3], imbalance, seed=seed, edge_weights=cur[2])
    while maps:
        part = part[maps.pop()]
        fine = levels.pop()
        refine(fine[0], fine[1], part, num_parts, fine[3], imbalance, seed=seed, edge_weights=fine[2])
        del fine
    stats.seconds = {"coarsen_s": t1 - t0, "metis_s": t2 - t1, "refine_s": time.perf_counter() - t2}
    return part.astype(np.int32)
