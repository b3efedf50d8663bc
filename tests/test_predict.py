"""``gnnflow predict``: every vertex's predictions or embeddings of a trained run, as Parquet.

The predictions give back the accuracies the run recorded (final weights: ``final``, best-validation
weights: ``best``) for a single-process run and a 2-rank data-parallel run, predicted in one
process and on 2 ranks over the book; embeddings equal the layer's outputs on the whole graph;
a failure leaves no file behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gnnflow.cli import main as cli_main


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 400-vertex graph, a 2-part book, a single-process and a 2-rank data-parallel GCN run, each
    with its best-validation epoch before its last (lr 0.2 overshoots)."""
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("predict")
    graph = prepare_synthetic(tmp / "graph", num_nodes=400, feature_dim=12, num_classes=4).path
    book = partition_graph(graph, "random", 2, tmp / "book", seed=0).path
    common = ["--graph", str(graph), "--model", "gcn", "--hidden", "16", "--batch-size", "64", "--epochs", "6",
              "--lr", "0.2"]
    assert cli_main(["train", *common, "--out", str(tmp / "single")]) == 0
    assert cli_main(["train", *common, "--strategy", "data", "--workers", "2", "--partition", str(book),
                     "--out", str(tmp / "data")]) == 0
    for run in ("single", "data"):  # final and best weights differ, so both are tested
        info = json.loads((tmp / run / "run.json").read_text())
        assert info["best"]["epoch"] < info["final"]["epoch"], run
    return {"tmp": tmp, "graph": Path(graph), "book": Path(book), "single": tmp / "single", "data": tmp / "data"}


def _predict(run: Path, out: Path, *args: str) -> pd.DataFrame:
    assert cli_main(["predict", str(run), "--out", str(out), *args]) == 0
    return pd.read_parquet(out)


def _accuracy(df: pd.DataFrame, graph: Path, split: str) -> float:
    labels = np.load(graph / "labels.npy")
    ids = np.load(graph / f"{split}_idx.npy")
    pred = df.set_index("vertex")["pred"].loc[ids].to_numpy()
    return float((pred == labels[ids]).sum()) / ids.shape[0]  # as gnnflow.strategies.metrics counts


def _recorded(run: Path, which: str) -> dict:
    return json.loads((run / "run.json").read_text())[which]


@pytest.mark.parametrize("which", ["final", "best"])
def test_single_run_predictions_give_the_recorded_accuracies(runs, tmp_path, which):
    df = _predict(runs["single"], tmp_path / "p.parquet", "--which", which)
    n = int(np.load(runs["graph"] / "labels.npy").shape[0])
    assert list(df.columns[:2]) == ["vertex", "pred"] and df["vertex"].tolist() == list(range(n))
    logits = df.filter(regex=r"^logit_\d+$").to_numpy()
    assert logits.dtype == np.float32 and logits.shape == (n, 4)
    assert (df["pred"].to_numpy() == logits.argmax(1)).all()
    recorded = _recorded(runs["single"], which)
    for split in ("train", "val", "test"):
        assert _accuracy(df, runs["graph"], split) == recorded[f"{split}_acc"], split


@pytest.mark.parametrize("ranks", [None, "2"], ids=["one-process", "two-ranks"])
def test_data_parallel_run_predictions_give_the_recorded_accuracy(runs, tmp_path, capsys, ranks):
    args = ["--workers", ranks] if ranks else []
    df = _predict(runs["data"], tmp_path / "p.parquet", *args)
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 400 and summary["workers"] == (2 if ranks else 1)
    assert sorted(df["vertex"]) == list(range(400))  # every vertex once, whichever rank owns it
    for which in ("final", "best"):
        if which == "best":
            df = _predict(runs["data"], tmp_path / "best.parquet", "--which", which, *args)
        recorded = _recorded(runs["data"], which)
        assert _accuracy(df, runs["graph"], "test") == recorded["test_acc"]
        assert _accuracy(df, runs["graph"], "val") == recorded["val_acc"]


