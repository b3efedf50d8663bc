"""Same-host all-to-all over Unix sockets (gnnflow.comm.local) against gloo's."""

from __future__ import annotations

import os
import socket
import struct
import threading

import pytest
import torch

from gnnflow.comm import collectives, local
from gnnflow.comm.collectives import all_to_all_single, world
from gnnflow.errors import DistributedError
from gnnflow.runtime.launch import run_ranks


def _exchanges(ctx):
    """Uneven, empty and large exchanges of several dtypes; the results and whether the group's
    exchanges went over the local mesh."""
    rank, size = world()
    g = torch.Generator().manual_seed(rank)
    out = []
    # rows of 3 float32 columns: rank r sends (r + p) % 3 rows to rank p (some empty)
    send_rows = [(rank + p) % 3 for p in range(size)]
    recv_rows = [(q + rank) % 3 for q in range(size)]
    send = torch.randn(sum(send_rows), 3, generator=g)
    recv = torch.empty(sum(recv_rows), 3)
    all_to_all_single(recv, send, "host", output_split_sizes=recv_rows, input_split_sizes=send_rows)
    out.append(recv)
    for dtype in (torch.int64, torch.bool, torch.float16):  # equal splits, 1-D
        send = (torch.arange(4 * size) + 100 * rank).to(dtype)
        recv = torch.empty(4 * size, dtype=dtype)
        all_to_all_single(recv, send, "host")
        out.append(recv)
    # 6 MiB to every peer at once: more than a socket buffer in both directions
    big = torch.full((size, 1 << 19, 3), float(rank))
    recv = torch.empty_like(big)
    work = all_to_all_single(recv.view(-1, 3), big.view(-1, 3), "host", async_op=True)
    work.wait()
    out.append(recv[:, :2, 0].clone())
    mesh = collectives._meshes.get(torch.distributed.group.WORLD)
    return out, mesh is not None


@pytest.fixture(scope="module")
def gloo_results():
    os.environ[local.ENV] = "0"
    try:
        return run_ranks(_exchanges, 3, timeout_s=120)
    finally:
        del os.environ[local.ENV]


def test_local_transport_moves_what_gloo_moves(gloo_results):
    mine = run_ranks(_exchanges, 3, timeout_s=120)
    for (got, used_mesh), (want, used_gloo_mesh) in zip(mine, gloo_results, strict=True):
        assert used_mesh and not used_gloo_mesh
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)
    # and the values are the exchange's: rank r got rank q's (q + r) % 3 rows of floats, and q's block r
    for rank, (got, _) in enumerate(mine):
        assert got[1].tolist() == [4 * rank + i + 100 * q for q in range(3) for i in range(4)]
        assert got[4].tolist() == [[float(q)] * 2 for q in range(3)]


def _disagree(ctx):
    rank, _ = world()
    send = torch.zeros(3, dtype=torch.int64)
    recv = torch.empty(3 if rank == 0 else 2, dtype=torch.int64)
    # (input splits, output splits): rank 0 sends rank 1 two rows where rank 1 expects one
    splits = {0: ([1, 2], [1, 2]), 1: ([2, 1], [1, 1])}[rank]
    all_to_all_single(recv, send, "host", output_split_sizes=splits[1], input_split_sizes=splits[0])


def test_split_sizes_that_disagree_fail_naming_the_sender():
    with pytest.raises(DistributedError, match="rank 0 sent 16 bytes where 8 were expected"):
        run_ranks(_disagree, 2, timeout_s=60)


def _peer_exits(ctx):
    rank, _ = world()
    t = torch.zeros(2, dtype=torch.int64)
    all_to_all_single(torch.empty_like(t), t, "host")  # the mesh is made
    if rank == 1:
        os._exit(3)
    all_to_all_single(torch.empty_like(t), t, "host")


def test_an_exited_peer_fails_the_exchange_at_once():
    with pytest.raises(Exception, match="rank 1"):
        run_ranks(_peer_exits, 2, timeout_s=60)


def test_only_ranks_with_the_token_join_the_mesh(monkeypatch):
    """Two ranks as threads; an intruder connects to rank 1's listener first, with a wrong token
    (an abstract socket is open to every process of the namespace): rank 1 drops it and meshes
    with rank 0."""
    barrier = threading.Barrier(2)
    rows: list[torch.Tensor | None] = [None, None]
    intruded = threading.Event()

    def gather(rank):
        def fn(t):
            rows[rank] = t
            barrier.wait()
            table = torch.stack(rows)
            if rank == 1:  # before rank 0 connects: knock with a wrong token
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(f"\0gnnflow-a2a-{int(table[1, 2])}-{int(table[1, 3])}")
                s.sendall(struct.pack("<qq", 0, int(table[1, 4]) ^ 1))
                intruded.set()
            else:
                intruded.wait(10)
            barrier.wait()
            return table
        return fn

    meshes = [None, None]

    def rank_main(rank):
        meshes[rank] = local.connect_mesh(rank, 2, gather(rank), 30.0)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(m is not None for m in meshes)
    try:
        a, b = torch.arange(6, dtype=torch.int64), torch.arange(6, 12, dtype=torch.int64)
        ra, rb = torch.empty(6, dtype=torch.int64), torch.empty(6, dtype=torch.int64)
        ta = threading.Thread(target=meshes[0].all_to_all, args=(ra, a, None, None))
        ta.start()
        meshes[1].all_to_all(rb, b, None, None)
        ta.join(30)
        assert ra.tolist() == [0, 1, 2, 6, 7, 8] and rb.tolist() == [3, 4, 5, 9, 10, 11]
    finally:
        for m in meshes:
            m.close()


def test_ranks_on_other_hosts_keep_gloo(monkeypatch):
    def gather(t):
        other = t.clone()
        other[1] = 3  # the second rank in another network namespace
        return torch.stack([t, other])

    monkeypatch.setattr(local, "host_key", lambda: (1, 2))
    assert local.connect_mesh(0, 2, gather, 5.0) is None


def _bad_splits(ctx):
    t = torch.zeros(3, dtype=torch.int64)
    all_to_all_single(torch.empty_like(t), t, "host", output_split_sizes=[1, 2], input_split_sizes=[1, 3])


def test_split_sizes_that_do_not_cover_the_tensor_are_refused():
    with pytest.raises(DistributedError, match=r"input split sizes \[1, 3\] for 3 rows"):
        run_ranks(_bad_splits, 2, timeout_s=60)


def _mixed_switch(ctx):
    if ctx.rank == 1:
        os.environ[local.ENV] = "0"
    t = torch.arange(4, dtype=torch.int64) + 10 * ctx.rank
    recv = torch.empty_like(t)
    all_to_all_single(recv, t, "host")
    return recv.tolist(), collectives._meshes.get(torch.distributed.group.WORLD) is not None


def test_ranks_that_disagree_on_the_switch_fall_back_to_gloo_together():
    got = run_ranks(_mixed_switch, 2, timeout_s=60)
    assert got == [([0, 1, 10, 11], False), ([2, 3, 12, 13], False)]
