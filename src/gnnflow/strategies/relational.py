"""A homogenized heterogeneous store as a relational run reads it (DistDGLv2 §4.1.1, §4.1.4).

The store keeps one CSR with an edge type per slot (§4.1.1) and each vertex
type's features at their own width under type-specific ids (§4.1.4).  A run
that samples per relation or trains RGCN / R-GAT reads, through
:class:`TypedGraph`: the model's view of the schema (:class:`GraphSchema`),
fanouts whose relation names are resolved to relation ids, a typed sampler,
and a block's input rows as :class:`TypedRows` (per-type features gathered by
per-type id, the featureless types' learnable rows from
:class:`~gnnflow.strategies.embedding.NodeEmbeddings`).

A distributed rank reads none of the store's arrays: :func:`graph_schema` and
:func:`resolve_fanouts` need only its ``meta.json`` (a :class:`TypeMap`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gnnflow.data.hetero import TypeMap
from gnnflow.data.meta import StoreMeta
from gnnflow.data.store import GraphStore
from gnnflow.errors import ConfigError, GnnflowError
from gnnflow.nn.typed_input import GraphSchema, TypedRows
from gnnflow.sampling import TypedNeighborSampler
from gnnflow.sampling.typed import LayerFanout
from gnnflow.strategies.embedding import NodeEmbeddings
from gnnflow.strategies.rows import take_rows


def graph_schema(meta: StoreMeta) -> GraphSchema:
    """What a relational model knows of a homogenized store, from its ``meta.json``: vertex
    counts and feature widths per type (``type_feature_dims``; absent: featureless), each
    relation's destination type."""
    tm = TypeMap.from_meta(meta)
    dims = meta.type_feature_dims or {}
    return GraphSchema(num_nodes=tuple(tm.num_nodes_of(t) for t in range(len(tm.node_types))),
                       feature_dims=tuple(int(dims[name]) if name in dims else None for name in tm.node_types),
                       rel_dst_types=tuple(tm.node_types.index(e[2]) for e in tm.edge_types))


def resolve_fanouts(typemap: TypeMap, fanouts: Sequence[int | dict[str, int]]) -> list[LayerFanout]:
    """``fanouts`` with relation names (``cites``, ``paper___cites___paper``, an id; ``*``: every
    relation not named) resolved to ``{relation id: count}``; a plain count stays."""
    return [f if not isinstance(f, dict) else _resolve(typemap, f) for f in fanouts]


def _resolve(typemap: TypeMap, layer: dict[str, int]) -> dict[int, int]:
    names = ["___".join(e) for e in typemap.edge_types]
    out: dict[int, int] = {}
    for name, count in layer.items():
        if name == "*":
            continue
        try:
            r = int(name) if str(name).isdigit() else typemap.etype_id(name)
        except GnnflowError as exc:
            raise ConfigError(f"fanouts: {exc}") from None
        if not 0 <= r < len(names) or r in out:
            raise ConfigError(f"fanouts: relation {name!r} is out of range or named twice; relations: "
                              f"{', '.join(names)}")
        out[r] = int(count)
    missing = [r for r in range(len(names)) if r not in out]
    if missing and "*" not in layer:
        raise ConfigError(f"fanouts: {layer} names no count for {', '.join(names[r] for r in missing)}; "
                          "name them or give '*' for the rest")
    return {**out, **{r: int(layer["*"]) for r in missing}}


def make_embeddings(schema: GraphSchema, offsets: np.ndarray, owned: np.ndarray, cfg: Any) -> NodeEmbeddings | None:
    """The learnable rows of the featureless vertices among ``owned`` (sorted global ids) for a
    relational model of ``cfg`` (``hidden`` wide, ``sparse_lr`` or ``lr``); None when the model is
    not relational or no type is featureless."""
    from gnnflow.config import RELATIONAL_MODELS

    featureless = [t for t, d in enumerate(schema.feature_dims) if not d]
    if cfg.model not in RELATIONAL_MODELS or not featureless:
        return None
    owned = np.asarray(owned, dtype=np.int64)
    types = np.searchsorted(offsets, owned, side="right") - 1
    lr = cfg.sparse_lr if cfg.sparse_lr is not None else cfg.lr
    return NodeEmbeddings(owned[np.isin(types, featureless)], cfg.hidden, offsets, featureless, schema.num_nodes,
                          cfg.seed, lr)


class TypedGraph:
    """The typed side of a homogenized store: types, edge types, per-type features, and (set by
    the strategy) the featureless types' embeddings."""

    def __init__(self, store: GraphStore) -> None:
        if "edge_type" not in store.extra or not store.meta.node_types:
            raise ConfigError(f"graph {store.path}: has no edge types; a relational model or per-relation "
                              "fanouts need a homogenized heterogeneous store (`gnnflow homogenize`, "
                              "`gnnflow prepare synthetic-hetero`)")
        self.typemap = tm = TypeMap.from_store(store)
        self.etypes = store.extra["edge_type"]
        self.offsets = tm.node_type_offsets
        self.features = {t: store.extra[f"features_{name}"] for t, name in enumerate(tm.node_types)
                         if f"features_{name}" in store.extra}
        self.schema = graph_schema(store.meta)
        #: the featureless types' rows (:func:`make_embeddings`), what :meth:`rows` attaches
        self.embeddings: NodeEmbeddings | None = None

    def relation_fanouts(self, fanouts: Sequence[int | dict[str, int]]) -> list[LayerFanout]:
        """``fanouts`` with relation names resolved (:func:`resolve_fanouts`)."""
        return resolve_fanouts(self.typemap, fanouts)

    def sampler(self, indptr: np.ndarray, indices: np.ndarray, fanouts: Sequence[int | dict[str, int]],
                seed: int = 0) -> TypedNeighborSampler:
        """A typed sampler over the store's CSR with ``fanouts`` (names resolved)."""
        return TypedNeighborSampler(indptr, indices, self.etypes, self.relation_fanouts(fanouts),
                                    num_rels=self.schema.num_rels, seed=seed, node_type_offsets=self.offsets)

    def rows(self, ids: torch.Tensor, embeddings: bool = True, learn: bool = False) -> TypedRows:
        """The input rows of vertices ``ids`` (homogeneous ids): types, per-type ids, the feature
        rows of each featured type and, with :attr:`embeddings` (unless ``embeddings`` is false),
        the featureless types' rows (``learn``: as the leaf of a training step,
        :meth:`NodeEmbeddings.attach`)."""
        gid = ids.numpy()
        types = np.searchsorted(self.offsets, gid, side="right") - 1
        local = gid - self.offsets[types]
        features = {}
        for t, table in self.features.items():
            sel = local[types == t]
            features[t] = take_rows(table, sel)
        rows = TypedRows(torch.from_numpy(types.astype(np.int64)), torch.from_numpy(local), features)
        if self.embeddings is None or not embeddings:
            return rows
        return self.embeddings.attach(rows, learn=learn)

    def vertex_types(self) -> torch.Tensor:
        """The type of every vertex (int64)."""
        counts = np.diff(self.offsets)
        return torch.from_numpy(np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts))
