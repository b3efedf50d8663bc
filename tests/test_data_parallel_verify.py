"""One P-rank data-parallel step == one single-process step on the union (issue 5, acceptance 1),
with real fanouts: partition-invariant draws make the samples equal (issue 18, acceptance 3)."""

from __future__ import annotations

import json

import pytest

from gnnflow.strategies.verify.data_parallel import verify


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


@pytest.mark.parametrize("workers,fanouts", [(2, [10, 10]), (2, [15, 10, 5]),
                                             pytest.param(4, [10, 10], marks=pytest.mark.slow),
                                             pytest.param(4, [15, 10, 5], marks=pytest.mark.slow)])
def test_sampled_step_matches_single_process(workers, fanouts, tmp_path):
    res = verify(workers, model="sage", seed=3, fanouts=fanouts, workdir=str(tmp_path))
    assert res["passed"], res["max_abs_diff"]
    assert all(res["max_rel_diff"][k] <= 1e-5 for k in ("loss", "logits")), res["max_rel_diff"]


def test_check_fails_when_one_rank_samples_from_another_stream(tmp_path):
    res = verify(2, model="sage", seed=3, fanouts=[10, 10], perturb_sampler=True, workdir=str(tmp_path))
    assert not res["passed"]
    assert res["max_abs_diff"]["logits"] > 1e-3


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


def test_verify_cli_device_cpu_and_a_missing_gpu(capsys, tmp_path, monkeypatch):
    """``--device cpu`` is the default check; ``--device cuda`` where torch sees no GPU is one
    clear error (with a GPU, tests/test_gpu.py runs every exact strategy's check on it)."""
    from gnnflow.cli import main

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    code = main(["verify", "--strategy", "data", "--workers", "2", "--device", "cpu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"] and out["device"] == "cpu"
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["verify", "--strategy", "data", "--workers", "2", "--device", "cuda"]) == 1
    assert "--device cuda: torch sees no CUDA device" in capsys.readouterr().err
