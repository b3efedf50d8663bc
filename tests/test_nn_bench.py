"""`gnnflow bench layers` runs end to end on a small graph; every peer computes our outputs."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("dgl")
pytest.importorskip("torch_geometric")

from gnnflow.cli import main as cli_main  # noqa: E402

ARGS = ["--nodes", "3000", "--batch-size", "64", "--in-dim", "16", "--out-dim", "8", "--heads", "2",
        "--repeats", "1", "--threads", "1", "--hetero-papers", "600"]
HOMOGENEOUS = {"sage", "gcn-both", "gcn-right", "gat"}


def test_bench_layers_json(capsys):
    from gnnflow.bench.ratios import check_ratios

    assert cli_main(["bench", "layers", "--json", *ARGS]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["layers"]) == HOMOGENEOUS | {"rgcn", "rgat"}
    assert check_ratios(out) == []
    names = {r["name"] for r in out["ratios"]}
    assert names == {f"{k}: ours / {p}" for k in out["layers"] for p in ("DGL", "PyG")}
    assert out["ratio"] == max(r["value"] for r in out["ratios"])
    forms = {"rgcn": ("RGCNConv", "FastRGCNConv"), "rgat": ("HeteroConv",)}
    for kind, v in out["layers"].items():
        pyg = ("edge_index", "adj_t") if kind in HOMOGENEOUS else forms[kind]
        assert set(v["max_abs_diff"]) == {"dgl", *(f"pyg_{f}" for f in pyg)}
        assert max(v["max_abs_diff"].values()) <= 1e-5
        assert v["pyg_ratio"] == pytest.approx(v["ours_ms"] / min(v[f"pyg_{f}_ms"] for f in pyg))
    assert out["typed_block"]["num_rels"] == 8 and out["typed_block"]["num_edges"] > 1000


@pytest.mark.parametrize("kind", ["sage", "gcn-both", "gcn-right", "gat"])
def test_pyg_layer_with_our_weights_computes_our_outputs(kind):
    """PyG's layer for each kind, both graph forms, on a small block: our output, and our input gradient."""
    import torch

    from gnnflow.bench import pyg_peer
    from gnnflow.bench.layers import layer_pair
    from gnnflow.data.synthetic import generate_synthetic
    from gnnflow.sampling import NeighborSampler

    g = generate_synthetic(num_nodes=500, avg_degree=6, feature_dim=1, num_classes=2, seed=0)
    block = NeighborSampler(g["indptr"], g["indices"], [5], seed=0).sample_blocks(torch.arange(40))[0]
    ours, _ = layer_pair(kind, 12, 8, 2)
    x = torch.randn(block.num_src, 12, requires_grad=True)
    ref = ours(block, x)
    (gx_ref,) = torch.autograd.grad(ref.square().sum(), x)
    pg = pyg_peer.graph_for(kind, block.indptr, block.indices, block.num_src)
    for form in pyg_peer.FORMS:
        out = pyg_peer.from_ours(kind, ours, form)(pg, x)
        (gx,) = torch.autograd.grad(out.square().sum(), x)
        assert out.shape == ref.shape
        assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(gx, gx_ref, atol=1e-5)


def test_bench_layers_refuses_to_time_a_different_computation(monkeypatch):
    """A peer whose output differs (here: PyG's SAGE with its root weight dropped) stops the bench."""
    from gnnflow.bench import pyg_peer
    from gnnflow.errors import GnnflowError

    original = pyg_peer.from_ours

    def broken(kind, ours, form):
        layer = original(kind, ours, form)
        if kind == "sage":
            layer.conv.lin_r.weight.data.zero_()
        return layer

    monkeypatch.setattr(pyg_peer, "from_ours", broken)
    import argparse

    from gnnflow.bench import layers

    parser = argparse.ArgumentParser()
    layers.add_arguments(parser)
    with pytest.raises(GnnflowError, match="sage: PyG .* differs from ours"):
        layers.run(parser.parse_args([*ARGS, "--layers", "sage"]))


@pytest.mark.gpu
def test_bench_layers_cuda_runs_ours_and_pyg(capsys):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from gnnflow.bench.ratios import check_ratios

    assert cli_main(["bench", "layers", "--json", "--device", "cuda", *ARGS]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["device"] == "cuda" and check_ratios(out) == []
    assert {r["name"].split("/ ")[1] for r in out["ratios"]} == {"PyG"}  # DGL 1.1.3 has no CUDA kernels
