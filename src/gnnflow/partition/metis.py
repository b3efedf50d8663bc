"""METIS k-way partitioning with multiple balance constraints, through ctypes.

DistDGLv2 §4.1.3: min-cut partitioning must balance several quantities at once
(vertices, training vertices, edges, vertices per type), otherwise one machine
gets most of the training work.  pymetis passes only one constraint (given an
N×ncon weight array it silently reads the first N entries), so we call
``METIS_PartGraphKway`` of the system libmetis with ``ncon > 1`` directly.

The width of ``idx_t`` (32 or 64 bit) is detected at load time by letting
``METIS_SetDefaultOptions`` fill a buffer of 64-bit zeros.  The graph given to
METIS is symmetric and free of self-loops (a directed store is symmetrized).

Memory: METIS gets ``idx_t`` arrays built chunk by chunk from the memory-mapped
store (whose pages are dropped as they are read) and weights built at ``idx_t``
width, so no int64 copy lives beside them during the call.  What remains is
METIS's own: it keeps every coarsening level (adjacency and edge weights, at
``idx_t`` width, allocating unit edge weights itself when given none), so its
working memory is about ``8 * idx_bytes`` per adjacency entry times the number
of levels that fail to shrink the edge count (docs/partitioning.md has figures).
So on large graphs (``coarsen="auto"``, at least :data:`AUTO_COARSEN_ENTRIES`
adjacency entries) METIS partitions a graph coarsened by label propagation and
the result is refined on the way back (:mod:`gnnflow.partition.coarsen`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from typing import Any

import numpy as np

from gnnflow.errors import ConfigError, GnnflowError
from gnnflow.io import as_idx

log = logging.getLogger("gnnflow.partition")

METIS_NOPTIONS = 40
OPT_CTYPE, OPT_NITER, OPT_NCUTS, OPT_SEED, OPT_NO2HOP, OPT_CONTIG, OPT_UFACTOR, OPT_NUMBERING = 2, 6, 7, 8, 9, 11, 16, 17
_STATUS = {-2: "METIS_ERROR_INPUT (erroneous inputs or options)", -3: "METIS_ERROR_MEMORY (out of memory)",
           -4: "METIS_ERROR"}
#: ``coarsen="auto"`` coarsens graphs with at least this many adjacency entries
AUTO_COARSEN_ENTRIES = 1 << 21
COARSEN_MODES = ("auto", "lp", "none")
LIB_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libmetis.so.5", "libmetis.so.5", "libmetis.so")

_lib: tuple[ctypes.CDLL, type] | None = None


class MetisUnavailable(GnnflowError):
    """No METIS shared library could be loaded."""


def load_libmetis() -> tuple[ctypes.CDLL, type]:
    """(library, numpy idx dtype).  Honours ``GNNFLOW_LIBMETIS`` as an explicit path."""
    global _lib
    if _lib is not None:
        return _lib
    candidates = [os.environ["GNNFLOW_LIBMETIS"]] if os.environ.get("GNNFLOW_LIBMETIS") else list(LIB_CANDIDATES)
    found = ctypes.util.find_library("metis")
    if found and not os.environ.get("GNNFLOW_LIBMETIS"):
        candidates.append(found)
    errors = []
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
            continue
        buf = np.zeros(METIS_NOPTIONS, dtype=np.int64)
        lib.METIS_SetDefaultOptions(buf.ctypes.data_as(ctypes.c_void_p))
        # 32-bit idx_t writes 40 int32 -1s = the first 20 int64 slots; 64-bit fills all 40.
        idx = np.int64 if buf[METIS_NOPTIONS - 1] == -1 else np.int32
        _lib = (lib, idx)
        return _lib
    raise MetisUnavailable(
        "cannot load the METIS library (" + "; ".join(errors) + "); install Debian's libmetis5 "
        "(apt-get install libmetis5) or set GNNFLOW_LIBMETIS to libmetis.so"
    )


def metis_graph(store: Any) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR without self-loops (int64) for METIS; symmetrizes a directed store."""
    if not store.meta.directed:
        return store.indptr, store.indices  # memory maps: pages are released after conversion
    indptr, indices = np.asarray(store.indptr), np.asarray(store.indices)
    from gnnflow.data.csr import csr_from_keys, edge_keys
    from gnnflow.partition.metrics import edge_dst

    keys = edge_keys(indices, edge_dst(indptr), store.num_nodes, symmetrize=True)
    return csr_from_keys(keys, store.num_nodes)


