"""Sparse aggregation on a block in plain torch: CSR SpMM, SDDMM and edge softmax.

Every layer reduces messages from sources to destinations along the block's
CSR (GSplit §5: layers are "layer-centric", all in-edges of a destination are
local).  The sum ``out[i] = sum_e w_e * x[src_e]`` is computed with
``torch.nn.functional.embedding_bag`` (mode ``sum``, one bag per destination,
optional per-edge weights), which is a fused gather-reduce on CPU and CUDA and
never materialises the ``[E, D]`` message tensor.  Several heads (GAT) run as
one call: ``x`` ``[num_src, H, D]`` is seen as ``num_src * H`` rows of ``D``
and bag ``h * num_dst + i`` holds rows ``src * H + h`` of destination ``i``'s
edges, a head-major layout that is a broadcast of the CSR (cached on the
block per head count), with the edge weights transposed to ``[H, E]``.
``embedding_bag``'s own backward scatters through a sort; ours instead runs
the same kernel on the transposed CSR (edges grouped by source, cached on the
block), which is what DGL does with its reverse graph.  The gradient of the
edge weights is a sampled dot product (SDDMM) ``<grad_out[dst_e, h],
x[src_e, h]>``, computed by the fused kernel of ``embedding_bag``'s
per-sample-weight gradient over the same layout (one pass, no ``[E, H, D]``
temporaries), as DGL's ``gsddmm`` does.  ``edge_softmax`` is an autograd
function (segment max and sum; backward ``a * (g - sum_row(a * g))``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from gnnflow.sampling.block import Block


def _transposed(block: Block, with_perm: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(t_indptr, t_indices, perm)``: the block's edges grouped by source, cached on the block.

    ``perm[j]`` is the edge (CSR position) at transposed position ``j`` (kept only once a
    caller asks for it: a weighted sum's backward; an unweighted one needs no edge order);
    ``t_indices[j]`` is that edge's destination.  The destinations of the edges are not
    cached here either: a full-batch block of 31M edges would keep 0.25 GB each for nothing.
    """
    cache = block.cache.get("transposed")
    if cache is None or (with_perm and cache[2] is None):
        perm = torch.sort(block.indices, stable=True).indices
        t_indices = block.edge_dst(cache=False)[perm]
        t_indptr = torch.zeros(block.num_src + 1, dtype=torch.int64, device=block.device)
        torch.cumsum(torch.bincount(block.indices, minlength=block.num_src), 0, out=t_indptr[1:])
        cache = (t_indptr, t_indices, perm if with_perm else None)
        block.cache["transposed"] = cache
    assert isinstance(cache, tuple)
    return cache


def _head_layout(block: Block, heads: int, transposed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices, offsets)`` of the bags ``(h, r)`` of ``heads`` heads over the block's CSR
    (``transposed``: over its transposed CSR), head-major; cached on the block.

    Bag ``h * rows + r`` holds, in CSR order, the rows ``col * H + h`` of the
    flattened ``[cols * H, D]`` input (a ``[cols, H, D]`` tensor as it is), so
    the output is ``[H, rows, D]`` and the weights of the bags are ``w[E, H]``
    transposed: every piece is a broadcast, nothing is permuted per entry.
    """
    key = ("heads", heads, transposed)
    layout = block.cache.get(key)
    if layout is None:
        if transposed:
            indptr, cols, _ = _transposed(block)
        else:
            indptr, cols = block.indptr, block.indices
        if heads == 1:  # the CSR itself (its last offset is the number of entries)
            layout = (cols, indptr)
        else:
            nnz = cols.shape[0]
            shift = torch.arange(heads, device=indptr.device).unsqueeze(1)
            offsets = (indptr[:-1].unsqueeze(0) + shift * nnz).reshape(-1)
            layout = ((cols.unsqueeze(0) * heads + shift).reshape(-1),
                      torch.cat([offsets, offsets.new_full((1,), heads * nnz)]))
        block.cache[key] = layout
    assert isinstance(layout, tuple)
    return layout


def _bag(block: Block, x: torch.Tensor, weight_he: torch.Tensor | None, transposed: bool) -> torch.Tensor:
    """``out[r, h] = sum_k w[k, h] x[col_k, h]`` over the block's CSR (``transposed``: its
    transposed CSR) for ``x`` ``[cols, H, D]`` and weights ``[H, nnz]`` in that CSR's order;
    ``[rows, H, D]`` (a head-major tensor seen row-major when ``H > 1``)."""
    heads, dim = x.shape[1], x.shape[2]
    rows = block.num_src if transposed else block.num_dst
    indices, offsets = _head_layout(block, heads, transposed)
    if x.shape[0] == 0 or indices.shape[0] == 0:
        return x.new_zeros(rows, heads, dim)
    w = None if weight_he is None else weight_he.reshape(-1)
    out = F.embedding_bag(indices, x.reshape(-1, dim), offsets, mode="sum", per_sample_weights=w,
                          include_last_offset=True)
    return out.view(heads, rows, dim).transpose(0, 1)


def _sddmm(block: Block, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = <a[dst_e, h], b[src_e, h]>`` (``a``: [num_dst, H, D], ``b``: [num_src, H, D])."""
    heads, dim = a.shape[1], a.shape[2]
    if block.num_edges == 0:
        return a.new_zeros(0, heads)
    indices, offsets = _head_layout(block, heads, transposed=False)
    dst = block.edge_dst()
    bag_of = (dst.unsqueeze(0) + torch.arange(heads, device=dst.device).unsqueeze(1) * block.num_dst).reshape(-1)
    # the fused kernel of embedding_bag's per-sample-weight gradient: one dot product per entry
    flat = torch.ops.aten._embedding_bag_per_sample_weights_backward(
        a.transpose(0, 1).reshape(-1, dim), b.reshape(-1, dim), indices, offsets[:-1], bag_of, 0, -1)
    return flat.view(heads, block.num_edges).t()


