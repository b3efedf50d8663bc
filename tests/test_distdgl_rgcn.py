"""Issue 32 (items 4, 6): the DistDGL peer trains DGL's RGCN on a typed book, and
``gnnflow bench data-parallel --model rgcn`` sets it beside our data-parallel RGCN."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

pytest.importorskip("dgl")

SMALL = dict(num_papers=600, num_authors=800, num_institutions=20, num_fields=40, num_classes=4)


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    from gnnflow.data.hetero_synthetic import prepare_synthetic_hetero
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("distdgl-rgcn")
    store = prepare_synthetic_hetero(tmp / "h", **SMALL)
    book = partition_graph(store.path, "metis", 2, tmp / "book", seed=0)
    return store, book


def test_peer_blocks_give_dgls_whole_graph_logits(typed):
    """The peer's rewrite of DGL's heterogeneous blocks into RelGraphConv's homogeneous blocks
    (destinations of every type first, sources reordered between layers): with full
    neighbourhoods the targets' logits are those of the same DGL model on the whole graph."""
    import dgl

    from gnnflow.bench.hetero_accuracy import DGLSide
    from gnnflow.config import TrainConfig
    from gnnflow.nn.peer import dgl_relational_from_config
    from gnnflow.partition.dgl_interop import store_to_dgl_hetero
    from gnnflow.strategies.distdgl_rgcn import PeerRGCN
    from gnnflow.strategies.relational import TypedGraph

    store, _ = typed
    tg = TypedGraph(store)
    side = DGLSide(store, tg)
    hg, label_types = store_to_dgl_hetero(store)
    assert label_types == ["paper"] and "feat" not in hg.nodes["institution"].data
    cfg = TrainConfig(graph=str(store.path), model="rgcn", hidden=8, num_layers=2, fanouts=[-1, -1], num_bases=2,
                      dropout=0.0)
    torch.manual_seed(0)
    etypes = [tuple(e) for e in tg.typemap.edge_types]  # relation r: the store's (DGL sorts its own)
    assert sorted(etypes) == list(hg.canonical_etypes) and etypes != list(hg.canonical_etypes)
    net = dgl_relational_from_config(cfg, tg.schema, tg.typemap.node_types, etypes, int(store.num_classes))
    net.eval()
    peer = PeerRGCN(net, list(hg.ntypes), etypes)
    seeds = {"paper": torch.arange(0, 600, 7)}
    with torch.no_grad():
        whole = side.logits(net)
        input_nodes, out_nodes, blocks = dgl.dataloading.MultiLayerFullNeighborSampler(2).sample_blocks(hg, seeds)
        features = {t: hg.nodes[t].data["feat"][ids] for t, ids in input_nodes.items() if "feat" in hg.nodes[t].data}
        rows = {t: net.embed.embeds[t](ids) for t, ids in input_nodes.items() if t not in features}
        got = peer(peer.graphs(blocks), features, rows)
    paper = tg.typemap.node_type_offsets[tg.typemap.node_types.index("paper")]
    want = whole[paper + out_nodes["paper"]]
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-4), float((got - want).abs().max())


def test_fanouts_per_relation_become_dgls_dicts(typed):
    from gnnflow.config import parse_fanouts
    from gnnflow.data.hetero import TypeMap
    from gnnflow.strategies.distdgl_rgcn import dgl_fanouts

    store, _ = typed
    tm = TypeMap.from_store(store)
    got = dgl_fanouts(parse_fanouts("cites:7,*:3;4"), tm, [tuple(e) for e in tm.edge_types])
    assert got[1] == 4
    assert got[0][("paper", "cites", "paper")] == 7 and len(got[0]) == len(tm.edge_types)
    assert sorted(set(got[0].values())) == [3, 7]


