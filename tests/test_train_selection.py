"""Evaluation metrics (accuracy and loss per split), model selection by validation accuracy,
the best checkpoint the driver writes, and the summary over seeds."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from gnnflow.results.selection import best_row, better
from gnnflow.results.table import summarize, summarize_seeds, summary_text
from gnnflow.strategies import metrics
from gnnflow.strategies.metrics import evaluate_logits, split_metrics, split_sums, split_sums_at


def test_split_metrics_skip_unlabelled_and_add_over_chunks():
    torch.manual_seed(0)
    logits = torch.randn(10, 3)
    labels = torch.tensor([0, 1, 2, -1, 0, 1, 2, 0, -1, 1])
    whole = split_metrics(split_sums({"val": (logits, labels)}))
    mask = labels >= 0
    assert whole["val_acc"] == pytest.approx(float((logits[mask].argmax(1) == labels[mask]).float().mean()))
    assert whole["val_loss"] == pytest.approx(float(F.cross_entropy(logits[mask], labels[mask])), rel=1e-6)
    assert math.isnan(whole["train_acc"]) and math.isnan(whole["test_loss"])  # no vertices
    halves = split_sums({"val": (logits[:4], labels[:4])}) + split_sums({"val": (logits[4:], labels[4:])})
    assert split_metrics(halves) == pytest.approx(whole, nan_ok=True)
    assert evaluate_logits({"val": (logits, labels)}) == pytest.approx(whole, nan_ok=True)
    unlabelled = split_metrics(split_sums({"test": (logits[:2], torch.tensor([-1, -1]))}))
    assert math.isnan(unlabelled["test_acc"])


def test_metrics_read_bounded_chunks_of_rows_and_positions(monkeypatch):
    """Big logits are read a chunk of rows at a time (bounded temporaries); the sums equal one
    pass over the copied split rows, and reading through positions copies no split."""
    torch.manual_seed(1)
    logits, labels = torch.randn(1000, 7), torch.randint(-1, 7, (1000,))
    positions = {"train": torch.randperm(1000)[:600], "val": torch.arange(600, 700), "test": torch.tensor([3, 5])}
    one = split_sums({s: (logits[p], labels[p]) for s, p in positions.items()})
    seen = []
    real = metrics._chunk_sums
    monkeypatch.setattr(metrics, "_chunk_sums", lambda lg, lb: seen.append(lg.shape[0]) or real(lg, lb))
    monkeypatch.setattr(metrics, "CHUNK_BYTES", 4 * 7 * 64)  # 64 rows a chunk
    for sums in (split_sums({s: (logits[p], labels[p]) for s, p in positions.items()}),
                 split_sums_at(logits, labels, positions)):
        assert torch.equal(sums[:, [0, 2]], one[:, [0, 2]])  # counts exact
        assert torch.allclose(sums[:, 1], one[:, 1], rtol=1e-6)
    assert max(seen) == 64 and sum(seen) == 2 * 702


def test_selection_prefers_accuracy_then_lower_loss_then_earlier():
    rows = [{"epoch": 0, "val_acc": 0.5, "val_loss": 1.0, "test_acc": 0.1},
            {"epoch": 1, "val_acc": 0.7, "val_loss": 0.9, "test_acc": 0.2},
            {"epoch": 2, "val_acc": 0.7, "val_loss": 0.8, "test_acc": 0.3},  # tie: lower loss wins
            {"epoch": 3, "val_acc": 0.7, "val_loss": 0.8, "test_acc": 0.4},  # full tie: earlier stays
            {"epoch": 4, "val_acc": float("nan"), "val_loss": 0.1, "test_acc": 0.9}]  # not evaluated
    best = best_row(list(reversed(rows)))
    assert best is not None and best["epoch"] == 2 and best["test_acc"] == 0.3
    assert not better(float("nan"), 0.0, None) and better(0.1, float("nan"), None)
    assert best_row([{"epoch": 0, "val_acc": float("nan")}]) is None


def test_driver_keeps_the_best_epochs_checkpoint(tiny_store, tmp_path):
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.checkpoint import BEST_CKPT, BEST_MODEL
    from gnnflow.strategies.driver import run_training

    out = tmp_path / "run"
    cfg = TrainConfig(graph=str(tiny_store.path), model="gcn", hidden=8, num_layers=2, fanouts=[-1, -1],
                      epochs=6, lr=0.05, dropout=0.0, options={"full_batch": True}, out=str(out))
    records = run_training(cfg)
    info = json.loads((out / "run.json").read_text())
    best = best_row([r.flat() for r in records])
    assert best is not None and info["best"] == pytest.approx(best)
    assert all(not math.isnan(r.val_loss) and not math.isnan(r.train_loss) for r in records)
    assert info["final"]["val_loss"] == records[-1].val_loss
    ckpt = torch.load(out / BEST_CKPT, weights_only=True)
    assert ckpt["epoch"] == best["epoch"]
    weights = torch.load(out / BEST_MODEL, weights_only=True)
    assert all(torch.equal(weights[k], v) for k, v in ckpt["ranks"][0]["model"].items())
    # the saved weights give the recorded accuracies (the checkpoint is the selected epoch's)
    from gnnflow.strategies.single import SingleProcess

    s = SingleProcess(TrainConfig.from_dict({**cfg.to_dict(), "out": None}))
    s.prepare()
    s.model.load_state_dict(weights)
    assert s.evaluate()["val_acc"] == best["val_acc"] and s.evaluate()["test_acc"] == best["test_acc"]
    # summary: final and best-validation test accuracy of this run
    from gnnflow.results.table import load_runs

    summary = summarize(load_runs([out]))
    row = summary.iloc[0]
    assert row["best_epoch"] == best["epoch"] and row["best_test_acc"] == best["test_acc"]
    assert row["test_acc"] == records[-1].test_acc


def _runs() -> pd.DataFrame:
    rows = []
    for seed, (final, best_test) in enumerate([(0.80, 0.82), (0.78, 0.84), (0.79, 0.80)]):
        for epoch, (val, test) in enumerate([(0.5, 0.5), (0.9, best_test), (0.8, final)]):
            rows.append({"run_id": f"gcn-s{seed}", "strategy": "single", "dataset": "cora", "model": "gcn",
                         "workers": 1, "epoch": epoch, "rank": 0, "seed": seed, "loss": 1.0, "val_acc": val,
                         "val_loss": 1.0, "test_acc": test, "time_epoch": 1.0, "cfg_hidden": 16})
    rows.append({**rows[-1], "run_id": "other", "cfg_hidden": 32, "seed": 0})
    return pd.DataFrame(rows)


def test_summary_over_seeds():
    summary = summarize(_runs())
    seeds = summarize_seeds(summary)
    gcn = seeds[seeds["cfg_hidden"] == 16].iloc[0]
    assert gcn["seeds"] == 3
    assert gcn["final_test_acc_mean"] == pytest.approx(0.79)
    assert gcn["best_test_acc_mean"] == pytest.approx(0.82)
    assert gcn["best_test_acc_std"] == pytest.approx(0.02)
    assert gcn["best_epoch_mean"] == 1 and gcn["best_epoch_std"] == 0
    assert seeds[seeds["cfg_hidden"] == 32].iloc[0]["seeds"] == 1
    text = summary_text(summary, seeds)
    assert "82.00 ± 2.00" in text and "79.00 ± 1.00" in text


def test_cli_summarize_prints_both(tmp_path, capsys):
    from gnnflow.cli import main as cli_main

    table = tmp_path / "table.csv"
    _runs().to_csv(table, index=False)
    assert cli_main(["results", "summarize", str(table), "--json", "--seeds-out", str(tmp_path / "s.csv")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["run_id"] for r in out["runs"]} == {"gcn-s0", "gcn-s1", "gcn-s2", "other"}
    assert len(out["over_seeds"]) == 2 and (tmp_path / "s.csv").exists()
