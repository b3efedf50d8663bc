"""A PyG convolution as a block layer (``--model pyg:ConvName``; docs/models.md).

``PyGLayer(conv_class, in_dim, out_dim, **opts)`` builds ``conv_class(in_dim, out_dim, **opts)``
(a convolution that takes an ``nn`` instead of dimensions, such as ``GINConv``, gets
``nn = Linear(in, out) -> ReLU -> Linear(out, out)``) and runs it on a block::

    edge_index = [[indices], [edge_dst()]]      # source and destination local positions
    h_dst = conv((h_src, h_src[:num_dst]), edge_index, size=(num_src, num_dst))

The destinations are the first ``num_dst`` sources of a block, so a convolution without a
bipartite form (``GCNConv``: ``x`` is one tensor) runs on the ``num_src`` sources as one graph
and its first ``num_dst`` rows are the destinations' outputs (its degrees are then the block's
own).  ``edge_index`` is built once per block (kept in ``block.cache``).  Convolutions that read
edge types or edge features (``RGCNConv``, ``GINEConv``, ...) are refused: gnnflow gives a layer
class untyped blocks without edge features.

PyG initialises its parameters with torch's generator, so a seeded build is the same on every
rank.  ``torch_geometric`` is imported only when a ``pyg:`` model is built.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from gnnflow.errors import ConfigError
from gnnflow.sampling.block import Block

#: forward arguments a block cannot give: a convolution that requires one (or reads edge types) is refused
_UNSUPPORTED = ("edge_type", "edge_attr", "batch", "pos")
#: convolutions affine in their input (with these aggregations): their input weights (axis 1 is
#: the input dimension) and biases, which P3's first-layer split by feature columns needs
_AFFINE: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "GraphConv": (("lin_rel.weight", "lin_root.weight"), ("lin_rel.bias",), ("add", "sum", "mean")),
    "GCNConv": (("lin.weight",), ("bias",), ("add", "sum")),
}


def conv_class(name: str, spec: str) -> type[nn.Module]:
    """``torch_geometric.nn.<name>``, a message-passing convolution (one-line errors)."""
    try:
        import torch_geometric.nn as pyg_nn
        from torch_geometric.nn import MessagePassing
    except ImportError as exc:
        raise ConfigError(f"model {spec}: needs torch_geometric ({exc}); install it with "
                          "pip install 'gnnflow[peers]'") from None
    cls = getattr(pyg_nn, name, None)
    if not (isinstance(cls, type) and issubclass(cls, MessagePassing)):
        raise ConfigError(f"model {spec}: torch_geometric.nn has no convolution {name!r} "
                          "(a MessagePassing class such as GraphConv, GINConv, GCNConv, GATConv)")
    params = inspect.signature(cls.forward).parameters
    required = [p for p in _UNSUPPORTED if p in params and (p == "edge_type" or _required(params[p]))]
    if required:
        raise ConfigError(f"model {spec}: {name} needs {', '.join(required)} in its forward, which gnnflow's "
                          "blocks do not give a layer class (use --model rgcn/rgat for typed graphs)")
    return cls


def _required(p: inspect.Parameter) -> bool:
    return p.default is inspect.Parameter.empty


class PyGLayer(nn.Module):
    """A PyG convolution mapping ``(block, h_src) -> h_dst`` (see the module docstring)."""

    def __init__(self, conv_cls: type[nn.Module], in_dim: int, out_dim: int, **opts: Any) -> None:
        super().__init__()
        init = inspect.signature(conv_cls.__init__).parameters
        if "nn" in init and "in_channels" not in init:  # GINConv: its nn carries the dimensions
            mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))
            self.conv = conv_cls(mlp, **opts)
        else:
            self.conv = conv_cls(in_dim, out_dim, **opts)
        forward = inspect.signature(self.conv.forward).parameters
        self.bipartite = "Tuple" in str(forward["x"].annotation)  # x may be (x_src, x_dst)
        self.takes_size = "size" in forward
        self.in_dim, self.out_dim = in_dim, out_dim
        name = conv_cls.__name__
        if name in _AFFINE and getattr(self.conv, "aggr", None) in _AFFINE[name][2] \
                and not getattr(self.conv, "cached", False):
            weights, biases, _ = _AFFINE[name]
            #: P3's split of this layer by input columns ({weight: input axis}, biases)
            self.affine_split = ({f"conv.{w}": 1 for w in weights}, tuple(f"conv.{b}" for b in biases))

    @staticmethod
    def edge_index(block: Block) -> torch.Tensor:
        """``[[source local position], [destination local position]]`` of every edge, kept in
        ``block.cache``."""
        out = block.cache.get("pyg_edge_index")
        if out is None:
            out = torch.stack([block.indices, block.edge_dst()])
            block.cache["pyg_edge_index"] = out
        assert isinstance(out, torch.Tensor)
        return out

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        edge_index = self.edge_index(block)
        if not self.bipartite:
            return self.conv(h_src, edge_index)[: block.num_dst]
        kw = {"size": (block.num_src, block.num_dst)} if self.takes_size else {}
        return self.conv((h_src, h_src[: block.num_dst]), edge_index, **kw)

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim}, out_dim={self.out_dim}"
