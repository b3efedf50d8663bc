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


def test_fused_relu_dropout_is_relu_times_keep_masks_mask_in_place_or_not(monkeypatch):
    """The chunked ReLU-dropout (any chunk; over its input or into a new tensor) gives
    relu(x) * keep_mask for the same state of torch's generator, and that mask's gradient."""
    import gnnflow.nn.dropout as dropout

    monkeypatch.setattr(dropout, "RELU_CHUNK", 8)  # 407 elements: not a multiple of the chunk
    a = torch.randn(37, 11)
    grad = torch.randn(37, 11)
    torch.manual_seed(5)
    mask = dropout.keep_mask(a.shape, 0.3, (a > 0).numpy())
    assert 0 < int((mask == 0).sum()) < int((a > 0).sum()) + int((a <= 0).sum())
    for inplace in (False, True):
        leaf = a.clone().requires_grad_(True)
        h = leaf * 1.0  # a fresh tensor no autograd node needs
        torch.manual_seed(5)
        out = Dropout(0.3)(h, relu=True, inplace=inplace)
        assert torch.equal(out, a * mask) and torch.all(out >= 0)
        assert (out.data_ptr() == h.data_ptr()) == inplace
        out.backward(grad)
        assert torch.equal(leaf.grad, grad * mask)


def _gnn_step(layers, seed: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    from gnnflow.nn.model import GNN
    from gnnflow.sampling.block import Block

    g = torch.Generator().manual_seed(seed)
    blocks = []
    for num_dst, num_src in ((6, 12), (3, 6)):
        deg = torch.randint(1, 4, (num_dst,), generator=g)
        blocks.append(Block(dst_ids=torch.arange(num_dst), src_ids=torch.arange(num_src),
                            indptr=torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)]),
                            indices=torch.randint(0, num_src, (int(deg.sum()),), generator=g)))
    torch.manual_seed(seed)
    net = GNN(layers, dropout=0.5)
    out = net(blocks, torch.randn(12, 5, generator=g))
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in net.parameters()]


def test_a_layer_with_a_fresh_output_is_overwritten_by_its_dropout_and_trains_the_same(monkeypatch):
    from gnnflow.nn.sage import SAGEConv

    def layers():
        torch.manual_seed(1)
        return [SAGEConv(5, 7), SAGEConv(7, 2)]

    calls = []
    real = Dropout.forward
    monkeypatch.setattr(Dropout, "forward", lambda self, x, relu=False, inplace=False:
                        calls.append(inplace) or real(self, x, relu, inplace))
    fused = _gnn_step(layers())
    monkeypatch.setattr(SAGEConv, "fresh_output", False)
    plain = _gnn_step(layers())
    assert calls == [False, True, False, False]  # input dropout, layer 0's in place; then not in place
    assert torch.equal(fused[0], plain[0])
    assert all(torch.equal(a, b) for a, b in zip(fused[1], plain[1], strict=True))


def test_a_layer_whose_output_its_backward_reads_is_not_overwritten():
    """A conv without ``fresh_output`` (here its output is a sigmoid's, which backward reads)
    keeps its output: overwriting it would fail backward (a modified saved tensor)."""
    from torch import nn

    class Squash(nn.Module):
        def __init__(self, i: int, o: int) -> None:
            super().__init__()
            self.lin = nn.Linear(i, o)

        def forward(self, block, h):
            return torch.sigmoid(self.lin(h[: block.num_dst]))

    torch.manual_seed(0)
    out, grads = _gnn_step([Squash(5, 7), Squash(7, 2)])
    assert out.shape == (3, 2) and all(torch.isfinite(g).all() for g in grads)
