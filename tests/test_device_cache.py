"""The device feature cache (hot rows on the rank's device), run with the device = CPU.

It must serve exactly the rows the feature store would (so a run's outputs do not change), count
its hits and misses (hits + misses = the rows a batch needs), and record the epoch's hit rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import assert_records_match, random_store_arrays, same_value, unmeasured_records

from gnnflow.strategies.device_cache import DeviceFeatureCache, cache_rows, hottest

#: columns the cache changes by design: what the store served, and the cache's own counts
CACHE_COLUMNS = ("features_loaded", "remote_features", "remote_bytes", "cache_hits", "cache_misses",
                 "bytes_sent", "bytes_received", "load_bytes_received")


def test_fetch_serves_hits_from_the_cache_and_misses_from_the_loader():
    features = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    asked: list[list[int]] = []

    def load(ids: torch.Tensor) -> torch.Tensor:
        asked.append(ids.tolist())
        return features[ids]

    cache = DeviceFeatureCache.build(np.arange(10), np.array([0, 0, 5, 0, 0, 9, 0, 0, 0, 7]), 3 * (4 * 4 + 8) / 2**20,
                                     4, "cpu", lambda ids: features[torch.from_numpy(ids)])
    assert cache is not None and cache.ids.tolist() == [2, 5, 9]
    counters: dict[str, float] = {}
    ids = torch.tensor([5, 1, 9, 5, 7])
    out = cache.fetch(ids, load, counters)
    assert torch.equal(out, features[ids])
    assert asked == [[1, 7]]
    assert counters == {"device_cache_hits": 3.0, "device_cache_misses": 2.0}
    cache.fetch(torch.tensor([2]), load, counters)  # no miss: the loader is still called (a collective)
    assert asked[-1] == [] and counters["device_cache_hits"] == 4.0


def test_sizes_and_hotness():
    assert cache_rows(1.0, 100) == 2**20 // 408
    assert hottest(np.array([4, 3, 2, 1]), np.array([1, 5, 5, 0]), 2).tolist() == [2, 3]  # ties: smaller id
    loaded = []
    assert DeviceFeatureCache.build(np.arange(5), np.ones(5), 0.0, 8, "cpu", lambda ids: loaded.append(ids)) is None
    assert loaded and loaded[0].size == 0  # called anyway: on several ranks it is a collective


def test_record_comparison_treats_nan_as_equal():
    assert same_value(float("nan"), float("nan")) and not same_value(float("nan"), 0.0)
    assert_records_match([{"x_hec_hit_rate_l0": math.nan, "loss": 1.0}], [{"x_hec_hit_rate_l0": math.nan, "loss": 1.0}])
    with pytest.raises(AssertionError):
        assert_records_match([{"loss": 1.0}], [{"loss": math.nan}])


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    from gnnflow.data.store import write_store
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("devcache")
    store = write_store(tmp / "g", name="g", source="test", directed=False,
                        **random_store_arrays(num_nodes=500, avg_degree=10, seed=1))
    return str(store.path), str(partition_graph(store.path, "metis", 2, tmp / "book", seed=0).path)


@pytest.mark.parametrize("strategy", ["single", "data"])
def test_training_with_a_device_cache_counts_hits_and_keeps_the_outputs(strategy, graph_book, tmp_path):
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.driver import run_training

    graph, book = graph_book
    workers = 2 if strategy == "data" else 1
    common = dict(graph=graph, partition=book if workers == 2 else None, strategy=strategy, workers=workers,
                  hidden=8, num_layers=2, fanouts=[4, 4], batch_size=64, epochs=2, seed=0)
    # 100 rows of 8 floats: a fifth of the graph on the "device" (the CPU here)
    for name, opts in (("plain", {"sampling": "device"}),
                       ("cached", {"sampling": "device", "device_cache_mib": 100 * (4 * 8 + 8) / 2**20})):
        run_training(TrainConfig(**common, options=opts, out=str(tmp_path / name)))
    plain, cached = unmeasured_records(tmp_path / "plain"), unmeasured_records(tmp_path / "cached")
    extra = ("device_cache_hits", "device_cache_misses", "x_device_cache_hit_rate", "x_device_cache_rows")
    assert_records_match([{k: v for k, v in r.items() if k not in extra} for r in cached], plain,
                         ignore=("run_id", *CACHE_COLUMNS))
    for p, c in zip(plain, cached, strict=True):
        hits, misses = c["device_cache_hits"], c["device_cache_misses"]
        assert hits > 0 and c["x_device_cache_rows"] == 100
        assert hits + misses == p["features_loaded"]  # every input row: from the cache or the store
        assert c["features_loaded"] == misses  # the store served the misses only
        assert c["x_device_cache_hit_rate"] == pytest.approx(hits / (hits + misses))
