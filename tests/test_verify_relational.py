"""Data-parallel RGCN / R-GAT against single-process training (DistDGLv2 §4.1.4, §4.2): with
per-relation fanouts the logits, gradients, parameters and the featureless types' embedding rows
after one step equal one process on the union batch; the check fails when a block loses its edge
types; embedding rows are updated only where a batch touched them, on their owner; a stopped and
resumed run (embeddings included) ends as an uninterrupted one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gnnflow.cli import main as cli_main
from gnnflow.config import TrainConfig, parse_fanouts
from gnnflow.runtime.launch import run_ranks
from gnnflow.strategies.verify.data_parallel import verify

FANOUTS = "cites:5,rev_writes:3,*:2;cites:3,*:2"



def test_gnnflow_verify_data_rgcn_with_per_relation_fanouts(capsys):
    assert cli_main(["verify", "--strategy", "data", "--workers", "4", "--model", "rgcn", "--fanouts", FANOUTS,
                     "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["passed"] and result["max_abs_diff"]["embeddings"] < 1e-6
    # the owners together advanced exactly the rows the union batch touched, a part of the table
    assert sum(result["rows_updated"]) == result["rows_touched"] and 0 < result["rows_touched"] < result[
        "embedding_rows"]


def test_verify_data_rgat_and_failure_without_edge_types():
    ok = verify(4, model="rgat", fanouts=parse_fanouts(FANOUTS))
    assert ok["passed"], ok["max_abs_diff"]
    bad = verify(3, model="rgcn", fanouts=parse_fanouts(FANOUTS), tamper="etypes")
    assert not bad["passed"] and bad["max_abs_diff"]["logits"] > 1e-2


def test_verify_refuses_per_relation_fanouts_for_a_homogeneous_model(capsys):
    assert cli_main(["verify", "--strategy", "data", "--workers", "2", "--model", "sage", "--fanouts", "cites:3;3"]) == 1
    err = capsys.readouterr().err.strip()
    assert "per-relation fanouts are verified for --strategy data with --model rgcn or rgat" in err and "\n" not in err


def _one_step_rank(ctx, cfg, targets):
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.minibatch.data_parallel import DataParallel
    from gnnflow.strategies.minibatch.pipeline import MiniBatch

    s = DataParallel(cfg, ctx)
    s.prepare()
    emb = s.embeddings
    initial = emb.weight.clone()
    mine = targets[ctx.rank]
    labels = np.asarray(s.part.labels)[s.part.global_to_local(mine)]
    mb = MiniBatch(epoch=0, index=0, targets=torch.from_numpy(mine), labels=torch.from_numpy(labels),
                   meta={"global_batch": sum(len(t) for t in targets)})
    for stage in (s.sample_stage, s.load_stage, s.device_stage):
        mb = stage(mb)
    rec = Recorder()
    s.train_batch(mb, rec)
    return {"owned": emb.owned, "initial": initial.numpy(), "after": emb.weight.numpy().copy(),
            "steps": emb.optimizer.steps.numpy().copy(), "updated": emb.last_updated,
            "inputs": mb.blocks[0].src_ids.numpy(), "counters": dict(rec.counters)}


def test_embedding_rows_update_only_where_touched_on_their_owner(tmp_path):
    """One step on 3 ranks: each rank advances exactly its own featureless rows that some rank's
    batch read (counted), leaves every other row as it was, and rows a batch read from another
    rank's part were sent back and advanced there."""
    from gnnflow.partition.api import partition_graph
    from gnnflow.partition.book import PartitionBook
    from gnnflow.strategies.minibatch.data_parallel import DataParallel
    from gnnflow.strategies.verify.data_parallel import _graph

    store = _graph(tmp_path / "g", True, 600, 0)
    book = partition_graph(store.path, "random", 3, tmp_path / "book", seed=0)
    cfg = DataParallel.parse_options(TrainConfig(
        graph=str(store.path), strategy="data", partition=str(book.path), model="rgcn", hidden=8, num_layers=2,
        fanouts=parse_fanouts(FANOUTS), batch_size=36, workers=3, options={"pipeline": False}))
    targets = [np.asarray(book.load_part(r).train_idx[:12], dtype=np.int64) for r in range(3)]
    res = run_ranks(_one_step_rank, 3, cfg, targets, timeout_s=120)
    offsets = np.asarray(store.meta.node_type_offsets)
    featureless = [store.meta.node_types.index(t) for t in ("author", "institution")]
    types = lambda ids: np.searchsorted(offsets, ids, side="right") - 1  # noqa: E731
    touched = np.unique(np.concatenate([r["inputs"][np.isin(types(r["inputs"]), featureless)] for r in res]))
    node_part = np.asarray(PartitionBook.open(book.path).node_part)
    for rank, r in enumerate(res):
        assert (node_part[r["owned"]] == rank).all()  # a rank holds its own vertices' rows only
        mine = np.isin(r["owned"], touched)
        assert r["updated"] == int(mine.sum()) > 0
        assert np.array_equal(r["steps"] > 0, mine)
        assert np.array_equal(r["after"][~mine], r["initial"][~mine])  # untouched rows: as they were
        read_remote = np.setdiff1d(r["inputs"][np.isin(types(r["inputs"]), featureless)], r["owned"])
        assert read_remote.size and r["counters"]["embedding_bytes_received"] > 0
    assert sum(r["updated"] for r in res) == touched.size


