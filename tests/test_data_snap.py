"""SNAP edge lists: comments, gzip, id relabelling, symmetrization, random features."""

from __future__ import annotations

import gzip
import time

import numpy as np
import pytest

from gnnflow.cli import main as cli
from gnnflow.data.download import check_reachable
from gnnflow.data.snap import SNAP_GRAPHS, prepare_snap
from gnnflow.data.store import open_store
from gnnflow.errors import DownloadError

TEXT = """# Directed graph (each unordered pair of nodes is saved once): tiny.txt
# Nodes: 5 Edges: 6
# FromNodeId\tToNodeId
10\t20
10\t30
20\t30
30\t10
40\t40
70\t10
"""


def test_snap_file_relabels_and_symmetrizes(tmp_path, capsys):
    f = tmp_path / "tiny.txt.gz"
    with gzip.open(f, "wt") as fh:
        fh.write(TEXT)
    assert cli(["prepare", "snap", "--file", str(f), "--out", str(tmp_path / "g"),
                "--feature-dim", "4", "--classes", "3", "--seed", "7"]) == 0
    s = open_store(tmp_path / "g")
    assert s.extra["orig_id"].tolist() == [10, 20, 30, 40, 70]
    assert s.num_nodes == 5
    # {10,20},{10,30},{20,30},{10,70} in both directions; the self-loop 40-40 dropped.
    assert s.num_edges == 8
    assert sorted(s.indices[s.indptr[0]:s.indptr[1]].tolist()) == [1, 2, 4]
    assert s.meta.extra["random_features"] and s.meta.extra["random_labels"] and s.name == "tiny"
    assert s.features.shape == (5, 4) and s.labels.max() < 3
    # Seeded: the same seed gives the same features.
    s2 = prepare_snap(tmp_path / "g2", file=f, feature_dim=4, num_classes=3, seed=7)
    assert np.array_equal(s.features, s2.features) and np.array_equal(s.labels, s2.labels)
    d = prepare_snap(tmp_path / "d", file=f, symmetrize=False, feature_dim=4, num_classes=3)
    assert d.num_edges == 5 and d.meta.directed


def test_snap_bad_line(tmp_path, capsys):
    f = tmp_path / "bad.txt"
    f.write_text("1 2\n3 x\n")
    out = tmp_path / "g"
    assert cli(["prepare", "snap", "--file", str(f), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "bad.txt: cannot parse" in err and err.count("\n") == 1 and not out.exists()


def test_snap_unknown_name(tmp_path, capsys):
    assert cli(["prepare", "snap", "com-Nothing", "--out", str(tmp_path / "g")]) == 1
    assert "unknown SNAP graph 'com-Nothing'" in capsys.readouterr().err


def test_snap_offline_fails_fast(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(DownloadError, match="--raw-dir"):
        prepare_snap(tmp_path / "g", dataset="web-Google", raw_dir=tmp_path / "raw",
                     url="http://127.0.0.1:9/web-Google.txt.gz")
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "g").exists()
    url = SNAP_GRAPHS["com-Orkut"][0]
    if check_reachable(url, timeout=3) is None:
        return  # online: do not download Orkut in a unit test
    t0 = time.perf_counter()
    with pytest.raises(DownloadError, match="com-orkut.ungraph.txt.gz"):
        prepare_snap(tmp_path / "g", dataset="com-orkut", raw_dir=tmp_path / "raw")
    assert time.perf_counter() - t0 < 10


def test_snap_uses_file_in_raw_dir(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    with gzip.open(raw / "wiki-Talk.txt.gz", "wt") as fh:
        fh.write(TEXT)
    s = prepare_snap(tmp_path / "g", dataset="wiki-talk", raw_dir=raw, feature_dim=2)
    assert s.name == "wiki-Talk" and s.num_nodes == 5
