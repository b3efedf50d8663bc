"""The tensor sampler (the GPU path's sampler) equals the numpy sampler, batch for batch.

On CPU tensors :mod:`gnnflow.sampling.tensor_sampler` must reproduce the host sampler exactly:
the SplitMix64 words, the uniforms, Floyd's choices, and the blocks of whole epochs for fanouts
15,10,5 and -1, single-process and data-parallel (each rank sampling its own vertices with the
tensor code, remote seeds through the exchange).  Training with ``sampling=device`` must then
give the host run's records.  ``tests/test_gpu.py`` checks the CUDA draws against these.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_store_arrays

from gnnflow.errors import ConfigError
from gnnflow.sampling import NeighborSampler
from gnnflow.sampling import draws as np_draws
from gnnflow.sampling import tensor_sampler as ts
from gnnflow.sampling.draws import DrawKey
from gnnflow.sampling.neighbor import sample_edge_positions
from gnnflow.strategies.common import batch_generator, batches

FANOUTS = ([15, 10, 5], [-1, -1, -1])


def _words(n: int = 20_000) -> np.ndarray:
    w = np.random.default_rng(0).integers(-2**63, 2**63 - 1, n, dtype=np.int64, endpoint=True)
    return np.concatenate([w, [0, 1, -1, 2**63 - 1, -2**63]]).astype(np.int64)


def test_splitmix_words_and_uniforms_equal_numpys():
    w = _words()
    want = np_draws.mix(w.view(np.uint64)).view(np.int64)
    assert np.array_equal(ts.mix(torch.from_numpy(w)).numpy(), want)
    for i in (0, 1, 7, 24):
        assert np.array_equal(ts.uniforms(torch.from_numpy(want), i).numpy(), np_draws.uniforms(want.view(np.uint64), i))
    key = DrawKey(seed=3, epoch=2, batch=5)
    ids = np.arange(0, 10**12, 10**7, dtype=np.int64)
    got = ts.row_hashes(key, 1, torch.from_numpy(ids)).numpy()
    assert np.array_equal(got, key.row_hashes(1, ids).view(np.int64))


def test_shift_right_is_logical():
    x = torch.tensor([-1, -2**63, 2**62], dtype=torch.int64)
    assert ts.shift_right(x, 1).tolist() == [2**63 - 1, 2**62, 2**61]


def test_floyd_choices_equal_numpys():
    rng = np.random.default_rng(1)
    deg = rng.integers(16, 500, 3000).astype(np.int64)
    h = np_draws.mix(rng.integers(0, 2**63, 3000, dtype=np.int64).view(np.uint64))
    for k in (1, 5, 15):
        want = np_draws.floyd_choose(deg, k, h)
        got = ts.floyd_choose(torch.from_numpy(deg), k, torch.from_numpy(h.view(np.int64))).numpy()
        assert np.array_equal(got, want)


def _assert_same_blocks(got, want, where=""):
    assert len(got) == len(want)
    for layer, (g, w) in enumerate(zip(got, want, strict=True)):
        for f in ("dst_ids", "src_ids", "indptr", "indices"):
            assert torch.equal(getattr(g, f).cpu(), getattr(w, f)), f"{where} layer {layer}: {f} differs"


@pytest.fixture(scope="module")
def small_graph():
    a = random_store_arrays(num_nodes=1500, avg_degree=24, seed=4)
    return a["indptr"], a["indices"], a["train_idx"]


@pytest.mark.parametrize("fanouts", FANOUTS, ids=["15,10,5", "full"])
@pytest.mark.parametrize("relabel", ["bitmap", "sorted"])
def test_tensor_sampler_equals_numpy_sampler_for_whole_epochs(small_graph, fanouts, relabel, monkeypatch):
    if relabel == "sorted":  # graph "much larger" than every sample: the sort path
        monkeypatch.setattr(ts.TensorRelabeler, "_BITMAP_RATIO", 0)
    indptr, indices, train = small_graph
    host = NeighborSampler(indptr, indices, fanouts, seed=7)
    dev = ts.TensorNeighborSampler(indptr, indices, fanouts, seed=7)
    for epoch in range(2):
        for index, targets in enumerate(batches(train, 64, batch_generator(epoch))):
            _assert_same_blocks(dev.at(epoch, index).sample_blocks(targets),
                                host.at(epoch, index).sample_blocks(targets), f"epoch {epoch} batch {index}")


def test_tensor_sampler_with_local_rows_and_global_ids(small_graph):
    """Rows of a part's CSR keyed by their global ids draw what the whole graph's rows draw."""
    indptr, indices, _ = small_graph
    ids = np.arange(100, 400, dtype=np.int64)
    rows = np.arange(ids.shape[0])
    sub_ptr = np.concatenate([[0], np.cumsum(np.diff(indptr)[ids])])
    sub_idx = np.concatenate([indices[indptr[v]:indptr[v + 1]] for v in ids])
    key = DrawKey(1, 2, 3)
    eid, counts = sample_edge_positions(sub_ptr, rows, 5, key, 0, ids)
    got_eid, got_counts = ts.sample_edge_positions(torch.from_numpy(sub_ptr), torch.from_numpy(rows), 5, key, 0,
                                                   torch.from_numpy(ids))
    assert np.array_equal(got_eid.numpy(), eid) and np.array_equal(got_counts.numpy(), counts)
    whole_eid, _ = sample_edge_positions(indptr, ids, 5, key, 0, ids)
    assert np.array_equal(sub_idx[got_eid.numpy()], indices[whole_eid])


def test_csr_outside_the_device_budget_stays_on_the_host(small_graph):
    indptr, indices, train = small_graph
    host = NeighborSampler(indptr, indices, [5, 5], seed=1)
    dev = ts.TensorNeighborSampler(indptr, indices, [5, 5], seed=1, csr_budget=0)
    assert not dev.csr.resident
    targets = torch.from_numpy(train[:50])
    _assert_same_blocks(dev.at(0, 0).sample_blocks(targets), host.at(0, 0).sample_blocks(targets))


# ---------------------------------------------------------------------- data-parallel, 2 ranks
def _dist_blocks_rank(ctx, graph, book, fanouts):
    """Every batch of two epochs of this rank's schedule, sampled by the host and device samplers."""
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.minibatch.data_parallel import DataParallel

    cfg = TrainConfig(graph=graph, partition=book, strategy="data", workers=2, num_layers=len(fanouts),
                      fanouts=fanouts, batch_size=48, seed=5,
                      options={"pipeline": False, "feature_cache_mib": 0, "sampling": "host"})
    host = DataParallel(cfg, ctx)
    host.prepare_stages()
    host.sample_device = ctx.device  # what sampling=device selects: the rank's device (here the CPU)
    dev = host.new_sampler(cfg.seed, host.groups["sample"], host.sample_stats)
    assert type(dev).__name__ == "DeviceDistSampler"
    compared = 0
    for mb in host.schedule(0, 2):
        want = host.sampler.at(mb.epoch, mb.index).sample_blocks(mb.targets)
        got = dev.at(mb.epoch, mb.index).sample_blocks(mb.targets)
        _assert_same_blocks(got, want, f"rank {ctx.rank} epoch {mb.epoch} batch {mb.index}")
        compared += 1
    return compared, dev.remote_seeds