class _CSRSum(torch.autograd.Function):
    """Sum of (optionally weighted) source rows into destinations, per head."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, block: Block) -> torch.Tensor:
        # x: [num_src, H, D]; weight: [E, H] or None
        ctx.block = block
        w_he = None if weight is None else weight.t().contiguous()
        # x is needed only for the weights' gradient: an unweighted sum (GCN, SAGE-mean) keeps
        # no copy of its input rows alive until backward (full-batch: all [inner | halo] rows)
        ctx.save_for_backward(x if weight is not None and ctx.needs_input_grad[1] else None, w_he)
        return _bag(block, x, w_he, transposed=False).contiguous()

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x, w_he = ctx.saved_tensors
        block: Block = ctx.block
        grad_out = grad_out.contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            t_weight = None if w_he is None else torch.index_select(w_he, 1, _transposed(block, with_perm=True)[2])
            grad_x = _bag(block, grad_out, t_weight, transposed=True)
        if w_he is not None and ctx.needs_input_grad[1]:
            assert x is not None
            grad_w = _sddmm(block, grad_out, x.contiguous())
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
    out = _CSRSum.apply(x3.contiguous(), None if w is None else w.contiguous(), block)
    return out.squeeze(1) if flat else out


def _mean_divisor(block: Block, x: torch.Tensor) -> torch.Tensor:
    """Each destination's in-degree (at least 1) as ``x``'s dtype, shaped to divide a row of ``x``."""
    return block.in_degrees().clamp(min=1).to(x.dtype).view(-1, *([1] * (x.dim() - 1)))


def spmm_mean(block: Block, x: torch.Tensor) -> torch.Tensor:
    """Mean of in-neighbour rows (zero for a destination without in-edges)."""
    out, deg = spmm_sum(block, x), _mean_divisor(block, x)
    # without autograd (an input layer's features, inference) in place: one [num_dst, D] tensor less
    return out / deg if out.requires_grad else out.div_(deg)


class _MeanAndOwn(torch.autograd.Function):
    """``(spmm_mean(block, x), x[:num_dst])`` as one node: backward adds the destinations' own
    gradient into the aggregation's ``[num_src, D]`` one in place, where autograd, seeing ``x``
    used twice, would pad the slice's gradient to ``x``'s size and add the two (a zero-filled
    and a summed ``[num_src, D]`` tensor per layer: 8 % of a products-shaped batch's
    forward/backward here).  The values are those of the two separate uses."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, block: Block) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.block = block  # forward runs without autograd: spmm_mean is the plain computation
        return spmm_mean(block, x), x[: block.num_dst].clone()

    @staticmethod
    def backward(ctx: Any, grad_agg: torch.Tensor | None, grad_own: torch.Tensor | None) -> tuple[torch.Tensor, None]:
        block: Block = ctx.block
        if grad_agg is None:
            grad_x = grad_own.new_zeros(block.num_src, grad_own.shape[1])  # type: ignore[union-attr]
        else:  # _CSRSum's backward of the mean: the transposed sum of grad / degree
            grad = (grad_agg / _mean_divisor(block, grad_agg)).unsqueeze(1)
            grad_x = _bag(block, grad, None, transposed=True).squeeze(1).contiguous()
        if grad_own is not None:
            grad_x[: block.num_dst] += grad_own
        return grad_x, None