def symmetric_edge_weights(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """w'(u,v) = w(u,v) + w(v,u) on a symmetric CSR (METIS needs equal weights both ways)."""
    from gnnflow.partition.metrics import edge_dst

    n = np.int64(indptr.shape[0] - 1)
    dst = edge_dst(indptr)
    keys = dst * n + indices  # sorted: rows by dst, neighbours sorted inside a row
    rev = np.searchsorted(keys, indices * n + dst)
    if rev.size and not np.array_equal(keys[np.minimum(rev, keys.size - 1)], indices * n + dst):
        raise GnnflowError("edge weights need a symmetric graph with sorted neighbour lists")
    return weights + weights[rev]


def trim_heap() -> None:
    """Hand the heap that METIS freed back to the OS (glibc keeps it otherwise)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


def part_graph_kway(indptr: np.ndarray, indices: np.ndarray, num_parts: int, *,
                    vwgt: np.ndarray | None = None, adjwgt: np.ndarray | None = None,
                    ubvec: float | list[float] = 1.03, seed: int = 0, niter: int = 10,
                    ncuts: int = 1, no2hop: bool = False) -> tuple[np.ndarray, int]:
    """Call ``METIS_PartGraphKway``; return (int32 part per vertex, edge cut objective).

    ``vwgt`` is [N] or [N, ncon] integer vertex weights (multi-constraint when
    ncon > 1), ``adjwgt`` integer weights per CSR entry (must be symmetric).
    """
    lib, idx = load_libmetis()
    n = indptr.shape[0] - 1
    if num_parts == 1:
        return np.zeros(n, dtype=np.int32), 0
    imax = np.iinfo(idx).max
    if indptr[-1] > imax:
        raise GnnflowError(f"graph has {int(indptr[-1])} edges, more than METIS's {np.dtype(idx).itemsize * 8}-bit idx_t holds")
    xadj = as_idx(indptr, idx)
    adjncy = as_idx(indices, idx)
    ncon = 1
    vw = None
    if vwgt is not None:
        vwgt = np.asarray(vwgt)
        ncon = 1 if vwgt.ndim == 1 else vwgt.shape[1]
        sums = vwgt.reshape(n, ncon).sum(axis=0)
        if np.any(sums <= 0):
            raise ConfigError(f"a balance constraint has total weight 0 (column sums {sums.tolist()}); drop it")
        if sums.max() > imax:
            raise GnnflowError("vertex weights overflow METIS's idx_t; scale them down")
        vw = np.ascontiguousarray(vwgt.reshape(n * ncon), dtype=idx)
    aw = None
    if adjwgt is not None:
        aw = np.ascontiguousarray(np.maximum(adjwgt, 1), dtype=idx)
    ub = np.ascontiguousarray(np.broadcast_to(np.asarray(ubvec, dtype=np.float32), (ncon,)))
    options = np.zeros(METIS_NOPTIONS, dtype=idx)
    lib.METIS_SetDefaultOptions(options.ctypes.data_as(ctypes.c_void_p))
    options[OPT_SEED] = seed
    options[OPT_NITER] = niter
    options[OPT_NCUTS] = ncuts
    options[OPT_NUMBERING] = 0
    options[OPT_NO2HOP] = int(no2hop)
    c_idx = ctypes.c_int64 if idx is np.int64 else ctypes.c_int32
    nvtxs, ncon_c, nparts, objval = c_idx(n), c_idx(ncon), c_idx(num_parts), c_idx(0)
    part = np.full(n, -1, dtype=idx)

    def ptr(a: np.ndarray | None) -> ctypes.c_void_p | None:
        return None if a is None else a.ctypes.data_as(ctypes.c_void_p)

    status = lib.METIS_PartGraphKway(
        ctypes.byref(nvtxs), ctypes.byref(ncon_c), ptr(xadj), ptr(adjncy), ptr(vw), None, ptr(aw),
        ctypes.byref(nparts), None, ptr(ub), ptr(options), ctypes.byref(objval), ptr(part))
    del xadj, adjncy, vw, aw
    trim_heap()
    if status != 1:
        raise GnnflowError(f"METIS_PartGraphKway failed: {_STATUS.get(status, status)}")
    if part.min() < 0 or part.max() >= num_parts:
        raise GnnflowError("METIS returned an invalid partition (part ids out of range)")
    return part.astype(np.int32), int(objval.value)


def pymetis_kway(indptr: np.ndarray, indices: np.ndarray, num_parts: int,
                 vweights: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """Single-constraint METIS through pymetis (the fallback; balances ``vweights`` only)."""
    import pymetis

    opts = pymetis.Options(seed=seed)
    adjacency = pymetis.CSRAdjacency(np.asarray(indptr), np.asarray(indices))
    _, part = pymetis.part_graph(num_parts, adjacency,
                                 vweights=None if vweights is None else np.asarray(vweights),
                                 options=opts)
    return np.asarray(part, dtype=np.int32)


def metis_partition(store: Any, num_parts: int, seed: int = 0, *,
                    constraints: str | list[str] | None = None, imbalance: float = 1.03,
                    backend: str = "libmetis", edge_weights: np.ndarray | None = None,
                    vertex_weights: np.ndarray | None = None, niter: int = 10, coarsen: str = "auto") -> Any:
    """DistDGLv2 §4.1.3 multi-constraint METIS (default constraints vertices, train, edges).

    ``coarsen``: ``none`` gives the whole graph to METIS; ``lp`` gives METIS the
    graph coarsened by size-constrained label propagation and refines the result
    on every level (:func:`gnnflow.partition.coarsen.lp_metis`: a fraction of
    METIS's memory, edge cut within ~1 % of it on our graphs); ``auto`` (default)
    is ``lp`` from :data:`AUTO_COARSEN_ENTRIES` adjacency entries on, ``none`` below.

    ``backend="pymetis"`` uses pymetis with the FIRST constraint only (DistDGL's
    pre-multi-constraint behaviour); it is also the automatic fallback when libmetis
    cannot be loaded, with a warning that the other constraints are ignored.
    ``vertex_weights`` ([N, ncon]) replaces the named constraints (used by the
    presample methods), ``edge_weights`` gives one weight per CSR entry.
    """
    from gnnflow.partition.assignment import Assignment
    from gnnflow.partition.constraints import constraint_weights, parse_constraints

    names = parse_constraints(constraints)
    if edge_weights is not None and store.meta.directed:
        raise ConfigError("edge weights on a directed store are not supported; homogenize/symmetrize it first")
    if imbalance < 1.0:
        raise ConfigError(f"--imbalance must be >= 1.0, got {imbalance}")
    if backend not in ("libmetis", "pymetis"):
        raise ConfigError(f"metis backend must be libmetis or pymetis, got {backend!r}")
    if coarsen not in COARSEN_MODES:
        raise ConfigError(f"--coarsen must be one of {', '.join(COARSEN_MODES)}, got {coarsen!r}")
    if coarsen == "lp" and backend == "pymetis":
        raise ConfigError("--coarsen lp needs the libmetis backend (multi-constraint METIS on the coarse graph)")
    meta: dict[str, Any] = {"constraints": names, "imbalance_target": imbalance}
    if backend == "libmetis":
        try:
            load_libmetis()
        except MetisUnavailable as exc:
            log.warning("%s -- falling back to pymetis, which balances only the first constraint (%s)",
                        exc, names[0])
            backend = "pymetis"
            meta["fallback"] = f"pymetis single constraint ({names[0]}): {exc}"
    # weights at METIS's idx_t width: no int64 copy beside METIS's own during the call
    width = load_libmetis()[1] if backend == "libmetis" else np.int64
    vw = constraint_weights(store, names, dtype=width) if vertex_weights is None else np.asarray(vertex_weights)
    indptr, indices = metis_graph(store)
    if backend == "libmetis":
        lib, idx = load_libmetis()
        node_part = partition_kway(indptr, indices, num_parts, vw, coarsen=coarsen, meta=meta,
                                   edge_weights=edge_weights, imbalance=imbalance, seed=seed, niter=niter)
        meta.update(library=getattr(lib, "_name", "libmetis"), idx_bits=np.dtype(idx).itemsize * 8,
                    backend="libmetis")
    else:
        if edge_weights is not None:
            raise ConfigError("the pymetis backend does not take edge weights here; use libmetis")
        first = vw.reshape(vw.shape[0], -1)[:, 0]
        node_part = pymetis_kway(indptr, indices, num_parts, vweights=first, seed=seed)
        meta.update(backend="pymetis", balanced_constraint=names[0])
    return Assignment(node_part, meta=meta, constraints=names)


def _coarsen_mode(coarsen: str, entries: int, meta: dict[str, Any]) -> str:
    """``lp`` or ``none`` for ``coarsen`` on a graph of ``entries``; ``auto`` without the
    compiled kernels falls back to ``none`` with a warning (kept in ``meta``)."""
    if coarsen == "none" or (coarsen == "auto" and entries < AUTO_COARSEN_ENTRIES):
        return "none"
    from gnnflow.partition.coarsen import KernelsUnavailable, load_kernels

    try:
        load_kernels()
    except KernelsUnavailable as exc:
        if coarsen == "lp":
            raise ConfigError(str(exc)) from None
        log.warning("%s -- partitioning with plain METIS, which needs several times the graph's memory", exc)
        meta["coarsen_fallback"] = str(exc)
        return "none"
    return "lp"


def partition_kway(indptr: np.ndarray, indices: np.ndarray, num_parts: int, vw: np.ndarray, *,
                   coarsen: str, meta: dict[str, Any], edge_weights: np.ndarray | None = None,
                   imbalance: float = 1.03, seed: int = 0, niter: int = 10) -> np.ndarray:
    """libmetis k-way partition, through label-propagation coarsening or not (``coarsen``).

    Records in ``meta`` the mode used (``coarsen``) and the METIS objective or
    the coarsening levels.
    """
    mode = _coarsen_mode(coarsen, int(indptr[-1]), meta)
    meta["coarsen"] = mode
    if mode == "none":
        node_part, obj = part_graph_kway(indptr, indices, num_parts, vwgt=vw, adjwgt=edge_weights,
                                         ubvec=imbalance, seed=seed, niter=niter)
        meta["metis_objective"] = obj
        return node_part
    from gnnflow.partition.coarsen import CoarsenStats, lp_metis

    stats = CoarsenStats()
    node_part = lp_metis(indptr, indices, num_parts, vw, part_graph_kway, imbalance=imbalance, seed=seed,
                         edge_weights=edge_weights, stats=stats)
    meta["coarsening"] = stats.describe()
    return node_part
