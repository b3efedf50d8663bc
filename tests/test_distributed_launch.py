"""The local launcher and the shared all-to-all primitives."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from gnnflow.comm import collectives
from gnnflow.comm.collectives import (
    CommStats,
    all_reduce_sum,
    all_to_all_rows,
    alltoallv,
    count_matrix,
    world,
)
from gnnflow.errors import DistributedError
from gnnflow.runtime.launch import run_ranks


def _exchange(ctx):
    rank, size = world()
    assert (rank, size) == (ctx.rank, ctx.world_size)
    # rank r sends (p + 1) rows of value 10*r + p to rank p
    send = [torch.full((p + 1, 2), float(10 * rank + p)) for p in range(size)]
    stats = CommStats(size)
    recv = alltoallv(send, stats, kind="host")
    return [t[:, 0].tolist() for t in recv], stats.total_sent


def test_alltoallv_uneven_rows():
    results = run_ranks(_exchange, 3, timeout_s=30)
    for rank, (recv, sent) in enumerate(results):
        # from peer q this rank gets rank+1 rows of value 10*q + rank
        assert recv == [[float(10 * q + rank)] * (rank + 1) for q in range(3)]
        assert sent == sum((p + 1) * 2 * 4 for p in range(3) if p != rank)


def _sums(ctx, through_all_reduce: bool):
    if through_all_reduce:  # the tensor times the ranks over the bound: gloo's all_reduce
        collectives.SUM_BY_ALLTOALL_BYTES = 0
    g = torch.Generator().manual_seed(ctx.rank)
    t = torch.randn(1000, generator=g) * 10 ** torch.randint(-3, 4, (1000,), generator=g)
    mine = t.clone()
    all_reduce_sum(t, "compute")
    matrix = count_matrix([10 * ctx.rank + p for p in range(ctx.world_size)])
    return mine, t, matrix


@pytest.mark.parametrize("through_all_reduce", [False, True])
def test_all_reduce_sum_and_count_matrix(through_all_reduce):
    results = run_ranks(_sums, 4, through_all_reduce, timeout_s=60)
    parts = [mine for mine, _, _ in results]
    in_rank_order = parts[0].clone()
    for p in parts[1:]:
        in_rank_order += p
    for _, got, matrix in results:
        assert matrix.tolist() == [[10 * q + p for p in range(4)] for q in range(4)]
        torch.testing.assert_close(got, in_rank_order, rtol=1e-5, atol=1e-5)
        if not through_all_reduce:  # every rank adds the copies in rank order: the same bits everywhere
            assert torch.equal(got, in_rank_order)
    assert through_all_reduce or all(torch.equal(got, results[0][1]) for _, got, _ in results)


def _shuffle_grad(ctx, skip_backward: bool):
    torch.manual_seed(0)
    full = torch.randn(8, 3)
    # rank r owns rows r*4 .. r*4+3; every rank needs rows [1, 6] from the whole set
    own = full[ctx.rank * 4 : ctx.rank * 4 + 4].clone().requires_grad_(True)
    need = [1, 6]
    send_index = [torch.tensor([i - ctx.rank * 4 for i in need if i // 4 == ctx.rank]) for _ in range(2)]
    recv_counts = [sum(1 for i in need if i // 4 == q) for q in range(2)]
    if skip_backward:
        got = torch.cat(alltoallv([own.detach()[i] for i in send_index], recv_counts=recv_counts, kind="compute"))
        got = got + 0 * own.sum()
    else:
        got = all_to_all_rows(own, send_index, recv_counts)
    (got * torch.arange(1, 4.0)).sum().mul(ctx.rank + 1).backward()
    return own.grad.clone()


@pytest.mark.parametrize("skip_backward", [False, True])
def test_all_to_all_rows_backward_matches_single_process(skip_backward):
    full = torch.randn(8, 3).requires_grad_(True)
    torch.manual_seed(0)
    full = torch.randn(8, 3).requires_grad_(True)
    loss = sum((full[[1, 6]] * torch.arange(1, 4.0)).sum() * (r + 1) for r in range(2))
    loss.backward()
    grads = run_ranks(_shuffle_grad, 2, skip_backward, timeout_s=30)
    got = torch.cat(grads)
    if skip_backward:
        assert not torch.allclose(got, full.grad)  # the test notices a dropped backward shuffle
    else:
        torch.testing.assert_close(got, full.grad, atol=1e-6, rtol=0)


def _die(ctx):
    if ctx.rank == 1:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    torch.distributed.barrier()  # rank 0 waits for a rank that never comes
    return ctx.rank


def _raise(ctx):
    if ctx.rank == 2:
        raise RuntimeError("boom on purpose")
    torch.distributed.barrier()


def test_killed_rank_is_named_and_run_fails_fast():
    t0 = time.monotonic()
    with pytest.raises(DistributedError, match="rank 1 died"):
        run_ranks(_die, 2, timeout_s=30)
    assert time.monotonic() - t0 < 30


def test_raising_rank_is_named_with_its_error():
    with pytest.raises(DistributedError, match="rank 2 failed: RuntimeError: boom on purpose"):
        run_ranks(_raise, 3, timeout_s=30)


def _return_tensors(ctx):
    return {"rank": ctx.rank, "t": torch.full((1000, 16), float(ctx.rank))}


def test_ranks_can_return_tensors_repeatedly():
    # torch's fd-sharing pickler raced with the rank exiting; results are copied now
    for _ in range(3):
        out = run_ranks(_return_tensors, 2, timeout_s=30)
        assert [o["rank"] for o in out] == [0, 1]
        assert float(out[1]["t"].sum()) == 16000.0


_SRUN_RANK = """
import json, torch
from gnnflow.runtime.launch import run_ranks
from gnnflow.io import configure_logging

configure_logging()

def threads(ctx):
    return torch.get_num_threads()

torch.set_num_threads(2)  # what torch would pick on a 2-core node
print(json.dumps(run_ranks(threads, 1, timeout_s=60)))
"""


def test_a_rank_started_by_srun_takes_the_cpus_of_its_task(tmp_path):
    """Under srun a rank runs SLURM_CPUS_PER_TASK torch threads (the local launcher gives cores /
    ranks): DGL and OpenMP in its helpers follow it, so an srun-started run computes what a local
    one does (docs/cluster.md).  A one-task step on this host, in the SLURM environment srun sets."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE"))}
    env.update(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_STEP_ID="0", SLURM_LOCALID="0",
               SLURM_STEP_NODELIST="localhost", MASTER_PORT=str(port))
    got = {}
    for cpus in ("1", None):
        run_env = dict(env, **({"SLURM_CPUS_PER_TASK": cpus} if cpus else {}))
        done = subprocess.run([sys.executable, "-c", _SRUN_RANK], capture_output=True, text=True, env=run_env,
                              timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "started by srun" in done.stderr, done.stderr[-2000:]
        assert f"{cpus or 2} thread(s)" in done.stderr, done.stderr[-2000:]
        got[cpus] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["1"] == [1]  # the task's CPUs, and its log line says so
    assert got[None] == [2]  # unset: left as the process had it
