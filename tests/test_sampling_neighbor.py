"""Layer-wise neighbour sampler: fanout, no duplicates, seeding, full mode, uniformity,
partition-invariant draws (a function of seed, epoch, batch, layer and vertex only)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_store_arrays
from scipy import stats

from gnnflow.errors import ConfigError
from gnnflow.sampling import Block, DrawKey, NeighborSampler, csr_sample_neighbors
from gnnflow.sampling.neighbor import Relabeler


@pytest.fixture(scope="module")
def graph():
    a = random_store_arrays(num_nodes=400, avg_degree=12, seed=3)
    return a["indptr"], a["indices"]


def _neighbors(indptr, indices, v):
    return set(indices[indptr[v] : indptr[v + 1]].tolist())


def _check_block(block: Block, indptr, indices, fanout):
    n_dst = block.num_dst
    assert torch.equal(block.src_ids[:n_dst], block.dst_ids)
    assert block.src_ids.unique().numel() == block.num_src
    assert block.indptr.shape[0] == n_dst + 1 and int(block.indptr[-1]) == block.num_edges
    assert int(block.indices.min()) >= 0 and int(block.indices.max()) < block.num_src
    # every source is used by some edge or is a destination
    used = torch.zeros(block.num_src, dtype=torch.bool)
    used[block.indices] = True
    used[:n_dst] = True
    assert bool(used.all())
    for i in range(n_dst):
        v = int(block.dst_ids[i])
        nbrs = block.src_ids[block.indices[block.indptr[i] : block.indptr[i + 1]]].tolist()
        true = _neighbors(indptr, indices, v)
        deg = len(true)
        want = deg if fanout == -1 else min(deg, fanout)
        assert len(nbrs) == want, "fanout not respected"
        assert len(set(nbrs)) == len(nbrs), "duplicate neighbour"
        assert set(nbrs) <= true, "sampled a non-neighbour"
        if fanout == -1 or deg <= fanout:
            assert set(nbrs) == true, "full neighbourhood not exact"


@pytest.mark.parametrize("fanout", [1, 3, 5, 100, -1])
def test_sample_layer_fanout_and_validity(graph, fanout):
    indptr, indices = graph
    sampler = NeighborSampler(indptr, indices, [fanout], seed=1)
    targets = torch.tensor([0, 5, 17, 3, 399, 200])
    block, frontier = sampler.sample_layer(targets, fanout, 0)
    assert torch.equal(block.dst_ids, targets)
    assert torch.equal(frontier, block.src_ids)
    _check_block(block, indptr, indices, fanout)


def test_sample_blocks_order_and_reproducible(graph):
    indptr, indices = graph
    targets = torch.arange(0, 400, 7)
    a = NeighborSampler(indptr, indices, [4, 3, 2], seed=11).sample_blocks(targets)
    b = NeighborSampler(indptr, indices, [4, 3, 2], seed=11).sample_blocks(targets)
    c = NeighborSampler(indptr, indices, [4, 3, 2], seed=12).sample_blocks(targets)
    assert len(a) == 3
    assert torch.equal(a[-1].dst_ids, targets)
    for lo, hi in zip(a[:-1], a[1:], strict=True):
        assert torch.equal(lo.dst_ids, hi.src_ids)
    for blk, fanout in zip(a, [4, 3, 2], strict=True):
        _check_block(blk, indptr, indices, fanout)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.src_ids, y.src_ids) and torch.equal(x.indices, y.indices)
        assert torch.equal(x.indptr, y.indptr)
    assert any(not torch.equal(x.src_ids, y.src_ids) for x, y in zip(a, c, strict=True))


def test_relabel_paths_agree():
    rng = np.random.default_rng(0)
    dst = rng.permutation(1000)[:50].astype(np.int64)
    src = rng.integers(0, 1000, 400).astype(np.int64)
    bitmap = Relabeler(1000)._bitmap(dst, src)
    sort = Relabeler._sorted(dst, src)
    for x, y in zip(bitmap, sort, strict=True):
        np.testing.assert_array_equal(x, y)
    src_ids, local = sort
    np.testing.assert_array_equal(src_ids[:50], dst)
    np.testing.assert_array_equal(src_ids[local], src)


def test_neighbour_frequencies_uniform():
    # star: vertex 0 has in-neighbours 1..12
    deg, fanout, trials = 12, 4, 6000
    indptr = np.array([0, deg] + [deg] * deg, dtype=np.int64)
    indices = np.arange(1, deg + 1, dtype=np.int64)
    rows = np.zeros(trials, dtype=np.int64)
    # the same row under different vertex ids: independent keyed draws
    dst_pos, src = csr_sample_neighbors(indptr, indices, rows, fanout, DrawKey(5), vertex_ids=np.arange(trials))
    assert src.numel() == trials * fanout
    assert torch.equal(torch.bincount(dst_pos), torch.full((trials,), fanout))
    per_row = src.view(trials, fanout)
    assert bool((per_row.sort(1).values.diff(dim=1) > 0).all()), "duplicate within a row"
    counts = torch.bincount(src, minlength=deg + 1)[1:].numpy()
    assert stats.chisquare(counts).pvalue > 1e-3
    # pairs are uniform too (Floyd's algorithm is uniform over k-subsets, not just marginals)
    pair = np.zeros((deg, deg))
    p = per_row.numpy() - 1
    for i in range(fanout):
        for j in range(i + 1, fanout):
            np.add.at(pair, (p[:, i], p[:, j]), 1)
    upper = pair[np.triu_indices(deg, 1)]
    assert stats.chisquare(upper).pvalue > 1e-3


def test_csr_sample_neighbors_full(graph):
    indptr, indices = graph
    seeds = torch.tensor([4, 9, 9])
    dst_pos, src = csr_sample_neighbors(torch.from_numpy(indptr), torch.from_numpy(indices), seeds, -1, DrawKey(0))
    for i, v in enumerate(seeds.tolist()):
        assert sorted(src[dst_pos == i].tolist()) == sorted(indices[indptr[v] : indptr[v + 1]].tolist())


def test_full_graph_block_and_to(graph):
    indptr, indices = graph
    b = Block.full_graph(indptr, indices)
    assert b.num_dst == b.num_src == 400 and b.num_edges == indices.shape[0]
    assert torch.equal(b.in_degrees(), torch.from_numpy(np.diff(indptr)))
    assert torch.equal(b.edge_dst(), torch.repeat_interleave(torch.arange(400), b.in_degrees()))
    assert b.to("cpu") is b


def test_bad_fanouts_rejected(graph):
    with pytest.raises(ConfigError, match="fanouts"):
        NeighborSampler(*graph, [5, 0])


def _nbrs_of(block: Block) -> dict[int, list[int]]:
    out = {}
    for i in range(block.num_dst):
        row = block.indices[block.indptr[i]:block.indptr[i + 1]]
        out[int(block.dst_ids[i])] = sorted(block.src_ids[row].tolist())
    return out


def test_draws_do_not_depend_on_the_rest_of_the_batch(graph):
    indptr, indices = graph
    s = NeighborSampler(indptr, indices, [3], seed=4)
    a = _nbrs_of(s.at(2, 7).sample_layer(torch.tensor([5, 17, 200]), 3, 0)[0])
    b = _nbrs_of(s.at(2, 7).sample_layer(torch.tensor([399, 17, 1, 2, 3]), 3, 0)[0])
    assert a[17] == b[17]
    # another epoch, batch, layer or seed draws again (for a vertex with many more neighbours than 3)
    v = int(np.argmax(np.diff(indptr)))
    base = _nbrs_of(s.at(2, 7).sample_layer(torch.tensor([v]), 3, 0)[0])[v]
    others = [_nbrs_of(s.at(e, b).sample_layer(torch.tensor([v]), 3, layer)[0])[v]
              for e, b, layer in [(3, 7, 0), (2, 8, 0), (2, 7, 1)]]
    others.append(_nbrs_of(NeighborSampler(indptr, indices, [3], seed=5).at(2, 7).sample_layer(
        torch.tensor([v]), 3, 0)[0])[v])
    assert sum(o != base for o in others) >= 3


def test_local_csr_with_global_ids_draws_like_the_whole_graph(graph):
    """A part's CSR (rows = local ids, vertex_ids = their global ids) draws what the whole graph does."""
    indptr, indices = graph
    owned = np.array([3, 17, 42, 200, 399], dtype=np.int64)
    deg = np.diff(indptr)[owned]
    sub_indptr = np.concatenate([[0], np.cumsum(deg)])
    sub_indices = np.concatenate([indices[indptr[v]:indptr[v + 1]] for v in owned])
    key = DrawKey(9, 1, 4)
    whole_pos, whole_src = csr_sample_neighbors(indptr, indices, owned, 4, key, layer=1)
    part_pos, part_src = csr_sample_neighbors(sub_indptr, sub_indices, np.arange(5), 4, key, layer=1,
                                              vertex_ids=owned)
    assert torch.equal(whole_pos, part_pos) and torch.equal(whole_src, part_src)


