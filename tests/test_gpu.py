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
from gnnflow.strategies.base import strategy_class
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
    common["options"] = strategy_class(strategy).Options.own(common["options"])  # pipeline: mini-batch only
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


# ---------------------------------------------------------------- the GPU path (device sampling, cache, evaluation)
@pytest.mark.parametrize("fanouts", [[15, 10, 5], [-1, -1, -1]], ids=["15,10,5", "full"])
@pytest.mark.parametrize("resident", [True, False], ids=["csr-on-gpu", "csr-pinned-on-host"])
def test_cuda_draws_equal_cpu_draws(fanouts, resident):
    """The tensor sampler on the GPU draws what the numpy sampler draws, for whole epochs."""
    import numpy as np
    from conftest import random_store_arrays
    from test_device_sampling import _assert_same_blocks

    from gnnflow.sampling import NeighborSampler
    from gnnflow.sampling import tensor_sampler as ts
    from gnnflow.strategies.common import batch_generator, batches

    words = torch.from_numpy(np.random.default_rng(0).integers(-2**63, 2**63 - 1, 100_000, dtype=np.int64))
    assert torch.equal(ts.mix(words.cuda()).cpu(), ts.mix(words))
    assert torch.equal(ts.uniforms(words.cuda(), 3).cpu(), ts.uniforms(words, 3))
    a = random_store_arrays(num_nodes=5000, avg_degree=30, seed=4)
    host = NeighborSampler(a["indptr"], a["indices"], fanouts, seed=7)
    dev = ts.TensorNeighborSampler(a["indptr"], a["indices"], fanouts, seed=7, device="cuda",
                                   csr_budget=None if resident else 0)
    assert dev.csr.resident == resident
    for index, targets in enumerate(batches(a["train_idx"], 256, batch_generator(0))):
        got = dev.at(0, index).sample_blocks(targets)
        assert got[0].src_ids.is_cuda
        _assert_same_blocks(got, host.at(0, index).sample_blocks(targets), f"batch {index}")


def test_device_dist_sampler_on_cuda_equals_host_sampler(graph_books):
    from test_device_sampling import _dist_blocks_rank

    from gnnflow.runtime.launch import run_ranks

    graph, books = graph_books
    res = run_ranks(_dist_blocks_rank, 2, graph, books[2], [15, 10, 5], device="cuda", timeout_s=300)
    assert all(n > 0 for n, _ in res) and all(remote > 0 for _, remote in res)


@pytest.mark.parametrize("strategy", ["single", "data"])
def test_device_sampling_and_cache_on_cuda_match_cpu(strategy, graph_books, tmp_path):
    from conftest import assert_records_match

    graph, books = graph_books
    workers = 2 if strategy == "data" else 1
    common = dict(graph=graph, partition=books[workers], strategy=strategy, workers=workers, hidden=8, num_layers=2,
                  fanouts=[3, 3], batch_size=64, epochs=2, dropout=0.0, seed=0,
                  options={"sampling": "device", "device_cache_mib": 0.002})
    cpu = _rows(run_training(TrainConfig(**common, device="cpu", out=str(tmp_path / "cpu"))))
    gpu = _rows(run_training(TrainConfig(**common, device="cuda", out=str(tmp_path / "cuda"))))
    assert_records_match(gpu, cpu, loss_rtol=LOSS_RTOL, acc_atol=ACC_ATOL, ignore=("device",))
    assert all(r["device_cache_hits"] > 0 for r in gpu)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_full_inference_on_cuda_matches_cpu(model):
    from conftest import random_store_arrays

    from gnnflow.nn import build_model
    from gnnflow.strategies.common import full_inference

    a = random_store_arrays(num_nodes=4000, avg_degree=10)
    torch.manual_seed(0)
    net = build_model(model, 8, 32, 4, 3, 0.0, 2)
    cpu = full_inference(net, a["indptr"], a["indices"], a["features"], "cpu", chunk_size=500)
    gpu = full_inference(net.cuda(), a["indptr"], a["indices"], a["features"], "cuda", chunk_size=500)
    assert not gpu.is_cuda and torch.allclose(gpu, cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("strategy", ["data", "split", "fullbatch", "dgcl"])
def test_verify_on_cuda_passes(strategy, tmp_path, monkeypatch):
    from gnnflow.strategies.verify import CHECKS

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    kw = {"planner": ["spst", "p2p"]} if strategy == "dgcl" else {}
    res = CHECKS[strategy](2, seed=0, device="cuda", **kw)
    assert res["passed"], res["max_abs_diff"]


def test_bench_gpu_minibatch_on_cuda(capsys, tmp_path):
    import json

    from test_gpu_minibatch_bench import TINY

    from gnnflow.bench.ratios import check_ratios
    from gnnflow.cli import main

    args = [a if a != "cpu" else "cuda" for a in TINY]
    assert main(["bench", "gpu-minibatch", *args, "--work", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"] == "cuda" and not check_ratios(out) and out["peak_device_mib"] > 0


@pytest.mark.slow
def test_evaluation_of_a_1m_vertex_graph_takes_at_most_2_s(tmp_path):
    """Issue acceptance: layer-wise full-graph inference of 1M vertices (SAGE 3 x 256) on the GPU."""
    import time

    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.nn import build_model
    from gnnflow.strategies.common import full_inference

    store = prepare_synthetic(tmp_path / "g", num_nodes=1_000_000, avg_degree=12, feature_dim=100, num_classes=47)
    net = build_model("sage", 100, 256, 47, 3, 0.0, 1).cuda()
    full_inference(net, store.indptr, store.indices, store.features, "cuda")  # warm-up
    torch.cuda.synchronize()
    t = time.perf_counter()
    full_inference(net, store.indptr, store.indices, store.features, "cuda")
    torch.cuda.synchronize()
    assert time.perf_counter() - t <= 2.0