def test_embeddings_are_the_layers_outputs(runs, tmp_path):
    from gnnflow.config import TrainConfig
    from gnnflow.data.store import open_store
    from gnnflow.nn import build_model_from_config
    from gnnflow.sampling import full_blocks
    from gnnflow.strategies.common import graph_degrees, model_graph

    # single-process GCN: layer 1 on the whole graph at once (A + I, whole-graph degrees)
    emb = _predict(runs["single"], tmp_path / "e.parquet", "--embeddings", "--layer", "1", "--chunk-size", "97")
    assert list(emb.columns) == ["vertex"] + [f"emb_{j}" for j in range(16)]
    store = open_store(runs["graph"])
    cfg = TrainConfig.from_dict(json.loads((runs["single"] / "run.json").read_text())["config"])
    net = build_model_from_config(cfg, store.feature_dim, store.num_classes)
    net.load_state_dict(torch.load(runs["single"] / "model.pt", weights_only=True))
    net.eval()
    g = model_graph(store, cfg)
    block = full_blocks(g.indptr, g.indices, 1)[0]
    in_deg, out_deg = graph_degrees(g.indptr, g.indices)
    block.src_deg, block.dst_deg = out_deg, in_deg
    with torch.no_grad():
        ref = net.layer_step(0, block, torch.from_numpy(np.array(store.features))).numpy()
    np.testing.assert_allclose(emb.filter(like="emb_").to_numpy(), ref, atol=1e-5, rtol=0)
    # 2-rank GCN (whole-graph degrees through the parts): the one-process embeddings, row by row
    one = _predict(runs["data"], tmp_path / "e1.parquet", "--embeddings").set_index("vertex").sort_index()
    two = _predict(runs["data"], tmp_path / "e2.parquet", "--embeddings", "--partition", str(runs["book"]))
    two = two.set_index("vertex").sort_index()
    assert one.shape == (400, 16)
    np.testing.assert_allclose(two.to_numpy(), one.to_numpy(), atol=1e-5, rtol=0)


def _one_line_error(capsys, argv: list[str], *needles: str) -> None:
    assert cli_main(argv) == 1
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert len(errors) == 1 and errors[0].startswith("gnnflow predict: error: "), errors
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_bad_requests_fail_in_one_line_and_leave_nothing(runs, tmp_path, capsys):
    out = tmp_path / "p.parquet"
    base = ["predict", str(runs["single"]), "--out", str(out)]
    _one_line_error(capsys, ["predict", str(tmp_path), "--out", str(out)], "run.json: missing")
    _one_line_error(capsys, [*base, "--embeddings", "--layer", "3"], "--layer: 3", "1..2")
    _one_line_error(capsys, [*base, "--layer", "1"], "--layer: only with --embeddings")
    _one_line_error(capsys, [*base, "--workers", "2"], "needs --partition")
    _one_line_error(capsys, [*base, "--partition", str(runs["book"]), "--workers", "3"], "2 parts")
    from gnnflow.data.synthetic import prepare_synthetic

    other = prepare_synthetic(tmp_path / "other", num_nodes=50, feature_dim=5, num_classes=4).path
    _one_line_error(capsys, [*base, "--graph", str(other)], "do not fit graph", "(5 features, 4 classes)",
                    "layers.0.weight is (12, 16) in the file, the model needs (5, 16)")
    import shutil

    shutil.rmtree(other)
    (runs["single"] / "model-best.pt").rename(tmp_path / "kept.pt")
    try:
        _one_line_error(capsys, [*base, "--which", "best"], "model-best.pt: missing")
    finally:
        (tmp_path / "kept.pt").rename(runs["single"] / "model-best.pt")
    out.write_text("keep me")
    _one_line_error(capsys, base, "already exists")
    assert out.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.parquet"]


def test_a_failing_rank_leaves_no_file(runs, tmp_path, capsys):
    from gnnflow.partition.api import partition_graph

    book = partition_graph(runs["graph"], "random", 2, tmp_path / "book", seed=1).path
    feats = Path(book) / "part1" / "features.npy"
    feats.write_bytes(feats.read_bytes()[:-64])  # rank 1 cannot load its shard
    out = tmp_path / "out" / "p.parquet"
    assert cli_main(["predict", str(runs["data"]), "--out", str(out), "--partition", str(book)]) == 1
    assert "part1/features.npy" in capsys.readouterr().err
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