def test_sample_blocks_moves_to_the_next_batch(graph):
    indptr, indices = graph
    s = NeighborSampler(indptr, indices, [2, 2], seed=1)
    targets = torch.arange(0, 400, 9)
    first = s.sample_blocks(targets)
    assert s.key == DrawKey(1, 0, 1)
    again = s.at(0, 0).sample_blocks(targets)
    for x, y in zip(first, again, strict=True):
        assert torch.equal(x.src_ids, y.src_ids) and torch.equal(x.indices, y.indices)


def test_floyd_in_c_draws_what_numpy_draws(monkeypatch):
    """The compiled Floyd choice (built by the install: the test environment has a compiler)
    equals the numpy form row for row, at the edges too (degree k, k + 1, beyond 2**32); with
    ``GNNFLOW_NUMPY_DRAWS`` the numpy form runs, and a sampler's blocks are the same either way."""
    from gnnflow.sampling import draws

    assert draws._c_floyd() is not None, "the C draws kernel was not built (pip install -e . with a C compiler)"
    rng = np.random.default_rng(0)
    for k in (1, 2, 5, 10, 15, 25):
        deg = np.concatenate([np.full(40, k), np.full(40, k + 1), rng.integers(k, 10**7, 1500),
                              [2**40]]).astype(np.int64)
        h = draws.mix(rng.integers(0, 2**63, deg.shape[0], dtype=np.int64).view(np.uint64))
        got = draws.floyd_choose(deg, k, h)
        assert np.array_equal(got, draws.floyd_choose_numpy(deg, k, h)), k
        assert (np.diff(got, axis=1) > 0).all() and (got < deg[:, None]).all() and (got >= 0).all()
    a = random_store_arrays(num_nodes=3000, avg_degree=25, seed=5)
    batch = np.arange(0, 3000, 7)
    c_blocks = NeighborSampler(a["indptr"], a["indices"], [10, 5], seed=2).sample_blocks(batch)
    monkeypatch.setenv("GNNFLOW_NUMPY_DRAWS", "1")
    assert draws._c_floyd() is None
    np_blocks = NeighborSampler(a["indptr"], a["indices"], [10, 5], seed=2).sample_blocks(batch)
    for c, n in zip(c_blocks, np_blocks, strict=True):
        for f in ("dst_ids", "src_ids", "indptr", "indices"):
            assert torch.equal(getattr(c, f), getattr(n, f)), f


