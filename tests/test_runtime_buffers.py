"""gnnflow.runtime.buffers.BufferPool: buffers handed out again only once nothing holds them."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from gnnflow.comm.collectives import exchange_rows_in_rounds
from gnnflow.runtime.buffers import BufferPool


def test_a_buffer_comes_back_only_after_every_holder_let_go():
    pool = BufferPool(3)
    a = pool.take(100, (8,))
    assert a.shape == (100, 8) and a.dtype == torch.float32 and a.is_contiguous()
    ptr = a.data_ptr()
    b = pool.take(100, (8,))  # a is held: another buffer
    assert b.data_ptr() != ptr and pool.made == 2
    view, arr = a[10:20], a.numpy()
    del a
    assert pool.take(50, (8,)).data_ptr() not in (ptr, b.data_ptr())  # a view and an array still hold it
    del view, arr  # the third buffer (taken and dropped above) is free again too, but smaller
    assert pool.take(90, (8,)).data_ptr() == ptr  # the free buffer that fits
    assert pool.made == 3


def test_rows_saved_by_autograd_are_not_reused_before_backward():
    pool = BufferPool(2)
    lin = torch.nn.Linear(4, 3)
    x = pool.take(64, (4,))
    x.normal_()
    ptr = x.data_ptr()
    loss = lin(x[:32]).square().sum()  # the weight's gradient needs x: the graph saves it
    del x
    assert pool.take(64, (4,)).data_ptr() != ptr
    loss.backward()
    del loss  # the graph is gone with it
    assert pool.take(64, (4,)).data_ptr() == ptr


def test_a_full_pool_makes_plain_tensors_and_replaces_a_free_buffer_too_small():
    pool = BufferPool(1, slack=1.0)
    a = pool.take(10, (2,))
    plain = pool.take(10, (2,))  # the only buffer is in use: a plain tensor, not pooled
    assert pool.made == 1 and plain.shape == (10, 2)
    del a, plain
    big = pool.take(40, (2,))  # the free buffer is too small: replaced by a larger one
    assert pool.made == 2 and pool.nbytes == 40 * 2 * 4
    del big
    assert pool.take(25, (2,)).shape == (25, 2) and pool.made == 2
    pool.release()
    assert pool.nbytes == 0
    held = pool.take(5)
    pool.release()  # a buffer in use stays
    assert pool.nbytes == 5 * 4 and held.shape == (5,)
    with pytest.raises(ValueError):
        BufferPool(0)


def test_threads_never_share_a_buffer():
    pool = BufferPool(8)
    got: list[torch.Tensor] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            t = pool.take(1000, (4,))
            with lock:
                got.append(t)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({t.data_ptr() for t in got}) == len(got) == 200  # every tensor held is its own memory
    assert pool.made == 8  # 8 of them pooled, the rest plain


def test_an_exchange_reuses_its_round_buffers_and_moves_the_same_rows():
    rng = np.random.default_rng(0)
    table = torch.from_numpy(rng.standard_normal((500, 6)).astype(np.float32))
    want = None
    pool = BufferPool(2)
    for buffers in (None, pool, pool, pool):
        got = torch.zeros(500, 6)

        def gather(peer: int, lo: int, hi: int, out: torch.Tensor) -> None:
            out.copy_(table[lo:hi])

        def scatter(peer: int, lo: int, hi: int, rows: torch.Tensor, got: torch.Tensor = got) -> None:
            got[lo:hi] = rows

        rounds = exchange_rows_in_rounds(gather, np.array([[500]]), scatter, (6,), 1000, buffers=buffers)
        assert rounds == 12  # 500 rows of 24 bytes in rounds of at most 1,000 bytes
        want = got if want is None else want
        assert torch.equal(got, table) and torch.equal(got, want)
    assert pool.made == 2  # a send and a receive buffer, for every round of three exchanges
