"""OGB conversion on tiny files in OGB's own raw layout; homogenization round trip on an
ogbn-mag-layout fixture; unknown names and offline downloads (acceptance 4, 5)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from datagen import hetero_equal

from gnnflow.cli import main as cli
from gnnflow.data.download import check_reachable
from gnnflow.data.hetero import HeteroGraph, validate_hetero
from gnnflow.data.homogenize import heterogenize
from gnnflow.data.ogb import ogb_info, prepare_ogb
from gnnflow.data.store import open_store
from gnnflow.errors import ConfigError, DownloadError


def _csv(path, rows, header=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, compression="gzip", header=header, index=False)


def write_arxiv_like(root, n=40, m=120, d=6, classes=5, seed=0):
    """ogbn-arxiv's raw layout (csv, directed, node_year, split/time)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    raw = root / "raw"
    _csv(raw / "edge.csv.gz", np.stack([src, dst], 1))
    _csv(raw / "num-node-list.csv.gz", [[n]])
    _csv(raw / "num-edge-list.csv.gz", [[m]])
    feat = rng.standard_normal((n, d)).astype(np.float32)
    _csv(raw / "node-feat.csv.gz", feat)
    labels = rng.integers(0, classes, n)
    _csv(raw / "node-label.csv.gz", labels[:, None])
    _csv(raw / "node_year.csv.gz", rng.integers(2000, 2020, n)[:, None])
    perm = rng.permutation(n)
    for name, part in zip(("train", "valid", "test"), np.split(perm, [20, 30]), strict=True):
        _csv(root / "split" / "time" / f"{name}.csv.gz", part[:, None])
    return src, dst, feat, labels, perm


def write_mag_like(root, seed=0):
    """ogbn-mag's heterogeneous raw layout with tiny counts; returns the HeteroGraph written."""
    rng = np.random.default_rng(seed)
    counts = {"author": 12, "field_of_study": 5, "institution": 3, "paper": 15}
    rels = {("author", "affiliated_with", "institution"): 12,
            ("author", "writes", "paper"): 30,
            ("paper", "cites", "paper"): 25,
            ("paper", "has_topic", "field_of_study"): 20}
    raw = root / "raw"
    _csv(raw / "num-node-dict.csv.gz", pd.DataFrame({t: [c] for t, c in counts.items()}),
         header=True)
    _csv(raw / "triplet-type-list.csv.gz", [list(e) for e in rels])
    edges = {}
    for (s, r, d), m in rels.items():
        src, dst = rng.integers(0, counts[s], m), rng.integers(0, counts[d], m)
        sub = raw / "relations" / f"{s}___{r}___{d}"
        _csv(sub / "edge.csv.gz", np.stack([src, dst], 1))
        _csv(sub / "num-edge-list.csv.gz", [[m]])
        _csv(sub / "edge_reltype.csv.gz", np.zeros((m, 1), dtype=int))
        edges[(s, r, d)] = (src, dst)
    feat = rng.standard_normal((counts["paper"], 4)).astype(np.float32)
    _csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", feat)
    _csv(raw / "node-feat" / "paper" / "node_year.csv.gz", rng.integers(2010, 2020, (15, 1)))
    labels = rng.integers(0, 349, counts["paper"])
    _csv(raw / "node-label" / "paper" / "node-label.csv.gz", labels[:, None])
    has = pd.DataFrame({t: [t == "paper"] for t in counts})
    _csv(raw / "nodetype-has-label.csv.gz", has, header=True)
    split = root / "split" / "time"
    _csv(split / "nodetype-has-split.csv.gz", has, header=True)
    parts = np.split(rng.permutation(15), [8, 11])
    for name, part in zip(("train", "valid", "test"), parts, strict=True):
        _csv(split / "paper" / f"{name}.csv.gz", part[:, None])
    return HeteroGraph(
        name="ogbn-mag", num_nodes=counts, edges=edges, features={"paper": feat},
        labels={"paper": labels},
        splits={"train": {"paper": parts[0]}, "val": {"paper": parts[1]},
                "test": {"paper": parts[2]}},
        num_classes=349, target_node_type="paper")


def _edge_set(store):
    out = set()
    for v in range(store.num_nodes):
        out |= {(int(u), v) for u in store.indices[store.indptr[v]:store.indptr[v + 1]]}
    return out


