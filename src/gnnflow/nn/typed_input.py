"""The input of a relational model: per-type features at their own dims (DistDGLv2 §4.1.4).

A homogenized heterogeneous graph keeps each vertex type's features at its own
width (``features_<ntype>``), and some types have none (ogbn-mag's authors,
institutions and fields).  :class:`TypedInput` maps every input row to one
hidden width: a linear projection per featured type, a learnable embedding row
per vertex of a featureless type.  The rows come as :class:`TypedRows` (which
type each row is, its per-type id, and the features of each type's rows), what
a strategy gathers for a block's sources.
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
    (int64), and ``features[t]``, the feature rows of type ``t``'s rows in row order (featured
    types only)."""

    types: torch.Tensor
    ids: torch.Tensor
    features: dict[int, torch.Tensor]

    def __len__(self) -> int:
        return int(self.types.shape[0])

    def to(self, device: torch.device | str) -> TypedRows:
        return TypedRows(self.types.to(device), self.ids.to(device),
                         {t: x.to(device) for t, x in self.features.items()})


class TypedInput(nn.Module):
    r"""``h_v = W_{t(v)} x_v + b_{t(v)}`` for a vertex of a featured type, ``h_v = E_{t(v)}[id(v)]``
    (a learnable row per vertex) for one of a featureless type.

    ``feature_dims[t]``: the feature width of type ``t`` (None: featureless);
    ``num_nodes[t]``: its vertex count (the rows of its embedding).  Input
    :class:`TypedRows` of ``n`` rows, output ``[n, dim]``.  The embeddings are dense
    ``nn.Embedding`` tables (one process holds them; partitioned sparse ones come with
    the distributed strategies).
    """

    def __init__(self, feature_dims: Sequence[int | None], num_nodes: Sequence[int], dim: int) -> None:
        super().__init__()
        if len(feature_dims) != len(num_nodes):
            raise ValueError(f"TypedInput: {len(feature_dims)} feature widths for {len(num_nodes)} vertex types")
        self.dim = dim
        self.project = nn.ModuleDict({str(t): nn.Linear(d, dim) for t, d in enumerate(feature_dims) if d})
        self.embed = nn.ModuleDict({str(t): nn.Embedding(n, dim) for t, (d, n) in enumerate(zip(
            feature_dims, num_nodes, strict=True)) if not d})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.project.values():
            lin.reset_parameters()
        for emb in self.embed.values():
            nn.init.xavier_uniform_(emb.weight)  # as DGL's RGCN examples embed featureless types

    def forward(self, rows: TypedRows) -> torch.Tensor:
        positions, parts = [], []
        for key, lin in self.project.items():
            pos = torch.nonzero(rows.types == int(key)).squeeze(1)
            positions.append(pos)
            parts.append(lin(rows.features[int(key)]))
        for key, emb in self.embed.items():
            pos = torch.nonzero(rows.types == int(key)).squeeze(1)
            positions.append(pos)
            parts.append(emb(rows.ids.index_select(0, pos)))
        order = torch.cat(positions)
        if order.shape[0] != len(rows):
            raise ValueError(f"TypedInput: {len(rows) - order.shape[0]} rows of a vertex type it does not know")
        # one gather puts the per-type results back in row order
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.shape[0], device=order.device)
        return torch.cat(parts).index_select(0, inverse)
