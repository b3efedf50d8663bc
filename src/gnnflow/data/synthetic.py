"""Synthetic labelled graphs: power-law degrees, communities = classes, homophily knob.

The generator is a degree-corrected stochastic block model in Chung-Lu form:

* every vertex ``i`` gets a class ``y_i`` (uniform over ``num_classes``) and a
  weight ``w_i`` drawn from a Pareto law with exponent ``power_law_exponent``
  (capped), so expected degrees follow a power law;
* an undirected edge ``{u, v}`` picks ``u`` with probability proportional to
  ``w_u``; with probability ``homophily`` ``v`` is drawn (again proportional to
  weight) from ``u``'s own class, otherwise from all vertices.  Every vertex
  first gets one such edge, so there are no isolated vertices (for avg_degree >= 2);
* features are ``mu[y_i] + N(0, I)`` with random class centroids ``mu`` of
  norm ``feature_signal * sqrt(D / 2)`` (two centroids lie about
  ``feature_signal * sqrt(D)`` apart): a weak per-vertex class signal that
  averaging over same-class neighbours strengthens.  This is what makes a GNN beat an MLP on
  the same features (docs/data.md lists the measured gap);
* the training split is a uniform random ``train_frac`` of the vertices, or, with
  ``train_classes=K``, a random ``train_frac`` of all vertices drawn only from
  classes ``0..K-1`` (K communities): training vertices concentrated in one region
  of the graph, as in ogbn-papers100M, whose ~1 % labelled vertices are the arXiv
  papers.  Validation and test are drawn uniformly from the remaining vertices.

Edges are stored in both directions, without self-loops or duplicates, and the
count is exact: ``num_edges == 2 * round(num_nodes * avg_degree / 2)`` (so
``avg_degree`` is the mean in-degree of the stored graph).  Everything is
vectorized numpy in chunks, deterministic from ``seed``.

This graph plays the role that ogbn-products/papers100M play in the papers
(DistDGLv2 §5, GSplit §6, DistGNN-MB §4) where those cannot be downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.arrays import scratch_npy
from gnnflow.data.csr import csr_from_keys
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import ConfigError
from gnnflow.io import log, progress, reserve_space

#: The default synthetic graph: used by every strategy's accuracy tests and the
#: default workflow.  Small enough that 4-rank training for a few epochs on two
#: CPU cores takes seconds; the GNN-vs-MLP gap on it is measured in docs/data.md.
DEFAULTS: dict[str, Any] = {
    "num_nodes": 32_768,
    "avg_degree": 12.0,
    "feature_dim": 32,
    "num_classes": 8,
    "homophily": 0.6,
    "feature_signal": 0.4,
    "train_frac": 0.5,
    "val_frac": 0.2,
    "power_law_exponent": 2.5,
    "seed": 0,
}

_CHUNK = 1 << 21  # edges per sampling chunk
_FEATURE_CHUNK = 1 << 16  # rows per feature chunk


def _check(num_nodes: int, avg_degree: float, feature_dim: int, num_classes: int,
           homophily: float, feature_signal: float, train_frac: float, val_frac: float,
           power_law_exponent: float, train_classes: int | None = None) -> None:
    if num_nodes < 2:
        raise ConfigError(f"--nodes must be at least 2, got {num_nodes}")
    if not 0 < avg_degree < num_nodes - 1:
        raise ConfigError(f"--avg-degree must be in (0, nodes-1), got {avg_degree}")
    if feature_dim < 1:
        raise ConfigError(f"--feature-dim must be >= 1, got {feature_dim}")
    if not 2 <= num_classes <= num_nodes:
        raise ConfigError(f"--classes must be in [2, nodes], got {num_classes}")
    if not 0.0 <= homophily <= 1.0:
        raise ConfigError(f"--homophily must be in [0, 1], got {homophily}")
    if feature_signal < 0:
        raise ConfigError(f"--feature-signal must be >= 0, got {feature_signal}")
    if not (0 < train_frac < 1 and 0 <= val_frac < 1 and train_frac + val_frac < 1):
        raise ConfigError(
            f"--train-frac ({train_frac}) and --val-frac ({val_frac}) must be in (0, 1) "
            "and leave room for a test split"
        )
    if power_law_exponent <= 2.0:
        raise ConfigError(f"--power-law-exponent must be > 2, got {power_law_exponent}")
    if train_classes is not None and not 1 <= train_classes <= num_classes:
        raise ConfigError(f"--train-classes must be in [1, classes={num_classes}], got {train_classes}")


class EndpointSampler:
    """Draws vertices proportional to weight, globally or within one class.

    Weights are rounded to integer copies (at least ``copies_per_unit``) in an
    urn laid out class by class, so a draw is one random index into the urn
    (one memory access, instead of a binary search over cumulative weights).
    """

    def __init__(self, weights: np.ndarray, labels: np.ndarray, num_classes: int,
                 copies_per_unit: float = 4.0) -> None:
        order = np.argsort(labels, kind="stable")  # vertices grouped by class
        copies = np.maximum(1, np.rint(weights * (copies_per_unit / weights.min()))).astype(np.int64)
        idx_dtype = np.int32 if labels.shape[0] < 2**31 else np.int64
        self.urn = np.repeat(order.astype(idx_dtype), copies[order])
        per_class = np.bincount(labels, weights=copies, minlength=num_classes).astype(np.int64)
        self.class_end = np.cumsum(per_class)  # exclusive end position per class in the urn
        self.class_len = per_class
        self.labels = labels

    def global_(self, rng: np.random.Generator, k: int) -> np.ndarray:
        return self.urn[rng.integers(0, self.urn.shape[0], k)].astype(np.int64)

    def within(self, rng: np.random.Generator, classes: np.ndarray) -> np.ndarray:
        length = self.class_len[classes]
        pos = self.class_end[classes] - length + (rng.random(classes.shape[0]) * length).astype(np.int64)
        return self.urn[pos].astype(np.int64)

    def partners(self, rng: np.random.Generator, u: np.ndarray, homophily: float) -> np.ndarray:
        same = rng.random(u.shape[0]) < homophily
        v = np.empty_like(u)
        v[same] = self.within(rng, self.labels[u[same]])
        v[~same] = self.global_(rng, int((~same).sum()))
        return v


def _pair_keys(u: np.ndarray, v: np.ndarray, n: np.int64) -> np.ndarray:
    """Undirected key ``min * N + max``; self-loops map to -1."""
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    keys = lo * n + hi
    keys[lo == hi] = -1
    return keys


def _sorted_unique(keys: np.ndarray, presorted: bool = False) -> np.ndarray:
    """Distinct values of ``keys`` (sorted in place first); cheaper than ``np.unique``."""
    if not presorted:
        keys.sort()
    if keys.size == 0:
        return keys
    keep = np.empty(keys.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def _sample_pairs(rng: np.random.Generator, sampler: EndpointSampler, num_nodes: int,
                  num_pairs: int, homophily: float) -> np.ndarray:
    """Exactly ``num_pairs`` distinct undirected pair keys (sorted)."""
    n = np.int64(num_nodes)
    # Pass 1: one edge per vertex, so nobody starts isolated.
    first = min(num_nodes, num_pairs)
    u0 = rng.permutation(num_nodes)[:first].astype(np.int64)
    parts = [_pair_keys(u0, sampler.partners(rng, u0, homophily), n)]
    kept = np.empty(0, dtype=np.int64)
    need = num_pairs - first
    for _round in range(10):
        for start in progress(range(0, need, _CHUNK), desc="synthetic: sampling edges"):
            k = min(_CHUNK, need - start)
            u = sampler.global_(rng, k)
            parts.append(_pair_keys(u, sampler.partners(rng, u, homophily), n))
        fresh = np.concatenate(parts)
        parts = []
        fresh = _sorted_unique(fresh[fresh >= 0])
        # kept and fresh are sorted runs: a stable sort (timsort) merges them linearly.
        keys = np.concatenate([kept, fresh])
        del fresh
        keys.sort(kind="stable")
        kept = _sorted_unique(keys, presorted=True)
        del keys
        if kept.shape[0] >= num_pairs:
            break
        # Top up what duplicates and self-loops cost, with a little to spare.
        need = int((num_pairs - kept.shape[0]) * 1.1) + 64
    else:
        raise ConfigError(
            f"could not place {num_pairs} distinct edges on {num_nodes} vertices; "
            "lower --avg-degree"
        )
    excess = kept.shape[0] - num_pairs
    if excess:
        # Drop the spare edges at random among those whose endpoints keep >= 2 others.
        lo = kept // n
        hi = kept - lo * n
        deg = np.bincount(lo, minlength=num_nodes) + np.bincount(hi, minlength=num_nodes)
        cand = np.flatnonzero((deg[lo] >= 3) & (deg[hi] >= 3))
        if cand.shape[0] < excess:  # tiny dense graphs: any edge may go
            cand = np.arange(kept.shape[0])
        del lo, hi, deg
        mask = np.ones(kept.shape[0], dtype=bool)
        mask[rng.choice(cand, size=excess, replace=False)] = False
        kept = kept[mask]
    return kept


def _write_features(rng: np.random.Generator, labels: np.ndarray, num_classes: int,
                    feature_dim: int, feature_signal: float,
                    out: np.ndarray) -> None:
    centroids = rng.standard_normal((num_classes, feature_dim)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    centroids *= np.float32(feature_signal * np.sqrt(feature_dim) / np.sqrt(2.0))
    n = labels.shape[0]
    for start in progress(range(0, n, _FEATURE_CHUNK), desc="synthetic: features"):
        stop = min(n, start + _FEATURE_CHUNK)
        block = rng.standard_normal((stop - start, feature_dim), dtype=np.float32)
        block += centroids[labels[start:stop]]
        out[start:stop] = block


def _concentrated_train(perm: np.ndarray, labels: np.ndarray, train_classes: int,
                        n_train: int) -> tuple[np.ndarray, np.ndarray]:
    """(training vertices: the first ``n_train`` of ``perm`` in classes < K, the rest in ``perm`` order)."""
    region = perm[labels[perm] < train_classes]
    if region.shape[0] < n_train:
        raise ConfigError(
            f"--train-classes {train_classes}: classes 0..{train_classes - 1} hold {region.shape[0]} vertices, "
            f"fewer than the {n_train} training vertices --train-frac asks for; raise --train-classes "
            "or lower --train-frac"
        )
    train = region[:n_train]
    is_train = np.zeros(labels.shape[0], dtype=bool)
    is_train[train] = True
    return train, perm[~is_train[perm]]


def generate_synthetic(
    num_nodes: int = DEFAULTS["num_nodes"],
    avg_degree: float = DEFAULTS["avg_degree"],
    feature_dim: int = DEFAULTS["feature_dim"],
    num_classes: int = DEFAULTS["num_classes"],
    homophily: float = DEFAULTS["homophily"],
    train_frac: float = DEFAULTS["train_frac"],
    seed: int = DEFAULTS["seed"],
    *,
    val_frac: float = DEFAULTS["val_frac"],
    feature_signal: float = DEFAULTS["feature_signal"],
    power_law_exponent: float = DEFAULTS["power_law_exponent"],
    train_classes: int | None = None,
    features_out: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Generate a labelled power-law graph with community structure.

    Returns keyword arguments for :func:`gnnflow.data.store.write_store`
    (``name``, ``source``, ``indptr``, ``indices``, ``features``, ``labels``,
    ``*_idx``, ``num_classes``, ``directed``, ``meta``).  With ``features_out``
    the feature matrix is written there chunk by chunk as a ``.npy`` file and
    ``features`` is that path (bounded memory for large graphs).

    ``feature_signal`` is the root-mean-square per-dimension distance between
    two class centroids, in units of the (unit) noise (0: features carry no
    class information); ``homophily``
    is the probability that an edge's second endpoint is drawn from the first
    endpoint's class rather than from the whole graph.  ``train_classes=K`` draws
    the training split from classes ``0..K-1`` only (default: from all vertices);
    a model trained on it never sees the other classes' labels, so it serves
    partitioning and load-balance experiments, not accuracy ones.
    """
    num_nodes, feature_dim, num_classes = int(num_nodes), int(feature_dim), int(num_classes)
    if train_classes is not None:
        train_classes = int(train_classes)
    _check(num_nodes, avg_degree, feature_dim, num_classes, homophily, feature_signal,
           train_frac, val_frac, power_law_exponent, train_classes)
    num_pairs = int(round(num_nodes * avg_degree / 2))
    if num_pairs > num_nodes * (num_nodes - 1) // 4:
        raise ConfigError(f"--avg-degree {avg_degree} is too dense for {num_nodes} vertices")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, size=num_nodes, dtype=np.int64)
    # Pareto(alpha - 1) weights: P(deg > k) ~ k^-(alpha-1); capped at sqrt(2M) to keep
    # the expected number of duplicate pairs small (Chung-Lu condition w_max^2 <= sum w).
    weights = (1.0 - rng.random(num_nodes)) ** (-1.0 / (power_law_exponent - 1.0))
    weights = np.minimum(weights, np.sqrt(weights.sum()) * 2.0)
    sampler = EndpointSampler(weights, labels, num_classes)
    log.info("synthetic: %d vertices, %d undirected edges, %d classes", num_nodes, num_pairs,
             num_classes)
    pair_keys = _sample_pairs(rng, sampler, num_nodes, num_pairs, homophily)
    del sampler, weights

    # Undirected pairs -> directed keys dst*N+src in both directions -> CSR.  The pair
    # keys lo*N+hi are sorted, so only the reversed half needs a sort; a stable sort
    # (timsort) of the two sorted runs is then a linear merge.
    n = np.int64(num_nodes)
    m = pair_keys.shape[0]
    keys = np.empty(2 * m, dtype=np.int64)
    lo = pair_keys // n
    hi = pair_keys - lo * n
    np.multiply(hi, n, out=keys[:m])
    keys[:m] += lo
    keys[m:] = pair_keys
    del lo, hi, pair_keys
    keys[:m].sort()
    keys.sort(kind="stable")
    indptr, indices = csr_from_keys(keys, num_nodes, drop_self_loops=False, dedup=False,
                                    presorted=True)
    del keys

    if features_out is not None:
        features: Any = Path(features_out)
        mm = np.lib.format.open_memmap(features, mode="w+", dtype=np.float32,
                                       shape=(num_nodes, feature_dim))
        with open(features, "r+b") as fh:  # the pages the map writes: a full disk raises here
            reserve_space(fh.fileno(), os.fstat(fh.fileno()).st_size)
        _write_features(rng, labels, num_classes, feature_dim, feature_signal, mm)
        mm.flush()
        del mm
    else:
        features = np.empty((num_nodes, feature_dim), dtype=np.float32)
        _write_features(rng, labels, num_classes, feature_dim, feature_signal, features)

    perm = rng.permutation(num_nodes)
    n_train = int(round(train_frac * num_nodes))
    n_val = int(round(val_frac * num_nodes))
    if train_classes is None:
        train, rest = perm[:n_train], perm[n_train:]
    else:
        train, rest = _concentrated_train(perm, labels, train_classes, n_train)
    params = {
        "num_nodes": num_nodes, "avg_degree": float(avg_degree), "feature_dim": feature_dim,
        "num_classes": num_classes, "homophily": float(homophily),
        "feature_signal": float(feature_signal), "train_frac": float(train_frac),
        "val_frac": float(val_frac), "power_law_exponent": float(power_law_exponent),
        "seed": int(seed),
    }
    if train_classes is not None:
        params["train_classes"] = train_classes
    return {
        "name": "synthetic",
        "source": "synthetic",
        "indptr": indptr,
        "indices": indices,
        "features": features,
        "labels": labels,
        "train_idx": np.sort(train),
        "val_idx": np.sort(rest[:n_val]),
        "test_idx": np.sort(rest[n_val:]),
        "num_classes": num_classes,
        "directed": False,
        "meta": {"generator": params, "random_features": False},
    }


def prepare_synthetic(
    out: str | os.PathLike[str],
    num_nodes: int = DEFAULTS["num_nodes"],
    avg_degree: float = DEFAULTS["avg_degree"],
    feature_dim: int = DEFAULTS["feature_dim"],
    num_classes: int = DEFAULTS["num_classes"],
    homophily: float = DEFAULTS["homophily"],
    train_frac: float = DEFAULTS["train_frac"],
    seed: int = DEFAULTS["seed"],
    *,
    overwrite: bool = False,
    name: str | None = None,
    normalize_features: str = "none",
    **kwargs: Any,
) -> GraphStore:
    """Generate a synthetic graph and write it as a graph store at ``out`` (atomically)."""
    with scratch_npy(out, "features") as tmp:
        data = generate_synthetic(num_nodes, avg_degree, feature_dim, num_classes, homophily,
                                  train_frac, seed, features_out=tmp, **kwargs)
        if name:
            data["name"] = name
        return write_store(out, overwrite=overwrite, normalize_features=normalize_features, **data)
