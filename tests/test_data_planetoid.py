"""Planetoid (Cora/CiteSeer/PubMed) from tiny files in the original ind.<name>.* format."""

from __future__ import annotations

import pickle
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp

from gnnflow.cli import main as cli
from gnnflow.data.planetoid import read_planetoid
from gnnflow.data.store import open_store


def write_planetoid(d, name, test_ids, n_allx=10, n_train=4, classes=3, dim=6, seed=0):
    """Files as Planetoid ships them: scipy sparse x/allx/tx, one-hot y, dict graph."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    allx = sp.csr_matrix((rng.random((n_allx, dim)) > 0.5).astype(np.float32))
    ally = np.eye(classes)[rng.integers(0, classes, n_allx)]
    tx = sp.csr_matrix((rng.random((len(test_ids), dim)) > 0.5).astype(np.float32) * 2)
    ty = np.eye(classes)[rng.integers(0, classes, len(test_ids))]
    n = n_allx + (max(test_ids) - min(test_ids) + 1)
    graph = defaultdict(list)
    for u in range(n):
        graph[u] += [int(v) for v in rng.integers(0, n, 2)]
    graph[0].append(0)  # a self-loop, as in the real files
    objs = {"x": allx[:n_train], "y": ally[:n_train], "allx": allx, "ally": ally, "tx": tx,
            "ty": ty, "graph": graph}
    for k, v in objs.items():
        with open(d / f"ind.{name}.{k}", "wb") as fh:
            pickle.dump(v, fh, protocol=2)
    (d / f"ind.{name}.test.index").write_text("\n".join(map(str, test_ids)) + "\n")
    return objs


def test_cora_public_split_and_test_reordering(tmp_path, capsys):
    test_ids = [12, 10, 14, 11, 13]  # file order differs from sorted order
    objs = write_planetoid(tmp_path / "raw", "cora", test_ids)
    assert cli(["prepare", "cora", "--raw-dir", str(tmp_path / "raw"),
                "--out", str(tmp_path / "g")]) == 0
    s = open_store(tmp_path / "g")
    assert s.num_nodes == 15 and s.num_classes == 3
    assert np.array_equal(s.train_idx, np.arange(4))
    assert np.array_equal(s.val_idx, np.arange(4, 15))  # min(n, 4 + 500)
    assert np.array_equal(s.test_idx, np.arange(10, 15))
    tx, ty = objs["tx"].toarray(), objs["ty"].argmax(1)
    for j, t in enumerate(test_ids):  # tx row j belongs to test id test_ids[j]
        assert np.array_equal(s.features[t], tx[j]) and s.labels[t] == ty[j]
    assert np.array_equal(s.features[:10], objs["allx"].toarray())
    # Undirected, no self-loops, every listed edge present.
    for u, vs in objs["graph"].items():
        for v in vs:
            if u != v:
                assert u in s.indices[s.indptr[v]:s.indptr[v + 1]]
                assert v in s.indices[s.indptr[u]:s.indptr[u + 1]]
    assert all(u not in s.indices[s.indptr[u]:s.indptr[u + 1]] for u in range(15))


def test_citeseer_isolated_test_vertices(tmp_path):
    test_ids = [13, 10, 14, 11]  # 12 is missing: an isolated vertex without features
    objs = write_planetoid(tmp_path / "raw", "citeseer", test_ids)
    d = read_planetoid(tmp_path / "raw", "CiteSeer")
    assert d["features"].shape[0] == 15
    assert np.all(d["features"][12] == 0) and d["labels"][12] == -1
    for j, t in enumerate(test_ids):
        assert np.array_equal(d["features"][t], objs["tx"].toarray()[j])
    assert np.array_equal(d["test_idx"], [10, 11, 13, 14])


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_bad_planetoid_files(tmp_path, capsys, damage):
    write_planetoid(tmp_path / "raw", "pubmed", [10, 11, 12])
    f = tmp_path / "raw" / "ind.pubmed.allx"
    if damage == "missing":
        f.unlink()
    else:
        f.write_bytes(f.read_bytes()[:30])
    out = tmp_path / "g"
    assert cli(["prepare", "planetoid", "pubmed", "--raw-dir", str(tmp_path / "raw"),
                "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "ind.pubmed.allx" in err and err.count("\n") == 1 and not out.exists()


def test_row_normalized_features(tmp_path, capsys):
    """The standard Planetoid preprocessing: each bag-of-words row divided by its sum."""
    objs = write_planetoid(tmp_path / "raw", "cora", [12, 10, 14, 11, 13])
    assert cli(["prepare", "cora", "--raw-dir", str(tmp_path / "raw"), "--out", str(tmp_path / "g"),
                "--normalize-features", "row"]) == 0
    s = open_store(tmp_path / "g")
    assert s.meta.feature_normalization == "row"
    allx = objs["allx"].toarray()
    sums = allx.sum(1, keepdims=True)
    np.testing.assert_allclose(s.features[:10], np.where(sums > 0, allx / np.maximum(sums, 1), 0),
                               rtol=1e-6)
