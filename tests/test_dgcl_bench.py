"""``gnnflow bench allgather``: every mode's ratios divide two figures measured (or modeled) in the run."""

from __future__ import annotations

import argparse

import pytest

from gnnflow.bench import allgather
from gnnflow.bench.ratios import check_ratios


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    allgather.add_arguments(parser)
    args = parser.parse_args(list(argv))
    args.feature_dim = args.feature_dim or 128
    return args


def test_planning_time_runs_per_vertex_and_grouped_spst_on_one_relation():
    r = allgather.run(_args("--mode", "planning-time", "--nodes", "3000", "--parts", "4", "--plan-repeats", "2"))
    assert check_ratios(r) == []
    assert r["granularity"]["per_vertex"] == 1 and r["units"]["per_vertex"] == r["remote_vertices"]
    assert r["units"]["grouped"] <= 4096
    head = r["ratios"][0]
    assert head["denominator"]["value"] == r["per_vertex_s"] and head["numerator"]["value"] == r["grouped_s"]
    assert len(r["runs_s"]["per_vertex"]) == len(r["runs_s"]["grouped"]) == 2
    # the paper's figure is context, never an operand
    assert all(c["kind"] == "quoted" for c in r["context"]["dgcl_table8_spst_s"].values())
    assert not any(op["value"] == 43.5 for x in r["ratios"] for op in (x["numerator"], x["denominator"]))


@pytest.mark.slow
def test_planners_report_measured_exchange_time_per_planner():
    r = allgather.run(_args("--mode", "planners", "--nodes", "2000", "--densities", "4,12", "--parts", "4",
                            "--workers", "2", "--repeats", "2"))
    assert check_ratios(r) == []
    for row in r["rows"]:
        m = row["measured"]
        assert m["p2p_ms"] > 0 and m["spst_ms"] > 0 and m["p2p_modeled_ms"] > 0
    names = [x["name"] for x in r["ratios"]]
    assert sum("measured" in n for n in names) == 2


def test_no_bench_module_divides_by_a_paper_figure():
    """Acceptance 4 of issue 21: no ratio in src/gnnflow/bench has a paper constant in its division."""
    import ast
    from pathlib import Path

    bench_dir = Path(allgather.__file__).parent
    offenders = []
    for path in sorted(bench_dir.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                src = ast.get_source_segment(path.read_text(), node) or ""
                if "paper" in src.lower() or "table8" in src.lower():
                    offenders.append(f"{path.name}:{node.lineno}: {src}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ratio":
                src = ast.get_source_segment(path.read_text(), node) or ""
                if "paper" in src.lower():
                    offenders.append(f"{path.name}:{node.lineno}: {src[:80]}")
    assert offenders == []
