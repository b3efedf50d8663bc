"""The cost model's newer terms (issue 35.1): forward/backward timed at the blocks' own shape
(``gnnflow.advise.shapes``: the synthetic blocks have the counted shape, the timing is kept on the
calibration but not in its file), a rank's CPU as the microbenchmarks' times its measured factor,
an exchange's bytes as CPU at ``byte_cpu`` and a wait for the rest."""

from __future__ import annotations

import json

import pytest

from gnnflow.advise.calibrate import Calibration
from gnnflow.config import TrainConfig

LAYERS = {m: {"layer": 1e-3, "gemm": 1e-10, "agg": 1e-9, "edges": 2e-8, "rows": 2e-9} for m in ("sage", "gcn")}


def test_synthetic_blocks_have_the_counted_shape():
    """Rounded to two significant figures, chained (a layer's destinations are the sources of
    the layer above), and the blocks built have exactly those counts."""
    from gnnflow.advise.shapes import shape_key, synthetic_blocks

    cfg = TrainConfig(graph="-", model="gcn", hidden=16, num_layers=2, fanouts=[5, 5])
    key = shape_key("gcn", cfg, 8, 4, [(1234.4, 5678.9, 9876.1), (256.0, 1234.4, 1280.2)])
    dims = key[9]
    assert dims == ((1200, 5700, 9900), (260, 1200, 1300))
    blocks = synthetic_blocks(dims)
    assert [(b.num_dst, b.num_src, b.num_edges) for b in blocks] == list(dims)
    for b in blocks:
        assert int(b.indices.max()) < b.num_src and b.indptr[-1] == b.num_edges
        assert (b.src_ids[: b.num_dst] == b.dst_ids).all()


def test_timed_forward_backward_is_kept_in_memory_not_in_the_file():
    from gnnflow.advise.shapes import timed_fb

    cal = Calibration(layers=json.loads(json.dumps(LAYERS)))
    cfg = TrainConfig(graph="-", model="gcn", hidden=16, num_layers=2, fanouts=[5, 5])
    layers = [(600.0, 2000.0, 3000.0), (128.0, 600.0, 640.0)]
    t = timed_fb(cal, cfg, "gcn", layers, 8, 4)
    assert t is not None and t > 0 and len(cal.shapes) == 1
    assert timed_fb(cal, cfg, "gcn", [(601.0, 2001.0, 3001.0), (128.0, 601.0, 641.0)], 8, 4) == pytest.approx(t, rel=0.01)
    assert len(cal.shapes) == 1  # the same rounded shape: one timing
    assert "shapes" not in json.loads(cal.to_json())
    assert timed_fb(cal, cfg, "gcn@cuda", layers, 8, 4) is None


def test_a_large_shape_is_timed_scaled_down_and_scaled_back_by_the_linear_model():
    """Beyond ``MAX_TIMED_EDGES`` (all layers) the shape is timed with its rows and edges divided
    alike to that many, and the time scaled back by the linear model's ratio of the two shapes."""
    from gnnflow.advise import shapes
    from gnnflow.advise.features import model_terms

    cal = Calibration(layers=json.loads(json.dumps(LAYERS)))
    cfg = TrainConfig(graph="-", model="gcn", hidden=16, num_layers=2, fanouts=[5, 5])
    assert shapes.MAX_TIMED_EDGES == 4_000_000
    big = [(40_000.0, 120_000.0, 6.0e6), (8_000.0, 40_000.0, 2.0e6)]  # 8e6 edges: timed at half
    small = [(d / 2, s / 2, e / 2) for d, s, e in big]
    t = shapes.timed_fb(cal, cfg, "gcn", big, 8, 4)
    assert t is not None and len(cal.shapes) == 1
    (name, timed), = cal.shapes.items()
    key = shapes.shape_key("gcn", cfg, 8, 4, small)
    assert name == repr(key)
    coef = cal.layer_coefficients("gcn")
    lin = [float(model_terms(cfg, x, 8, 4) @ coef) for x in (big, [tuple(map(float, d)) for d in key[9]])]
    assert t == pytest.approx(timed * lin[0] / lin[1], rel=1e-9)
    assert 1.9 < lin[0] / lin[1] < 2.1


