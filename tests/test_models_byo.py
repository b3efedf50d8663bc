"""Bring your own model (issue 34, item 1; docs/models.md): a layer class from a file, a module or
PyG (``pyg:GINConv`` with its MLP, ``pyg:GraphConv``) trains under every layer-wise strategy, is
initialised identically on every rank, is checked exactly against single-process training,
predicts from its run directory; full-batch strategies and bad specs are refused in one line."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch

from gnnflow.config import TrainConfig, model_label
from gnnflow.errors import ConfigError

pytest.importorskip("torch_geometric")

#: a layer class written the way a user writes one (docs/models.md): ``h_i' = W [h_i || mean_j h_j]``
LAYER_FILE = textwrap.dedent('''
    import torch
    from torch import nn


    class MeanConcat(nn.Module):
        def __init__(self, in_dim, out_dim, bias=True):
            super().__init__()
            self.lin = nn.Linear(2 * in_dim, out_dim, bias=bias)

        def forward(self, block, h_src):
            agg = torch.zeros(block.num_dst, h_src.shape[1], dtype=h_src.dtype, device=h_src.device)
            agg.index_add_(0, block.edge_dst(), h_src[block.indices])
            deg = block.in_degrees().clamp(min=1).unsqueeze(1).to(h_src.dtype)
            return self.lin(torch.cat([h_src[: block.num_dst], agg / deg], 1))


    class NoEmpty(MeanConcat):
        def forward(self, block, h_src):
            assert block.num_dst > 0, "no vertices"
            return super().forward(block, h_src)
''')


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A 600-vertex synthetic graph, random books of 2 and 4 parts, and the layer file."""
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("byo")
    store = prepare_synthetic(tmp / "graph", num_nodes=600, avg_degree=8, feature_dim=8, num_classes=4, seed=0)
    books = {p: str(partition_graph(store.path, "random", p, tmp / f"book{p}", seed=0).path) for p in (2, 4)}
    layer_file = tmp / "my_layers.py"
    layer_file.write_text(LAYER_FILE)
    return {"tmp": tmp, "graph": str(store.path), "books": books, "file": f"{layer_file}:MeanConcat",
            "models": ["pyg:GINConv", "pyg:GraphConv", f"{layer_file}:MeanConcat"]}


def _cfg(world, model: str, strategy: str = "single", workers: int = 1, **kw) -> TrainConfig:
    settings = {"hidden": 16, "num_layers": 2, "fanouts": [5, 5], "batch_size": 128, "epochs": 2, "dropout": 0.1,
                "seed": 3, **kw}
    return TrainConfig(graph=world["graph"], partition=world["books"].get(workers) if workers > 1 else None,
                       strategy=strategy, workers=workers, model=model, **settings)


# ------------------------------------------------------------------------------ config and specs
def test_model_setting_takes_names_and_layer_classes():
    from gnnflow.config import is_layer_class

    for spec in ("pyg:GINConv", "my.pkg.layers:MyConv", "models/layers.py:MyConv", "/abs/l.py:C"):
        assert is_layer_class(spec) and TrainConfig(graph="g", model=spec).model == spec
    assert not is_layer_class("sage")
    assert [model_label(m) for m in ("sage", "pyg:GINConv", "a/b/layers.py:My", "my.pkg:My")] == \
        ["sage", "pyg-GINConv", "layers-My", "pkg-My"]
    for bad, words in (({"model": "graphsage"}, "model: unknown 'graphsage'; choose one of sage.*layer class"),
                       ({"model": "sage", "model_opts": {"eps": 1}}, "model_opts: the built-in model 'sage'"),
                       ({"model": "pyg:GINConv", "model_opts": {"eps": [1]}}, "model_opts: expected a mapping"),
                       ({"model": "pyg:GINConv", "fanouts": [{"*": 3}], "num_layers": 1}, "per-relation")):
        with pytest.raises(ConfigError, match=words) as err:
            TrainConfig(graph="g", **bad)
        assert "\n" not in str(err.value)


