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
                              "--fanouts", "5,5", "--hidden", "8"])
    out = hec.run(args)
    assert out["data_remote_feature_bytes"] > 0
    by_nc = {p["nc"]: p for p in out["hec"]}
    assert set(by_nc) == {50, 5}
    # a smaller push cap moves fewer bytes, and the headline is the first cap's ratio
    assert 0 < by_nc[5]["remote_bytes"] < by_nc[50]["remote_bytes"]
    assert out["ratio"] == pytest.approx(by_nc[50]["remote_bytes"] / out["data_remote_feature_bytes"])
    assert "nc=50" in out["summary"] and len(by_nc[50]["hit_rates"]) == 2
