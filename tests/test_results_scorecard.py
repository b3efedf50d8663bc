"""Paper scorecards: claims files, verdicts computed from a results table, the CLI.

Every verdict is checked on a table where the claim holds and on one where it
does not (hand-made tables: ``conftest.results_table``), and every claims file
under config/paper/ is checked against its paper config's runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import results_table

from gnnflow.errors import ConfigError
from gnnflow.results.claims import load_claims
from gnnflow.results.scorecard import (
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    SAME_DIRECTION,
    scorecard,
    scorecard_frame,
)
from gnnflow.workflow import apply_variant, expand_runs

ROOT = Path(__file__).resolve().parents[1]
PAPERS = sorted((ROOT / "config" / "paper").glob("*.claims.yaml"))


def claims_file(tmp_path: Path, *claims: dict, name: str = "c.claims.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"paper": "A paper", "hardware": "8 GPUs", "claims": list(claims)}))
    return path


def verdict(tmp_path: Path, claim: dict, table, bench_dir: Path | None = None):
    claims = load_claims(claims_file(tmp_path, claim))
    (v,) = scorecard(claims, {"small": table}, {"small": bench_dir})
    return v


RATIO = {"id": "features", "statement": "data loads 1.2-2.5x the features of split",
         "where": {"ref": "Table 1", "dataset": "Orkut"}, "paper": {"range": [1.2, 2.5]},
         "compare": "ratio", "metric": "features_loaded",
         "of": {"sweep": "t3", "strategy": "data"}, "over": {"sweep": "t3", "strategy": "split"}}


def two_runs(data: float, split: float, metric: str = "features_loaded", **settings):
    return results_table([
        {"run_id": "t3-data-main-sage-w4", "strategy": "data", "metrics": {metric: data}, **settings},
        {"run_id": "t3-split-main-sage-w4", "strategy": "split", "metrics": {metric: split}, **settings}])


@pytest.mark.parametrize("data, split, expected", [
    (2000.0, 1000.0, REPRODUCED),      # 2.0x, in 1.2-2.5x
    (2700.0, 1000.0, REPRODUCED),      # 2.7x: within the 10 % tolerance above 2.5
    (4000.0, 1000.0, SAME_DIRECTION),  # 4x: more than the paper says, same side of 1
    (900.0, 1000.0, NOT_REPRODUCED),   # 0.9x: split loads more
])
def test_ratio_verdicts(tmp_path, data, split, expected):
    v = verdict(tmp_path, RATIO, two_runs(data, split))
    assert v.verdict == expected, v.reason
    assert v.measurement.value == pytest.approx(data / split)
    assert v.measurement.parts == {"data-parallel": pytest.approx(data), "split-parallel": pytest.approx(split)}


def test_ratio_direction_only(tmp_path):
    claim = {**RATIO, "paper": {"direction": "below"}, "tolerance": 0.05}
    assert verdict(tmp_path, claim, two_runs(50.0, 100.0)).verdict == REPRODUCED
    assert verdict(tmp_path, claim, two_runs(98.0, 100.0)).verdict == SAME_DIRECTION  # within 5 % of no effect
    assert verdict(tmp_path, claim, two_runs(120.0, 100.0)).verdict == NOT_REPRODUCED


VALUE = {"id": "cross", "statement": "Rand: 75 % of edges cross splits", "where": {"ref": "Fig. 5"},
         "paper": {"value": 0.75}, "compare": "value", "metric": "x_cross_edge_fraction",
         "of": {"sweep": "fig5", "partition": "random4", "label": "Rand"}}


def test_value_verdicts(tmp_path):
    def table(frac):
        return results_table([{"run_id": "fig5-split-main-sage-w4-random4", "strategy": "split",
                               "partition": "random4", "metrics": {"x_cross_edge_fraction": frac}}])

    assert verdict(tmp_path, VALUE, table(0.73)).verdict == REPRODUCED
    held = verdict(tmp_path, VALUE, table(0.40))
    assert held.verdict == NOT_REPRODUCED and "40.0 %" in held.reason
    bound = {**VALUE, "paper": {"at_most": 0.5}}
    assert verdict(tmp_path, bound, table(0.40)).verdict == REPRODUCED
    assert verdict(tmp_path, bound, table(0.73)).verdict == NOT_REPRODUCED


DIFF = {"id": "acc", "statement": "split tracks data-parallel accuracy", "where": {"ref": "Fig. 7"},
        "paper": {"quote": "closely mirrors"}, "compare": "difference", "metric": "test_acc",
        "of": {"strategy": "split"}, "over": {"strategy": "data"}, "per_epoch": True, "within": 0.01}


def test_difference_epoch_by_epoch(tmp_path):
    def table(split_curve):
        return results_table([
            {"run_id": "a-data", "strategy": "data", "metrics": {"test_acc": [0.50, 0.60, 0.70]}},
            {"run_id": "a-split", "strategy": "split", "metrics": {"test_acc": split_curve}}], epochs=3)

    v = verdict(tmp_path, DIFF, table([0.505, 0.595, 0.708]))
    assert v.verdict == REPRODUCED and v.measurement.value == pytest.approx(0.008)
    # equal final accuracy, but 3 points apart in epoch 2: the curves do not track
    v = verdict(tmp_path, DIFF, table([0.50, 0.63, 0.70]))
    assert v.verdict == NOT_REPRODUCED and v.measurement.value == pytest.approx(0.03)


ORDER = {"id": "imb", "statement": "Rand < GSplit < Edge", "where": {"ref": "Fig. 5"},
         "paper": {"quote": "Rand most even"}, "compare": "order", "metric": "x_load_imbalance",
         "expect": "ascending", "groups": [
             {"label": "Rand", "select": {"partition": "random4"}, "paper": 1.0},
             {"label": "GSplit", "select": {"partition": "presample4"}},
             {"label": "Edge", "select": {"partition": "edge4"}}]}


@pytest.mark.parametrize("values, expected", [
    ((1.02, 1.05, 1.10), REPRODUCED),
    ((1.02, 1.12, 1.10), SAME_DIRECTION),  # ends ordered, middle not
    ((1.10, 1.05, 1.02), NOT_REPRODUCED),
])
def test_order_verdicts(tmp_path, values, expected):
    table = results_table([{"run_id": f"fig5-split-{p}", "strategy": "split", "partition": p,
                            "metrics": {"x_load_imbalance": v}}
                           for p, v in zip(("random4", "presample4", "edge4"), values, strict=True)])
    v = verdict(tmp_path, ORDER, table)
    assert v.verdict == expected, v.reason
    assert [v.measurement.parts[k] for k in ("Rand", "GSplit", "Edge")] == pytest.approx(list(values))


def test_needs_gpus_shows_ours_for_context_only(tmp_path):
    claim = {**RATIO, "needs": {"device": "cuda", "reason": "a speed-up of 4 GPUs"}}
    v = verdict(tmp_path, claim, two_runs(2000.0, 1000.0))
    assert v.verdict == NOT_MEASURABLE and v.reason.startswith("a speed-up of 4 GPUs")
    assert v.measurement.value == pytest.approx(2.0)
    assert scorecard_frame([v]).iloc[0]["ours (small)"] == "2.00× (context only)"
    # the same claim on runs that trained on GPUs is judged
    assert verdict(tmp_path, claim, two_runs(2000.0, 1000.0, device="cuda:0")).verdict == REPRODUCED
    ranks = {**RATIO, "needs": {"workers": 64, "reason": "64 ranks"}}
    assert verdict(tmp_path, ranks, two_runs(2000.0, 1000.0, workers=4)).verdict == NOT_MEASURABLE
    assert verdict(tmp_path, ranks, two_runs(2000.0, 1000.0, workers=64)).verdict == REPRODUCED
    never = {**RATIO, "needs": {"reason": "DGX-1 NVLink links"}}
    assert verdict(tmp_path, never, two_runs(2000.0, 1000.0)).verdict == NOT_MEASURABLE


def test_missing_and_ambiguous_runs(tmp_path):
    table = two_runs(2000.0, 1000.0)
    gone = verdict(tmp_path, {**RATIO, "over": {"strategy": "p3"}}, table)
    assert gone.verdict == NOT_MEASURABLE and "no run with strategy p3" in gone.reason
    no_col = verdict(tmp_path, {**RATIO, "metric": "x_cross_edge_fraction"}, table)
    assert no_col.verdict == NOT_MEASURABLE and "cross-split edges" in no_col.reason
    with pytest.raises(ConfigError, match="matches 2 runs"):
        verdict(tmp_path, {**RATIO, "of": {"sweep": "t3"}}, table)


def test_benchmark_value(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "allgather.json").write_text("log line\n" + json.dumps({"ratio": 0.99, "fit": {"max_rel_divergence": 0.03}}))
    claim = {"id": "fit", "statement": "the cost model fits", "where": {"ref": "Fig. 10"},
             "paper": {"at_most": 0.05}, "compare": "value", "metric": "x_fit",
             "of": {"bench": "allgather", "key": "fit.max_rel_divergence"}}
    table = two_runs(1.0, 1.0)
    assert verdict(tmp_path, claim, table, bench).verdict == REPRODUCED
    (bench / "allgather.json").write_text(json.dumps({"fit": {"max_rel_divergence": 0.2}}))
    assert verdict(tmp_path, claim, table, bench).verdict == NOT_REPRODUCED
    missing = verdict(tmp_path, claim, table, tmp_path / "nowhere")
    assert missing.verdict == NOT_MEASURABLE and "was not run" in missing.reason
    # a benchmark's headline ratio stands alone (no `over`)
    own = {"id": "bytes", "statement": "HEC moves fewer bytes", "where": {"ref": "§3.2"},
           "paper": {"direction": "below"}, "compare": "ratio", "of": {"bench": "hec", "key": "ratio"}}
    (bench / "hec.json").write_text(json.dumps({"ratio": 0.1}))
    assert verdict(tmp_path, own, table, bench).verdict == REPRODUCED
    (bench / "hec.json").write_text(json.dumps({"ratio": 1.9}))
    assert verdict(tmp_path, own, table, bench).verdict == NOT_REPRODUCED
    with pytest.raises(ConfigError, match=r"claims\[0\]\.over: a ratio divides"):
        load_claims(claims_file(tmp_path, {k: v for k, v in RATIO.items() if k != "over"}))


@pytest.mark.parametrize("change, message", [
    ({"compare": "average"}, "claims[0].compare"),
    ({"paper": {"range": [2.5, 1.2]}}, "claims[0].paper.range: 2.5 > 1.2"),
    ({"paper": {"quote": "faster"}}, "claims[0].paper: a ratio claim needs"),
    ({"of": None}, "claims[0]"),
    ({"tolerance": -1}, "claims[0].tolerance"),
])
def test_claims_file_errors_name_the_key(tmp_path, change, message):
    claim = {k: v for k, v in {**RATIO, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
        load_claims(claims_file(tmp_path, claim))
    assert str(tmp_path / "c.claims.yaml") in str(err.value) and "\n" not in str(err.value)


def test_duplicate_ids_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="used twice"):
        load_claims(claims_file(tmp_path, RATIO, RATIO))
    with pytest.raises(ConfigError, match="no such claims file"):
        load_claims(tmp_path / "nope.yaml")


def _config_table(config_path: Path):
    """A results table with one row set per run of the paper config (its small variant), every
    metric the claims read present: selectors are checked against the config's real run names."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    paper = yaml.safe_load(config_path.read_text())
    config = apply_variant({**base, **paper})
    claims = load_claims(config_path.with_name(config_path.stem + ".claims.yaml"))
    metrics = {c.strip() for cl in claims.claims for m in [cl.metric, *(g.metric for g in cl.groups)] if m
               for c in m.split(" / ")}
    runs = [{"run_id": r.name, "strategy": r.strategy, "workers": r.workers, "partition": r.partition,
             "opt": r.options, "metrics": dict.fromkeys(metrics, 1.0)} for r in expand_runs(config)]
    benches = {b["name"] for b in config.get("benchmarks", [])}
    return claims, results_table(runs), benches


