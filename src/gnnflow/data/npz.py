"""Attributed graphs in the ``.npz`` layout of Shchur et al. (``gnnflow prepare npz FILE``).

The files behind PyG's ``Amazon`` (computers, photo), ``Coauthor`` (CS, physics) and
``CitationFull`` (cora, cora_ml, citeseer, dblp, pubmed) datasets, from Shchur et al.,
"Pitfalls of Graph Neural Network Evaluation" (2018) and their gnn-benchmark code::

    adj_data, adj_indices, adj_indptr, adj_shape     the adjacency as CSR arrays, rows = sources
                                                     ([N, N]; every stored entry is an edge)
    attr_data, attr_indices, attr_indptr, attr_shape the attributes as CSR arrays ([N, D]), or
    attr_matrix                                      the attributes dense ([N, D])
    labels                                           int [N], one class per vertex (-1: none)
    node_names, attr_names, class_names, idx_to_*    optional; never read (in the published
                                                     files they are pickled object arrays)

Read with ``numpy.load(allow_pickle=False)``, key by key: a key holding a pickled object array
is refused in one line and never unpickled.  Every array's kind, shape and index range is
checked (CSR ``indptr`` from 0, non-decreasing, ending at the entry count; column ids inside
the shape; one label per vertex) before anything is written, and each problem is one line naming
the file and the key.

As PyG's ``read_npz`` does for these datasets (they are undirected), self-loops are dropped
and the graph is stored in both directions, duplicates merged (``--directed`` keeps the rows'
direction).  Edge values are not kept.  PyG also sets every positive attribute to 1;
``--binarize-features`` does the same (the Amazon and Coauthor files hold 0/1 already).
The files carry no split: one is drawn (:mod:`gnnflow.data.splits`; by default Shchur et al.'s
20 training and 30 validation vertices per class, the rest test).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any, Self

import numpy as np

from gnnflow.data.csr import build_csr
from gnnflow.data.splits import SplitSpec
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import GnnflowError

REQUIRED = ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "labels")
SPARSE_ATTRS = ("attr_data", "attr_indices", "attr_indptr", "attr_shape")


class NpzArrays:
    """An opened ``.npz`` archive whose arrays are read one key at a time, checked; ``layout`` says
    what the archive should hold (for the message about a missing key)."""

    def __init__(self, path: str | os.PathLike[str], layout: str) -> None:
        self.path = Path(path)
        self.layout = layout
        if not self.path.exists():
            raise GnnflowError(f"{self.path}: no such file")
        try:
            self._npz = np.load(self.path, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise GnnflowError(f"{self.path}: cannot read as a numpy .npz archive ({exc})") from None
        if not hasattr(self._npz, "files"):
            raise GnnflowError(f"{self.path}: holds a single array, expected a .npz archive: {layout}")
        self.keys = set(self._npz.files)

    def close(self) -> None:
        self._npz.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def raw(self, key: str) -> np.ndarray:
        """Array ``key`` as stored, unchecked (never unpickled)."""
        if key not in self.keys:
            raise GnnflowError(f"{self.path}: no key {key!r}; {self.layout}")
        try:
            return self._npz[key]
        except ValueError as exc:  # numpy refuses object arrays when allow_pickle=False
            if "allow_pickle" in str(exc):
                raise GnnflowError(f"{self.path}: key {key!r} holds a pickled object array; refused (loading it "
                                   "could run code), expected a numeric array") from None
            raise GnnflowError(f"{self.path}: key {key!r} cannot be read ({exc})") from None
        except (OSError, EOFError, zipfile.BadZipFile) as exc:
            raise GnnflowError(f"{self.path}: key {key!r} cannot be read ({exc}); the file is truncated or "
                               "corrupt") from None

    def array(self, key: str, kind: str, ndim: int) -> np.ndarray:
        """Array ``key``: ``kind`` "int" (integer) or "num" (integer, float or bool), ``ndim``
        dimensions; anything else is one line naming the file and the key."""
        arr = self.raw(key)
        ok = np.issubdtype(arr.dtype, np.integer) or (kind == "num" and (
            np.issubdtype(arr.dtype, np.floating) or arr.dtype == np.bool_))
        if not ok:
            raise GnnflowError(f"{self.path}: key {key!r} has dtype {arr.dtype}, expected "
                               f"{'integers' if kind == 'int' else 'numbers'}")
        if arr.ndim != ndim:
            raise GnnflowError(f"{self.path}: key {key!r} has shape {arr.shape}, expected {ndim} dimension(s)")
        return arr

    def csr(self, prefix: str, rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
        """``(data, indices, indptr, shape)`` of the CSR arrays ``<prefix>_*`` (``prefix`` empty: the
        unprefixed ``data``, ``indices``, ``indptr``, ``shape`` of ``scipy.sparse.save_npz``), checked
        (``rows``: the row count they must have)."""
        def key(name: str) -> str:
            return f"{prefix}_{name}" if prefix else name

        shape_arr = self.array(key("shape"), "int", 1)
        if shape_arr.shape != (2,) or int(shape_arr.min()) < 0:
            raise GnnflowError(f"{self.path}: key '{key('shape')}' is {shape_arr.tolist()}, expected two "
                               "non-negative sizes")
        shape = (int(shape_arr[0]), int(shape_arr[1]))
        if rows is not None and shape[0] != rows:
            raise GnnflowError(f"{self.path}: key '{key('shape')}' has {shape[0]} rows for {rows} vertices")
        indptr = self.array(key("indptr"), "int", 1).astype(np.int64)
        indices = self.array(key("indices"), "int", 1)
        data = self.array(key("data"), "num", 1)
        where = f"{self.path}: key '{key('indptr')}'"
        if indptr.shape[0] != shape[0] + 1:
            raise GnnflowError(f"{where} has {indptr.shape[0]} entries for {shape[0]} rows (expected rows + 1)")
        if indptr[0] != 0 or indptr[-1] != indices.shape[0] or (np.diff(indptr) < 0).any():
            raise GnnflowError(f"{where} must rise from 0 to the {indices.shape[0]} entries of "
                               f"'{key('indices')}' without decreasing")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= shape[1]):
            bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
            raise GnnflowError(f"{self.path}: key '{key('indices')}' holds column {bad}, outside [0, {shape[1]})")
        if data.shape[0] != indices.shape[0]:
            raise GnnflowError(f"{self.path}: key '{key('data')}' has {data.shape[0]} values for "
                               f"{indices.shape[0]} entries of '{key('indices')}'")
        return data, indices.astype(np.int64), indptr, shape

    def scipy_csr(self, rows: int | None = None) -> Any:
        """The matrix of a ``scipy.sparse.save_npz`` file in csr format (keys ``format``, ``shape``,
        ``indptr``, ``indices``, ``data``) as a scipy CSR matrix, checked as :meth:`csr` checks."""
        import scipy.sparse as sp

        fmt = self.raw("format")
        name = fmt.item().decode("ascii", "replace") if fmt.dtype.kind == "S" and fmt.ndim == 0 else None
        if name != "csr":
            raise GnnflowError(f"{self.path}: key 'format' is {name or fmt.dtype}; expected a "
                               "scipy.sparse.save_npz file of a csr matrix")
        data, indices, indptr, shape = self.csr("", rows)
        return sp.csr_matrix((data, indices, indptr), shape=shape)


class NpzGraph(NpzArrays):
    """An opened Shchur et al. graph ``.npz`` (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, f"a graph .npz (Shchur et al.) holds {', '.join(REQUIRED)} and "
                               f"{'/'.join(SPARSE_ATTRS)} or attr_matrix")

    def features(self, n: int, binarize: bool) -> Any:
        """The attributes, sparse (a scipy CSR matrix, densified block by block when written) or
        dense, float32; None when the file has none."""
        dense = "attr_matrix" in self.keys
        sparse = any(k in self.keys for k in SPARSE_ATTRS)
        if dense and sparse:
            raise GnnflowError(f"{self.path}: holds both attr_matrix and attr_data/...; keep one")
        if dense:
            x = self.array("attr_matrix", "num", 2)
            if x.shape[0] != n:
                raise GnnflowError(f"{self.path}: key 'attr_matrix' has {x.shape[0]} rows for {n} vertices")
            x = x.astype(np.float32)
            return np.where(x > 0, np.float32(1), x) if binarize else x
        if not sparse:
            return None
        import scipy.sparse as sp

        data, indices, indptr, shape = self.csr("attr", rows=n)
        data = data.astype(np.float32)
        if binarize:  # PyG: x[x > 0] = 1
            data = np.where(data > 0, np.float32(1), data)
        return sp.csr_matrix((data, indices, indptr), shape=shape)


