"""``gnnflow bench hetero-accuracy``: our RGCN and R-GAT against DGL's relational layers on a prepared
heterogeneous store (MAGNN's DBLP layout at a tiny size)."""

from __future__ import annotations

import json

import pytest

from gnnflow.cli import main as cli
from tests.test_data_magnn import write_magnn_dblp

pytest.importorskip("dgl")


def test_bench_hetero_accuracy_on_a_prepared_store(tmp_path, capsys):
    """Both sides train on the prepared store; the same weights give the same logits (checked by the
    bench before any seed runs); every ratio has both operands."""
    from gnnflow.bench.ratios import check_ratios

    write_magnn_dblp(tmp_path / "raw")
    assert cli(["prepare", "magnn", "dblp", "--raw-dir", str(tmp_path / "raw"), "--out", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    assert cli(["bench", "hetero-accuracy", "--json", "--graph", str(tmp_path / "s"), "--seeds", "2", "--epochs", "3",
                "--threads", "1"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert check_ratios(r) == [] and set(r["models"]) == {"rgcn", "rgat"}
    for entry in r["models"].values():
        assert entry["same_function"] < 1e-4
        assert len(entry["dgl"]["runs"]) == 2 and len(entry["ours"]["runs"]) == 2
        assert all(0 <= run["best_epoch"] < 3 for side in ("dgl", "ours") for run in entry[side]["runs"])
        diff = 100 * (entry["ours"]["best_test_acc"]["mean"] - entry["dgl"]["best_test_acc"]["mean"])
        assert entry["diff_points"] == pytest.approx(diff)
    assert r["models"]["rgcn"]["settings"]["num_bases"] == 3 and "rgat" in r["summary"]


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_hetero_recipes_use_full_neighbourhoods(model, tmp_path):
    """The recipe files read as TrainConfigs of the model with full neighbourhoods (what the bench
    compares); sampled fanouts are refused in one line naming the recipe."""
    from gnnflow.bench.hetero_accuracy import check_fanouts
    from gnnflow.bench.recipes import DEFAULT_RECIPES, recipe_config
    from gnnflow.errors import ConfigError

    path = DEFAULT_RECIPES / f"{model}-hetero.yaml"
    cfg = recipe_config(path, "data/dblp", "single", 1, 0, None, None)
    assert cfg.model == model and cfg.fanouts == [-1, -1] and cfg.eval_every == 1 and cfg.relational
    check_fanouts(cfg, path)
    with pytest.raises(ConfigError, match=f"{path}: fanouts \\[10, 5\\]; bench hetero-accuracy compares"):
        check_fanouts(cfg.replace(fanouts=[10, 5]), path)
