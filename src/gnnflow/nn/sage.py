"""GraphSAGE layer with the mean aggregator (Hamilton et al.; GSplit §6.1, DistDGLv2 §5)."""

from __future__ import annotations

import torch
from torch import nn

from gnnflow.nn.ops import spmm_mean
from gnnflow.sampling.block import Block


class SAGEConv(nn.Module):
    r"""``h_i' = W_self h_i + W_neigh mean_{j -> i} h_j + b``.

    Shapes: ``h_src`` ``[num_src, in_dim]`` -> ``[num_dst, out_dim]``; the
    destination's own input is ``h_src[:num_dst]`` (blocks list destinations
    first).  Parameters are laid out as DGL 1.1's ``SAGEConv(aggregator_type="mean")``
    (``fc_self`` with the bias, ``fc_neigh`` without) so weights copy across;
    like DGL, the neighbour projection runs before aggregation when it shrinks
    the features.
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.fc_self = nn.Linear(in_dim, out_dim, bias=bias)
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)
        if self.fc_self.bias is not None:
            nn.init.zeros_(self.fc_self.bias)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        h_dst = h_src[: block.num_dst]
        if self.in_dim > self.out_dim:
            h_neigh = spmm_mean(block, self.fc_neigh(h_src))
        else:
            h_neigh = self.fc_neigh(spmm_mean(block, h_src))
        return self.fc_self(h_dst) + h_neigh
