"""``partition_graph``: graph store -> partition book, for every partitioning method.

Each method is a function ``(store, num_parts, seed, **params) -> Assignment``
registered in :data:`METHODS`; this module validates the input, runs it, writes
the parts (:func:`gnnflow.partition.book.write_parts`) and ``meta.json`` with
timings and quality metrics, all inside one :func:`gnnflow.io.atomic_dir` so a
failure leaves nothing behind.
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.meta import store_fingerprint
from gnnflow.errors import ConfigError, StoreError
from gnnflow.io import atomic_dir, provenance
from gnnflow.partition.assignment import Assignment
from gnnflow.partition.book import (
    PartitionBook,
    book_checksums,
    scan_book,
    typed_layout,
    write_parts,
)
from gnnflow.partition.meta import BookMeta, write_book_meta

# method -> "module:function"
METHODS: dict[str, str] = {
    "random": "gnnflow.partition.api:random_partition",
    "metis": "gnnflow.partition.metis:metis_partition",
    "edge": "gnnflow.partition.methods:edge_partition",
    "node": "gnnflow.partition.methods:node_partition",
    "presample": "gnnflow.partition.methods:presample_partition",
    "permute-1d": "gnnflow.partition.methods:permute_1d_partition",
    "two-level": "gnnflow.partition.methods:two_level_partition",
    "parmetis": "gnnflow.partition.parmetis:parmetis_partition",
}


def random_partition(store: Any, num_parts: int, seed: int = 0, **params: Any) -> Assignment:
    """Balanced random assignment (GSplit's "Rand" baseline): a permutation dealt round-robin."""
    _no_params("random", params)
    rng = np.random.default_rng(seed)
    node_part = np.empty(store.num_nodes, dtype=np.int32)
    node_part[rng.permutation(store.num_nodes)] = np.arange(store.num_nodes) % num_parts
    return Assignment(node_part)


def _no_params(method: str, params: dict[str, Any]) -> None:
    if params:
        raise ConfigError(f"--method {method} takes no options, got {sorted(params)}")


def open_graph(store: Any) -> Any:
    """A GraphStore, opening (and validating) a path if given one."""
    from gnnflow.data.store import GraphStore, open_store

    if isinstance(store, GraphStore):
        return store
    return open_store(store, validate=True)


def check_num_parts(num_parts: Any, num_nodes: int, what: str = "--parts") -> int:
    try:
        p = int(num_parts)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be an integer, got {num_parts!r}") from None
    if p < 1 or p > num_nodes:
        raise ConfigError(f"{what} must be in [1, {num_nodes}] (the graph's vertex count), got {p}")
    return p


def get_method(method: str) -> Any:
    if method not in METHODS:
        raise ConfigError(f"unknown partition method {method!r}; choose among {', '.join(METHODS)}")
    module, func = METHODS[method].split(":")
    return getattr(importlib.import_module(module), func)


def partition_graph(store: Any, method: str, num_parts: int, out: str | os.PathLike[str], seed: int = 0,
                    *, halo_hops: int = 1, overwrite: bool = False, write_features: bool = True,
                    replication_hops: int = 0, **params: Any) -> PartitionBook:
    """Partition ``store`` (a GraphStore or its path) with ``method`` into a book at ``out``.

    ``params`` go to the method (e.g. ``constraints=["vertices","train","edges"]`` for
    metis, ``levels=(M, W)`` for two-level, ``presample=path`` for node/presample).
    ``halo_hops > 1`` also writes K-hop halo id lists; ``replication_hops`` adds the
    DGCL replication factor for 1..K hops to the quality metrics.
    """
    fn = get_method(method)
    store = open_graph(store)
    if method == "two-level" and "levels" in params:
        from gnnflow.partition.assignment import parse_levels

        m, w = parse_levels(params["levels"])
        params["levels"] = (m, w)
        if num_parts in (None, 0):
            num_parts = m * w
        elif int(num_parts) != m * w:
            raise ConfigError(f"--parts {num_parts} does not match --levels {m}x{w} (= {m * w} workers)")
    num_parts = check_num_parts(num_parts, store.num_nodes)
    if store.num_edges == 0:
        raise ConfigError(f"{store.path}: the graph has no edge; partitioning it ({method}) would only split "
                          "isolated vertices, and no strategy can train on it: check the graph's edges")
    if int(halo_hops) < 1:
        raise ConfigError(f"--halo-hops must be >= 1, got {halo_hops}")
    out = Path(out)
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} already exists; remove it or pass --overwrite")

    t0 = time.perf_counter()
    result: Assignment = fn(store, num_parts, seed, **params)
    t_part = time.perf_counter() - t0
    node_part = np.ascontiguousarray(result.node_part, dtype=np.int32)
    _check_assignment(node_part, store.num_nodes, num_parts, method)

    from gnnflow.partition.metrics import quality

    with atomic_dir(out, overwrite=overwrite) as tmp:
        np.save(tmp / "node_part.npy", node_part)
        for name, arr in result.arrays.items():
            np.save(tmp / f"{name}.npy", arr)
        t1 = time.perf_counter()
        stats = write_parts(tmp, store, node_part, num_parts, halo_hops=int(halo_hops),
                            features=write_features)
        t_write = time.perf_counter() - t1
        t2 = time.perf_counter()
        constraints = result.constraints or ["vertices", "train", "edges"]
        q = quality(store, node_part, num_parts, constraints, stats, replication_hops=replication_hops)
        t_quality = time.perf_counter() - t2
        levels = result.meta.pop("levels", None)
        meta = BookMeta(
            method=method, num_parts=num_parts, params=_jsonable(params), seed=int(seed),
            # relative to the book: a book moved together with its graph, or staged, still finds it
            graph=os.path.relpath(Path(store.path).resolve(), out.resolve()),
            graph_name=store.name, num_nodes=store.num_nodes, num_edges=store.num_edges,
            feature_dim=store.feature_dim if write_features else 0, num_classes=store.num_classes,
            halo_hops=int(halo_hops), quality=q,
            timings={"partition_s": t_part, "write_s": t_write, "quality_s": t_quality},
        ).with_keys({
            "levels": None if levels is None else list(levels),  # null, not absent, as books always had
            **_jsonable(result.meta),  # what the method records of its own
        })
        typed = typed_layout(store)
        if typed is not None:
            meta.typed = typed.book_meta(stats)
        meta.provenance = provenance()
        # identifies the store's content: `gnnflow train` refuses a book made from another graph
        meta.graph_fingerprint = store.meta.fingerprint or store_fingerprint(store.meta)
        meta.checksums = book_checksums(tmp)
        write_book_meta(tmp, meta)
        # Validated once, here, so that opening it later needs no scan (`gnnflow check` repeats it).
        problems = scan_book(tmp, checksums=False, show_progress=False)
        if problems:
            raise StoreError(f"partition book failed its own check: {problems[0]}")
        meta.validated = True
        write_book_meta(tmp, meta)
    return PartitionBook(out)


def _check_assignment(node_part: np.ndarray, n: int, num_parts: int, method: str) -> None:
    if node_part.shape != (n,):
        raise RuntimeError(f"method {method} returned {node_part.shape} part ids for {n} vertices")
    if n and (int(node_part.min()) < 0 or int(node_part.max()) >= num_parts):
        raise RuntimeError(f"method {method} returned part ids outside [0, {num_parts}): "
                           f"min {int(node_part.min())}, max {int(node_part.max())}")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    describe = getattr(obj, "describe", None)
    return describe() if callable(describe) else f"<{type(obj).__name__}>"

