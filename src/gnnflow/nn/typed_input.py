"""The input of a relational model: per-type features at their own dims (DistDGLv2 §4.1.4).

A homogenized heterogeneous graph keeps each vertex type's features at its own
width (``features_<ntype>``), and some types have none (ogbn-mag's authors,
institutions and fields).  :class:`TypedInput` maps every input row to one
hidden width: a linear projection per featured type; a vertex of a featureless
type arrives as its learnable embedding row, already at that width.  The rows
come as :class:`TypedRows` (which type each row is, its per-type id, and the rows
of each type in row order), what a strategy gathers for a block's sources.

The embedding rows are not parameters of the model: they are a table partitioned
like the features, each row owned by one process and updated there by a sparse
optimizer on the rows a batch touched (:mod:`gnnflow.strategies.embedding`,
DGL's ``DistEmbedding`` with ``SparseAdam``), so a rank holds only its own rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class GraphSchema:
    """What a relational model knows of a homogenized graph: per vertex type its vertex count
    and feature width (None: featureless), per relation its destination vertex type."""

    num_nodes: tuple[int, ...]
    feature_dims: tuple[int | None, ...]
    rel_dst_types: tuple[int, ...]

    @property
    def num_rels(self) -> int:
        return len(self.rel_dst_types)


@dataclass
class TypedRows:
    """Input rows of several vertex types: ``types[i]`` and ``ids[i]`` (per-type id) of row ``i``
    (int64), and ``features[t]``, the rows of type ``t``'s vertices in row order: their features
    (a featured type) or their embedding rows (a featureless type, once gathered)."""

    types: torch.Tensor
    ids: torch.Tensor
    features: dict[int, torch.Tensor]

    def __len__(self) -> int:
        return int(self.types.shape[0])

    def to(self, device: torch.device | str) -> TypedRows:
        return TypedRows(self.types.to(device), self.ids.to(device),
                         {t: x.to(device) for t, x in self.features.items()})


class TypedInput(nn.Module):
    r"""``h_v = W_{t(v)} x_v + b_{t(v)}`` for a vertex of a featured type, ``h_v = e_v`` (its
    learnable embedding row, ``dim`` wide) for one of a featureless type.

    ``feature_dims[t]``: the feature width of type ``t`` (None: featureless).  Input
    :class:`TypedRows` of ``n`` rows whose ``features[t]`` hold, for a featureless type, the
    embedding rows of its vertices (:class:`gnnflow.strategies.embedding.NodeEmbeddings`
    gathers them); output ``[n, dim]``.
    """

    def __init__(self, feature_dims: Sequence[int | None], dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.project = nn.ModuleDict({str(t): nn.Linear(d, dim) for t, d in enumerate(feature_dims) if d})
        self.featureless = tuple(t for t, d in enumerate(feature_dims) if not d)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.project.values():
            lin.reset_parameters()

    def forward(self, rows: TypedRows) -> torch.Tensor:
        positions, parts = [], []
        for key, lin in self.project.items():
            positions.append(torch.nonzero(rows.types == int(key)).squeeze(1))
            parts.append(lin(rows.features[int(key)]))
        for t in self.featureless:
            pos = torch.nonzero(rows.types == t).squeeze(1)
            emb = rows.features.get(t)
            if emb is None or emb.shape != (pos.shape[0], self.dim):
                have = "none" if emb is None else tuple(emb.shape)
                raise ValueError(f"TypedInput: vertex type {t} is featureless: its rows are its embedding rows "
                                 f"[{pos.shape[0]}, {self.dim}], got {have} (gnnflow.strategies.embedding)")
            positions.append(pos)
            parts.append(emb)
        order = torch.cat(positions)
        if order.shape[0] != len(rows):
            raise ValueError(f"TypedInput: {len(rows) - order.shape[0]} rows of a vertex type it does not know")
        # one gather puts the per-type results back in row order
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.shape[0], device=order.device)
        return torch.cat(parts).index_select(0, inverse)
