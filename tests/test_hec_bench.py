"""``gnnflow bench hec`` on a tiny book: the figures it reports are consistent."""

from __future__ import annotations

import argparse

import pytest


@pytest.fixture
def tiny_book(tiny_store, tmp_path):
    from gnnflow.partition.api import partition_graph

    return partition_graph(tiny_store, "random", 2, tmp_path / "book", seed=0)


def test_bench_hec_reports_bytes_ratio_per_nc(tiny_store, tiny_book):
    from gnnflow.bench import hec

    parser = argparse.ArgumentParser()
    hec.add_arguments(parser)
    args = parser.parse_args(["--graph", str(tiny_store.path), "--partition", str(tiny_book.path), "--workers", "2",
                              "--epochs", "1", "--repeat", "1", "--nc", "50,5", "--batch-size", "16",
                              "--fanouts", "5,5", "--hidden", "8", "--no-distdgl"])
    out = hec.run(args)
    assert out["data_remote_feature_bytes"] > 0
    by_nc = {p["nc"]: p for p in out["hec"]}
    assert set(by_nc) == {50, 5}
    # a smaller push cap moves fewer bytes, and the headline is the first cap's ratio
    assert 0 < by_nc[5]["remote_bytes"] < by_nc[50]["remote_bytes"]
    assert out["ratio"] == pytest.approx(by_nc[50]["remote_bytes"] / out["data_remote_feature_bytes"])
    assert "nc=50" in out["summary"] and len(by_nc[50]["hit_rates"]) == 2
    from gnnflow.bench.ratios import check_ratios

    assert check_ratios(out) == [] and "distdgl" not in out["runs"]


def _args(argv):
    from gnnflow.bench import hec

    parser = argparse.ArgumentParser()
    hec.add_arguments(parser)
    return parser.parse_args(argv)


def test_bench_hec_presets_fill_only_unset_options():
    from gnnflow.bench.hec import resolve_preset
    from gnnflow.errors import ConfigError

    paper = resolve_preset(_args(["--preset", "paper", "--hidden", "32"]))
    assert (paper.batch_size, paper.fanouts, paper.hidden) == (1000, "5,10,15", 32)
    assert (paper.feature_dim, paper.train_frac, paper.avg_degree, paper.nodes) == (128, 0.01, 29.0, 1_000_000)
    small = resolve_preset(_args([]))
    assert (small.batch_size, small.fanouts, small.hidden, small.nodes, small.feature_dim) == (512, "10,10", 64,
                                                                                               32_768, 32)
    with pytest.raises(ConfigError, match="--feature-dim"):
        resolve_preset(_args(["--graph", "g", "--feature-dim", "8"]))


def test_bench_hec_generated_graph_counts_rows_exactly():
    """A generated graph of the given shape; with nc=1 and Algorithm 2's pushes (push=degree: any
    solid vertex the peer holds as halo) every push is one row per peer and layer."""
    from gnnflow.bench import hec

    feature_dim, hidden = 16, 8
    out = hec.run(_args(["--nodes", "2000", "--feature-dim", str(feature_dim), "--train-frac", "0.1",
                         "--workers", "2", "--epochs", "1", "--repeat", "1", "--nc", "1", "--batch-size", "16",
                         "--fanouts", "5,5", "--hidden", str(hidden), "--no-distdgl", "--opt", "push=degree"]))
    assert out["settings"]["feature_dim"] == feature_dim and out["settings"]["nodes"] == 2000
    # data-parallel moves whole 16-float feature rows, plus request ids and sampling
    assert out["data_remote_feature_bytes"] > 0 and out["data_remote_feature_bytes"] % (4 * feature_dim) == 0
    assert out["data_remote_bytes_all"] > out["data_remote_feature_bytes"]
    m = out["iterations"]  # ceil(~100 training vertices per rank / 16)
    assert m >= 5
    (p,) = out["hec"]
    # each rank receives, in each of the M - d (d=1) iterations that push, at each layer: one row
    # (embedding + 2 float columns of int64 tag) and one int64 row count
    per_push = (4 * (feature_dim + 2) + 8) + (4 * (hidden + 2) + 8)
    assert p["remote_bytes"] == 2 * (m - 1) * per_push
    assert p["pushed"] == [2 * (m - 1)] * 2 and all(n > 0 for n in p["searched"])
    assert p["ratio"] == pytest.approx(p["remote_bytes"] / out["data_remote_feature_bytes"])
    assert p["ratio_all"] < p["ratio"]
    assert p["ratio_steady"] == pytest.approx(p["ratio"] * m / (m - 1))


def test_hec_expected_use_moves_no_more_bytes_than_data_parallel():
    """Bytes, not times: on a small graph Algorithm 2's pushes (push=degree) move more bytes than
    data-parallel fetches, HEC's default (push=use: layer 0 filled once, deeper layers pushed only
    where the peer is expected to read them, docs/hec.md) no more.  Fails if the pushes are not
    filtered by expected use (21x data-parallel's bytes then)."""
    from gnnflow.bench import hec

    argv = ["--nodes", "3000", "--feature-dim", "16", "--train-frac", "0.3", "--workers", "2", "--epochs", "1",
            "--repeat", "1", "--nc", "2000", "--batch-size", "64", "--fanouts", "5,5", "--hidden", "32",
            "--no-distdgl"]
    degree = hec.run(_args([*argv, "--opt", "push=degree"]))
    use = hec.run(_args(argv))
    (before,), (after,) = degree["hec"], use["hec"]
    assert degree["data_remote_feature_bytes"] == use["data_remote_feature_bytes"] > 0  # the same baseline
    assert before["ratio"] > 1.0  # Algorithm 2 as published: more bytes than data-parallel
    assert after["ratio"] <= 1.0
    # layer 0 pushes nothing (its cache was filled at setup); layer 1 pushes a fraction of Algorithm 2's
    assert after["pushed"][0] == 0 < after["pushed"][1] < before["pushed"][1] / 2
    # layer 0's cache, filled with the rows the presample read most, hits more than Algorithm 2's pushes
    assert after["hit_rates"][0] > before["hit_rates"][0]


@pytest.mark.slow
def test_bench_hec_adds_distdgl_with_the_same_pipeline_setting(tiny_store, tiny_book):
    """DistDGL on the same book and batches; pipelined: ours' pipelines on, DGL's sampler processes on."""
    from gnnflow.bench import hec
    from gnnflow.bench.ratios import check_ratios

    out = hec.run(_args(["--graph", str(tiny_store.path), "--partition", str(tiny_book.path), "--workers", "2",
                         "--epochs", "1", "--repeat", "1", "--nc", "20", "--batch-size", "16", "--fanouts", "5,5",
                         "--hidden", "8", "--pipeline", "--dgl-samplers", "1"]))
    assert check_ratios(out) == [] and out["pipeline"] is True and out["distdgl_samplers"] == 1
    (p,) = out["hec"]
    assert p["time_ratio_distdgl"] == pytest.approx(p["epoch_s"] / out["distdgl_epoch_s"])
    names = {r["name"] for r in out["ratios"]}
    assert {"epoch time: HEC nc=20 / data-parallel", "epoch time: HEC nc=20 / DistDGL"} <= names
    # DistDGL trained the same number of iterations per epoch as data-parallel
    dgl_iters = out["runs"]["distdgl"][0][0]["iterations"]
    assert dgl_iters > 0 and abs(dgl_iters - out["iterations"]) <= 1
