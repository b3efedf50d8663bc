"""A homogenized heterogeneous store as a relational run reads it (DistDGLv2 §4.1.1, §4.1.4).

The store keeps one CSR with an edge type per slot (§4.1.1) and each vertex
type's features at their own width under type-specific ids (§4.1.4).  A run
that samples per relation or trains RGCN / R-GAT reads, through
:class:`TypedGraph`: the model's view of the schema (:class:`GraphSchema`),
fanouts whose relation names are resolved to relation ids, a typed sampler,
and a block's input rows as :class:`TypedRows` (per-type features gathered by
per-type id).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gnnflow.data.hetero import TypeMap
from gnnflow.data.store import GraphStore
from gnnflow.errors import ConfigError, GnnflowError
from gnnflow.nn.typed_input import GraphSchema, TypedRows
from gnnflow.sampling import TypedNeighborSampler
from gnnflow.sampling.typed import LayerFanout


class TypedGraph:
    """The typed side of a homogenized store: types, edge types, per-type features."""

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
        self.schema = GraphSchema(
            num_nodes=tuple(tm.num_nodes_of(t) for t in range(len(tm.node_types))),
            feature_dims=tuple(int(self.features[t].shape[1]) if t in self.features else None
                               for t in range(len(tm.node_types))),
            rel_dst_types=tuple(tm.node_types.index(e[2]) for e in tm.edge_types))

    def relation_fanouts(self, fanouts: Sequence[int | dict[str, int]]) -> list[LayerFanout]:
        """``fanouts`` with relation names (``cites``, ``paper___cites___paper``, an id; ``*``: every
        relation not named) resolved to ``{relation id: count}``; a plain count stays."""
        return [f if not isinstance(f, dict) else self._resolve(f) for f in fanouts]

    def _resolve(self, layer: dict[str, int]) -> dict[int, int]:
        names = ["___".join(e) for e in self.typemap.edge_types]
        out: dict[int, int] = {}
        for name, count in layer.items():
            if name == "*":
                continue
            try:
                r = int(name) if str(name).isdigit() else self.typemap.etype_id(name)
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

    def sampler(self, indptr: np.ndarray, indices: np.ndarray, fanouts: Sequence[int | dict[str, int]],
                seed: int = 0) -> TypedNeighborSampler:
        """A typed sampler over the store's CSR with ``fanouts`` (names resolved)."""
        return TypedNeighborSampler(indptr, indices, self.etypes, self.relation_fanouts(fanouts),
                                    num_rels=self.schema.num_rels, seed=seed, node_type_offsets=self.offsets)

    def rows(self, ids: torch.Tensor) -> TypedRows:
        """The input rows of vertices ``ids`` (homogeneous ids): types, per-type ids and the
        feature rows of each featured type."""
        gid = ids.numpy()
        types = np.searchsorted(self.offsets, gid, side="right") - 1
        local = gid - self.offsets[types]
        features = {}
        for t, table in self.features.items():
            sel = local[types == t]
            features[t] = torch.from_numpy(np.ascontiguousarray(table[sel], dtype=np.float32))
        return TypedRows(torch.from_numpy(types.astype(np.int64)), torch.from_numpy(local), features)

    def vertex_types(self) -> torch.Tensor:
        """The type of every vertex (int64)."""
        counts = np.diff(self.offsets)
        return torch.from_numpy(np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts))
