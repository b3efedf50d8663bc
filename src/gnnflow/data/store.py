"""The graph store: the one on-disk graph format every later stage reads.

A store is a directory::

    meta.json          name, source, counts, directedness, feature dims, classes,
                       node/edge type tables, checksums, provenance
    indptr.npy         int64 [N+1]   CSR over destinations
    indices.npy        int64 [M]     indices[indptr[v]:indptr[v+1]] = sources u of edges u -> v
    features.npy       float32 [N, D] (opened memory-mapped)
    labels.npy         int64 [N]     -1 where a vertex has no label
    train_idx.npy      int64         vertex ids
    val_idx.npy        int64
    test_idx.npy       int64
    <optional>.npy     e.g. node_type (int32 [N]), edge_type (int32 [M]), per-type
                       features ``features_<ntype>.npy`` of a heterogeneous graph

Rows of the CSR are destinations and hold in-neighbours, which is what message
passing and neighbour sampling read (DGL samples in-edges the same way).  For an
undirected graph every edge is stored in both directions.

Writing is atomic (temporary directory, then rename).  Opening validates dtypes,
shapes and id ranges and raises :class:`StoreError` naming the file and problem.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.errors import StoreError
from gnnflow.io import atomic_dir, provenance

FORMAT = "gnnflow-graph-store"
VERSION = 1
SPLITS = ("train_idx", "val_idx", "test_idx")
REQUIRED = ("indptr", "indices", "labels", *SPLITS)


@dataclass
class GraphStore:
    """An opened graph store.  Arrays are read-only memory maps unless loaded."""

    path: Path
    meta: dict[str, Any]
    indptr: np.ndarray
    indices: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    features: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.meta["num_edges"])

    @property
    def feature_dim(self) -> int:
        return int(self.meta.get("feature_dim") or 0)

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def is_hetero(self) -> bool:
        return len(self.meta.get("node_types", [])) > 1

    def in_degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def split(self, name: str) -> np.ndarray:
        if name not in ("train", "val", "test"):
            raise KeyError(name)
        return getattr(self, f"{name}_idx")

    @classmethod
    def open(cls, path: str | os.PathLike[str], mmap: bool = True, validate: bool = True) -> GraphStore:
        return open_store(path, mmap=mmap, validate=validate)


def _load(path: Path, name: str, mmap: bool) -> np.ndarray:
    f = path / f"{name}.npy"
    if not f.exists():
        raise StoreError(f"{f}: missing file; the graph store is incomplete (re-run `gnnflow prepare`)")
    try:
        return np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise StoreError(f"{f}: cannot read .npy ({exc}); the file is truncated or corrupt") from None


def open_store(path: str | os.PathLike[str], mmap: bool = True, validate: bool = True) -> GraphStore:
    """Open and (by default) validate a graph store directory."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not path.is_dir():
        raise StoreError(f"{path}: no such graph store directory")
    if not meta_file.exists():
        raise StoreError(f"{meta_file}: missing; {path} is not a gnnflow graph store")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as exc:
        raise StoreError(f"{meta_file}: not valid JSON ({exc})") from None
    if meta.get("format") != FORMAT:
        raise StoreError(f"{meta_file}: format is {meta.get('format')!r}, expected {FORMAT!r}")
    arrays = {name: _load(path, name, mmap) for name in REQUIRED}
    features = _load(path, "features", mmap=True) if (path / "features.npy").exists() else None
    extra = {
        f.stem: _load(path, f.stem, mmap)
        for f in sorted(path.glob("*.npy"))
        if f.stem not in REQUIRED and f.stem != "features"
    }
    store = GraphStore(path=path, meta=meta, features=features, extra=extra, **arrays)
    if validate:
        validate_store(store)
    return store


def _check(cond: bool, file: Path, problem: str) -> None:
    if not cond:
        raise StoreError(f"{file}: {problem}")


