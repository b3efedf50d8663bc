"""``prepare magnn``: MAGNN's heterogeneous DBLP files (PyG's raw layout), written here with numpy and
scipy in that exact layout; the homogenized store's types, counts, edges, labels and split; bad
files in one line naming the file."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
import scipy.sparse as sp

from gnnflow.cli import main as cli
from gnnflow.data.hetero import TypeMap
from gnnflow.data.homogenize import heterogenize
from gnnflow.data.store import open_store

# DBLP's schema at a tiny size: authors (labelled, 3 classes), papers, terms, conferences (featureless)
COUNTS = {"author": 12, "paper": 16, "term": 7, "conference": 3}
TYPES = tuple(COUNTS)


def write_magnn_dblp(raw: pathlib.Path, seed: int = 0, **override) -> dict:
    """MAGNN's DBLP files: ``node_types.npy`` (int32), the symmetric ``adjM.npz`` over global ids
    and the author and paper features as ``scipy.sparse.save_npz`` csr files, the term features
    a dense float64 ``.npy``, ``labels.npy`` (int64) and ``train_val_test_idx.npz`` (int32 ids).
    ``override``: file name -> replacement content (an array or bytes) or None to leave it out."""
    rng = np.random.default_rng(seed)
    raw.mkdir(parents=True, exist_ok=True)
    off = dict(zip(TYPES, np.cumsum([0, *COUNTS.values()])[:-1].tolist(), strict=True))
    n = sum(COUNTS.values())
    writes = {(int(a), int(p)) for a, p in zip(rng.integers(0, 12, 30), rng.integers(0, 16, 30), strict=True)}
    has_term = {(int(p), int(t)) for p, t in zip(rng.integers(0, 16, 25), rng.integers(0, 7, 25), strict=True)}
    published_in = {(p, int(rng.integers(0, 3))) for p in range(16)}
    pairs = [(off["author"] + a, off["paper"] + p) for a, p in writes]
    pairs += [(off["paper"] + p, off["term"] + t) for p, t in has_term]
    pairs += [(off["paper"] + p, off["conference"] + c) for p, c in published_in]
    src, dst = np.array(pairs).T
    adj = sp.csr_matrix((np.ones(2 * len(pairs), np.int32), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    files = {
        "node_types.npy": np.repeat(np.arange(4, dtype=np.int32), list(COUNTS.values())),
        "adjM.npz": adj,
        "features_0.npz": sp.random(12, 9, density=0.4, format="csr", random_state=seed, dtype=np.float64),
        "features_1.npz": sp.random(16, 11, density=0.3, format="csr", random_state=seed + 1, dtype=np.float64),
        "features_2.npy": rng.standard_normal((7, 5)),
        "labels.npy": rng.integers(0, 3, 12).astype(np.int64),
        "train_val_test_idx.npz": {"train_idx": np.arange(0, 5, dtype=np.int32),
                                   "val_idx": np.arange(5, 8, dtype=np.int32),
                                   "test_idx": np.arange(8, 12, dtype=np.int32)},
    }
    files.update(override)
    for name, content in files.items():
        if content is None:
            continue
        if isinstance(content, bytes):
            (raw / name).write_bytes(content)
        elif sp.issparse(content):
            sp.save_npz(raw / name, content)
        elif isinstance(content, dict):
            np.savez(raw / name, **content)
        else:
            np.save(raw / name, content)
    return {"writes": writes, "has_term": has_term, "published_in": published_in, **files}


def _pairs(edges: tuple[np.ndarray, np.ndarray]) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in zip(*edges, strict=True)}


def test_magnn_dblp_types_edges_labels_split(tmp_path, capsys):
    raw = write_magnn_dblp(tmp_path / "raw")
    assert cli(["prepare", "magnn", "dblp", "--raw-dir", str(tmp_path / "raw"), "--out", str(tmp_path / "s")]) == 0
    summary = json.loads(capsys.readouterr().out)
    store = open_store(tmp_path / "s")
    tm = TypeMap.from_store(store)
    assert tm.node_types == sorted(TYPES) and {t: tm.num_nodes_of(t) for t in TYPES} == COUNTS
    assert store.meta.target_node_type == "author" and store.num_classes == 3
    assert store.meta.source == "magnn" and store.meta.name == "dblp"
    assert set(store.meta.extra["raw_files"]) == {"node_types.npy", "adjM.npz", "features_0.npz", "features_1.npz",
                                                   "features_2.npy", "labels.npy", "train_val_test_idx.npz"}
    hg = heterogenize(store, include_reverse=True)
    assert _pairs(hg.edges[("author", "writes", "paper")]) == raw["writes"]
    assert _pairs(hg.edges[("paper", "has_term", "term")]) == raw["has_term"]
    assert _pairs(hg.edges[("paper", "published_in", "conference")]) == raw["published_in"]
    # each undirected edge once per direction: a relation and its reverse, nothing else
    assert _pairs(hg.edges[("paper", "rev_writes", "author")]) == {(p, a) for a, p in raw["writes"]}
    assert len(hg.edges) == 6 and store.num_edges == 2 * (len(raw["writes"]) + len(raw["has_term"]) + 16)
    assert summary["statistics"]["nodes_per_type"] == COUNTS and summary["statistics"]["splits"] == {"train": 5, "val": 3, "test": 4}
    # features at their own widths, the conferences featureless
    assert np.array_equal(hg.features["author"], raw["features_0.npz"].toarray().astype(np.float32))
    assert np.array_equal(hg.features["paper"], raw["features_1.npz"].toarray().astype(np.float32))
    assert np.array_equal(hg.features["term"], raw["features_2.npy"].astype(np.float32))
    assert "conference" not in hg.features and "features_conference" not in store.extra
    # labels on authors only; the dataset's own split, as author ids
    assert np.array_equal(hg.labels["author"], raw["labels.npy"]) and set(hg.labels) == {"author"}
    for split, key in (("train", "train_idx"), ("val", "val_idx"), ("test", "test_idx")):
        assert set(hg.splits[split]) == {"author"}
        assert np.array_equal(hg.splits[split]["author"], raw["train_val_test_idx.npz"][key])
    assert store.meta.extra["split"].startswith("the dataset's own")


def _fails(tmp_path, capsys, bad_file: str, needle: str) -> None:
    """Exit 1, one line naming the bad file, nothing written."""
    out = tmp_path / "out"
    assert cli(["prepare", "magnn", "dblp", "--raw-dir", str(tmp_path / "raw"), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("gnnflow prepare: error: "), err
    assert str(tmp_path / "raw" / bad_file) in err and needle in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


class RunsShell:
    """Unpickling calls os.system."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("bad_file, content, needle", [
    ("labels.npy", None, "no such file"),
    ("labels.npy", np.zeros(11, np.int64), "11 labels for 12 author vertices"),
    ("node_types.npy", np.repeat(np.array([0, 1, 3, 2], np.int32), [12, 16, 3, 7]),
     "the types must be contiguous ranges in type order"),
    ("node_types.npy", np.repeat(np.arange(5, dtype=np.int32), [12, 16, 7, 2, 1]), "holds type 4"),
    ("adjM.npz", sp.csr_matrix(([1], ([0], [28])), shape=(38, 38)), "edges join author and term vertices"),
    ("adjM.npz", sp.csr_matrix((5, 5)), "key 'shape' has 5 rows for 38 vertices"),
    ("adjM.npz", sp.csc_matrix((38, 38)), "expected a scipy.sparse.save_npz file of a csr matrix"),
    ("adjM.npz", b"not a zip", "cannot read as a numpy .npz archive"),
    ("features_1.npz", sp.random(15, 11, density=0.3, format="csr"), "15 rows for 16 vertices"),
    ("features_2.npy", np.ones((7, 5)) * np.inf, "not finite"),
    ("train_val_test_idx.npz", {"train_idx": np.arange(5), "val_idx": np.arange(4, 8), "test_idx": np.arange(8, 12)},
     "train_idx and val_idx both hold author 4"),
    ("train_val_test_idx.npz", {"train_idx": np.arange(5), "test_idx": np.arange(8, 12)}, "no key 'val_idx'"),
    ("train_val_test_idx.npz", {"train_idx": np.arange(5), "val_idx": np.arange(5, 8), "test_idx": np.arange(8, 13)},
     "key 'test_idx' holds 12, outside the 12 author ids"),
], ids=["missing", "label-count", "type-order", "unknown-type", "no-relation", "adj-shape", "csc", "not-npz",
        "feature-rows", "inf", "overlap", "split-key", "split-range"])
