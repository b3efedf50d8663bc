"""The results table collapses ranks the way each column means it."""

from __future__ import annotations

import pandas as pd

from gnnflow.results.table import per_run_epoch, summarize


def _table() -> pd.DataFrame:
    rows = []
    for rank, (t, edges, hit) in enumerate([(1.0, 100, 0.6), (3.0, 300, 0.8)]):
        rows.append({"run_id": "r", "strategy": "hec", "dataset": "d", "model": "sage", "workers": 2,
                     "epoch": 0, "rank": rank, "seed": 0, "loss": 1.0 + rank, "test_acc": 0.5,
                     "time_epoch": t, "sampled_edges": edges, "x_hec_hit_rate_l1": hit})
    return pd.DataFrame(rows)


def test_ranks_collapse_by_meaning():
    row = per_run_epoch(_table()).iloc[0]
    assert row["time_epoch"] == 3.0  # slowest rank
    assert row["sampled_edges"] == 400  # counters add up
    assert abs(row["x_hec_hit_rate_l1"] - 0.7) < 1e-12  # per-rank rates are averaged, not summed
    assert row["loss"] == 1.5


def test_summary_per_run():
    summary = summarize(_table())
    assert list(summary["run_id"]) == ["r"]
    assert summary.iloc[0]["sampled_edges_per_epoch"] == 400
    assert summary.iloc[0]["epoch_time_s"] == 3.0


def test_settings_are_not_counted():
    """cfg_* columns are settings: never summed over ranks, one column each (a CSV's empty
    cfg_partition reads back as a float column)."""
    table = _table().assign(cfg_hidden=64, cfg_partition=float("nan"))
    per_epoch = per_run_epoch(table)
    assert list(per_epoch.columns).count("cfg_hidden") == 1 and per_epoch.iloc[0]["cfg_hidden"] == 64


def test_per_run_median_and_last():
    from gnnflow.results.table import per_run

    table = pd.concat([_table().assign(epoch=e, test_acc=acc, time_epoch=t)
                       for e, (acc, t) in enumerate([(0.5, 1.0), (0.6, 5.0), (0.7, 2.0)])])
    assert per_run(table, "median").iloc[0]["time_epoch"] == 2.0
    last = per_run(table, "last").iloc[0]
    assert last["test_acc"] == 0.7 and last["time_epoch"] == 2.0
