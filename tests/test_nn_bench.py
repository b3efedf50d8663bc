"""`gnnflow bench layers` runs end to end on a small graph; both sides compute the same outputs."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("dgl")

from gnnflow.cli import main as cli_main  # noqa: E402


def test_bench_layers_json(capsys):
    assert cli_main(["bench", "layers", "--json", "--nodes", "3000", "--batch-size", "64", "--in-dim", "16",
                     "--out-dim", "8", "--heads", "2", "--repeats", "1", "--threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["layers"]) == {"sage", "gcn-both", "gcn-right", "gat"}
    assert out["ratio"] == max(v["ratio"] for v in out["layers"].values())
    for v in out["layers"].values():
        assert v["max_abs_diff"] <= 1e-5
