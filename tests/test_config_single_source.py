"""One source for training settings: TrainConfig's fields, ``gnnflow train``'s flags and the
workflow schema's training settings agree, and a workflow config's settings reach the ranks."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
import torch
import yaml

from gnnflow.config import STRATEGIES, TrainConfig, base_type, config_from_args, settings
from gnnflow.errors import ConfigError
from gnnflow.workflow import RUN_KEYS, expand_runs, schema, validate_config, write_settings

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
#: settings the workflow sets itself (graph, partition path, run directory, run id, resume)
WORKFLOW_OWN = {"graph", "partition", "out", "run_id", "resume"}


def train_parser() -> argparse.ArgumentParser:
    from gnnflow.cli import train

    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    return parser


def flag_actions() -> dict[str, argparse.Action]:
    """dest -> action of every ``gnnflow train`` flag that sets a training setting."""
    skip = {"help", "config", "opt", "nnodes", "node_rank", "master"}
    return {a.dest: a for a in train_parser()._actions
            if a.dest not in skip and not a.dest.startswith("optflag_")}


def test_every_setting_has_a_flag_and_every_flag_a_setting():
    fields = {f.name for f in settings()}
    dests = set(flag_actions())
    assert dests == fields - {"options"}, (
        f"flags without a setting: {sorted(dests - fields)}; settings without a flag: {sorted(fields - dests)}")


def test_flags_offer_the_settings_choices():
    actions = flag_actions()
    for f in settings():
        if f.metadata.get("choices") and f.name in actions:
            assert tuple(actions[f.name].choices) == tuple(f.metadata["choices"]), f.name


def _other_value(f: dataclasses.Field) -> tuple[list[str], object]:
    """Command-line words setting ``f`` to a value other than its default, and that value."""
    base, optional = base_type(f)
    flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
    if f.metadata.get("choices"):
        value = next(c for c in f.metadata["choices"] if c != f.default)
        return [flag, str(value)], value
    if base == "bool":
        return [flag], True
    if base == "int":
        return [flag, "3"], 3
    if base == "float":
        return [flag, "0.125"], 0.125
    if base.startswith("list["):
        return [flag, "4,3"], [4, 3]
    if base.startswith("dict["):  # model_opts: a mapping of scalars
        return [flag, "eps=0.5"], {"eps": 0.5}
    return [flag, "somewhere"], "somewhere"


@pytest.mark.parametrize("name", [f.name for f in settings() if f.name not in ("options", "graph")])
def test_each_flag_sets_its_setting(name):
    f = next(f for f in settings() if f.name == name)
    words, value = _other_value(f)
    extra = ["--layers", "2"] if name == "fanouts" else []
    extra += ["--fanouts", "5,5,5"] if name == "num_layers" else []
    extra += ["--model", "pyg:GINConv"] if name == "model_opts" else []  # a built-in model takes none
    cfg = config_from_args(train_parser().parse_args(["--graph", "g", *words, *extra]))
    assert getattr(cfg, name) == value


def test_workflow_schema_has_every_setting_a_workflow_sets():
    props = schema()["$defs"]["train_settings"]["properties"]
    want = {f.name for f in settings()} - WORKFLOW_OWN
    assert set(props) == want | set(RUN_KEYS), (
        f"in the schema only: {sorted(set(props) - want - set(RUN_KEYS))}; "
        f"settings missing from it: {sorted(want - set(props))}")
    assert schema()["$defs"]["strategy"]["enum"] == list(STRATEGIES)


@pytest.mark.parametrize("f", [f for f in settings() if f.name not in WORKFLOW_OWN | {"options"}],
                         ids=lambda f: f.name)
def test_schema_accepts_a_value_and_a_sweep_and_the_limits_of_each_setting(f):
    props = schema()["$defs"]["train_settings"]["properties"]
    words, value = _other_value(f)
    jsonschema.validate(value, props[f.name])
    jsonschema.validate([f.default if f.default is not dataclasses.MISSING else value, value], props[f.name])
    meta = f.metadata
    bad = None
    if meta.get("choices"):
        bad = "no-such-choice"
    elif meta.get("minimum") is not None:
        bad = meta["minimum"] - 1
    elif meta.get("positive"):
        bad = 0
    if bad is not None:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, props[f.name])
        with pytest.raises(ConfigError, match=f.name):
            TrainConfig(graph="g", **{f.name: bad})
    if meta.get("pattern"):  # open choices (the model: a name or a layer class) follow the pattern
        jsonschema.validate("pkg.layers:MyConv", props[f.name])
        assert TrainConfig(graph="g", **{f.name: "pkg.layers:MyConv"})


EIGHT = {"activation": "relu", "aggregator": "gcn", "attn_drop": 0.1, "device": "cpu", "feat_drop": 0.1,
         "input_dropout": 0.1, "out_heads": 3, "weight_decay": 0.01}


def test_a_workflow_config_reaches_the_ranks(tiny_store, tmp_path):
    """The eight settings no workflow config could set before: a sweep sets them, the run's settings
    file carries them to ``gnnflow train --config``, and the ranks build their model (GAT output
    heads) and optimizer (weight decay) from them; run.json records all eight."""
    from gnnflow.cli import main
    from gnnflow.partition import partition_graph

    book = partition_graph(tiny_store.path, "random", 2, tmp_path / "book", seed=0)
    cfg = copy.deepcopy(DEFAULT)
    cfg["train"] = {"sweeps": [{"name": "eight", "strategy": "data", "dataset": "synthetic", "partition": "metis4",
                                "workers": 2, "model": "gat", "hidden": 8, "num_layers": 2, "fanouts": [3, 3],
                                "batch_size": 64, "epochs": 1, **EIGHT}]}
    cfg["partitions"]["metis4"]["parts"] = 2
    (run,) = expand_runs(validate_config(cfg))
    settings_file = tmp_path / "settings.yaml"
    write_settings(run, settings_file)
    out = tmp_path / "run"
    assert main(["train", "--config", str(settings_file), "--graph", str(tiny_store.path), "--partition",
                 str(book.path), "--out", str(out)]) == 0
    recorded = json.loads((out / "run.json").read_text())["config"]
    assert {k: recorded[k] for k in EIGHT} == EIGHT
    model = torch.load(out / "model.pt", weights_only=True)
    assert model["layers.1.attn_l"].shape[1] == 3  # the output layer has out_heads heads
    ckpt = torch.load(out / "ckpt" / "last.pt", weights_only=True)
    assert {r["optimizer"]["param_groups"][0]["weight_decay"] for r in ckpt["ranks"]} == {0.01}


def test_options_are_parsed_once_with_one_line_errors():
    from gnnflow.strategies.base import strategy_class

    cls = strategy_class("hec")
    cfg = cls.parse_options(TrainConfig(graph="g", strategy="hec", options={"cs": "7", "ls": 3}))
    assert (cfg.options.cache_lines, cfg.options.life_span) == (7, 3)  # the paper's symbols are aliases
    assert cls.parse_options(cfg) is cfg  # parsed once: a parsed config passes through
    for bad, words in (({"nope": 1}, "options.nope: not an option of strategy hec"),
                       ({"ls": -1}, "options.ls: must be >= 0"),
                       ({"pipeline": "maybe"}, "--opt pipeline=maybe: true or false"),
                       ({"cs": 1, "cache_lines": 2}, "given twice")):
        with pytest.raises(ConfigError, match=words) as err:
            cls.parse_options(TrainConfig(graph="g", strategy="hec", options=bad))
        assert "\n" not in str(err.value)


def test_the_docs_name_every_setting_a_workflow_sets():
    """docs/workflow.md lists the training settings a sweep may set: every one of them."""
    text = (ROOT / "docs" / "workflow.md").read_text()
    missing = [f.name for f in settings() if f.name not in WORKFLOW_OWN and f"`{f.name}`" not in text]
    assert not missing, f"docs/workflow.md does not name: {missing}"