def test_a_halo_block_is_timed_as_dgcl_runs_it():
    """DGCL's ``inner <- inner | halo`` block: every layer keeps its own shape (no mini-batch
    chaining of sources into the layer below), and the model runs on it with the halo's rows
    joining between layers, projected first for a narrowing GCN layer; ``predict_dgcl`` times
    the rank's own block this way."""
    import torch

    from gnnflow.advise import shapes

    cfg = TrainConfig(graph="-", model="gcn", hidden=16, num_layers=2, fanouts=[5, 5])
    layers = [(1000.0, 1400.0, 9000.0)] * 2
    assert shapes.shape_key("gcn", cfg, 64, 4, layers, "halo")[9] == ((1000, 1400, 9000),) * 2
    assert shapes.shape_key("gcn", cfg, 64, 4, layers)[9] == ((1400, 1400, 9000), (1000, 1400, 9000))
    for halo in ("halo", "halo-project"):
        assert shapes.time_shape(shapes.shape_key("gcn", cfg, 64, 4, layers, halo), cfg, repeats=1) > 0
    # the halo rows enter each layer: their widths are the layer inputs' (64 features, then 16),
    # or the projected width where a narrowing layer (here both: 64 -> 16 -> 4) projects first
    from gnnflow.nn import build_model_from_config

    net = build_model_from_config(cfg, 64, 4)
    dims = ((1000, 1400, 9000),) * 2
    blocks = shapes.synthetic_blocks(dims)
    x = torch.randn(1000, 64)
    seen = []
    step = net.layer_step
    net.layer_step = lambda i, b, h, projected=False: seen.append((i, tuple(h.shape), projected)) or step(i, b, h, projected)
    out = shapes._halo_forward(net, blocks, dims, x, [64, 16], project=True)
    assert tuple(out.shape) == (1000, 4)
    assert seen == [(0, (1400, 16), True), (1, (1400, 4), True)]
    seen.clear()
    shapes._halo_forward(net, blocks, dims, x, [64, 16], project=False)
    assert seen == [(0, (1400, 64), False), (1, (1400, 16), False)]


def test_a_rank_spends_the_microbenchmarks_times_its_measured_factor():
    """``rank_<stage>`` of the rank count multiplies a mini-batch rank's work (forward/backward's
    for a stage not probed); one process and full-batch ranks take the microbenchmarks as they are."""
    from gnnflow.advise.cost import Rank, Setting

    nets = {"1": {"cores": 1.0}, "2": {"latency": 1e-4, "byte": 1e-9, "allreduce_latency": 1e-4,
                                       "allreduce_byte": 1e-9, "cores": 2.0, "rank_sample": 1.25,
                                       "rank_load": 1.5, "rank_forward_backward": 2.0}}
    cal = Calibration(collectives=nets, step={"call": 1e-4, "param": 0.0})
    cfg = TrainConfig(graph="-", strategy="data")

    def spent(workers: int, stage: str, batched: bool = True) -> float:
        r = Rank(cal, Setting(cfg=cfg, feature_dim=8, num_classes=4, num_nodes=10, workers=workers), batched)
        r.work(stage, 1.0)
        return r.cpu[stage]

    assert spent(2, "sample") == 1.25 and spent(2, "load") == 1.5 and spent(2, "forward_backward") == 2.0
    assert spent(2, "step") == 2.0
    assert spent(1, "forward_backward") == 1.0 and spent(2, "forward_backward", batched=False) == 1.0


def test_rank_probe_times_every_probed_stage():
    from gnnflow.advise.shapes import PROBED_STAGES, rank_probe

    got = rank_probe(seconds=0.05)
    assert set(got) == set(PROBED_STAGES) and all(v > 0 for v in got.values())


