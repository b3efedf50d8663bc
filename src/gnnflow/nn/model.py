"""Models: a stack of block layers with activation and dropout between them.

``GNN.layer_step(i, block, h_src)`` is one layer of the stack (input dropout
before conv 0, conv ``i``, then activation and dropout unless it is the last),
so distributed strategies can run the layers one by one and communicate
between them (GSplit §5 Algorithm 2: shuffle, then ``gnn_layer``).
``GNN.forward(blocks, x)`` is the plain loop.  A relational model (RGCN, R-GAT) starts
with an input layer (:class:`~gnnflow.nn.typed_input.TypedInput`) that maps per-type
rows to one width; ``GNN.embed`` runs it, so ``x`` is then :class:`TypedRows`.

Every strategy builds its model with :func:`build_model_from_config` (the
model settings of a :class:`~gnnflow.config.TrainConfig`, passed unchanged),
which calls :func:`build_model`, the one constructor.  A model given as a layer class
(``pyg:ConvName``, ``module.path:Name``, ``path/to/file.py:Name``; docs/models.md) is a stack
of that class's layers (:mod:`gnnflow.nn.layer_class`) in the same :class:`GNN`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnflow.config import (
    AGGREGATORS,
    HEADED_MODELS,
    LAYER_CLASS_FORMS,
    MODELS,
    RELATIONAL_MODELS,
    TrainConfig,
    is_layer_class,
)
from gnnflow.errors import ConfigError
from gnnflow.nn.dropout import Dropout
from gnnflow.nn.gat import GATConv
from gnnflow.nn.gcn import GCNConv
from gnnflow.nn.rgat import RGATConv
from gnnflow.nn.rgcn import RGCNConv
from gnnflow.nn.sage import SAGEConv
from gnnflow.nn.typed_input import GraphSchema, TypedInput, TypedRows
from gnnflow.sampling.block import Block

#: model names build_model accepts: the user-facing ones (config.MODELS; "gcn" is symmetrically
#: normalised) and "gcn-right", the row-normalised GCN that MG-GCN's norm=right builds
MODEL_NAMES = (*MODELS, "gcn-right")
#: hidden activations by name (the names gnnflow.config.ACTIVATIONS lists)
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "elu": F.elu}


def default_activation(model: str) -> str:
    """The standard hidden activation of ``model``: ELU for GAT and R-GAT (Veličković et al.), else ReLU."""
    return "elu" if model in HEADED_MODELS else "relu"


class DstLinear(nn.Module):
    """A linear layer that ignores the edges: ``h_dst = W h_src[:num_dst] + b`` (the MLP baseline)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        return self.linear(h_src[: block.num_dst])


