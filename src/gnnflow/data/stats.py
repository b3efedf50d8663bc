"""Statistics of a graph store, as printed by ``gnnflow info`` and ``gnnflow prepare``."""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnflow.data.store import GraphStore
from gnnflow.io import row_chunks


def _deg(d: np.ndarray) -> dict[str, Any]:
    if d.size == 0:
        return {"min": 0, "mean": 0.0, "max": 0, "median": 0.0}
    return {"min": int(d.min()), "mean": round(float(d.mean()), 4), "max": int(d.max()),
            "median": float(np.median(d))}


def summary(store: GraphStore) -> dict[str, Any]:
    """Meta (without checksums) plus degree, split, class and type statistics."""
    n = store.num_nodes
    in_deg = store.in_degrees()
    out_deg = np.zeros(n, dtype=np.int64)
    for _, block in row_chunks(store.indices, chunk_bytes=128 << 20):  # a block resident at a time
        out_deg += np.bincount(block, minlength=n)
    labels = np.asarray(store.labels)
    hist = np.bincount(labels[labels >= 0], minlength=store.num_classes) if n else np.zeros(0)
    stats: dict[str, Any] = {
        "num_nodes": n,
        "num_edges": store.num_edges,
        "in_degree": _deg(in_deg),
        "out_degree": _deg(out_deg),
        "isolated_vertices": int(np.count_nonzero((in_deg == 0) & (out_deg == 0))),
        "splits": {s: int(store.split(s).shape[0]) for s in ("train", "val", "test")},
        "labelled_vertices": int(np.count_nonzero(labels >= 0)),
        "class_histogram": [int(c) for c in hist],
        "feature_dim": store.feature_dim,
    }
    if "node_type" in store.extra:
        types = store.meta.node_types or []
        nt = np.bincount(np.asarray(store.extra["node_type"]), minlength=len(types))
        stats["nodes_per_type"] = {t: int(c) for t, c in zip(types, nt, strict=False)}
    if "edge_type" in store.extra:
        etypes = ["___".join(t) for t in store.meta.edge_types or []]
        et = np.bincount(np.asarray(store.extra["edge_type"]), minlength=len(etypes))
        stats["edges_per_type"] = {t: int(c) for t, c in zip(etypes, et, strict=False)}
    meta = {k: v for k, v in store.meta.to_dict().items() if k != "checksums"}
    return {"path": str(store.path), "meta": meta, "statistics": stats}