def mean_and_own(block: Block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(spmm_mean(block, x), x[:block.num_dst])`` of rows ``x`` ``[num_src, D]`` with one
    backward (:class:`_MeanAndOwn`): a SAGE-mean layer's two uses of its input."""
    if x.dim() != 2 or x.shape[0] != block.num_src:
        raise ValueError(f"mean_and_own: x is {tuple(x.shape)}, block has {block.num_src} sources")
    if not x.requires_grad:  # nothing to add in backward: the plain forms, no copy of the rows
        return spmm_mean(block, x), x[: block.num_dst]
    agg, own = _MeanAndOwn.apply(x, block)
    return agg, own


def _segment(block: Block, values: torch.Tensor, reduce: str) -> torch.Tensor:
    """Per-destination ``reduce`` (``sum`` / ``amax``) of per-edge ``values`` ([E] or [E, H])."""
    dst = block.edge_dst()
    shape = (block.num_dst, *values.shape[1:])
    index = dst.view(-1, *([1] * (values.dim() - 1))).expand_as(values)
    init = float("-inf") if reduce == "amax" else 0.0
    return values.new_full(shape, init).scatter_reduce_(0, index, values, reduce)


class _EdgeSoftmax(torch.autograd.Function):
    """``softmax`` over each destination's in-edges; backward ``a * (g - sum_row(a * g))``."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, block: Block) -> torch.Tensor:
        dst = block.edge_dst()
        # the shift only stabilises exp(); the softmax does not depend on it
        expo = torch.exp(logits - torch.index_select(_segment(block, logits, "amax"), 0, dst))
        out = expo.div_(torch.index_select(_segment(block, expo, "sum"), 0, dst))
        ctx.block = block
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (out,) = ctx.saved_tensors
        block: Block = ctx.block
        ga = grad * out
        return ga.sub_(out * torch.index_select(_segment(block, ga, "sum"), 0, block.edge_dst())), None


def edge_softmax(block: Block, logits: torch.Tensor) -> torch.Tensor:
    """Softmax of ``logits`` ([E] or [E, H]) over the in-edges of each destination."""
    return _EdgeSoftmax.apply(logits, block)


def _check_relations(block: Block, num_rels: int) -> torch.Tensor | None:
    etypes = block.etypes
    if etypes is not None and etypes.numel() and (int(etypes.min()) < 0 or int(etypes.max()) >= num_rels):
        raise ValueError(f"block edge types must be in [0, {num_rels}), got [{int(etypes.min())}, "
                         f"{int(etypes.max())}]")
    return etypes


def relation_block(block: Block, num_rels: int) -> Block:
    """The block with one destination row per (destination, relation), cached on the block.

    Row ``i * num_rels + r`` holds destination ``i``'s in-edges of relation ``r``: the
    block's own edges in its own order, so per-edge tensors stay aligned, which needs each
    destination's edges grouped by relation in relation order (the typed sampler's and a
    homogenized store's order).  Without ``etypes`` every edge is of relation 0.  A mean
    over it is the per-relation mean; a softmax over it, the per-relation softmax.
    """
    key = ("relation_rows", num_rels)
    out = block.cache.get(key)
    if out is None:
        etypes = _check_relations(block, num_rels)
        rows = block.edge_dst() * num_rels
        if etypes is not None:
            rows = rows + etypes
        if rows.shape[0] > 1 and bool((rows[1:] < rows[:-1]).any()):
            raise ValueError("block edges must be grouped by edge type within each destination, in type order "
                             "(as gnnflow.sampling.TypedNeighborSampler and homogenized stores list them)")
        num_rows = block.num_dst * num_rels
        indptr = torch.zeros(num_rows + 1, dtype=torch.int64, device=block.device)
        torch.cumsum(torch.bincount(rows, minlength=num_rows), 0, out=indptr[1:])
        out = Block(dst_ids=torch.arange(num_rows, device=block.device), src_ids=block.src_ids, indptr=indptr,
                    indices=block.indices)
        out.cache["edge_dst"] = rows
        block.cache[key] = out
    assert isinstance(out, Block)
    return out


def relation_sources(block: Block, num_rels: int) -> tuple[torch.Tensor, list[int], Block]:
    """The (source, relation) pairs the block's edges use, grouped by relation, cached on the block.

    Returns ``(pair_src, bounds, pair_block)``: pair ``p`` is source ``pair_src[p]`` seen
    through relation ``r`` for ``bounds[r] <= p < bounds[r + 1]``; ``pair_block`` is the
    block with every edge pointing at its pair instead of its source (the same CSR, so
    per-edge tensors stay aligned; ``num_src`` = number of pairs).  A layer that transforms
    a source per relation (``W_r h_j``) computes only the pairs an edge uses, and one SpMM
    over ``pair_block`` sums the messages of all relations.
    """
    key = ("relation_sources", num_rels)
    out = block.cache.get(key)
    if out is None:
        etypes = _check_relations(block, num_rels)
        n = block.num_src
        keys = block.indices if etypes is None else etypes * n + block.indices
        # a bitmap over (relation, source) finds the pairs in relation-major order without a sort
        mark = torch.zeros(num_rels * n, dtype=torch.bool, device=block.device)
        mark[keys] = True
        pair_keys = torch.nonzero(mark).squeeze(1)
        position = torch.empty(num_rels * n, dtype=torch.int64, device=block.device)
        position[pair_keys] = torch.arange(pair_keys.shape[0], device=block.device)
        bounds = torch.searchsorted(pair_keys, torch.arange(num_rels + 1, device=block.device) * n).tolist()
        pair_block = Block(dst_ids=block.dst_ids, src_ids=pair_keys % max(n, 1), indptr=block.indptr,
                           indices=position[keys])
        pair_block.cache["edge_dst"] = block.edge_dst()
        out = (pair_block.src_ids, bounds, pair_block)
        block.cache[key] = out
    assert isinstance(out, tuple)
    return out


class _SegmentMM(torch.autograd.Function):
    """``out[b_r:b_{r+1}] = x[b_r:b_{r+1}] @ w[r]``; each GEMM writes its own rows of one output (and
    backward its own rows of one input gradient), so no segment is sliced out of a zero-filled copy."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bounds: list[int]) -> torch.Tensor:
        ctx.bounds = bounds
        ctx.save_for_backward(x, weight)
        out = x.new_empty(x.shape[0], weight.shape[2])
        for r, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            if hi > lo:
                torch.mm(x[lo:hi], weight[r], out=out[lo:hi])
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = x.new_empty(x.shape) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        for r, (lo, hi) in enumerate(zip(ctx.bounds[:-1], ctx.bounds[1:], strict=True)):
            if hi == lo:
                continue
            if grad_x is not None:
                torch.mm(grad[lo:hi], weight[r].t(), out=grad_x[lo:hi])
            if grad_w is not None:
                torch.mm(x[lo:hi].t(), grad[lo:hi], out=grad_w[r])
        return grad_x, grad_w, None


def segment_matmul(x: torch.Tensor, bounds: list[int], weight: torch.Tensor) -> torch.Tensor:
    """``out[bounds[r]:bounds[r + 1]] = x[bounds[r]:bounds[r + 1]] @ weight[r]`` for ``x`` ``[N, I]``
    and ``weight`` ``[R, I, O]`` (``bounds[0] = 0``, ``bounds[-1] = N``): one GEMM per non-empty
    segment (DGL's ``segment_mm``)."""
    if bounds[0] != 0 or bounds[-1] != x.shape[0] or len(bounds) != weight.shape[0] + 1:
        raise ValueError(f"segment_matmul: bounds {bounds} must run from 0 to {x.shape[0]} over "
                         f"{weight.shape[0]} segments")
    return _SegmentMM.apply(x.contiguous(), weight.contiguous(), bounds)


def relation_major(block: Block, num_rels: int) -> tuple[Block, list[int], torch.Tensor]:
    """The block's non-empty (destination, relation) rows in relation-major order, cached on the block.

    Returns ``(rows, bounds, row_dst)``: row ``q`` of the block ``rows`` holds the in-edges of
    relation ``r`` of destination ``row_dst[q]`` for ``bounds[r] <= q < bounds[r + 1]``.  A
    mean over ``rows`` gives each relation's mean of each destination with such edges, and
    the rows of one relation are one segment for :func:`segment_matmul`: a per-relation
    transform costs a GEMM row per (destination, relation) pair that has edges, not per
    destination and relation.  The edges need no particular order.
    """
    key = ("relation_major", num_rels)
    out = block.cache.get(key)
    if out is None:
        etypes = _check_relations(block, num_rels)
        dst = block.edge_dst()
        keys = dst if etypes is None else etypes * block.num_dst + dst
        order = torch.sort(keys, stable=True).indices if etypes is not None else None
        counts = torch.bincount(keys, minlength=num_rels * block.num_dst)
        row_keys = torch.nonzero(counts).squeeze(1)
        indptr = torch.zeros(row_keys.shape[0] + 1, dtype=torch.int64, device=block.device)
        torch.cumsum(counts[row_keys], 0, out=indptr[1:])
        bounds = torch.searchsorted(row_keys, torch.arange(num_rels + 1, device=block.device) * block.num_dst)
        rows = Block(dst_ids=row_keys, src_ids=block.src_ids, indptr=indptr,
                     indices=block.indices if order is None else block.indices[order])
        out = (rows, bounds.tolist(), row_keys % max(block.num_dst, 1))
        block.cache[key] = out
    assert isinstance(out, tuple)
    return out
