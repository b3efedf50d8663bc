"""Graph attention layer (Veličković et al.; GSplit §5 names GAT as the model an edge-centric API breaks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnnflow.nn.ops import edge_softmax, spmm_sum
from gnnflow.sampling.block import Block


class GATConv(nn.Module):
    r"""Multi-head attention: ``h_i'^k = \sum_{j -> i} \alpha_{ij}^k W^k h_j + b^k``.

    ``e_{ij}^k = LeakyReLU(a_l^k . W^k h_j + a_r^k . W^k h_i)`` and ``\alpha``
    is the softmax of ``e`` over the in-edges of ``i`` (per head).  Output
    ``[num_dst, heads, out_dim]``.  Parameters ``fc.weight``
    ``[heads*out, in]``, ``attn_l``/``attn_r`` ``[1, heads, out]`` and
    ``bias`` ``[heads*out]`` follow DGL 1.1's ``GATConv`` so weights copy
    across.  ``attn_drop`` is dropout on the attention coefficients.
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, negative_slope: float = 0.2,
                 attn_drop: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.heads = in_dim, out_dim, heads
        self.negative_slope = negative_slope
        self.fc = nn.Linear(in_dim, out_dim * heads, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_r = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_drop = nn.Dropout(attn_drop)
        self.bias = nn.Parameter(torch.zeros(heads * out_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        feat_src = self.fc(h_src).view(-1, self.heads, self.out_dim)
        feat_dst = feat_src[: block.num_dst]
        el = (feat_src * self.attn_l).sum(-1)  # [num_src, H]
        er = (feat_dst * self.attn_r).sum(-1)  # [num_dst, H]
        logits = F.leaky_relu(
            torch.index_select(el, 0, block.indices) + torch.index_select(er, 0, block.edge_dst()),
            self.negative_slope,
        )
        alpha = self.attn_drop(edge_softmax(block, logits))
        out = spmm_sum(block, feat_src, alpha)
        if self.bias is not None:
            out = out + self.bias.view(1, self.heads, self.out_dim)
        return out
