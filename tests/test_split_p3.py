"""P3* push-pull: the first layer split by feature columns sums to the whole layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_store_arrays

from gnnflow.nn import build_model
from gnnflow.sampling import NeighborSampler
from gnnflow.strategies.split.p3 import feature_columns, finish_first_layer, partial_first_layer


@pytest.mark.parametrize("model", ["sage", "sage:gcn", "gcn", "gat", "mlp"])
@pytest.mark.parametrize("parts", [2, 3])
def test_partials_over_feature_columns_sum_to_first_layer(model, parts):
    """``sage:gcn``: GraphSAGE with the GCN aggregator (one weight, its own bias)."""
    a = random_store_arrays(num_nodes=150, avg_degree=6, feature_dim=10, seed=3)
    blocks = NeighborSampler(a["indptr"], a["indices"], [4, 3], seed=0).sample_blocks(torch.arange(20))
    x = torch.from_numpy(a["features"][blocks[0].src_ids.numpy()])
    torch.manual_seed(0)
    model, _, aggregator = model.partition(":")
    net = build_model(model, 10, 8, 4, 2, 0.0, 2, aggregator=aggregator or "mean")
    with torch.no_grad():  # biases start at zero; make a bias added more than once visible
        for n, p in net.named_parameters():
            if "bias" in n:
                p.normal_()
    ref = net(blocks, x)
    ref.sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()

    partials = []
    for r in range(parts):
        cols = torch.from_numpy(feature_columns(10, parts, r).astype(np.int64))
        partials.append(partial_first_layer(net.layers[0], blocks[0], x[:, cols], cols, with_bias=(r == 0)))
    h = finish_first_layer(net, blocks[0], sum(partials))
    out = net.layer_step(1, blocks[1], h)
    assert torch.allclose(out, ref, atol=1e-5)
    out.sum().backward()
    for n, p in net.named_parameters():
        assert torch.allclose(p.grad, ref_grads[n], atol=1e-5), n
