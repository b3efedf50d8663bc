"""1D row-partitioned multi-round broadcast SpMM (MG-GCN §4.1, §4.3, Fig. 2-3).

The vertices are split into P row blocks (after a random permutation, §5.2).
Rank ``i`` holds ``H^i`` (its rows of the dense matrix) and its row block of the
sparse matrix, cut by column blocks into P CSR tiles ``A^{ij}``.  One SpMM
``C = A H`` takes P rounds::

    round j:  rank j broadcasts H^j;  every rank i:  C^i += A^{ij} H^j

The backward pass needs ``A^T G``.  Rank ``j`` holds the transposed tiles
``T^{ji} = (A^{ij})^T`` (built once by an all-to-all of ``A^{ij}``'s entries,
:func:`transpose_tiles`), and runs the same P-round scheme with them: in round
``i`` rank ``i`` broadcasts ``G^i`` and rank ``j`` accumulates
``T^{ji} G^i``.  The gradient is therefore exact for any matrix; when ``A`` is
symmetric (an undirected graph with the symmetric normalisation) ``T^{ji} =
A^{ji}`` and the forward tiles are reused, which is the case MG-GCN §4 states
("the same operations are performed with the non-transposed ... matrix").

Overlap (§4.3): with ``overlap=True`` the broadcast of round ``j+1`` is issued
asynchronously (``async_op=True``) before the SpMM of round ``j`` runs, into
the second of two receive buffers (double buffering); round ``j+1``'s
broadcast may only overwrite the buffer round ``j-1`` used, which is finished
by then.  ``overlap=False`` runs broadcast and SpMM in sequence.  The two
receive buffers belong to the :class:`BroadcastSpMM` engine and are shared by
every layer and by the forward and backward passes (§4.2).

Every call records, per round, the communication time (the blocking
broadcast, or the wait for the asynchronous one), the computation time, the
tile's nonzeros and time stamps, so the timelines of Fig. 6/8 and the load
balance of Fig. 7 can be drawn.

The CPU kernel is a small OpenMP CSR SpMM compiled on first use
(:func:`cpu_kernel`), with ``torch.sparse`` CSR ``addmm_`` as the fallback
and the CUDA path.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.comm.collectives import alltoallv, broadcast
from gnnflow.runtime.devices import COMPUTE, HOST

log = logging.getLogger("gnnflow.spmm")

# ----------------------------------------------------------------------------------------------
# CPU kernel
# ----------------------------------------------------------------------------------------------

_KERNEL_SRC = r"""
#include <stdint.h>
#include <string.h>
/* Y[r,:] (+)= sum_e val[e] * X[indices[e], :] over the CSR row r; rows in parallel.
   The rows of X that edge e+PF will read are prefetched (random gathers are latency bound). */
#define PF 8
void gnnflow_spmm_f32(int64_t nrows, const int64_t* indptr, const int32_t* indices, const float* val,
                      const float* X, int64_t ldx, float* Y, int64_t ldy, int64_t d,
                      int accumulate, int nthreads) {
  const int64_t nnz = indptr[nrows];
  const int64_t row_bytes = d * (int64_t)sizeof(float);
  #pragma omp parallel for schedule(dynamic, 256) num_threads(nthreads)
  for (int64_t r = 0; r < nrows; ++r) {
    float* restrict y = Y + r * ldy;
    if (!accumulate) memset(y, 0, sizeof(float) * (size_t)d);
    const int64_t end = indptr[r + 1];
    for (int64_t e = indptr[r]; e < end; ++e) {
      if (e + PF < nnz) {
        const char* p = (const char*)(X + (int64_t)indices[e + PF] * ldx);
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
      }
      const float w = val[e];
      const float* restrict x = X + (int64_t)indices[e] * ldx;
      for (int64_t k = 0; k < d; ++k) y[k] += w * x[k];
    }
  }
}
"""

_kernel: Any = None
_kernel_tried = False


def _cache_dir() -> Path:
    base = os.environ.get("GNNFLOW_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "gnnflow", "kernels"
    )
    return Path(base)


def cpu_signature() -> str:
    """The CPU model name and feature flags of this host (``/proc/cpuinfo``'s first processor;
    the machine name elsewhere): what ``-march=native`` code depends on."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return platform.machine()
    first = text.split("\n\n", 1)[0]
    keep = [line.split(":", 1)[1].strip() for line in first.splitlines()
            if line.split(":", 1)[0].strip() in ("model name", "flags", "Features", "CPU part")]
    return " | ".join(keep)


