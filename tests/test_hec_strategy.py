"""DistGNN-MB partition view and local mini-batches (§3.1, §3.3) and the HEC strategy."""

from __future__ import annotations

import pytest
import torch

from gnnflow.sampling import Block
from gnnflow.strategies.hec import LocalHaloSampler, default_cache_size, drop_sources


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
    sampler = LocalHaloSampler(part.indptr, part.indices, part.num_inner, part.num_halo, [3, 4, 5], seed=0)
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


def test_default_cache_size_scales_like_products():
    assert default_cache_size(2_449_029) == 1_000_000
    assert default_cache_size(32_768) == 13_380