@pytest.fixture(scope="module")
def two_part_book(tmp_path_factory):
    from gnnflow.data.store import write_store
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("devsample")
    store = write_store(tmp / "g", name="g", source="test", directed=False,
                        **random_store_arrays(num_nodes=600, avg_degree=16, seed=2))
    return str(store.path), str(partition_graph(store.path, "random", 2, tmp / "book", seed=0).path)


@pytest.mark.parametrize("fanouts", FANOUTS, ids=["15,10,5", "full"])
def test_device_dist_sampler_equals_host_sampler_on_two_ranks(two_part_book, fanouts):
    from gnnflow.runtime.launch import run_ranks

    graph, book = two_part_book
    res = run_ranks(_dist_blocks_rank, 2, graph, book, fanouts, timeout_s=300)
    assert all(n > 0 for n, _ in res)
    assert all(remote > 0 for _, remote in res), "no seed went to its owner: the exchange was not exercised"


def _records(run_dir):
    from conftest import unmeasured_records

    return [{k: v for k, v in r.items() if k != "run_id"} for r in unmeasured_records(run_dir)]


@pytest.mark.parametrize("strategy", ["single", "data"])
def test_training_with_device_sampling_gives_the_host_records(strategy, two_part_book, tmp_path):
    from conftest import assert_records_match

    from gnnflow.config import TrainConfig
    from gnnflow.strategies.driver import run_training

    graph, book = two_part_book
    workers = 2 if strategy == "data" else 1
    for sampling in ("host", "device"):
        run_training(TrainConfig(graph=graph, partition=book if workers == 2 else None, strategy=strategy,
                                 workers=workers, hidden=8, num_layers=2, fanouts=[5, 3], batch_size=64, epochs=2,
                                 seed=0, options={"sampling": sampling}, out=str(tmp_path / sampling)))
    assert_records_match(_records(tmp_path / "device"), _records(tmp_path / "host"))


def test_device_sampling_is_refused_with_sampler_processes(two_part_book):
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.minibatch.data_parallel import DataParallel

    graph, book = two_part_book
    for opt in ({"sampling": "device"}, {"device_cache_mib": 1}):
        cfg = DataParallel.parse_options(TrainConfig(graph=graph, partition=book, strategy="data", workers=2,
                                                     options={"samplers": "process", **opt}))
        with pytest.raises(ConfigError, match="samplers=thread"):
            DataParallel.check_config(cfg)