def cpu_kernel() -> Any:
    """The compiled CSR SpMM (ctypes function) or None when no C compiler works.

    Built once per source version and CPU (model name and feature flags,
    :func:`cpu_signature`: the kernel is built with ``-march=native``, so a home
    directory shared by hosts of different CPUs holds one library per CPU and no
    host loads one that would die with SIGILL) into ``$GNNFLOW_KERNEL_CACHE``
    (default ``~/.cache/gnnflow/kernels``); written to a temporary name and renamed, so
    concurrent ranks never load a half-written library.  ``GNNFLOW_NO_KERNEL=1``
    forces the ``torch.sparse`` fallback.
    """
    global _kernel, _kernel_tried
    if _kernel_tried:
        return _kernel
    _kernel_tried = True
    if os.environ.get("GNNFLOW_NO_KERNEL"):
        return None
    cc = os.environ.get("CC", "cc")
    flags = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c99"]
    key = hashlib.sha256((_KERNEL_SRC + cc + " ".join(flags) + cpu_signature()).encode()).hexdigest()[:16]
    lib_path = _cache_dir() / f"spmm_{key}.so"
    try:
        if not lib_path.exists():
            lib_path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=lib_path.parent) as tmp:
                src = Path(tmp) / "spmm.c"
                src.write_text(_KERNEL_SRC)
                out = Path(tmp) / "spmm.so"
                subprocess.run([cc, *flags, str(src), "-o", str(out)], check=True, capture_output=True, timeout=120)
                os.replace(out, lib_path)
        lib = ctypes.CDLL(str(lib_path))
        fn = lib.gnnflow_spmm_f32
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        fn.argtypes = [i64, vp, vp, vp, vp, i64, vp, i64, i64, ctypes.c_int, ctypes.c_int]
        fn.restype = None
        _kernel = fn
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("CSR SpMM kernel unavailable (%s); using torch.sparse", exc)
        _kernel = None
    return _kernel


# ----------------------------------------------------------------------------------------------
# Tiles
# ----------------------------------------------------------------------------------------------


