"""``gnnflow bench partition`` on a small graph: every run happens and the figures add up."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("dgl")


def test_bench_partition_small(tmp_path):
    from gnnflow.bench.partition import graph_bytes, run
    from gnnflow.bench.ratios import check_ratios
    from gnnflow.data.store import open_store
    from gnnflow.data.synthetic import prepare_synthetic

    store = prepare_synthetic(tmp_path / "g", num_nodes=3000, avg_degree=8, feature_dim=8)
    args = argparse.Namespace(graph=str(store.path), nodes=0, parts=2, repeat=1, seed=0, timeout=600.0)
    r = run(args)
    assert r["num_nodes"] == 3000 and r["num_edges"] == 24000 and r["parts"] == 2
    assert r["graph_csr_features_mib"] * 2**20 == graph_bytes(open_store(store.path))
    assert [len(r["runs"][k]) for k in ("ours", "ours-lp", "dgl", "metis-alone")] == [1, 1, 1, 1]
    # like for like: the headline is plain METIS (no coarsening) against DGL's METIS
    assert r["ours_coarsen"] == {"ours": "none", "ours-lp": "lp"}
    assert check_ratios(r) == []
    assert r["ratio_name"] == "partition time: ours (plain METIS) / DGL"
    assert r["ratio"] == pytest.approx(r["wall_s"]["ours"] / r["wall_s"]["dgl"])
    cuts = {x["name"]: x for x in r["ratios"] if x["name"].startswith("edge cut")}
    assert cuts["edge cut: ours (coarsened METIS) / DGL"]["numerator"]["value"] == r["edge_cut_pct"]["ours-lp"]
    assert all(0 < v < 100 for v in r["edge_cut_pct"].values())
    alone = r["runs"]["metis-alone"][0]
    # the METIS process holds at least its inputs; its peak is the inputs plus METIS's working memory
    assert alone["peak_rss_mib"] >= alone["inputs_rss_mib"] >= alone["baseline_rss_mib"] > 0
    assert r["metis_working_mib"] == alone["peak_rss_mib"] - alone["inputs_rss_mib"]
    assert r["rss_over_graph"]["ours"] == r["peak_rss_mib"]["ours"] / r["graph_csr_features_mib"]
    assert "METIS call alone" in r["summary"]
