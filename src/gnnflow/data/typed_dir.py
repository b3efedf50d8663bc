"""A heterogeneous graph as a directory of per-type files (``gnnflow prepare import`` reads it,
``gnnflow homogenize`` writes it back): ``meta.json`` naming the node and edge types, then per
node type its count and optional features and labels, per edge type its ``src``/``dst`` arrays.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from gnnflow.data.hetero import HeteroGraph
from gnnflow.errors import GnnflowError


def write_typed_dir(hg: HeteroGraph, out: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Write ``hg`` in the typed-directory layout (atomically)."""
    from gnnflow.io import atomic_dir

    with atomic_dir(out, overwrite=overwrite) as tmp:
        graph = {
            "name": hg.name,
            "num_nodes": hg.num_nodes,
            "edge_types": [list(e) for e in hg.edge_types],
            "num_classes": hg.num_classes,
            "target_node_type": hg.target_node_type,
        }
        (tmp / "graph.json").write_text(json.dumps(graph, indent=2) + "\n")
        for t in hg.node_types:
            d = tmp / "nodes" / t
            d.mkdir(parents=True)
            if t in hg.features:
                np.save(d / "features.npy", np.asarray(hg.features[t], dtype=np.float32))
            if t in hg.labels:
                np.save(d / "labels.npy", np.asarray(hg.labels[t], dtype=np.int64))
            for split, per_type in hg.splits.items():
                if t in per_type:
                    np.save(d / f"{split}_idx.npy", np.asarray(per_type[t], dtype=np.int64))
        (tmp / "edges").mkdir()
        for e in hg.edge_types:
            src, dst = hg.edges[e]
            np.save(tmp / "edges" / f"{'___'.join(e)}.npy", np.stack([src, dst]).astype(np.int64))


def read_typed_dir(path: str | os.PathLike[str]) -> HeteroGraph:
    """Read the typed-directory layout; raise GnnflowError naming a bad file."""
    from gnnflow.data.arrays import load_npy

    path = Path(path)
    gfile = path / "graph.json"
    if not gfile.exists():
        raise GnnflowError(f"{gfile}: missing; a typed graph directory needs graph.json "
                           "(see docs/data.md)")
    try:
        graph = json.loads(gfile.read_text())
        num_nodes = {str(t): int(c) for t, c in graph["num_nodes"].items()}
        etypes = [tuple(e) for e in graph["edge_types"]]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise GnnflowError(f"{gfile}: needs 'num_nodes' {{type: count}} and 'edge_types' "
                           f"[[src, rel, dst], ...] ({exc})") from None
    edges = {}
    for e in etypes:
        f = path / "edges" / f"{'___'.join(e)}.npy"
        arr = load_npy(f)
        if arr.ndim != 2 or arr.shape[0] != 2:
            raise GnnflowError(f"{f}: must be an int array of shape [2, num_edges], got {arr.shape}")
        edges[e] = (arr[0].astype(np.int64), arr[1].astype(np.int64))
    features, labels, splits = {}, {}, {}
    for t in num_nodes:
        d = path / "nodes" / t
        if (d / "features.npy").exists():
            features[t] = load_npy(d / "features.npy").astype(np.float32)
        if (d / "labels.npy").exists():
            labels[t] = load_npy(d / "labels.npy").astype(np.int64)
        for split in ("train", "val", "test"):
            if (d / f"{split}_idx.npy").exists():
                splits.setdefault(split, {})[t] = load_npy(d / f"{split}_idx.npy").astype(np.int64)
    num_classes = int(graph.get("num_classes") or
                      max((int(y.max()) + 1 for y in labels.values() if y.size), default=0))
    hg = HeteroGraph(name=str(graph.get("name", path.name)), num_nodes=num_nodes, edges=edges,
                     features=features, labels=labels, splits=splits, num_classes=num_classes,
                     target_node_type=graph.get("target_node_type"))
    hg.validate(str(path))
    return hg
