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

from gnnflow.data.arrays import read_text_edges, scratch_npy, write_random_features
from gnnflow.data.csr import build_csr
from gnnflow.data.download import default_cache_dir, download
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import ConfigError, GnnflowError

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


def read_snap(path: str | os.PathLike[str], *, symmetrize: bool) -> dict[str, Any]:
    """CSR of a SNAP edge list with contiguous ids; ``orig_id`` maps back."""
    path = Path(path)
    src, dst = read_text_edges(path)
    if src.size == 0:
        raise GnnflowError(f"{path}: no edges found")
    if min(int(src.min()), int(dst.min())) < 0:
        raise GnnflowError(f"{path}: negative vertex id")
    orig_id, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    m = src.shape[0]
    del src, dst
    n = orig_id.shape[0]
    indptr, indices = build_csr(inverse[:m], inverse[m:], n, symmetrize=symmetrize, what=str(path))
    return {"indptr": indptr, "indices": indices, "orig_id": orig_id}


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
    g = read_snap(path, symmetrize=symmetrize)
    n = g["orig_id"].shape[0]
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n, dtype=np.int64)
    perm = rng.permutation(n)
    n_tr, n_va = int(round(train_frac * n)), int(round(val_frac * n))
    with scratch_npy(out, "features") as tmp:
        write_random_features(tmp, n, feature_dim, rng)
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
