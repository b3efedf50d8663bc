"""Redundancy and splitting metrics of split parallelism (GSplit §2 Table 1, §6.3 Fig. 5).

* :func:`minibatch_counts` / :func:`microbatch_counts` / :func:`redundancy` —
  Table 1: for the same targets, the edges computed and the input features
  loaded by ``P`` data-parallel micro-batches (each sampled and loaded on its
  own, so vertices shared by several micro-batches count once per micro-batch)
  versus one mini-batch (what a split group samples and loads: every vertex
  once), and their ratios.
* :func:`combine_split_counts` — Fig. 5 measured inside training: each rank of
  a split group counts, per iteration and layer, the edges of its split and
  those whose source lies in another split (``gnnflow.partition.metrics.
  split_metrics`` on its own blocks); gathered once per epoch, they give the
  per-layer load imbalance (max over splits / mean, per iteration) and the
  cross-split edge fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gnnflow.partition.metrics import split_metrics
from gnnflow.sampling import NeighborSampler


def minibatch_counts(sampler: NeighborSampler, targets: torch.Tensor | np.ndarray) -> dict[str, int]:
    """Edges computed and features loaded by one mini-batch over ``targets``."""
    blocks = sampler.sample_blocks(targets)
    return {"edges": int(sum(b.num_edges for b in blocks)), "features": int(blocks[0].num_src),
            "layer_edges": [int(b.num_edges) for b in blocks]}


def microbatch_counts(sampler: NeighborSampler, micro_targets: Sequence[torch.Tensor | np.ndarray]) -> dict[str, int]:
    """The same for data-parallel micro-batches, each sampled and loaded independently.

    The micro-batches are one iteration, so each is drawn with the same batch key (as the
    ranks of a data-parallel iteration are): a vertex in two of them gets the same neighbours.
    """
    key = sampler.key
    edges = features = 0
    for t in micro_targets:
        if len(t) == 0:
            continue
        c = minibatch_counts(sampler.at(key.epoch, key.batch), t)
        edges += c["edges"]
        features += c["features"]
    sampler.at(key.epoch, key.batch + 1)
    return {"edges": edges, "features": features}


def split_targets(targets: np.ndarray, parts: int, node_part: np.ndarray | None = None,
                  seed: int = 0) -> list[np.ndarray]:
    """Data-parallel micro-batches of ``targets``: by owner (``node_part``) or random equal chunks."""
    targets = np.asarray(targets, dtype=np.int64)
    if node_part is not None:
        owner = np.asarray(node_part)[targets]
        return [targets[owner == p] for p in range(parts)]
    perm = np.random.default_rng(seed).permutation(targets.shape[0])
    return [targets[c] for c in np.array_split(perm, parts)]


def redundancy(indptr: np.ndarray, indices: np.ndarray, train_idx: np.ndarray, fanouts: Sequence[int],
               batch_size: int, parts: int, iterations: int = 8, seed: int = 0,
               node_part: np.ndarray | None = None) -> dict[str, Any]:
    """GSplit Table 1 on this graph: Micro (``parts`` micro-batches) vs Mini, summed over iterations.

    Each iteration draws ``batch_size`` targets uniformly from ``train_idx``;
    the micro-batches split them by owner when ``node_part`` is given (our
    data-parallel strategy) or at random (DGL's, GSplit Fig. 1a).
    """
    rng = np.random.default_rng(seed)
    mini_sampler = NeighborSampler(indptr, indices, fanouts, seed=seed)
    micro_sampler = NeighborSampler(indptr, indices, fanouts, seed=seed + 1)
    mini = {"edges": 0, "features": 0}
    micro = {"edges": 0, "features": 0}
    train_idx = np.asarray(train_idx, dtype=np.int64)
    for it in range(iterations):
        targets = rng.choice(train_idx, min(batch_size, train_idx.shape[0]), replace=False)
        m = minibatch_counts(mini_sampler, targets)
        u = microbatch_counts(micro_sampler, split_targets(targets, parts, node_part, seed + it))
        for key in mini:
            mini[key] += m[key]
            micro[key] += u[key]
    return {
        "parts": parts,
        "iterations": iterations,
        "batch_size": batch_size,
        "micro_split": "owner" if node_part is not None else "random",
        "edges_micro": micro["edges"],
        "edges_mini": mini["edges"],
        "edges_ratio": micro["edges"] / max(1, mini["edges"]),
        "features_micro": micro["features"],
        "features_mini": mini["features"],
        "features_ratio": micro["features"] / max(1, mini["features"]),
    }


def sampled_split_metrics(indptr: np.ndarray, indices: np.ndarray, train_idx: np.ndarray,
                          node_part: np.ndarray, fanouts: Sequence[int], batch_size: int,
                          iterations: int = 8, seed: int = 0) -> dict[str, Any]:
    """Fig. 5 from single-process samples split by ``node_part`` (no training): for comparison."""
    rng = np.random.default_rng(seed)
    sampler = NeighborSampler(indptr, indices, fanouts, seed=seed)
    parts = int(np.asarray(node_part).max()) + 1
    imb, cross = [], []
    for _ in range(iterations):
        targets = rng.choice(np.asarray(train_idx), min(batch_size, len(train_idx)), replace=False)
        m = split_metrics(sampler.sample_blocks(targets), node_part, parts)
        imb.append(m["load_imbalance"])
        cross.append(m["cross_fraction_total"])
    return {"load_imbalance": np.mean(imb, axis=0).tolist(), "cross_edge_fraction": float(np.mean(cross))}


def combine_split_counts(edges: np.ndarray, cross: np.ndarray) -> dict[str, float]:
    """Fig. 5 figures from per-split counts ``[splits, iterations, layers]``.

    ``load_imbalance_l{i}``: mean over iterations of max/mean edges per split at
    layer ``i`` (layer 0 = input layer); ``load_imbalance``: the mean over layers;
    ``load_imbalance_max``: the worst iteration and layer; ``cross_edge_fraction``:
    cross-split edges over all edges of the epoch's mini-batches (and per layer).
    """
    edges = np.asarray(edges, dtype=np.float64)
    cross = np.asarray(cross, dtype=np.float64)
    out: dict[str, float] = {}
    if edges.size == 0:
        return out
    mean = edges.mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(mean > 0, edges.max(axis=0) / np.where(mean > 0, mean, 1.0), 1.0)  # [iters, layers]
    per_layer = ratio.mean(axis=0)
    for i, v in enumerate(per_layer):
        out[f"load_imbalance_l{i}"] = float(v)
        tot = edges[:, :, i].sum()
        out[f"cross_edge_fraction_l{i}"] = float(cross[:, :, i].sum() / tot) if tot else 0.0
    out["load_imbalance"] = float(per_layer.mean())
    out["load_imbalance_max"] = float(ratio.max())
    total = edges.sum()
    out["cross_edge_fraction"] = float(cross.sum() / total) if total else 0.0
    return out
