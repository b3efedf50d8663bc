"""``gnnflow bench fullbatch`` runs end to end on a tiny graph and reports what the issue asks."""

from __future__ import annotations

import argparse

import pytest

from gnnflow.bench import fullbatch as bench
from gnnflow.bench.ratios import check_ratios

pytest.importorskip("torch_geometric")


def _args(tmp_path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(["--work", str(tmp_path), "--nodes", "1500", "--avg-degree", "6", "--feature-dim", "24",
                              "--classes", "4", "--hidden", "32", "--epochs", "1", "--repeats", "1", *extra])


def test_single_process_ratios_against_dgl_and_pyg(tmp_path):
    r = bench.run(_args(tmp_path, "--skip-ranks"))
    assert check_ratios(r) == []
    by = {x["name"]: x for x in r["ratios"]}
    dgl, pyg = by["full-graph GCN epoch: ours / DGL"], by["full-graph GCN epoch: ours / PyG"]
    assert r["ratio"] == dgl["value"] == pytest.approx(r["ours_epoch_s"] / r["dgl_epoch_s"])
    assert pyg["value"] == pytest.approx(r["ours_epoch_s"] / min(r["pyg_edge_index_epoch_s"], r["pyg_adj_t_epoch_s"]))
    # the peers started from our weights and computed our logits
    assert set(r["max_abs_diff"]) == {"dgl", "pyg_edge_index", "pyg_adj_t"}
    assert max(r["max_abs_diff"].values()) <= 1e-4
    assert "DGL" in r["summary"] and "PyG" in r["summary"]


def test_right_norm_peers_compute_our_logits(tmp_path):
    """norm=right (MG-GCN eq. 2) through the same peers: checked equal before timing, or the bench stops."""
    r = bench.run(_args(tmp_path, "--skip-ranks", "--norm", "right", "--layers", "3"))
    assert max(r["max_abs_diff"].values()) <= 1e-4 and check_ratios(r) == []


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
    assert check_ratios(r) == []
