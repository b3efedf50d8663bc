"""Partition quality metrics.

* edge cut: the fraction of (directed, stored) edges whose endpoints lie in
  different parts (DistDGLv2 §4.1.1 minimises it to cut remote feature fetches);
* balance: max/avg per-part sum of every constraint (DistDGLv2 §4.1.3);
* halo vertices per part (DistGNN-MB §3.1);
* K-hop replication factor (DGCL §3, Fig. 4): the vertices all parts would hold
  if each replicated its K-hop in-neighbourhood, divided by N;
* split-parallel metrics (GSplit §6.3, Fig. 5): per mini-batch, the load
  imbalance (max/avg edges computed per split per layer) and the fraction of
  sampled edges whose endpoints are assigned to different splits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_CHUNK = 1 << 20


def edge_dst(indptr: np.ndarray) -> np.ndarray:
    """Destination vertex of every CSR entry."""
    n = indptr.shape[0] - 1
    return np.repeat(np.arange(n, dtype=np.int64), np.diff(np.asarray(indptr)))


def edge_cut(indptr: np.ndarray, indices: np.ndarray, node_part: np.ndarray) -> int:
    """Number of stored edges whose endpoints lie in different parts (chunked; the pages
    of a memory-mapped CSR are dropped after every chunk)."""
    from gnnflow.partition.book import release_pages

    mapped = (indptr, indices)
    indptr = np.asarray(indptr)
    n = indptr.shape[0] - 1
    cut = 0
    rows_per_chunk = max(1, _CHUNK * n // max(1, int(indptr[-1])))
    for r0 in range(0, n, rows_per_chunk):
        r1 = min(n, r0 + rows_per_chunk)
        lo, hi = int(indptr[r0]), int(indptr[r1])
        dst_part = np.repeat(node_part[r0:r1], np.diff(indptr[r0:r1 + 1]))
        cut += int(np.count_nonzero(node_part[np.asarray(indices[lo:hi])] != dst_part))
        release_pages(*mapped)
    return cut


def replication_factor(indptr: np.ndarray, indices: np.ndarray, node_part: np.ndarray,
                       num_parts: int, hops: int) -> float:
    """DGCL §3: sum over parts of |own vertices ∪ their ``hops``-hop in-neighbours| / N."""
    from gnnflow.partition.book import khop_in_neighbourhood

    n = node_part.shape[0]
    total = 0
    for p in range(num_parts):
        inner = np.flatnonzero(node_part == p)
        total += inner.shape[0] + sum(a.shape[0] for a in khop_in_neighbourhood(indptr, indices, inner, hops, n))
    return total / n


def split_metrics(blocks: list[Any], node_part: np.ndarray, num_parts: int | None = None) -> dict[str, Any]:
    """GSplit §6.3 metrics of one sampled mini-batch split by ``node_part``.

    Each destination vertex of a block is computed by the split owning it, so the
    edges of a layer go to ``node_part[dst]``.  Returns per layer the max/avg of
    the per-split edge counts (``load_imbalance``) and the fraction of edges whose
    source is owned by another split (``cross_fraction``: the data that split
    parallelism shuffles), plus their edge-weighted totals.
    """
    node_part = np.asarray(node_part)
    if num_parts is None:
        num_parts = int(node_part.max()) + 1
    imbalance, cross, edges, cross_edges = [], [], [], []
    for b in blocks:
        indptr = _np(b.indptr)
        src_ids, dst_ids = _np(b.src_ids), _np(b.dst_ids)
        src_local = _np(b.indices)
        dst_part = node_part[dst_ids]
        edge_part = np.repeat(dst_part, np.diff(indptr))
        src_part = node_part[src_ids[src_local]]
        per_split = np.bincount(edge_part, minlength=num_parts)
        m = int(per_split.sum())
        imbalance.append(float(per_split.max() / per_split.mean()) if m else 1.0)
        c = int(np.count_nonzero(src_part != edge_part))
        cross.append(c / m if m else 0.0)
        edges.append(m)
        cross_edges.append(c)
    total = sum(edges)
    return {
        "load_imbalance": imbalance,
        "cross_fraction": cross,
        "edges": edges,
        "max_load_imbalance": max(imbalance) if imbalance else 1.0,
        "cross_fraction_total": sum(cross_edges) / total if total else 0.0,
    }


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def quality(store: Any, node_part: np.ndarray, num_parts: int, constraints: list[str],
            part_stats: list[dict[str, int]] | None = None, replication_hops: int = 0) -> dict[str, Any]:
    """Edge cut, balance per constraint, halo sizes, optional replication factor."""
    from gnnflow.partition.constraints import balance, constraint_weights

    node_part = np.asarray(node_part)
    cut = edge_cut(store.indptr, store.indices, node_part)
    m = max(1, store.num_edges)
    w = constraint_weights(store, constraints)
    bal = balance(w, node_part, num_parts)
    q: dict[str, Any] = {
        "edge_cut": cut,
        "edge_cut_pct": 100.0 * cut / m,
        "balance": {name: float(b) for name, b in zip(constraints, bal, strict=True)},
        "part_sizes": np.bincount(node_part, minlength=num_parts).tolist(),
    }
    if part_stats is not None:
        q["halo_per_part"] = [s["halo"] for s in part_stats]
        q["edges_per_part"] = [s["edges"] for s in part_stats]
    for k in range(1, replication_hops + 1):
        q.setdefault("replication_factor", {})[str(k)] = replication_factor(
            store.indptr, store.indices, node_part, num_parts, k)
    return q


def sampled_split_metrics(store: Any, node_part: np.ndarray, fanouts: list[int], batch_size: int,
                          num_batches: int = 20, seed: int = 1) -> dict[str, Any]:
    """GSplit Fig. 5 measured: sample ``num_batches`` training mini-batches, split each by ``node_part``.

    Returns the mean cross-split edge fraction, the mean and max (over batches) of
    the per-batch worst-layer load imbalance, and per-layer means.  The seed
    differs from presampling's default so the presampled batches are not reused.
    """
    from gnnflow.partition.presample import training_batches
    from gnnflow.sampling import NeighborSampler

    node_part = np.asarray(node_part)
    num_parts = int(node_part.max()) + 1
    sampler = NeighborSampler(np.asarray(store.indptr), np.asarray(store.indices), fanouts, seed=seed)
    rng = np.random.default_rng(seed)
    train = np.asarray(store.train_idx)
    batches: list[np.ndarray] = []
    while len(batches) < num_batches:
        batches += [b for b in training_batches(train, batch_size, rng) if b.shape[0] == min(batch_size, train.shape[0])]
    per = [split_metrics(sampler.sample_blocks(t), node_part, num_parts) for t in batches[:num_batches]]
    imb = np.array([m["load_imbalance"] for m in per])  # [batches, layers]
    cross = np.array([m["cross_fraction_total"] for m in per])
    return {
        "num_batches": num_batches,
        "fanouts": list(fanouts),
        "batch_size": batch_size,
        "cross_fraction_mean": float(cross.mean()),
        "load_imbalance_mean": float(imb.max(axis=1).mean()),
        "load_imbalance_max": float(imb.max()),
        "load_imbalance_per_layer_mean": imb.mean(axis=0).tolist(),
        "cross_fraction_per_layer_mean": np.array([m["cross_fraction"] for m in per]).mean(axis=0).tolist(),
    }
