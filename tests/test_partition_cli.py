"""gnnflow partition / presample / partition-report command lines and their error messages."""

from __future__ import annotations

import json

import numpy as np

from gnnflow.cli import main


def test_cli_partition_report_presample(tiny_store, tmp_path, capsys):
    g = str(tiny_store.path)
    assert main(["partition", g, "--method", "metis", "--parts", "2", "--out", str(tmp_path / "m"),
                 "--constraints", "vertices,train", "--halo-hops", "2"]) == 0
    assert (tmp_path / "m" / "part1" / "halo_ids_hop2.npy").exists()
    assert main(["presample", g, "--fanouts", "3,3", "--batch-size", "20", "--epochs", "2",
                 "--out", str(tmp_path / "ps.npz")]) == 0
    assert main(["partition", g, "--method", "presample", "--parts", "2", "--presample",
                 str(tmp_path / "ps.npz"), "--out", str(tmp_path / "p")]) == 0
    capsys.readouterr()
    assert main(["partition-report", str(tmp_path / "p"), "--json", "--fanouts", "3,3",
                 "--batch-size", "20", "--batches", "3"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {"edge_cut_pct", "balance", "halo_per_part", "replication_factor", "split"} <= set(r)
    assert r["replication_factor"]["2"] >= r["replication_factor"]["1"] >= 1.0
    assert 0 <= r["split"]["cross_fraction_mean"] <= 1 and r["split"]["load_imbalance_mean"] >= 1


def test_cli_errors_leave_nothing(tiny_store, tmp_path, capsys):
    g = str(tiny_store.path)
    out = str(tmp_path / "o")
    cases = [
        (["--method", "random", "--parts", "0"], "--parts must be in [1, 200]"),
        (["--method", "random", "--parts", "201"], "--parts must be in [1, 200]"),
        (["--method", "metis", "--parts", "2", "--constraints", "vertices,foo"], "unknown balance constraint 'foo'"),
        (["--method", "random", "--parts", "2", "--constraints", "train"], "does not take --constraints"),
        (["--method", "two-level", "--levels", "2x2", "--parts", "3"], "does not match"),
    ]
    for extra, msg in cases:
        assert main(["partition", g, "--out", out, *extra]) == 1
        assert msg in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    np.save(tmp_path / "broken" / "indptr.npy", np.zeros(3, dtype=np.int64))
    (tmp_path / "broken" / "meta.json").write_text(json.dumps({
        "format": "gnnflow-graph-store", "version": 1, "name": "broken", "num_nodes": 2, "num_edges": 0,
        "num_classes": 2, "directed": False}))
    assert main(["partition", str(tmp_path / "broken"), "--method", "random", "--parts", "2", "--out", out]) == 1
    assert "missing file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "tiny"]