def test_hop_positions_in_c_equal_numpys(monkeypatch):
    """The compiled hop (``gf_sample_positions``: degrees, row hashes, Floyd, offsets in one
    pass) gives ``sample_edge_positions``'s numpy positions exactly: rows of degree 0, k, k + 1
    and many, fanout 0, ids beyond 2**32, rows in any order."""
    from gnnflow.sampling import draws
    from gnnflow.sampling.neighbor import sample_edge_positions

    assert draws._c_kernel("gf_sample_positions") is not None, "the C draws kernel was not built"
    rng = np.random.default_rng(3)
    deg = np.concatenate([[0, 0, 10, 11, 1, 300], rng.integers(0, 60, 2000)]).astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    rows = rng.permutation(deg.shape[0]).astype(np.int64)
    ids = rows + np.int64(2**33) * (rows % 3)
    for fanout, layer in ((10, 0), (1, 1), (0, 0), (25, 2)):
        key = DrawKey(7, 2, 5)
        c_eid, c_counts = sample_edge_positions(indptr, rows, fanout, key, layer, ids)
        with monkeypatch.context() as m:
            m.setenv("GNNFLOW_NUMPY_DRAWS", "1")
            n_eid, n_counts = sample_edge_positions(indptr, rows, fanout, key, layer, ids)
        assert np.array_equal(c_counts, n_counts) and np.array_equal(c_eid, n_eid), fanout
        assert c_eid.dtype == np.int64 and c_eid.shape[0] == int(np.minimum(deg, fanout).sum())
