"""MG-GCN full-batch GCN equals single-process full-batch GCN (issue 7, acceptance 1 and 4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnflow.strategies.verify.fullbatch import verify_row1d as verify


@pytest.mark.parametrize(
    "workers,num_layers,norm,memory",
    [
        (1, 2, "both", "reuse"),
        (1, 3, "right", "autograd"),
        (2, 2, "right", "reuse"),
        (2, 3, "both", "autograd"),
        pytest.param(4, 2, "both", "autograd", marks=pytest.mark.slow),
        pytest.param(4, 3, "right", "reuse", marks=pytest.mark.slow),
    ],
)
def test_logits_loss_and_gradients_equal_single_process(workers, num_layers, norm, memory):
    r = verify(workers, model="gcn", seed=0, num_layers=num_layers, norm=norm, memory=memory)
    assert r["passed"], r
    assert r["rounds_per_rank"] > 0
    for k in ("logits", "loss", "grads"):
        assert r["max_rel_diff"][k] <= 1e-5


@pytest.mark.parametrize("memory", ["reuse", "autograd"])
def test_spmm_first_hidden_layers_are_exact(memory):
    # hidden 3 < 5 classes: the last layer aggregates before its GEMM (§4.4 order choice)
    r = verify(1, model="gcn", num_layers=3, hidden=3, norm="both", memory=memory)
    assert r["passed"], r


def test_overlap_off_no_permutation_no_self_loops_exchanged_transpose_are_exact_too():
    r = verify(2, model="gcn", num_layers=3, norm="both", memory="reuse", overlap=False, permute=False,
               self_loops=False, transpose="exchange")
    assert r["passed"], r


def test_a_skipped_round_fails_verification():
    r = verify(2, model="gcn", num_layers=2, norm="both", skip_rounds=(1,))
    assert not r["passed"]
    assert r["max_rel_diff"]["logits"] > 1e-3


def test_verify_rejects_other_models():
    from gnnflow.errors import ConfigError

    with pytest.raises(ConfigError, match="--model gcn"):
        verify(1, model="sage")


def _train_rank(ctx, cfg_dict, epochs):
    from gnnflow.config import TrainConfig
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.fullbatch.row1d import FullBatch

    s = FullBatch(TrainConfig.from_dict(cfg_dict), ctx)
    s.prepare()
    for e in range(epochs):
        s.run_epoch(e, Recorder())
    return s.evaluate()


@pytest.mark.slow
def test_accuracy_matches_single_process_on_default_graph(tmp_path):
    """Acceptance 4: 2-rank full-batch GCN within 1 point of single-process full-batch GCN."""
    from gnnflow.config import TrainConfig
    from gnnflow.data.csr import with_self_loops
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.nn import build_model
    from gnnflow.runtime.launch import run_ranks
    from gnnflow.sampling import Block
    from gnnflow.strategies.common import seed_everything as seed_all

    store = prepare_synthetic(tmp_path / "default")  # the default synthetic graph
    epochs = 60
    cfg = TrainConfig(graph=str(store.path), strategy="fullbatch", model="gcn", hidden=64, num_layers=2,
                      fanouts=[-1, -1], dropout=0.5, lr=0.01, seed=0, workers=2)
    dist = run_ranks(_train_rank, 2, cfg.to_dict(), epochs, timeout_s=300)
    # single-process full-batch GCN with gnnflow.nn, same settings
    seed_all(0)
    x = torch.from_numpy(np.array(store.features))
    y = torch.from_numpy(np.array(store.labels))
    model = build_model("gcn", x.shape[1], 64, store.meta.num_classes, 2, 0.5, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    blocks = [Block.full_graph(*with_self_loops(store.indptr, store.indices))] * 2
    train = torch.from_numpy(np.array(store.train_idx))
    test = torch.from_numpy(np.array(store.test_idx))
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(blocks, x)[train], y[train]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        single = float((model(blocks, x)[test].argmax(1) == y[test]).float().mean())
    assert dist[0]["test_acc"] == dist[1]["test_acc"]
    print(f"test accuracy: fullbatch P=2 {dist[0]['test_acc']:.4f}, single process {single:.4f}")
    assert abs(dist[0]["test_acc"] - single) <= 0.01


def test_partition_book_rows_are_exact(tiny_store, tmp_path):
    """The ranks read their rows from a permute-1d partition book (helper "partition")."""
    from gnnflow.partition.api import partition_graph

    book = partition_graph(tiny_store, "permute-1d", 2, tmp_path / "book", seed=3)
    assert book.perm is not None
    r = verify(2, model="gcn", graph=str(tiny_store.path), partition=str(book.path), num_layers=2, norm="right")
    assert r["passed"], r


@pytest.mark.parametrize("dropout", [0.5, 0.9])
def test_buffer_reuse_backward_equals_autograd_with_dropout(tmp_path, dropout):
    """The hand-written backward (§4.2 buffers, in-place ReLU/dropout backward, chunked input
    gradient) gives autograd's gradients when both draw the same dropout masks (0.9: a kept
    element's scale is gnnflow.nn.dropout's, relatively 6e-5 below 1 / (1 - p), in both)."""
    from gnnflow.config import TrainConfig
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.results.schema import Recorder
    from gnnflow.runtime.context import RankContext
    from gnnflow.strategies.fullbatch.row1d import FullBatch

    # feature_dim > 2 * hidden: the first layer runs GEMM first and keeps its backward SpMM
    store = prepare_synthetic(tmp_path / "g", num_nodes=300, avg_degree=5, feature_dim=60, num_classes=4)
    grads = {}
    for memory in ("reuse", "autograd"):
        cfg = TrainConfig(graph=str(store.path), strategy="fullbatch", model="gcn", hidden=24, num_layers=3,
                          fanouts=[-1] * 3, dropout=dropout, seed=0, options={"memory": memory, "norm": "right"})
        s = FullBatch(cfg, RankContext())
        s.prepare()
        torch.manual_seed(7)
        s.model.zero_grad(set_to_none=True)
        loss = s.compute_gradients(Recorder())
        grads[memory] = (loss, {k: p.grad.clone() for k, p in s.model.named_parameters()})
    assert grads["reuse"][0] == pytest.approx(grads["autograd"][0], rel=1e-6)
    for k, g in grads["autograd"][1].items():
        torch.testing.assert_close(grads["reuse"][1][k], g, rtol=1e-5, atol=1e-6)
