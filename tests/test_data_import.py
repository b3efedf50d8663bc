"""`import` source, the prepare/info CLI, and bad-input handling (acceptance 4)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gnnflow.cli import main as cli
from gnnflow.data.store import open_store


def _byo(d, n=30, fmt="npy", split="idx", seed=0):
    """A bring-your-own-graph directory: ring + chords, features, labels, split."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    src = np.concatenate([np.arange(n), rng.integers(0, n, n)])
    dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, n)])
    if fmt == "npy":
        np.save(d / "edges.npy", np.stack([src, dst], axis=1))
    elif fmt == "csv":
        pd.DataFrame({"src": src, "dst": dst}).to_csv(d / "edges.csv", index=False)
    elif fmt == "parquet":
        pd.DataFrame({"src": src, "dst": dst}).to_parquet(d / "edges.parquet")
    np.save(d / "features.npy", rng.standard_normal((n, 5)).astype(np.float32))
    np.save(d / "labels.npy", rng.integers(0, 3, n))
    if split == "idx":
        np.save(d / "train_idx.npy", np.arange(0, 10))
        np.save(d / "val_idx.npy", np.arange(10, 20))
        np.save(d / "test_idx.npy", np.arange(20, n))
    elif split == "mask":
        for name, lo, hi in (("train", 0, 12), ("val", 12, 18), ("test", 18, n)):
            m = np.zeros(n, bool)
            m[lo:hi] = True
            np.save(d / f"{name}_mask.npy", m)
    return src, dst


