"""Edge lists to the store's CSR (rows = destinations, entries = in-neighbours).

Every source (synthetic, OGB, Planetoid, SNAP, import) ends in :func:`build_csr`,
so all stores agree on the conventions: optional symmetrization (an undirected
graph stores each edge in both directions), no self-loops, no duplicate edges,
and neighbour lists sorted by source id within each row.

The work is done on one int64 key per edge (``dst * N + src``) sorted in place,
which keeps the peak memory near three int64 arrays of the edge count.
"""

from __future__ import annotations

import numpy as np

from gnnflow.errors import GnnflowError
from gnnflow.io import release_pages

# Keys dst*N+src must fit in int64.
MAX_NODES = 3_000_000_000


def check_edge_ids(src: np.ndarray, dst: np.ndarray, num_nodes: int, what: str) -> None:
    """Raise a GnnflowError naming ``what`` if an endpoint is outside [0, num_nodes)."""
    for name, arr in (("source", src), ("destination", dst)):
        if arr.size == 0:
            continue
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= num_nodes:
            bad = lo if lo < 0 else hi
            raise GnnflowError(
                f"{what}: {name} vertex id {bad} is out of range [0, {num_nodes}); "
                "fix the edge list or the node count"
            )


def edge_keys(src: np.ndarray, dst: np.ndarray, num_nodes: int, symmetrize: bool) -> np.ndarray:
    """One int64 key ``dst * N + src`` per edge (both directions when ``symmetrize``)."""
    if num_nodes > MAX_NODES:
        raise GnnflowError(f"{num_nodes} vertices is more than gnnflow supports ({MAX_NODES})")
    n = np.int64(num_nodes)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    m = src.shape[0]
    keys = np.empty(2 * m if symmetrize else m, dtype=np.int64)
    np.multiply(dst, n, out=keys[:m])
    keys[:m] += src
    if symmetrize:
        np.multiply(src, n, out=keys[m:])
        keys[m:] += dst
    return keys


def csr_from_keys(
    keys: np.ndarray, num_nodes: int, drop_self_loops: bool = True, dedup: bool = True,
    presorted: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``keys`` in place (unless ``presorted``) and return ``(indptr, indices)``.

    ``keys`` is consumed (sorted and possibly compacted).
    """
    n = np.int64(num_nodes)
    if not presorted:
        keys.sort()
    if keys.size:
        keep = None
        if dedup:
            keep = np.empty(keys.shape[0], dtype=bool)
            keep[0] = True
            np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        if drop_self_loops:
            loops = (keys // n) == (keys % n)
            keep = ~loops if keep is None else keep & ~loops
            del loops
        if keep is not None and not keep.all():
            keys = keys[keep]
        del keep
    counts = np.zeros(num_nodes, dtype=np.int64)
    # Chunked so that no second full-size temporary is needed.
    step = 1 << 24
    for start in range(0, keys.shape[0], step):
        counts += np.bincount(keys[start : start + step] // n, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(keys.shape[0], dtype=np.int64)
    for start in range(0, keys.shape[0], step):
        np.remainder(keys[start : start + step], n, out=indices[start : start + step])
    return indptr, indices


def build_csr(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    *,
    symmetrize: bool,
    drop_self_loops: bool = True,
    dedup: bool = True,
    what: str = "edge list",
) -> tuple[np.ndarray, np.ndarray]:
    """CSR over destinations from edges ``src[i] -> dst[i]``.

    Returns ``(indptr int64 [N+1], indices int64 [M])`` with
    ``indices[indptr[v]:indptr[v+1]]`` the sorted in-neighbours of ``v``.
    """
    check_edge_ids(src, dst, num_nodes, what)
    keys = edge_keys(src, dst, num_nodes, symmetrize)
    return csr_from_keys(keys, num_nodes, drop_self_loops=drop_self_loops, dedup=dedup)


def csr_to_coo(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of every stored edge, in CSR order."""
    n = indptr.shape[0] - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return np.asarray(indices, dtype=np.int64), dst


def is_symmetric(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """True when every stored edge u->v has its reverse v->u (duplicates ignored)."""
    n = indptr.shape[0] - 1
    src, dst = csr_to_coo(indptr, indices)
    fwd = np.unique(dst * np.int64(n) + src)
    rev = np.unique(src * np.int64(n) + dst)
    return fwd.shape == rev.shape and bool(np.array_equal(fwd, rev))


def with_self_loops(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of A + I: vertex v appended to its own in-neighbour list (``indices`` keep their dtype)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    n = indptr.shape[0] - 1
    new_ptr = indptr + np.arange(n + 1, dtype=np.int64)
    out = np.empty(int(new_ptr[-1]), dtype=indices.dtype)
    is_loop = np.zeros(out.shape[0], dtype=bool)
    is_loop[new_ptr[1:] - 1] = True
    out[~is_loop] = indices
    out[is_loop] = np.arange(n, dtype=indices.dtype)
    return new_ptr, out


def gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray,
                chunk: int = 1 << 14) -> tuple[np.ndarray, np.ndarray]:
    """Sub-CSR of ``rows``: ``(sub_indptr, neighbour global ids)``, vectorized.

    Gathered ``chunk`` rows at a time, dropping the pages of a memory-mapped
    ``indices`` after each chunk: resident memory is the output plus one chunk.
    """
    rows = np.asarray(rows, dtype=np.int64)
    starts = np.asarray(indptr[rows], dtype=np.int64)
    lengths = np.asarray(indptr[rows + 1], dtype=np.int64) - starts
    sub_indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=sub_indptr[1:])
    out = np.empty(int(sub_indptr[-1]), dtype=np.int64)
    for s in range(0, rows.shape[0], chunk):
        e = min(rows.shape[0], s + chunk)
        lo, hi = int(sub_indptr[s]), int(sub_indptr[e])
        if hi == lo:
            continue
        # position -> source offset: arange + (start - sub_indptr) repeated per row
        offs = np.repeat(starts[s:e] - sub_indptr[s:e], lengths[s:e])
        offs += np.arange(lo, hi, dtype=np.int64)
        out[lo:hi] = indices[offs]
        release_pages(indices)
    return sub_indptr, out
