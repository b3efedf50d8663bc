"""Reading user-supplied array files with one clear error per problem.

Shared by the ``import`` source, the typed-directory reader of ``homogenize``
and the converters: a missing file, a truncated or corrupt ``.npy`` and an
unreadable edge list each raise :class:`GnnflowError` naming the file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.errors import GnnflowError
from gnnflow.io import temp_dir_beside, temp_file_beside


def load_npy(path: str | os.PathLike[str], mmap: bool = False) -> np.ndarray:
    """``np.load`` without pickles; errors name the file and say what is wrong."""
    path = Path(path)
    if not path.exists():
        raise GnnflowError(f"{path}: no such file")
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise GnnflowError(f"{path}: cannot read as .npy ({exc}); the file is truncated, "
                           "corrupt or not a numpy array file") from None
    if not isinstance(arr, np.ndarray):
        raise GnnflowError(f"{path}: holds an archive, expected a single .npy array")
    return arr


def load_edge_list(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int64 from ``.npy`` ([M,2] or [2,M]), ``.csv``/``.tsv`` (optionally
    ``.gz``; a header line ``src,dst`` is allowed) or ``.parquet`` (columns ``src``,
    ``dst`` or the first two)."""
    path = Path(path)
    if not path.exists():
        raise GnnflowError(f"{path}: no such file")
    name = path.name.lower()
    if name.endswith(".npy"):
        arr = load_npy(path)
        if arr.ndim != 2 or 2 not in arr.shape:
            raise GnnflowError(f"{path}: edge array must have shape [M, 2] or [2, M], got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            raise GnnflowError(f"{path}: edge array must be integer, got {arr.dtype}")
        pairs = arr if arr.shape[1] == 2 else arr.T  # [2, 2] reads as rows (src, dst)
        return np.ascontiguousarray(pairs[:, 0], np.int64), np.ascontiguousarray(pairs[:, 1], np.int64)
    if name.endswith(".parquet"):
        import pandas as pd

        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types
            raise GnnflowError(f"{path}: cannot read parquet ({exc})") from None
        cols = ["src", "dst"] if {"src", "dst"} <= set(df.columns) else list(df.columns[:2])
        if len(cols) < 2:
            raise GnnflowError(f"{path}: needs two columns (src, dst)")
        return _int_columns(df, cols, path)
    if name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt", ".txt.gz")):
        return read_text_edges(path)
    raise GnnflowError(f"{path}: unknown edge list format; use .npy, .csv, .tsv, .txt or .parquet")


def _int_columns(df: object, cols: list[str], path: Path) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for c in cols:
        col = df[c]  # type: ignore[index]
        if not np.issubdtype(col.dtype, np.integer):
            raise GnnflowError(f"{path}: column {c!r} must hold integer vertex ids, got {col.dtype}")
        out.append(col.to_numpy(dtype=np.int64))
    return out[0], out[1]


def read_text_edges(path: str | os.PathLike[str], chunk_rows: int = 1 << 23) -> tuple[np.ndarray, np.ndarray]:
    """Whitespace- or comma-separated integer pairs; ``#`` comment lines and one
    header line are skipped; ``.gz`` is decompressed.  Read in chunks with progress."""
    srcs, dsts = [], []
    for src, dst in iter_text_edges(path, chunk_rows):
        srcs.append(src)
        dsts.append(dst)
    if not srcs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


#: Edges per chunk when streaming an edge list (about 100 MB of parsed pairs).
CHUNK_ROWS = 1 << 22


def iter_text_edges(path: str | os.PathLike[str], chunk_rows: int | None = None,
                    desc: str | None = None, total_rows: int | None = None,
                    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(src, dst)`` int64 chunks of at most ``chunk_rows`` edges of a text edge list
    (the format :func:`read_text_edges` reads), with progress (``total_rows`` if known)."""
    import pandas as pd

    from gnnflow.io import progress

    path = Path(path)
    chunk_rows = chunk_rows or CHUNK_ROWS
    sep = "," if ".csv" in path.name.lower() else r"\s+"
    header = _has_header(path)
    try:
        reader = pd.read_csv(path, sep=sep, comment="#", header=None, usecols=[0, 1],
                             skiprows=1 if header else 0, dtype=np.int64, engine="c",
                             chunksize=chunk_rows)
        total = -(-total_rows // chunk_rows) if total_rows else None
        for chunk in progress(reader, desc=desc or f"reading {path.name}", total=total):
            yield chunk[0].to_numpy(), chunk[1].to_numpy()
    except (ValueError, pd.errors.ParserError, OSError, EOFError) as exc:
        raise GnnflowError(f"{path}: cannot parse as an edge list of integer pairs ({exc})") from None


def _has_header(path: Path) -> bool:
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt") as fh:  # type: ignore[operator]
            for line in fh:
                s = line.strip()
                if not s or s[0] == "#":
                    continue
                first = s.replace(",", " ").split()[0]
                return not first.lstrip("-").isdigit()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise GnnflowError(f"{path}: cannot read ({exc})") from None
    return False


@contextlib.contextmanager
def scratch_npy(out: str | os.PathLike[str], tag: str) -> Iterator[Path]:
    """A temporary ``.npy`` path next to ``out`` (same file system, so ``write_store``
    can move it in by rename); removed on exit if still there."""
    # mode: mkstemp makes it 0600; the store's files are shared
    with temp_file_beside(out, tag, suffix=".npy", mode=0o666) as path:
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def scratch_dir(out: str | os.PathLike[str], tag: str) -> Iterator[Path]:
    """A temporary directory next to ``out`` (same file system: ``write_store`` moves
    files from it by rename); removed with what is left in it on exit."""
    import shutil

    with temp_dir_beside(out, tag) as path:
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


def write_random_features(path: Path, num_nodes: int, dim: int, rng: np.random.Generator,
                          chunk_rows: int = 1 << 16) -> Path:
    """Standard-normal float32 features written chunk by chunk to a ``.npy`` file (plain
    writes, so the matrix never counts in this process's resident memory)."""
    from gnnflow.io import progress

    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (num_nodes, dim)})
        for start in progress(range(0, num_nodes, chunk_rows), desc="random features"):
            stop = min(num_nodes, start + chunk_rows)
            fh.write(rng.standard_normal((stop - start, dim), dtype=np.float32).data)
    return path


class NpzMember:
    """One array inside a ``.npz`` archive, read in pieces (stored or deflated members
    alike) without loading it: ``read(count)`` returns the next ``count`` items in
    storage order, ``skip(count)`` passes over them."""

    def __init__(self, path: str | os.PathLike[str], key: str) -> None:
        import zipfile

        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
            self._fh = self._zip.open(f"{key}.npy")
            version = np.lib.format.read_magic(self._fh)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, self.fortran_order, self.dtype = read_header(self._fh)
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
            raise GnnflowError(f"{self.path}: cannot read array {key!r} ({exc}); the file is "
                               "truncated or not a numpy .npz archive") from None
        if self.dtype.hasobject:
            raise GnnflowError(f"{self.path}: array {key!r} holds Python objects")
        self.shape = tuple(int(d) for d in shape)
        self.key = key

    def read(self, count: int) -> np.ndarray:
        data = self._fh.read(count * self.dtype.itemsize)
        if len(data) % self.dtype.itemsize:
            raise GnnflowError(f"{self.path}: array {self.key!r} is truncated")
        return np.frombuffer(data, dtype=self.dtype)

    def skip(self, count: int, step: int = 1 << 22) -> None:
        while count > 0:
            got = self.read(min(step, count)).shape[0]
            if got == 0:
                raise GnnflowError(f"{self.path}: array {self.key!r} is truncated")
            count -= got

    def close(self) -> None:
        self._fh.close()
        self._zip.close()

    def __enter__(self) -> NpzMember:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_npz_edge_index(path: str | os.PathLike[str], key: str = "edge_index",
                        chunk: int = 1 << 22) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(src, dst)`` int64 chunks of a ``[2, M]`` edge array inside a ``.npz``."""
    from gnnflow.io import progress

    with NpzMember(path, key) as first, NpzMember(path, key) as second:
        if len(first.shape) != 2 or first.shape[0] != 2:
            raise GnnflowError(f"{path}: {key} has shape {first.shape}, expected [2, M]")
        m = first.shape[1]
        if not first.fortran_order:
            second.skip(m)  # row 1 (destinations) starts after row 0
        for start in progress(range(0, m, chunk), desc=f"reading {Path(path).name}:{key}"):
            c = min(chunk, m - start)
            if first.fortran_order:  # pairs stored together
                pairs = first.read(2 * c).reshape(c, 2)
                src, dst = pairs[:, 0], pairs[:, 1]
            else:
                src, dst = first.read(c), second.read(c)
            if src.shape[0] != c or dst.shape[0] != c:
                raise GnnflowError(f"{path}: {key} is truncated")
            yield src.astype(np.int64), dst.astype(np.int64)


def iter_npz_rows(path: str | os.PathLike[str], key: str,
                  chunk_bytes: int = 64 << 20) -> Iterator[np.ndarray]:
    """Row blocks of a C-order array inside a ``.npz`` (e.g. a feature matrix)."""
    with NpzMember(path, key) as member:
        if member.fortran_order and len(member.shape) > 1:
            raise GnnflowError(f"{path}: {key} is stored in Fortran order; re-save it C-ordered")
        n = member.shape[0]
        width = int(np.prod(member.shape[1:], dtype=np.int64))
        rows = max(1, chunk_bytes // max(1, width * member.dtype.itemsize))
        for start in range(0, n, rows):
            c = min(rows, n - start)
            block = member.read(c * width)
            if block.shape[0] != c * width:
                raise GnnflowError(f"{path}: {key} is truncated")
            yield block.reshape((c, *member.shape[1:]))


class NpyRowWriter:
    """A ``.npy`` file of known shape written row block by row block (plain writes)."""

    def __init__(self, path: str | os.PathLike[str], shape: tuple[int, ...], dtype: Any) -> None:
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
        self.rows = 0
        self._fh = open(self.path, "wb")  # noqa: SIM115  (closed in close())
        np.lib.format.write_array_header_1_0(self._fh, {
            "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
            "shape": self.shape})

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        self._fh.write(block.data)
        self.rows += block.shape[0]

    def close(self, what: str) -> Path:
        self._fh.close()
        if self.rows != self.shape[0]:
            raise GnnflowError(f"{what}: {self.rows} rows, expected {self.shape[0]}")
        return self.path
