"""Heterogeneous graphs: the in-memory form and the type maps of a homogenized store (DistDGLv2 §4.1.1).

DistDGLv2 §4.1.1: "Because METIS can only partition a homogeneous graph,
DistDGLv2 homogenizes a heterogeneous graph and stores the entire graph in a
single adjacency matrix, in which all vertices, regardless of their vertex
types, are assigned with unique vertex IDs ... vertices and edges of the same
type are assigned with contiguous IDs and vertex types and edge types are
stored as metadata."  §4.1.4 keeps features per vertex type at their own
dims and addresses them with type-specific ids.

* :class:`HeteroGraph` — vertex types with counts (and optional per-type features and labels),
  canonical edge types ``(src_type, relation, dst_type)`` with their edges;
* :class:`TypeMap` — both directions between ``(type, per-type id)`` and homogeneous ids of a
  homogenized store (types in sorted order, each a contiguous id range);
* :func:`validate_hetero` — the checks of a homogenized store's type arrays.

The algorithm that writes such a store is :mod:`gnnflow.data.homogenize`; the per-type directory
format that ``gnnflow prepare import`` reads is :mod:`gnnflow.data.typed_dir`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gnnflow.data.meta import StoreMeta
from gnnflow.data.store import GraphStore
from gnnflow.errors import GnnflowError, StoreError

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
    def from_meta(cls, meta: StoreMeta) -> TypeMap:
        for key in ("node_types", "node_type_offsets", "edge_types", "edge_type_offsets"):
            if getattr(meta, key) is None:
                raise StoreError(f"meta.json: missing {key!r}; the store was not written by homogenize")
        return cls(meta.node_types or [], meta.node_type_offsets or [], meta.edge_types or [],
                   meta.edge_type_offsets or [])

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


def to_homogeneous_id(store_or_meta: GraphStore | StoreMeta, ntype: str | int,
                      local_ids: Any) -> np.ndarray:
    """Homogeneous ids of per-type vertex ids (see :class:`TypeMap`)."""
    return _typemap(store_or_meta).to_homogeneous_id(ntype, local_ids)


def to_type_id(store_or_meta: GraphStore | StoreMeta,
               homogeneous_ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(type index, per-type id)`` of homogeneous vertex ids (see :class:`TypeMap`)."""
    return _typemap(store_or_meta).to_type_id(homogeneous_ids)


def _typemap(x: GraphStore | StoreMeta) -> TypeMap:
    return TypeMap.from_meta(x if isinstance(x, StoreMeta) else x.meta)


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


# ---------------------------------------------------------------------------
# The typed-directory layout read by `gnnflow homogenize` (docs/data.md).
