"""SNAP edge lists (com-Orkut, com-Friendster, web-Google, wiki-Talk, ...) to graph stores.

SNAP files are whitespace-separated ``src dst`` lines with ``#`` comments,
often gzipped.  Vertex ids are relabelled to ``0..N-1`` in increasing order of
the original id (kept in ``orig_id.npy``); the graph is symmetrized unless
``--directed``.  SNAP graphs carry no features or labels, so, as GSplit (§6.1)
and DGCL (§7) do for their Orkut/Friendster-style inputs, gnnflow draws
random features (standard normal) and random labels (uniform) from the seed
and marks the store ``random_features: true`` and ``random_labels: true``:
such stores measure throughput and communication, not accuracy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.arrays import iter_text_edges, scratch_dir, write_random_features
from gnnflow.data.download import default_cache_dir, download
from gnnflow.data.external_csr import ExternalCSRBuilder
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import ConfigError, GnnflowError
from gnnflow.io import log, progress

_BASE = "https://snap.stanford.edu/data"
#: Named SNAP graphs: download URL and whether SNAP lists them as undirected.
SNAP_GRAPHS: dict[str, tuple[str, bool]] = {
    "com-Orkut": (f"{_BASE}/bigdata/communities/com-orkut.ungraph.txt.gz", True),
    "com-Friendster": (f"{_BASE}/bigdata/communities/com-friendster.ungraph.txt.gz", True),
    "com-LiveJournal": (f"{_BASE}/bigdata/communities/com-lj.ungraph.txt.gz", True),
    "com-Youtube": (f"{_BASE}/bigdata/communities/com-youtube.ungraph.txt.gz", True),
    "com-DBLP": (f"{_BASE}/bigdata/communities/com-dblp.ungraph.txt.gz", True),
    "com-Amazon": (f"{_BASE}/bigdata/communities/com-amazon.ungraph.txt.gz", True),
    "soc-LiveJournal1": (f"{_BASE}/soc-LiveJournal1.txt.gz", False),
    "soc-Pokec": (f"{_BASE}/soc-pokec-relationships.txt.gz", False),
    "web-Google": (f"{_BASE}/web-Google.txt.gz", False),
    "wiki-Talk": (f"{_BASE}/wiki-Talk.txt.gz", False),
    "ca-GrQc": (f"{_BASE}/ca-GrQc.txt.gz", True),
}


def _lookup(dataset: str) -> str:
    for name in SNAP_GRAPHS:
        if name.lower() == dataset.lower():
            return name
    raise ConfigError(f"unknown SNAP graph {dataset!r}; known: {', '.join(SNAP_GRAPHS)} "
                      "(or pass --file PATH for any SNAP-style edge list)")


def locate_snap_file(dataset: str, raw_dir: Path | None = None, url: str | None = None) -> Path:
    """The local file of a named SNAP graph, downloaded into ``raw_dir`` when missing."""
    name = _lookup(dataset)
    default_url = SNAP_GRAPHS[name][0]
    fname = default_url.rsplit("/", 1)[1]
    base = raw_dir if raw_dir is not None else default_cache_dir() / "snap"
    for cand in (base / fname, base / fname.removesuffix(".gz")):
        if cand.exists():
            return cand
    hint = f"download {default_url} elsewhere and pass --raw-dir DIR with DIR/{fname} in it"
    return download(url or default_url, base / fname, hint=hint)


def read_snap(path: str | os.PathLike[str], workdir: str | os.PathLike[str], *,
              symmetrize: bool) -> dict[str, Any]:
    """CSR of a SNAP edge list with contiguous ids, built on disk in ``workdir``.

    Returns ``indptr``/``indices`` as ``.npy`` paths (for ``write_store`` to move in) and
    ``orig_id`` (new id -> original id, an array over the vertices).  Two passes in
    chunks: the text is parsed once into a binary pair file while the set of ids is
    collected; then the pairs are relabelled and bucketed (:class:`ExternalCSRBuilder`).
    Memory: the vertex-sized arrays plus one chunk and one bucket, whatever the edge count.
    """
    from gnnflow.data import arrays

    path, workdir = Path(path), Path(workdir)
    chunk_rows = arrays.CHUNK_ROWS
    ids = _IdSet()
    pairs_file = workdir / "pairs.bin"
    m = 0
    with open(pairs_file, "wb") as fh:
        for src, dst in iter_text_edges(path, chunk_rows):
            if src.size and min(int(src.min()), int(dst.min())) < 0:
                raise GnnflowError(f"{path}: negative vertex id")
            ids.add(src)
            ids.add(dst)
            fh.write(np.column_stack([src, dst]).data)
            m += src.shape[0]
    if m == 0:
        raise GnnflowError(f"{path}: no edges found")
    orig_id = ids.sorted()
    n = orig_id.shape[0]
    relabel = ids.relabeller(orig_id)
    log.info("%s: %d edges, %d vertices; building the CSR in %s", path.name, m, n, workdir)
    builder = ExternalCSRBuilder(n, workdir, symmetrize=symmetrize, expected_edges=m, what=str(path))
    with open(pairs_file, "rb") as fh:
        for _ in progress(range(0, m, chunk_rows), desc="relabelling edges"):
            pairs = np.fromfile(fh, dtype=np.int64, count=2 * chunk_rows).reshape(-1, 2)
            builder.add(relabel(pairs[:, 0]), relabel(pairs[:, 1]))
    pairs_file.unlink()
    builder.finish(workdir / "indptr.npy", workdir / "indices.npy")
    return {"indptr": workdir / "indptr.npy", "indices": workdir / "indices.npy", "orig_id": orig_id}


class _IdSet:
    """The distinct vertex ids seen, in memory proportional to the vertices: a bitmap
    while the largest id is small (SNAP ids are mostly dense), sorted unique ids after."""

    BITMAP_LIMIT = 1 << 28

    def __init__(self) -> None:
        self.bitmap: np.ndarray | None = np.zeros(0, dtype=bool)
        self.uniq = np.empty(0, dtype=np.int64)

    def add(self, arr: np.ndarray) -> None:
        if arr.size == 0:
            return
        hi = int(arr.max())
        if self.bitmap is not None and hi >= self.BITMAP_LIMIT:
            self.uniq = np.flatnonzero(self.bitmap).astype(np.int64)
            self.bitmap = None
        if self.bitmap is None:
            self.uniq = np.union1d(self.uniq, np.unique(arr))
            return
        if hi >= self.bitmap.shape[0]:
            grown = np.zeros(max(hi + 1, 2 * self.bitmap.shape[0]), dtype=bool)
            grown[: self.bitmap.shape[0]] = self.bitmap
            self.bitmap = grown
        self.bitmap[arr] = True

    def sorted(self) -> np.ndarray:
        return np.flatnonzero(self.bitmap).astype(np.int64) if self.bitmap is not None else self.uniq

    def relabeller(self, orig_id: np.ndarray) -> Any:
        """original id -> position in ``orig_id``: a rank table over the bitmap (one
        lookup per id), else a binary search."""
        if self.bitmap is None:
            return lambda ids: np.searchsorted(orig_id, ids)
        rank = np.cumsum(self.bitmap, dtype=np.int32 if orig_id.shape[0] < 2**31 else np.int64)
        rank -= 1
        self.bitmap = None
        return lambda ids: rank[ids].astype(np.int64)


def prepare_snap(out: str | os.PathLike[str], *, dataset: str | None = None,
                 file: str | os.PathLike[str] | None = None, raw_dir: Path | None = None,
                 symmetrize: bool = True, feature_dim: int = 128, num_classes: int = 16,
                 train_frac: float = 0.65, val_frac: float = 0.10, seed: int = 0,
                 overwrite: bool = False, name: str | None = None,
                 url: str | None = None, normalize_features: str = "none") -> GraphStore:
    """Read (or download) a SNAP edge list, add random features/labels, write a store."""
    if (dataset is None) == (file is None):
        raise ConfigError("give either a SNAP graph name or --file PATH (not both)")
    if feature_dim < 1 or num_classes < 2:
        raise ConfigError("--feature-dim must be >= 1 and --classes >= 2")
    if not (0 < train_frac < 1 and 0 <= val_frac and train_frac + val_frac < 1):
        raise ConfigError(f"--train-frac {train_frac} / --val-frac {val_frac} must leave a test split")
    if file is not None:
        path = Path(file)
        if not path.exists():
            raise GnnflowError(f"{path}: no such file")
        store_name = name or path.name.split(".")[0]
    else:
        path = locate_snap_file(dataset, raw_dir, url)  # type: ignore[arg-type]
        store_name = name or _lookup(dataset)  # type: ignore[arg-type]
    with scratch_dir(out, "convert") as work:
        g = read_snap(path, work, symmetrize=symmetrize)
        n = g["orig_id"].shape[0]
        rng = np.random.default_rng(seed)
        labels = rng.integers(0, num_classes, n, dtype=np.int64)
        perm = rng.permutation(n)
        n_tr, n_va = int(round(train_frac * n)), int(round(val_frac * n))
        tmp = write_random_features(work / "features.npy", n, feature_dim, rng)
        return write_store(
            out, name=store_name, source="snap", indptr=g["indptr"], indices=g["indices"],
            features=tmp, labels=labels, train_idx=np.sort(perm[:n_tr]),
            val_idx=np.sort(perm[n_tr : n_tr + n_va]), test_idx=np.sort(perm[n_tr + n_va :]),
            num_classes=num_classes, directed=not symmetrize,
            extra_arrays={"orig_id": g["orig_id"]}, overwrite=overwrite,
            normalize_features=normalize_features,
            meta={"random_features": True, "random_labels": True, "symmetrized": symmetrize,
                  "raw_file": str(path), "seed": seed},
        )
