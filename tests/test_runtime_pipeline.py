"""The asynchronous mini-batch pipeline (DistDGLv2 §4.2.1): order, bounds, overlap, errors."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from gnnflow.errors import DistributedError
from gnnflow.runtime.launch import run_ranks
from gnnflow.strategies.minibatch.pipeline import MiniBatch, MiniBatchPipeline


def _schedule(epochs: int, per_epoch: int):
    for e in range(epochs):
        for j in range(per_epoch):
            yield MiniBatch(epoch=e, index=j, targets=torch.tensor([e * 100 + j]))


def _stages(sleep_s: float = 0.0, fail_at: int | None = None, seen: list | None = None):
    def sample(mb):
        if fail_at is not None and mb.index == fail_at:
            raise ValueError("sampling broke on purpose")
        time.sleep(sleep_s)
        mb.blocks = [mb.targets * 2]
        if seen is not None:
            seen.append(threading.current_thread().name)

    def load(mb):
        time.sleep(sleep_s)
        mb.inputs = mb.blocks[0] + 1

    def device(mb):
        mb.counters["dev"] = 1

    return sample, load, device


@pytest.mark.parametrize("asynchronous", [False, True])
def test_same_batches_in_order_across_epochs(asynchronous):
    pipe = MiniBatchPipeline(_schedule(3, 4), *_stages(), asynchronous=asynchronous, capacities=(2, 2, 1))
    got = [(mb.epoch, mb.index, int(mb.inputs)) for mb in pipe]
    assert got == [(e, j, (e * 100 + j) * 2 + 1) for e in range(3) for j in range(4)]
    pipe.close()


def test_capacities_bound_batches_in_flight():
    pipe = MiniBatchPipeline(_schedule(1, 40), *_stages(), capacities=(3, 2, 1)).start()
    time.sleep(0.5)  # let the stages fill up while training does not consume
    assert pipe.high_water[0] <= 3 and pipe.high_water[1] <= 2 and pipe.high_water[2] <= 1
    assert pipe.high_water[0] >= 1
    assert len(list(pipe)) == 40
    pipe.close()


def test_overlap_hides_sampling_behind_training():
    """Sampling and training 20 ms each: the pipeline runs both at once, inline runs them in turn."""
    def run(asynchronous):
        pipe = MiniBatchPipeline(_schedule(1, 15), *_stages(sleep_s=0.01), asynchronous=asynchronous)
        t = time.perf_counter()
        for _ in pipe:
            time.sleep(0.02)
        pipe.close()
        return time.perf_counter() - t

    inline, piped = run(False), run(True)
    assert piped < 0.8 * inline, (piped, inline)


def test_stage_error_reaches_training_thread():
    seen: list = []
    pipe = MiniBatchPipeline(_schedule(1, 10), *_stages(fail_at=3, seen=seen))
    with pytest.raises(DistributedError, match="sampling broke on purpose"):
        list(pipe)
    pipe.close()
    assert set(seen) == {"gnnflow-sampler"}


def test_bad_capacities():
    with pytest.raises(DistributedError):
        MiniBatchPipeline(_schedule(1, 1), *_stages(), capacities=(1, 0, 1))


def _collectives_rank(ctx):
    """Pipeline threads exchange on their own groups while the training thread all-reduces."""
    import torch.distributed as dist

    from gnnflow.comm.collectives import alltoallv
    from gnnflow.strategies.minibatch.pipeline import stage_groups

    groups = stage_groups(("sample", "load"))
    size = ctx.world_size

    def sample(mb):
        got = alltoallv([mb.targets.clone() for _ in range(size)], group=groups["sample"], kind="host")
        mb.blocks = [torch.cat(got)]

    def load(mb):
        got = alltoallv([mb.blocks[0] * 10 for _ in range(size)], group=groups["load"], kind="host")
        mb.inputs = torch.cat(got)

    rng = np.random.default_rng(ctx.rank)
    out = []
    pipe = MiniBatchPipeline(_schedule(2, 6), sample, load, lambda mb: mb)
    for mb in pipe:
        time.sleep(float(rng.random()) * 0.01)  # ranks drift apart
        t = torch.ones(1) * mb.index
        dist.all_reduce(t)
        out.append((int(mb.inputs.sum()), float(t)))
    pipe.close()
    return out


def test_background_collectives_do_not_interleave_with_training():
    res = run_ranks(_collectives_rank, 2, timeout_s=60)
    assert res[0] == res[1]
    assert [r[1] for r in res[0]] == [2.0 * j for _ in range(2) for j in range(6)]
