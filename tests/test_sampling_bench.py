"""`gnnflow bench sampler` runs end to end on a small generated graph and reports a ratio."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("dgl")

from gnnflow.cli import main as cli_main  # noqa: E402


def test_bench_sampler_json(capsys):
    assert cli_main(["bench", "sampler", "--json", "--nodes", "3000", "--batch-size", "64",
                     "--batches", "2", "--rounds", "1", "--threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["benchmark"] == "sampler" and out["ratio"] > 0
    assert out["ours_edges_per_s"] > 0 and out["dgl_edges_per_s"] > 0
    assert "ratio" in out["summary"] and out["num_nodes"] == 3000
    from gnnflow.bench.ratios import check_ratios

    assert check_ratios(out) == [] and out["ratio"] == out["ratios"][0]["value"]