def test_bad_magnn_files_fail_in_one_line(tmp_path, capsys, bad_file, content, needle):
    write_magnn_dblp(tmp_path / "raw", **{bad_file: content})
    _fails(tmp_path, capsys, bad_file, needle)


def test_pickled_magnn_file_is_refused_and_never_run(tmp_path, capsys):
    marker = tmp_path / "pwned"
    write_magnn_dblp(tmp_path / "raw", **{"labels.npy": np.array([RunsShell(marker)] * 12, dtype=object)})
    _fails(tmp_path, capsys, "labels.npy", "holds a pickled object array; refused")
    assert not marker.exists()
    write_magnn_dblp(tmp_path / "raw", **{"labels.npy": np.zeros(12, np.int64), "features_2.npz": sp.eye(7, 5).tocsr()})
    _fails(tmp_path, capsys, "features_2.npz", "features_2.npy is there too")


def test_unknown_magnn_dataset_and_missing_directory(tmp_path, capsys):
    assert cli(["prepare", "magnn", "acm", "--raw-dir", str(tmp_path), "--out", str(tmp_path / "s")]) == 1
    assert "unknown dataset 'acm'; choose one of dblp, imdb" in capsys.readouterr().err
    assert cli(["prepare", "magnn", "dblp", "--raw-dir", str(tmp_path / "none"), "--out", str(tmp_path / "s")]) == 1
    assert f"{tmp_path / 'none'}: no such directory" in capsys.readouterr().err
