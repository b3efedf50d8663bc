"""``gnnflow bench pipeline`` on a tiny graph: every mode is timed and each ratio keeps its operands."""

from __future__ import annotations

import argparse

import pytest


def test_bench_pipeline_tiny(tiny_store):
    from gnnflow.bench import pipeline
    from gnnflow.bench.ratios import check_ratios

    parser = argparse.ArgumentParser()
    pipeline.add_arguments(parser)
    args = parser.parse_args(["--graph", str(tiny_store.path), "--hidden", "8", "--fanouts", "5,5",
                              "--batch-size", "32", "--epochs", "1", "--repeats", "1", "--samplers", "thread"])
    r = pipeline.run(args)
    assert check_ratios(r) == []
    med = r["median_epoch_s"]
    assert r["ratio"] == pytest.approx(med["pipeline"] / med["inline"])
    bound = r["ratios"][1]["denominator"]["value"]
    assert bound == max(med["sampling"], med["compute"])
