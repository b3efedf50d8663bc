"""The P-round broadcast SpMM (MG-GCN §4.1, §4.3) against a dense product, 1/2/4 ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnflow.runtime.launch import run_ranks
from gnnflow.strategies.fullbatch.row1d import RowPartition, natural_blocks, tile_balance
from gnnflow.strategies.fullbatch.spmm import (
    BroadcastSpMM,
    CsrTile,
    csr_tiles,
    dist_spmm,
    transpose_tiles,
)


def _matrix(n: int = 60, density: float = 0.1, seed: int = 0) -> np.ndarray:
    """A non-symmetric sparse matrix with skewed rows (dense, for the reference)."""
    rng = np.random.default_rng(seed)
    a = (rng.random((n, n)) < density) * rng.random((n, n))
    a[:5] += (rng.random((5, n)) < 0.8) * rng.random((5, n))  # a few heavy rows
    return a.astype(np.float32)


def _rank_engine(a: np.ndarray, node_part: np.ndarray, rank: int, p: int, overlap: bool,
                 skip: tuple[int, ...] = ()) -> tuple[BroadcastSpMM, np.ndarray]:
    rp = RowPartition.from_node_part(node_part, p)
    rows = rp.rows_of(rank)
    sub = a[rows]
    r, c = np.nonzero(sub)
    tiles = csr_tiles(r, rp.node_part[c], rp.local_pos[c], sub[r, c], rows.shape[0], rp.block_rows)
    tiles_t = transpose_tiles(tiles, rp.block_rows, rank)
    return BroadcastSpMM(tiles, tiles_t, rp.block_rows, rank, p, overlap=overlap, skip_rounds=skip), rows


def _spmm_rank(ctx, a, node_part, x, g, skip):
    out = {}
    for overlap in (True, False):
        engine, rows = _rank_engine(a, node_part, ctx.rank, ctx.world_size, overlap, skip)
        xl = torch.from_numpy(x[rows]).requires_grad_(True)
        y = dist_spmm(xl, engine)
        y.backward(torch.from_numpy(g[rows]))
        out[overlap] = (rows, y.detach().numpy(), xl.grad.numpy(), len(engine.records), engine.bytes_received)
    return out


def _run(p: int, skip: tuple[int, ...] = (), permute: bool = True):
    a = _matrix()
    n = a.shape[0]
    rng = np.random.default_rng(1)
    node_part = rng.permutation(natural_blocks(n, p)).astype(np.int32) if permute else natural_blocks(n, p)
    x = rng.standard_normal((n, 7)).astype(np.float32)
    g = rng.standard_normal((n, 7)).astype(np.float32)
    results = run_ranks(_spmm_rank, p, a, node_part, x, g, skip, timeout_s=120)
    per_mode = {}
    for overlap in (True, False):
        y = np.zeros_like(x)
        gx = np.zeros_like(x)
        for res in results:
            rows, yl, gl, _, _ = res[overlap]
            y[rows], gx[rows] = yl, gl
        per_mode[overlap] = (y, gx, [res[overlap] for res in results])
    return a, x, g, per_mode


@pytest.mark.parametrize("p", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_broadcast_spmm_forward_and_transposed_backward_are_exact(p):
    a, x, g, per_mode = _run(p)
    for y, gx, results in per_mode.values():  # overlap on and off
        np.testing.assert_allclose(y, a @ x, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(gx, a.T @ g, rtol=1e-5, atol=1e-5)  # A is not symmetric: Aᵀ tiles are used
        for _, _, _, nrec, nbytes in results:
            assert nrec == 2 * p  # P rounds forward, P rounds backward
            if p > 1:
                assert nbytes > 0


def test_skipping_a_round_is_detected():
    a, x, g, per_mode = _run(2, skip=(1,))
    for y, _, _ in per_mode.values():
        assert np.abs(y - a @ x).max() > 1e-2


def test_csr_tile_kernel_and_torch_fallback_agree(monkeypatch):
    import gnnflow.strategies.fullbatch.spmm as spmm

    a = _matrix(40)
    r, c = np.nonzero(a)
    (tile,) = csr_tiles(r, np.zeros_like(c), c, a[r, c], 40, [40])
    x = torch.randn(40, 5)
    out = torch.full((40, 5), 2.0)
    tile.mm_into(x, out, accumulate=True)
    np.testing.assert_allclose(out.numpy(), a @ x.numpy() + 2.0, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(spmm, "cpu_kernel", lambda: None)
    out2 = torch.empty(40, 5)
    CsrTile(tile.indptr, tile.indices, tile.values, 40, 40).mm_into(x, out2, accumulate=False)
    np.testing.assert_allclose(out2.numpy(), a @ x.numpy(), rtol=1e-5, atol=1e-5)


def test_permutation_balances_tiles_of_a_skewed_matrix():
    a = _matrix(400, density=0.01)
    a[:40] = (np.random.default_rng(2).random((40, 400)) < 0.5)  # heavy rows all in the first block
    r, c = np.nonzero(a)
    p = 4
    tables = {}
    for name, part in (("natural", natural_blocks(400, p)),
                       ("permuted", np.random.default_rng(0).permutation(natural_blocks(400, p)))):
        t = np.zeros((p, p))
        np.add.at(t, (part[r], part[c]), 1)
        tables[name] = tile_balance(t)["tile_nnz_max_over_avg"]
    assert tables["permuted"] < tables["natural"]


def test_kernel_cache_is_keyed_by_the_cpu(monkeypatch, tmp_path):
    """A kernel cache shared by hosts of different CPUs (a shared home) holds one library per
    CPU: the key includes the model name and feature flags (issue 20)."""
    import shutil

    from gnnflow.strategies.fullbatch import spmm

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    sig = spmm.cpu_signature()
    from pathlib import Path

    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    assert model in sig and ("flags" not in cpuinfo or "sse2" in sig or "avx" in sig or "fpu" in sig)
    monkeypatch.setenv("GNNFLOW_KERNEL_CACHE", str(tmp_path))
    libs = []
    for other in (None, "another cpu | fpu"):
        monkeypatch.setattr(spmm, "_kernel", None)
        monkeypatch.setattr(spmm, "_kernel_tried", False)
        if other is not None:  # what a host with another CPU computes for itself
            monkeypatch.setattr(spmm, "cpu_signature", lambda other=other: other)
        assert spmm.cpu_kernel() is not None
        libs.append(sorted(p.name for p in tmp_path.glob("spmm_*.so")))
    assert len(libs[0]) == 1 and len(libs[1]) == 2, libs