def test_distributed_relational_resume_equals_uninterrupted(tmp_path, one_thread):
    """2-rank data-parallel RGCN, stopped after epoch 0 and resumed: the records, the model and
    every rank's embedding rows and sparse Adam state equal an uninterrupted run's."""
    from test_train_resume import assert_same_run

    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.checkpoint import load_checkpoint
    from gnnflow.strategies.driver import run_training
    from gnnflow.strategies.verify.data_parallel import _graph

    store = _graph(tmp_path / "g", True, 400, 1)
    book = partition_graph(store.path, "random", 2, tmp_path / "book", seed=1)

    def cfg(out, **kw):
        return TrainConfig.from_dict({"graph": str(store.path), "partition": str(book.path), "strategy": "data",
                                      "workers": 2, "model": "rgcn", "epochs": 2, "fanouts": FANOUTS,
                                      "batch_size": 48, "hidden": 8, "dropout": 0.3, "seed": 3, "out": str(out),
                                      **kw})

    run_training(cfg(tmp_path / "whole"))
    run_training(cfg(tmp_path / "parted", options={"stop_after_epoch": 0}))
    run_training(cfg(tmp_path / "parted", resume=True))
    assert_same_run(tmp_path / "whole", tmp_path / "parted")
    ranks = load_checkpoint(tmp_path / "whole")["ranks"]
    assert all(int((r["embeddings"]["steps"] > 0).sum()) > 0 for r in ranks)  # the rows moved, and are kept


def _evaluate_rank(ctx, cfg):
    from gnnflow.strategies.minibatch.data_parallel import DataParallel

    s = DataParallel(cfg, ctx)
    s.prepare()
    return s.evaluate()


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_distributed_typed_evaluation_equals_whole_graph_inference(tmp_path, model):
    """Layer-wise evaluation over a typed book (each rank embeds its own typed inputs, typed blocks,
    the last layer for labelled vertices only) gives single-process evaluation's accuracies and
    losses for the same weights and embedding rows."""
    from gnnflow.nn import build_model_from_config
    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.common import evaluate_full, model_graph, seed_everything
    from gnnflow.strategies.minibatch.data_parallel import DataParallel
    from gnnflow.strategies.relational import TypedGraph, make_embeddings
    from gnnflow.strategies.verify.data_parallel import _graph

    store = _graph(tmp_path / "g", True, 600, 2)
    book = partition_graph(store.path, "random", 3, tmp_path / "book", seed=2)
    cfg = DataParallel.parse_options(TrainConfig(
        graph=str(store.path), strategy="data", partition=str(book.path), model=model, hidden=8, heads=2,
        num_layers=2, fanouts=[-1, -1], workers=3, seed=4, options={"pipeline": False}))
    got = run_ranks(_evaluate_rank, 3, cfg, timeout_s=120)
    typed = TypedGraph(store)
    typed.embeddings = make_embeddings(typed.schema, typed.offsets, np.arange(store.num_nodes), cfg)
    seed_everything(cfg.seed)
    net = build_model_from_config(cfg, store.feature_dim, store.num_classes, schema=typed.schema)
    want = evaluate_full(net, model_graph(store, cfg), typed=typed)
    for r in got:
        assert r.keys() == want.keys()
        for key in want:
            assert abs(r[key] - want[key]) < 1e-5, (key, r[key], want[key])