def test_an_exchange_s_bytes_cost_cpu_at_byte_cpu_and_wait_for_the_rest():
    """With ``byte_cpu`` calibrated the bytes cost the process that much CPU and the rest of their
    wall time is a wait (on the training thread); without it all of ``byte`` is CPU."""
    from gnnflow.advise.cost import Rank, Setting

    net = {"latency": 1e-3, "latency_cpu": 1e-4, "byte": 4e-9, "byte_cpu": 1e-9, "cores": 2.0}
    cal = Calibration(collectives={"2": net})
    st = Setting(cfg=TrainConfig(graph="-", strategy="split"), feature_dim=8, num_classes=4, num_nodes=10, workers=2)
    r = Rank(cal, st)
    r.exchange("comm", 2, 1e6)
    assert r.cpu["comm"] == pytest.approx(2e-4 + 1e-3) and r.wait["comm"] == pytest.approx(2e-3 + 3e-3)
    r = Rank(cal, st)
    r.exchange("sample", 2, 1e6, waits=False)
    assert r.cpu["sample"] == pytest.approx(2e-4 + 1e-3) and "sample" not in r.wait
    del net["byte_cpu"]
    r = Rank(cal, st)
    r.exchange("comm", 2, 1e6)
    assert r.cpu["comm"] == pytest.approx(2e-4 + 4e-3) and r.wait["comm"] == pytest.approx(2e-3)


def _fullbatch_cfg():
    from gnnflow.strategies.fullbatch.row1d import FullBatch

    return FullBatch.parse_options(TrainConfig(graph="-", strategy="fullbatch", model="gcn", hidden=16, num_layers=2,
                                               fanouts=[5, 5], workers=2))


def test_mg_gcn_s_rank_is_timed_on_its_own_tiles_with_every_round(monkeypatch):
    """MG-GCN's rank is timed running the strategy's own ``compute_gradients`` on tiles of its
    shape; the stand-in for the broadcast engine multiplies every column block's tile (the other
    blocks' rows already received), so its product is the whole row block's ``A x``."""
    import numpy as np
    import torch

    from gnnflow.advise import shapes
    from gnnflow.strategies.fullbatch.row1d import FullBatch
    from gnnflow.strategies.fullbatch.spmm import csr_tiles

    rng = np.random.default_rng(0)
    blocks = [30, 20, 25]
    row = rng.integers(0, 30, 400)
    col = rng.integers(0, sum(blocks), 400)
    starts = np.cumsum([0] + blocks[:-1])
    cblk = np.searchsorted(starts, col, side="right") - 1
    val = rng.random(400).astype(np.float32)
    rounds = shapes._LocalRounds(csr_tiles(row, cblk, col - starts[cblk], val, 30, blocks), blocks)
    x = torch.randn(30, 4)
    out = rounds(x)
    full = torch.cat([x, rounds.received[(1, 4)], rounds.received[(2, 4)]])
    dense = torch.zeros(30, sum(blocks))
    dense.index_put_((torch.from_numpy(row), torch.from_numpy(col)), torch.from_numpy(val), accumulate=True)
    assert torch.allclose(out, dense @ full, atol=1e-5)

    cfg = _fullbatch_cfg()
    key = shapes.rows_key(cfg, 12, 5, 3000, 700, 24_000, [3000, 2900])
    assert key[10:] == (3000, 700, 24_000, (3000, 2900))
    calls, widths = [], []
    step, engine_call = FullBatch.compute_gradients, shapes._LocalRounds.__call__
    monkeypatch.setattr(FullBatch, "compute_gradients", lambda self, rec: calls.append(1) or step(self, rec))
    monkeypatch.setattr(shapes._LocalRounds, "__call__", lambda self, x, out=None, transpose=False: (
        widths.append((x.shape[1], transpose)) or engine_call(self, x, out, transpose)))
    monkeypatch.setattr(shapes, "MIN_TIMED_S", 0.0)  # the repeats alone (tiny calls go on to 0.25 s)
    assert shapes.time_rows(key, cfg, repeats=2) > 0
    assert len(calls) == 3  # a warm-up and two timed
    # per call: layer 0 aggregates the 12 features first (no backward SpMM, §4.4); layer 1
    # multiplies 16 -> 5 first, aggregates 5 wide forward and (transposed) backward
    assert widths == [(12, False), (5, False), (5, True)] * 3