def read_npz_graph(path: str | os.PathLike[str], *, symmetrize: bool = True, binarize_features: bool = False,
                   split: SplitSpec | None = None) -> dict[str, Any]:
    """Keyword arguments for ``write_store`` from a Shchur et al. ``.npz`` file (see the module
    docstring); ``split``: how to draw the split (default: 20/30 per class, seed 0)."""
    split = split or SplitSpec(method="per-class")
    split.check()  # a bad setting fails before the file is read
    f = NpzGraph(path)
    try:
        _, adj_indices, adj_indptr, (n, cols) = f.csr("adj")
        if n != cols:
            raise GnnflowError(f"{f.path}: key 'adj_shape' is [{n}, {cols}]; an adjacency is square")
        labels = f.array("labels", "int", 1).astype(np.int64)
        if labels.shape[0] != n:
            raise GnnflowError(f"{f.path}: key 'labels' has {labels.shape[0]} labels for {n} vertices")
        if labels.size and int(labels.min()) < -1:
            raise GnnflowError(f"{f.path}: key 'labels' holds {int(labels.min())}; labels are classes >= 0 "
                               "(-1: no label)")
        features = f.features(n, binarize_features)
    finally:
        f.close()
    num_classes = int(labels.max(initial=-1)) + 1
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(adj_indptr))  # CSR rows are the sources
    indptr, indices = build_csr(src, adj_indices, n, symmetrize=symmetrize, what=f"{f.path}:adj_indices")
    splits, split_how = split.draw(labels, num_classes)
    return {
        "name": f.path.name.removesuffix(".npz"), "source": "npz", "indptr": indptr, "indices": indices,
        "features": features, "labels": labels, "train_idx": splits["train"], "val_idx": splits["val"],
        "test_idx": splits["test"], "num_classes": max(num_classes, 1), "directed": not symmetrize,
        "meta": {"split": split_how, "random_features": False, "symmetrized": symmetrize,
                 "features_binarized": binarize_features, "raw_file": str(f.path), "seed": split.seed},
        "inputs": {"features": f"{f.path}:attr", "labels": f"{f.path}:labels",
                   "train_idx": f"{f.path} (split {split_how})"},
    }


def prepare_npz(path: str | os.PathLike[str], out: str | os.PathLike[str], *, symmetrize: bool = True,
                binarize_features: bool = False, split: SplitSpec | None = None, overwrite: bool = False,
                name: str | None = None, normalize_features: str = "none") -> GraphStore:
    """Convert a Shchur et al. ``.npz`` graph and write it as a graph store."""
    data = read_npz_graph(path, symmetrize=symmetrize, binarize_features=binarize_features, split=split)
    if name:
        data["name"] = name
    return write_store(out, overwrite=overwrite, normalize_features=normalize_features, **data)
