"""Acceptance 1 of issue 5: one 4-rank data-parallel step == one single-process step on the union."""

from __future__ import annotations

import json

import pytest

from gnnflow.strategies.data_parallel import verify


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_four_ranks_match_single_process(model, tmp_path):
    res = verify(4, model=model, seed=0, workdir=str(tmp_path))
    assert res["passed"], res
    assert res["max_abs_diff"]["grads"] <= 1e-5 and res["max_abs_diff"]["params"] <= 1e-5
    assert res["grad_norm"] > 1e-3  # the gradient is not trivially zero


@pytest.mark.slow
@pytest.mark.parametrize("tamper", ["drop", "double"])
def test_check_fails_when_a_rank_gradient_is_dropped_or_double_counted(tamper, tmp_path):
    res = verify(4, model="sage", seed=0, tamper=tamper, workdir=str(tmp_path))
    assert not res["passed"]
    assert res["max_abs_diff"]["grads"] > 1e-3


def test_verify_cli_two_ranks(capsys, tmp_path, monkeypatch):
    from gnnflow.cli import main

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    code = main(["verify", "--strategy", "data", "--workers", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"] and out["workers"] == 2
    assert set(out["max_abs_diff"]) >= {"loss", "logits", "grads"}


def test_verify_cli_rejects_strategy_without_verify(capsys):
    from gnnflow.cli import main

    assert main(["verify", "--strategy", "distdgl", "--workers", "2"]) == 1
    assert "does not claim single-process mathematics" in capsys.readouterr().err
