"""Feature store and distributed sampler (DistDGLv2 §3.3, §4.2.2) on a tiny partitioned graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnflow.runtime.launch import run_ranks


@pytest.fixture
def tiny_book(tiny_store, tmp_path):
    from gnnflow.partition.api import partition_graph

    partition_graph(tiny_store.path, "random", 3, tmp_path / "book3", seed=1)
    return tmp_path / "book3", tiny_store.path


def _store_and_sampler_rank(ctx, book_path):
    from gnnflow.comm.collectives import CommStats
    from gnnflow.partition.book import PartitionBook
    from gnnflow.strategies.minibatch.feature_store import FeatureStore
    from gnnflow.strategies.minibatch.sampler import DistNeighborSampler

    book = PartitionBook.open(book_path)
    part = book.load_part(ctx.rank)
    stats = CommStats(ctx.world_size)
    store = FeatureStore(part, book.node_part, stats=stats)
    rng = np.random.default_rng(ctx.rank)
    ids = rng.integers(0, book.num_nodes, 50 + 10 * ctx.rank)  # duplicates on purpose
    counters: dict = {}
    rows = store.fetch(ids, counters)
    # a rank with nothing to fetch still joins the collective
    empty = store.fetch(np.zeros(0, dtype=np.int64))
    # cache: the 20 most frequent remote ids of a fake presample
    cached = store.build_cache(ids, np.arange(ids.shape[0]), 20)
    c2: dict = {}
    rows2 = store.fetch(ids, c2)
    # full-fanout sampling is deterministic: compare with the whole-graph sampler in the test
    sampler = DistNeighborSampler(part, book.node_part, [-1, -1], seed=0)
    targets = np.sort(np.asarray(part.train_idx[:5]))
    blocks = sampler.sample_blocks(targets)
    # fanout-3 sampling of every vertex of rank 0's part, many times, done on rank 1's behalf
    p0 = book.load_part(0).inner_ids if ctx.rank == 1 else None
    fs = DistNeighborSampler(part, book.node_part, [3], seed=0)
    draws = []
    for _ in range(200):
        b = fs.sample_blocks(p0[:4] if p0 is not None else np.zeros(0, dtype=np.int64))[0]
        if p0 is not None:
            draws.append((b.indptr.numpy().copy(), b.src_ids[b.indices].numpy().copy()))
    return dict(ids=ids, rows=rows.numpy(), empty=tuple(empty.shape), counters=counters, cached=cached,
                rows2=rows2.numpy(), c2=c2, sent=list(stats.bytes_sent), received=list(stats.bytes_received),
                blocks=[(b.dst_ids.numpy(), b.src_ids.numpy(), b.indptr.numpy(), b.src_ids[b.indices].numpy())
                        for b in blocks],
                targets=targets, owned=part.inner_ids, draws=draws, p0=p0)


def test_feature_store_and_distributed_sampler(tiny_book):
    from gnnflow.data.store import open_store
    from gnnflow.partition.book import PartitionBook
    from gnnflow.sampling import NeighborSampler

    book_path, graph_path = tiny_book
    g = open_store(graph_path)
    node_part = np.asarray(PartitionBook.open(book_path).node_part)
    results = run_ranks(_store_and_sampler_rank, 3, book_path, timeout_s=60)
    feats = np.asarray(g.features)
    for rank, r in enumerate(results):
        np.testing.assert_array_equal(r["rows"], feats[r["ids"]])
        np.testing.assert_array_equal(r["rows2"], feats[r["ids"]])
        assert r["empty"] == (0, feats.shape[1])
        n_remote = int((node_part[r["ids"]] != rank).sum())
        assert r["counters"]["features_loaded"] == len(r["ids"])
        assert r["counters"]["remote_features"] == n_remote
        assert r["counters"]["remote_bytes"] == n_remote * feats.shape[1] * 4
        assert r["cached"] == 20
        assert r["c2"]["cache_hits"] + r["c2"]["cache_misses"] == n_remote
        assert r["c2"]["cache_hits"] > 0 and r["c2"]["remote_features"] < n_remote
        # bytes per peer: what rank p sent to q is what q received from p
    for p in range(3):
        for q in range(3):
            assert results[p]["sent"][q] == results[q]["received"][p]
    assert sum(results[0]["sent"]) > 0
    # full-fanout distributed blocks equal the whole-graph sampler's blocks
    ref = NeighborSampler(g.indptr, g.indices, [-1, -1], seed=0)
    for r in results:
        expect = ref.sample_blocks(r["targets"])
        assert len(expect) == len(r["blocks"])
        for b, (dst, src, indptr, edge_src) in zip(expect, r["blocks"], strict=True):
            np.testing.assert_array_equal(b.dst_ids.numpy(), dst)
            np.testing.assert_array_equal(b.src_ids.numpy(), src)
            np.testing.assert_array_equal(b.indptr.numpy(), indptr)
            np.testing.assert_array_equal(b.src_ids[b.indices].numpy(), edge_src)
    # remote sampling (rank 1 samples rank 0's vertices through rank 0): valid, uniform, size min(d, 3)
    r1 = results[1]
    for k, v in enumerate(r1["p0"][:4]):
        nbrs = np.asarray(g.indices[g.indptr[v]:g.indptr[v + 1]])
        freq = {int(u): 0 for u in nbrs}
        for indptr, edge_src in r1["draws"]:
            got = edge_src[indptr[k]:indptr[k + 1]]
            assert len(got) == min(len(nbrs), 3) and len(set(got.tolist())) == len(got)
            for u in got:
                freq[int(u)] += 1
        expected = 200 * min(len(nbrs), 3) / len(nbrs)
        assert all(abs(f - expected) < 5 * np.sqrt(expected) + 1 for f in freq.values()), freq


def _replicate_rank(ctx, book_path):
    from gnnflow.partition.book import PartitionBook
    from gnnflow.strategies.minibatch.sampler import make_sampler

    book = PartitionBook.open(book_path)
    part = book.load_part(ctx.rank)
    s = make_sampler(part, book.node_part, [-1], 0, replicate_structure=True, graph_path=book.graph_path)
    b = s.sample_blocks(torch.as_tensor(part.train_idx[:3]))[0]
    return type(s).__name__, b.num_edges


def test_replicate_structure_uses_full_csr(tiny_book):
    book_path, _ = tiny_book
    res = run_ranks(_replicate_rank, 3, book_path, timeout_s=60)
    assert all(name == "NeighborSampler" and n > 0 for name, n in res)


def _own_targets_rank(ctx, book_path, fanouts):
    from gnnflow.comm.collectives import CommStats
    from gnnflow.errors import ConfigError
    from gnnflow.partition.book import PartitionBook
    from gnnflow.strategies.minibatch.sampler import DistNeighborSampler

    book = PartitionBook.open(book_path)
    part = book.load_part(ctx.rank)
    targets = np.sort(np.asarray(part.train_idx[:6]))
    out = {"targets": targets}
    for name, own in (("own", True), ("exchange", False)):
        stats = CommStats(ctx.world_size)
        s = DistNeighborSampler(part, book.node_part, fanouts, seed=5, stats=stats, own_targets=own).at(2, 3)
        out[name] = [(b.dst_ids.numpy(), b.src_ids.numpy(), b.indptr.numpy(), b.src_ids[b.indices].numpy())
                     for b in s.sample_blocks(targets)]
        out[name + "_calls"] = stats.calls
    # every rank passes a vertex of the next part as a target: each fails before any exchange
    foreign = np.asarray(book.load_part((ctx.rank + 1) % ctx.world_size).inner_ids[:1])
    try:
        DistNeighborSampler(part, book.node_part, fanouts, seed=5, own_targets=True).sample_blocks(foreign)
        out["error"] = None
    except ConfigError as e:
        out["error"] = str(e)
    return out


@pytest.mark.parametrize("fanouts", [[3, 3], [-1, 2]])
def test_own_targets_skip_the_first_exchange_and_sample_the_same(tiny_book, fanouts):
    """``own_targets``: the first hop makes no exchange, and the blocks equal both the exchanging
    sampler's and the whole-graph sampler's (draws depend on seed, batch, layer and vertex only);
    bounded fanouts reply in one slot exchange, full ones in two."""
    from gnnflow.data.store import open_store
    from gnnflow.sampling import NeighborSampler

    book_path, graph_path = tiny_book
    g = open_store(graph_path)
    results = run_ranks(_own_targets_rank, 3, book_path, fanouts, timeout_s=60)
    for rank, r in enumerate(results):
        expect = NeighborSampler(g.indptr, g.indices, fanouts, seed=5).at(2, 3).sample_blocks(r["targets"])
        for got in (r["own"], r["exchange"]):
            for b, (dst, src, indptr, edge_src) in zip(expect, got, strict=True):
                np.testing.assert_array_equal(b.dst_ids.numpy(), dst)
                np.testing.assert_array_equal(b.src_ids.numpy(), src)
                np.testing.assert_array_equal(b.indptr.numpy(), indptr)
                np.testing.assert_array_equal(b.src_ids[b.indices].numpy(), edge_src)
        # payload exchanges per hop (layer 1 first): the request ids, then one reply slot, or counts
        # and sources with full neighbourhoods
        hop = [1 + (1 if f > 0 else 2) for f in fanouts]
        assert r["exchange_calls"] == hop[1] + hop[0]
        assert r["own_calls"] == hop[0]  # the targets' hop made none
        assert r["error"] is not None and f"rank {rank} got targets it does not own" in r["error"]


def _rounds_rank(ctx, book_path):
    import gnnflow.strategies.minibatch.feature_store as fs_mod
    from gnnflow.comm.collectives import CommStats
    from gnnflow.partition.book import PartitionBook

    book = PartitionBook.open(book_path)
    part = book.load_part(ctx.rank)
    stats = CommStats(ctx.world_size)
    store = fs_mod.FeatureStore(part, book.node_part, stats=stats)
    fs_mod.EXCHANGE_BYTES = 3 * 4 * store.dim  # rounds of about 3 rows
    fs_mod.LOCAL_CHUNK_BYTES = 2 * 4 * store.dim  # local rows placed 2 at a time
    rng = np.random.default_rng(ctx.rank)
    ids = rng.integers(0, book.num_nodes, 5 + 20 * ctx.rank)
    rows = store.fetch(ids).numpy()
    calls = stats.calls
    again = rng.integers(0, book.num_nodes, 30)
    rows_again = store.fetch(again).numpy()
    made = store.rounds.made
    store.fetch(again)  # the same rounds once more: their two buffers are reused, none is made
    return ids, rows, calls, again, rows_again, (made, store.rounds.made, len(store.rounds._buffers))


def test_feature_rows_in_rounds_every_rank_agrees(tiny_book):
    """Ranks request very different numbers of rows; each derives the same number of rounds from
    the request matrix (a disagreement would hang the exchange) and gets its rows right."""
    from gnnflow.data.store import open_store

    book_path, graph_path = tiny_book
    feats = np.asarray(open_store(graph_path).features)
    res = run_ranks(_rounds_rank, 3, book_path, timeout_s=60)
    for ids, rows, _, again, rows_again, made in res:
        np.testing.assert_array_equal(rows, feats[ids])
        np.testing.assert_array_equal(rows_again, feats[again])
        assert made[0] == made[1] and made[2] == 2  # the rounds' send and receive buffers, reused
    calls = {c for _, _, c, *_ in res}
    assert len(calls) == 1 and calls.pop() > 4  # the id exchange and several rounds, the same on every rank


@pytest.fixture(scope="module")
def hetero_book(tmp_path_factory):
    """A small homogenized typed graph (8 relations) partitioned at random into 3 typed parts."""
    from gnnflow.data.hetero_synthetic import prepare_synthetic_hetero
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("hetero-book")
    store = prepare_synthetic_hetero(tmp / "h", num_papers=500, num_authors=600, num_institutions=20,
                                     num_fields=40, num_classes=4, cites_per_paper=8.0)
    partition_graph(store.path, "random", 3, tmp / "book", seed=1)
    return tmp / "book", store.path


def _typed_sampler_rank(ctx, book_path, fanouts, own):
    from gnnflow.comm.collectives import CommStats
    from gnnflow.data.hetero import TypeMap
    from gnnflow.data.meta import read_store_meta
    from gnnflow.partition.book import PartitionBook
    from gnnflow.strategies.minibatch.sampler import DistNeighborSampler, TypedSampling
    from gnnflow.strategies.relational import resolve_fanouts

    book = PartitionBook.open(book_path)
    part = book.load_part(ctx.rank)
    tm = TypeMap.from_meta(read_store_meta(book.graph_path))  # the graph's meta.json only
    typed = TypedSampling(len(tm.edge_types), tm.node_type_offsets)
    targets = np.sort(np.asarray(part.train_idx[:8]))
    stats = CommStats(ctx.world_size)
    s = DistNeighborSampler(part, book.node_part, resolve_fanouts(tm, fanouts), seed=5, stats=stats,
                            own_targets=own, typed=typed).at(2, 3)
    blocks = s.sample_blocks(targets)
    return {"targets": targets, "remote_seeds": s.remote_seeds,
            "blocks": [(b.dst_ids.numpy(), b.src_ids.numpy(), b.indptr.numpy(), b.src_ids[b.indices].numpy(),
                        b.etypes.numpy(), b.src_types.numpy()) for b in blocks]}


@pytest.mark.parametrize("fanouts,own", [("cites:3,rev_writes:2,*:1;cites:2,*:1", True),
                                         ("cites:-1,*:2;has_topic:0,*:1", False), ("-1;-1", True)])
def test_typed_distributed_blocks_equal_the_single_process_typed_sampler(hetero_book, fanouts, own):
    """DistDGLv2 §4.2.2 on a typed book: owners draw each relation of their seeds with the keyed
    draws, replies carry the relations, and the blocks (sources, CSR, edge types, source types)
    are the single-process typed sampler's for the same batch, whichever rank asks."""
    from gnnflow.config import parse_fanouts
    from gnnflow.data.store import open_store
    from gnnflow.strategies.relational import TypedGraph

    book_path, graph_path = hetero_book
    g = open_store(graph_path)
    typed = TypedGraph(g)
    layers = parse_fanouts(fanouts)
    results = run_ranks(_typed_sampler_rank, 3, book_path, layers, own, timeout_s=60)
    assert sum(r["remote_seeds"] for r in results) > 0  # vertices were sampled by their owners for others
    for r in results:
        expect = typed.sampler(g.indptr, g.indices, layers, seed=5).at(2, 3).sample_blocks(r["targets"])
        for b, (dst, src, indptr, edge_src, etypes, src_types) in zip(expect, r["blocks"], strict=True):
            np.testing.assert_array_equal(b.dst_ids.numpy(), dst)
            np.testing.assert_array_equal(b.src_ids.numpy(), src)
            np.testing.assert_array_equal(b.indptr.numpy(), indptr)
            np.testing.assert_array_equal(b.src_ids[b.indices].numpy(), edge_src)
            np.testing.assert_array_equal(b.etypes.numpy(), etypes)
            np.testing.assert_array_equal(b.src_types.numpy(), src_types)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(40, 7), (40, 3, 5), (40, 1)])
def test_scatter_rows_places_every_row_as_index_copy_does(shape, threads):
    """The feature store's row scatter equals ``index_copy_`` for float rows of any width: a run
    of positions (a slice copy), scattered positions with one torch thread (numpy's void rows) and
    with two (``index_copy_``), and a strided source (the fallback)."""
    from gnnflow.strategies.rows import scatter_rows

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        wide = torch.randn((25, 2 * int(np.prod(shape[1:]))), generator=g)
        strided = wide[:, ::2].reshape(25, *shape[1:])
        assert not strided.is_contiguous()
        for dest in (torch.randperm(shape[0], generator=g)[:25].numpy(), np.arange(7, 32)):
            for rows in (torch.randn((25, *shape[1:]), generator=g), strided):
                want = torch.zeros(shape).index_copy_(0, torch.from_numpy(dest), rows)
                out = torch.zeros(shape)
                scatter_rows(out, dest, rows)
                assert torch.equal(out, want)
                assert torch.count_nonzero(out[torch.from_numpy(np.setdiff1d(np.arange(shape[0]), dest))]) == 0
    finally:
        torch.set_num_threads(before)
