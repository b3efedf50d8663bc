"""Relational graph attention: a GAT per relation, summed (MLPerf's R-GAT on IGBH)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from gnnflow.nn.ops import edge_softmax, relation_block, relation_sources, segment_matmul, spmm_sum
from gnnflow.sampling.block import Block


class RGATConv(nn.Module):
    r"""``h_i'^k = \sum_{r: t(i) = dst(r)} ( \sum_{j \in N_r(i)} \alpha_{ij}^{rk} W_r^k d(h_j) + b_r^k )``.

    Per relation ``r`` and head ``k`` a GAT (Veličković et al.):
    ``e_{ij}^{rk} = LeakyReLU(a_{l,r}^k . W_r^k d(h_j) + a_{r,r}^k . W_r^k d(h_i))`` and
    ``\alpha^{rk}`` its softmax over ``N_r(i)``, the in-neighbours of ``i`` through ``r``
    (``block.etypes``), then dropped out with probability ``attn_drop``; ``d`` is dropout
    on the input (``feat_drop``).  Relation ``r``'s bias reaches every destination of its
    destination vertex type (``rel_dst_types[r]``, read against ``block.src_types``; without
    ``rel_dst_types`` every relation reaches every destination).  That is DGL 1.1's
    ``HeteroGraphConv({r: GATConv(in, out, heads)}, aggregate="sum")``, the MLPerf R-GAT
    layer, and PyG's ``HeteroConv`` of ``GATConv`` with ``aggr="sum"``.  Output
    ``[num_dst, heads, out_dim]`` (the model concatenates or averages the heads).
    Parameters: ``weight`` ``[R, in, heads*out]`` (``weight[r]`` is relation ``r``'s GAT
    ``fc.weight`` transposed), ``attn_l``/``attn_r`` ``[R, heads, out]``, ``bias``
    ``[R, heads*out]``.

    Only the (source, relation) pairs that an edge uses are transformed
    (:func:`~gnnflow.nn.ops.relation_sources`: one GEMM per relation over its pairs, and a
    thin one for the attention term ``h_j . (W_r^T a_{l,r})``); the
    destination terms of all relations are one thin GEMM; the softmax runs over the
    block's (destination, relation) rows (:func:`~gnnflow.nn.ops.relation_block`) and
    one SpMM over the pairs sums the messages of all relations and heads.
    """

    def __init__(self, in_dim: int, out_dim: int, num_rels: int, heads: int = 1,
                 rel_dst_types: Sequence[int] | None = None, negative_slope: float = 0.2,
                 feat_drop: float = 0.0, attn_drop: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if rel_dst_types is not None and len(rel_dst_types) != num_rels:
            raise ValueError(f"RGATConv: {len(rel_dst_types)} destination types for {num_rels} relations")
        self.in_dim, self.out_dim, self.num_rels, self.heads = in_dim, out_dim, num_rels, heads
        self.negative_slope = negative_slope
        self.weight = nn.Parameter(torch.empty(num_rels, in_dim, heads * out_dim))
        self.attn_l = nn.Parameter(torch.empty(num_rels, heads, out_dim))
        self.attn_r = nn.Parameter(torch.empty(num_rels, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(num_rels, heads * out_dim)) if bias else None
        self.rel_dst_types: torch.Tensor | None
        self.register_buffer("rel_dst_types", None if rel_dst_types is None
                             else torch.tensor(list(rel_dst_types), dtype=torch.int64))
        self.feat_drop = nn.Dropout(feat_drop)
        self.attn_drop = nn.Dropout(attn_drop)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # GATConv's xavier-normal initialisation, relation by relation (the fan of one relation's tensors)
        gain = nn.init.calculate_gain("relu")
        hd = self.heads * self.out_dim
        nn.init.normal_(self.weight, 0.0, gain * math.sqrt(2.0 / (self.in_dim + hd)))
        for a in (self.attn_l, self.attn_r):
            nn.init.normal_(a, 0.0, gain * math.sqrt(2.0 / (hd + self.out_dim)))
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _folded(self, attn: torch.Tensor) -> torch.Tensor:
        """``W_r^T a_r`` per relation and head, ``[R, in, heads]``: ``a . W h = h . (W^T a)``."""
        w = self.weight.view(self.num_rels, self.in_dim, self.heads, self.out_dim)
        return (w * attn.unsqueeze(1)).sum(-1)

    def dst_bias(self, block: Block) -> torch.Tensor:
        """The relations' biases each destination receives, ``[num_dst, heads*out]``."""
        assert self.bias is not None
        if self.rel_dst_types is None:
            return self.bias.sum(0).expand(block.num_dst, -1)
        if block.src_types is None:
            raise ValueError("RGATConv with rel_dst_types needs block.src_types (the typed sampler sets them)")
        dst_types = block.src_types[: block.num_dst]
        num_types = 1 + max(int(self.rel_dst_types.max()), int(dst_types.max()) if dst_types.numel() else 0)
        per_type = self.bias.new_zeros(num_types, self.bias.shape[1]).index_add(0, self.rel_dst_types, self.bias)
        return per_type.index_select(0, dst_types)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        num_rels, heads, out_dim = self.num_rels, self.heads, self.out_dim
        h_src = self.feat_drop(h_src)
        pair_src, bounds, pair_block = relation_sources(block, num_rels)
        rows = relation_block(block, num_rels)
        # per pair (j, r): W_r h_j and a_l . W_r h_j = h_j . (W_r^T a_l), a GEMM per relation each
        h_pairs = h_src.index_select(0, pair_src)
        feat = segment_matmul(h_pairs, bounds, self.weight).view(-1, heads, out_dim)
        el = segment_matmul(h_pairs, bounds, self._folded(self.attn_l))
        # per (i, r): a_r . W_r h_i, all relations in one thin GEMM; row i*R + r
        er = (h_src[: block.num_dst] @ self._folded(self.attn_r).transpose(0, 1).reshape(self.in_dim, -1))
        logits = F.leaky_relu(el.index_select(0, pair_block.indices)
                              + er.view(-1, heads).index_select(0, rows.edge_dst()), self.negative_slope)
        alpha = self.attn_drop(edge_softmax(rows, logits))
        out = spmm_sum(pair_block, feat, alpha)
        if self.bias is not None:
            out = out + self.dst_bias(block).view(-1, heads, out_dim)
        return out
