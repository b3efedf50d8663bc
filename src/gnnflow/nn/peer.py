"""The same models in DGL 1.1's own layers, for the peers that train them (DistDGL, ``bench recipes``).

:class:`DGLModel` mirrors :class:`gnnflow.nn.model.GNN` layer for layer
(``dgl.nn`` ``SAGEConv``, ``GraphConv``, ``GATConv``; input dropout, hidden
activation and dropout, GAT heads concatenated in hidden layers and averaged in
the output layer), so a run of ours and a run of DGL's differ only in the
layers' code.  With the settings of a standard recipe it is the model of DGL's
own example (``examples/pytorch/{gcn,gat,graphsage}``).
"""

from __future__ import annotations

from typing import Any

import torch

from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError
from gnnflow.nn.model import ACTIVATIONS, default_activation


class DGLModel(torch.nn.Module):
    """``forward(blocks_or_graphs, x)``: one DGL block (or the whole graph) per layer."""

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int,
                 dropout: float = 0.0, heads: int = 1, *, out_heads: int = 1, input_dropout: float = 0.0,
                 feat_drop: float = 0.0, attn_drop: float = 0.0, activation: str | None = None,
                 aggregator: str = "mean") -> None:
        super().__init__()
        import dgl.nn as dglnn

        if model not in ("sage", "gcn", "gat"):
            raise ConfigError(f"model: DGL's layers run sage, gcn or gat, not {model!r}")
        self.model = model
        self.layers = torch.nn.ModuleList()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        for i in range(num_layers):
            last = i == num_layers - 1
            if model == "sage":
                self.layers.append(dglnn.SAGEConv(dims[i], dims[i + 1], aggregator))
            elif model == "gcn":
                self.layers.append(dglnn.GraphConv(dims[i], dims[i + 1], allow_zero_in_degree=True))
            else:
                self.layers.append(dglnn.GATConv(dims[i] * (heads if i else 1), dims[i + 1],
                                                 out_heads if last else heads, feat_drop=feat_drop,
                                                 attn_drop=attn_drop, allow_zero_in_degree=True))
        #: columns of each layer's output (after GAT's head merge)
        self.out_widths = [dims[i + 1] * (heads if model == "gat" and i < num_layers - 1 else 1)
                           for i in range(num_layers)]
        self.input_dropout = torch.nn.Dropout(input_dropout)
        self.dropout = torch.nn.Dropout(dropout)
        self.activation = ACTIVATIONS[activation or default_activation(model)]

    def layer(self, i: int, block: Any, h: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` on one block, with what follows it: GAT's head merge, and in a hidden
        layer the activation and dropout (layer-wise inference runs the layers one at a time)."""
        h = self.layers[i](block, h)
        last = i == len(self.layers) - 1
        if self.model == "gat":
            h = h.flatten(1) if not last else h.mean(1)
        if not last:
            h = self.dropout(self.activation(h))
        return h

    def forward(self, blocks: list[Any], x: torch.Tensor) -> torch.Tensor:
        if len(blocks) != len(self.layers):
            raise ValueError(f"{len(blocks)} blocks for {len(self.layers)} layers")
        h = self.input_dropout(x)
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return h


def dgl_model_from_config(cfg: TrainConfig, in_dim: int, out_dim: int) -> DGLModel:
    """:class:`DGLModel` with every model setting of ``cfg`` (as :func:`gnnflow.nn.build_model_from_config`)."""
    return DGLModel(cfg.model, in_dim, cfg.hidden, out_dim, cfg.num_layers, cfg.dropout, cfg.heads,
                    out_heads=cfg.out_heads, input_dropout=cfg.input_dropout, feat_drop=cfg.feat_drop,
                    attn_drop=cfg.attn_drop, activation=cfg.activation, aggregator=cfg.aggregator)