def test_mg_gcn_s_timing_is_kept_scaled_down_and_off_the_gpu(monkeypatch):
    """``timed_rows`` keeps one timing per rounded shape on the calibration; beyond
    ``MAX_TIMED_EDGES`` non-zeros it times rows, training rows, non-zeros and blocks divided alike
    and scales back by the per-term model's ratio; a GPU candidate gets None (the rates)."""
    from gnnflow.advise import shapes
    from gnnflow.advise.cost import Setting

    monkeypatch.setattr(shapes, "MAX_TIMED_EDGES", 20_000)
    cal = Calibration()
    st = Setting(cfg=_fullbatch_cfg(), feature_dim=12, num_classes=5, num_nodes=8000, workers=2)

    def linear(n: float, nnz: float) -> float:
        return 1e-6 * n + 1e-7 * nnz

    t = shapes.timed_rows(cal, st, 4000.0, 800.0, 40_000.0, linear)
    (name, timed), = cal.shapes.items()
    assert name == repr(shapes.rows_key(st.cfg, 12, 5, 2000, 400, 20_000, [2000, 2000]))
    assert t == pytest.approx(timed * linear(4000, 40_000) / linear(2000, 20_000), rel=1e-9)
    assert shapes.timed_rows(cal, st, 4010.0, 800.0, 40_100.0, linear) == pytest.approx(t, rel=0.01)
    assert len(cal.shapes) == 1
    gpu = Setting(cfg=st.cfg, feature_dim=12, num_classes=5, num_nodes=8000, workers=2, device="cuda")
    assert shapes.timed_rows(cal, gpu, 4000.0, 800.0, 40_000.0, linear) is None


def test_p3_first_layer_is_timed_on_the_whole_layer_restricted_to_its_columns():
    """P3's layer 0 (``columns``) runs the whole input layer with its weights restricted to the
    rank's columns (the strategy's own code): its output on those columns equals the whole model on
    inputs zero outside them, and a GCN layer wider in than out projects the columns first, as the
    strategy does (a layer built that narrow would aggregate them first: run U's products-shaped
    slice timed at half P3's forward/backward)."""
    import torch

    from gnnflow.advise import shapes
    from gnnflow.nn import build_model_from_config

    cfg = TrainConfig(graph="-", model="gcn", hidden=16, num_layers=2, fanouts=[5, 5])
    layers = [(400.0, 1400.0, 4000.0), (100.0, 400.0, 500.0)]
    key = shapes.shape_key("gcn", cfg, 64, 4, layers, columns=8)
    assert key[7] == 64 and key[11] == 8 and key != shapes.shape_key("gcn", cfg, 8, 4, layers)
    assert shapes.time_shape(key, cfg, repeats=1) > 0
    torch.manual_seed(0)
    net = build_model_from_config(cfg, 64, 4)
    net.eval()
    blocks = shapes.synthetic_blocks(key[9])
    x = torch.randn(blocks[0].num_src, 8)
    whole = net(blocks, torch.cat([x, torch.zeros(x.shape[0], 56)], 1))
    assert torch.allclose(shapes._columns_forward(net, blocks, x), whole, atol=1e-5)
    projected = []
    project = net.layers[0].project
    net.layers[0].project = lambda h: projected.append(tuple(h.shape)) or project(h)
    shapes._columns_forward(net, blocks, x)
    assert projected == [(blocks[0].num_src, 8)]


def test_a_timing_runs_its_repeats_and_at_least_min_timed_s():
    """Short calls go on until they add up to ``MIN_TIMED_S`` (at most ``MAX_REPEATS``); long ones
    stop after ``repeats``; the rank probe's pieces (``min_s=0``) after ``repeats``."""
    from gnnflow.advise.shapes import MAX_REPEATS, MIN_TIMED_S, more

    assert more([], 5) and more([1.0] * 4, 5) and not more([1.0] * 5, 5)
    short = MIN_TIMED_S / 20
    assert more([short] * 5, 5) and not more([short] * 20, 5)
    assert not more([1e-6] * MAX_REPEATS, 5) and not more([1e-6] * 3, 3, min_s=0.0)
