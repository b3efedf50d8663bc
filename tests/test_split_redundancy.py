"""GSplit Table 1 / Fig. 5 metrics."""

from __future__ import annotations

import numpy as np
from conftest import random_store_arrays

from gnnflow.strategies.split.redundancy import (
    combine_split_counts,
    redundancy,
    sampled_split_metrics,
)


def test_combine_split_counts_imbalance_and_cross_fraction():
    # 2 splits, 2 iterations, 1 layer
    edges = np.array([[[30], [10]], [[10], [10]]])
    cross = np.array([[[3], [0]], [[1], [2]]])
    m = combine_split_counts(edges, cross)
    assert np.isclose(m["load_imbalance_l0"], (30 / 20 + 1.0) / 2)
    assert np.isclose(m["load_imbalance_max"], 1.5)
    assert np.isclose(m["cross_edge_fraction"], 6 / 60)


def test_data_parallel_microbatches_are_redundant():
    a = random_store_arrays(num_nodes=400, avg_degree=8, seed=2)
    r = redundancy(a["indptr"], a["indices"], a["train_idx"], [5, 5], batch_size=64, parts=4, iterations=3)
    assert r["features_ratio"] > 1.0 and r["edges_ratio"] >= 1.0
    assert r["features_mini"] > 0


def test_sampled_split_metrics_random_partition_cuts_most_edges():
    a = random_store_arrays(num_nodes=400, avg_degree=8, seed=2)
    node_part = np.random.default_rng(0).integers(0, 4, 400)
    m = sampled_split_metrics(a["indptr"], a["indices"], a["train_idx"], node_part, [5, 5], 64, iterations=3)
    assert 0.6 < m["cross_edge_fraction"] < 0.9  # ~3/4 of edges cross 4 random splits (GSplit Fig. 5 "Rand")