def validate_store(s: GraphStore) -> None:
    """Check dtypes, shapes and id ranges; raise StoreError naming the file."""
    p = s.path
    for key in ("name", "num_nodes", "num_edges", "num_classes"):
        _check(key in s.meta, p / "meta.json", f"missing key {key!r}")
    n, m = s.num_nodes, s.num_edges
    f = p / "indptr.npy"
    _check(s.indptr.dtype == np.int64 and s.indptr.ndim == 1, f, f"must be 1-D int64, got {s.indptr.dtype} {s.indptr.shape}")
    _check(s.indptr.shape[0] == n + 1, f, f"has {s.indptr.shape[0]} entries, expected num_nodes+1 = {n + 1}")
    _check(int(s.indptr[0]) == 0 and int(s.indptr[-1]) == m, f, f"must start at 0 and end at num_edges = {m}")
    if n > 0:
        _check(bool(np.all(np.diff(s.indptr) >= 0)), f, "is not non-decreasing")
    f = p / "indices.npy"
    _check(s.indices.dtype == np.int64 and s.indices.shape == (m,), f, f"must be int64 [{m}], got {s.indices.dtype} {s.indices.shape}")
    if m > 0:
        lo, hi = int(s.indices.min()), int(s.indices.max())
        _check(lo >= 0 and hi < n, f, f"neighbour id out of range [0, {n}): min {lo}, max {hi}")
    f = p / "labels.npy"
    _check(s.labels.shape == (n,), f, f"has {s.labels.shape[0] if s.labels.ndim else 0} labels for {n} nodes")
    _check(np.issubdtype(s.labels.dtype, np.integer), f, f"must be integer, got {s.labels.dtype}")
    if n > 0:
        _check(int(s.labels.max()) < s.num_classes, f, f"label {int(s.labels.max())} >= num_classes {s.num_classes}")
        _check(int(s.labels.min()) >= -1, f, "labels must be >= -1 (-1 = unlabelled)")
    for split in SPLITS:
        arr = getattr(s, split)
        f = p / f"{split}.npy"
        _check(arr.ndim == 1 and np.issubdtype(arr.dtype, np.integer), f, "must be a 1-D integer array")
        if arr.size:
            _check(int(arr.min()) >= 0 and int(arr.max()) < n, f, f"vertex id out of range [0, {n})")
    if s.features is not None:
        f = p / "features.npy"
        _check(s.features.dtype == np.float32 and s.features.ndim == 2, f, f"must be 2-D float32, got {s.features.dtype} {s.features.shape}")
        _check(s.features.shape[0] == n, f, f"has {s.features.shape[0]} rows for {n} nodes")
        _check(s.features.shape[1] == s.feature_dim, f, f"has dim {s.features.shape[1]}, meta says {s.feature_dim}")
    if "node_type" in s.extra:
        f = p / "node_type.npy"
        _check(s.extra["node_type"].shape == (n,), f, f"must have {n} entries")
    if "edge_type" in s.extra:
        f = p / "edge_type.npy"
        _check(s.extra["edge_type"].shape == (m,), f, f"must have {m} entries")


def sha256_file(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def write_store(
    out: str | os.PathLike[str],
    *,
    name: str,
    source: str,
    indptr: np.ndarray,
    indices: np.ndarray,
    labels: np.ndarray,
    train_idx: np.ndarray,
    val_idx: np.ndarray,
    test_idx: np.ndarray,
    num_classes: int,
    directed: bool,
    features: np.ndarray | str | os.PathLike[str] | None = None,
    extra_arrays: dict[str, np.ndarray] | None = None,
    meta: dict[str, Any] | None = None,
    overwrite: bool = False,
    checksums: bool = True,
) -> GraphStore:
    """Write a validated graph store atomically and return it opened.

    ``features`` is an array, or the path of an existing float32 ``.npy`` file
    that is moved into the store (so a huge matrix written in chunks elsewhere
    never has to be held in memory).
    """
    with atomic_dir(out, overwrite=overwrite) as tmp:
        np.save(tmp / "indptr.npy", np.ascontiguousarray(indptr, dtype=np.int64))
        np.save(tmp / "indices.npy", np.ascontiguousarray(indices, dtype=np.int64))
        np.save(tmp / "labels.npy", np.ascontiguousarray(labels, dtype=np.int64))
        for split, arr in zip(SPLITS, (train_idx, val_idx, test_idx), strict=True):
            np.save(tmp / f"{split}.npy", np.ascontiguousarray(arr, dtype=np.int64))
        feature_dim = 0
        if isinstance(features, (str, os.PathLike)):
            shutil.move(os.fspath(features), tmp / "features.npy")
            feature_dim = int(np.load(tmp / "features.npy", mmap_mode="r").shape[1])
        elif features is not None:
            np.save(tmp / "features.npy", np.ascontiguousarray(features, dtype=np.float32))
            feature_dim = int(features.shape[1])
        for key, arr in (extra_arrays or {}).items():
            np.save(tmp / f"{key}.npy", np.ascontiguousarray(arr))
        full_meta: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "name": name,
            "source": source,
            "num_nodes": int(len(indptr) - 1),
            "num_edges": int(len(indices)),
            "directed": bool(directed),
            "feature_dim": feature_dim,
            "num_classes": int(num_classes),
            "num_train": int(len(train_idx)),
            "num_val": int(len(val_idx)),
            "num_test": int(len(test_idx)),
            "node_types": ["_N"],
            "edge_types": [["_N", "_E", "_N"]],
        }
        full_meta.update(meta or {})
        full_meta["provenance"] = provenance(full_meta.pop("provenance", None))
        if checksums:
            full_meta["checksums"] = {f.name: sha256_file(f) for f in sorted(tmp.glob("*.npy"))}
        (tmp / "meta.json").write_text(json.dumps(full_meta, indent=2, sort_keys=True) + "\n")
        open_store(tmp, validate=True)  # validate before the rename
    return open_store(out, validate=False)


def verify_checksums(store: GraphStore) -> list[str]:
    """Return the names of files whose sha256 differs from meta.json."""
    bad = []
    for fname, digest in store.meta.get("checksums", {}).items():
        f = store.path / fname
        if not f.exists() or sha256_file(f) != digest:
            bad.append(fname)
    return bad