def test_flags_schema_and_model_opt_values():
    import argparse

    import jsonschema

    from gnnflow.cli import train
    from gnnflow.config import config_from_args
    from gnnflow.workflow import schema

    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    cfg = config_from_args(parser.parse_args(["--graph", "g", "--model", "pyg:GINConv", "--model-opt", "eps=0.5",
                                              "--model-opt", "train_eps=true", "--model-opt", "aggr=add",
                                              "--model-opt", "k=3"]))
    assert cfg.model == "pyg:GINConv"
    assert cfg.model_opts == {"eps": 0.5, "train_eps": True, "aggr": "add", "k": 3}
    with pytest.raises(SystemExit):  # argparse: neither a built-in nor a layer class
        parser.parse_args(["--graph", "g", "--model", "graphsage"])
    props = schema()["$defs"]["train_settings"]["properties"]
    jsonschema.validate("pyg:GraphConv", props["model"])
    jsonschema.validate(["sage", "layers.py:My"], props["model"])
    jsonschema.validate([{"eps": 0.1}, {"eps": 0.2}], props["model_opts"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("graphsage", props["model"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"eps": [1, 2]}, props["model_opts"])


@pytest.mark.parametrize("spec,words", [
    ("pyg:NoSuchConv", "torch_geometric.nn has no convolution 'NoSuchConv'"),
    ("pyg:RGCNConv", "RGCNConv needs edge_type"),
    ("no_such_pkg.layers:Conv", "no module 'no_such_pkg'"),
    ("missing/layers.py:Conv", "no such file missing/layers.py"),
    ("FILE:Nope", "has no 'Nope'"),
    ("FILE:NoEmpty", "layer 0 fails on a block without vertices .*no vertices"),
    ("torch.nn:Linear", "layer 0 fails on a block without vertices"),
])
def test_bad_layer_classes_fail_in_one_line(world, spec, words):
    from gnnflow.nn import build_model_from_config

    spec = spec.replace("FILE", world["file"].rpartition(":")[0])
    with pytest.raises(ConfigError, match=words) as err:
        build_model_from_config(TrainConfig(graph="g", model=spec), 8, 4)
    assert "\n" not in str(err.value)


def test_bad_model_opt_fails_before_any_rank_starts(world):
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.preflight import check_run

    cfg = _cfg(world, "pyg:GraphConv", model_opts={"no_such_option": 1})
    with pytest.raises(ConfigError, match=r"building layer 0 as GraphConv\(8, 16, no_such_option=1\) failed"):
        check_run(cfg, strategy_class("single"), memory=False)


@pytest.mark.parametrize("strategy", ["fullbatch", "dgcl", "distdgl"])
def test_strategies_without_a_layer_wise_path_refuse(world, strategy):
    from gnnflow.strategies.base import strategy_class

    cls = strategy_class(strategy)
    with pytest.raises(ConfigError, match="pyg:GraphConv.*(GCN-form|DGL's own).*single, data, split") as err:
        cls.check_config(cls.parse_options(_cfg(world, "pyg:GraphConv", strategy, 2)))
    assert "\n" not in str(err.value)


def test_pyg_layers_build_edge_index_once_and_handle_empty_blocks():
    from gnnflow.nn import build_model
    from gnnflow.sampling import Block

    b = Block(dst_ids=torch.tensor([0, 1]), src_ids=torch.tensor([0, 1, 2]), indptr=torch.tensor([0, 2, 3]),
              indices=torch.tensor([1, 2, 0]))
    for spec in ("pyg:GINConv", "pyg:GraphConv", "pyg:GCNConv", "pyg:TransformerConv"):
        net = build_model(spec, 4, 8, 3, 2).eval()
        x = torch.randn(3, 4)
        assert net.layer_step(0, b, x).shape == (2, 8)
        assert torch.equal(b.cache["pyg_edge_index"], torch.tensor([[1, 2, 0], [0, 0, 1]]))
        assert net.layer_step(1, Block.empty(), torch.zeros(0, 8)).shape == (0, 3)
    gin = build_model("pyg:GINConv", 4, 8, 3, 2, model_opts={"train_eps": True})
    assert [type(m).__name__ for m in gin.layers[0].conv.nn] == ["Linear", "ReLU", "Linear"]
    assert "layers.0.conv.eps" in dict(gin.named_parameters())
    # GraphConv: h_i' = W_root h_i + W_rel sum_j h_j, as PyG computes it on the whole graph
    net = build_model("pyg:GraphConv", 4, 8, 3, 1).eval()
    x = torch.randn(3, 4)
    conv = net.layers[0].conv
    want = conv(x, torch.tensor([[1, 2, 0], [0, 0, 1]]))[:2]
    assert torch.allclose(net.layer_step(0, b, x), want, atol=1e-6)


def test_seeded_builds_are_identical(world):
    from gnnflow.nn import build_model_from_config
    from gnnflow.strategies.common import seed_everything

    for spec in world["models"]:
        states = []
        for _ in range(2):
            seed_everything(5)
            states.append(build_model_from_config(TrainConfig(graph="g", model=spec), 8, 4).state_dict())
        assert states[0].keys() == states[1].keys()
        assert all(torch.equal(states[0][k], states[1][k]) for k in states[0]), spec


# ------------------------------------------------------------------------------ training
def test_single_process_trains_each_and_predict_rebuilds_it(world, tmp_path):
    """Two PyG convolutions and a layer file train in one process; the run names the model string;
    ``gnnflow predict`` rebuilds the PyG model from the run directory and gives back its accuracy."""
    import pandas as pd

    from gnnflow.strategies.driver import run_training
    from gnnflow.strategies.minibatch.predict import predict

    labels = np.load(f"{world['graph']}/labels.npy")
    test_ids = np.load(f"{world['graph']}/test_idx.npy")
    for spec in world["models"]:
        out = tmp_path / model_label(spec)
        records = run_training(_cfg(world, spec, out=str(out), epochs=3, lr=0.01))
        assert all(np.isfinite(r.loss) for r in records) and records[-1].loss < records[0].loss, spec
        info = json.loads((out / "run.json").read_text())
        assert info["config"]["model"] == spec and records[0].model == spec
        if spec == "pyg:GINConv":
            predict(out, tmp_path / "pred.parquet")
            df = pd.read_parquet(tmp_path / "pred.parquet").set_index("vertex")
            acc = float((df["pred"].loc[test_ids].to_numpy() == labels[test_ids]).mean())
            assert acc == pytest.approx(info["final"]["test_acc"], abs=1e-9)


def _train_models(ctx, runs: list[dict]) -> list[dict]:
    """On this rank: a seeded build of every model (no broadcast), then each (strategy, model)
    run for its epochs; the initial parameters, the losses and the accuracies of each."""
    from gnnflow.nn import build_model_from_config
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.common import seed_everything

    out = []
    for d in runs:
        cfg = TrainConfig.from_dict(d)
        seed_everything(cfg.seed)
        seeded = build_model_from_config(cfg, 8, 4)
        s = strategy_class(cfg.strategy)(cfg, ctx)
        s.prepare()
        net = getattr(s, "net", None) or s.model
        initial = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).clone()
        losses = [s.run_epoch(e, Recorder()) for e in range(cfg.epochs)]
        accs = s.evaluate()
        getattr(s, "close", lambda: None)()
        out.append({"strategy": cfg.strategy, "model": cfg.model, "losses": losses, "test_acc": accs["test_acc"],
                    "seeded": torch.cat([p.detach().reshape(-1) for p in seeded.parameters()]).numpy(),
                    "initial": initial.numpy()})
    return out


def _check_ranks(results: list[list[dict]]) -> None:
    for runs in zip(*results, strict=True):
        what = (runs[0]["strategy"], runs[0]["model"])
        assert all(np.isfinite(r["losses"]).all() for r in runs), what
        for r in runs[1:]:  # identical initial weights everywhere: seeded builds and the strategy's model
            assert np.array_equal(r["seeded"], runs[0]["seeded"]), what
            assert np.array_equal(r["initial"], runs[0]["initial"]), what
            assert r["test_acc"] == runs[0]["test_acc"], what
        assert np.array_equal(runs[0]["seeded"], runs[0]["initial"]), what  # seeded before the build


def test_two_ranks_train_under_data_split_hec_and_p3(world):
    from gnnflow.runtime.launch import run_ranks

    runs = [_cfg(world, m, s, 2, options={"pipeline": False}).to_dict() for s in ("data", "split")
            for m in world["models"]]
    runs += [_cfg(world, "pyg:GraphConv", "hec", 2).to_dict(), _cfg(world, "pyg:GraphConv", "p3", 2,
                                                                     options={"pipeline": False}).to_dict()]
    results = run_ranks(_train_models, 2, runs, timeout_s=300)
    _check_ranks(results)
    assert [(r["strategy"], r["model"]) for r in results[0]] == [(d["strategy"], d["model"]) for d in runs]


@pytest.mark.slow
def test_four_ranks_train_under_data(world):
    from gnnflow.runtime.launch import run_ranks

    runs = [_cfg(world, m, "data", 4, options={"pipeline": False}).to_dict() for m in world["models"]]
    _check_ranks(run_ranks(_train_models, 4, runs, timeout_s=300))


def test_p3_splits_affine_layer_classes_and_refuses_others():
    """P3 splits layer 0 by feature columns: GraphConv is affine in its input (its partials sum to
    the layer), GINConv's MLP is not (refused in one line)."""
    from gnnflow.nn import build_model
    from gnnflow.sampling import Block
    from gnnflow.strategies.split.p3 import check_first_layer, partial_first_layer

    net = build_model("pyg:GraphConv", 6, 8, 3, 2)
    check_first_layer(net, "pyg:GraphConv")
    b = Block(dst_ids=torch.tensor([0, 1]), src_ids=torch.tensor([0, 1, 2]), indptr=torch.tensor([0, 2, 3]),
              indices=torch.tensor([1, 2, 0]))
    x = torch.randn(3, 6)
    cols = [torch.arange(0, 4), torch.arange(4, 6)]
    parts = [partial_first_layer(net.layers[0], b, x[:, c], c, with_bias=i == 0) for i, c in enumerate(cols)]
    assert torch.allclose(sum(parts), net.layers[0](b, x), atol=1e-6)
    with pytest.raises(ConfigError, match="strategy p3: model 'pyg:GINConv' has no push-pull first layer"):
        check_first_layer(build_model("pyg:GINConv", 6, 8, 3, 2), "pyg:GINConv")


# ------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("workers", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_verify_data_parallel_equals_single_process_for_graphconv(workers, tmp_path, capsys, monkeypatch):
    from gnnflow.cli import main

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    code = main(["verify", "--strategy", "data", "--workers", str(workers), "--model", "pyg:GraphConv", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"], out
    assert out["model"] == "pyg:GraphConv" and out["fanouts"] == [10, 10]  # finite fanouts
    assert out["grad_norm"] > 1e-3


@pytest.mark.slow
def test_verify_split_with_a_layer_class(world, tmp_path):
    from gnnflow.strategies.verify.split import verify

    res = verify(2, model="pyg:GINConv", seed=0)
    assert res["passed"], res["max_abs_diff"]


def test_a_workflow_sweep_names_layer_class_runs_and_writes_their_settings(tmp_path):
    import copy
    from pathlib import Path

    import yaml

    from gnnflow.workflow import expand_runs, validate_config, write_settings

    root = Path(__file__).resolve().parents[1]
    config = copy.deepcopy(yaml.safe_load((root / "config" / "config.yaml").read_text()))
    config["train"] = {"sweeps": [{"name": "byo", "strategy": "single", "dataset": "synthetic",
                                   "model": "pyg:GINConv", "model_opts": [{"eps": 0.1}, {"eps": 0.2}]},
                                  {"name": "mine", "strategy": "single", "dataset": "synthetic",
                                   "model": "layers/my_layers.py:MeanConcat"}]}
    runs = expand_runs(validate_config(config))
    assert [r.name for r in runs] == ["byo-single-synthetic-pyg-GINConv-w1-moeps0.1",
                                      "byo-single-synthetic-pyg-GINConv-w1-moeps0.2",
                                      "mine-single-synthetic-my_layers-MeanConcat-w1"]
    write_settings(runs[1], tmp_path / "s.yaml")
    written = yaml.safe_load((tmp_path / "s.yaml").read_text())
    assert written["model"] == "pyg:GINConv" and written["model_opts"] == {"eps": 0.2}
