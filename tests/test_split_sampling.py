"""Cooperative split sampling (GSplit Algorithm 1): the splits form one valid mini-batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_store_arrays

from gnnflow.comm.collectives import alltoallv
from gnnflow.runtime.launch import run_ranks
from gnnflow.strategies.split.sampling import SplitGraph, SplitSampler, sp_sample

FANOUTS = [3, 2]


def _graph(parts: int):
    arrays = random_store_arrays(num_nodes=120, avg_degree=5, seed=1)
    node_part = np.random.default_rng(7).integers(0, parts, 120).astype(np.int32)
    return arrays, node_part


def _sample_rank(ctx, parts: int, targets: np.ndarray):
    arrays, node_part = _graph(parts)
    graph = SplitGraph.from_arrays(arrays["indptr"], arrays["indices"], node_part, ctx.rank,
                                   arrays["features"], arrays["labels"], num_parts=parts)
    sampler = SplitSampler(graph, FANOUTS, seed=11 + ctx.rank)
    local = torch.from_numpy(targets[node_part[targets] == ctx.rank])
    sample = sp_sample(sampler, local)
    replay_ok = []
    for block, frontier, sh in zip(sample.blocks, sample.frontiers[:-1], sample.shuffle, strict=True):
        # replaying the shuffle index with vertex ids rebuilds the mixed frontier exactly
        got = alltoallv([frontier[i] for i in sh.send_index], recv_counts=sh.recv_counts, kind="host")
        mixed = torch.cat([frontier, *got])[sh.gather_index]
        replay_ok.append(bool(torch.equal(mixed, block.src_ids)))
    edges = [(b.dst_ids[b.edge_dst()].numpy(), b.src_ids[b.indices].numpy(), b.dst_ids.numpy()) for b in sample.blocks]
    return {"frontiers": [f.numpy() for f in sample.frontiers], "edges": edges, "replay": replay_ok,
            "targets": local.numpy()}


@pytest.mark.parametrize("parts", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_splits_union_is_one_valid_minibatch(parts):
    arrays, node_part = _graph(parts)
    indptr, indices = arrays["indptr"], arrays["indices"]
    targets = np.random.default_rng(3).choice(arrays["train_idx"], 20, replace=False)
    out = run_ranks(_sample_rank, parts, parts, targets, timeout_s=60)
    assert all(all(r["replay"]) for r in out)
    num_layers = len(FANOUTS)
    for level in range(num_layers + 1):
        fronts = [r["frontiers"][level] for r in out]
        for rank, f in enumerate(fronts):
            assert (node_part[f] == rank).all(), "a rank's frontier holds only vertices it owns"
            assert len(np.unique(f)) == len(f)
        union = np.concatenate(fronts)
        assert len(np.unique(union)) == len(union), "splits do not overlap"
    assert sorted(np.concatenate([r["targets"] for r in out])) == sorted(targets)
    for layer in range(num_layers):
        srcs = np.concatenate([r["edges"][layer][1] for r in out])
        dsts_all = np.concatenate([r["edges"][layer][2] for r in out])
        # the inputs of layer l are exactly the vertices computed at level l
        assert set(srcs) | set(dsts_all) == set(np.concatenate([r["frontiers"][layer] for r in out]))
        for r in out:
            e_dst, e_src, dst = r["edges"][layer]
            for v in dst:
                got = e_src[e_dst == v]
                nbrs = indices[indptr[v]:indptr[v + 1]]
                assert len(got) == min(FANOUTS[layer], len(nbrs)) == len(np.unique(got))
                assert np.isin(got, nbrs).all()


def test_a_rank_without_targets_still_takes_part():
    arrays, node_part = _graph(2)
    owned_by_0 = np.flatnonzero(node_part == 0)
    targets = np.intersect1d(owned_by_0, arrays["train_idx"])[:10]
    out = run_ranks(_sample_rank, 2, 2, targets, timeout_s=60)
    assert len(out[1]["targets"]) == 0
    assert all(all(r["replay"]) for r in out)
    assert len(out[1]["frontiers"][0]) > 0, "rank 1 computes the vertices it owns in rank 0's neighbourhood"
