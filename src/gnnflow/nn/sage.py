"""GraphSAGE layer, mean or GCN aggregator (Hamilton et al.; GSplit §6.1, DistDGLv2 §5)."""

from __future__ import annotations

import torch
from torch import nn

from gnnflow.config import AGGREGATORS
from gnnflow.errors import ConfigError
from gnnflow.nn.ops import mean_and_own, spmm_mean, spmm_sum
from gnnflow.sampling.block import Block


class SAGEConv(nn.Module):
    r"""``mean``: ``h_i' = W_self h_i + W_neigh mean_{j -> i} h_j + b``;
    ``gcn``: ``h_i' = W_neigh (h_i + \sum_{j -> i} h_j) / (deg_in(i) + 1) + b``.

    Shapes: ``h_src`` ``[num_src, in_dim]`` -> ``[num_dst, out_dim]``; the
    destination's own input is ``h_src[:num_dst]`` (blocks list destinations
    first).  Parameters are laid out as DGL 1.1's ``SAGEConv`` (``mean``:
    ``fc_self`` with the bias, ``fc_neigh`` without; ``gcn``: ``fc_neigh`` and a
    separate ``bias``) so weights copy across; like DGL, the neighbour
    projection runs before aggregation when it shrinks the features.  ``gcn``
    is the aggregator of DGL's full-graph GraphSAGE example (Hamilton et al.'s
    "GCN" variant): the destination counts once more beside its in-edges, so a
    graph that already has self-loops counts it twice, as in DGL.
    """

    #: forward's output is a new tensor no autograd node reads: the model's activation and
    #: dropout may overwrite it (:class:`gnnflow.nn.dropout.Dropout`'s ``inplace``)
    fresh_output = True

    def __init__(self, in_dim: int, out_dim: int, aggregator: str = "mean", bias: bool = True) -> None:
        super().__init__()
        if aggregator not in AGGREGATORS:
            raise ConfigError(f"aggregator: unknown {aggregator!r}; choose one of {', '.join(AGGREGATORS)}")
        self.in_dim, self.out_dim, self.aggregator = in_dim, out_dim, aggregator
        if aggregator == "mean":
            self.fc_self = nn.Linear(in_dim, out_dim, bias=bias)
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)
        if aggregator == "gcn":
            self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        if self.aggregator == "mean":
            nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
            if self.fc_self.bias is not None:
                nn.init.zeros_(self.fc_self.bias)
        elif self.bias is not None:
            nn.init.zeros_(self.bias)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)

    @property
    def projects_first(self) -> bool:
        """Whether the neighbour projection runs before the aggregation (it shrinks the features)."""
        return self.in_dim > self.out_dim

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """Rows projected by the neighbour weight: what ``forward(..., projected=True)`` takes
        (only where :attr:`projects_first`)."""
        return self.fc_neigh(h)

    def forward(self, block: Block, h_src: torch.Tensor, projected: bool = False,
                h_dst: torch.Tensor | None = None) -> torch.Tensor:
        """``projected``: ``h_src`` holds :meth:`project`'s rows (a caller that projects every
        row once, e.g. layer-wise inference); the ``mean`` aggregator then needs ``h_dst``,
        the destinations' own unprojected rows.  ``h_dst`` defaults to ``h_src[:num_dst]``."""
        if projected and not self.projects_first:
            raise ValueError(f"SAGEConv {self.in_dim}->{self.out_dim}: aggregates before projecting; "
                             "pass unprojected rows")
        if projected and h_dst is None and self.aggregator == "mean":
            raise ValueError("SAGEConv: projected rows need the destinations' own rows (h_dst)")
        project_first = self.projects_first
        if self.aggregator == "mean":
            if project_first:
                h_neigh = spmm_mean(block, h_src if projected else self.fc_neigh(h_src))
                # the self projection's output takes the neighbour term in place (no autograd
                # node keeps it): one destination-sized tensor and one pass over it less
                return self.fc_self(h_src[: block.num_dst] if h_dst is None else h_dst).add_(h_neigh)
            if h_dst is None:  # both uses of h_src in one autograd node (gnnflow.nn.ops.mean_and_own)
                agg, h_dst = mean_and_own(block, h_src)
            else:
                agg = spmm_mean(block, h_src)
            # the neighbour projection accumulates into the self projection's output (a GEMM
            # with beta 1): no destination-sized tensor of its own and no separate sum
            return self.fc_self(h_dst).addmm_(agg, self.fc_neigh.weight.t())
        h = h_src if projected or not project_first else self.fc_neigh(h_src)
        deg = block.in_degrees().to(h.dtype).unsqueeze(1) + 1.0
        h_neigh = (spmm_sum(block, h) + h[: block.num_dst]) / deg
        out = h_neigh if project_first else self.fc_neigh(h_neigh)
        return out if self.bias is None else out + self.bias
