"""gnnflow.nn.dropout: the cheap CPU dropout mask (and ReLU fused into it) every gnnflow model uses."""

from __future__ import annotations

import pytest
import torch

from gnnflow.nn.dropout import STEPS, Dropout


def test_drops_at_rate_p_and_keeps_the_expectation():
    torch.manual_seed(0)
    d = Dropout(0.3)
    x = torch.ones(1000, 1000)
    out = d(x)
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.003
    scale = STEPS / (STEPS - round(0.3 * STEPS))
    assert torch.allclose(out[kept], torch.full_like(out[kept], scale))
    assert abs(out.mean().item() - 1.0) < 0.005  # E[out] = x


def test_masks_follow_torchs_seed_and_differ_between_calls():
    d = Dropout(0.5)
    x = torch.randn(300, 70)
    torch.manual_seed(7)
    a, b = d(x), d(x)
    torch.manual_seed(7)
    assert torch.equal(d(x), a) and torch.equal(d(x), b)
    assert not torch.equal(a, b)


def test_relu_is_fused_into_the_mask_forward_and_backward():
    torch.manual_seed(1)
    d = Dropout(0.4)
    x = torch.randn(500, 64, requires_grad=True)
    out = d(x, relu=True)
    kept = out != 0
    assert torch.all(x[kept] > 0)  # nothing negative survives
    assert kept.sum() < (x > 0).sum()  # and some positives were dropped
    scale = STEPS / (STEPS - round(0.4 * STEPS))
    assert torch.allclose(out[kept], x[kept] * scale)
    out.sum().backward()
    assert torch.allclose(x.grad, kept.float() * scale)  # the same mask scales the gradient


def test_eval_mode_and_the_edge_probabilities():
    x = torch.randn(50, 8)
    d = Dropout(0.5).eval()
    assert torch.equal(d(x), x) and torch.equal(d(x, relu=True), torch.relu(x))
    assert torch.equal(Dropout(0.0)(x, relu=True), torch.relu(x))
    assert torch.count_nonzero(Dropout(1.0)(x)) == 0
    with pytest.raises(ValueError):
        Dropout(1.5)


def test_the_buffer_and_flag_forms_draw_keep_masks_draws(monkeypatch):
    """MG-GCN's forms (a mask written into a reused buffer a chunk at a time, boolean flags)
    draw what keep_mask draws for the same state of torch's generator, whatever the chunk."""
    import gnnflow.nn.dropout as dropout

    shape = torch.Size([37, 11])  # 407 elements: not a multiple of 4 or of the chunk
    torch.manual_seed(3)
    want = dropout.keep_mask(shape, 0.3)
    monkeypatch.setattr(dropout, "FILL_CHUNK", 8)
    buf = torch.full(shape, -1.0)
    torch.manual_seed(3)
    assert dropout.fill_keep_mask_like(buf, 0.3) is buf
    assert torch.equal(buf, want)
    torch.manual_seed(3)
    flags, scale = dropout.keep_flags_like(torch.empty(shape), 0.3)
    assert flags.dtype == torch.bool and torch.equal(flags.float() * scale, want)
    assert scale == dropout.keep_scale_on(torch.device("cpu"), 0.3) == STEPS / (STEPS - round(0.3 * STEPS))
    assert 0.6 < flags.float().mean().item() < 0.8
    assert dropout.keep_scale(0.99999999)[1] == STEPS  # never a division by zero
