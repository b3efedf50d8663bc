"""``gnnflow bench fullbatch`` runs end to end on a tiny graph and reports what the issue asks."""

from __future__ import annotations

import argparse

import pytest

from gnnflow.bench import fullbatch as bench


def _args(tmp_path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(["--work", str(tmp_path), "--nodes", "1500", "--avg-degree", "6", "--feature-dim", "24",
                              "--classes", "4", "--hidden", "32", "--epochs", "1", "--repeats", "1", *extra])


def test_single_process_ratio_against_dgl(tmp_path):
    r = bench.run(_args(tmp_path, "--skip-ranks"))
    assert r["ratio"] == pytest.approx(r["ours_epoch_s"] / r["dgl_epoch_s"])
    assert r["ours_epoch_s"] > 0 and r["dgl_epoch_s"] > 0
    assert "ratio" in r["summary"] and "DGL" in r["summary"]


@pytest.mark.slow
def test_ranks_section_reports_overlap_permutation_and_timeline(tmp_path):
    png = tmp_path / "timeline.png"
    r = bench.run(_args(tmp_path, "--skip-single", "--workers", "2", "--timeline-plot", str(png)))
    ranks = r["ranks"]
    assert set(ranks) == {"perm_overlap", "perm_sequential", "natural_overlap", "natural_sequential"}
    # the degree-ordered copy is skewed; the permutation balances it
    assert ranks["perm_overlap"]["balance"]["tile_nnz_max_over_avg"] < \
        ranks["natural_overlap"]["balance"]["tile_nnz_max_over_avg"]
    assert png.stat().st_size > 0
