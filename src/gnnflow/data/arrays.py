"""Reading user-supplied array files with one clear error per problem.

Shared by the ``import`` source, the typed-directory reader of ``homogenize``
and the converters: a missing file, a truncated or corrupt ``.npy`` and an
unreadable edge list each raise :class:`GnnflowError` naming the file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gnnflow.errors import GnnflowError


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
    import pandas as pd

    from gnnflow.io import progress

    path = Path(path)
    sep = "," if ".csv" in path.name.lower() else r"\s+"
    header = _has_header(path)
    srcs, dsts = [], []
    try:
        reader = pd.read_csv(path, sep=sep, comment="#", header=None, usecols=[0, 1],
                             skiprows=1 if header else 0, dtype=np.int64, engine="c",
                             chunksize=chunk_rows)
        for chunk in progress(reader, desc=f"reading {path.name}"):
            srcs.append(chunk[0].to_numpy())
            dsts.append(chunk[1].to_numpy())
    except (ValueError, pd.errors.ParserError, OSError, EOFError) as exc:
        raise GnnflowError(f"{path}: cannot parse as an edge list of integer pairs ({exc})") from None
    if not srcs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


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
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.{tag}-", suffix=".npy", dir=out.parent)
    os.close(fd)
    path = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)  # mkstemp makes it 0600; the store's files are shared
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def write_random_features(path: Path, num_nodes: int, dim: int, rng: np.random.Generator,
                          chunk_rows: int = 1 << 16) -> Path:
    """Standard-normal float32 features written chunk by chunk to a ``.npy`` file."""
    from gnnflow.io import progress

    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(num_nodes, dim))
    for start in progress(range(0, num_nodes, chunk_rows), desc="random features"):
        stop = min(num_nodes, start + chunk_rows)
        mm[start:stop] = rng.standard_normal((stop - start, dim), dtype=np.float32)
    mm.flush()
    del mm
    return path
