"""The same models in DGL 1.1's own layers, for the peers that train them (DistDGL, ``bench recipes``,
``bench hetero-accuracy``).

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


class DGLRelationalModel(torch.nn.Module):
    """RGCN or R-GAT in DGL 1.1's own modules, mirroring :class:`gnnflow.nn.model.GNN` with its
    :class:`~gnnflow.nn.typed_input.TypedInput`, for ``gnnflow bench hetero-accuracy`` and the DistDGL
    peer's RGCN (:mod:`gnnflow.strategies.distdgl_rgcn`, its featureless rows in a ``DistEmbedding``).

    * input: ``dgl.nn.HeteroLinear`` (an ``nn.Linear`` per featured vertex type) and
      ``dgl.nn.HeteroEmbedding`` (a row per vertex of a featureless type, initialised by its
      ``reset_parameters``, xavier-uniform, as DGL's ogbn-mag RGCN example does), then input
      dropout;
    * ``rgcn``: ``dgl.nn.RelGraphConv(regularizer="basis" or None, self_loop=True)`` on the
      homogeneous graph, the edge norm ``1 / |N_r(i)|`` (a mean per relation, as DGL's
      entity-classification example's ``norm_by_dst`` per relation);
    * ``rgat``: ``dgl.nn.HeteroGraphConv({relation: GATConv(in, out, heads, feat_drop,
      attn_drop)}, aggregate="sum")`` on the heterograph, heads concatenated in hidden layers
      and averaged in the output layer;
    * hidden layers: activation, then dropout.

    ``forward(graphs, inputs(features, ids))`` runs on DGL blocks (mini-batch training) or on
    the whole graph (evaluation): the homogeneous DGL graph with ``etype`` and ``norm`` edge
    data (rgcn) or the heterograph (rgat).
    """

    def __init__(self, model: str, schema: Any, ntypes: list[str], etypes: list[tuple[str, str, str]],
                 hidden: int, out_dim: int, num_layers: int, dropout: float = 0.0, heads: int = 1, *,
                 out_heads: int = 1, input_dropout: float = 0.0, feat_drop: float = 0.0, attn_drop: float = 0.0,
                 activation: str | None = None, num_bases: int = 0, embed: bool = True) -> None:
        super().__init__()
        import dgl.nn as dglnn

        if model not in ("rgcn", "rgat"):
            raise ConfigError(f"model: DGL's relational layers run rgcn or rgat, not {model!r}")
        self.model, self.ntypes = model, list(ntypes)
        dims = dict(zip(ntypes, schema.feature_dims, strict=True))
        self.project = dglnn.HeteroLinear({t: d for t, d in dims.items() if d}, hidden)
        featureless = {t: n for t, n, d in zip(ntypes, schema.num_nodes, schema.feature_dims, strict=True) if not d}
        #: the featureless types' rows; ``embed=False``: none, the caller passes them to :meth:`inputs`
        #: (the DistDGL peer's ``DistEmbedding``)
        self.embed = dglnn.HeteroEmbedding(featureless, hidden) if featureless and embed else None
        if self.embed is not None:
            self.embed.reset_parameters()
        self.layers = torch.nn.ModuleList()
        widths = [hidden] + [hidden] * (num_layers - 1) + [out_dim]
        for i in range(num_layers):
            last = i == num_layers - 1
            if model == "rgcn":
                self.layers.append(dglnn.RelGraphConv(widths[i], widths[i + 1], len(etypes),
                                                      regularizer="basis" if num_bases else None,
                                                      num_bases=num_bases or None, self_loop=True))
            else:
                self.layers.append(dglnn.HeteroGraphConv({
                    e: dglnn.GATConv(widths[i] * (heads if i else 1), widths[i + 1], out_heads if last else heads,
                                     feat_drop=feat_drop, attn_drop=attn_drop, allow_zero_in_degree=True)
                    for e in etypes}, aggregate="sum"))
        self.input_dropout = torch.nn.Dropout(input_dropout)
        self.dropout = torch.nn.Dropout(dropout)
        self.activation = ACTIVATIONS[activation or default_activation(model)]

    @torch.no_grad()
    def copy_from(self, ours: torch.nn.Module, embeddings: Any = None) -> None:
        """Take the weights of ``ours``, a :class:`~gnnflow.nn.model.GNN` of the same settings
        (relation ``r`` is ``etypes[r]``), and the featureless types' rows of ``embeddings`` (a
        :class:`~gnnflow.strategies.embedding.NodeEmbeddings` holding every such vertex; they are
        not model parameters on our side), so that both compute the same function."""
        for key, lin in ours.input_layer.project.items():
            mine = self.project.linears[self.ntypes[int(key)]]
            mine.weight.copy_(lin.weight)
            mine.bias.copy_(lin.bias)
        if self.embed is not None:
            if embeddings is None:
                raise ValueError("copy_from: the featureless types' embedding rows are needed (embeddings=)")
            types = embeddings.type_of(embeddings.owned)
            for t in embeddings.featureless:  # owned ids are sorted: a type's rows in per-type id order
                self.embed.embeds[self.ntypes[t]].weight.copy_(embeddings.weight[torch.from_numpy(types == t)])
        for conv, layer in zip(self.layers, ours.layers, strict=True):
            if self.model == "rgcn":
                conv.linear_r.W.copy_(layer.weight)
                if layer.coeff is not None:
                    conv.linear_r.coeff.copy_(layer.coeff)
                conv.loop_weight.copy_(layer.loop_weight)
                conv.h_bias.copy_(layer.bias)
                continue
            for r, gat in enumerate(conv.mods.values()):  # in etypes order
                gat.fc.weight.copy_(layer.weight[r].t())
                gat.attn_l.copy_(layer.attn_l[r : r + 1])
                gat.attn_r.copy_(layer.attn_r[r : r + 1])
                gat.bias.copy_(layer.bias[r])

    def inputs(self, features: dict[str, torch.Tensor], ids: dict[str, torch.Tensor],
               rows: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Input rows by vertex type, input dropout applied: ``features[t]``'s rows projected (a
        featured type) or the embedding rows of per-type ids ``ids[t]`` (a featureless type), or
        ``rows[t]`` as given (a featureless type's rows held outside the model)."""
        h = self.project({t: x for t, x in features.items() if t in self.project.linears})
        if self.embed is not None:
            h.update(self.embed({t: i for t, i in ids.items() if t in self.embed.embeds}))
        h.update(rows or {})
        return {t: self.input_dropout(x) for t, x in h.items()}

    def _hidden(self, h: torch.Tensor, last: bool) -> torch.Tensor:
        if self.model == "rgat":
            h = h.mean(1) if last else h.flatten(1)
        return h if last else self.dropout(self.activation(h))

    def forward(self, graphs: list[Any], h: Any, presorted: bool = False) -> Any:
        """The layers on ``graphs`` (a DGL block per layer, or the whole graph for each): ``h`` the
        input rows (:meth:`inputs`), one tensor in the source order of ``graphs[0]`` for rgcn (its
        ``etype`` and ``norm`` edge data; ``presorted``: edges grouped by relation), a dict by
        vertex type for rgat.  Returns the last layer's rows (a dict by vertex type for rgat)."""
        if len(graphs) != len(self.layers):
            raise ValueError(f"{len(graphs)} graphs for {len(self.layers)} layers")
        for i, g in enumerate(graphs):
            h = self.layer(i, g, h, presorted)
        return h

    def layer(self, i: int, g: Any, h: Any, presorted: bool = False) -> Any:
        """Layer ``i`` on ``g`` with what follows it (as :meth:`forward` runs each layer)."""
        conv, last = self.layers[i], i == len(self.layers) - 1
        if self.model == "rgcn":
            return self._hidden(conv(g, h, g.edata["etype"], g.edata["norm"], presorted=presorted), last)
        return {t: self._hidden(x, last) for t, x in conv(g, h).items()}


def dgl_relational_from_config(cfg: TrainConfig, schema: Any, ntypes: list[str],
                               etypes: list[tuple[str, str, str]], out_dim: int,
                               embed: bool = True) -> DGLRelationalModel:
    """:class:`DGLRelationalModel` with every model setting of ``cfg`` (as
    :func:`gnnflow.nn.build_model_from_config` builds ours from ``schema``; ``embed=False``: without
    the featureless types' table, see :meth:`DGLRelationalModel.inputs`)."""
    return DGLRelationalModel(cfg.model, schema, ntypes, etypes, cfg.hidden, out_dim, cfg.num_layers, cfg.dropout,
                              cfg.heads, out_heads=cfg.out_heads, input_dropout=cfg.input_dropout,
                              feat_drop=cfg.feat_drop, attn_drop=cfg.attn_drop, activation=cfg.activation,
                              num_bases=cfg.num_bases, embed=embed)
