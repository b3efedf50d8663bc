"""No figure or scorecard shows a raw column name: every text a figure draws (titles, axis
labels, tick labels, legends, annotations) and every scorecard cell is checked against the
results table's column names, and every column the paper configs use has a label."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
import yaml
from conftest import results_table

from gnnflow.plots.figures import KINDS, make_figure
from gnnflow.plots.scorecard import claim_figure
from gnnflow.results.claims import load_claims
from gnnflow.results.labels import COLUMNS, describe
from gnnflow.results.scorecard import scorecard, scorecard_frame

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = sorted(p for p in (ROOT / "config" / "paper").glob("*.yaml") if ".claims" not in p.name)

METRICS = {
    "time_epoch": 1.0, "time_sample": 0.3, "time_load": 0.2, "time_forward_backward": 0.4, "time_comm": 0.1,
    "time_allreduce": 0.05, "time_wait": 0.01, "time_step": 0.01, "loss": 1.2, "test_acc": [0.5, 0.6],
    "sampled_edges": 5e5, "features_loaded": 2e5, "remote_bytes": 1.6e7, "bytes_sent": 1.8e7,
    "x_load_imbalance": 1.05, "x_cross_edge_fraction": 0.3, "x_hec_hit_rate_l0": 0.7, "x_hec_hit_rate_l1": 0.6,
    "x_tile_nnz_max_over_avg": 1.4, "x_plan_s": 0.2,
}


def _table():
    runs = []
    for i, (sweep, strategy, part, workers, opt) in enumerate([
            ("ref", "single", None, 1, {}), ("t3", "data", "metis4", 4, {"pipeline": True}),
            ("t3", "split", "presample4", 4, {"pipeline": False}), ("t3", "split", "presample4", 4, {"pipeline": True}),
            ("sc", "fullbatch", "perm2", 2, {})]):
        metrics = {k: (v if isinstance(v, list) else v * (1 + 0.1 * i)) for k, v in METRICS.items()}
        runs.append({"run_id": f"{sweep}-{strategy}-main-sage-w{workers}-{part}-{i}", "strategy": strategy,
                     "workers": workers, "partition": part, "opt": opt, "metrics": metrics})
    return results_table(runs)


def _raw_names(table) -> set[str]:
    """Column names a reader should never see: every identifier-like column of the table."""
    return {c for c in table.columns if "_" in c} | set(COLUMNS) - {c for c in COLUMNS if "_" not in c}


def _texts(fig) -> list[str]:
    import matplotlib.pyplot as plt

    fig.canvas.draw()  # tick labels exist only once drawn
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
    plt.close(fig)
    return texts


def _assert_no_raw(texts, raw, where):
    for text in texts:
        hits = [name for name in raw if name in text]
        assert not hits, f"{where}: {text!r} shows raw column name(s) {hits}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_figures_show_no_column_names(kind, tmp_path):
    table = _table()
    spec = {"name": "fig", "kind": kind, "options": {}}
    if kind == "counters":
        spec["options"] = {"columns": [c for c in METRICS if c in COLUMNS and not c.startswith("time_")],
                           "relative_to": {"strategy": "data"}}
    if kind == "benchmark":
        (tmp_path / "split.json").write_text(json.dumps({"benchmark": "split", "ratio": 1.3,
                                                         "ratio_name": "split_epoch_s / data_epoch_s"}))
        spec["options"] = {"benchmarks": ["split"]}
    fig = make_figure(table, spec, tmp_path)
    texts = _texts(fig)
    assert texts
    _assert_no_raw(texts, _raw_names(table) | {"split_epoch_s"}, kind)


def test_the_check_catches_a_raw_label():
    fig = make_figure(_table(), {"name": "fig", "kind": "epoch-time"})
    fig.axes[0].set_ylabel("time_epoch")  # what a figure showing a column name would draw
    with pytest.raises(AssertionError, match="time_epoch"):
        _assert_no_raw(_texts(fig), _raw_names(_table()), "epoch-time")


@pytest.mark.parametrize("config", PAPER_CONFIGS, ids=lambda p: p.name)
def test_paper_config_columns_have_labels(config):
    """Every column a paper config's figures and claims name is in the label map."""
    spec = yaml.safe_load(config.read_text())
    used = {c for f in spec.get("figures", []) for c in f.get("options", {}).get("columns", [])}
    claims = load_claims(config.with_name(config.stem + ".claims.yaml"))
    for c in claims.claims:
        for metric in [c.metric, *(g.metric for g in c.groups)]:
            used |= {m.strip() for m in (metric or "").split(" / ") if m}
        used |= {s.key for s in c.sources() if s.bench}
    assert used - set(COLUMNS) == set(), f"{config.name}: add these to gnnflow.results.labels.COLUMNS"


@pytest.mark.parametrize("config", PAPER_CONFIGS, ids=lambda p: p.name)
def test_scorecard_and_claim_figures_show_no_column_names(config, tmp_path):
    from test_results_scorecard import _config_table

    claims, table, benches = _config_table(config)
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in benches:
        (bench / f"{name}.json").write_text(json.dumps({"ratio": 1.0, "fit": {"max_rel_divergence": 0.01},
                                                         "dgl_epoch_s": 2.0, "ours_epoch_s": 1.0}))
    verdicts = scorecard(claims, {"small": table, "full": table}, {"small": bench, "full": bench})
    raw = _raw_names(table) | {k for k in COLUMNS if "_" in k}
    frame = scorecard_frame(verdicts)
    _assert_no_raw(list(frame.columns) + [str(v) for v in frame.to_numpy().ravel()], raw, config.name)
    for claim in claims.claims:
        fig = claim_figure(claim, [v for v in verdicts if v.claim is claim])
        if fig is not None:
            _assert_no_raw(_texts(fig), raw, f"{config.name} {claim.id}")


def test_unlisted_columns_get_readable_names():
    assert describe("x_hec_evicted_l1").name == "hec evicted, layer 1"
    assert describe("time_shuffle").unit == "s" and describe("time_shuffle").name == "shuffle"
    assert "_" not in describe("bytes_sent_peer3").name
