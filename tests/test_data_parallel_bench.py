"""``gnnflow bench data-parallel``: ours vs DistDGL with and without DGL's sampler processes."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("dgl")


@pytest.mark.slow
def test_bench_data_parallel_reports_both_distdgl_rows(tmp_path, no_leftovers):
    from gnnflow.bench import data_parallel as bench
    from gnnflow.bench.ratios import check_ratios
    from gnnflow.data.synthetic import prepare_synthetic

    store = prepare_synthetic(tmp_path / "graph", num_nodes=3000)
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--graph", str(store.path), "--workers", "2", "--epochs", "2", "--hidden", "16",
                              "--fanouts", "5,5", "--batch-size", "128", "--dgl-samplers", "1"])
    r = bench.run(args)
    no_leftovers([x["shm_run"] for x in r["distdgl"] + r["distdgl_no_samplers"]])
    assert check_ratios(r) == []
    head, on, off = r["ratios"][0], r["ratios"][1], r["ratios"][2]
    # the headline is against the faster DistDGL configuration
    assert head["denominator"]["value"] == min(r["distdgl_epoch_s"], r["distdgl_no_samplers_epoch_s"])
    assert on["denominator"]["value"] == r["distdgl_epoch_s"] and off["denominator"]["value"] == \
        r["distdgl_no_samplers_epoch_s"]
    assert on["numerator"]["value"] == off["numerator"]["value"] == r["ours_epoch_s"]
    assert r["ratio"] == head["value"] and r["ratio_samplers_on"] == on["value"]
    assert r["ratio_samplers_off"] == off["value"]
    # DGL's sampler pool really ran in the first row and not in the second
    assert r["distdgl"][0]["sampler_processes"] == 1 and r["distdgl_no_samplers"][0]["sampler_processes"] == 0
    # the same number of batches per rank and epoch on both sides (up to how each splits targets)
    its = r["iterations_per_rank"]
    assert max(abs(a - b) for a in its["ours"] for b in its["distdgl"]) <= 1 and min(its["distdgl"]) > 0
    # per-stage profiles of both sides: the training thread's stages add up to the epoch
    for name in ("ours", "distdgl", "distdgl_no_samplers"):
        prof = r["profiles"][name]
        assert sum(prof["critical"].values()) == pytest.approx(prof["epoch_s"], rel=1e-6)
        assert prof["critical"]["forward_backward"] > 0
    assert r["profiles"]["ours"]["background"]["sample"] > 0  # the pipeline's sampler thread
    assert r["profiles"]["distdgl"]["critical"]["sample"] > 0
    assert "per-stage profile" in r["summary"]


def test_stage_profile_splits_an_epoch():
    from gnnflow.bench.data_parallel import CRITICAL, stage_profile

    p = stage_profile({"wait": 0.5, "forward_backward": 2.0, "allreduce": 0.25, "step": 0.25, "sample": 3.0},
                      4.0, CRITICAL["ours"])
    assert p["critical"] == {"wait": 0.5, "forward_backward": 2.0, "allreduce": 0.25, "step": 0.25, "other": 1.0}
    assert p["background"] == {"sample": 3.0}


def test_timed_epochs_are_steady_ones(tmp_path, monkeypatch):
    """The strategy is told it trains one epoch more than the bench times: no timed epoch is a
    run's last (where a pipeline that works across epochs has nothing left to prepare)."""
    from gnnflow.bench import data_parallel as bench
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.runtime.context import RankContext
    from gnnflow.strategies import base

    store = prepare_synthetic(tmp_path / "graph", num_nodes=600)
    seen: dict = {"ran": []}
    real = base.strategy_class

    def spy(name):
        cls = real(name)

        class Spy(cls):
            def __init__(self, cfg, ctx):
                seen["told"] = cfg.epochs
                super().__init__(cfg, ctx)

            def run_epoch(self, epoch, rec):
                seen["ran"].append(epoch)
                return super().run_epoch(epoch, rec)

        return Spy

    monkeypatch.setattr(base, "strategy_class", spy)
    cfg = dict(graph=str(store.path), model="sage", hidden=8, num_layers=2, fanouts=[3, 3], batch_size=64,
               epochs=2, seed=0)
    out = bench.train_and_time(RankContext(), "single", cfg, 1)
    assert seen == {"told": 3, "ran": [0, 1]}
    assert len(out["epoch_s"]) == len(out["times"]) == 2 and 0 <= out["acc"]["test_acc"] <= 1
