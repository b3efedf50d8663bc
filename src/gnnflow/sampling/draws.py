"""Partition-invariant neighbour draws: a sample is a pure function of (seed, epoch, batch, layer, vertex[, relation]).

A sampler that draws from one random stream per rank (or per process) picks
different neighbours for the same vertex depending on which rank samples it,
in which order, and what else the rank sampled before.  Data-parallel ranks,
split parallelism's cooperative sampler and the single-process sampler would
then train on different samples of the same mini-batch, and only full
neighbourhoods could be checked for equivalence.

Here every draw is counter-based: the ``k`` neighbours of destination ``v`` at
layer ``l`` of batch ``b`` of epoch ``e`` are chosen with Robert Floyd's
algorithm from the ``k`` uniforms

    u_i = U(mix(row_key(seed, e, b, l) ^ mix(v)) + i * GOLDEN),   i = 0 .. k-1

where ``mix`` is the SplitMix64 finaliser (a bijection of 64-bit words with full
avalanche) and ``U`` takes the top 53 bits as a double in [0, 1).  Nothing else
enters: not the rank, not the partition, not the other vertices of the batch.
Whoever samples ``v`` (its owner in a partitioned graph, a split's owner, the
single process) draws the same neighbours, provided ``v``'s in-edges are stored
in the same order — which the partition book keeps (a part's rows are gathered
from the store's CSR in order).  Like Philox-style counter generators, the
draws are as uniform as the mixing function; SplitMix64 passes BigCrush as a
generator of this form.

Typed sampling (:mod:`gnnflow.sampling.typed`) draws each relation ``r`` of ``v``
separately, from the base ``mix(row_hash(v) ^ mix(r * GOLDEN + REL))``
(:meth:`DrawKey.relation_hashes`): the key gains the relation and nothing else,
so the draws of ``(v, r)`` stay the same whoever samples ``v``, and the
untyped draws are untouched.

Floyd's choice, and a whole hop's edge positions, run in C where the package was
built with a compiler (``_drawkernels.c``, called through ctypes; the numpy form,
kept as the reference and the fallback, draws the same positions: a test compares
them).
``GNNFLOW_NUMPY_DRAWS=1`` takes the numpy form.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

_MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_TO_UNIT = 1.0 / float(1 << 53)
_REL = 0xD1B54A32D192ED03  # keeps relation 0's words apart from the untyped row hashes


def mix_scalar(x: int) -> int:
    """SplitMix64's finaliser on one Python int (mod 2**64)."""
    x &= _MASK
    x = ((x ^ (x >> 30)) * _M1) & _MASK
    x = ((x ^ (x >> 27)) * _M2) & _MASK
    return x ^ (x >> 31)


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on a uint64 array (a new array)."""
    z = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(_M1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(_M2)
        z ^= z >> np.uint64(31)
    return z


@dataclass(frozen=True)
class DrawKey:
    """Which batch a draw belongs to: ``(seed, epoch, batch)``; :meth:`layer` adds the layer."""

    seed: int
    epoch: int = 0
    batch: int = 0

    def layer(self, layer: int) -> int:
        """The 64-bit key of one layer of this batch."""
        h = mix_scalar(int(self.seed) + GOLDEN)
        for part in (self.epoch, self.batch, layer):
            h = mix_scalar(h ^ ((int(part) * GOLDEN + 0x632BE59BD9B4E019) & _MASK))
        return h

    def row_hashes(self, layer: int, vertex_ids: np.ndarray) -> np.ndarray:
        """One 64-bit word per destination vertex (global id): the base of its draws."""
        v = np.asarray(vertex_ids, dtype=np.int64).astype(np.uint64)
        with np.errstate(over="ignore"):
            return mix(mix(v + np.uint64(GOLDEN)) ^ np.uint64(self.layer(layer)))

    def relation_hashes(self, layer: int, vertex_ids: np.ndarray, relations: np.ndarray) -> np.ndarray:
        """One 64-bit word per (destination, relation) pair: the base of the draws of relation
        ``relations[i]`` of vertex ``vertex_ids[i]`` (global id)."""
        r = np.asarray(relations, dtype=np.int64).astype(np.uint64)
        with np.errstate(over="ignore"):
            return mix(self.row_hashes(layer, vertex_ids) ^ mix(r * np.uint64(GOLDEN) + np.uint64(_REL)))


def uniforms(row_hash: np.ndarray, i: int) -> np.ndarray:
    """The ``i``-th uniform in [0, 1) of every row."""
    with np.errstate(over="ignore"):
        z = mix(row_hash + np.uint64((i + 1) * GOLDEN & _MASK))
    return (z >> np.uint64(11)).astype(np.float64) * _TO_UNIT


_kernels: dict[str, Any] | None = None  # the C forms by name, once loaded (empty: not built)
_SIGNATURES = {"gf_floyd_choose": [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3,
               "gf_sample_positions": [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 3 + [ctypes.c_uint64, ctypes.c_void_p]}


def _c_kernel(name: str) -> Any:
    """Kernel ``name`` of the compiled ``_drawkernels.c``, or None (not built, built before the
    kernel was added, or GNNFLOW_NUMPY_DRAWS)."""
    global _kernels
    if os.environ.get("GNNFLOW_NUMPY_DRAWS"):
        return None
    if _kernels is None:
        _kernels = {}
        try:
            from gnnflow.sampling import _drawkernels  # type: ignore[attr-defined]

            lib = ctypes.CDLL(_drawkernels.__file__)
        except (ImportError, OSError):
            return None
        for fname, argtypes in _SIGNATURES.items():
            fn = getattr(lib, fname, None)
            if fn is not None:
                fn.restype, fn.argtypes = None, argtypes
                _kernels[fname] = fn
    return _kernels.get(name)


def _c_floyd() -> Any:
    """``gf_floyd_choose`` of the compiled kernels, or None (not built, or GNNFLOW_NUMPY_DRAWS)."""
    return _c_kernel("gf_floyd_choose")


def sample_positions_c(starts: np.ndarray, deg: np.ndarray, k: int, vertex_ids: np.ndarray,
                       layer_key: int, edges: int) -> np.ndarray | None:
    """One hop's ``edges`` (the sum of ``min(deg, k)``) sampled edge positions by the compiled
    kernel (``gf_sample_positions``): each row all of its ``deg`` edges from ``starts``, or
    (``deg > k``) Floyd's sorted choice of ``k`` from its :meth:`DrawKey.row_hashes` word; None
    where the kernel is not built."""
    fn = _c_kernel("gf_sample_positions")
    if fn is None or k < 0:
        return None
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    deg = np.ascontiguousarray(deg, dtype=np.int64)
    ids = np.ascontiguousarray(vertex_ids, dtype=np.int64)
    if not starts.shape == deg.shape == ids.shape:
        raise ValueError(f"sample_positions_c: {starts.shape} starts, {deg.shape} degrees, {ids.shape} ids")
    eid = np.empty(int(edges), dtype=np.int64)
    fn(deg.shape[0], k, starts.ctypes.data, deg.ctypes.data, ids.ctypes.data, ctypes.c_uint64(int(layer_key)),
       eid.ctypes.data)
    return eid


def floyd_choose(deg: np.ndarray, k: int, row_hash: np.ndarray) -> np.ndarray:
    """``[R, k]`` sorted distinct positions in ``[0, deg_r)`` per row (``deg_r >= k``),
    uniform over k-subsets.

    Floyd's algorithm: for ``j = d-k .. d-1`` draw ``t`` uniform in ``[0, j]``; take ``t``
    unless already taken, else take ``j``.  The ``i``-th draw of row ``r`` is
    ``uniforms(row_hash, i)[r]``, so a row's choice depends only on its hash, degree and k.
    In C where built (the module docstring), else :func:`floyd_choose_numpy`.
    """
    fn = _c_floyd()
    if fn is None or k <= 0:
        return floyd_choose_numpy(deg, k, row_hash)
    d = np.ascontiguousarray(deg, dtype=np.int64)
    h = np.ascontiguousarray(row_hash, dtype=np.uint64)
    chosen = np.empty((d.shape[0], k), dtype=np.int64)
    fn(d.shape[0], k, d.ctypes.data, h.ctypes.data, chosen.ctypes.data)
    return chosen


def floyd_choose_numpy(deg: np.ndarray, k: int, row_hash: np.ndarray) -> np.ndarray:
    """:func:`floyd_choose` in numpy (the reference form)."""
    rows = deg.shape[0]
    chosen = np.empty((rows, k), dtype=np.int64)
    base = deg - k
    for i in range(k):
        j = base + i
        t = (uniforms(row_hash, i) * (j + 1)).astype(np.int64)
        np.minimum(t, j, out=t)
        if i:
            dup = (chosen[:, :i] == t[:, None]).any(axis=1)
            t[dup] = j[dup]
        chosen[:, i] = t
    chosen.sort(axis=1)
    return chosen
