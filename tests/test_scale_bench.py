"""``gnnflow bench scale`` (issue 19.6) on tiny sizes: every stage runs in its own process, the
table has a row per stage and size with measured and predicted peak RSS, and growth exponents
between the sizes; prepared graphs are reused and ``--graph-dir`` runs on a given store."""

from __future__ import annotations

import json
import math

import pytest

from gnnflow.bench.ratios import check_ratios
from gnnflow.bench.scale import epoch_split, exponent, markdown, parse_size, peer_ratios
from gnnflow.cli import main as cli_main
from gnnflow.errors import ConfigError

TINY = ["--workers", "2", "--hidden", "16", "--fanouts", "5,5", "--batch-per-rank", "100"]


def test_bench_scale_table_rows_exponents_and_counts(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "scale.md"
    argv = ["bench", "scale", "--json", "--sizes", "2000:8:0.2,4000:8:0.2", "--strategies", "data,fullbatch",
            *TINY, "--workdir", str(work), "--out", str(out)]
    assert cli_main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert not check_ratios(result)
    assert result["counts"] == {"sizes": 2, "rows": 8, "runs": 4, "failed": 0}
    stages = [(r["size"], r["stage"]) for r in result["rows"]]
    assert stages == [(s, st) for s in ("2000:8:0.2", "4000:8:0.2")
                      for st in ("prepare", "partition", "data", "fullbatch")]
    for r in result["rows"]:
        assert r["rc"] == 0 and r["peak_rss_mib"] > 0 and r["wall_s"] > 0, r
        if r["stage"] in ("data", "fullbatch"):
            assert len(r["rank_peak_rss_mib"]) == 2 and r["predicted_peak_rss_mib"] > 0
            assert r["epoch_s"] > 0 and 0 <= r["test_acc"] <= 1
            # training and evaluation apart (slowest rank each): both ran, neither exceeds the epoch
            assert 0 < r["train_s"] <= r["epoch_s"] and 0 < r["eval_s"] <= r["epoch_s"]
            assert set(r["counts"]) >= {"sampled_edges", "bytes_sent"}
    data = [r for r in result["rows"] if r["stage"] == "data"]
    assert all(r["counts"]["sampled_edges"] > 0 for r in data)  # counted, not only timed
    assert data[1]["counts"]["sampled_edges"] > data[0]["counts"]["sampled_edges"]  # twice the targets
    exps = {e["stage"]: e for e in result["exponents"]}
    assert set(exps) == {"prepare", "partition", "data", "fullbatch"}
    for e in exps.values():
        assert e["from"] == "2000:8:0.2" and e["to"] == "4000:8:0.2"
        assert math.isfinite(e["time_exponent"]) and math.isfinite(e["memory_exponent"])
    text = out.read_text()
    assert "| training s | evaluation s |" in text
    lines = text.splitlines()
    assert sum(ln.startswith("| 2000:8:0.2 |") for ln in lines) == 4
    assert sum(ln.startswith("| 4000:8:0.2 |") for ln in lines) == 4
    assert "| data | 2000:8:0.2 | 4000:8:0.2 |" in text and "memory exponent" in text
    assert len(result["ratios"]) == 4 and all(q["value"] > 0 for q in result["ratios"])

    # a second call reuses the prepared graphs and books (no prepare/partition rows) and
    # --graph-dir runs a size on a given store and book
    graph, book = work / "2000-8-0.2" / "graph", work / "2000-8-0.2" / "metis2"
    assert cli_main(["bench", "scale", "--json", "--sizes", "given", "--strategies", "data", *TINY,
                     "--workdir", str(tmp_path / "w2"), "--graph-dir", f"given={graph}:{book}"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["stage"] for r in again["rows"]] == ["data"] and again["rows"][0]["nodes"] == 2000


def test_sizes_and_exponents():
    assert parse_size("products") == ("products", 2_449_029, 50.5, 0.08)
    assert parse_size("10m")[1:] == (10_000_000, 25.0, 0.01)
    assert parse_size("5000:10:0.1") == ("5000:10:0.1", 5000, 10.0, 0.1)
    with pytest.raises(ConfigError, match="--sizes"):
        parse_size("huge")
    assert exponent(1.0, 4.0, 1000, 2000) == pytest.approx(2.0)
    assert math.isnan(exponent(float("nan"), 1.0, 1, 2))


def test_training_and_evaluation_apart_for_every_strategy_and_the_peer():
    """The table builder: each run's epoch split into training and evaluation (the slowest rank's
    of each), and per strategy the three ratios against the DistDGL peer of the same size."""
    import argparse

    recs = [{"time_epoch": 10.0, "time_eval": 6.0}, {"time_epoch": 9.0, "time_eval": 2.0}]
    assert epoch_split(recs) == {"train_s": 7.0, "eval_s": 6.0}
    base = {"size": "1m", "nodes": 10, "edges": 20, "rc": 0, "peak_rss_mib": 1.0}
    rows = [{**base, "stage": "prepare", "wall_s": 1.0},
            {**base, "stage": "data", "epoch_s": 10.0, "train_s": 4.0, "eval_s": 6.0},
            {**base, "stage": "hec", "epoch_s": 12.0, "train_s": 6.0, "eval_s": 6.0},
            {**base, "stage": "distdgl", "epoch_s": 20.0, "train_s": 8.0, "eval_s": 12.0}]
    got = {q["name"]: (q["value"], q["goal"]) for q in peer_ratios(rows)}
    assert got == {"data / DistDGL: whole epoch with evaluation, 1m": (0.5, "<= 0.6"),
                   "data / DistDGL: training (the epoch without evaluation), 1m": (0.5, "<= 0.5"),
                   "data / DistDGL: evaluation, 1m": (0.5, "<= 0.5"),
                   "hec / DistDGL: whole epoch with evaluation, 1m": (0.6, None),
                   "hec / DistDGL: training (the epoch without evaluation), 1m": (0.75, None),
                   "hec / DistDGL: evaluation, 1m": (0.5, None)}
    text = markdown(rows, [], argparse.Namespace(workers=4, fanouts="15,10,5", hidden=256, batch_per_rank=1000))
    assert "| 1m | 10 | 20 | distdgl | 0 | 20.0 | 8.0 | 12.0 |" in text
    assert "| 1m | data | 10.0 / 20.0 s = 0.500 | 4.0 / 8.0 s = 0.500 | 6.0 / 12.0 s = 0.500 |" in text