def test_arxiv_layout_converts(tmp_path, capsys):
    src, dst, feat, labels, perm = write_arxiv_like(tmp_path / "raw_root" / "ogbn_arxiv")
    # --raw-dir may name the folder that holds ogbn_arxiv/.
    assert cli(["prepare", "ogbn-arxiv", "--raw-dir", str(tmp_path / "raw_root"),
                "--out", str(tmp_path / "g")]) == 0
    s = open_store(tmp_path / "g")
    want = {(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a != b}
    want |= {(b, a) for a, b in want}
    assert _edge_set(s) == want and not s.meta.directed
    assert np.allclose(s.features, feat) and np.array_equal(s.labels, labels)
    assert np.array_equal(s.train_idx, perm[:20]) and np.array_equal(s.test_idx, perm[30:])
    assert s.num_classes == 40 and s.extra["node_year"].shape == (40,)
    assert json.loads(capsys.readouterr().out)["meta"]["source"] == "ogb"
    # --directed keeps OGB's one-way citation edges (duplicates and self-loops dropped).
    prepare_ogb("ogbn-arxiv", tmp_path / "d", raw_dir=tmp_path / "raw_root", symmetrize=False)
    d = open_store(tmp_path / "d")
    assert _edge_set(d) == {(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a != b}


def test_papers100m_binary_layout(tmp_path):
    root = tmp_path / "papers100M-bin"
    (root / "raw").mkdir(parents=True)
    rng = np.random.default_rng(1)
    n, m = 30, 60
    ei = rng.integers(0, n, (2, m))
    np.savez(root / "raw" / "data.npz", edge_index=ei, num_nodes_list=np.array([n]),
             num_edges_list=np.array([m]), node_feat=rng.standard_normal((n, 3)).astype(np.float16),
             node_year=rng.integers(2000, 2020, (n, 1)))
    lab = rng.integers(0, 172, n).astype(np.float64)
    lab[::3] = np.nan  # unlabelled papers
    np.savez(root / "raw" / "node-label.npz", node_label=lab[:, None])
    for name, part in zip(("train", "valid", "test"), np.split(np.arange(1, n, 3), [4, 7]),
                          strict=True):
        _csv(root / "split" / "time" / f"{name}.csv.gz", part[:, None])
    s = prepare_ogb("ogbn-papers100M", tmp_path / "g", raw_dir=tmp_path)
    assert s.num_nodes == n and s.features.dtype == np.float32
    assert np.all(s.labels[::3] == -1) and np.all(s.labels[1::3] >= 0)


def test_mag_layout_homogenizes_and_round_trips(tmp_path, capsys):
    hg = write_mag_like(tmp_path / "mag")
    assert cli(["prepare", "ogbn-mag", "--raw-dir", str(tmp_path / "mag"),
                "--out", str(tmp_path / "g")]) == 0
    s = open_store(tmp_path / "g")
    tm = validate_hetero(s)
    assert s.meta.node_types == ["author", "field_of_study", "institution", "paper"]
    assert s.meta.node_type_offsets == [0, 12, 17, 20, 35]
    assert s.num_edges == 2 * (12 + 30 + 25 + 20)  # with reverse edge types
    assert hetero_equal(heterogenize(s), hg) == []
    # Per-type features at their own dim; common features.npy; labels only on papers.
    assert s.extra["features_paper"].shape == (15, 4) and s.features.shape == (35, 4)
    assert np.array_equal(s.features[20:], hg.features["paper"])
    assert np.all(s.labels[:20] == -1) and np.array_equal(s.labels[20:], hg.labels["paper"])
    # Id maps in both directions.
    assert np.array_equal(tm.to_homogeneous_id("paper", [0, 14]), [20, 34])
    types, local = tm.to_type_id([0, 11, 12, 19, 20])
    assert types.tolist() == [0, 0, 1, 2, 3] and local.tolist() == [0, 11, 0, 2, 0]
    # The homogenize CLI reads the same OGB root.
    capsys.readouterr()
    assert cli(["homogenize", str(tmp_path / "mag"), "--out", str(tmp_path / "h")]) == 0
    h = open_store(tmp_path / "h")
    assert np.array_equal(h.indices, s.indices) and np.array_equal(h.extra["edge_id"], s.extra["edge_id"])


def test_mag_missing_raw_file(tmp_path, capsys):
    write_mag_like(tmp_path / "mag")
    (tmp_path / "mag" / "raw" / "nodetype-has-label.csv.gz").unlink()
    out = tmp_path / "g"
    assert cli(["prepare", "ogbn-mag", "--raw-dir", str(tmp_path / "mag"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "nodetype-has-label.csv.gz: missing" in err and err.count("\n") == 1
    assert not out.exists()


def test_unknown_ogb_name(tmp_path, capsys):
    out = tmp_path / "g"
    assert cli(["prepare", "ogb", "ogbn-nonexistent", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "unknown OGB dataset 'ogbn-nonexistent'" in err and "ogbn-arxiv" in err
    assert err.count("\n") == 1 and not out.exists()
    assert "binary classification" in str(pytest.raises(ConfigError, ogb_info, "ogbn-proteins").value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/arxiv.zip",      # connection refused
                                 "http://10.255.255.1:81/arxiv.zip"])  # unroutable: timeout
def test_offline_download_fails_fast(tmp_path, url):
    t0 = time.perf_counter()
    with pytest.raises(DownloadError) as exc:
        prepare_ogb("ogbn-arxiv", tmp_path / "g", raw_dir=tmp_path / "raw", url=url)
    assert time.perf_counter() - t0 < 10
    msg = str(exc.value)
    assert "--raw-dir" in msg and "raw/edge.csv.gz" in msg and url in msg
    assert not (tmp_path / "g").exists() and not (tmp_path / "raw").exists()


def test_offline_download_of_real_url_via_cli(tmp_path):
    """The whole command, as a user runs it, fails within 10 s when offline."""
    url = ogb_info("ogbn-arxiv")["url"]
    if check_reachable(url, timeout=3) is None:
        pytest.skip("online: would download ogbn-arxiv")
    out = tmp_path / "g"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gnnflow.cli", "prepare", "ogbn-arxiv",
                           "--raw-dir", str(tmp_path / "raw"), "--out", str(out)],
                          capture_output=True, text=True)
    assert time.perf_counter() - t0 < 10
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "cannot download" in proc.stderr
    assert "--raw-dir" in proc.stderr and not out.exists()
