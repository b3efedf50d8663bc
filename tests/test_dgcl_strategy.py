"""--strategy dgcl equals single-process full-batch training (DGCL §4.2, Listing 1)."""

from __future__ import annotations

import pytest

from gnnflow.strategies.verify.fullbatch import verify_dgcl as verify


@pytest.mark.slow
def test_verify_every_planner_2_ranks() -> None:
    res = verify(2, "gcn", planner=["p2p", "spst", "swap", "replication"])
    assert res["passed"], res
    assert max(res["max_abs_diff"].values()) <= 1e-5


@pytest.mark.slow
def test_verify_spst_4_ranks_dgx1() -> None:
    res = verify(4, "gcn", planner="spst")
    assert res["passed"], res
    assert max(res["max_abs_diff"].values()) <= 1e-5


@pytest.mark.slow
def test_verify_relay_through_third_rank(tmp_path) -> None:
    topo = tmp_path / "line.yaml"
    # r0 and r2 are not connected: every embedding between them is relayed by r1
    topo.write_text("devices: [r0, r1, r2]\nconnections:\n  - [r0, r1, 10]\n  - [r1, r2, 10]\n")
    res = verify(3, "gcn", planner=["spst", "p2p"], topology=str(topo))
    assert res["passed"], res
    assert all(res["planners"][p]["relay_rows"] > 0 for p in ("spst", "p2p"))


def test_training_runs_and_counts(tmp_path) -> None:
    from gnnflow.config import TrainConfig
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph
    from gnnflow.runtime.launch import run_ranks

    graph = prepare_synthetic(tmp_path / "g", num_nodes=400, avg_degree=6, feature_dim=8, num_classes=4)
    book = partition_graph(graph.path, "metis", 2, tmp_path / "p")
    cfg = TrainConfig(graph=str(graph.path), strategy="dgcl", partition=str(book.path), model="gcn",
                      hidden=16, num_layers=2, fanouts=[-1, -1], lr=0.05, dropout=0.0, workers=2,
                      options={"planner": "spst", "topology": "dgx1-v100"})
    res = run_ranks(_train, 2, cfg.to_dict(), timeout_s=60)
    losses, counts, accs = res[0]
    assert losses[-1] < losses[0]
    assert counts["bytes_sent"] > 0 and counts["allgather_calls"] == 2
    assert res[0][2] == res[1][2]  # evaluation is global: every rank reports the same accuracy


@pytest.mark.slow
def test_verify_projected_rows_in_every_layer_and_unprojected_rows() -> None:
    """hidden 8 < 12 features: both layers project before the exchange (the input layer too);
    project=False fetches every layer's input as DGCL §4.2 does; both equal single-process."""
    for kw in ({"hidden": 8, "planner": ["spst", "swap"]}, {"project": False, "planner": "spst"}):
        res = verify(2, "gcn", **kw)
        assert res["passed"], (kw, res)


def test_projection_before_the_exchange_moves_the_narrow_rows(tmp_path) -> None:
    """8 features -> 16 hidden -> 4 classes: layer 0 aggregates first (fetches 8 columns), the
    output layer projects first (fetches 4 columns, not 16, and returns 4-column gradients).
    Same losses either way; the bytes of the whole epoch shrink by exactly that."""
    from gnnflow.config import TrainConfig
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph
    from gnnflow.runtime.launch import run_ranks

    graph = prepare_synthetic(tmp_path / "g", num_nodes=400, avg_degree=6, feature_dim=8, num_classes=4)
    book = partition_graph(graph.path, "metis", 2, tmp_path / "p")
    runs = {}
    for project in ("true", "false"):
        cfg = TrainConfig(graph=str(graph.path), strategy="dgcl", partition=str(book.path), model="gcn",
                          hidden=16, num_layers=2, fanouts=[-1, -1], lr=0.05, dropout=0.0, workers=2,
                          options={"planner": "p2p", "project": project})
        runs[project] = run_ranks(_train, 2, cfg.to_dict(), timeout_s=60)
    for r in range(2):
        assert runs["true"][r][0] == pytest.approx(runs["false"][r][0], abs=1e-5)
        # forward: 8 columns (layer 0) + 4 or 16 (layer 1); backward: layer 1's only (features
        # need no gradient); bytes per row are columns x 4, so the ratio is (8 + 2*4) / (8 + 2*16)
        # (plus the few bytes every message carries besides rows)
        assert runs["true"][r][1]["bytes_sent"] / runs["false"][r][1]["bytes_sent"] == pytest.approx(16 / 40, rel=0.01)


def _train(ctx, cfg_dict):
    from gnnflow.config import TrainConfig
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.fullbatch.dgcl import PlannedHalo

    s = PlannedHalo(TrainConfig.from_dict(cfg_dict), ctx)
    s.prepare()
    losses = []
    for epoch in range(3):
        rec = Recorder()
        losses.append(s.run_epoch(epoch, rec))
    counts = {"bytes_sent": rec.counters["bytes_sent"], "allgather_calls": rec.extra["allgather_calls"]}
    return losses, counts, s.evaluate()