@pytest.mark.parametrize("claims_path", PAPERS, ids=lambda p: p.name)
def test_paper_claims_name_runs_of_their_config(claims_path, tmp_path):
    config_path = claims_path.with_name(claims_path.name.replace(".claims", ""))
    claims, table, benches = _config_table(config_path)
    assert claims.benches() <= benches, f"claims read benchmarks the config does not run: {claims.benches() - benches}"
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in benches:
        (bench / f"{name}.json").write_text(json.dumps({"ratio": 1.0, "fit": {"max_rel_divergence": 0.0},
                                                         "dgl_epoch_s": 1.0, "ours_epoch_s": 1.0}))
    for v in scorecard(claims, {"small": table}, {"small": bench}):
        assert v.measured or (v.claim.needs and not v.claim.needs.conditional()), (v.claim.id, v.reason)
        assert v.verdict in (REPRODUCED, SAME_DIRECTION, NOT_REPRODUCED, NOT_MEASURABLE)


def test_every_paper_config_has_claims():
    configs = {p.name for p in (ROOT / "config" / "paper").glob("*.yaml") if ".claims" not in p.name}
    assert {p.name.replace(".claims", "") for p in PAPERS} == configs
    for p in configs:
        assert yaml.safe_load((ROOT / "config" / "paper" / p).read_text())["scorecard"]["claims"] == \
            f"config/paper/{p.replace('.yaml', '.claims.yaml')}"


def test_cli_prints_and_writes(tmp_path, capsys):
    from gnnflow.cli import main

    table = tmp_path / "table.csv"
    two_runs(2000.0, 1000.0).to_csv(table, index=False)
    claims = claims_file(tmp_path, RATIO, {**ORDER, "id": "order"})
    out, page = tmp_path / "card.csv", tmp_path / "card.html"
    assert main(["results", "scorecard", f"small={table}", "--claims", str(claims), "--out", str(out),
                 "--html", str(page)]) == 0
    text = capsys.readouterr().out
    assert "features" in text and "reproduced" in text and "not measurable here" in text
    import pandas as pd

    card = pd.read_csv(out)
    assert list(card["claim"]) == ["features", "order"]
    assert list(card["verdict (small)"]) == [REPRODUCED, NOT_MEASURABLE]
    assert "data:image/png;base64," in page.read_text()
    assert main(["results", "scorecard", str(table), "--claims", str(tmp_path / "nope.yaml")]) == 1
