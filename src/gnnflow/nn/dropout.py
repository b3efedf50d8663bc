"""Dropout whose mask costs little on a CPU (and ReLU fused into it).

PyTorch's CPU dropout draws its mask with ``bernoulli_``, one Mersenne-twister
double per element: on the products-shaped benchmark (SAGE, hidden 256,
fanouts 15,10,5, batch 1000) that was 16 % of a rank's forward/backward CPU
time, more than all ReLUs and aggregations together.  Here the mask comes from
16 random bits per element (numpy's PCG64, four elements per 64-bit draw,
seeded from torch's default generator, so ``torch.manual_seed`` and a
checkpoint's RNG state fix it as they fix torch's own dropout) compared with
``round(p 65536)``; kept elements are scaled by ``65536 / (65536 - round(p
65536))`` (:func:`keep_scale`), so ``E[out] = x`` exactly and the drop probability is ``p`` rounded
to 1/65536 (at most 65535/65536).  Without a ReLU the scaled float mask is written by numpy in one
pass and kept for backward, as torch keeps its float mask.  Before dropout a hidden layer's ReLU joins the mask
(``out = relu(x) * keep * scale``, :class:`_ReluKeep`): one pass forward over chunks that stay
in a core's cache, with no mask kept (backward reads the output: positive exactly where ``x``
was positive and kept), written over ``x`` where the layer before made ``x`` afresh.  On the
products-shaped batch (47,781 x 256 hidden rows) a float mask, its draws and flags and a fresh
output had been 146 MB of newly mapped (so zeroed) pages per batch, forward alone.

On a GPU (or any non-CPU tensor) and for ``p = 0`` or eval mode this is
``F.dropout(activation(x))``.  The draws differ from torch's, so a model run
with this dropout and one with ``nn.Dropout`` agree in distribution, not
element by element; every gnnflow model, single-process or distributed, uses
this one (MG-GCN's hand-written layers through :func:`fill_keep_mask_like`, which
writes the mask into a reused buffer, and :func:`keep_flags_like`; before
2026-11-28 they drew it with ``bernoulli_``: 0.24 s of a 0.385 s epoch of
``bench fullbatch``'s single process, 100,000 x 256 hidden elements).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

STEPS = 1 << 16  # the mask compares 16-bit draws with round(p * STEPS)


def keep_scale(p: float) -> tuple[int, float]:
    """``(drop, scale)`` of drop probability ``p``: a 16-bit draw below ``drop = round(p STEPS)``
    (at most ``STEPS - 1``) drops its element, a kept one is scaled by ``STEPS / (STEPS - drop)``."""
    drop = min(int(round(p * STEPS)), STEPS - 1)
    return drop, STEPS / (STEPS - drop)


def _draws() -> np.random.PCG64:
    """The mask's bit generator, seeded by one draw of torch's default generator."""
    return np.random.PCG64(int(torch.randint(0, 1 << 62, (1,)).item()))


def _kept(gen: np.random.PCG64, n: int, drop: int) -> np.ndarray:
    """The next ``n`` elements' keep flags (four 16-bit draws per 64-bit one: a run of calls
    whose ``n`` are multiples of 4 draws what one call of their sum draws)."""
    return gen.random_raw((n + 3) // 4).view(np.uint16)[:n] >= drop


def _keep_array(shape: torch.Size, p: float) -> tuple[np.ndarray, float]:
    """The flat keep flags of a mask of ``shape`` (one draw of torch's default generator) and
    the scale of a kept element."""
    drop, scale = keep_scale(p)
    return _kept(_draws(), int(np.prod(shape)) if len(shape) else 1, drop), scale


def keep_mask(shape: torch.Size, p: float, also: np.ndarray | None = None) -> torch.Tensor:
    """A float32 mask of ``shape``: ``scale`` where an element is kept (probability ``1 -
    drop / STEPS``, and ``also``, a boolean array of ``shape``, is true where given), 0
    elsewhere (:func:`keep_scale`; ``scale`` keeps the expectation).  Consumes one draw of
    torch's default generator."""
    keep, scale = _keep_array(shape, p)
    if also is not None:
        keep &= also.reshape(-1)
    # numpy writes the scaled float mask in one pass (torch's bool -> float casts are several times slower)
    return torch.from_numpy(np.multiply(keep, np.float32(scale), dtype=np.float32)).view(shape)


def keep_flags(shape: torch.Size, p: float) -> tuple[torch.Tensor, float]:
    """``(flags, scale)``: the boolean keep flags of :func:`keep_mask`'s draws (the same
    elements kept for the same state of torch's generator) and the scale of a kept element."""
    keep, scale = _keep_array(shape, p)
    return torch.from_numpy(keep).view(shape), scale


#: elements per step of :func:`fill_keep_mask` (a multiple of 4): its scratch is 3 bytes each
FILL_CHUNK = 1 << 20


def _spans(n: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of ``n`` elements ``size`` at a time."""
    return ((s, min(n, s + size)) for s in range(0, n, size))


def _keep_chunks(n: int, p: float, size: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(start, end, keep flags)`` of :func:`keep_mask`'s draws for ``n`` elements, ``size`` at a
    time (one draw of torch's default generator, taken when the iteration starts)."""
    assert size % 4 == 0, size  # else the chunks' draws are not keep_mask's
    drop, _ = keep_scale(p)
    gen = _draws()
    for s, e in _spans(n, size):
        yield s, e, _kept(gen, e - s, drop)


def fill_keep_mask(out: torch.Tensor, p: float) -> torch.Tensor:
    """Write :func:`keep_mask`'s mask for ``out``'s shape (the same draws) into ``out``, a
    contiguous float32 CPU tensor, :data:`FILL_CHUNK` elements at a time (no whole-size
    temporary, for MG-GCN's reused buffers; numpy writes it, so not a tensor autograd tracks);
    returns ``out``."""
    flat = out.detach().view(-1).numpy()
    scale = np.float32(keep_scale(p)[1])
    for s, e, keep in _keep_chunks(flat.shape[0], p, FILL_CHUNK):
        np.multiply(keep, scale, out=flat[s:e], dtype=np.float32)
    return out


# ------------------------------------------- masks of hand-written layers (MG-GCN's, gnnflow.strategies.fullbatch)
# this module's draws on a CPU, torch's bernoulli_ elsewhere (as Dropout falls back to F.dropout there)
def keep_scale_on(device: torch.device, p: float) -> float:
    """The scale of a kept element of dropout ``p`` on ``device``."""
    return keep_scale(p)[1] if device.type == "cpu" else 1.0 / (1.0 - p)


def keep_flags_like(h: torch.Tensor, p: float) -> tuple[torch.Tensor, float]:
    """``(keep flags, scale)`` of dropout ``p`` for ``h`` (the draws of :func:`fill_keep_mask_like`)."""
    if h.device.type == "cpu":
        return keep_flags(h.shape, p)
    return torch.empty_like(h).bernoulli_(1.0 - p).bool(), keep_scale_on(h.device, p)


def fill_keep_mask_like(buf: torch.Tensor, p: float) -> torch.Tensor:
    """``buf`` filled with the scaled keep mask of dropout ``p`` (0 or the scale), returned."""
    if buf.device.type == "cpu":
        return fill_keep_mask(buf, p)
    return buf.bernoulli_(1.0 - p).mul_(keep_scale_on(buf.device, p))


#: elements per step of the fused ReLU-dropout (a multiple of 4): its scratch (the draws, the
#: flags and the scaled mask, 7 bytes an element) stays in a core's cache and below glibc's mmap
#: threshold, so it is reused from the heap instead of mapped and zeroed afresh
RELU_CHUNK = 1 << 18


def relu_keep_into(src: np.ndarray, dst: np.ndarray, p: float) -> float:
    """``dst = relu(src) * mask`` with :func:`keep_mask`'s mask (the same draws, one draw of
    torch's default generator), :data:`RELU_CHUNK` elements at a time; ``dst`` may be ``src``
    (flat float32 arrays of one size).  Returns the scale of a kept element."""
    scale = keep_scale(p)[1]
    zero, kept_scale = np.float32(0), np.float32(scale)
    for s, e, keep in _keep_chunks(src.shape[0], p, RELU_CHUNK):
        np.maximum(src[s:e], zero, out=dst[s:e])
        np.multiply(dst[s:e], np.multiply(keep, kept_scale, dtype=np.float32), out=dst[s:e])
    return scale


def relu_keep_grad(grad: torch.Tensor, out: torch.Tensor, scale: float) -> torch.Tensor:
    """The gradient of :func:`relu_keep_into`'s input from its output ``out``: ``grad * scale``
    where ``out > 0`` (the element was positive and kept), else 0, a chunk at a time."""
    grad = grad.contiguous()
    res = torch.empty_like(grad)
    flat_g, flat_o, flat_r = grad.view(-1), out.view(-1), res.view(-1)
    for s, e in _spans(flat_r.shape[0], RELU_CHUNK):
        torch.ops.aten.threshold_backward.grad_input(flat_g[s:e], flat_o[s:e], 0, grad_input=flat_r[s:e])
        flat_r[s:e].mul_(scale)
    return res


class _ReluKeep(torch.autograd.Function):
    """``relu(x) * mask`` in one pass (:func:`relu_keep_into`), written over ``x`` when
    ``inplace``; backward needs only the output (positive exactly where ``x`` was positive and
    kept), so no mask is kept."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float, inplace: bool) -> torch.Tensor:
        src = x.detach()
        out = src if inplace else torch.empty_like(src)
        ctx.scale = relu_keep_into(src.view(-1).numpy(), out.view(-1).numpy(), p)
        if inplace:
            ctx.mark_dirty(x)
            out = x
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (out,) = ctx.saved_tensors
        return relu_keep_grad(grad, out, ctx.scale), None, None


class _Mul(torch.autograd.Function):
    """``x * mask`` with the mask (a constant) saved for backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (mask,) = ctx.saved_tensors
        return grad * mask, None


class Dropout(nn.Module):
    """``nn.Dropout`` with the cheap CPU mask of this module; ``relu=True`` applies ReLU first,
    fused into the mask (see the module docstring)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = float(p)

    def forward(self, x: torch.Tensor, relu: bool = False, inplace: bool = False) -> torch.Tensor:
        """``inplace`` (with ``relu``): write the result over ``x``, which no autograd node may
        need (the output of a conv that declares ``fresh_output``, e.g.
        :class:`gnnflow.nn.sage.SAGEConv`)."""
        if (not self.training or self.p in (0.0, 1.0) or x.device.type != "cpu" or x.dtype != torch.float32
                or not x.is_contiguous()):
            return F.dropout(F.relu(x) if relu else x, self.p, self.training)
        if relu:
            return _ReluKeep.apply(x, self.p, inplace)
        return _Mul.apply(x, keep_mask(x.shape, self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"
