"""R-GAT (MLPerf's layer: a GAT per relation, summed): our layer computes DGL 1.1's
``HeteroGraphConv`` of ``GATConv`` and PyG 2.8's ``HeteroConv`` of ``GATConv`` with the same weights."""

from __future__ import annotations

import pytest
import torch
from datagen import typed_sample

from gnnflow.nn import RGATConv


@pytest.fixture(scope="module")
def sample():
    return typed_sample()


@pytest.mark.parametrize("layer", [0, 1])
def test_rgat_equals_dgl_and_pyg(sample, layer):
    pytest.importorskip("dgl")
    pytest.importorskip("torch_geometric")
    from gnnflow.bench import rel_peers

    blocks, rel_types, _ = sample
    block, num_rels = blocks[layer], len(rel_types)
    torch.manual_seed(0)
    ours = RGATConv(12, 4, num_rels, heads=3, rel_dst_types=[d for _, d in rel_types])
    with torch.no_grad():
        ours.bias.normal_()  # each relation's bias reaches its destination type's vertices
    x = torch.randn(block.num_src, 12, requires_grad=True)
    ref = ours(block, x)
    (gref,) = torch.autograd.grad(ref.square().sum(), x)
    assert ref.shape == (block.num_dst, 3, 4)
    peers = [("DGL", rel_peers.dgl_from_ours("rgat", ours, rel_types),
              rel_peers.dgl_graph("rgat", block, num_rels, rel_types)),
             ("PyG", rel_peers.pyg_from_ours("rgat", ours, "HeteroConv", rel_types),
              rel_peers.pyg_graph("rgat", block, num_rels, rel_types))]
    for name, peer, graph in peers:
        out = peer(graph, x)
        (grad,) = torch.autograd.grad(out.square().sum(), x)
        assert torch.allclose(out, ref, atol=1e-5), name
        assert torch.allclose(grad, gref, rtol=1e-4, atol=1e-4), name


def test_rgat_attends_within_each_relation(sample):
    """Each relation's attention is a softmax over that relation's in-edges alone: with W_r = I
    (one head) and equal scores, a destination gets the mean of each relation's sources, summed."""
    blocks, rel_types, _ = sample
    block = blocks[0]
    num_rels = len(rel_types)
    layer = RGATConv(5, 5, num_rels, heads=1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(5).expand(num_rels, 5, 5))
        layer.attn_l.zero_()
        layer.attn_r.zero_()
    x = torch.randn(block.num_src, 5)
    rows = block.edge_dst() * num_rels + block.etypes
    sums = torch.zeros(block.num_dst * num_rels, 5).index_add_(0, rows, x[block.indices])
    counts = torch.bincount(rows, minlength=block.num_dst * num_rels).clamp(min=1).unsqueeze(1)
    want = (sums / counts).view(block.num_dst, num_rels, 5).sum(1)
    assert torch.allclose(layer(block, x).squeeze(1), want, atol=1e-5)
