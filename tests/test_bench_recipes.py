"""The standard recipes (config/recipes/) and ``gnnflow bench recipes`` (ours vs DGL's examples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnnflow.bench.recipes import DEFAULT_RECIPES, DGL_EXAMPLES, MODELS

pytest.importorskip("dgl")


@pytest.mark.parametrize("model", MODELS)
def test_recipe_file_is_the_standard_recipe(model):
    """``gnnflow train --config config/recipes/<model>-planetoid.yaml`` reads as the hyperparameters
    of DGL 1.1.3's example (kept independently in the harness), full-graph, self-loops, 200 epochs."""
    import argparse

    from gnnflow.cli.train import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(parser.parse_args(["--config", str(DEFAULT_RECIPES / f"{model}-planetoid.yaml"),
                                              "--graph", "data/cora"]))
    assert cfg.model == model and cfg.strategy == "single" and cfg.options == {"full_batch": True}
    assert cfg.self_loops is True and cfg.eval_every == 1 and cfg.num_layers == 2
    for key, value in DGL_EXAMPLES[model].items():
        assert getattr(cfg, key) == value, key
    if model == "gat":
        assert cfg.dropout == 0.0 and cfg.activation == "elu"


@pytest.mark.slow
def test_bench_recipes_runs_both_sides(tiny_store, capsys):
    from gnnflow.bench.ratios import check_ratios
    from gnnflow.cli import main as cli_main

    assert cli_main(["bench", "recipes", "--json", "--graph", str(tiny_store.path), "--model", "gcn,gat",
                     "--seeds", "2", "--epochs", "3", "--strategies", "single,fullbatch", "--threads", "1"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert check_ratios(r) == []
    assert set(r["models"]) == {"gcn", "gat"}
    for entry in r["models"].values():
        assert len(entry["dgl"]["runs"]) == 2 and len(entry["single"]["runs"]) == 2
        assert all(0 <= run["best_epoch"] < 3 for run in entry["single"]["runs"])
        diff = 100 * (entry["single"]["best_test_acc"]["mean"] - entry["dgl"]["best_test_acc"]["mean"])
        assert entry["diff_points"]["single"] == pytest.approx(diff)
    assert "fullbatch" in r["models"]["gcn"]["diff_points"]
    assert "fullbatch" in r["models"]["gat"]["skipped"]  # fullbatch trains GCN only: said, not run
    assert "gat" in r["summary"] and Path(r["graph"]).exists()