@pytest.mark.parametrize("fmt,split", [("npy", "idx"), ("csv", "mask"), ("parquet", "none")])
def test_import_formats(tmp_path, capsys, fmt, split):
    src, dst = _byo(tmp_path / "in", fmt=fmt, split=split)
    assert cli(["prepare", "import", str(tmp_path / "in"), "--out", str(tmp_path / "g")]) == 0
    s = open_store(tmp_path / "g")
    n = 30
    keys = {(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a != b}
    keys |= {(b, a) for a, b in keys}
    got = set()
    for v in range(n):
        got |= {(int(u), v) for u in s.indices[s.indptr[v]:s.indptr[v + 1]]}
    assert got == keys
    assert np.array_equal(s.labels, np.load(tmp_path / "in" / "labels.npy"))
    assert np.array_equal(s.features, np.load(tmp_path / "in" / "features.npy"))
    if split == "idx":
        assert np.array_equal(s.train_idx, np.arange(10))
    elif split == "mask":
        assert np.array_equal(s.val_idx, np.arange(12, 18))
    else:
        assert s.meta.extra["split"].startswith("random")
        assert len(s.train_idx) + len(s.val_idx) + len(s.test_idx) == n
    info = json.loads(capsys.readouterr().out)
    assert info["statistics"]["num_nodes"] == n


def test_info_prints_statistics_and_verifies_checksums(tmp_path, capsys, monkeypatch):
    assert cli(["prepare", "synthetic", "--out", str(tmp_path / "g"), "--nodes", "400",
                "--avg-degree", "6", "--classes", "4", "--feature-dim", "8"]) == 0
    capsys.readouterr()
    assert cli(["info", str(tmp_path / "g"), "--verify-checksums"]) == 0
    info = json.loads(capsys.readouterr().out)
    st = info["statistics"]
    assert st["num_nodes"] == 400 and st["num_edges"] == 2400
    assert st["in_degree"]["mean"] == 6.0 and st["isolated_vertices"] == 0
    assert sum(st["class_histogram"]) == 400 and len(st["class_histogram"]) == 4
    assert st["splits"] == {"train": 200, "val": 80, "test": 120}
    assert info["checksums_ok"] and "checksums" not in info["meta"]
    # A changed small array is caught on every open ...
    lab = np.load(tmp_path / "g" / "labels.npy")
    lab[0] = (lab[0] + 1) % 4
    np.save(tmp_path / "g" / "labels.npy", lab)
    assert cli(["info", str(tmp_path / "g")]) == 1
    assert "labels.npy: checksum differs from meta.json" in capsys.readouterr().err
    # ... a big one (here: every file counts as big) by --verify-checksums.
    monkeypatch.setattr("gnnflow.data.store.SMALL_FILE", 0)
    assert cli(["info", str(tmp_path / "g")]) == 0
    capsys.readouterr()
    assert cli(["info", str(tmp_path / "g"), "--verify-checksums"]) == 1
    assert "checksum mismatch in labels.npy" in capsys.readouterr().err


def test_existing_output_refused_then_overwritten(tmp_path, capsys):
    args = ["prepare", "synthetic", "--out", str(tmp_path / "g"), "--nodes", "100",
            "--avg-degree", "4"]
    assert cli(args) == 0
    assert cli(args) == 1
    assert "already exists" in capsys.readouterr().err
    assert cli([*args, "--overwrite", "--seed", "3"]) == 0
    assert open_store(tmp_path / "g").meta.extra["generator"]["seed"] == 3


def _fails(tmp_path, capsys, argv, needle):
    out = tmp_path / "out"
    assert cli([*argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err  # one line
    assert needle in err, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]  # no temp left
    return err


def test_bad_missing_file(tmp_path, capsys):
    _byo(tmp_path / "in")
    (tmp_path / "in" / "val_idx.npy").unlink()
    _fails(tmp_path, capsys, ["prepare", "import", str(tmp_path / "in")], "val_idx.npy: missing")
    (tmp_path / "in" / "edges.npy").unlink()
    _fails(tmp_path, capsys, ["prepare", "import", str(tmp_path / "in")], "no edge list")


def test_bad_truncated_npy(tmp_path, capsys):
    _byo(tmp_path / "in")
    f = tmp_path / "in" / "features.npy"
    f.write_bytes(f.read_bytes()[:-40])
    _fails(tmp_path, capsys, ["prepare", "import", str(tmp_path / "in")], "features.npy: cannot read")


def test_bad_out_of_range_neighbour(tmp_path, capsys):
    _byo(tmp_path / "in")
    e = np.load(tmp_path / "in" / "edges.npy")
    e[3, 1] = 30  # n = 30 (from features.npy)
    np.save(tmp_path / "in" / "edges.npy", e)
    _fails(tmp_path, capsys, ["prepare", "import", str(tmp_path / "in")],
           "destination vertex id 30 is out of range [0, 30)")


def test_bad_label_count(tmp_path, capsys):
    _byo(tmp_path / "in")
    np.save(tmp_path / "in" / "labels.npy", np.zeros(29, dtype=np.int64))
    _fails(tmp_path, capsys, ["prepare", "import", str(tmp_path / "in")],
           "labels.npy: 29 labels for 30 vertices")


def test_bad_options_are_one_line(tmp_path, capsys):
    _fails(tmp_path, capsys, ["prepare", "synthetic", "--homophily", "2"], "--homophily")


def _prepare_import_fails(tmp_path, needle):
    """The real command: exit 1, one error line naming the file, no output directory."""
    import subprocess
    import sys

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "gnnflow.cli", "prepare", "import",
                           str(tmp_path / "in"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and errors[0].startswith("gnnflow prepare: error: "), proc.stderr
    assert needle in errors[0], errors[0]
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


@pytest.mark.parametrize("bad", ["nan", "overflow", "empty-train", "unlabelled-train", "no-labels"])
def test_bad_values_refused(tmp_path, bad):
    d = tmp_path / "in"
    _byo(d)
    if bad in ("nan", "overflow"):
        x = np.load(d / "features.npy").astype(np.float64)
        x[7, 2] = np.nan if bad == "nan" else 1e300  # 1e300 is inf in float32
        np.save(d / "features.npy", x)
        _prepare_import_fails(tmp_path, f"{d / 'features.npy'}: row 7, column 2 is "
                                        f"{'nan' if bad == 'nan' else 'inf'}; features must be finite")
    elif bad == "empty-train":
        np.save(d / "train_idx.npy", np.zeros(0, dtype=np.int64))
        _prepare_import_fails(tmp_path, f"{d / 'train_idx.npy'}: the training split is empty")
    elif bad == "unlabelled-train":
        y = np.load(d / "labels.npy")
        y[[4, 6]] = -1  # vertices 4 and 6 are in train_idx = 0..9
        np.save(d / "labels.npy", y)
        _prepare_import_fails(tmp_path, f"{d / 'labels.npy'}: training vertex 4 has no label (-1) "
                                        "(2 of 10 training vertices)")
    else:  # no labels and no split files: the random split has nothing to draw from
        for f in ("labels.npy", "train_idx.npy", "val_idx.npy", "test_idx.npy"):
            (d / f).unlink()
        _prepare_import_fails(tmp_path, f"{d} (no labels.npy: every vertex is unlabelled): "
                                        "the training split is empty")


def test_feature_check_is_blockwise(tmp_path):
    """The NaN scan reads a block at a time and still names the global row."""
    from gnnflow.data.store import check_finite_blocks
    from gnnflow.errors import GnnflowError
    from gnnflow.io import row_chunks

    x = np.zeros((1000, 4), dtype=np.float32)
    x[777, 3] = -np.inf
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    blocks = list(row_chunks(mm, chunk_bytes=4 * 4 * 100))
    assert len(blocks) == 10 and all(b.shape[0] == 100 for _, b in blocks)
    with pytest.raises(GnnflowError, match="x: row 777, column 3 is -inf"):
        check_finite_blocks(row_chunks(mm, chunk_bytes=1600), "x")


def _kipf_row_normalize(x):
    """Kipf & Welling's preprocess_features: D^-1 X with 1/0 -> 0."""
    with np.errstate(divide="ignore"):
        r_inv = np.power(x.sum(1), -1.0)
    r_inv[np.isinf(r_inv)] = 0.0
    return x * r_inv[:, None]


@pytest.mark.parametrize("sparse", [False, True])
def test_normalize_features_and_sparse_input(tmp_path, capsys, monkeypatch, sparse):
    import scipy.sparse as sp

    monkeypatch.setattr("gnnflow.data.store.FEATURE_BLOCK_BYTES", 5 * 4 * 7)  # 7 rows a block
    _byo(tmp_path / "in")
    rng = np.random.default_rng(3)
    x = (rng.random((30, 5)) < 0.4) * rng.integers(1, 4, (30, 5)).astype(np.float64)
    x[[3, 11]] = 0  # all-zero rows stay zero
    (tmp_path / "in" / "features.npy").unlink()
    if sparse:
        sp.save_npz(tmp_path / "in" / "features.npz", sp.csr_matrix(x))
    else:
        np.save(tmp_path / "in" / "features.npy", x)
    for norm in ("none", "row"):
        out = tmp_path / f"g-{norm}"
        assert cli(["prepare", "import", str(tmp_path / "in"), "--out", str(out),
                    "--normalize-features", norm]) == 0
        s = open_store(out)
        assert s.features.dtype == np.float32 and s.meta.feature_normalization == norm
        want = _kipf_row_normalize(x) if norm == "row" else x
        np.testing.assert_allclose(s.features, want, rtol=1e-6)
        assert s.meta.extra["feature_file"] == ("features.npz" if sparse else "features.npy")
    assert np.all(open_store(tmp_path / "g-row").features[[3, 11]] == 0)
    np.testing.assert_allclose(open_store(tmp_path / "g-row").features.sum(1)[x.sum(1) > 0], 1, rtol=1e-6)


def test_row_normalization_needs_non_negative_features(tmp_path):
    _byo(tmp_path / "in")  # standard-normal features
    import subprocess
    import sys

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "gnnflow.cli", "prepare", "import",
                           str(tmp_path / "in"), "--out", str(out), "--normalize-features", "row"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and not out.exists()
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and "features.npy: row 0 has a negative value" in err, err


def test_normalize_features_offered_by_every_source():
    import argparse

    from gnnflow.cli import prepare as cli_prepare

    parser = argparse.ArgumentParser()
    cli_prepare.add_arguments(parser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for source, p in sub.choices.items():
        assert any("--normalize-features" in a.option_strings for a in p._actions), source


def test_bad_sparse_features(tmp_path, capsys):
    _byo(tmp_path / "in")
    (tmp_path / "in" / "features.npy").rename(tmp_path / "in" / "x.npy")
    np.savez(tmp_path / "in" / "features.npz", a=np.zeros(3))  # not save_npz's layout
    _fails(tmp_path, capsys, ["prepare", "import", str(tmp_path / "in")],
           "features.npz: cannot read as a scipy sparse matrix .npz")
