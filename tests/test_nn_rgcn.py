"""RGCN (Schlichtkrull et al.): our layer computes DGL 1.1's ``RelGraphConv`` and PyG 2.8's
``RGCNConv``/``FastRGCNConv`` with the same weights, and really reads the edge types."""

from __future__ import annotations

import pytest
import torch
from datagen import typed_sample

from gnnflow.nn import RGCNConv
from gnnflow.nn.ops import relation_block, segment_matmul
from gnnflow.sampling import Block


@pytest.fixture(scope="module")
def sample():
    return typed_sample()


def _out_and_grad(layer, graph, x):
    out = layer(graph, x)
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    return out.detach(), grad


@pytest.mark.parametrize("num_bases", [0, 3])
def test_rgcn_equals_dgl_and_pyg(sample, num_bases):
    pytest.importorskip("dgl")
    pytest.importorskip("torch_geometric")
    from gnnflow.bench import rel_peers

    blocks, rel_types, _ = sample
    block, num_rels = blocks[0], len(rel_types)
    torch.manual_seed(0)
    ours = RGCNConv(12, 8, num_rels, num_bases=num_bases)
    with torch.no_grad():
        ours.bias.normal_()
    x = torch.randn(block.num_src, 12, requires_grad=True)
    ref, gref = _out_and_grad(ours, block, x)
    peers = [("DGL", rel_peers.dgl_from_ours("rgcn", ours, rel_types),
              rel_peers.dgl_graph("rgcn", block, num_rels, rel_types))]
    pg = rel_peers.pyg_graph("rgcn", block, num_rels, rel_types)
    peers += [(form, rel_peers.pyg_from_ours("rgcn", ours, form, rel_types), pg)
              for form in rel_peers.PYG_FORMS["rgcn"]]
    for name, layer, graph in peers:
        out, grad = _out_and_grad(layer, graph, x)
        assert torch.allclose(out, ref, atol=1e-5), name
        assert torch.allclose(grad, gref, atol=1e-4), name


def test_rgcn_reads_the_edge_types(sample):
    """The same block without its edge types (one relation) gives another output: the per-relation
    weights and means really use ``etypes``."""
    blocks, rel_types, _ = sample
    block = blocks[0]
    torch.manual_seed(0)
    layer = RGCNConv(12, 8, len(rel_types))
    x = torch.randn(block.num_src, 12)
    untyped = Block(dst_ids=block.dst_ids, src_ids=block.src_ids, indptr=block.indptr, indices=block.indices)
    typed_out, untyped_out = layer(block, x), layer(untyped, x)
    assert not torch.allclose(typed_out, untyped_out, atol=1e-3)
    # without types every edge is relation 0: W_0 on the plain mean of all in-neighbours
    mean = torch.zeros(block.num_dst, 12).index_add_(0, block.edge_dst(), x[block.indices])
    mean /= block.in_degrees().clamp(min=1).unsqueeze(1)
    want = mean @ layer.weight[0] + x[: block.num_dst] @ layer.loop_weight + layer.bias
    assert torch.allclose(untyped_out, want, atol=1e-5)


def test_relation_rows_need_edges_grouped_by_relation(sample):
    blocks, rel_types, _ = sample
    block = blocks[0]
    dst = block.edge_dst()
    shuffled = torch.cat([torch.flip(torch.nonzero(dst == i).squeeze(1), [0]) for i in range(block.num_dst)])
    assert not torch.equal(block.etypes[shuffled], block.etypes)
    bad = Block(dst_ids=block.dst_ids, src_ids=block.src_ids, indptr=block.indptr, indices=block.indices[shuffled],
                etypes=block.etypes[shuffled])
    with pytest.raises(ValueError, match="grouped by edge type"):
        relation_block(bad, len(rel_types))  # R-GAT's per-(destination, relation) softmax rows
    with pytest.raises(ValueError, match="edge types must be in"):
        relation_block(block, 2)
    # RGCN's relation-major rows sort the edges themselves: any edge order gives the same output
    layer = RGCNConv(6, 5, len(rel_types), num_bases=2)
    x = torch.randn(block.num_src, 6)
    assert torch.allclose(layer(bad, x), layer(block, x), atol=1e-5)


def test_segment_matmul_and_its_gradients():
    x = torch.randn(11, 4, requires_grad=True)
    w = torch.randn(3, 4, 5, requires_grad=True)
    bounds = [0, 6, 6, 11]  # relation 1 has no rows
    out = segment_matmul(x, bounds, w)
    want = torch.cat([x[:6] @ w[0], x[6:] @ w[2]])
    assert torch.allclose(out, want)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, w), g)
    ref = torch.autograd.grad(want, (x, w), g)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, ref, strict=True))
    with pytest.raises(ValueError, match="bounds"):
        segment_matmul(x, [0, 6, 10], w[:2])
