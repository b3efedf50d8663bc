"""``magnn``: the heterogeneous graphs of MAGNN (Fu et al., WWW 2020) from the files PyG's DBLP and IMDB read.

MAGNN's preprocessed DBLP and IMDB graphs (the ``raw/`` folder of PyG's
``torch_geometric.datasets.DBLP`` and ``IMDB``; docs/hetero.md names a public copy)
are one directory of numpy files::

    node_types.npy          int [N]: each vertex's type index; the types in contiguous
                            ranges 0, 1, ... (global id = type offset + per-type id)
    adjM.npz                scipy.sparse.save_npz of the [N, N] adjacency over the
                            global ids, csr; undirected, each edge stored both ways
    features_<t>.npz        scipy.sparse.save_npz of type t's [N_t, D_t] features, or
    features_<t>.npy        the same dense; a type with neither file has no features
    labels.npy              int [N_0]: the class of every vertex of type 0 (the target)
    train_val_test_idx.npz  train_idx, val_idx, test_idx: type-0 ids, the dataset's split

A dataset names its vertex types in type-index order and its relations
(:data:`DATASETS`; the relation names are ours, PyG calls every relation ``to``).
A relation ``(s, r, d)`` holds the adjacency's edges between types ``s`` and ``d``,
both stored directions merged into one ``s -> d`` edge per pair; homogenization
(:mod:`gnnflow.data.homogenize`) adds the reverse relation ``rev_r``, so messages
flow both ways as in the undirected file.  An edge between two types that no
relation names is an error, as is anything else that does not fit the layout: one
line naming the file.  Every file is read with ``allow_pickle=False``
(:func:`gnnflow.data.safe_load.load_npy`, :class:`gnnflow.data.npz.NpzArrays`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.hetero import EdgeType, HeteroGraph
from gnnflow.data.homogenize import write_hetero_store
from gnnflow.data.npz import NpzArrays
from gnnflow.data.safe_load import load_npy
from gnnflow.data.store import GraphStore
from gnnflow.errors import ConfigError, GnnflowError

SPLIT_FILE = "train_val_test_idx.npz"
SPLIT_KEYS = {"train": "train_idx", "val": "val_idx", "test": "test_idx"}


@dataclass(frozen=True)
class MagnnDataset:
    """A MAGNN graph's schema: vertex type names by type index (type 0 is labelled) and the
    relations ``(source type, name, destination type)`` between them."""

    types: tuple[str, ...]
    relations: tuple[EdgeType, ...]

    def relation_between(self, a: str, b: str) -> tuple[EdgeType, bool] | None:
        """The relation joining types ``a`` and ``b`` and whether it runs ``b -> a``; None if none."""
        for rel in self.relations:
            if (rel[0], rel[2]) == (a, b):
                return rel, False
            if (rel[0], rel[2]) == (b, a):
                return rel, True
        return None


DATASETS: dict[str, MagnnDataset] = {
    # 4057 authors (4 research areas), 14328 papers, 7723 terms, 20 conferences
    "dblp": MagnnDataset(("author", "paper", "term", "conference"),
                         (("author", "writes", "paper"), ("paper", "has_term", "term"),
                          ("paper", "published_in", "conference"))),
    # 4278 movies (3 genres), 2081 directors, 5257 actors
    "imdb": MagnnDataset(("movie", "director", "actor"),
                         (("movie", "directed_by", "director"), ("movie", "has_actor", "actor"))),
}


def _int_array(arr: np.ndarray, path: Path, ndim: int, what: str) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim != ndim:
        raise GnnflowError(f"{path}: holds {arr.dtype} of shape {arr.shape}, expected {what}")
    return arr.astype(np.int64)


def _type_counts(raw: Path, spec: MagnnDataset, name: str) -> np.ndarray:
    """Vertices per type from ``node_types.npy`` (checked: contiguous ranges of known types)."""
    path = raw / "node_types.npy"
    what = f"int [N]: the type index (0..{len(spec.types) - 1}) of every vertex"
    node_types = _int_array(load_npy(path, what), path, 1, what)
    if node_types.size == 0:
        raise GnnflowError(f"{path}: holds no vertex")
    lo, hi = int(node_types.min()), int(node_types.max())
    if lo < 0 or hi >= len(spec.types):
        raise GnnflowError(f"{path}: holds type {lo if lo < 0 else hi}; dataset {name} has types 0..{len(spec.types) - 1} "
                           f"({', '.join(spec.types)})")
    if (np.diff(node_types) < 0).any():
        at = int(np.flatnonzero(np.diff(node_types) < 0)[0]) + 1
        raise GnnflowError(f"{path}: vertex {at} has type {int(node_types[at])} after type {int(node_types[at - 1])}; "
                           "the types must be contiguous ranges in type order")
    return np.bincount(node_types, minlength=len(spec.types))


def _relations(raw: Path, spec: MagnnDataset, name: str, counts: np.ndarray) -> dict[EdgeType, tuple[np.ndarray, np.ndarray]]:
    """Each relation's edges (per-type ids) from ``adjM.npz``: both stored directions merged."""
    path = raw / "adjM.npz"
    offsets = np.concatenate([[0], np.cumsum(counts)])
    n = int(offsets[-1])
    with NpzArrays(path, "scipy.sparse.save_npz of the [N, N] adjacency (csr)") as f:
        adj = f.scipy_csr(rows=n)
    if adj.shape[1] != n:
        raise GnnflowError(f"{path}: the adjacency is {adj.shape[0]} x {adj.shape[1]}; node_types.npy has {n} vertices")
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(adj.indptr))
    dst = adj.indices.astype(np.int64)
    src_t = np.searchsorted(offsets, src, side="right") - 1
    dst_t = np.searchsorted(offsets, dst, side="right") - 1
    parts: dict[EdgeType, list[tuple[np.ndarray, np.ndarray]]] = {rel: [] for rel in spec.relations}
    pair_keys = src_t * len(spec.types) + dst_t
    for key in np.unique(pair_keys):
        a, b = divmod(int(key), len(spec.types))
        sel = pair_keys == key
        found = spec.relation_between(spec.types[a], spec.types[b])
        if found is None or a == b:
            raise GnnflowError(f"{path}: {int(sel.sum())} edges join {spec.types[a]} and {spec.types[b]} vertices, "
                               f"which dataset {name} has no relation for (relations: "
                               f"{', '.join('___'.join(r) for r in spec.relations)})")
        rel, backwards = found
        s, d = src[sel] - offsets[a], dst[sel] - offsets[b]
        parts[rel].append((d, s) if backwards else (s, d))
    edges = {}
    for rel, pieces in parts.items():
        s_all = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
        d_all = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
        n_dst = int(counts[spec.types.index(rel[2])])
        pairs = np.unique(s_all * n_dst + d_all)  # one edge per (source, destination) pair
        edges[rel] = (pairs // n_dst, pairs % n_dst)
    return edges


def _features(raw: Path, spec: MagnnDataset, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Each featured type's features, float32 dense (``features_<t>.npz`` or ``.npy``)."""
    out = {}
    for t, ntype in enumerate(spec.types):
        sparse, dense = raw / f"features_{t}.npz", raw / f"features_{t}.npy"
        if sparse.exists() and dense.exists():
            raise GnnflowError(f"{sparse}: {dense.name} is there too; keep one feature file per type")
        rows = int(counts[t])
        if sparse.exists():
            with NpzArrays(sparse, f"scipy.sparse.save_npz of the {ntype} features (csr)") as f:
                x = f.scipy_csr(rows=rows).astype(np.float32).toarray()
        elif dense.exists():
            what = f"the {ntype} features, [{rows}, dim] numbers"
            x = load_npy(dense, what)
            if x.ndim != 2 or x.shape[0] != rows or not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
                raise GnnflowError(f"{dense}: holds {x.dtype} of shape {x.shape}, expected {what}")
            x = x.astype(np.float32)
        else:
            continue  # a featureless type (DBLP's conferences)
        if not np.isfinite(x).all():
            raise GnnflowError(f"{sparse if sparse.exists() else dense}: holds a value that is not finite")
        out[ntype] = x
    return out


def _labels_and_split(raw: Path, n_target: int, target: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    path = raw / "labels.npy"
    what = f"int [{n_target}]: the class of every {target} (-1: none)"
    labels = _int_array(load_npy(path, what), path, 1, what)
    if labels.shape[0] != n_target:
        raise GnnflowError(f"{path}: {labels.shape[0]} labels for {n_target} {target} vertices")
    if labels.size and int(labels.min()) < -1:
        raise GnnflowError(f"{path}: holds {int(labels.min())}; labels are classes >= 0 (-1: none)")
    path = raw / SPLIT_FILE
    splits = {}
    with NpzArrays(path, f"the split: {', '.join(SPLIT_KEYS.values())}, {target} ids") as f:
        for split, key in SPLIT_KEYS.items():
            ids = f.array(key, "int", 1).astype(np.int64)
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n_target):
                bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
                raise GnnflowError(f"{path}: key {key!r} holds {bad}, outside the {n_target} {target} ids")
            if np.unique(ids).shape[0] != ids.shape[0] or (labels[ids] < 0).any():
                raise GnnflowError(f"{path}: key {key!r} lists a vertex twice or one without a label (-1 in labels.npy)")
            splits[split] = np.sort(ids)
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        both = np.intersect1d(splits[a], splits[b])
        if both.size:
            raise GnnflowError(f"{path}: {SPLIT_KEYS[a]} and {SPLIT_KEYS[b]} both hold {target} {int(both[0])}; "
                               "the splits must be disjoint")
    return labels, splits


def read_magnn(raw_dir: str | os.PathLike[str], dataset: str) -> HeteroGraph:
    """The MAGNN graph ``dataset`` (a key of :data:`DATASETS`) from the files in ``raw_dir``."""
    if dataset not in DATASETS:
        raise ConfigError(f"magnn: unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    spec = DATASETS[dataset]
    raw = Path(raw_dir)
    if not raw.is_dir():
        raise GnnflowError(f"{raw}: no such directory; --raw-dir names the folder of MAGNN's {dataset} files "
                           f"(node_types.npy, adjM.npz, features_<t>.npz|npy, labels.npy, {SPLIT_FILE})")
    counts = _type_counts(raw, spec, dataset)
    edges = _relations(raw, spec, dataset, counts)
    features = _features(raw, spec, counts)
    target = spec.types[0]
    labels, splits = _labels_and_split(raw, int(counts[0]), target)
    return HeteroGraph(
        name=dataset, num_nodes={t: int(c) for t, c in zip(spec.types, counts, strict=True)}, edges=edges,
        features=features, labels={target: labels}, splits={s: {target: ids} for s, ids in splits.items()},
        num_classes=max(int(labels.max(initial=-1)) + 1, 1), target_node_type=target)


def prepare_magnn(dataset: str, out: str | os.PathLike[str], *, raw_dir: str | os.PathLike[str],
                  overwrite: bool = False, name: str | None = None, reverse_edges: bool = True,
                  feature_fill: str = "neighbor-mean", seed: int = 0,
                  normalize_features: str = "none") -> GraphStore:
    """Read MAGNN's ``dataset`` from ``raw_dir``, homogenize it (DistDGLv2 §4.1.1) and write a store;
    ``meta.json`` records the raw files' sha256."""
    from gnnflow.data.store import sha256_files

    hg = read_magnn(raw_dir, dataset)
    if name:
        hg.name = name
    raw = Path(raw_dir)
    features = [raw / f"features_{t}.{ext}" for t in range(len(DATASETS[dataset].types)) for ext in ("npz", "npy")]
    files = [raw / "node_types.npy", raw / "adjM.npz", *(f for f in features if f.exists()), raw / "labels.npy",
             raw / SPLIT_FILE]
    meta: dict[str, Any] = {
        "random_features": False, "raw_dir": str(raw), "magnn_dataset": dataset,
        "split": f"the dataset's own ({SPLIT_FILE})",
        "raw_files": {f.name: digest for f, digest in sha256_files(files).items()},
    }
    return write_hetero_store(hg, out, overwrite=overwrite, reverse_edges=reverse_edges,
                              feature_fill=feature_fill, seed=seed, source="magnn",
                              normalize_features=normalize_features, meta=meta)