def test_peer_refuses_rgat_and_relational_fanouts_without_rgcn(typed):
    from gnnflow.config import TrainConfig
    from gnnflow.errors import ConfigError
    from gnnflow.strategies.distdgl import DistDGLBaseline

    store, book = typed
    base = dict(graph=str(store.path), strategy="distdgl", partition=str(book.path), workers=2)
    DistDGLBaseline.check_config(TrainConfig(model="rgcn", **base))
    with pytest.raises(ConfigError, match="rgat"):
        DistDGLBaseline.check_config(TrainConfig(model="rgat", **base))
    with pytest.raises(ConfigError, match="per-relation fanouts"):
        DistDGLBaseline.check_config(TrainConfig(model="sage", fanouts=[{"*": 5}, 5], **base))


@pytest.mark.slow
def test_peer_trains_rgcn_on_a_typed_book(typed, tmp_path):
    """Two ranks, two epochs of DGL's RGCN (per-relation fanouts, DistEmbedding rows for the
    featureless institutions): the loss falls, accuracy is far above chance (4 classes), and
    the records have the peer's usual columns."""
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.driver import run_training

    store, book = typed
    records = run_training(TrainConfig(graph=str(store.path), strategy="distdgl", partition=str(book.path),
                                       model="rgcn", workers=2, epochs=2, batch_size=128, hidden=16, lr=0.01,
                                       fanouts=[{"cites": 8, "*": 4}, 6], num_bases=2, out=str(tmp_path / "run")))
    by_epoch = {e: [r for r in records if r.epoch == e] for e in (0, 1)}
    assert [len(v) for v in by_epoch.values()] == [2, 2]
    assert np.mean([r.loss for r in by_epoch[1]]) < np.mean([r.loss for r in by_epoch[0]])
    assert by_epoch[1][0].test_acc > 0.6 and by_epoch[1][0].val_acc > 0.6
    for r in by_epoch[1]:
        assert r.model == "rgcn" and r.strategy == "distdgl"
        assert {"sample", "load", "forward_backward", "step"} <= set(r.times)
        assert r.counters["iterations"] > 0 and r.counters["sampled_edges"] > 0 and r.counters["features_loaded"] > 0
        assert r.extra["dgl_sampler_processes"] == 1
    assert (book.path.parent / f"{book.path.name}.dgl-typed" / "gnnflow.json").exists()
    _no_children()


def _no_children(timeout: float = 30.0) -> None:
    """No process of this test (ranks, DGL servers, sampler processes) is left."""
    import time

    from conftest import own_processes

    deadline = time.monotonic() + timeout
    while True:
        left = own_processes()
        if not left:
            return
        assert time.monotonic() < deadline, f"left behind: {[' '.join(p.cmdline())[:100] for p in left]}"
        time.sleep(0.5)


@pytest.mark.slow
def test_bench_data_parallel_rgcn_on_a_typed_graph(typed, no_leftovers):
    from gnnflow.bench import data_parallel as bench
    from gnnflow.bench.ratios import check_ratios

    store, book = typed
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--graph", str(store.path), "--partition", str(book.path), "--model", "rgcn",
                              "--workers", "2", "--epochs", "2", "--hidden", "16", "--fanouts", "cites:6,*:3;4",
                              "--batch-size", "128", "--full-strength-only", "--num-bases", "2"])
    r = bench.run(args)
    no_leftovers([x["shm_run"] for x in r["distdgl"]])
    assert check_ratios(r) == []
    assert r["ratios"][0]["numerator"]["value"] == r["ours_epoch_s"]
    assert r["ratios"][0]["denominator"]["value"] == r["distdgl_epoch_s"] > 0
    assert "model=rgcn (num_bases=2" in r["summary"] and "4 vertex types" in r["summary"]
    its = r["iterations_per_rank"]
    assert max(abs(a - b) for a in its["ours"] for b in its["distdgl"]) <= 1 and min(its["distdgl"]) > 0
    # two epochs of two batches are too few to learn at the bench's lr: that both learn is checked above
    assert 0.0 <= r["test_acc"]["ours"] <= 1.0 and 0.0 <= r["test_acc"]["distdgl"] <= 1.0
