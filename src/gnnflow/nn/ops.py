"""Sparse aggregation on a block in plain torch: CSR SpMM and edge softmax.

Every layer reduces messages from sources to destinations along the block's
CSR (GSplit §5: layers are "layer-centric", all in-edges of a destination are
local).  The sum ``out[i] = sum_e w_e * x[src_e]`` is computed with
``torch.nn.functional.embedding_bag`` (mode ``sum``, one bag per destination,
optional per-edge weights), which is a fused gather-reduce on CPU and CUDA and
never materialises the ``[E, D]`` message tensor.  Its own backward scatters
through a sort; ours instead runs the same kernel on the transposed CSR
(edges grouped by source, cached on the block), which is what DGL does with its
reverse graph.  The gradient of the edge weights is a sampled dot product
(SDDMM), computed in edge chunks to bound memory.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from gnnflow.sampling.block import Block

# edges per chunk of the SDDMM in the weight gradient (bounds the [chunk, D] temporaries)
_SDDMM_CHUNK = 1 << 17


def _transposed(block: Block) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(t_indptr, t_indices, perm)``: the block's edges grouped by source, cached on the block.

    ``perm[j]`` is the edge (CSR position) at transposed position ``j``;
    ``t_indices[j]`` is that edge's destination.
    """
    cache = block.cache.get("transposed")
    if cache is None:
        perm = torch.sort(block.indices, stable=True).indices
        t_indices = block.edge_dst()[perm]
        t_indptr = torch.zeros(block.num_src + 1, dtype=torch.int64, device=block.device)
        torch.cumsum(torch.bincount(block.indices, minlength=block.num_src), 0, out=t_indptr[1:])
        cache = (t_indptr, t_indices, perm)
        block.cache["transposed"] = cache
    assert isinstance(cache, tuple)
    return cache


def _bag_sum(indices: torch.Tensor, x: torch.Tensor, indptr: torch.Tensor,
             weight: torch.Tensor | None = None) -> torch.Tensor:
    """``out[i] = sum_{e in row i} weight[e] * x[indices[e]]`` for a 2-D ``x``."""
    if x.shape[0] == 0 or indices.shape[0] == 0:
        return x.new_zeros(indptr.shape[0] - 1, x.shape[1])
    return F.embedding_bag(indices, x, indptr, mode="sum", per_sample_weights=weight,
                           include_last_offset=True)


def _sddmm(block: Block, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = <a[dst_e, h], b[src_e, h]>`` (``a``: [num_dst, H, D], ``b``: [num_src, H, D])."""
    dst, src = block.edge_dst(), block.indices
    heads, dim = a.shape[1], a.shape[2]
    a2, b2 = a.reshape(a.shape[0], heads * dim), b.reshape(b.shape[0], heads * dim)
    out = a.new_empty(block.num_edges, heads)
    for start in range(0, block.num_edges, _SDDMM_CHUNK):
        end = min(start + _SDDMM_CHUNK, block.num_edges)
        prod = torch.index_select(a2, 0, dst[start:end])
        prod.mul_(torch.index_select(b2, 0, src[start:end]))
        torch.sum(prod.view(end - start, heads, dim), dim=-1, out=out[start:end])
    return out


def _per_head(indices: torch.Tensor, x: torch.Tensor, indptr: torch.Tensor,
              weight: torch.Tensor | None) -> torch.Tensor:
    """:func:`_bag_sum` for each head of ``x`` ([N, H, D]) with weights ``[E, H]``."""
    if x.shape[1] == 1:
        return _bag_sum(indices, x[:, 0], indptr, None if weight is None else weight[:, 0]).unsqueeze(1)
    return torch.stack([
        _bag_sum(indices, x[:, h].contiguous(), indptr, None if weight is None else weight[:, h].contiguous())
        for h in range(x.shape[1])
    ], dim=1)


class _CSRSum(torch.autograd.Function):
    """Sum of (optionally weighted) source rows into destinations, per head."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, block: Block) -> torch.Tensor:
        # x: [num_src, H, D]; weight: [E, H] or None
        ctx.block = block
        ctx.save_for_backward(x, weight)
        return _per_head(block.indices, x, block.indptr, weight)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x, weight = ctx.saved_tensors
        block: Block = ctx.block
        grad_out = grad_out.contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            t_indptr, t_indices, perm = _transposed(block)
            t_weight = None if weight is None else torch.index_select(weight, 0, perm)
            grad_x = _per_head(t_indices, grad_out, t_indptr, t_weight)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_w = _sddmm(block, grad_out, x)
        return grad_x, grad_w, None


def spmm_sum(block: Block, x: torch.Tensor, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
    """``out[i] = sum_{e: src_e -> i} w_e x[src_e]`` over the block's edges.

    ``x`` is ``[num_src, D]`` (then ``edge_weight`` is ``[E]``) or
    ``[num_src, H, D]`` (then ``edge_weight`` is ``[E, H]``).  Differentiable in
    ``x`` and ``edge_weight``.
    """
    if x.shape[0] != block.num_src:
        raise ValueError(f"spmm_sum: x has {x.shape[0]} rows, block has {block.num_src} sources")
    flat = x.dim() == 2
    x3 = x.unsqueeze(1) if flat else x
    w = edge_weight
    if w is not None and w.dim() == 1:
        w = w.unsqueeze(1)
    out = _CSRSum.apply(x3, w, block)
    return out.squeeze(1) if flat else out


def spmm_mean(block: Block, x: torch.Tensor) -> torch.Tensor:
    """Mean of in-neighbour rows (zero for a destination without in-edges)."""
    deg = block.in_degrees().clamp(min=1).to(x.dtype)
    return spmm_sum(block, x) / deg.view(-1, *([1] * (x.dim() - 1)))


def edge_softmax(block: Block, logits: torch.Tensor) -> torch.Tensor:
    """Softmax of ``logits`` ([E] or [E, H]) over the in-edges of each destination."""
    dst = block.edge_dst()
    shape = (block.num_dst, *logits.shape[1:])
    with torch.no_grad():  # the shift only stabilises exp(); the softmax does not depend on it
        peak = logits.new_full(shape, float("-inf")).scatter_reduce_(
            0, dst.view(-1, *([1] * (logits.dim() - 1))).expand_as(logits), logits, "amax")
    expo = torch.exp(logits - torch.index_select(peak, 0, dst))
    denom = logits.new_zeros(shape).index_add_(0, dst, expo)
    return expo / torch.index_select(denom, 0, dst)
