"""The graph store: the one on-disk graph format every later stage reads.

A store is a directory::

    meta.json          name, source, counts, directedness, feature dims, classes,
                       node/edge type tables, checksums, provenance
                       (:class:`gnnflow.data.meta.StoreMeta`, typed and versioned)
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

Writing is atomic (temporary directory, then rename) and validated: the whole
store is scanned once (id ranges, monotone ``indptr``, labels, finite features,
a non-empty labelled training split) and its checksums, fingerprint and the
invariants found are recorded in ``meta.json``.  Opening checks headers, shapes,
file sizes and the checksums of small files only, in time independent of the
edge count; :func:`gnnflow.data.check.check_store` (``gnnflow check``) repeats the full scan.
Problems raise :class:`StoreError` naming the file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.meta import StoreMeta, read_store_meta, store_fingerprint, write_store_meta
from gnnflow.errors import ConfigError, GnnflowError, StoreError
from gnnflow.io import atomic_dir, provenance

SPLITS = ("train_idx", "val_idx", "test_idx")
REQUIRED = ("indptr", "indices", "labels", *SPLITS)


@dataclass
class GraphStore:
    """An opened graph store.  Arrays are read-only memory maps unless loaded."""

    path: Path
    meta: StoreMeta
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
        return self.meta.num_nodes

    @property
    def num_edges(self) -> int:
        return self.meta.num_edges

    @property
    def feature_dim(self) -> int:
        return self.meta.feature_dim or 0

    @property
    def num_classes(self) -> int:
        return self.meta.num_classes

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def is_hetero(self) -> bool:
        return len(self.meta.node_types or []) > 1

    def in_degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def check_labels(self) -> None:
        """The train/val/test vertices have labels in ``[0, num_classes)`` (a StoreError naming the
        first that has not): what training checks before its first step."""
        splits = {s: np.asarray(getattr(self, f"{s}_idx")) for s in ("train", "val", "test")}
        check_split_labels(self.labels, splits, self.num_classes, splits, str(self.path / "labels.npy"))

    def split(self, name: str) -> np.ndarray:
        if name not in ("train", "val", "test"):
            raise KeyError(name)
        return getattr(self, f"{name}_idx")

    @classmethod
    def open(cls, path: str | os.PathLike[str], mmap: bool = True, validate: bool = True) -> GraphStore:
        return open_store(path, mmap=mmap, validate=validate)


def npy_header(f: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` of a ``.npy`` file, from its header alone."""
    with open(f, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        else:
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        return tuple(int(d) for d in shape), np.dtype(dtype), fh.tell()


def check_npy(f: Path, what: str = "graph store", rerun: str = "gnnflow prepare") -> None:
    """A ``.npy`` file is there, its header readable and its size what the header says (nothing
    but the header is read); else one StoreError naming the file and the bytes."""
    if not f.exists():
        raise StoreError(f"{f}: missing file; the {what} is incomplete (re-run `{rerun}`)")
    try:
        shape, dtype, offset = npy_header(f)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise StoreError(f"{f}: cannot read .npy ({exc}); the file is truncated or corrupt "
                         f"(re-run `{rerun}`)") from None
    expect = offset + dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    size = f.stat().st_size
    if size != expect:
        raise StoreError(f"{f}: {size} bytes but its header ({dtype} {list(shape)}) needs "
                         f"{expect}; the file is truncated or corrupt (re-run `{rerun}`)")


def _load(path: Path, name: str, mmap: bool, what: str = "graph store",
          rerun: str = "gnnflow prepare") -> np.ndarray:
    """One array of a store or book: the header and the file size are checked before
    the data is mapped or read, so a truncated file is one clear error."""
    f = path / f"{name}.npy"
    check_npy(f, what, rerun)
    try:
        return np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise StoreError(f"{f}: cannot read .npy ({exc}); the file is truncated or corrupt "
                         f"(re-run `{rerun}`)") from None


def load_split(path: str | os.PathLike[str], name: str) -> np.ndarray:
    """One split's vertex ids (``train_idx``, ``val_idx``, ``test_idx``) read alone: a staged
    copy of a store (``gnnflow stage``) holds its meta.json and these files only."""
    if name not in SPLITS:
        raise ValueError(f"not a split: {name!r}")
    return _load(Path(path), name, mmap=True)


def open_store(path: str | os.PathLike[str], mmap: bool = True, validate: bool = True) -> GraphStore:
    """Open a graph store; with ``validate`` run the cheap checks of :func:`validate_store`
    (headers, shapes, sizes, checksums of small files; no scan of the big arrays)."""
    path = Path(path)
    meta = read_store_meta(path)
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


#: Recorded checksums of files up to this size are recomputed on every open; bigger
#: files (indices, features, indptr of large graphs) by ``gnnflow check`` only.
SMALL_FILE = 1 << 20

def validate_store(s: GraphStore, checksums: bool = True) -> None:
    """The checks every open runs, in time independent of the graph's size except for
    small files: meta keys, dtypes and shapes of every array (file sizes were checked
    against the headers on load), the CSR's ends, split sizes, checksums of files up to
    :data:`SMALL_FILE` and the fingerprint.  Raise StoreError naming the file.

    The scans of the big arrays (id ranges, monotone ``indptr``, labels, finite features,
    every checksum) ran when the store was written; :func:`gnnflow.data.check.check_store` repeats them.
    """
    p = s.path  # the meta's keys and their types were checked as it was read
    n, m = s.num_nodes, s.num_edges
    f = p / "indptr.npy"
    _check(s.indptr.dtype == np.int64 and s.indptr.ndim == 1, f, f"must be 1-D int64, got {s.indptr.dtype} {s.indptr.shape}")
    _check(s.indptr.shape[0] == n + 1, f, f"has {s.indptr.shape[0]} entries, expected num_nodes+1 = {n + 1}")
    _check(int(s.indptr[0]) == 0 and int(s.indptr[-1]) == m, f, f"must start at 0 and end at num_edges = {m}")
    f = p / "indices.npy"
    _check(s.indices.dtype == np.int64 and s.indices.shape == (m,), f, f"must be int64 [{m}], got {s.indices.dtype} {s.indices.shape}")
    f = p / "labels.npy"
    _check(s.labels.shape == (n,), f, f"has {s.labels.shape[0] if s.labels.ndim else 0} labels for {n} nodes")
    _check(np.issubdtype(s.labels.dtype, np.integer), f, f"must be integer, got {s.labels.dtype}")
    for split in SPLITS:
        arr = getattr(s, split)
        f = p / f"{split}.npy"
        _check(arr.ndim == 1 and np.issubdtype(arr.dtype, np.integer), f, "must be a 1-D integer array")
        key = f"num_{split.removesuffix('_idx')}"
        count = getattr(s.meta, key)
        if count is not None:
            _check(arr.shape[0] == count, f, f"has {arr.shape[0]} ids, meta.json says {key} {count}")
    if s.features is not None:
        f = p / "features.npy"
        _check(s.features.dtype == np.float32 and s.features.ndim == 2, f, f"must be 2-D float32, got {s.features.dtype} {s.features.shape}")
        _check(s.features.shape[0] == n, f, f"has {s.features.shape[0]} rows for {n} nodes")
        _check(s.features.shape[1] == s.feature_dim, f, f"has dim {s.features.shape[1]}, meta says {s.feature_dim}")
    if "node_type" in s.extra:
        _check(s.extra["node_type"].shape == (n,), p / "node_type.npy", f"must have {n} entries")
    if "edge_type" in s.extra:
        _check(s.extra["edge_type"].shape == (m,), p / "edge_type.npy", f"must have {m} entries")
    if not checksums:
        return
    bad = checksum_problems(p, s.meta.checksums or {}, max_size=SMALL_FILE)
    if bad:
        raise StoreError(bad[0])
    if s.meta.fingerprint is not None:
        _check(store_fingerprint(s.meta) == s.meta.fingerprint, p / "meta.json",
               "fingerprint does not match the counts and checksums it records; meta.json was edited")


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _range_scan(blocks: Any, low: int, high: int) -> tuple[int, int, tuple[int, int] | None, int]:
    """Over ``(start, block)`` pairs of an integer array: ``(min, max, (position, value) of
    the first entry outside [low, high) or None, number of entries >= 0)``."""
    lo, hi, nonneg = high, low - 1, 0
    for start, blk in blocks:
        blk = np.asarray(blk)
        out = (blk < low) | (blk >= high)
        if out.any():
            i = _first_bad(out)
            return lo, hi, (start + i, int(blk[i])), nonneg
        if blk.size:
            lo, hi = min(lo, int(blk.min())), max(hi, int(blk.max()))
            nonneg += int(np.count_nonzero(blk >= 0))
    return lo, hi, None, nonneg


def scan_store(s: GraphStore, *, checksums: bool = True, features: bool = True,
               show_progress: bool = True) -> tuple[list[str], dict[str, Any]]:
    """The full scan: ``(problems, facts)``.  Each problem is one line naming the file;
    ``facts`` are the invariants found (id and label ranges), recorded in meta.json at
    write time.  Memory: one block of each array at a time (:func:`gnnflow.io.row_chunks`).
    """
    from gnnflow.io import row_chunks

    def chunks(arr: np.ndarray, name: str):  # type: ignore[no-untyped-def]
        return row_chunks(arr, desc=f"checking {name}" if show_progress else None)

    p, n, m, c = s.path, s.num_nodes, s.num_edges, s.num_classes
    problems: list[str] = []
    facts: dict[str, Any] = {}
    prev = 0
    for start, blk in chunks(s.indptr, "indptr.npy"):
        blk = np.asarray(blk)
        steps = np.diff(blk, prepend=prev)
        if (steps < 0).any():
            problems.append(f"{p / 'indptr.npy'}: decreases at entry {start + _first_bad(steps < 0)}; "
                            "the CSR is corrupt (re-run `gnnflow prepare`)")
            break
        prev = int(blk[-1])
    lo, hi, bad, _ = _range_scan(chunks(s.indices, "indices.npy"), 0, n)
    if bad:
        problems.append(f"{p / 'indices.npy'}: entry {bad[0]} is vertex id {bad[1]}, out of range "
                        f"[0, {n}); the CSR is corrupt (re-run `gnnflow prepare`)")
    facts["indices_range"] = [lo, hi] if m else None
    lo, hi, bad, labelled = _range_scan(chunks(s.labels, "labels.npy"), -1, c)
    if bad:
        problems.append(f"{p / 'labels.npy'}: vertex {bad[0]} has label {bad[1]}, outside "
                        f"[-1, {c}) (num_classes {c}, -1 = unlabelled)")
    facts["labels_range"] = [lo, hi] if n else None
    facts["num_labelled"] = labelled
    for split in SPLITS:
        arr = np.asarray(getattr(s, split))
        f = p / f"{split}.npy"
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
            problems.append(f"{f}: vertex id out of range [0, {n})")
    problems += split_problems(n, np.asarray(s.labels), np.asarray(s.train_idx), c,
                               {"train_idx": str(p / "train_idx.npy"),
                                "labels": str(p / "labels.npy")})
    if features and s.features is not None:
        try:
            check_finite_blocks(chunks(s.features, "features.npy"), str(p / "features.npy"))
        except GnnflowError as exc:
            problems.append(str(exc))
    if checksums:
        sums = s.meta.checksums or {}
        problems += checksum_problems(p, sums, show_progress=show_progress)
        if not sums:
            problems.append(f"{p / 'meta.json'}: records no checksums (store written without them)")
        elif s.meta.fingerprint is not None and store_fingerprint(s.meta) != s.meta.fingerprint:
            problems.append(f"{p / 'meta.json'}: fingerprint does not match its counts and checksums")
    return problems, facts


def checksum_problems(root: Path, sums: dict[str, str], *, max_size: int | None = None,
                      prefix: str = "", rerun: str = "gnnflow prepare",
                      show_progress: bool = False) -> list[str]:
    """Recompute the recorded sha256 of files under ``root`` (those whose relative name
    starts with ``prefix``; with ``max_size`` only files up to that size) and return one
    line per missing or changed file."""
    items = sorted((k, v) for k, v in sums.items() if k.startswith(prefix))
    present = [(root / k, v) for k, v in items if (root / k).exists()]
    if max_size is not None:
        present = [(f, v) for f, v in present if f.stat().st_size <= max_size]
    digests = sha256_files([f for f, _ in present], show_progress=show_progress)
    problems = []
    for fname, digest in items:
        f = root / fname
        if not f.exists():
            problems.append(f"{f}: missing file listed in meta.json checksums (re-run `{rerun}`)")
        elif f in digests and digests[f] != digest:
            problems.append(f"{f}: checksum differs from meta.json; the file was modified or "
                            f"damaged (re-run `{rerun}`)")
    return problems


def sha256_files(files: list[Path], chunk: int = 1 << 24,
                 show_progress: bool = False) -> dict[Path, str]:
    """sha256 of each file, read ``chunk`` bytes at a time (a progress bar over bytes)."""
    from gnnflow.io import progress

    pieces = [(f, off) for f in files for off in range(0, max(1, f.stat().st_size), chunk)]
    hashes = {f: hashlib.sha256() for f in files}
    current: tuple[Path, Any] | None = None  # pieces come file by file: one open at a time
    try:
        for f, _off in (progress(pieces, desc="checksums") if show_progress else pieces):
            if current is None or current[0] != f:
                if current is not None:
                    current[1].close()
                current = (f, open(f, "rb"))  # noqa: SIM115  (closed here or below)
            hashes[f].update(current[1].read(chunk))
    finally:
        if current is not None:
            current[1].close()
    return {f: h.hexdigest() for f, h in hashes.items()}


def sha256_file(path: Path) -> str:
    return sha256_files([path])[path]


def split_problems(n: int, labels: np.ndarray, train_idx: np.ndarray, num_classes: int,
                   names: dict[str, str]) -> list[str]:
    """A store must have training vertices, each with a label in [0, num_classes)."""
    train_idx = np.asarray(train_idx)
    if train_idx.size == 0:
        return [f"{names.get('train_idx', 'train_idx')}: the training split is empty; give "
                "training vertices (a train split, or labels from which one is drawn)"]
    if int(train_idx.min()) < 0 or int(train_idx.max()) >= n:
        return []  # reported as an id range problem
    y = labels[train_idx]
    bad = (y < 0) | (y >= num_classes)
    if bad.any():
        i = _first_bad(bad)
        what = "no label (-1)" if int(y[i]) == -1 else f"label {int(y[i])}, outside [0, {num_classes})"
        return [f"{names.get('labels', 'labels')}: training vertex {int(train_idx[i])} has {what} "
                f"({int(bad.sum())} of {train_idx.size} training vertices); every training vertex "
                "needs a class label: fix the labels or leave those vertices out of the train split"]
    return []


def check_split_labels(labels: np.ndarray, splits: dict[str, np.ndarray], num_classes: int, ids: dict[str, np.ndarray],
                       where: str) -> None:
    """Every vertex of the train/val/test splits has a label in ``[0, num_classes)``: one StoreError
    naming the first that has not (its split, id and label) and ``where`` the labels are.
    ``splits``: positions into ``labels``; ``ids``: the vertices' ids, for the message."""
    for name, pos in splits.items():
        y = np.asarray(labels)[np.asarray(pos, dtype=np.int64)]
        bad = (y < 0) | (y >= num_classes)
        if bad.any():
            i = _first_bad(bad)
            raise StoreError(f"{where}: {name} vertex {int(ids[name][i])} has label {int(y[i])}, outside "
                             f"[0, {num_classes}) (num_classes {num_classes}); {int(bad.sum())} of {y.size} "
                             f"{name} vertices are like it: fix the labels, or leave those vertices out of the "
                             "split (gnnflow check finds them too)")


def check_finite_blocks(blocks: Any, what: str) -> None:
    """Raise GnnflowError at the first NaN/Inf in ``(start, block)`` pairs of feature rows."""
    for start, blk in blocks:
        ok = np.isfinite(blk)
        if not ok.all():
            r, col = (int(v[0]) for v in np.nonzero(~ok))
            raise GnnflowError(f"{what}: row {start + r}, column {col} is {blk[r, col]}; "
                               "features must be finite: replace missing or overflowing values "
                               "(e.g. by 0 or the column mean) before `gnnflow prepare`")


NORMALIZATIONS = ("none", "row")
#: Features are converted, checked and normalized this many bytes of rows at a time.
FEATURE_BLOCK_BYTES = 64 << 20


def _write_features(dst: Path, features: Any, normalize: str, what: str) -> int:
    """Write ``features`` (an array, a scipy sparse matrix, or the path of a float32 ``.npy``
    that is consumed) as dense float32 ``dst`` block by block: checked finite, optionally
    row-normalized.  Returns the feature dim."""
    from gnnflow.io import row_chunks

    if normalize not in NORMALIZATIONS:
        raise ConfigError(f"--normalize-features must be one of {', '.join(NORMALIZATIONS)}, got {normalize!r}")
    src_path = Path(features) if isinstance(features, (str, os.PathLike)) else None
    if src_path is not None and normalize == "none":
        shutil.move(os.fspath(src_path), dst)  # a rename: no copy of a huge matrix
        arr = np.load(dst, mmap_mode="r")
        if arr.dtype != np.float32 or arr.ndim != 2:
            raise StoreError(f"{src_path}: features must be 2-D float32, got {arr.dtype} {arr.shape}")
        check_finite_blocks(row_chunks(arr, FEATURE_BLOCK_BYTES), what)
        return int(arr.shape[1])
    src = np.load(src_path, mmap_mode="r") if src_path is not None else features
    if len(src.shape) != 2:
        raise GnnflowError(f"{what}: features must be a 2-D matrix [N, D], got shape {src.shape}")
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
              "shape": (int(src.shape[0]), int(src.shape[1]))}
    with open(dst, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        for start, blk in row_chunks(src, FEATURE_BLOCK_BYTES):
            # a dense float32 copy (normalized in place); a sparse block is densified here
            blk = blk.toarray().astype(np.float32) if hasattr(blk, "toarray") else \
                np.array(blk, dtype=np.float32)
            check_finite_blocks([(start, blk)], what)
            if normalize == "row":
                row_normalize_(blk, start, what)
            fh.write(np.ascontiguousarray(blk).data)
    if src_path is not None:
        del src
        src_path.unlink()
    return int(header["shape"][1])


def row_normalize_(blk: np.ndarray, start: int, what: str) -> None:
    """Divide each row by its sum in place; all-zero rows stay zero (Kipf & Welling's
    ``preprocess_features``, PyG's ``NormalizeFeatures`` on non-negative features)."""
    neg = blk < 0
    if neg.any():
        r = int(np.nonzero(neg)[0][0])
        raise ConfigError(f"{what}: row {start + r} has a negative value; --normalize-features row "
                          "divides each row by its sum, which needs non-negative features "
                          "(counts, bag-of-words); use --normalize-features none")
    sums = blk.sum(axis=1, dtype=np.float64)[:, None]
    np.divide(blk, sums, out=blk, where=sums > 0, casting="same_kind")


ArrayOrFile = np.ndarray | str | os.PathLike[str]


def _length(arr: ArrayOrFile) -> int:
    if isinstance(arr, (str, os.PathLike)):
        return npy_header(Path(arr))[0][0]
    return int(len(arr))


def _put(dst: Path, arr: ArrayOrFile, dtype: Any = None) -> None:
    """Save ``arr`` as ``dst``, or move the ``.npy`` file it names there (a rename)."""
    if isinstance(arr, (str, os.PathLike)):
        shape, file_dtype, _ = npy_header(Path(arr))
        if dtype is not None and file_dtype != np.dtype(dtype):
            raise StoreError(f"{arr}: expected {np.dtype(dtype)}, got {file_dtype}")
        shutil.move(os.fspath(arr), dst)
    else:
        np.save(dst, np.ascontiguousarray(arr, dtype=dtype))


def write_store(
    out: str | os.PathLike[str],
    *,
    name: str,
    source: str,
    indptr: ArrayOrFile,
    indices: ArrayOrFile,
    labels: np.ndarray,
    train_idx: np.ndarray,
    val_idx: np.ndarray,
    test_idx: np.ndarray,
    num_classes: int,
    directed: bool,
    features: np.ndarray | str | os.PathLike[str] | None = None,
    extra_arrays: dict[str, ArrayOrFile] | None = None,
    meta: dict[str, Any] | None = None,
    overwrite: bool = False,
    checksums: bool = True,
    normalize_features: str = "none",
    inputs: dict[str, str] | None = None,
) -> GraphStore:
    """Write a graph store atomically, validated, and return it opened.

    ``features``, ``indptr``, ``indices`` and the extra arrays may each be an
    array or the path of an existing ``.npy`` file that is moved into the store
    (so huge arrays written in chunks elsewhere, e.g. by
    :class:`gnnflow.data.external_csr.ExternalCSRBuilder`, never have to be held
    in memory).  ``normalize_features="row"`` divides each
    feature row by its sum.  ``inputs`` names the user file behind an array
    (``{"features": ".../features.npy"}``) for error messages.

    Refused with one GnnflowError, before anything is left behind: a graph without an edge, an
    empty training split, a training vertex without a label in [0, num_classes), a NaN
    or Inf feature.  Then the whole store is scanned once (:func:`scan_store`), its
    checksums and fingerprint and the invariants found go into meta.json, so that
    opening it later needs no scan.
    """
    names = {"features": "features", "labels": "labels", "train_idx": "train_idx", **(inputs or {})}
    n, m = _length(indptr) - 1, _length(indices)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if m == 0:
        raise GnnflowError(f"{out}: the graph has {n} vertices and no edge: a GNN aggregates over edges, so "
                           f"there is nothing to train on; check the edge list ({names.get('indices', 'edges')})")
    problems = split_problems(n, labels, train_idx, int(num_classes), names)
    if problems:
        raise GnnflowError(problems[0])
    with atomic_dir(out, overwrite=overwrite) as tmp:
        _put(tmp / "indptr.npy", indptr, np.int64)
        _put(tmp / "indices.npy", indices, np.int64)
        np.save(tmp / "labels.npy", labels)
        for split, arr in zip(SPLITS, (train_idx, val_idx, test_idx), strict=True):
            np.save(tmp / f"{split}.npy", np.ascontiguousarray(arr, dtype=np.int64))
        feature_dim = 0
        if features is not None:
            feature_dim = _write_features(tmp / "features.npy", features, normalize_features,
                                          names["features"])
        for key, arr in (extra_arrays or {}).items():
            _put(tmp / f"{key}.npy", arr)
        store_meta = StoreMeta(
            name=name, source=source, num_nodes=n, num_edges=m, directed=bool(directed),
            feature_dim=feature_dim, num_classes=int(num_classes), num_train=int(len(train_idx)),
            num_val=int(len(val_idx)), num_test=int(len(test_idx)),
            node_types=["_N"], edge_types=[["_N", "_E", "_N"]],
            feature_normalization=normalize_features if features is not None else None,
        ).with_keys(meta or {})  # the source's own keys, and typed ones it sets (homogenize's)
        store_meta.provenance = provenance(store_meta.provenance)
        if checksums:
            store_meta.checksums = {f.name: sha256_file(f) for f in sorted(tmp.glob("*.npy"))}
            store_meta.fingerprint = store_fingerprint(store_meta)
        write_store_meta(tmp, store_meta)
        # Validate before the rename: the full scan, once (features were checked as written).
        problems, facts = scan_store(open_store(tmp, validate=True), checksums=False,
                                     features=False, show_progress=False)
        if problems:
            raise StoreError(problems[0])
        if features is not None:
            facts["features_finite"] = True
        store_meta.validated = facts
        write_store_meta(tmp, store_meta)
    return open_store(out, validate=False)


def verify_checksums(store: GraphStore) -> list[str]:
    """Return the names of files whose sha256 differs from meta.json."""
    bad = []
    for fname, digest in (store.meta.checksums or {}).items():
        f = store.path / fname
        if not f.exists() or sha256_file(f) != digest:
            bad.append(fname)
    return bad
