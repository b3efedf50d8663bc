"""Relational graph convolution (Schlichtkrull et al.; the RGCN DistDGLv2 §5 trains on MAG-LSC)."""

from __future__ import annotations

import math

import torch
from torch import nn

from gnnflow.nn.ops import relation_major, segment_matmul, spmm_mean
from gnnflow.sampling.block import Block


class RGCNConv(nn.Module):
    r"""``h_i' = W_0 h_i + b + \sum_r \frac{1}{|N_r(i)|} \sum_{j \in N_r(i)} W_r h_j``.

    ``N_r(i)``: the in-neighbours of ``i`` through relation ``r`` (``block.etypes``; a block
    without edge types is one relation, 0); an empty ``N_r(i)`` adds nothing.  With
    ``num_bases = B > 0`` the relation weights share ``B`` bases (basis decomposition):
    ``W_r = \sum_b a_{rb} V_b``.  Shapes: ``h_src`` ``[num_src, in_dim]`` ->
    ``[num_dst, out_dim]``; the destinations' own rows are ``h_src[:num_dst]``.

    This is DGL 1.1's ``RelGraphConv(regularizer="basis" or None, self_loop=True)`` with
    the edge norm ``1 / |N_r(i)|`` and PyG's ``RGCNConv(aggr="mean")``.  Parameters:
    ``weight`` ``[R or B, in, out]`` (DGL's ``linear_r.W``, PyG's ``weight``), ``coeff``
    ``[R, B]`` (``linear_r.coeff``, ``comp``), ``loop_weight`` ``[in, out]`` (``root``),
    ``bias`` ``[out]`` (``h_bias``).

    The per-relation means are one SpMM over the block's non-empty (destination, relation)
    rows in relation-major order (:func:`~gnnflow.nn.ops.relation_major`), each relation's
    transform one GEMM over its rows (:func:`~gnnflow.nn.ops.segment_matmul`), and one
    scatter adds them to their destinations: a mean is transformed once per (destination,
    relation) pair with edges, never per edge (DGL's ``gather_mm`` costs ``E in out``, its
    sorted ``segment_mm`` too) nor per relation without edges.
    """

    def __init__(self, in_dim: int, out_dim: int, num_rels: int, num_bases: int = 0, bias: bool = True,
                 self_loop: bool = True) -> None:
        super().__init__()
        if num_rels < 1 or num_bases < 0:
            raise ValueError(f"RGCNConv: needs num_rels >= 1 and num_bases >= 0, got {num_rels}, {num_bases}")
        self.in_dim, self.out_dim, self.num_rels, self.num_bases = in_dim, out_dim, num_rels, num_bases
        self.weight = nn.Parameter(torch.empty(num_bases or num_rels, in_dim, out_dim))
        self.coeff = nn.Parameter(torch.empty(num_rels, num_bases)) if num_bases else None
        self.loop_weight = nn.Parameter(torch.empty(in_dim, out_dim)) if self_loop else None
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # DGL's initialisation: TypedLinear's uniform(+-1/sqrt(in)), xavier for coefficients and self-loop
        bound = 1.0 / math.sqrt(self.in_dim)
        nn.init.uniform_(self.weight, -bound, bound)
        gain = nn.init.calculate_gain("relu")
        if self.coeff is not None:
            nn.init.xavier_uniform_(self.coeff, gain=gain)
        if self.loop_weight is not None:
            nn.init.xavier_uniform_(self.loop_weight, gain=gain)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def relation_weights(self) -> torch.Tensor:
        """``W_r`` of every relation, ``[R, in, out]`` (combined from the bases when decomposed)."""
        if self.coeff is None:
            return self.weight
        return (self.coeff @ self.weight.view(self.num_bases, -1)).view(self.num_rels, self.in_dim, self.out_dim)

    def forward(self, block: Block, h_src: torch.Tensor) -> torch.Tensor:
        rows, bounds, row_dst = relation_major(block, self.num_rels)
        means = spmm_mean(rows, h_src)  # one row per (i, r) with N_r(i) non-empty, relation-major
        messages = segment_matmul(means, bounds, self.relation_weights())  # W_r mean_{N_r(i)} h_j
        if self.loop_weight is not None:
            out = h_src[: block.num_dst] @ self.loop_weight  # W_0 h_i
        else:
            out = h_src.new_zeros(block.num_dst, self.out_dim)
        if self.bias is not None:
            out = out + self.bias
        return out.index_add(0, row_dst, messages)
