"""Sampler processes (``samplers=process``): the pipeline's sample and load stages in a child
process per rank.  They must produce exactly what the in-process stages produce, hand batches
over through reusable slots, and fail loudly, naming the rank, when the child fails or dies."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from conftest import synthetic_graph_book

from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError, DistributedError
from gnnflow.results.schema import is_measurement
from gnnflow.runtime.context import RankContext
from gnnflow.strategies.driver import load_checkpoint, run_training
from gnnflow.strategies.minibatch.data_parallel import DataParallel
from gnnflow.strategies.minibatch.pipeline import MiniBatch


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return synthetic_graph_book(tmp_path_factory.mktemp("samplers"), 4096, "metis", 2)


@pytest.fixture
def strategy(graph_book):
    """One rank on the whole graph with a sampler process (fanouts 15,10,5 as DistDGLv2 §5)."""
    cfg = TrainConfig(graph=graph_book[0], strategy="data", fanouts=[15, 10, 5], num_layers=3, hidden=16,
                      batch_size=256, epochs=2, seed=3, model="gcn", options={"samplers": "process"})
    s = DataParallel(cfg, RankContext())
    s.prepare()
    yield s
    s.close()


def _inline(s: DataParallel, mb: MiniBatch) -> MiniBatch:
    ref = MiniBatch(epoch=mb.epoch, index=mb.index, targets=mb.targets.clone())
    return s.load_stage(s.sample_stage(ref))


def _assert_same(a: MiniBatch, b: MiniBatch) -> None:
    assert a.blocks is not None and b.blocks is not None and len(a.blocks) == len(b.blocks) == 3
    for x, y in zip(a.blocks, b.blocks, strict=True):
        for f in ("dst_ids", "src_ids", "indptr", "indices", "src_deg", "dst_deg"):
            assert torch.equal(getattr(x, f), getattr(y, f)), f
    assert torch.equal(a.inputs, b.inputs)
    for k in ("sampled_edges", "input_vertices", "features_loaded"):
        assert a.counters[k] == b.counters[k], k


def _batch(s: DataParallel, epoch: int, index: int, size: int) -> MiniBatch:
    rng = np.random.default_rng([epoch, index])
    return MiniBatch(epoch=epoch, index=index, targets=torch.from_numpy(rng.choice(s.target_ids, size, replace=False)))


def test_sampler_process_batches_equal_the_in_process_stages(strategy):
    from gnnflow.strategies.minibatch.sampler_process import SamplerProcess

    s = strategy
    assert s.samplers == "process" and s.sampler_proc is not None
    # tiny batches first: their slots are too small for the large ones later, which remake them
    sizes = [1, 1, 1, 1, 256, 256, 256]
    batches = [_batch(s, 0, j, n) for j, n in enumerate(sizes)]
    proc = SamplerProcess(s.sampler_proc.spec, min_slot_bytes=4096)
    try:
        got = list(proc.map(iter(batches)))
    finally:
        proc.close()
    assert [(mb.epoch, mb.index) for mb in got] == [(0, j) for j in range(len(sizes))]
    for mb in got:
        _assert_same(mb, _inline(s, mb))
        assert mb.times["sample"] > 0 and mb.times["load"] > 0  # measured in the child
    assert proc.slots == 4
    assert proc.slots_made > 4  # a slot was remade larger
    assert not proc.proc.is_alive()


def test_abandoned_map_does_not_leak_into_the_next(strategy):
    s = strategy
    first = s.sampler_proc.map(iter([_batch(s, 1, j, 64) for j in range(6)]))
    next(first)
    first.close()  # 4 more batches were requested and are owed
    again = [_batch(s, 2, j, 64) for j in range(3)]
    got = list(s.sampler_proc.map(iter(again)))
    assert [(mb.epoch, mb.index) for mb in got] == [(2, 0), (2, 1), (2, 2)]
    assert s.sampler_proc.cpu_seconds() > 0
    for mb in got:
        _assert_same(mb, _inline(s, mb))


def test_failure_in_the_sampler_process_names_the_rank(strategy):
    bad = MiniBatch(epoch=0, index=0, targets=torch.tensor([10**9]))
    with pytest.raises(DistributedError, match="sampler process of rank 0 failed: .*Error"):
        list(strategy.sampler_proc.map(iter([bad])))


def test_dead_sampler_process_is_noticed_within_seconds(strategy):
    s = strategy
    s.sampler_proc.proc.kill()
    t0 = time.monotonic()
    with pytest.raises(DistributedError, match="sampler process of rank 0 died"):
        list(s.sampler_proc.map(iter([_batch(s, 0, 0, 64)])))
    assert time.monotonic() - t0 < 5


@pytest.mark.slow
def test_two_ranks_train_identically_with_process_and_thread_samplers(graph_book, tmp_path):
    """GCN with whole-graph degrees and a hot-row cache: every stage runs in the children."""
    rows, models = {}, {}
    for mode in ("thread", "process"):
        cfg = TrainConfig(graph=graph_book[0], partition=graph_book[1], strategy="data", workers=2, model="gcn",
                          fanouts=[5, 5], batch_size=256, epochs=2, seed=1, out=str(tmp_path / mode),
                          options={"samplers": mode, "cache_rows": 200})
        run_training(cfg)
        lines = (tmp_path / mode / "records.jsonl").read_text().splitlines()
        rows[mode] = [{k: v for k, v in json.loads(x).items() if not is_measurement(k) and k != "run_id"}
                      for x in lines]
        models[mode] = load_checkpoint(tmp_path / mode)["ranks"][0]["model"]
    assert rows["thread"] == rows["process"]
    assert rows["process"][0]["remote_features"] > 0 and rows["process"][0]["cache_hits"] > 0
    for k, v in models["thread"].items():
        assert torch.equal(v, models["process"][k]), k


def test_process_samplers_refused_for_a_strategy_with_its_own_stages(graph_book):
    from gnnflow.strategies.split.p3 import PushPull

    cfg = TrainConfig(graph=graph_book[0], strategy="p3", options={"samplers": "process"})
    with pytest.raises(ConfigError, match="samplers=process: strategy 'p3' has its own"):
        PushPull(cfg, RankContext())
    assert DataParallel(TrainConfig(graph=graph_book[0], strategy="data"), RankContext()).samplers == "thread"


@pytest.mark.parametrize("strategy, samplers, message", [
    ("data", "fork", "options.samplers: one of thread, process, got 'fork'"),
    ("p3", "process", "samplers=process: strategy 'p3' has its own"),
    ("data", {"feature_cache_mib": "lots"}, "options.feature_cache_mib: expected a number, got 'lots'"),
    ("data", {"cache_rows": -5}, "options.cache_rows: must be >= 0, got -5"),
])
def test_bad_samplers_option_fails_before_anything_is_written(graph_book, tmp_path, strategy, samplers, message):
    out = tmp_path / "run"
    options = samplers if isinstance(samplers, dict) else {"samplers": samplers}
    cfg = TrainConfig(graph=graph_book[0], partition=graph_book[1], strategy=strategy, workers=2, out=str(out),
                      options=options)
    with pytest.raises(ConfigError, match=message):
        run_training(cfg)
    assert not out.exists()
