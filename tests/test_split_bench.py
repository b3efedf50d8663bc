"""``gnnflow bench split`` with the DistDGL peer in the same ranks, on the same book and batches."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("dgl")


@pytest.mark.slow
def test_bench_split_compares_with_distdgl(tmp_path):
    from conftest import synthetic_graph_book

    from gnnflow.bench import split
    from gnnflow.bench.ratios import check_ratios

    graph, book = synthetic_graph_book(tmp_path, 2000, "metis", 2)
    parser = argparse.ArgumentParser()
    split.add_arguments(parser)
    args = parser.parse_args(["--graph", graph, "--partition", book, "--workdir", str(tmp_path / "work"),
                              "--workers", "2", "--epochs", "2", "--strategies", "split,data,distdgl",
                              "--partitions", "", "--fanouts", "5,5", "--batch-size", "64", "--hidden", "16"])
    r = split.run(args)
    assert check_ratios(r) == []
    assert r["ratio_name"] == "features_loaded: data-parallel / split-parallel"
    s = r["strategies"]
    # the peer trained the same batches per rank as data-parallel, and really sampled
    assert s["distdgl"]["iterations"] == s["data"]["iterations"] > 0
    assert s["distdgl"]["sampled_edges"] > 0 and s["distdgl"]["features_loaded"] > 0
    names = {x["name"] for x in r["ratios"]}
    assert any(n.startswith("time_epoch: DistDGL (0 sampler processes per trainer)") for n in names)
    assert not any(n.startswith("bytes_sent: DistDGL") for n in names)  # DGL counts no bytes
