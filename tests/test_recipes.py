"""Every recipe in config/recipes/ is valid (issue 34, item 6): a training-settings file
(``gnnflow train --config``) passes the workflow schema's training settings and TrainConfig's
checks; a workflow config (the OGB reference recipes) validates, expands to runs every strategy
accepts, and dry-runs with its dataset's download planned, not run; the OGB recipes name their
source and the leaderboard's accuracy of each entry."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from gnnflow.config import TrainConfig
from gnnflow.workflow import expand_runs, schema, validate_config

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "config" / "recipes").glob("*.yaml"))
OGB = {"ogbn-arxiv": 2, "ogbn-products": 4, "ogbn-mag": 1}  # recipe -> reference entries (sweeps)
LEADERBOARD = "https://ogb.stanford.edu/docs/leader_nodeprop/"


def _is_workflow(data: dict) -> bool:
    return "train" in data and "datasets" in data


def _merged(recipe: dict) -> dict:
    """config/config.yaml extended by ``recipe`` as Snakemake's --configfile does (mappings
    merged, other values replaced)."""
    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    return merge(copy.deepcopy(yaml.safe_load((ROOT / "config" / "config.yaml").read_text())), recipe)


def test_the_ogb_recipes_are_there():
    assert {p.stem for p in RECIPES} >= set(OGB)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_validates(path):
    from gnnflow.strategies.base import strategy_class

    data = yaml.safe_load(path.read_text())
    if not _is_workflow(data):  # a training-settings file: the schema's settings and the config's checks
        jsonschema.validate(data, {"$defs": schema()["$defs"], "$ref": "#/$defs/train_settings"})
        cfgs = [TrainConfig.from_dict({**data, "graph": "g"})]
    else:
        runs = expand_runs(validate_config(_merged(data)))
        assert runs and {r.dataset for r in runs} <= set(data["datasets"])
        cfgs = [TrainConfig.from_dict({**r.train_settings(), "graph": "g"}) for r in runs]
    for cfg in cfgs:  # what every rank (and the preflight) checks before training
        cls = strategy_class(cfg.strategy)
        cfg = cls.parse_options(cfg)
        cls.check_relational(cfg)
        cls.check_config(cfg)


@pytest.mark.parametrize("name,entries", OGB.items())
def test_ogb_recipes_name_their_source_and_the_leaderboard_accuracy(name, entries):
    path = ROOT / "config" / "recipes" / f"{name}.yaml"
    text = path.read_text()
    data = yaml.safe_load(text)
    assert data["datasets"] == {name: {"source": "ogb", "name": name}}
    assert LEADERBOARD in text
    assert re.search(r"Source.*https://github\.com/(snap-stanford/ogb|pyg-team/pytorch_geometric)/blob/\S+\.py",
                     text, re.S | re.I)
    assert "Not expressed exactly here" in text  # what gnnflow cannot reproduce is said
    sweeps = data["train"]["sweeps"]
    assert len(sweeps) == entries
    for sweep in sweeps:  # each entry's line names the leaderboard's test accuracy
        line = next(li for li in text.splitlines() if re.match(rf"\s*- name: {re.escape(sweep['name'])}\b", li))
        assert re.search(r"test 0\.\d{4} ± 0\.\d{4}", line), line
    accuracies = re.findall(r"0\.\d{4} ± 0\.\d{4}", text)
    assert len(set(accuracies)) >= entries


@pytest.mark.parametrize("name", list(OGB))
def test_ogb_recipe_dry_run_plans_the_download(name, tmp_path):
    exe = shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")
    proc = subprocess.run([exe, "-n", "-p", "--profile", "profiles/default", "--configfile",
                           f"config/recipes/{name}.yaml", "--config", f"results={tmp_path}/results"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"prepare ogb {name} --out {tmp_path}/results/data/{name}/graph" in proc.stdout
    assert re.search(r"^train\s+\d+", proc.stdout, re.M)
    assert not (tmp_path / "results").exists()  # planned, nothing run or downloaded
