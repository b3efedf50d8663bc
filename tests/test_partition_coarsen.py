"""Memory-bounded METIS (label-propagation coarsening, METIS on the coarse graph, refinement)."""

from __future__ import annotations

import sys
from itertools import pairwise

import numpy as np
import pytest

from gnnflow.errors import ConfigError
from gnnflow.io import as_idx
from gnnflow.partition import coarsen
from gnnflow.partition.api import partition_graph
from gnnflow.partition.constraints import balance, constraint_weights
from gnnflow.partition.metis import part_graph_kway
from gnnflow.partition.metrics import edge_cut

NAMES = ["vertices", "train", "edges"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    from gnnflow.data.synthetic import prepare_synthetic

    store = prepare_synthetic(tmp_path_factory.mktemp("g") / "s", num_nodes=20000, avg_degree=12, feature_dim=4,
                              train_frac=0.1)
    vw = constraint_weights(store, NAMES)
    return store, np.asarray(store.indptr), as_idx(store.indices, np.int32), vw


def test_clusters_respect_the_cap_in_every_constraint(graph):
    _, indptr, indices, vw = graph
    cap = np.ceil(vw.sum(axis=0) / 256).astype(np.int64)
    labels, c = coarsen.cluster(indptr, indices, vw, cap, seed=3)
    assert labels.shape == (vw.shape[0],) and labels.min() == 0 and labels.max() == c - 1
    assert np.unique(labels).shape[0] == c  # compact ids
    sums = coarsen.coarse_weights(vw, labels, c)
    members = np.bincount(labels, minlength=c)
    # only a vertex heavier than the cap on its own (a hub's edges) may exceed it, alone
    assert (sums[members > 1] <= cap).all()
    assert (vw[np.isin(labels, np.flatnonzero((sums > cap).any(axis=1)))] > cap).any(axis=1).all()
    assert c < vw.shape[0] // 8  # it coarsens: clusters of many vertices
    again, c2 = coarsen.cluster(indptr, indices, vw, cap, seed=3)
    assert c2 == c and np.array_equal(again, labels)  # deterministic from the seed


def test_contraction_keeps_every_cut_edge_weight(graph):
    _, indptr, indices, vw = graph
    cap = np.ceil(vw.sum(axis=0) / 256).astype(np.int64)
    labels, c = coarsen.cluster(indptr, indices, vw, cap)
    cindptr, cindices, cweights = coarsen.contract(indptr, indices, labels, c)
    # total coarse edge weight = fine entries between different clusters
    src = np.repeat(np.arange(vw.shape[0]), np.diff(indptr))
    between = labels[src] != labels[indices]
    assert cweights.sum() == between.sum()
    # one entry per (cluster, neighbour cluster) pair, no self-loops, symmetric weights
    csrc = np.repeat(np.arange(c), np.diff(cindptr))
    assert (csrc != cindices).all()
    keys = csrc * c + cindices
    assert np.unique(keys).shape[0] == keys.shape[0]
    order = np.argsort(keys)
    rev = np.searchsorted(keys[order], cindices.astype(np.int64) * c + csrc)
    assert np.array_equal(cweights[order][rev], cweights)
    # a coarse entry's weight is the number of fine edges between the two clusters
    pair = labels[src[between]] * c + labels[indices[between]]
    u, counts = np.unique(pair, return_counts=True)
    assert np.array_equal(u, np.sort(keys)) and np.array_equal(counts, cweights[order])


def test_refinement_lowers_the_cut_and_keeps_the_caps(graph):
    _, indptr, indices, vw = graph
    rng = np.random.default_rng(0)
    part = np.empty(vw.shape[0], dtype=np.int64)
    part[rng.permutation(vw.shape[0])] = np.arange(vw.shape[0]) % 4
    before = edge_cut(indptr, indices, part)
    moves = coarsen.refine(indptr, indices, part, 4, vw, 1.03)
    after = edge_cut(indptr, indices, part)
    assert moves > 0 and after < 0.8 * before
    assert balance(vw, part, 4).max() <= 1.03 + 1e-9
    with pytest.raises(TypeError):
        coarsen.refine(indptr, indices, part.astype(np.int32), 4, vw, 1.03)


def test_lp_metis_cut_close_to_plain_metis_and_balanced(graph):
    _, indptr, indices, vw = graph
    stats = coarsen.CoarsenStats()
    part = coarsen.lp_metis(indptr, indices, 8, vw, part_graph_kway, imbalance=1.03, seed=0,
                            clusters_per_part=16, stats=stats)
    plain, _ = part_graph_kway(indptr, indices, 8, vwgt=vw, ubvec=1.03, seed=0)
    cut, cut_plain = edge_cut(indptr, indices, part), edge_cut(indptr, indices, plain)
    assert cut <= 1.05 * cut_plain, (cut, cut_plain)
    assert balance(vw, part, 8).max() <= 1.05
    levels = stats.levels
    assert levels[0]["vertices"] == vw.shape[0] and len(levels) >= 2
    assert all(a["vertices"] > b["vertices"] and a["entries"] > b["entries"] for a, b in pairwise(levels))
    assert levels[-1]["vertices"] <= 2 * 8 * 16  # coarsened down to the target: 2 x parts x clusters_per_part


def test_coarsen_option_through_partition_graph(graph, tmp_path):
    store = graph[0]
    lp = partition_graph(store, "metis", 4, tmp_path / "lp", constraints=NAMES, coarsen="lp")
    none = partition_graph(store, "metis", 4, tmp_path / "none", constraints=NAMES, coarsen="none")
    auto = partition_graph(store, "metis", 4, tmp_path / "auto", constraints=NAMES)  # 240k entries: below 2^21
    assert lp.meta.extra["coarsen"] == "lp" and len(lp.meta.extra["coarsening"]["levels"]) >= 2
    assert none.meta.extra["coarsen"] == "none" and "metis_objective" in none.meta.extra
    assert auto.meta.extra["coarsen"] == "none"
    assert max(lp.quality["balance"].values()) <= 1.05
    assert lp.quality["edge_cut_pct"] <= 1.05 * none.quality["edge_cut_pct"]
    # the other METIS-based methods take the option too
    edge = partition_graph(store, "edge", 4, tmp_path / "edge", coarsen="lp")
    assert edge.meta.extra["coarsen"] == "lp"
    with pytest.raises(ConfigError, match="--coarsen must be one of"):
        partition_graph(store, "metis", 4, tmp_path / "bad", coarsen="fast")
    with pytest.raises(ConfigError, match="libmetis backend"):
        partition_graph(store, "metis", 4, tmp_path / "bad", coarsen="lp", backend="pymetis")
    assert not (tmp_path / "bad").exists()


def test_missing_kernels_auto_falls_back_and_lp_says_how_to_build(graph, tmp_path, monkeypatch):
    from gnnflow.partition import metis

    store = graph[0]
    monkeypatch.setattr(coarsen, "_kernels", None)
    monkeypatch.setitem(sys.modules, "gnnflow.partition._lpkernels", None)  # import fails
    monkeypatch.delattr(sys.modules["gnnflow.partition"], "_lpkernels", raising=False)
    monkeypatch.setattr(metis, "AUTO_COARSEN_ENTRIES", 1)
    book = partition_graph(store, "metis", 4, tmp_path / "auto", constraints=NAMES)
    assert book.meta.extra["coarsen"] == "none" and "compiled partitioning kernels" in book.meta.extra["coarsen_fallback"]
    with pytest.raises(ConfigError, match="reinstall with a C compiler"):
        partition_graph(store, "metis", 4, tmp_path / "lp", constraints=NAMES, coarsen="lp")
    assert not (tmp_path / "lp").exists()
