"""Single-process relational training on a homogenized store (DistDGLv2 §4.1.1, §4.1.4): RGCN and
R-GAT with per-relation fanouts learn, layer-wise evaluation equals a whole-graph forward pass,
settings a relational run cannot take are refused in one line."""

from __future__ import annotations

import pytest
import torch

from gnnflow.cli import main as cli_main
from gnnflow.config import TrainConfig
from gnnflow.data.hetero_synthetic import prepare_synthetic_hetero
from gnnflow.errors import ConfigError
from gnnflow.sampling import Block, sort_rows_by_type
from gnnflow.strategies.common import full_inference
from gnnflow.strategies.driver import run_training
from gnnflow.strategies.relational import TypedGraph

SMALL = dict(num_papers=600, num_authors=800, num_institutions=20, num_fields=40, num_classes=4, feature_signal=0.2)
FANOUTS = "cites:5,rev_cites:5,*:3;cites:5,*:3"


@pytest.fixture(scope="module")
def hetero(tmp_path_factory):
    return prepare_synthetic_hetero(tmp_path_factory.mktemp("hetero") / "h", **SMALL)



def _train(store, model: str, epochs: int, **kw):
    cfg = TrainConfig.from_dict({"graph": str(store.path), "model": model, "epochs": epochs, "eval_every": epochs,
                                 "fanouts": FANOUTS, "batch_size": 128, "lr": 0.01, "hidden": 32, "seed": 0, **kw})
    return run_training(cfg)[-1]


def test_rgcn_learns_on_the_hetero_store(hetero, one_thread):
    """4 classes (chance 0.25): RGCN on per-type features and typed neighbourhoods beats chance
    clearly, and beats an MLP on the paper's own (common-width) features."""
    rgcn = _train(hetero, "rgcn", 3, num_bases=2)
    mlp = _train(hetero, "mlp", 3)
    print(f"rgcn {rgcn.test_acc:.3f} mlp {mlp.test_acc:.3f}")
    assert rgcn.test_acc >= 0.6 and rgcn.test_acc >= mlp.test_acc + 0.15


def test_rgat_and_full_batch_rgcn_train(hetero, one_thread):
    rgat = _train(hetero, "rgat", 2, heads=2)
    full = _train(hetero, "rgcn", 8, fanouts=[-1, -1], options={"full_batch": True})
    print(f"rgat {rgat.test_acc:.3f} full-batch rgcn {full.test_acc:.3f}")
    assert rgat.test_acc >= 0.5 and full.test_acc >= 0.5


def test_layerwise_evaluation_equals_the_whole_graph_forward(hetero):
    """Chunked layer-wise inference (typed full blocks, per-type rows) computes what the model
    computes on whole-graph blocks: the edge and vertex types reach every chunk."""
    import numpy as np

    from gnnflow.nn import build_model
    from gnnflow.strategies.relational import make_embeddings

    typed = TypedGraph(hetero)
    for model in ("rgcn", "rgat"):
        torch.manual_seed(0)
        net = build_model(model, 0, 8, 4, 2, heads=2, schema=typed.schema).eval()
        # the featureless type's rows (institutions), every one owned here
        cfg = TrainConfig(graph=str(hetero.path), model=model, hidden=8)
        typed.embeddings = make_embeddings(typed.schema, typed.offsets, np.arange(hetero.num_nodes), cfg)
        with torch.no_grad():
            for p in net.parameters():
                p.normal_(0, 0.3)  # biases too: each relation's reaches its destination type
        indices, etypes = sort_rows_by_type(hetero.indptr, hetero.indices, hetero.extra["edge_type"])
        block = Block.full_graph(hetero.indptr, indices, etypes, typed.vertex_types())
        with torch.no_grad():
            want = net([block, block], typed.rows(torch.arange(hetero.num_nodes)))
        got = full_inference(net, hetero.indptr, hetero.indices, None, chunk_size=301, typed=typed)
        assert torch.allclose(got, want, atol=1e-4), model


def test_relation_names_resolve_against_the_store(hetero):
    typed = TypedGraph(hetero)
    names = ["___".join(e) for e in typed.typemap.edge_types]
    (layer,) = typed.relation_fanouts([{"cites": 4, "paper___rev_writes___author": 2, "*": 1}])
    assert layer[names.index("paper___cites___paper")] == 4 and layer[names.index("paper___rev_writes___author")] == 2
    assert sorted(layer) == list(range(len(names))) and list(layer.values()).count(1) == len(names) - 2
    for bad, words in (({"cites": 1}, "names no count for"), ({"nope": 1, "*": 1}, "unknown or ambiguous"),
                       ({"cites": 1, "paper___cites___paper": 2, "*": 1}, "named twice")):
        with pytest.raises(ConfigError, match=words):
            typed.relation_fanouts([bad])


def test_relational_settings_refused_in_one_line(hetero, tiny_store, tmp_path, capsys):
    cases = [
        (["--graph", str(tiny_store.path), "--model", "rgcn", "--fanouts", "3,3"], "need a homogenized"),
        (["--graph", str(hetero.path), "--model", "rgcn", "--strategy", "split", "--workers", "2",
          "--fanouts", "3,3"], "strategy 'split' has no typed (per-relation) path"),
        (["--graph", str(hetero.path), "--model", "rgcn", "--self-loops", "--fanouts", "3,3"], "self_loops"),
        (["--graph", str(hetero.path), "--model", "sage", "--fanouts", "cites:3;3"], "names no count for"),
    ]
    for args, words in cases:
        assert cli_main(["train", *args, "--epochs", "1", "--out", str(tmp_path / "run")]) != 0
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err, err


def test_relational_resume_equals_uninterrupted(hetero, tmp_path, one_thread):
    """Stopped after epoch 0 and resumed, an R-GAT run with dropout (and the featureless types'
    embeddings) ends as an uninterrupted one: typed draws are keyed by batch like untyped ones."""
    from test_train_resume import assert_same_run

    def cfg(out, **kw):
        return TrainConfig.from_dict({"graph": str(hetero.path), "model": "rgat", "epochs": 2, "fanouts": FANOUTS,
                                      "batch_size": 256, "hidden": 8, "heads": 2, "dropout": 0.3, "seed": 3,
                                      "out": str(out), **kw})

    run_training(cfg(tmp_path / "whole"))
    run_training(cfg(tmp_path / "parted", options={"stop_after_epoch": 0}))
    run_training(cfg(tmp_path / "parted", resume=True))
    assert_same_run(tmp_path / "whole", tmp_path / "parted")
