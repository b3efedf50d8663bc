"""Graph attention layer (Veličković et al.; GSplit §5 names GAT as the model an edge-centric API breaks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gnnflow.nn.ops import edge_softmax, spmm_sum
from gnnflow.sampling.block import Block

# the attention scores come from the input through W^T a (a thin GEMM) while the input is
# at most this many times wider than a head; beyond that, from the projected features
_FOLD_WIDTH = 16


class GATConv(nn.Module):
    r"""Multi-head attention: ``h_i'^k = \sum_{j -> i} \alpha_{ij}^k W^k d(h_j) + b^k``.

    ``e_{ij}^k = LeakyReLU(a_l^k . W^k d(h_j) + a_r^k . W^k d(h_i))`` (slope
    ``negative_slope``, 0.2 as in the paper) and ``\alpha`` is the softmax of
    ``e`` over the in-edges of ``i`` (per head), then dropped out with
    probability ``attn_drop``; ``d`` is dropout on the input features with
    probability ``feat_drop`` (one mask per source row, the destinations'
    rows being the first ``num_dst`` sources).  Output
    ``[num_dst, heads, out_dim]``; the model concatenates (hidden layers) or
    averages (output layer) the heads and applies the activation.  Parameters
    ``fc.weight`` ``[heads*out, in]``, ``attn_l``/``attn_r`` ``[1, heads, out]``
    and ``bias`` ``[heads*out]`` follow DGL 1.1's ``GATConv`` so weights copy
    across.

    ``a . W h = (W^T a) . h``: when the input is narrow, the attention scores of
    all heads come from one thin GEMM ``h (W^T a)`` instead of a pass over the
    projected features (and another in backward).
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, negative_slope: float = 0.2,
                 feat_drop: float = 0.0, attn_drop: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.heads = in_dim, out_dim, heads
        self.negative_slope = negative_slope
        self.fc = nn.Linear(in_dim, out_dim * heads, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_r = nn.Parameter(torch.empty(1, heads, out_dim))
        self.feat_drop = nn.Dropout(feat_drop)
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

    def scores(self, h_src: torch.Tensor, feat_src: torch.Tensor, num_dst: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a_l . W h_j`` per source, ``a_r . W h_i`` per destination), each ``[rows, heads]``."""
        in_dim = h_src.shape[1]  # the weight's, also where a caller substitutes it (P3's split layer)
        if in_dim <= _FOLD_WIDTH * self.out_dim:
            w = self.fc.weight.view(self.heads, self.out_dim, in_dim)
            attn = torch.cat([self.attn_l, self.attn_r]).view(2, self.heads, self.out_dim, 1)
            both = h_src @ (w.unsqueeze(0) * attn).sum(2).view(2 * self.heads, in_dim).t()
            return both[:, : self.heads], both[:num_dst, self.heads :]
        return (feat_src * self.attn_l).sum(-1), (feat_src[:num_dst] * self.attn_r).sum(-1)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        h_src = self.feat_drop(h_src)
        feat_src = self.fc(h_src).view(-1, self.heads, self.out_dim)
        el, er = self.scores(h_src, feat_src, block.num_dst)
        logits = F.leaky_relu(
            torch.index_select(el, 0, block.indices) + torch.index_select(er, 0, block.edge_dst()),
            self.negative_slope,
        )
        alpha = self.attn_drop(edge_softmax(block, logits))
        out = spmm_sum(block, feat_src, alpha)
        if self.bias is not None:
            out = out + self.bias.view(1, self.heads, self.out_dim)
        return out
