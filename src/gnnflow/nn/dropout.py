"""Dropout whose mask costs little on a CPU (and ReLU fused into it).

PyTorch's CPU dropout draws its mask with ``bernoulli_``, one Mersenne-twister
double per element: on the products-shaped benchmark (SAGE, hidden 256,
fanouts 15,10,5, batch 1000) that was 16 % of a rank's forward/backward CPU
time, more than all ReLUs and aggregations together.  Here the mask comes from
16 random bits per element (numpy's PCG64, four elements per 64-bit draw,
seeded from torch's default generator, so ``torch.manual_seed`` and a
checkpoint's RNG state fix it as they fix torch's own dropout) compared with
``round(p 65536)``; kept elements are scaled by ``65536 / (65536 - round(p
65536))``, so ``E[out] = x`` exactly and the drop probability is ``p`` rounded
to 1/65536.  The scaled float mask is written by numpy in one pass and kept for
backward, as torch keeps its float mask.  Before dropout a hidden layer's ReLU joins the mask
(``out = x * [x > 0] * keep * scale``): one pass forward, one backward.

On a GPU (or any non-CPU tensor) and for ``p = 0`` or eval mode this is
``F.dropout(activation(x))``.  The draws differ from torch's, so a model run
with this dropout and one with ``nn.Dropout`` agree in distribution, not
element by element; every gnnflow model, single-process or distributed, uses
this one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

STEPS = 1 << 16  # the mask compares 16-bit draws with round(p * STEPS)


def keep_mask(shape: torch.Size, p: float, also: np.ndarray | None = None) -> torch.Tensor:
    """A float32 mask of ``shape``: ``scale`` where an element is kept (probability ``1 -
    round(p STEPS) / STEPS``, and ``also``, a boolean array of ``shape``, is true where given),
    0 elsewhere; ``scale = STEPS / (STEPS - round(p STEPS))`` keeps the expectation.
    Consumes one draw of torch's default generator."""
    n = int(np.prod(shape)) if len(shape) else 1
    seed = int(torch.randint(0, 1 << 62, (1,)).item())
    bits = np.random.PCG64(seed).random_raw((n + 3) // 4).view(np.uint16)[:n]
    drop = int(round(p * STEPS))
    keep = bits >= drop
    if also is not None:
        keep &= also.reshape(-1)
    # numpy writes the scaled float mask in one pass (torch's bool -> float casts are several times slower)
    return torch.from_numpy(np.multiply(keep, np.float32(STEPS / (STEPS - drop)), dtype=np.float32)).view(shape)


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

    def forward(self, x: torch.Tensor, relu: bool = False) -> torch.Tensor:
        if (not self.training or self.p in (0.0, 1.0) or x.device.type != "cpu" or x.dtype != torch.float32
                or not x.is_contiguous()):
            return F.dropout(F.relu(x) if relu else x, self.p, self.training)
        # numpy's comparison: torch's `x > 0` on a CPU tensor takes about 6 times as long here
        mask = keep_mask(x.shape, self.p, np.greater(x.detach().numpy(), 0) if relu else None)
        return _Mul.apply(x, mask)

    def extra_repr(self) -> str:
        return f"p={self.p}"
