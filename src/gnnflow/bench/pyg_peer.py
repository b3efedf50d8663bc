"""PyTorch Geometric 2.8 as a second peer: its layers on our blocks, with our weights.

PyG (the ``peers`` extra: ``pip install -e '.[peers]'``) takes a graph in two
forms, and the benchmarks time both, since either may be faster:

* ``edge_index`` — ``[2, E]`` (source, destination) pairs, what PyG's loaders
  produce; messages are gathered and scattered per edge;
* ``adj_t`` — the transposed adjacency as a ``torch.sparse_csr_tensor``
  ``[num_dst, num_src]`` (our destination-major CSR as it is), PyG's sparse
  path (``message_and_aggregate``: one sparse-dense product).

A block maps onto PyG's bipartite calls: ``SAGEConv`` and ``GATConv`` take
``(x_src, x_dst)`` with ``x_dst = x_src[:num_dst]`` (a block's destinations
are its first sources).  ``GCNConv`` has no bipartite form: with ``edge_index``
it outputs a row for every source (the destinations' rows are kept), with
``adj_t`` only the destinations'.  Its normalisation is given as edge weights
(``normalize=False``), computed once per graph as PyG's ``cached=True`` keeps
them, from the block's degrees exactly as :class:`gnnflow.nn.GCNConv` uses
them; PyG's own ``gcn_norm`` would take both ends' degrees from in-degrees
(a symmetric graph's), a different matrix on a sampled block.

Weights are copied from our module (:func:`from_ours`), so outputs can be
checked equal before anything is timed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from gnnflow.errors import GnnflowError

FORMS = ("edge_index", "adj_t")
#: our layer kinds (``gnnflow bench layers``) that PyG has a layer for
KINDS = ("sage", "gcn-both", "gcn-right", "gat")


def require_pyg() -> Any:
    """The ``torch_geometric`` module, or a one-line error saying how to install it."""
    try:
        import torch_geometric
    except ImportError as exc:
        raise GnnflowError(f"PyG peer: torch_geometric is not installed ({exc}); install the peers extra: "
                           "pip install -e '.[peers]' (or pass --no-pyg)") from None
    return torch_geometric


@dataclass
class PyGGraph:
    """One destination-major CSR (``num_dst`` rows over ``num_src`` columns) in PyG's two forms."""

    num_src: int
    num_dst: int
    edge_index: torch.Tensor
    adj_t: torch.Tensor
    edge_weight: torch.Tensor | None

    @classmethod
    def from_csr(cls, indptr: torch.Tensor, indices: torch.Tensor, num_src: int,
                 edge_weight: torch.Tensor | None = None) -> PyGGraph:
        num_dst = int(indptr.shape[0]) - 1
        dst = torch.repeat_interleave(torch.arange(num_dst), indptr[1:] - indptr[:-1], output_size=indices.shape[0])
        values = edge_weight if edge_weight is not None else torch.ones(indices.shape[0])
        with warnings.catch_warnings():  # "sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            adj_t = torch.sparse_csr_tensor(indptr, indices, values, size=(num_dst, num_src))
        return cls(num_src, num_dst, torch.stack([indices, dst]), adj_t, edge_weight)

    def to(self, device: torch.device | str) -> PyGGraph:
        w = self.edge_weight.to(device) if self.edge_weight is not None else None
        return PyGGraph(self.num_src, self.num_dst, self.edge_index.to(device), self.adj_t.to(device), w)


def gcn_edge_weight(indptr: torch.Tensor, indices: torch.Tensor, num_src: int, norm: str) -> torch.Tensor:
    """Per-edge ``c_dst * c_src`` of :class:`gnnflow.nn.GCNConv` (degrees within the CSR, clamped to 1)."""
    num_dst = int(indptr.shape[0]) - 1
    in_deg = (indptr[1:] - indptr[:-1]).clamp(min=1).to(torch.float32)
    dst = torch.repeat_interleave(torch.arange(num_dst), indptr[1:] - indptr[:-1], output_size=indices.shape[0])
    if norm == "right":
        return (1.0 / in_deg)[dst]
    out_deg = torch.bincount(indices, minlength=num_src).clamp(min=1).to(torch.float32)
    return in_deg.pow(-0.5)[dst] * out_deg.pow(-0.5)[indices]


class PyGLayer(torch.nn.Module):
    """A PyG layer called like ours: ``layer(graph, x_src) -> [num_dst, ...]`` in our output shape."""

    def __init__(self, kind: str, conv: torch.nn.Module, form: str, heads: int = 1) -> None:
        super().__init__()
        if form not in FORMS:
            raise ValueError(f"PyG graph form must be one of {FORMS}, got {form!r}")
        self.kind, self.conv, self.form, self.heads = kind, conv, form, heads

    def forward(self, g: PyGGraph, x: torch.Tensor) -> torch.Tensor:
        adj = g.edge_index if self.form == "edge_index" else g.adj_t
        if self.kind.startswith("gcn"):
            w = g.edge_weight if self.form == "edge_index" else None  # adj_t carries the weights
            return self.conv(x, adj, w)[: g.num_dst]
        size = (g.num_src, g.num_dst) if self.form == "edge_index" else None
        out = self.conv((x, x[: g.num_dst]), adj, size=size)
        return out.view(g.num_dst, self.heads, -1) if self.kind == "gat" else out


def from_ours(kind: str, ours: torch.nn.Module, form: str) -> PyGLayer:
    """PyG's layer for our ``kind`` holding ``ours``'s weights."""
    require_pyg()
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    with torch.no_grad():
        if kind == "sage":  # ours (DGL's layout): fc_self(h_dst) + fc_neigh(mean), bias in fc_self
            conv = SAGEConv(ours.fc_neigh.in_features, ours.fc_neigh.out_features, aggr="mean")
            conv.lin_l.weight.copy_(ours.fc_neigh.weight)
            conv.lin_r.weight.copy_(ours.fc_self.weight)
            conv.lin_l.bias.copy_(ours.fc_self.bias)
            heads = 1
        elif kind in ("gcn-both", "gcn-right"):
            conv = GCNConv(ours.in_dim, ours.out_dim, normalize=False, add_self_loops=False)
            conv.lin.weight.copy_(ours.weight.t())
            conv.bias.copy_(ours.bias)
            heads = 1
        elif kind == "gat":
            heads, per_head = ours.attn_l.shape[1], ours.attn_l.shape[2]
            conv = GATConv(ours.fc.in_features, per_head, heads=heads, add_self_loops=False)
            conv.lin.weight.copy_(ours.fc.weight)
            conv.att_src.copy_(ours.attn_l)
            conv.att_dst.copy_(ours.attn_r)
            conv.bias.copy_(ours.bias)
        else:
            raise ValueError(f"no PyG layer for {kind!r}; choose from {', '.join(KINDS)}")
    return PyGLayer(kind, conv, form, heads)


def graph_for(kind: str, indptr: torch.Tensor, indices: torch.Tensor, num_src: int) -> PyGGraph:
    """The graph PyG's ``kind`` layer runs on (GCN: with its normalisation as edge weights)."""
    weight = gcn_edge_weight(indptr, indices, num_src, kind.split("-")[1]) if kind.startswith("gcn") else None
    return PyGGraph.from_csr(indptr, indices, num_src, weight)


def version() -> str:
    return str(require_pyg().__version__)
