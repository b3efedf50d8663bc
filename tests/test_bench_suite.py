"""``gnnflow bench all``: one command runs a suite and writes one table with the machine it ran on."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("dgl")

from gnnflow.cli import main as cli_main  # noqa: E402

SUITE = """
benchmarks:
  - {name: sampler, bench: sampler, args: {nodes: 2000, batch_size: 32, batches: 1, rounds: 1, threads: 1}}
  - {name: plan, bench: allgather, args: {mode: planning-time, nodes: 2000, parts: 4, plan_repeats: 1}}
"""


def test_bench_all_writes_one_table_from_the_suite(tmp_path, capsys):
    suite = tmp_path / "bench.yaml"
    suite.write_text(SUITE)
    out, jdir = tmp_path / "docs" / "benchmarks.md", tmp_path / "json"
    assert cli_main(["bench", "all", "--config", str(suite), "--out", str(out), "--json-dir", str(jdir)]) == 0
    text = out.read_text()
    results = {n: json.loads((jdir / f"{n}.json").read_text()) for n in ("sampler", "plan")}
    host = results["sampler"]["machine"]["host"]
    assert f"**Machine**: {host}:" in text and "DGL 1.1.3" in text
    rows = [line for line in text.splitlines() if line.startswith("| sampler |") or line.startswith("| plan |")]
    assert len(rows) == sum(len(r["ratios"]) for r in results.values())
    # the headline of each benchmark is bold, and every row names both of its operands
    assert f"**{results['plan']['ratio']:.3f}**" in text or f"**{results['plan']['ratio']:.4g}**" in text
    assert all(row.count("(measured)") + row.count("(modelled)") == 2 for row in rows)
    assert "## Context (quoted, never divided by)" in text and "DGCL Table 8" in text
    assert results["plan"]["command"].startswith("gnnflow bench allgather --json --mode planning-time")
    assert (jdir / "logs" / "plan.log").read_text().startswith("$ gnnflow bench allgather")

    # --reuse tables what is there without running it again
    results["sampler"]["summary"] = "REUSED"
    (jdir / "sampler.json").write_text(json.dumps(results["sampler"]))
    assert cli_main(["bench", "all", "--config", str(suite), "--out", str(out), "--json-dir", str(jdir),
                     "--reuse"]) == 0
    assert "REUSED" in out.read_text()


def test_bench_all_failure_names_the_benchmark_and_writes_no_table(tmp_path, capsys):
    suite = tmp_path / "bench.yaml"
    suite.write_text("benchmarks:\n  - {name: bad, bench: sampler, args: {fanouts: 'x'}}\n")
    out = tmp_path / "benchmarks.md"
    assert cli_main(["bench", "all", "--config", str(suite), "--out", str(out), "--json-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "bad: exit status 1" in err and "table not written" in err and not out.exists()
    assert "--fanouts" in (tmp_path / "logs" / "bad.log").read_text()


def test_suite_files_are_validated(tmp_path):
    from gnnflow.bench.suite import DEFAULT_CONFIG, load_suite
    from gnnflow.errors import ConfigError

    names = [e["name"] for e in load_suite(DEFAULT_CONFIG)]  # the shipped suite
    assert {"data-parallel", "layers", "fullbatch", "partition", "allgather-planning"} <= set(names)
    bad = tmp_path / "b.yaml"
    bad.write_text("benchmarks:\n  - {name: x, bench: nope}\n")
    with pytest.raises(ConfigError, match="benchmarks/0/bench"):
        load_suite(bad)
    bad.write_text("benchmarks:\n  - {name: x, bench: sampler}\n  - {name: x, bench: layers}\n")
    with pytest.raises(ConfigError, match="unique, repeated: x"):
        load_suite(bad)
