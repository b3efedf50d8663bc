"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the original ``ind.<name>.*`` files.

The files are those of Yang et al. (Planetoid, 2016) as used by Kipf & Welling
(GCN, 2017) and PyG's ``Planetoid``::

    ind.<name>.x, .y        features / one-hot labels of the labelled training vertices
    ind.<name>.allx, .ally  features / labels of all vertices that are not test vertices
    ind.<name>.tx, .ty      features / labels of the test vertices
    ind.<name>.graph        dict {vertex: [neighbours]} (pickled)
    ind.<name>.test.index   test vertex ids, one per line

Vertices are ``allx`` rows followed by test vertices in sorted-id order, and the
*public split* is: train = ``range(len(y))``, val = ``range(len(y), len(y)+500)``,
test = ``test.index``.  As in PyG, CiteSeer's test ids have gaps (isolated
vertices without features); those rows get zero features.  Unlike PyG, which
gives them class 0 from an all-zero one-hot row, their label is -1 (no label),
so they never count as correct or wrong.  Self-loops and duplicate edges are
dropped and the graph is stored in both directions, as in PyG.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.csr import build_csr
from gnnflow.data.safe_load import planetoid_globals, restricted_unpickle
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import ConfigError, GnnflowError

NAMES = {"cora": "cora", "citeseer": "citeseer", "pubmed": "pubmed"}
PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")


def _unpickle(path: Path) -> Any:
    if not path.exists():
        raise GnnflowError(f"{path}: no such file; place the Planetoid files "
                           "ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index} in --raw-dir")
    # Python 2 pickles (latin-1 strings); only array, sparse-matrix and dict globals resolve.
    return restricted_unpickle(path, planetoid_globals(), what="a Planetoid file")


def _dense(a: Any, path: Path) -> np.ndarray:
    if hasattr(a, "toarray"):
        a = a.toarray()
    a = np.asarray(a)
    if a.dtype.hasobject:
        raise GnnflowError(f"{path}: holds Python objects, expected a numeric matrix")
    if a.ndim != 2:
        raise GnnflowError(f"{path}: expected a 2-D matrix, got shape {a.shape}")
    return a


def read_planetoid(raw_dir: str | os.PathLike[str], name: str) -> dict[str, Any]:
    """Keyword arguments for ``write_store`` from the ``ind.<name>.*`` files in ``raw_dir``."""
    key = name.lower()
    if key not in NAMES:
        raise ConfigError(f"unknown Planetoid dataset {name!r}; use one of {', '.join(NAMES)}")
    raw_dir = Path(raw_dir)
    prefix = NAMES[key]
    files = {p: raw_dir / f"ind.{prefix}.{p}" for p in PARTS}
    objs = {p: _unpickle(f) for p, f in files.items()}
    x, y, tx, ty, allx, ally = (_dense(objs[p], files[p]) for p in PARTS[:6])
    graph = objs["graph"]
    if not isinstance(graph, dict):
        raise GnnflowError(f"{files['graph']}: expected a dict of adjacency lists")
    tfile = raw_dir / f"ind.{prefix}.test.index"
    if not tfile.exists():
        raise GnnflowError(f"{tfile}: no such file")
    try:
        test_index = np.array([int(s) for s in tfile.read_text().split()], dtype=np.int64)
    except ValueError as exc:
        raise GnnflowError(f"{tfile}: expected one integer per line ({exc})") from None
    if test_index.shape[0] != tx.shape[0]:
        raise GnnflowError(f"{tfile}: {test_index.shape[0]} test ids but "
                           f"{files['tx']} has {tx.shape[0]} rows")
    if ty.shape[0] != tx.shape[0] or ally.shape[0] != allx.shape[0] or y.shape[0] != x.shape[0]:
        raise GnnflowError(f"{raw_dir}: feature and label row counts differ "
                           f"(x {x.shape[0]}/y {y.shape[0]}, allx {allx.shape[0]}/ally "
                           f"{ally.shape[0]}, tx {tx.shape[0]}/ty {ty.shape[0]})")
    sorted_test = np.sort(test_index)
    lo = int(sorted_test[0]) if sorted_test.size else allx.shape[0]
    if key == "citeseer" and sorted_test.size:
        # Isolated test vertices have no rows in tx/ty: pad the range with zeros.
        span = int(sorted_test[-1]) - lo + 1
        tx_ext = np.zeros((span, tx.shape[1]), dtype=tx.dtype)
        ty_ext = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
        tx_ext[sorted_test - lo] = tx
        ty_ext[sorted_test - lo] = ty
        tx, ty = tx_ext, ty_ext
    features = np.concatenate([allx, tx]).astype(np.float32)
    onehot = np.concatenate([ally, ty])
    n = features.shape[0]
    if test_index.size and int(test_index.max()) >= n:
        raise GnnflowError(f"{tfile}: test id {int(test_index.max())} >= {n} vertices")
    # Test rows are stored in sorted-id order; put each at its own id.
    features[test_index] = features[sorted_test]
    onehot[test_index] = onehot[sorted_test]
    labels = np.where(onehot.sum(axis=1) > 0, onehot.argmax(axis=1), -1).astype(np.int64)
    src = np.fromiter((int(k) for k, vs in graph.items() for _ in vs), dtype=np.int64)
    dst = np.fromiter((int(v) for vs in graph.values() for v in vs), dtype=np.int64)
    indptr, indices = build_csr(src, dst, n, symmetrize=True, what=str(files["graph"]))
    n_train = y.shape[0]
    return {
        "name": key, "source": "planetoid", "indptr": indptr, "indices": indices,
        "features": features, "labels": labels,
        "train_idx": np.arange(n_train, dtype=np.int64),
        "val_idx": np.arange(n_train, min(n, n_train + 500), dtype=np.int64),
        "test_idx": sorted_test,
        "num_classes": int(onehot.shape[1]), "directed": False,
        "meta": {"split": "public (Kipf & Welling 2017)", "random_features": False,
                 "symmetrized": True, "raw_dir": str(raw_dir)},
        "inputs": {"features": f"{files['allx']} / {files['tx']}",
                   "labels": f"{files['ally']} / {files['ty']}", "train_idx": str(files["y"])},
    }


def prepare_planetoid(dataset: str, out: str | os.PathLike[str], *,
                      raw_dir: str | os.PathLike[str], overwrite: bool = False,
                      name: str | None = None, normalize_features: str = "none") -> GraphStore:
    """Convert Cora/CiteSeer/PubMed from ``raw_dir`` and write a graph store."""
    data = read_planetoid(raw_dir, dataset)
    if name:
        data["name"] = name
    return write_store(out, overwrite=overwrite, normalize_features=normalize_features, **data)
