"""Models: a stack of block layers with activation and dropout between them.

``GNN.layer_step(i, block, h_src)`` is one layer of the stack (conv ``i``,
then ReLU and dropout unless it is the last), so distributed strategies can
run the layers one by one and communicate between them (GSplit §5 Algorithm 2:
shuffle, then ``gnn_layer``).  ``GNN.forward(blocks, x)`` is the plain loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from gnnflow.errors import ConfigError
from gnnflow.nn.gat import GATConv
from gnnflow.nn.gcn import GCNConv
from gnnflow.nn.sage import SAGEConv
from gnnflow.sampling.block import Block

#: model names build_model accepts; "gcn" is symmetric, "gcn-right" row-normalised (MG-GCN).
MODEL_NAMES = ("sage", "gcn", "gcn-right", "gat", "mlp")


class DstLinear(nn.Module):
    """A linear layer that ignores the edges: ``h_dst = W h_src[:num_dst] + b`` (the MLP baseline)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        return self.linear(h_src[: block.num_dst])


class GNN(nn.Module):
    """``num_layers`` block layers; ``forward(blocks, x)`` with ``blocks`` ordered input -> output."""

    def __init__(self, layers: Sequence[nn.Module], dropout: float = 0.0, head_reduce: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)
        # GAT: hidden layers concatenate heads, the last averages them
        self.head_reduce = head_reduce

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def layer_step(self, i: int, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` on ``block``: conv, then (unless last) ReLU and dropout."""
        h = self.layers[i](block, h_src)
        last = i == len(self.layers) - 1
        if self.head_reduce:
            h = h.mean(1) if last else h.flatten(1)
        if not last:
            h = self.dropout(F.relu(h))
        return h

    def forward(self, blocks: Sequence[Block], x: torch.Tensor) -> torch.Tensor:
        if len(blocks) != len(self.layers):
            raise ValueError(f"GNN.forward: {len(blocks)} blocks for {len(self.layers)} layers")
        h = x
        for i, block in enumerate(blocks):
            h = self.layer_step(i, block, h)
        return h


def build_model(model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int,
                dropout: float = 0.0, heads: int = 1) -> GNN:
    """The named model (see :data:`MODEL_NAMES`) with ``num_layers`` layers."""
    if model not in MODEL_NAMES:
        raise ConfigError(f"model: unknown model {model!r}; choose one of {', '.join(MODEL_NAMES)}")
    if num_layers < 1:
        raise ConfigError(f"num_layers: must be >= 1, got {num_layers}")
    dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
    layers: list[nn.Module] = []
    for i in range(num_layers):
        d_in, d_out = dims[i], dims[i + 1]
        if model == "sage":
            layers.append(SAGEConv(d_in, d_out))
        elif model in ("gcn", "gcn-right"):
            layers.append(GCNConv(d_in, d_out, norm="both" if model == "gcn" else "right"))
        elif model == "gat":
            layers.append(GATConv(d_in * (heads if i else 1), d_out, heads))
        else:
            layers.append(DstLinear(d_in, d_out))
    return GNN(layers, dropout=dropout, head_reduce=model == "gat")
