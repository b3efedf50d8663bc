"""Issue 22, acceptance 2: every strategy on CUDA gives the CPU run's records (float tolerance).

Marked ``gpu``; skipped where ``torch.cuda.is_available()`` is False.  Two ranks need two GPUs
for NCCL; on one GPU they share it and CUDA tensors go over gloo (``cpu:gloo,cuda:gloo``,
:func:`gnnflow.runtime.devices.default_backend`).  Run: ``pytest -m gpu tests/test_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

from gnnflow.config import TrainConfig
from gnnflow.results.schema import Recorder, is_measurement
from gnnflow.strategies.driver import run_training

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)")]

LOSS_RTOL = 1e-3  # float32 kernels differ between CPU and CUDA; accuracies may move by a tie
ACC_ATOL = 0.02
STRATEGIES = {
    "single": {},
    "data": {},
    "split": {},
    "p3": {},
    "hec": {},
    "fullbatch": dict(model="gcn", fanouts=[-1, -1]),
    "dgcl": dict(model="gcn", fanouts=[-1, -1]),
}


@pytest.fixture(scope="module")
def graph_books(tmp_path_factory):
    """The graph store and a partition book per worker count (a run needs a part per rank)."""
    from conftest import random_store_arrays

    from gnnflow.data.store import write_store
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("gpu")
    store = write_store(tmp / "g", name="g", source="test", directed=False, **random_store_arrays())
    books = {p: str(partition_graph(store.path, "metis", p, tmp / f"book{p}", seed=0).path) for p in (1, 2)}
    return str(store.path), books


def _rows(records):
    return sorted(({k: v for k, v in r.flat().items() if not is_measurement(k) and k != "run_id"}
                   for r in records), key=lambda r: (r["epoch"], r["rank"]))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_strategy_on_cuda_matches_cpu(strategy, workers, graph_books, tmp_path):
    from conftest import assert_records_match

    if strategy == "single" and workers == 2:
        pytest.skip("single is one process")
    graph, books = graph_books
    common = dict(graph=graph, partition=books[workers], strategy=strategy, workers=workers, hidden=8,
                  num_layers=2, fanouts=[3, 3], batch_size=64, epochs=2, dropout=0.0, seed=0,
                  options={"pipeline": True})
    common.update(STRATEGIES[strategy])
    cpu = _rows(run_training(TrainConfig(**common, device="cpu", out=str(tmp_path / "cpu"))))
    gpu = _rows(run_training(TrainConfig(**common, device="cuda", out=str(tmp_path / "cuda"))))
    assert_records_match(gpu, cpu, loss_rtol=LOSS_RTOL, acc_atol=ACC_ATOL, ignore=("device",))


def test_device_copier_reuses_pinned_buffers():
    from gnnflow.strategies.minibatch.pipeline import DeviceCopier

    copier = DeviceCopier("cuda")
    x = torch.randn(100, 8)
    out = copier({"inputs": x})["inputs"]
    assert out.is_cuda and torch.equal(out.cpu(), x)
    buf = copier._pinned["inputs"]
    assert buf.is_pinned()
    out = copier({"inputs": x[:50]})["inputs"]  # smaller batch: the same buffer
    assert copier._pinned["inputs"] is buf and torch.equal(out.cpu(), x[:50])


def test_recorder_times_gpu_work_with_cuda_events():
    rec = Recorder(torch.device("cuda", torch.cuda.current_device()))
    a = torch.randn(2048, 2048, device="cuda")
    with rec.timer("forward_backward"):
        for _ in range(10):
            a = a @ a / 2048
    assert rec.times["forward_backward"] == 0.0  # not resolved until the epoch ends
    rec.resolve()
    assert rec.times["forward_backward"] > 0.0


def test_ranks_compute_on_their_own_gpu():
    from gnnflow.runtime.launch import run_ranks

    got = run_ranks(_current_device, 2, device="cuda")
    n = torch.cuda.device_count()
    assert got == [r % n for r in range(2)]


def _current_device(ctx):
    assert ctx.device.index == torch.cuda.current_device()
    return torch.cuda.current_device()
