"""Synthetic generator: structure, determinism, homophily knob, GNN-vs-MLP gap, scale."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

from gnnflow.data.csr import csr_to_coo, is_symmetric
from gnnflow.data.synthetic import DEFAULTS, generate_synthetic, prepare_synthetic
from gnnflow.errors import ConfigError


def _small(**kw):
    args = dict(num_nodes=3000, avg_degree=10, feature_dim=16, num_classes=4, seed=1)
    args.update(kw)
    return generate_synthetic(**args)


def test_structure_undirected_no_loops_no_duplicates_exact_count():
    d = _small()
    ip, ix = d["indptr"], d["indices"]
    n = ip.shape[0] - 1
    assert ip[-1] == ix.shape[0] == 2 * round(3000 * 10 / 2)
    src, dst = csr_to_coo(ip, ix)
    assert not np.any(src == dst)
    assert np.unique(dst * n + src).shape[0] == ix.shape[0]
    assert is_symmetric(ip, ix)
    # Rows are sorted, nobody is isolated (one guaranteed edge per vertex).
    assert all(np.all(np.diff(ix[ip[v]:ip[v + 1]]) > 0) for v in range(0, n, 97))
    assert np.diff(ip).min() >= 1
    assert d["features"].shape == (3000, 16) and d["features"].dtype == np.float32
    splits = np.concatenate([d["train_idx"], d["val_idx"], d["test_idx"]])
    assert np.array_equal(np.sort(splits), np.arange(n))
    assert d["train_idx"].shape[0] == round(DEFAULTS["train_frac"] * n)


def test_power_law_degrees():
    deg = np.diff(_small(num_nodes=20000)["indptr"])
    # Heavy tail: the top 1% of vertices hold far more than 1% of edge endpoints,
    # and the maximum is many times the mean.
    top = np.sort(deg)[-200:].sum() / deg.sum()
    assert top > 0.08
    assert deg.max() > 15 * deg.mean()


def test_deterministic_from_seed():
    a, b, c = _small(seed=5), _small(seed=5), _small(seed=6)
    for k in ("indptr", "indices", "features", "labels", "train_idx"):
        assert np.array_equal(a[k], b[k])
    assert not np.array_equal(a["indices"], c["indices"])


@pytest.mark.parametrize("h", [0.0, 0.5, 0.9])
def test_homophily_knob(h):
    d = _small(homophily=h)
    src, dst = csr_to_coo(d["indptr"], d["indices"])
    same = float(np.mean(d["labels"][src] == d["labels"][dst]))
    expected = h + (1 - h) / 4  # other endpoint drawn from the whole graph otherwise
    assert abs(same - expected) < 0.05


def test_train_classes_concentrates_training_split():
    d = _small(num_classes=8, train_frac=0.05, train_classes=2)
    labels, n = d["labels"], 3000
    assert d["train_idx"].shape[0] == round(0.05 * n)
    assert set(np.unique(labels[d["train_idx"]])) == {0, 1}
    # validation and test come from all classes and the three splits still cover every vertex once
    assert np.unique(labels[d["val_idx"]]).shape[0] == 8
    splits = np.concatenate([d["train_idx"], d["val_idx"], d["test_idx"]])
    assert np.array_equal(np.sort(splits), np.arange(n))
    assert d["val_idx"].shape[0] == round(DEFAULTS["val_frac"] * n)
    assert d["meta"]["generator"]["train_classes"] == 2


def test_train_classes_all_equals_default_split():
    a, b = _small(), _small(train_classes=4)
    for k in ("train_idx", "val_idx", "test_idx", "indices", "features"):
        assert np.array_equal(a[k], b[k])
    assert "train_classes" not in a["meta"]["generator"]


def test_bad_options():
    with pytest.raises(ConfigError, match="--homophily"):
        _small(homophily=1.5)
    with pytest.raises(ConfigError, match="--train-frac"):
        _small(train_frac=0.9, val_frac=0.2)
    with pytest.raises(ConfigError, match="--train-classes must be in"):
        _small(train_classes=5)
    with pytest.raises(ConfigError, match="--train-classes 1: classes 0..0 hold"):
        _small(train_classes=1, train_frac=0.5, val_frac=0.1)


def _ridge_accuracy(x, y, train, test, lam=1.0):
    """A least-squares (ridge) linear classifier: deterministic and fast."""
    x = np.concatenate([x, np.ones((x.shape[0], 1), np.float32)], axis=1).astype(np.float64)
    target = np.eye(int(y.max()) + 1)[y[train]]
    w = np.linalg.solve(x[train].T @ x[train] + lam * np.eye(x.shape[1]), x[train].T @ target)
    return float(np.mean((x[test] @ w).argmax(axis=1) == y[test]))


def test_default_graph_gnn_beats_mlp_by_20_points():
    """Acceptance 3: the class signal of the default graph is in the edges.

    A linear classifier on the features alone against the same classifier on
    2-hop sampled-neighbour means (a GraphSAGE-like propagation with fanout 5,
    weaker than any trained GNN).
    """
    d = generate_synthetic(**DEFAULTS)
    ip, ix, x, y = d["indptr"], d["indices"], d["features"], d["labels"]
    n = ip.shape[0] - 1
    rng = np.random.default_rng(0)

    def sampled_mean(h, k=5):
        deg = np.diff(ip)
        nb = ix[ip[:-1, None] + rng.integers(0, 1 << 30, (n, k)) % deg[:, None]]
        return h[nb].mean(axis=1)

    h1 = np.concatenate([x, sampled_mean(x)], axis=1)
    h2 = np.concatenate([h1, sampled_mean(h1)], axis=1).astype(np.float32)
    acc_mlp = _ridge_accuracy(x, y, d["train_idx"], d["test_idx"])
    acc_gnn = _ridge_accuracy(h2, y, d["train_idx"], d["test_idx"])
    print(f"features only {acc_mlp:.3f}, 2-hop sampled propagation {acc_gnn:.3f}")
    assert acc_gnn - acc_mlp >= 0.20


def test_prepare_writes_store(tmp_path):
    s = prepare_synthetic(tmp_path / "g", num_nodes=500, avg_degree=6, feature_dim=8,
                          num_classes=3, seed=2)
    assert s.num_nodes == 500 and s.num_edges == 3000 and s.feature_dim == 8
    assert s.meta.extra["generator"]["seed"] == 2 and not s.meta.directed
    assert not list(tmp_path.glob(".*"))  # no scratch files left


@pytest.mark.slow
def test_one_million_nodes_twenty_million_edges_time_and_memory(tmp_path):
    """Acceptance 2: 1M nodes / 20M edges in < 120 s, peak RSS < 3x output size."""
    out = tmp_path / "big"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "gnnflow.cli", "prepare", "synthetic", "--out", str(out),
         "--nodes", "1000000", "--avg-degree", "20", "--feature-dim", "64"],
        capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wall {wall:.1f} s, peak RSS {peak / 2**20:.0f} MiB, output {size / 2**20:.0f} MiB")
    info = json.loads(proc.stdout)
    assert info["statistics"]["num_nodes"] == 1_000_000
    assert info["statistics"]["num_edges"] == 20_000_000
    assert wall < 120
    assert peak < 3 * size


@pytest.mark.slow
def test_default_graph_dgl_sage_beats_mlp():
    """Acceptance 3 with a peer GNN: DGL's 2-layer GraphSAGE against a 2-layer MLP,
    both trained 50 full-batch epochs on the default graph."""
    dgl = pytest.importorskip("dgl")
    import torch
    from dgl.nn import SAGEConv

    d = generate_synthetic(**DEFAULTS)
    n = d["indptr"].shape[0] - 1
    dst = np.repeat(np.arange(n), np.diff(d["indptr"]))
    g = dgl.graph((torch.from_numpy(d["indices"]), torch.from_numpy(dst)), num_nodes=n)
    x, y = torch.from_numpy(d["features"]), torch.from_numpy(d["labels"])
    tr, te = torch.from_numpy(d["train_idx"]), torch.from_numpy(d["test_idx"])
    c = int(y.max()) + 1

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = SAGEConv(x.shape[1], 64, "mean"), SAGEConv(64, c, "mean")

        def forward(self, h):
            return self.l2(g, torch.relu(self.l1(g, h)))

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, c))

    accs = {}
    for name, make in (("mlp", mlp), ("sage", Sage)):
        torch.manual_seed(0)
        model = make()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(50):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x)[tr], y[tr]).backward()
            opt.step()
        with torch.no_grad():
            accs[name] = float((model(x)[te].argmax(1) == y[te]).float().mean())
    print(accs)
    assert accs["sage"] - accs["mlp"] >= 0.20