@dataclass
class CsrTile:
    """One tile ``A^{ij}``: CSR over ``num_rows`` local rows, columns local to block ``j``."""

    indptr: torch.Tensor  # int64 [num_rows + 1]
    indices: torch.Tensor  # int32 [nnz]
    values: torch.Tensor  # float32 [nnz]
    num_rows: int
    num_cols: int
    _sparse: torch.Tensor | None = field(default=None, repr=False)

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.indptr, self.indices, self.values))

    def to(self, device: torch.device) -> CsrTile:
        if self.indptr.device == device:
            return self
        return CsrTile(self.indptr.to(device), self.indices.to(device), self.values.to(device),
                       self.num_rows, self.num_cols)

    def sparse(self) -> torch.Tensor:
        if self._sparse is None:
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                self._sparse = self._make_sparse()
        return self._sparse

    def _make_sparse(self) -> torch.Tensor:
        return torch.sparse_csr_tensor(
            self.indptr, self.indices.long(), self.values, size=(self.num_rows, self.num_cols),
            check_invariants=False,
        )

    def mm_into(self, x: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
        """``out (+)= self @ x``; ``x`` is ``[num_cols, d]`` and ``out`` ``[num_rows, d]``, row-major."""
        d = x.shape[1]
        if self.num_rows == 0:
            return
        kernel = cpu_kernel() if out.device.type == "cpu" else None
        if kernel is not None and x.stride(1) == 1 and out.stride(1) == 1 and x.dtype == torch.float32:
            kernel(self.num_rows, self.indptr.data_ptr(), self.indices.data_ptr(), self.values.data_ptr(),
                   x.data_ptr(), x.stride(0), out.data_ptr(), out.stride(0), d, int(accumulate),
                   torch.get_num_threads())
            return
        if not accumulate:
            out.zero_()
        if self.nnz:
            out.addmm_(self.sparse(), x)


def csr_tiles(row: np.ndarray, col_block: np.ndarray, col_local: np.ndarray, values: np.ndarray,
              num_rows: int, block_rows: list[int]) -> list[CsrTile]:
    """Cut one row block, given as entries (local row, column block, column local to that block,
    value), into ``len(block_rows)`` CSR tiles ``A^{ij}`` by column block."""
    row = np.asarray(row, dtype=np.int64)
    col_block = np.asarray(col_block, dtype=np.int64)
    col_local = np.asarray(col_local, dtype=np.int64)
    order = np.lexsort((col_local, row, col_block))
    col_block, row, col_local, values = col_block[order], row[order], col_local[order], values[order]
    bounds = np.searchsorted(col_block, np.arange(len(block_rows) + 1))
    tiles = []
    for j, nc in enumerate(block_rows):
        s, e = int(bounds[j]), int(bounds[j + 1])
        tile_ptr = np.zeros(num_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(row[s:e], minlength=num_rows), out=tile_ptr[1:])
        tiles.append(CsrTile(torch.from_numpy(tile_ptr),
                             torch.from_numpy(np.ascontiguousarray(col_local[s:e], dtype=np.int32)),
                             torch.from_numpy(np.ascontiguousarray(values[s:e], dtype=np.float32)),
                             num_rows, int(nc)))
    return tiles


def tile_entries(tile: CsrTile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, column, value) of every entry of ``tile``."""
    ptr = tile.indptr.cpu().numpy()
    row = np.repeat(np.arange(tile.num_rows, dtype=np.int64), np.diff(ptr))
    return row, tile.indices.cpu().numpy().astype(np.int64), tile.values.cpu().numpy()


def transpose_tiles(tiles: list[CsrTile], block_rows: list[int], rank: int) -> list[CsrTile]:
    """Tiles ``T^{rank,i} = (A^{i,rank})^T`` from every rank's ``A^{i,rank}`` (one all-to-all).

    Rank ``i`` sends tile ``A^{ij}``'s entries (column, row, value) to rank ``j``;
    rank ``j`` builds CSR tiles over its own rows (the columns it received).
    """
    send_idx, send_val = [], []
    for t in tiles:
        row, col, val = tile_entries(t)
        send_idx.append(torch.from_numpy(np.stack([col, row], 1)))
        send_val.append(torch.from_numpy(val))
    recv_idx = alltoallv(send_idx, kind=HOST)  # setup: over the host
    recv_val = alltoallv(send_val, recv_counts=[int(r.shape[0]) for r in recv_idx], kind=HOST)
    new_row = np.concatenate([r[:, 0].numpy() for r in recv_idx])
    new_col = np.concatenate([r[:, 1].numpy() for r in recv_idx])
    new_block = np.concatenate([np.full(r.shape[0], i, dtype=np.int64) for i, r in enumerate(recv_idx)])
    vals = np.concatenate([v.numpy() for v in recv_val])
    return csr_tiles(new_row, new_block, new_col, vals, block_rows[rank], block_rows)


# ----------------------------------------------------------------------------------------------
# The multi-round engine
# ----------------------------------------------------------------------------------------------


@dataclass
class RoundRecord:
    """One round of one SpMM call on this rank (times relative to ``BroadcastSpMM.t0``)."""

    call: int
    op: str  # "forward" | "backward"
    round: int
    width: int
    nnz: int
    comm_s: float
    compute_s: float
    comm_start: float
    comm_end: float
    compute_start: float
    compute_end: float


class BroadcastSpMM:
    """P-round broadcast SpMM on one rank, forward tiles ``A^{i*}`` and transposed tiles ``T^{i*}``.

    ``skip_rounds`` drops the computation of the named rounds (the broadcasts
    still run, so no rank hangs); it exists only so tests can prove that an
    incomplete SpMM is detected.
    """

    def __init__(self, tiles: list[CsrTile], tiles_t: list[CsrTile] | None, block_rows: list[int],
                 rank: int, world_size: int, overlap: bool = True, device: torch.device | None = None,
                 skip_rounds: tuple[int, ...] = ()) -> None:
        self.device = device or torch.device("cpu")
        self.tiles = [t.to(self.device) for t in tiles]
        self.tiles_t = self.tiles if tiles_t is None else [t.to(self.device) for t in tiles_t]
        self.block_rows = list(block_rows)
        self.rank, self.world_size = rank, world_size
        self.overlap = overlap
        self.skip_rounds = set(skip_rounds)
        self._recv: list[torch.Tensor] = []
        self.records: list[RoundRecord] = []
        self.calls = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.t0 = time.perf_counter()

    @property
    def num_rows(self) -> int:
        return self.block_rows[self.rank]

    @property
    def symmetric(self) -> bool:
        return self.tiles_t is self.tiles

    def tile_nnz(self) -> list[int]:
        return [t.nnz for t in self.tiles]

    def buffer_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._recv)

    def reset_records(self) -> None:
        self.records.clear()
        self.bytes_sent = self.bytes_received = 0
        self.t0 = time.perf_counter()

    def _recv_buffer(self, k: int, rows: int, width: int, like: torch.Tensor) -> torch.Tensor:
        """View ``[rows, width]`` of receive buffer ``k`` (0 or 1).

        A buffer is allocated on first use and grows to the largest use; with
        P = 2 each rank only ever receives into one of the two.
        """
        need = max(self.block_rows) * width
        while len(self._recv) <= k:
            self._recv.append(torch.empty(0, dtype=like.dtype, device=like.device))
        if self._recv[k].numel() < need:
            self._recv[k] = torch.empty(need, dtype=like.dtype, device=like.device)
        return self._recv[k][: rows * width].view(rows, width)

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, transpose: bool = False) -> torch.Tensor:
        """``out = A x`` (or ``A^T x``) for this rank's rows; ``x`` holds this rank's rows."""
        x = x.contiguous()
        width = x.shape[1]
        if out is None:
            out = torch.empty((self.num_rows, width), dtype=x.dtype, device=x.device)
        tiles = self.tiles_t if transpose else self.tiles
        op = "backward" if transpose else "forward"
        self.calls += 1
        p, rank = self.world_size, self.rank
        first = True

        def operand(j: int) -> torch.Tensor:
            return x if j == rank else self._recv_buffer(j % 2, self.block_rows[j], width, x)

        def start(j: int) -> Any:
            return broadcast(operand(j), j, COMPUTE, async_op=True)

        def count_bytes(j: int) -> None:
            nbytes = self.block_rows[j] * width * x.element_size()
            if j == rank:
                self.bytes_sent += nbytes * (p - 1)
            else:
                self.bytes_received += nbytes

        handle = start(0) if (p > 1 and self.overlap) else None
        issued = time.perf_counter()
        for j in range(p):
            c0 = issued if self.overlap else time.perf_counter()
            if p > 1:
                w0 = time.perf_counter()
                if self.overlap:
                    handle.wait()
                else:
                    c0 = w0
                    broadcast(operand(j), j, COMPUTE)
                c1 = time.perf_counter()
                comm_s = c1 - w0
                count_bytes(j)
                if self.overlap and j + 1 < p:
                    handle = start(j + 1)
                    issued = time.perf_counter()
            else:
                c1 = c0
                comm_s = 0.0
            k0 = time.perf_counter()
            if j not in self.skip_rounds:
                tiles[j].mm_into(operand(j), out, accumulate=not first)
                first = False
            k1 = time.perf_counter()
            self.records.append(RoundRecord(self.calls, op, j, width, tiles[j].nnz, comm_s, k1 - k0,
                                            c0 - self.t0, c1 - self.t0, k0 - self.t0, k1 - self.t0))
        if first:  # every round skipped
            out.zero_()
        return out

    def summary(self) -> dict[str, float]:
        """Totals over the recorded rounds: comm and compute seconds, per-round sums."""
        out: dict[str, float] = {
            "spmm_comm_s": sum(r.comm_s for r in self.records),
            "spmm_compute_s": sum(r.compute_s for r in self.records),
            "spmm_calls": float(len({r.call for r in self.records})),
        }
        for j in range(self.world_size):
            out[f"round{j}_comm_s"] = sum(r.comm_s for r in self.records if r.round == j)
            out[f"round{j}_compute_s"] = sum(r.compute_s for r in self.records if r.round == j)
        return out


class _DistSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, engine: BroadcastSpMM) -> torch.Tensor:  # type: ignore[override]
        ctx.engine = engine
        return engine(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        if not ctx.needs_input_grad[0]:
            return None, None
        return ctx.engine(grad, transpose=True), None


def dist_spmm(x: torch.Tensor, engine: BroadcastSpMM) -> torch.Tensor:
    """Differentiable ``A x`` over the row partition; backward is ``A^T g`` by the same rounds.

    When ``x`` needs no gradient (the input features, MG-GCN §4.4) the
    backward SpMM is skipped.
    """
    return _DistSpMM.apply(x, engine)
