"""Our block layers equal DGL 1.1.3's SAGEConv / GraphConv / GATConv given the same weights."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import random_store_arrays

os.environ.setdefault("DGLBACKEND", "pytorch")
dgl = pytest.importorskip("dgl")
dglnn = pytest.importorskip("dgl.nn.pytorch")

from gnnflow.nn import GATConv, GCNConv, SAGEConv, build_model, edge_softmax, spmm_sum  # noqa: E402
from gnnflow.sampling import Block, NeighborSampler  # noqa: E402

TOL = 1e-5
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _sampled_block(fanout: int = 5, seed: int = 0) -> Block:
    a = random_store_arrays(num_nodes=600, avg_degree=10, seed=seed)
    sampler = NeighborSampler(a["indptr"], a["indices"], [fanout], seed=seed)
    block, _ = sampler.sample_layer(torch.arange(0, 600, 3), fanout, 0)
    return block


def _dgl_block(block: Block):
    return dgl.create_block((block.indices, block.edge_dst()), num_src_nodes=block.num_src,
                            num_dst_nodes=block.num_dst)


def _pair(kind: str, d_in: int, d_out: int):
    if kind == "sage":
        return SAGEConv(d_in, d_out), dglnn.SAGEConv(d_in, d_out, "mean")
    if kind == "sage-gcn":
        return SAGEConv(d_in, d_out, aggregator="gcn"), dglnn.SAGEConv(d_in, d_out, "gcn")
    if kind == "gat-8":  # the standard recipe's hidden layer: 8 heads, dropouts (off in eval mode)
        return (GATConv(d_in, d_out, heads=8, feat_drop=0.6, attn_drop=0.6).eval(),
                dglnn.GATConv(d_in, d_out, num_heads=8, feat_drop=0.6, attn_drop=0.6).eval())
    if kind.startswith("gcn"):
        norm = kind.split("-")[1]
        return GCNConv(d_in, d_out, norm=norm), dglnn.GraphConv(d_in, d_out, norm=norm)
    return GATConv(d_in, d_out, heads=3), dglnn.GATConv(d_in, d_out, num_heads=3)


def _compare(ours, theirs, block: Block, d_in: int, device: str) -> None:
    torch.manual_seed(0)
    ours.load_state_dict(theirs.state_dict())
    ours, theirs = ours.to(device), theirs.to(device)
    g = _dgl_block(block).to(device)
    block = block.to(device)
    x = torch.randn(block.num_src, d_in, device=device)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    out1, out2 = ours(block, x1), theirs(g, x2)
    assert out1.shape == out2.shape
    assert (out1 - out2).abs().max().item() <= TOL
    w = torch.randn_like(out1)
    (out1 * w).sum().backward()
    (out2 * w).sum().backward()
    # gradients sum over many rows: compare at float32 rounding relative to their scale
    assert _rel(x1.grad, x2.grad) <= TOL
    p2 = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert _rel(p.grad, p2[name].grad) <= TOL, name


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp(min=1.0)).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["sage", "sage-gcn", "gcn-both", "gcn-right", "gat", "gat-8"])
@pytest.mark.parametrize("dims", [(16, 8), (8, 16), (200, 4)])  # projection before / after aggregation
def test_layer_equals_dgl(kind, dims, device):
    block = _sampled_block()
    ours, theirs = _pair(kind, *dims)
    _compare(ours, theirs, block, dims[0], device)


@pytest.mark.parametrize("kind", ["sage", "sage-gcn", "gcn-both", "gcn-right", "gat", "gat-8"])
def test_layer_equals_dgl_on_full_graph(kind):
    a = random_store_arrays(num_nodes=300, avg_degree=8, seed=7)
    block = Block.full_graph(a["indptr"], a["indices"])
    ours, theirs = _pair(kind, 12, 6)
    _compare(ours, theirs, block, 12, "cpu")


def test_gcn_uses_global_degrees_when_given():
    block = _sampled_block()
    layer = GCNConv(4, 4)
    x = torch.randn(block.num_src, 4)
    local = layer(block, x)
    block.src_deg = torch.full((block.num_src,), 4.0)
    block.dst_deg = torch.full((block.num_dst,), 9.0)
    glob = layer(block, x)
    agg = spmm_sum(block, x * 0.5) @ layer.weight / 3.0 + layer.bias
    assert torch.allclose(glob, agg, atol=1e-5)
    assert not torch.allclose(local, glob)


@pytest.mark.parametrize("uses", ["both", "mean", "own"])
def test_mean_and_own_equals_the_two_separate_uses_exactly(uses):
    """One autograd node for a SAGE-mean layer's two uses of its input: the same values and the
    same input gradient, bit for bit, as ``spmm_mean`` and the slice (whichever of the two the
    loss uses)."""
    from gnnflow.nn.ops import mean_and_own, spmm_mean

    block = _sampled_block()
    torch.manual_seed(3)
    x = torch.randn(block.num_src, 6)
    w_mean, w_own = torch.randn(block.num_dst, 6), torch.randn(block.num_dst, 6)
    grads, values = [], []
    for fused in (True, False):
        xi = x.clone().requires_grad_()
        mean, own = mean_and_own(block, xi) if fused else (spmm_mean(block, xi), xi[: block.num_dst])
        loss = {"both": (mean * w_mean).sum() + (own * w_own).sum(), "mean": (mean * w_mean).sum(),
                "own": (own * w_own).sum()}[uses]
        loss.backward()
        grads.append(xi.grad)
        values.append((mean.detach(), own.detach()))
    assert torch.equal(values[0][0], values[1][0]) and torch.equal(values[0][1], values[1][1])
    assert torch.equal(grads[0], grads[1])
    assert grads[0][block.num_dst:].abs().sum() > 0 or uses == "own"


def test_edge_softmax_sums_to_one_per_destination():
    block = _sampled_block()
    logits = torch.randn(block.num_edges, 2) * 10
    a = edge_softmax(block, logits)
    sums = torch.zeros(block.num_dst, 2).index_add_(0, block.edge_dst(), a)
    has_edges = block.in_degrees() > 0
    assert torch.allclose(sums[has_edges], torch.ones_like(sums[has_edges]), atol=1e-6)


def test_edge_softmax_gradient():
    block = _sampled_block(fanout=4)
    logits = torch.randn(block.num_edges, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: edge_softmax(block, z), (logits,))


def test_gat_dropouts_act_in_training_only():
    block = _sampled_block()
    x = torch.randn(block.num_src, 8)
    for name in ("feat_drop", "attn_drop"):
        layer = GATConv(8, 4, heads=2, **{name: 0.5})
        layer.eval()
        ref = layer(block, x)
        assert torch.equal(ref, layer(block, x))
        layer.train()
        torch.manual_seed(0)
        assert not torch.allclose(layer(block, x), ref), name


def test_weighted_spmm_gradients_match_autograd_reference():
    block = _sampled_block(fanout=4)
    x = torch.randn(block.num_src, 2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(block.num_edges, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: spmm_sum(block, x, w), (x, w))


@pytest.mark.parametrize("model", ["sage", "gcn", "gcn-right", "gat", "mlp"])
def test_model_forward_and_layer_step(model):
    a = random_store_arrays(num_nodes=300, avg_degree=8, seed=1)
    blocks = NeighborSampler(a["indptr"], a["indices"], [4, 3], seed=0).sample_blocks(torch.arange(10))
    net = build_model(model, 8, 16, 4, 2, dropout=0.0, heads=2)
    x = torch.randn(blocks[0].num_src, 8)
    out = net(blocks, x)
    assert out.shape == (10, 4)
    h = x
    for i, b in enumerate(blocks):
        h = net.layer_step(i, b, h)
    assert torch.equal(h, out)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


RECIPE_SETTINGS = {  # the standard recipes' model settings (config/recipes/), dropouts off in eval mode
    "gcn": {},
    "sage": {"aggregator": "gcn", "input_dropout": 0.5},
    "gat": {"heads": 8, "out_heads": 1, "feat_drop": 0.6, "attn_drop": 0.6},
}


@pytest.mark.parametrize("model", sorted(RECIPE_SETTINGS))
def test_model_equals_dgl_peer_model(model):
    """build_model and nn.peer.DGLModel are the same model: with copied weights, the same logits
    (eval mode) on the whole graph, GAT with 8 hidden heads concatenated and 1 output head."""
    from gnnflow.nn.peer import DGLModel

    a = random_store_arrays(num_nodes=300, avg_degree=8, seed=3)
    block = Block.full_graph(a["indptr"], a["indices"])
    settings = dict(RECIPE_SETTINGS[model])
    heads = settings.pop("heads", 1)
    torch.manual_seed(0)
    theirs = DGLModel(model, 12, 8, 5, 2, 0.5, heads, **settings).eval()
    ours = build_model(model, 12, 8, 5, 2, 0.5, heads, **settings).eval()
    ours.load_state_dict(theirs.state_dict())
    if model == "gat":
        assert ours.layers[0].heads == 8 and ours.layers[1].heads == 1 and ours.layers[1].in_dim == 64
        assert ours.activation == "elu"
    x = torch.randn(300, 12)
    g = _dgl_block(block)
    assert (ours([block, block], x) - theirs([g, g], x)).abs().max().item() <= TOL


def test_input_dropout_drops_the_first_layers_input_only():
    a = random_store_arrays(num_nodes=300, avg_degree=8, seed=1)
    block = Block.full_graph(a["indptr"], a["indices"])
    net = build_model("sage", 8, 16, 4, 2, input_dropout=0.9)
    x = torch.randn(300, 8)
    net.eval()
    ref = net([block, block], x)
    net.train()
    assert not torch.allclose(net([block, block], x), ref)
    net.input_dropout.p = 0.0
    assert torch.allclose(net([block, block], x), ref)  # nothing else drops (dropout 0)


def test_model_settings_are_checked():
    from gnnflow.config import ACTIVATIONS as NAMES
    from gnnflow.config import TrainConfig
    from gnnflow.errors import ConfigError
    from gnnflow.nn.model import ACTIVATIONS

    assert tuple(ACTIVATIONS) == NAMES
    for bad in ({"activation": "tanh"}, {"aggregator": "max"}, {"feat_drop": 1.0}, {"attn_drop": -0.1},
                {"input_dropout": 1.5}, {"out_heads": 0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            TrainConfig(graph="g", **bad)
