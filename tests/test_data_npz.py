"""``prepare npz``: Shchur et al.'s ``.npz`` graphs (Amazon, Coauthor, CitationFull), written here
with numpy in that exact layout; the per-class split (also for ``import``); bad files in one line."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
import scipy.sparse as sp

from gnnflow.cli import main as cli
from gnnflow.data.store import open_store

CLASS_SIZES = (40, 40, 40, 10)  # the last class has fewer than K + M = 12 vertices
N = sum(CLASS_SIZES)


def write_shchur_npz(path: pathlib.Path, dense: bool = False, seed: int = 0, **override) -> dict:
    """A graph .npz as Shchur et al.'s files hold one: the adjacency and attributes as scipy CSR
    arrays (rows of the adjacency are sources; a self-loop, duplicates and one-way edges
    included), labels, and the pickled object arrays of names that the real files carry."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, N, 4 * N)
    dst = rng.integers(0, N, 4 * N)
    src[0] = dst[0] = 5  # a self-loop
    adj = sp.csr_matrix((np.ones(src.shape[0], np.float32), (src, dst)), shape=(N, N))
    adj.sum_duplicates()
    attr = sp.random(N, 9, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    attr.data = np.round(attr.data * 3) + 1  # counts 1..4 (binarized: 1)
    labels = rng.permutation(np.repeat(np.arange(len(CLASS_SIZES)), CLASS_SIZES))
    arrays = {"adj_data": adj.data, "adj_indices": adj.indices, "adj_indptr": adj.indptr,
              "adj_shape": np.array(adj.shape), "labels": labels,
              "node_names": np.array([f"v{i}" for i in range(N)], dtype=object),
              "class_names": np.array([f"class {c}" for c in range(len(CLASS_SIZES))], dtype=object),
              "idx_to_node": np.array({i: f"v{i}" for i in range(N)}, dtype=object)}
    if dense:
        arrays["attr_matrix"] = attr.toarray()
    else:
        arrays.update(attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
                      attr_shape=np.array(attr.shape))
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return {"src": src, "dst": dst, "attr": attr.toarray(), "labels": labels}


def _edges(store) -> set[tuple[int, int]]:
    out = set()
    for v in range(store.num_nodes):
        out |= {(int(u), v) for u in store.indices[store.indptr[v]:store.indptr[v + 1]]}
    return out


@pytest.mark.parametrize("dense", [False, True], ids=["sparse-attributes", "attr_matrix"])
def test_npz_graph_features_labels_and_per_class_split(tmp_path, dense):
    raw = write_shchur_npz(tmp_path / "g.npz", dense=dense)
    args = ["prepare", "npz", str(tmp_path / "g.npz"), "--train-per-class", "5", "--val-per-class", "7",
            "--seed", "3"]
    if dense:
        args.append("--binarize-features")
    assert cli([*args, "--out", str(tmp_path / "s")]) == 0
    s = open_store(tmp_path / "s")
    # undirected as PyG reads these files: both directions, no self-loop, no duplicate
    one_way = {(int(a), int(b)) for a, b in zip(raw["src"], raw["dst"], strict=True) if a != b}
    assert _edges(s) == one_way | {(b, a) for a, b in one_way}
    assert s.meta.source == "npz" and not s.meta.directed and s.meta.extra["symmetrized"]
    want = np.where(raw["attr"] > 0, 1.0, raw["attr"]) if dense else raw["attr"]
    assert s.features.dtype == np.float32 and np.array_equal(s.features, want.astype(np.float32))
    assert np.array_equal(s.labels, raw["labels"]) and s.num_classes == len(CLASS_SIZES)
    # exact per-class counts; the short class gives what it has, training first
    for c, size in enumerate(CLASS_SIZES):
        counts = [int((s.labels[np.asarray(getattr(s, f"{k}_idx"))] == c).sum()) for k in ("train", "val", "test")]
        assert counts == ([5, 7, size - 12] if size >= 12 else [5, size - 5, 0]), (c, counts)
    every = np.concatenate([s.train_idx, s.val_idx, s.test_idx])
    assert np.array_equal(np.sort(every), np.arange(N))  # disjoint, every labelled vertex once
    assert "class (vertices)" not in s.meta.extra["split"] and "3 (10)" in s.meta.extra["split"]


def test_npz_split_is_reproducible_and_directed_keeps_rows(tmp_path):
    raw = write_shchur_npz(tmp_path / "g.npz")
    for out, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        assert cli(["prepare", "npz", str(tmp_path / "g.npz"), "--seed", seed, "--directed",
                    "--train-per-class", "3", "--val-per-class", "2", "--out", str(tmp_path / out)]) == 0
    a, b, c = (open_store(tmp_path / x) for x in "abc")
    assert np.array_equal(a.train_idx, b.train_idx) and np.array_equal(a.val_idx, b.val_idx)
    assert not np.array_equal(a.train_idx, c.train_idx)
    assert _edges(a) == {(int(u), int(v)) for u, v in zip(raw["src"], raw["dst"], strict=True) if u != v}
    assert a.meta.directed


def test_import_draws_a_per_class_split(tmp_path):
    from tests.test_data_import import _byo

    _byo(tmp_path / "in", split="none")
    assert cli(["prepare", "import", str(tmp_path / "in"), "--split", "per-class", "--train-per-class", "2",
                "--val-per-class", "3", "--out", str(tmp_path / "s")]) == 0
    s = open_store(tmp_path / "s")
    for c in range(3):
        assert int((s.labels[s.train_idx] == c).sum()) == 2 and int((s.labels[s.val_idx] == c).sum()) == 3
    assert s.meta.extra["split"].startswith("per-class (2 train, 3 val per class")


class RunsShell:
    """Unpickling calls os.system."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _fails(tmp_path, capsys, needle: str, *extra: str) -> None:
    """Exit 1, one line naming the file (or the setting given in ``extra``), nothing written."""
    out = tmp_path / "out"
    assert cli(["prepare", "npz", str(tmp_path / "bad.npz"), *extra, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("gnnflow prepare: error: "), err
    assert (extra or str(tmp_path / "bad.npz") in err) and needle in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_bad_npz_files_fail_in_one_line(tmp_path, capsys):
    marker = tmp_path / "pwned"
    write_shchur_npz(tmp_path / "bad.npz", labels=np.array([RunsShell(marker)] * N, dtype=object))
    _fails(tmp_path, capsys, "key 'labels' holds a pickled object array")
    assert not marker.exists()
    good = write_shchur_npz(tmp_path / "good.npz")
    indices = np.load(tmp_path / "good.npz")["adj_indices"].copy()
    indices[7] = N
    write_shchur_npz(tmp_path / "bad.npz", adj_indices=indices)
    _fails(tmp_path, capsys, f"key 'adj_indices' holds column {N}, outside [0, {N})")
    write_shchur_npz(tmp_path / "bad.npz", adj_indptr=None)
    _fails(tmp_path, capsys, "no key 'adj_indptr'")
    write_shchur_npz(tmp_path / "bad.npz", labels=good["labels"][:-1])
    _fails(tmp_path, capsys, f"key 'labels' has {N - 1} labels for {N} vertices")
    write_shchur_npz(tmp_path / "bad.npz", attr_shape=np.array([N + 1, 9]))
    _fails(tmp_path, capsys, f"key 'attr_shape' has {N + 1} rows for {N} vertices")
    (tmp_path / "bad.npz").write_bytes((tmp_path / "good.npz").read_bytes()[:200])
    _fails(tmp_path, capsys, "cannot read")
    write_shchur_npz(tmp_path / "bad.npz")
    _fails(tmp_path, capsys, "--train-per-class 0", "--train-per-class", "0")


def test_minibatch_recipe_trains_on_an_npz_graph(tmp_path):
    """``config/recipes/sage-minibatch-npz.yaml`` reads as documented and trains on a prepared .npz."""
    import json

    from gnnflow.bench.recipes import DEFAULT_RECIPES

    write_shchur_npz(tmp_path / "g.npz")
    assert cli(["prepare", "npz", str(tmp_path / "g.npz"), "--train-per-class", "5", "--val-per-class", "5",
                "--out", str(tmp_path / "s")]) == 0
    recipe = DEFAULT_RECIPES / "sage-minibatch-npz.yaml"
    assert cli(["train", "--config", str(recipe), "--graph", str(tmp_path / "s"), "--epochs", "2",
                "--out", str(tmp_path / "run")]) == 0
    cfg = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert cfg["strategy"] == "single" and cfg["model"] == "sage" and cfg["aggregator"] == "mean"
    assert cfg["fanouts"] == [10, 25] and cfg["batch_size"] == 64 and not cfg["options"].get("full_batch")
    assert (tmp_path / "run" / "model-best.pt").exists()
