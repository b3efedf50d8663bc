"""``import``: bring your own graph from a documented directory layout.

::

    DIR/
      edges.npy | edges.csv | edges.csv.gz | edges.tsv | edges.txt | edges.parquet
                          one edge src -> dst per row (npy: int [M,2] or [2,M];
                          csv: two integer columns, optional header "src,dst";
                          parquet: columns src, dst or the first two)
      graph.json          optional: {"name": str, "num_nodes": int, "num_classes": int,
                                     "directed": bool}
      features.npy        optional float [N, D], or
      features.npz        sparse [N, D] (scipy.sparse.save_npz), densified into the store
      labels.npy          optional int [N], -1 = unlabelled (default: all -1)
      train_idx.npy, val_idx.npy, test_idx.npy    optional vertex id arrays, or
      train_mask.npy, val_mask.npy, test_mask.npy optional bool [N] masks

Vertex ids must already be ``0..N-1``; ``N`` is ``graph.json``'s ``num_nodes``,
else the row count of ``features.npy`` or ``labels.npy``, else ``max id + 1``.
Without split files a split is drawn from the labelled vertices
(:class:`gnnflow.data.splits.SplitSpec`: ``--split random`` with ``--train-frac`` and
``--val-frac``, or ``--split per-class``; seeded).  Every inconsistency (a missing or truncated file, an
out-of-range id, a label count that differs from the vertex count) raises one
GnnflowError naming the file, before anything is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.arrays import load_edge_list, load_npy
from gnnflow.data.csr import build_csr, check_edge_ids
from gnnflow.data.splits import SplitSpec
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import GnnflowError

EDGE_FILES = ("edges.npy", "edges.parquet", "edges.csv", "edges.csv.gz", "edges.tsv",
              "edges.tsv.gz", "edges.txt", "edges.txt.gz")


def _read_split(d: Path, n: int, labels: np.ndarray, num_classes: int,
                split: SplitSpec) -> tuple[dict[str, np.ndarray], str]:
    names = ("train", "val", "test")
    idx_files = [d / f"{s}_idx.npy" for s in names]
    mask_files = [d / f"{s}_mask.npy" for s in names]
    if any(f.exists() for f in idx_files):
        out = {}
        for s, f in zip(names, idx_files, strict=True):
            if not f.exists():
                raise GnnflowError(f"{f}: missing (the other split index files exist)")
            arr = load_npy(f)
            if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
                raise GnnflowError(f"{f}: must be a 1-D integer array of vertex ids")
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
                raise GnnflowError(f"{f}: vertex id out of range [0, {n})")
            out[s] = arr.astype(np.int64)
        return out, "index files"
    if any(f.exists() for f in mask_files):
        out = {}
        for s, f in zip(names, mask_files, strict=True):
            if not f.exists():
                raise GnnflowError(f"{f}: missing (the other split mask files exist)")
            mask = load_npy(f)
            if mask.shape != (n,):
                raise GnnflowError(f"{f}: mask has shape {mask.shape}, expected ({n},)")
            out[s] = np.flatnonzero(mask.astype(bool)).astype(np.int64)
        return out, "masks"
    return split.draw(labels, num_classes)


def _read_features(d: Path) -> tuple[Any, Path | None]:
    """``features.npy`` (memory-mapped) or ``features.npz`` (a scipy sparse matrix, kept
    sparse here; ``write_store`` densifies it block by block) or nothing."""
    dense, sparse = d / "features.npy", d / "features.npz"
    if dense.exists() and sparse.exists():
        raise GnnflowError(f"{d}: both features.npy and features.npz; keep one")
    if dense.exists():
        return load_npy(dense, mmap=True), dense
    if not sparse.exists():
        return None, None
    import scipy.sparse as sp

    try:
        mat = sp.load_npz(sparse)  # np.load without pickles inside
    except (ValueError, OSError, EOFError, KeyError) as exc:
        raise GnnflowError(f"{sparse}: cannot read as a scipy sparse matrix .npz "
                           f"(scipy.sparse.save_npz format): {exc}") from None
    return mat.tocsr(), sparse


def read_import_dir(directory: str | os.PathLike[str], *, symmetrize: bool = True,
                    split: SplitSpec | None = None) -> dict[str, Any]:
    """Keyword arguments for ``write_store`` from a bring-your-own-graph directory; ``split``:
    how to draw a split when the directory has no split files (default: random 60/20/20)."""
    d = Path(directory)
    if not d.is_dir():
        raise GnnflowError(f"{d}: no such directory")
    edge_file = next((d / f for f in EDGE_FILES if (d / f).exists()), None)
    if edge_file is None:
        raise GnnflowError(f"{d}: no edge list; expected one of {', '.join(EDGE_FILES)}")
    graph: dict[str, Any] = {}
    if (d / "graph.json").exists():
        try:
            graph = json.loads((d / "graph.json").read_text())
        except json.JSONDecodeError as exc:
            raise GnnflowError(f"{d / 'graph.json'}: not valid JSON ({exc})") from None
    src, dst = load_edge_list(edge_file)
    features, feature_file = _read_features(d)
    labels = load_npy(d / "labels.npy") if (d / "labels.npy").exists() else None
    if "num_nodes" in graph:
        n = int(graph["num_nodes"])
    elif features is not None:
        n = int(features.shape[0])
    elif labels is not None:
        n = int(labels.shape[0])
    else:
        n = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    if features is not None:
        if len(features.shape) != 2 or features.shape[0] != n:
            raise GnnflowError(f"{feature_file}: shape {features.shape} does not match "
                               f"{n} vertices (expected [{n}, D])")
        if not np.issubdtype(features.dtype, np.number):
            raise GnnflowError(f"{feature_file}: must be numeric, got {features.dtype}")
    if labels is None:
        labels = np.full(n, -1, dtype=np.int64)
    else:
        if labels.ndim != 1 or labels.shape[0] != n:
            raise GnnflowError(f"{d / 'labels.npy'}: {labels.shape[0] if labels.ndim else 0} "
                               f"labels for {n} vertices; give exactly one label per vertex "
                               "(-1 = unlabelled)")
        if not np.issubdtype(labels.dtype, np.integer):
            raise GnnflowError(f"{d / 'labels.npy'}: must be integer, got {labels.dtype}")
        labels = labels.astype(np.int64)
        if labels.size and int(labels.min()) < -1:
            raise GnnflowError(f"{d / 'labels.npy'}: labels must be >= -1")
    check_edge_ids(src, dst, n, str(edge_file))
    num_classes = int(graph.get("num_classes") or (int(labels.max()) + 1 if labels.size else 0))
    if labels.size and int(labels.max()) >= num_classes:
        raise GnnflowError(f"{d / 'graph.json'}: num_classes {num_classes} <= largest label "
                           f"{int(labels.max())}")
    splits, split_how = _read_split(d, n, labels, num_classes, split or SplitSpec())
    labels_file = str(d / "labels.npy") if (d / "labels.npy").exists() else \
        f"{d} (no labels.npy: every vertex is unlabelled)"
    # a random split is drawn from the labelled vertices
    train_file = next((str(f) for f in (d / "train_idx.npy", d / "train_mask.npy") if f.exists()),
                      labels_file)
    # One-way when either the caller (--directed) or graph.json asks for it.
    directed = (not symmetrize) or bool(graph.get("directed", False))
    indptr, indices = build_csr(src, dst, n, symmetrize=not directed, what=str(edge_file))
    return {
        "name": str(graph.get("name") or d.name), "source": "import",
        "indptr": indptr, "indices": indices,
        "features": features,  # converted to float32 block by block by write_store
        "labels": labels, "train_idx": splits["train"], "val_idx": splits["val"],
        "test_idx": splits["test"], "num_classes": max(num_classes, 1), "directed": directed,
        "meta": {"import_dir": str(d), "edge_file": edge_file.name, "split": split_how,
                 "feature_file": feature_file.name if feature_file else None,
                 "symmetrized": not directed, "random_features": False},
        "inputs": {"features": str(feature_file), "labels": labels_file,
                   "train_idx": train_file},
    }


def prepare_import(directory: str | os.PathLike[str], out: str | os.PathLike[str], *,
                   symmetrize: bool = True, split: SplitSpec | None = None, overwrite: bool = False,
                   name: str | None = None, normalize_features: str = "none") -> GraphStore:
    """Read a bring-your-own-graph directory and write it as a graph store."""
    data = read_import_dir(directory, symmetrize=symmetrize, split=split)
    if name:
        data["name"] = name
    return write_store(out, overwrite=overwrite, normalize_features=normalize_features, **data)
