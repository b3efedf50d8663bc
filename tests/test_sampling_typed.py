"""Typed neighbour sampling (DistDGLv2 §4.1.1, DGL's ``sample_etype_neighbors``): per-relation
counts, full relations, partition-invariant draws keyed by relation, rows grouped by relation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from gnnflow.config import TrainConfig, format_fanouts, parse_fanouts
from gnnflow.data.hetero_synthetic import generate_synthetic_hetero
from gnnflow.data.homogenize import homogenize
from gnnflow.errors import ConfigError
from gnnflow.sampling import (
    DrawKey,
    NeighborSampler,
    TypedNeighborSampler,
    relation_fanouts,
    sort_rows_by_type,
)
from gnnflow.sampling.typed import sample_typed_edge_positions

SMALL = dict(num_papers=300, num_authors=400, num_institutions=20, num_fields=30, num_classes=4)


@pytest.fixture(scope="module")
def typed():
    d = homogenize(generate_synthetic_hetero(**SMALL))
    return d["indptr"], d["indices"], np.asarray(d["extra_arrays"]["edge_type"]), d["meta"]


def _edges_by_relation(indptr, indices, etypes, v):
    """``{relation: [sources in CSR order]}`` of vertex ``v``."""
    out: dict[int, list[int]] = {}
    for p in range(indptr[v], indptr[v + 1]):
        out.setdefault(int(etypes[p]), []).append(int(indices[p]))
    return out


def test_homogenize_writes_rows_grouped_by_relation(typed):
    indptr, indices, etypes, _ = typed
    for v in range(indptr.shape[0] - 1):
        assert np.all(np.diff(etypes[indptr[v]:indptr[v + 1]]) >= 0), f"row {v} not grouped by edge type"
    same_indices, same_types = sort_rows_by_type(indptr, indices, etypes)
    assert same_indices is indices and same_types is etypes  # nothing to do: no copy


def test_homogenize_groups_rows_in_small_chunks(tmp_path, typed):
    """The on-disk reorder runs a few rows at a time: a tiny chunk gives the same store."""
    from gnnflow.data import homogenize as hz

    hg = generate_synthetic_hetero(**SMALL)
    hz.add_reverse_edges(hg)
    ntypes = hg.node_types
    etypes_order = [e for e in sorted(hg.edges) if not e[1].startswith("rev_")] + sorted(
        e for e in hg.edges if e[1].startswith("rev_"))
    offsets = np.concatenate([[0], np.cumsum([hg.num_nodes[t] for t in ntypes])])
    eoffsets = np.concatenate([[0], np.cumsum([hg.edges[e][0].shape[0] for e in etypes_order])])
    paths = hz._typed_csr(hg, etypes_order, ntypes, offsets, eoffsets, tmp_path, chunk=7)
    indptr, indices, etypes, _ = typed
    assert np.array_equal(np.load(paths[0]), indptr)
    assert np.array_equal(np.load(paths[1]), indices)
    assert np.array_equal(np.load(paths[3]), etypes)


def test_unsorted_csr_is_ordered_once_and_samples_the_same(typed):
    """Rows listed with the relations in reverse order (each relation's edges kept in order) are
    grouped back by a stable sort, so the sampler draws exactly what it draws on the store's CSR."""
    indptr, indices, etypes, meta = typed
    rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    shuffled = np.lexsort((-etypes, rows))
    bad_indices, bad_types = indices[shuffled], etypes[shuffled]
    got_indices, got_types = sort_rows_by_type(indptr, bad_indices, bad_types)
    assert np.array_equal(got_indices, indices) and np.array_equal(got_types, etypes)
    fanouts = [3, {r: 2 for r in range(8)}]
    a = TypedNeighborSampler(indptr, indices, etypes, fanouts, seed=5).at(1, 2).sample_blocks(torch.arange(450, 500))
    b = TypedNeighborSampler(indptr, bad_indices, bad_types, fanouts, seed=5).at(1, 2).sample_blocks(
        torch.arange(450, 500))
    for x, y in zip(a, b, strict=True):
        for name in ("dst_ids", "src_ids", "indptr", "indices", "etypes"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name


@pytest.mark.parametrize("spec", [1, 3, -1, {0: 1, 1: 2, 2: 0, 3: -1, 4: 3, 5: 1, 6: 2, 7: 5}])
def test_per_relation_counts_and_validity(typed, spec):
    indptr, indices, etypes, meta = typed
    sampler = TypedNeighborSampler(indptr, indices, etypes, [spec], seed=3,
                                   node_type_offsets=meta["node_type_offsets"])
    fan = relation_fanouts(spec, 8)
    targets = torch.arange(0, 750, 3)
    block, _ = sampler.sample_layer(targets, spec, 0)
    assert torch.equal(block.src_ids[: block.num_dst], block.dst_ids)
    assert block.etypes is not None and block.etypes.shape == block.indices.shape
    node_type = np.searchsorted(meta["node_type_offsets"], block.src_ids.numpy(), side="right") - 1
    assert np.array_equal(block.src_types.numpy(), node_type)
    for i in range(block.num_dst):
        v = int(block.dst_ids[i])
        lo, hi = int(block.indptr[i]), int(block.indptr[i + 1])
        got_types = block.etypes[lo:hi].numpy()
        assert np.all(np.diff(got_types) >= 0), "a destination's edges are not grouped by relation"
        true = _edges_by_relation(indptr, indices, etypes, v)
        for r in range(8):
            nbrs = block.src_ids[block.indices[lo:hi][got_types == r]].tolist()
            have = true.get(r, [])
            want = len(have) if fan[r] < 0 else min(fan[r], len(have))
            assert len(nbrs) == want, f"vertex {v} relation {r}: {len(nbrs)} sampled, fanout {fan[r]}"
            assert len(set(nbrs)) == len(nbrs) and set(nbrs) <= set(have)
            if fan[r] < 0 or len(have) <= fan[r]:
                assert nbrs == have, "a relation kept whole is its edges in CSR order"


def test_fanout_minus_one_keeps_every_edge(typed):
    indptr, indices, etypes, _ = typed
    rows = np.arange(indptr.shape[0] - 1)
    eid, counts, rels = sample_typed_edge_positions(indptr, etypes, rows, np.full(8, -1), DrawKey(0), 0, rows)
    assert np.array_equal(eid, np.arange(indices.shape[0])) and np.array_equal(counts, np.diff(indptr))
    assert np.array_equal(rels, etypes)
    # -1 in a per-relation fanout keeps that relation whole while others are drawn
    spec = np.array([-1, 1, 1, 1, 1, 1, 1, 1])
    eid, counts, rels = sample_typed_edge_positions(indptr, etypes, rows, spec, DrawKey(0), 0, rows)
    assert np.array_equal(np.sort(eid[rels == 0]), np.flatnonzero(etypes == 0))


def test_typed_draws_are_partition_invariant(typed):
    """Sampling a subset of rows, from a CSR holding only those rows (a partition's, local row
    ids with their global ids), draws each row's neighbours as sampling all rows does."""
    indptr, indices, etypes, _ = typed
    spec = np.array([1, 2, 2, 1, 1, 1, 2, 3])
    key = DrawKey(seed=11, epoch=2, batch=7)
    rows = np.arange(indptr.shape[0] - 1)
    eid, counts, _ = sample_typed_edge_positions(indptr, etypes, rows, spec, key, 1, rows)
    full = np.split(indices[eid], np.cumsum(counts)[:-1])
    part = np.random.default_rng(0).choice(rows, 120, replace=False)
    sub_ptr = np.concatenate([[0], np.cumsum(np.diff(indptr)[part])])
    slots = np.concatenate([np.arange(indptr[v], indptr[v + 1]) for v in part])
    local = np.random.default_rng(1).permutation(part.shape[0])  # the partition orders its rows its own way
    sub_eid, sub_counts, _ = sample_typed_edge_positions(sub_ptr, etypes[slots], local, spec, key, 1, part[local])
    got = np.split(indices[slots][sub_eid], np.cumsum(sub_counts)[:-1])
    for i, r in enumerate(local):
        assert np.array_equal(got[i], full[part[r]]), f"vertex {part[r]} drew other neighbours in the part"
    # the key decides: another batch draws other neighbours somewhere
    other, other_counts, _ = sample_typed_edge_positions(indptr, etypes, rows, spec, DrawKey(11, 2, 8), 1, rows)
    assert not np.array_equal(indices[other], indices[eid])


def test_typed_draws_are_uniform():
    """Each of a relation's d neighbours is drawn with probability k/d (chi-square over batches)."""
    indptr = np.array([0, 14])
    etypes = np.array([0] * 4 + [1] * 10)
    spec = np.array([-1, 3])
    hits = np.zeros(14)
    for b in range(1500):
        eid, _, _ = sample_typed_edge_positions(indptr, etypes, np.array([0]), spec, DrawKey(0, 0, b), 0,
                                                np.array([0]))
        hits[eid] += 1
    assert np.all(hits[:4] == 1500)
    assert stats.chisquare(hits[4:]).pvalue > 1e-3
    assert hits[4:].sum() == 1500 * 3


def test_untyped_sampler_refuses_per_relation_fanouts(typed):
    indptr, indices, _, _ = typed
    with pytest.raises(ConfigError, match="per-relation fanouts need typed sampling"):
        NeighborSampler(indptr, indices, [{"cites": 3}])
    with pytest.raises(ConfigError, match="missing relation ids"):
        relation_fanouts({0: 1}, 3)
    with pytest.raises(ConfigError, match="resolve relation names"):
        relation_fanouts({"cites": 1}, 3)


def test_fanout_settings_parse_and_print():
    layers = parse_fanouts("cites:10,paper___writes___author:5,*:2;4")
    assert layers == [{"cites": 10, "paper___writes___author": 5, "*": 2}, 4]
    assert parse_fanouts(format_fanouts(layers)) == layers
    assert parse_fanouts("15,10,5") == [15, 10, 5] and format_fanouts([15, 10, 5]) == "15,10,5"
    cfg = TrainConfig.from_dict({"graph": "g", "fanouts": "cites:10,*:5;*:3"})
    assert cfg.num_layers == 2 and cfg.relational
    for bad in ("cites:x;3", "15;10,5", ":3"):
        with pytest.raises(ConfigError, match="fanouts"):
            parse_fanouts(bad)
    with pytest.raises(ConfigError, match="counts >= -1"):
        TrainConfig(graph="g", fanouts=[{"cites": -2}], num_layers=1)


def test_blocks_carry_types_when_moved(typed):
    indptr, indices, etypes, meta = typed
    sampler = TypedNeighborSampler(indptr, indices, etypes, [2], node_type_offsets=meta["node_type_offsets"])
    block = sampler.sample_blocks(torch.arange(450, 460))[0]
    moved = block.to("meta")
    assert moved.etypes is not None and moved.etypes.device.type == "meta"
    assert moved.src_types is not None and moved.src_types.shape == block.src_types.shape