class GNN(nn.Module):
    """``num_layers`` block layers; ``forward(blocks, x)`` with ``blocks`` ordered input -> output.

    ``input_dropout`` drops input features before the first layer, ``dropout``
    the hidden representations after each hidden layer's activation.
    ``head_reduce`` (GAT): hidden layers concatenate their heads, the last
    layer averages them.  ``input_layer`` (relational models): maps the input rows
    (:class:`TypedRows`) to the first layer's width (:meth:`embed`).
    """

    def __init__(self, layers: Sequence[nn.Module], dropout: float = 0.0, head_reduce: bool = False,
                 activation: str = "relu", input_dropout: float = 0.0,
                 input_layer: nn.Module | None = None) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"activation: unknown {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        self.layers = nn.ModuleList(layers)
        self.dropout = Dropout(dropout)
        self.input_dropout = Dropout(input_dropout)
        self.activation = activation
        self.head_reduce = head_reduce
        self.input_layer = input_layer

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def embed(self, x: torch.Tensor | TypedRows) -> torch.Tensor:
        """The first layer's input rows: ``x`` itself, or the input layer's map of typed rows."""
        if self.input_layer is None:
            if isinstance(x, TypedRows):
                raise ValueError("GNN.embed: typed rows for a model without an input layer")
            return x
        return self.input_layer(x)

    def projects_first(self, i: int) -> bool:
        """Whether conv ``i`` is a GCN layer that projects before aggregating (it narrows the
        rows), so a caller may project rows where they live and move the narrow ones."""
        return isinstance(self.layers[i], GCNConv) and self.layers[i].projects_first

    def narrows(self, i: int) -> bool:
        """Whether conv ``i`` takes rows projected before it aggregates (:meth:`project`): a
        narrowing GCN layer (:meth:`projects_first`) or a narrowing SAGE layer, which then
        also reads its destinations' own unprojected rows (``layer_step``'s ``h_dst``)."""
        return isinstance(self.layers[i], (GCNConv, SAGEConv)) and self.layers[i].projects_first

    def project(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Rows of layer ``i``'s input, (input dropout if first) projected by its weight: what
        ``layer_step(i, block, rows, projected=True)`` takes (see :meth:`narrows`)."""
        if not self.narrows(i):
            raise ValueError(f"layer {i} aggregates before projecting; it takes unprojected rows")
        if i == 0:
            h = self.input_dropout(h)
        return self.layers[i].project(h)

    def layer_step(self, i: int, block: Block, h_src: torch.Tensor, projected: bool = False,
                   h_dst: torch.Tensor | None = None) -> torch.Tensor:
        """Layer ``i`` on ``block``: (input dropout if first) conv, then (unless last) activation and
        dropout.  ``projected``: the rows come from :meth:`project` (dropout and weight applied);
        ``h_dst``: the destinations' own unprojected rows, which a narrowing SAGE layer reads."""
        if projected:
            if h_dst is not None and i == 0:
                h_dst = self.input_dropout(h_dst)
            h = self.layers[i](block, h_src, projected=True, h_dst=h_dst)
        else:
            if i == 0:
                h_src = self.input_dropout(h_src)
            h = self.layers[i](block, h_src)
        last = i == len(self.layers) - 1
        if self.head_reduce:
            h = h.mean(1) if last else h.flatten(1)
        if not last:
            if self.activation == "relu":  # fused into the dropout mask (gnnflow.nn.dropout)
                # over the conv's own output where nothing else holds it (no view of heads)
                inplace = getattr(self.layers[i], "fresh_output", False) and not self.head_reduce
                h = self.dropout(h, relu=True, inplace=inplace)
            else:
                h = self.dropout(ACTIVATIONS[self.activation](h))
        return h

    def forward(self, blocks: Sequence[Block], x: torch.Tensor | TypedRows) -> torch.Tensor:
        if len(blocks) != len(self.layers):
            raise ValueError(f"GNN.forward: {len(blocks)} blocks for {len(self.layers)} layers")
        h = self.embed(x)
        for i, block in enumerate(blocks):
            h = self.layer_step(i, block, h)
        return h


def build_model(model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int,
                dropout: float = 0.0, heads: int = 1, *, out_heads: int = 1, input_dropout: float = 0.0,
                feat_drop: float = 0.0, attn_drop: float = 0.0, activation: str | None = None,
                aggregator: str = "mean", num_bases: int = 0, schema: GraphSchema | None = None,
                model_opts: dict[str, Any] | None = None) -> GNN:
    """The named model (see :data:`MODEL_NAMES`), or a layer class (``model_opts``: its keyword
    options; :mod:`gnnflow.nn.layer_class`), with ``num_layers`` layers.

    GAT, R-GAT: ``heads`` heads of ``hidden`` features in every hidden layer
    (concatenated: the next layer reads ``heads * hidden``), ``out_heads`` heads
    in the output layer (averaged), ``feat_drop``/``attn_drop`` in every layer.
    SAGE: ``aggregator`` ``mean`` or ``gcn``.  ``activation`` None: the
    model's standard one (:func:`default_activation`).  RGCN, R-GAT: ``schema`` is
    the typed graph's (relations, vertex types, their feature widths); the input
    layer maps every type to ``hidden`` (``in_dim`` is not used); RGCN: ``num_bases``.
    """
    if is_layer_class(model):
        if num_layers < 1:
            raise ConfigError(f"num_layers: must be >= 1, got {num_layers}")
        from gnnflow.nn.layer_class import class_layers

        layers = class_layers(model, [in_dim] + [hidden] * (num_layers - 1) + [out_dim], model_opts)
        return GNN(layers, dropout=dropout, activation=activation or "relu", input_dropout=input_dropout)
    if model not in MODEL_NAMES:
        raise ConfigError(f"model: unknown model {model!r}; choose one of {', '.join(MODEL_NAMES)} or a layer "
                          f"class ({LAYER_CLASS_FORMS})")
    if model_opts:
        raise ConfigError(f"model_opts: the built-in model {model!r} takes none")
    input_layer = None
    if model in RELATIONAL_MODELS:
        if schema is None:
            raise ConfigError(f"model {model}: needs a homogenized heterogeneous graph (its edge and vertex "
                              "types); prepare one with `gnnflow homogenize` or `gnnflow prepare synthetic-hetero`")
        input_layer = TypedInput(schema.feature_dims, hidden)
        in_dim = hidden
    if num_layers < 1:
        raise ConfigError(f"num_layers: must be >= 1, got {num_layers}")
    if aggregator not in AGGREGATORS:
        raise ConfigError(f"aggregator: unknown {aggregator!r}; choose one of {', '.join(AGGREGATORS)}")
    dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
    layers: list[nn.Module] = []
    for i in range(num_layers):
        d_in, d_out = dims[i], dims[i + 1]
        if model == "sage":
            layers.append(SAGEConv(d_in, d_out, aggregator=aggregator))
        elif model in ("gcn", "gcn-right"):
            layers.append(GCNConv(d_in, d_out, norm="both" if model == "gcn" else "right"))
        elif model == "gat":
            layers.append(GATConv(d_in * (heads if i else 1), d_out, out_heads if i == num_layers - 1 else heads,
                                  feat_drop=feat_drop, attn_drop=attn_drop))
        elif model == "rgcn":
            assert schema is not None
            layers.append(RGCNConv(d_in, d_out, schema.num_rels, num_bases=num_bases))
        elif model == "rgat":
            assert schema is not None
            layers.append(RGATConv(d_in * (heads if i else 1), d_out, schema.num_rels,
                                   out_heads if i == num_layers - 1 else heads, schema.rel_dst_types,
                                   feat_drop=feat_drop, attn_drop=attn_drop))
        else:
            layers.append(DstLinear(d_in, d_out))
    return GNN(layers, dropout=dropout, head_reduce=model in HEADED_MODELS,
               activation=activation or default_activation(model), input_dropout=input_dropout,
               input_layer=input_layer)


def build_model_from_config(cfg: TrainConfig, in_dim: int, out_dim: int, model: str | None = None,
                            schema: GraphSchema | None = None) -> GNN:
    """:func:`build_model` with every model setting of ``cfg`` (``model`` overrides ``cfg.model``'s
    name, e.g. ``gcn-right`` for a row-normalised GCN; ``schema``: a relational model's graph)."""
    return build_model(model or cfg.model, in_dim, cfg.hidden, out_dim, cfg.num_layers, cfg.dropout, cfg.heads,
                       out_heads=cfg.out_heads, input_dropout=cfg.input_dropout, feat_drop=cfg.feat_drop,
                       attn_drop=cfg.attn_drop, activation=cfg.activation, aggregator=cfg.aggregator,
                       num_bases=cfg.num_bases, schema=schema, model_opts=cfg.model_opts)
