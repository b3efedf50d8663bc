"""Heterogeneous graphs and their homogenization (DistDGLv2 §4.1.1, §4.1.4).

DistDGLv2 §4.1.1: "Because METIS can only partition a homogeneous graph,
DistDGLv2 homogenizes a heterogeneous graph and stores the entire graph in a
single adjacency matrix, in which all vertices, regardless of their vertex
types, are assigned with unique vertex IDs ... vertices and edges of the same
type are assigned with contiguous IDs and vertex types and edge types are
stored as metadata."  §4.1.4 keeps features per vertex type at their own
dims and addresses them with type-specific ids.

:func:`homogenize` does exactly that for a :class:`HeteroGraph`:

* vertex types in sorted order, each a contiguous range
  ``[node_type_offsets[t], node_type_offsets[t+1])`` of homogeneous ids;
* edge types (canonical ``(src_type, relation, dst_type)`` triples) likewise
  get contiguous homogeneous *edge* ids ``[edge_type_offsets[r], ...)``, in
  the order the edges were given within a type.  The store's CSR is sorted by
  destination, so ``edge_id.npy`` (aligned with ``indices``) gives each CSR
  slot its homogeneous edge id and ``edge_type.npy`` its type;
* ``node_type.npy`` (int32) and per-type features ``features_<ntype>.npy`` at
  their own dims; ``labels.npy`` is -1 outside the labelled vertex type;
* so that a homogeneous GNN can train on the result, ``features.npy`` holds
  one row of a common dim per vertex (see :func:`common_features`).

:class:`TypeMap` maps in both directions between ``(type, per-type id)`` and
homogeneous ids; :func:`heterogenize` reads a store back into a
:class:`HeteroGraph`, which the round-trip tests compare with the original.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import GnnflowError, StoreError
from gnnflow.io import log

EdgeType = tuple[str, str, str]
REVERSE_PREFIX = "rev_"
_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class HeteroGraph:
    """A typed graph with per-type ids.

    ``edges[(s, r, d)] = (src, dst)`` with ``src`` ids of type ``s`` and ``dst``
    ids of type ``d``.  ``labels[t]`` is int64 with -1 for unlabelled vertices;
    ``splits[name][t]`` are per-type vertex ids (``name`` in train/val/test).
    """

    name: str
    num_nodes: dict[str, int]
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]]
    features: dict[str, np.ndarray] = field(default_factory=dict)
    labels: dict[str, np.ndarray] = field(default_factory=dict)
    splits: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    num_classes: int = 0
    target_node_type: str | None = None

    @property
    def node_types(self) -> list[str]:
        return sorted(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return sorted(self.edges)

    def validate(self, what: str = "heterogeneous graph") -> None:
        """Raise GnnflowError naming the first inconsistency."""
        for t in self.num_nodes:
            if not _SAFE.match(t):
                raise GnnflowError(f"{what}: vertex type name {t!r} must match {_SAFE.pattern}")
        for (s, r, d), (src, dst) in self.edges.items():
            name = f"{what}: edge type {s}___{r}___{d}"
            if s not in self.num_nodes or d not in self.num_nodes:
                raise GnnflowError(f"{name}: unknown vertex type (known: {self.node_types})")
            if src.shape != dst.shape or src.ndim != 1:
                raise GnnflowError(f"{name}: source and destination arrays differ in shape")
            for arr, t, side in ((src, s, "source"), (dst, d, "destination")):
                lo, hi = _id_range(arr)
                if arr.size and (lo < 0 or hi >= self.num_nodes[t]):
                    bad = lo if lo < 0 else hi
                    raise GnnflowError(
                        f"{name}: {side} id {bad} out of range [0, {self.num_nodes[t]}) for type {t}"
                    )
        for t, x in self.features.items():
            if x.ndim != 2 or x.shape[0] != self.num_nodes.get(t, -1):
                raise GnnflowError(f"{what}: features of {t} have shape {x.shape}, "
                                   f"expected [{self.num_nodes.get(t)}, dim]")
        for t, y in self.labels.items():
            if y.shape != (self.num_nodes.get(t, -1),):
                raise GnnflowError(f"{what}: {y.shape[0] if y.ndim else 0} labels of type {t} "
                                   f"for {self.num_nodes.get(t)} vertices")
            if y.size and int(y.max()) >= self.num_classes:
                raise GnnflowError(f"{what}: label {int(y.max())} of type {t} >= "
                                   f"num_classes {self.num_classes}")
        for split, per_type in self.splits.items():
            for t, idx in per_type.items():
                if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self.num_nodes.get(t, 0)):
                    raise GnnflowError(f"{what}: {split} ids of type {t} out of range")


def _id_range(arr: np.ndarray) -> tuple[int, int]:
    """``(min, max)`` of a (possibly memory-mapped) id array, a block at a time."""
    from gnnflow.io import row_chunks

    lo, hi = 0, -1
    for start, blk in row_chunks(arr):
        bmin, bmax = int(blk.min()), int(blk.max())
        lo, hi = (bmin, bmax) if start == 0 else (min(lo, bmin), max(hi, bmax))
    return lo, hi


class TypeMap:
    """Maps between ``(type, per-type id)`` and homogeneous vertex/edge ids."""

    def __init__(self, node_types: Sequence[str], node_type_offsets: Sequence[int],
                 edge_types: Sequence[Sequence[str]], edge_type_offsets: Sequence[int]) -> None:
        self.node_types = list(node_types)
        self.node_type_offsets = np.asarray(node_type_offsets, dtype=np.int64)
        self.edge_types: list[EdgeType] = [tuple(e) for e in edge_types]  # type: ignore[misc]
        self.edge_type_offsets = np.asarray(edge_type_offsets, dtype=np.int64)
        if self.node_type_offsets.shape != (len(self.node_types) + 1,):
            raise StoreError("node_type_offsets must have one entry more than node_types")
        if self.edge_type_offsets.shape != (len(self.edge_types) + 1,):
            raise StoreError("edge_type_offsets must have one entry more than edge_types")

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> TypeMap:
        try:
            return cls(meta["node_types"], meta["node_type_offsets"], meta["edge_types"],
                       meta["edge_type_offsets"])
        except KeyError as exc:
            raise StoreError(f"meta.json: missing {exc.args[0]!r}; the store was not written "
                             "by homogenize") from None

    @classmethod
    def from_store(cls, store: GraphStore) -> TypeMap:
        return cls.from_meta(store.meta)

    # vertex and edge type lookups -------------------------------------------
    def ntype_id(self, ntype: str | int) -> int:
        if isinstance(ntype, (int, np.integer)):
            return int(ntype)
        try:
            return self.node_types.index(ntype)
        except ValueError:
            raise GnnflowError(f"unknown vertex type {ntype!r}; known: {self.node_types}") from None

    def etype_id(self, etype: str | int | Sequence[str]) -> int:
        if isinstance(etype, (int, np.integer)):
            return int(etype)
        if isinstance(etype, str) and "___" in etype:
            etype = tuple(etype.split("___"))
        if isinstance(etype, str):
            hits = [i for i, e in enumerate(self.edge_types) if e[1] == etype]
            if len(hits) == 1:
                return hits[0]
            raise GnnflowError(f"edge type {etype!r} is unknown or ambiguous; "
                               f"use a (src, rel, dst) triple from {self.edge_types}")
        try:
            return self.edge_types.index(tuple(etype))  # type: ignore[arg-type]
        except ValueError:
            raise GnnflowError(f"unknown edge type {etype!r}; known: {self.edge_types}") from None

    def num_nodes_of(self, ntype: str | int) -> int:
        t = self.ntype_id(ntype)
        return int(self.node_type_offsets[t + 1] - self.node_type_offsets[t])

    def num_edges_of(self, etype: str | int | Sequence[str]) -> int:
        r = self.etype_id(etype)
        return int(self.edge_type_offsets[r + 1] - self.edge_type_offsets[r])

    # id maps ------------------------------------------------------------------
    def to_homogeneous_id(self, ntype: str | int, local_ids: Any) -> np.ndarray:
        """Homogeneous vertex ids of per-type ids ``local_ids`` of ``ntype``."""
        t = self.ntype_id(ntype)
        local = np.asarray(local_ids, dtype=np.int64)
        n = self.num_nodes_of(t)
        if local.size and (int(local.min()) < 0 or int(local.max()) >= n):
            raise GnnflowError(f"per-type id out of range [0, {n}) for vertex type "
                               f"{self.node_types[t]!r}")
        return local + self.node_type_offsets[t]

    def to_type_id(self, homogeneous_ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(type index int32, per-type id int64)`` of homogeneous vertex ids."""
        return self._split(np.asarray(homogeneous_ids, dtype=np.int64), self.node_type_offsets)

    def to_homogeneous_eid(self, etype: str | int | Sequence[str], local_eids: Any) -> np.ndarray:
        r = self.etype_id(etype)
        local = np.asarray(local_eids, dtype=np.int64)
        m = self.num_edges_of(r)
        if local.size and (int(local.min()) < 0 or int(local.max()) >= m):
            raise GnnflowError(f"per-type edge id out of range [0, {m}) for {self.edge_types[r]}")
        return local + self.edge_type_offsets[r]

    def to_type_eid(self, homogeneous_eids: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(edge type index int32, per-type edge id int64)`` of homogeneous edge ids."""
        return self._split(np.asarray(homogeneous_eids, dtype=np.int64), self.edge_type_offsets)

    @staticmethod
    def _split(ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= int(offsets[-1])):
            raise GnnflowError(f"homogeneous id out of range [0, {int(offsets[-1])})")
        t = np.searchsorted(offsets, ids, side="right") - 1
        return t.astype(np.int32), ids - offsets[t]


def to_homogeneous_id(store_or_meta: GraphStore | dict[str, Any], ntype: str | int,
                      local_ids: Any) -> np.ndarray:
    """Homogeneous ids of per-type vertex ids (see :class:`TypeMap`)."""
    return _typemap(store_or_meta).to_homogeneous_id(ntype, local_ids)


def to_type_id(store_or_meta: GraphStore | dict[str, Any],
               homogeneous_ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(type index, per-type id)`` of homogeneous vertex ids (see :class:`TypeMap`)."""
    return _typemap(store_or_meta).to_type_id(homogeneous_ids)


def _typemap(x: GraphStore | dict[str, Any]) -> TypeMap:
    return TypeMap.from_meta(x if isinstance(x, dict) else x.meta)


def add_reverse_edges(hg: HeteroGraph) -> list[EdgeType]:
    """Add ``(d, rev_r, s)`` for each relation ``(s, r, d)``; return the added types.

    ogbn-mag's relations are one-way (author writes paper); without reverses a
    paper never hears from its authors or fields.  DGL's ogbn-mag examples add
    the same reverse types.
    """
    added = []
    for s, r, d in sorted(hg.edges):
        if r.startswith(REVERSE_PREFIX):
            continue
        rev = (d, REVERSE_PREFIX + r, s)
        if rev not in hg.edges:
            src, dst = hg.edges[(s, r, d)]
            hg.edges[rev] = (dst, src)
            added.append(rev)
    return added


def common_features(hg: HeteroGraph, indptr: np.ndarray, indices: np.ndarray,
                    offsets: np.ndarray, fill: str, seed: int) -> tuple[np.ndarray, dict[str, str]]:
    """One feature row of a common dim per homogeneous vertex.

    The common dim is that of the target (labelled) type's features, else the
    largest per-type dim.  Per type: features of that dim are copied as is;
    features of another dim are mapped by a seeded Gaussian random projection
    (scaled by 1/sqrt(dim), which keeps norms on average); types without
    features get, with ``fill="neighbor-mean"``, the mean of their in-neighbours'
    rows (repeated so that types two hops from a featured type are filled too),
    or zeros with ``fill="zero"``.  Returns the matrix and how each type was filled.
    """
    dims = {t: x.shape[1] for t, x in hg.features.items()}
    if not dims:
        return np.zeros((int(offsets[-1]), 0), dtype=np.float32), {t: "none" for t in hg.node_types}
    target = hg.target_node_type
    dim = dims[target] if target in dims else max(dims.values())
    n = int(offsets[-1])
    out = np.zeros((n, dim), dtype=np.float32)
    have = np.zeros(n, dtype=bool)
    how: dict[str, str] = {}
    rng = np.random.default_rng(seed)
    for ti, t in enumerate(hg.node_types):
        lo, hi = int(offsets[ti]), int(offsets[ti + 1])
        if t not in hg.features:
            continue
        x = np.asarray(hg.features[t], dtype=np.float32)
        if x.shape[1] == dim:
            out[lo:hi] = x
            how[t] = "own"
        else:
            proj = rng.standard_normal((x.shape[1], dim)).astype(np.float32) / np.sqrt(x.shape[1])
            out[lo:hi] = x @ proj
            how[t] = f"random-projection from dim {x.shape[1]}"
        have[lo:hi] = True
    missing = [t for t in hg.node_types if t not in hg.features]
    if fill == "zero":
        how.update({t: "zero" for t in missing})
        return out, how
    if fill != "neighbor-mean":
        raise GnnflowError(f"feature fill {fill!r} must be 'neighbor-mean' or 'zero'")
    for _hop in range(len(hg.node_types)):
        rows = np.flatnonzero(~have)
        if rows.size == 0 or not have.any():
            break
        cnt, total = _neighbor_sums(indptr, indices, rows, have, out)
        ok = cnt > 0
        if not ok.any():
            break
        out[rows[ok]] = (total[ok] / cnt[ok, None]).astype(np.float32)
        have[rows[ok]] = True
    for ti, t in enumerate(hg.node_types):
        if t in missing:
            lo, hi = int(offsets[ti]), int(offsets[ti + 1])
            filled = int(have[lo:hi].sum())
            how[t] = f"neighbor-mean ({filled}/{hi - lo} vertices, rest zero)"
    return out, how


def _neighbor_sums(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, have: np.ndarray,
                   x: np.ndarray, block: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """Per row in ``rows``: how many in-neighbours have ``have`` set, and the sum of their
    rows of ``x`` (rows of ``x`` without ``have`` are zero), ``block`` rows at a time from
    a (memory-mapped) CSR.  float32 sums in CSR order, as a scipy product over the
    ``have`` columns would give (the zero rows add exact zeros)."""
    import scipy.sparse as sp

    from gnnflow.data.csr import gather_rows

    cnt = np.empty(rows.shape[0], dtype=np.float32)
    total = np.empty((rows.shape[0], x.shape[1]), dtype=np.float32)
    weight = have.astype(np.float32)
    for s in range(0, rows.shape[0], block):
        sub_indptr, nbrs = gather_rows(indptr, indices, rows[s:s + block])
        sub = sp.csr_matrix((np.ones(nbrs.shape[0], dtype=np.float32), nbrs, sub_indptr),
                            shape=(sub_indptr.shape[0] - 1, x.shape[0]))
        cnt[s:s + block] = sub @ weight
        total[s:s + block] = sub @ x
    return cnt, total


def _typed_csr(hg: HeteroGraph, etypes: list[EdgeType], ntypes: list[str], offsets: np.ndarray,
               eoffsets: np.ndarray, work: Path, chunk: int = 1 << 22) -> tuple[Path, Path, Path, Path]:
    """CSR over destinations of all typed edges with homogeneous ids, built on disk: each
    row keeps its edges in edge-id order (a stable sort by ``dst * N + src``), nothing
    deduplicated.  Returns the paths of ``indptr``, ``indices``, ``edge_id`` (CSR slot ->
    homogeneous edge id) and ``edge_type`` (int32)."""
    from gnnflow.data.external_csr import ExternalCSRBuilder, NpyAppender
    from gnnflow.io import progress, release_pages, row_chunks

    n, m = int(offsets[-1]), int(eoffsets[-1])
    builder = ExternalCSRBuilder(n, work, symmetrize=False, dedup=False, drop_self_loops=False,
                                 edge_ids=True, expected_edges=m, what=hg.name)
    for r, (s, rel, d) in enumerate(progress(etypes, desc="typed edges")):
        s_local, d_local = hg.edges[(s, rel, d)]
        so, do, lo = offsets[ntypes.index(s)], offsets[ntypes.index(d)], int(eoffsets[r])
        for start in range(0, s_local.shape[0], chunk):
            a = np.asarray(s_local[start:start + chunk], dtype=np.int64) + so
            b = np.asarray(d_local[start:start + chunk], dtype=np.int64) + do
            builder.add(a, b, np.arange(lo + start, lo + start + a.shape[0], dtype=np.int64))
            release_pages(s_local, d_local)
    paths = [work / f"{k}.npy" for k in ("indptr", "indices", "edge_id", "edge_type")]
    builder.finish(paths[0], paths[1], paths[2])
    edge_type = NpyAppender(paths[3], np.int32)
    eids = np.load(paths[2], mmap_mode="r")
    for _, block in row_chunks(eids):
        edge_type.append(np.searchsorted(eoffsets, block, side="right") - 1)
    edge_type.close()
    return paths[0], paths[1], paths[2], paths[3]


def homogenize(hg: HeteroGraph, *, reverse_edges: bool = True, feature_fill: str = "neighbor-mean",
               seed: int = 0, source: str = "hetero",
               workdir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Homogenize ``hg`` (DistDGLv2 §4.1.1); return keyword arguments for ``write_store``.

    The CSR is built on disk (:class:`ExternalCSRBuilder`, memory bounded by a bucket,
    the edge arrays of ``hg`` may be memory maps), so ``indptr``, ``indices``,
    ``edge_id`` and ``edge_type`` come back as ``.npy`` paths in ``workdir``; without a
    ``workdir`` they are built in a temporary one and returned as arrays.
    """
    if workdir is None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="gnnflow-homogenize-") as tmp:
            data = homogenize(hg, reverse_edges=reverse_edges, feature_fill=feature_fill,
                              seed=seed, source=source, workdir=tmp)
            for key in ("indptr", "indices"):
                data[key] = np.load(data[key])
            data["extra_arrays"] = {k: np.load(v) if isinstance(v, Path) else v
                                    for k, v in data["extra_arrays"].items()}
            return data
    work = Path(workdir)
    hg.validate(hg.name)
    hg = HeteroGraph(hg.name, dict(hg.num_nodes), dict(hg.edges), hg.features, hg.labels,
                     hg.splits, hg.num_classes, hg.target_node_type)
    reversed_types = add_reverse_edges(hg) if reverse_edges else []
    ntypes = hg.node_types
    log.info("homogenizing %s: %d vertex types, %d edge types", hg.name, len(ntypes), len(hg.edges))
    counts = np.array([hg.num_nodes[t] for t in ntypes], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    # Original relations first (sorted), then their reverses (sorted), so the
    # original edge ids do not depend on whether reverses were added.
    etypes = sorted(e for e in hg.edges if e not in reversed_types) + sorted(reversed_types)
    ecounts = np.array([hg.edges[e][0].shape[0] for e in etypes], dtype=np.int64)
    eoffsets = np.concatenate([[0], np.cumsum(ecounts)]).astype(np.int64)
    indptr, indices, edge_id, edge_type = _typed_csr(hg, etypes, ntypes, offsets, eoffsets, work)

    node_type = np.repeat(np.arange(len(ntypes), dtype=np.int32), counts)
    labels = np.full(n, -1, dtype=np.int64)
    for t, y in hg.labels.items():
        ti = ntypes.index(t)
        labels[offsets[ti] : offsets[ti + 1]] = y
    split_ids = {}
    for split in ("train", "val", "test"):
        per_type = hg.splits.get(split, {})
        parts = [np.asarray(per_type[t], dtype=np.int64) + offsets[ntypes.index(t)]
                 for t in ntypes if t in per_type]
        split_ids[split] = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    features, fill_how = common_features(hg, np.load(indptr, mmap_mode="r"),
                                         np.load(indices, mmap_mode="r"), offsets, feature_fill, seed)
    extra: dict[str, Any] = {"node_type": node_type, "edge_type": edge_type, "edge_id": edge_id}
    for t, x in hg.features.items():
        extra[f"features_{t}"] = np.asarray(x, dtype=np.float32)
    meta = {
        "homogenized": True,
        "node_types": ntypes,
        "node_type_offsets": offsets.tolist(),
        "edge_types": [list(e) for e in etypes],
        "edge_type_offsets": eoffsets.tolist(),
        "reverse_edge_types": [list(e) for e in reversed_types],
        "num_nodes_per_type": {t: int(c) for t, c in zip(ntypes, counts, strict=True)},
        "num_edges_per_type": {"___".join(e): int(c) for e, c in zip(etypes, ecounts, strict=True)},
        "target_node_type": hg.target_node_type,
        "type_feature_dims": {t: int(hg.features[t].shape[1]) for t in ntypes if t in hg.features},
        "common_features": {"dim": int(features.shape[1]), "fill": feature_fill, "per_type": fill_how},
    }
    return {
        "name": hg.name,
        "source": source,
        "indptr": indptr,
        "indices": indices,
        "features": features if features.shape[1] else None,
        "labels": labels,
        "train_idx": split_ids["train"],
        "val_idx": split_ids["val"],
        "test_idx": split_ids["test"],
        "num_classes": hg.num_classes,
        "directed": not reverse_edges,
        "extra_arrays": extra,
        "meta": meta,
    }


def write_hetero_store(hg: HeteroGraph, out: str | os.PathLike[str], *, overwrite: bool = False,
                       reverse_edges: bool = True, feature_fill: str = "neighbor-mean",
                       seed: int = 0, source: str = "hetero",
                       meta: dict[str, Any] | None = None,
                       normalize_features: str = "none") -> GraphStore:
    """Homogenize ``hg`` and write it as a graph store (atomically)."""
    from gnnflow.data.arrays import scratch_dir

    with scratch_dir(out, "homogenize") as work:
        data = homogenize(hg, reverse_edges=reverse_edges, feature_fill=feature_fill, seed=seed,
                          source=source, workdir=work)
        data["meta"].update(meta or {})
        store = write_store(out, overwrite=overwrite, normalize_features=normalize_features, **data)
    validate_hetero(store, full=False)  # edge_id is a permutation by construction
    return store


def validate_hetero(store: GraphStore, full: bool = True) -> TypeMap:
    """Check the type arrays of a homogenized store against its meta; return its TypeMap.

    Block by block over the memory-mapped arrays: vertex types are the contiguous ranges
    of meta.json, each CSR slot's edge type matches its edge id's range and its
    endpoints' vertex types.  ``full`` also checks that ``edge_id`` is a permutation (a
    bitmap of one byte per edge; `gnnflow check` runs it, writing relies on construction).
    """
    from gnnflow.io import release_pages, row_chunks

    tm = TypeMap.from_store(store)
    p = store.path
    n, m = store.num_nodes, store.num_edges
    for key in ("node_type", "edge_type", "edge_id"):
        if key not in store.extra:
            raise StoreError(f"{p / (key + '.npy')}: missing; not a homogenized heterogeneous store")
    if int(tm.node_type_offsets[-1]) != n or int(tm.edge_type_offsets[-1]) != m:
        raise StoreError(f"{p / 'meta.json'}: type offsets do not add up to {n} vertices / {m} edges")
    node_type = store.extra["node_type"]
    if node_type.shape != (n,):
        raise StoreError(f"{p / 'node_type.npy'}: must have {n} entries")
    for start, blk in row_chunks(node_type):
        ids = np.arange(start, start + blk.shape[0])
        if not np.array_equal(blk, np.searchsorted(tm.node_type_offsets, ids, side="right") - 1):
            raise StoreError(f"{p / 'node_type.npy'}: types are not contiguous ranges matching meta.json")
    edge_id, edge_type = store.extra["edge_id"], store.extra["edge_type"]
    if edge_id.shape != (m,) or edge_type.shape != (m,):
        raise StoreError(f"{p / 'edge_id.npy'}: must be a permutation of 0..{m - 1}")
    want_s = np.array([tm.node_types.index(e[0]) for e in tm.edge_types], dtype=np.int32)
    want_d = np.array([tm.node_types.index(e[2]) for e in tm.edge_types], dtype=np.int32)
    seen = np.zeros(m, dtype=bool) if full else None
    node_type_all = np.asarray(node_type)  # per vertex
    for start, eids in row_chunks(edge_id):
        stop = start + eids.shape[0]
        if eids.size and (int(eids.min()) < 0 or int(eids.max()) >= m):
            raise StoreError(f"{p / 'edge_id.npy'}: must be a permutation of 0..{m - 1}")
        if seen is not None:
            if seen[eids].any() or np.unique(eids).shape[0] != eids.shape[0]:
                raise StoreError(f"{p / 'edge_id.npy'}: must be a permutation of 0..{m - 1}")
            seen[eids] = True
        types = np.asarray(edge_type[start:stop])
        if not np.array_equal(tm.to_type_eid(eids)[0], types):
            raise StoreError(f"{p / 'edge_type.npy'}: does not match the edge id ranges in meta.json")
        # Endpoint types must match each edge's canonical triple.
        dst = np.searchsorted(store.indptr, np.arange(start, stop), side="right") - 1
        src_t = node_type_all[np.asarray(store.indices[start:stop])]
        if not (np.array_equal(want_s[types], src_t) and np.array_equal(want_d[types], node_type_all[dst])):
            raise StoreError(f"{p / 'edge_type.npy'}: an edge's endpoint types differ from its edge type")
        release_pages(store.indices, edge_type)
    return tm


def heterogenize(store: GraphStore, include_reverse: bool = False) -> HeteroGraph:
    """Read a homogenized store back into per-type ids (the inverse of :func:`homogenize`)."""
    tm = validate_hetero(store)
    n, m = store.num_nodes, store.num_edges
    slot_of_eid = np.empty(m, dtype=np.int64)
    slot_of_eid[np.asarray(store.extra["edge_id"])] = np.arange(m, dtype=np.int64)
    dst_of_slot = np.repeat(np.arange(n, dtype=np.int64), np.diff(store.indptr))
    reverse = {tuple(e) for e in store.meta.get("reverse_edge_types", [])}
    edges = {}
    for r, (s, rel, d) in enumerate(tm.edge_types):
        if (s, rel, d) in reverse and not include_reverse:
            continue
        slots = slot_of_eid[tm.edge_type_offsets[r] : tm.edge_type_offsets[r + 1]]
        edges[(s, rel, d)] = (tm.to_type_id(store.indices[slots])[1],
                              tm.to_type_id(dst_of_slot[slots])[1])
    labels, features, splits = {}, {}, {}
    for ti, t in enumerate(tm.node_types):
        lo, hi = int(tm.node_type_offsets[ti]), int(tm.node_type_offsets[ti + 1])
        y = np.asarray(store.labels[lo:hi])
        if (y >= 0).any():
            labels[t] = y.copy()
        if f"features_{t}" in store.extra:
            features[t] = np.asarray(store.extra[f"features_{t}"])
    for split in ("train", "val", "test"):
        ids = np.asarray(store.split(split))
        types, local = tm.to_type_id(ids)
        splits[split] = {t: local[types == ti] for ti, t in enumerate(tm.node_types)
                         if (types == ti).any()}
    return HeteroGraph(
        name=store.name,
        num_nodes={t: tm.num_nodes_of(t) for t in tm.node_types},
        edges=edges, features=features, labels=labels, splits=splits,
        num_classes=store.num_classes, target_node_type=store.meta.get("target_node_type"),
    )


# ---------------------------------------------------------------------------
# The typed-directory layout read by `gnnflow homogenize` (docs/data.md).

def write_typed_dir(hg: HeteroGraph, out: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Write ``hg`` in the typed-directory layout (atomically)."""
    from gnnflow.io import atomic_dir

    with atomic_dir(out, overwrite=overwrite) as tmp:
        graph = {
            "name": hg.name,
            "num_nodes": hg.num_nodes,
            "edge_types": [list(e) for e in hg.edge_types],
            "num_classes": hg.num_classes,
            "target_node_type": hg.target_node_type,
        }
        (tmp / "graph.json").write_text(json.dumps(graph, indent=2) + "\n")
        for t in hg.node_types:
            d = tmp / "nodes" / t
            d.mkdir(parents=True)
            if t in hg.features:
                np.save(d / "features.npy", np.asarray(hg.features[t], dtype=np.float32))
            if t in hg.labels:
                np.save(d / "labels.npy", np.asarray(hg.labels[t], dtype=np.int64))
            for split, per_type in hg.splits.items():
                if t in per_type:
                    np.save(d / f"{split}_idx.npy", np.asarray(per_type[t], dtype=np.int64))
        (tmp / "edges").mkdir()
        for e in hg.edge_types:
            src, dst = hg.edges[e]
            np.save(tmp / "edges" / f"{'___'.join(e)}.npy", np.stack([src, dst]).astype(np.int64))


def read_typed_dir(path: str | os.PathLike[str]) -> HeteroGraph:
    """Read the typed-directory layout; raise GnnflowError naming a bad file."""
    from gnnflow.data.arrays import load_npy

    path = Path(path)
    gfile = path / "graph.json"
    if not gfile.exists():
        raise GnnflowError(f"{gfile}: missing; a typed graph directory needs graph.json "
                           "(see docs/data.md)")
    try:
        graph = json.loads(gfile.read_text())
        num_nodes = {str(t): int(c) for t, c in graph["num_nodes"].items()}
        etypes = [tuple(e) for e in graph["edge_types"]]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise GnnflowError(f"{gfile}: needs 'num_nodes' {{type: count}} and 'edge_types' "
                           f"[[src, rel, dst], ...] ({exc})") from None
    edges = {}
    for e in etypes:
        f = path / "edges" / f"{'___'.join(e)}.npy"
        arr = load_npy(f)
        if arr.ndim != 2 or arr.shape[0] != 2:
            raise GnnflowError(f"{f}: must be an int array of shape [2, num_edges], got {arr.shape}")
        edges[e] = (arr[0].astype(np.int64), arr[1].astype(np.int64))
    features, labels, splits = {}, {}, {}
    for t in num_nodes:
        d = path / "nodes" / t
        if (d / "features.npy").exists():
            features[t] = load_npy(d / "features.npy").astype(np.float32)
        if (d / "labels.npy").exists():
            labels[t] = load_npy(d / "labels.npy").astype(np.int64)
        for split in ("train", "val", "test"):
            if (d / f"{split}_idx.npy").exists():
                splits.setdefault(split, {})[t] = load_npy(d / f"{split}_idx.npy").astype(np.int64)
    num_classes = int(graph.get("num_classes") or
                      max((int(y.max()) + 1 for y in labels.values() if y.size), default=0))
    hg = HeteroGraph(name=str(graph.get("name", path.name)), num_nodes=num_nodes, edges=edges,
                     features=features, labels=labels, splits=splits, num_classes=num_classes,
                     target_node_type=graph.get("target_node_type"))
    hg.validate(str(path))
    return hg


def hetero_equal(a: HeteroGraph, b: HeteroGraph) -> list[str]:
    """Differences between two typed graphs (empty when equal); used by round-trip checks."""
    diffs = []
    if a.num_nodes != b.num_nodes:
        diffs.append(f"num_nodes {a.num_nodes} != {b.num_nodes}")
    if set(a.edges) != set(b.edges):
        diffs.append(f"edge types {sorted(a.edges)} != {sorted(b.edges)}")
    for e in set(a.edges) & set(b.edges):
        for i, side in enumerate(("src", "dst")):
            if not np.array_equal(a.edges[e][i], b.edges[e][i]):
                diffs.append(f"{e} {side} differ")
    if set(a.features) != set(b.features):
        diffs.append(f"feature types {sorted(a.features)} != {sorted(b.features)}")
    for t in set(a.features) & set(b.features):
        if not np.array_equal(a.features[t], b.features[t]):
            diffs.append(f"features of {t} differ")
    for t in set(a.labels) | set(b.labels):
        ya, yb = a.labels.get(t), b.labels.get(t)
        if ya is None or yb is None or not np.array_equal(ya, yb):
            diffs.append(f"labels of {t} differ")
    for split in ("train", "val", "test"):
        sa, sb = a.splits.get(split, {}), b.splits.get(split, {})
        for t in set(sa) | set(sb):
            if t not in sa or t not in sb or not np.array_equal(np.sort(sa[t]), np.sort(sb[t])):
                diffs.append(f"{split} split of {t} differs")
    return diffs
