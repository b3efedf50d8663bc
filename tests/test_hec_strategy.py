"""DistGNN-MB partition view and local mini-batches (§3.1, §3.3) and the HEC strategy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnflow.sampling import Block
from gnnflow.strategies.hec.strategy import HECOptions, LocalHaloSampler, drop_sources
from gnnflow.strategies.memory import hec_cache_lines


@pytest.fixture
def tiny_book(tiny_store, tmp_path):
    from gnnflow.partition.api import partition_graph

    return partition_graph(tiny_store, "random", 2, tmp_path / "book", seed=0)


def test_drop_sources_matches_a_loop():
    g = torch.Generator().manual_seed(0)
    num_dst, num_src = 5, 12
    deg = torch.randint(0, 5, (num_dst,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    indices = torch.randint(0, num_src, (int(deg.sum()),), generator=g)
    block = Block(dst_ids=torch.arange(num_dst), src_ids=torch.arange(num_src) * 10, indptr=indptr,
                  indices=indices)
    keep = torch.ones(num_src, dtype=torch.bool)
    keep[[6, 8, 9]] = False
    out = drop_sources(block, keep)
    assert out.src_ids.tolist() == [v * 10 for v in range(num_src) if keep[v]]
    for i in range(num_dst):
        want = [int(block.src_ids[j]) for j in indices[indptr[i]:indptr[i + 1]].tolist() if keep[j]]
        got = out.src_ids[out.indices[out.indptr[i]:out.indptr[i + 1]]].tolist()
        assert got == want
    assert drop_sources(block, torch.ones(num_src, dtype=torch.bool)) is block


def test_local_sampler_keeps_halos_as_leaves(tiny_book):
    part = tiny_book.load_part(0)
    sampler = LocalHaloSampler(part.indptr, part.indices, part.num_inner, part.num_halo, [3, 4, 5], seed=0,
                               local_to_global=part.local_to_global)
    targets = torch.from_numpy(part.global_to_local(part.train_idx[:16]))
    blocks, solid = sampler.sample_blocks(targets)
    assert len(blocks) == 3 and torch.equal(blocks[-1].dst_ids, targets)
    for layer, (block, n_solid) in enumerate(zip(blocks, solid, strict=True)):
        src = block.src_ids
        assert bool((src[:n_solid] < part.num_inner).all()) and bool((src[n_solid:] >= part.num_inner).all())
        assert torch.equal(src[: block.num_dst], block.dst_ids)
        if layer > 0:  # the lower block computes exactly the solid sources of this one
            assert torch.equal(blocks[layer - 1].dst_ids, src[:n_solid])
        # every sampled edge is an edge of the part's local graph
        dst_local = block.dst_ids[block.edge_dst()].numpy()
        src_local = src[block.indices].numpy()
        for d, s in zip(dst_local[:50], src_local[:50], strict=True):
            assert s in part.indices[part.indptr[d]:part.indptr[d + 1]]
    assert sum(b.num_src - s for b, s in zip(blocks, solid, strict=True)) > 0  # some halos were sampled


def test_default_cache_size_scales_like_products_within_the_halo_and_the_budget():
    sage3 = [100, 256, 256]  # every layer's input width: 2448 bytes per line over the three layers
    unbounded = HECOptions(cache_mib=1 << 20)
    assert hec_cache_lines(2_449_029, 2_000_000, sage3, unbounded) == 1_000_000  # the paper's §4.4 figure
    assert hec_cache_lines(32_768, 20_000, sage3, unbounded) == 13_380  # scaled to the graph
    assert hec_cache_lines(32_768, 5_000, sage3, unbounded) == 5_000  # only halo vertices are cached
    # the default budget: 512 MiB of lines over the three layers (products, 4 ranks: 1.7M halo each)
    assert hec_cache_lines(2_449_029, 1_704_246, sage3, HECOptions()) == (512 << 20) // (4 * 612) == 219_310
    assert hec_cache_lines(2_449_029, 1_704_246, sage3, HECOptions.parse({"cache_mib": 1024})) == 438_620
    assert hec_cache_lines(2_449_029, 1_704_246, sage3, HECOptions.parse({"cs": "77"})) == 77  # cs wins over the default
    assert hec_cache_lines(10, 0, sage3, HECOptions()) == 1


# ---------------------------------------------------------------------------- training
def _cfg(graph, partition, strategy, workers, epochs, **kw):
    cfg = {"graph": str(graph), "partition": str(partition) if partition else None, "strategy": strategy,
           "workers": workers, "epochs": epochs, "fanouts": [5, 5], "batch_size": 16 * workers, "hidden": 16, "seed": 0}
    cfg.update(kw)
    return cfg


@pytest.mark.parametrize("model,delay", [("sage", 1), ("gat", 0), ("gcn", 2)])
def test_hec_trains_and_records_per_layer_figures(tiny_store, tiny_book, model, delay):
    from gnnflow.bench.hec import train_rank
    from gnnflow.runtime.launch import run_ranks

    cfg = _cfg(tiny_store.path, tiny_book.path, "hec", 2, 2, model=model, options={"nc": 7, "d": delay})
    res = run_ranks(train_rank, 2, cfg, 2, True, timeout_s=120)
    for rank_rows in res:
        for row in rank_rows:
            x, c = row["extra"], row["counters"]
            assert np.isfinite(row["loss"]) and 0.0 <= row["test_acc"] <= 1.0
            for layer in range(2):
                assert 0.0 <= x[f"hec_hit_rate_l{layer}"] <= 1.0
                # nc caps each push: one peer, (M - d) pushes per layer and epoch
                assert x[f"aep_pushed_l{layer}"] <= 7 * (x["num_batches"] - delay)
                assert x[f"aep_bytes_l{layer}"] > 0
            assert c["cache_hits"] + c["cache_misses"] == c["halo_vertices"]
            assert c["remote_bytes"] > 0
            for key in ("mbc_s", "fwd_s", "bwd_s", "ared_s"):
                assert x[key] >= 0.0
    # every rank evaluates the same (all-reduced) accuracies and holds the same model
    assert res[0][-1]["test_acc"] == res[1][-1]["test_acc"]


def test_hec_without_cache_communicates_nothing_but_gradients(tiny_store, tiny_book):
    from gnnflow.bench.hec import train_rank
    from gnnflow.runtime.launch import run_ranks

    res = run_ranks(train_rank, 2, _cfg(tiny_store.path, tiny_book.path, "hec", 2, 1, options={"cs": 0}), 1,
                    timeout_s=120)
    for rank_rows in res:
        c = rank_rows[0]["counters"]
        assert c["cache_hits"] == 0 and c["cache_misses"] == c["halo_vertices"] > 0
        assert c["remote_bytes"] == 0


def test_bad_options_are_config_errors(tiny_store, tiny_book):
    from gnnflow.config import TrainConfig
    from gnnflow.errors import ConfigError
    from gnnflow.runtime.context import RankContext
    from gnnflow.strategies.hec.strategy import HistoricalEmbeddingCache

    for opts in ({"ls": -1}, {"nc": "many"}, {"d": -2}):
        cfg = TrainConfig.from_dict(_cfg(tiny_store.path, tiny_book.path, "hec", 2, 1, options=opts))
        with pytest.raises(ConfigError, match="options"):
            HistoricalEmbeddingCache(cfg, RankContext())


@pytest.fixture(scope="module")
def default_graph(tmp_path_factory):
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph

    root = tmp_path_factory.mktemp("hec_default")
    store = prepare_synthetic(root / "synthetic")
    book = partition_graph(store, "metis", 4, root / "metis4", seed=0)
    return store, book


@pytest.mark.slow
def test_accuracy_matches_single_process_at_equal_epochs(default_graph):
    """Acceptance 2 (DistGNN-MB §4.5 criterion: within 1 point of single-process test accuracy)."""
    from gnnflow.bench.hec import train_rank
    from gnnflow.runtime.launch import run_ranks

    store, book = default_graph
    epochs, local_batch, workers = 10, 512, 4
    common = {"fanouts": [10, 10], "hidden": 64}
    single = run_ranks(train_rank, 1, _cfg(store.path, None, "single", 1, epochs, batch_size=local_batch * workers,
                                           **common), epochs, True)[0]
    hec = run_ranks(train_rank, workers, _cfg(store.path, book.path, "hec", workers, epochs,
                                              batch_size=local_batch * workers,
                                              **common), epochs, True, timeout_s=900)[0]
    no_cache = run_ranks(train_rank, workers, _cfg(store.path, book.path, "hec", workers, epochs,
                                                   batch_size=local_batch * workers, options={"cs": 0}, **common),
                         epochs, True, timeout_s=900)[0]
    acc_single, acc_hec, acc_none = single[-1]["test_acc"], hec[-1]["test_acc"], no_cache[-1]["test_acc"]
    print(f"test acc after {epochs} epochs: single {acc_single:.4f}, hec {acc_hec:.4f}, cs=0 {acc_none:.4f}")
    print("hit rates", [hec[-1]["extra"][f"hec_hit_rate_l{i}"] for i in range(2)])
    assert acc_hec >= acc_single - 0.01
    assert acc_none <= acc_hec
    # §4.4: hit rates fall from the input layer upwards
    assert hec[-1]["extra"]["hec_hit_rate_l0"] > hec[-1]["extra"]["hec_hit_rate_l1"]


def test_trace_has_one_row_per_iteration_and_layer(tiny_store, tiny_book, tmp_path):
    import json

    from gnnflow.bench.hec import train_rank
    from gnnflow.runtime.launch import run_ranks

    cfg = _cfg(tiny_store.path, tiny_book.path, "hec", 2, 1, out=str(tmp_path / "run"),
               options={"trace": "true", "nc": 5})
    res = run_ranks(train_rank, 2, cfg, 1, timeout_s=120)
    for rank in range(2):
        rows = [json.loads(x) for x in (tmp_path / "run" / f"hec_trace_rank{rank}.jsonl").read_text().splitlines()]
        extra = res[rank][0]["extra"]
        assert [r["iteration"] for r in rows] == list(range(int(extra["num_batches"])))
        for layer in range(2):
            assert sum(r[f"l{layer}"]["pushed"] for r in rows) == extra[f"aep_pushed_l{layer}"]
            assert sum(r[f"l{layer}"]["searched"] for r in rows) == extra[f"hec_searched_l{layer}"]
            assert all(r[f"l{layer}"]["pushed"] <= 5 for r in rows)
        assert rows[0]["l0"]["stored"] == 0  # d=1: nothing arrives in the first iteration
