"""``gnnflow bench all``: run the benchmark suite and write one table with the machine it ran on.

The suite is a YAML file (default ``config/bench.yaml``) whose ``benchmarks``
list has the workflow config's format (``{name, bench, args}``, validated
against the same schema).  Every entry runs as ``gnnflow bench BENCH --json
ARGS`` in a fresh process (peak-memory figures stay per benchmark); its JSON
is written to ``--json-dir`` (default ``results/bench``, where the Snakemake
rule writes them too) and its stderr to ``--json-dir/logs``.  When every entry
has succeeded, the table is written (atomically) to ``--out`` (default
``docs/benchmarks.md``): one row per ratio of every benchmark, each with its
two operands (:mod:`gnnflow.bench.ratios`), then statistics, quoted context
and each benchmark's summary line.  ``--reuse`` keeps JSON files already in
``--json-dir`` (to finish an interrupted suite, or to table what Snakemake
produced); ``--only`` runs a subset (the table then holds that subset).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gnnflow.errors import ConfigError, GnnflowError

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG = ROOT / "config" / "bench.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="the suite (default: config/bench.yaml)")
    parser.add_argument("--out", default="docs/benchmarks.md", help="the table (Markdown) to write")
    parser.add_argument("--json-dir", default="results/bench", help="where each benchmark's JSON is kept")
    parser.add_argument("--only", default="", help="comma-separated names of the suite's entries to run")
    parser.add_argument("--reuse", action="store_true", help="keep JSON files already in --json-dir")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per benchmark")


def load_suite(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The ``benchmarks`` entries of a suite file, validated as the workflow config's are."""
    import jsonschema
    import yaml

    from gnnflow.bench.registry import BENCHES, suite_entry_schema

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such suite file; pass --config FILE (a YAML list under 'benchmarks')") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    entries = (doc or {}).get("benchmarks") if isinstance(doc, dict) else None
    if not entries:
        raise ConfigError(f"{path}: no 'benchmarks' list")
    schema = {"type": "array", "items": suite_entry_schema()}
    try:
        jsonschema.validate(entries, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise ConfigError(f"{path}: benchmarks/{where}: {exc.message}") from None
    names = [e["name"] for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{path}: benchmark names must be unique, repeated: {', '.join(dup)}")
    unknown = sorted({e["bench"] for e in entries} - (set(BENCHES) - {"all"}))
    if unknown:
        raise ConfigError(f"{path}: unknown benchmark(s) {unknown}")
    return entries


def bench_command(entry: dict[str, Any]) -> list[str]:
    """``gnnflow bench BENCH --json ARGS`` for one suite entry."""
    from gnnflow.config import cli_options

    return [sys.executable, "-m", "gnnflow.cli", "bench", entry["bench"], "--json",
            *shlex.split(cli_options(entry.get("args")))]


def run_entry(entry: dict[str, Any], json_dir: Path, timeout: float) -> dict[str, Any]:
    """Run one entry; its JSON (also kept in ``json_dir``), or a :class:`GnnflowError` naming its log."""
    from gnnflow.io import atomic_file

    log = json_dir / "logs" / f"{entry['name']}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = bench_command(entry)
    with open(log, "w") as err:
        err.write("$ " + shlex.join(["gnnflow", *cmd[3:]]) + "\n")
        err.flush()
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GnnflowError(f"{entry['name']}: no result after {timeout:.0f} s (see {log})") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise GnnflowError(f"{entry['name']}: exit status {proc.returncode} (see {log})")
    result = json.loads(lines[-1])
    result["command"] = shlex.join(["gnnflow", *cmd[3:]])
    with atomic_file(json_dir / f"{entry['name']}.json") as tmp:
        tmp.write_text(json.dumps(result, sort_keys=True) + "\n")
    return result


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.io import atomic_file, progress

    entries = load_suite(args.config)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        missing = sorted(set(wanted) - {e["name"] for e in entries})
        if missing:
            raise ConfigError(f"--only: {', '.join(missing)} not in {args.config}")
        entries = [e for e in entries if e["name"] in wanted]
    json_dir = Path(args.json_dir)
    results: dict[str, dict[str, Any]] = {}
    failures: list[str] = []
    reused: list[str] = []
    load_start, t0 = _load(), time.perf_counter()
    for entry in progress(entries, "bench all"):
        path = json_dir / f"{entry['name']}.json"
        if args.reuse and path.exists():
            results[entry["name"]] = json.loads(path.read_text())
            reused.append(entry["name"])
            continue
        try:
            results[entry["name"]] = run_entry(entry, json_dir, args.timeout)
            print(f"{entry['name']}: {results[entry['name']].get('summary', '')}", file=sys.stderr, flush=True)
        except GnnflowError as exc:
            failures.append(str(exc))
            print(f"{entry['name']}: FAILED: {exc}", file=sys.stderr, flush=True)
    if failures:
        raise GnnflowError(f"{len(failures)} of {len(entries)} benchmark(s) failed, table not written: "
                           + "; ".join(failures))
    command = "gnnflow bench all" + "".join(
        f" {flag} {value}" for flag, value in (("--config", _rel(args.config)), ("--out", args.out),
                                               ("--only", args.only)) if value) + (" --reuse" if args.reuse else "")
    text = render(entries, results, command, {"load_start": load_start, "load_end": _load(),
                                              "wall_s": time.perf_counter() - t0, "reused": reused})
    with atomic_file(args.out) as tmp:
        tmp.write_text(text)
    heads = {name: r.get("ratio") for name, r in results.items()}
    return {"summary": f"wrote {args.out}: {sum(len(r.get('ratios', [])) for r in results.values())} ratios of "
                       f"{len(results)} benchmarks; JSON in {json_dir}", "table": str(args.out),
            "headlines": heads, "ratio": None, "ratio_name": None}


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _num(value: Any) -> str:
    if value is None:
        return "n/a"
    v = float(value)
    return f"{v:.3f}" if 0.001 <= abs(v) < 1000 else f"{v:.4g}"


def machine_line(machines: list[dict[str, Any]]) -> str:
    """The machine the suite ran on (all benchmarks run on one; say so when they did not)."""
    keys = ("host", "cpu_count", "processor", "memory_gib", "python", "torch", "dgl", "torch_geometric", "cuda")
    seen = {json.dumps({k: m.get(k) for k in keys}, sort_keys=True) for m in machines}
    m = machines[0] if machines else {}
    line = (f"{m.get('host', '?')}: {m.get('cpu_count', '?')} CPUs ({m.get('processor', '?')}), "
            f"{m.get('memory_gib', '?')} GiB, GPU {m.get('cuda') or 'none'}; Python {m.get('python', '?')}, "
            f"torch {m.get('torch', '?')}, DGL {m.get('dgl', '?')}, PyG {m.get('torch_geometric') or 'not installed'}")
    if len(seen) > 1:
        line += f" (NOTE: the benchmarks ran on {len(seen)} different machines; see each JSON's 'machine')"
    return line


def render(entries: list[dict[str, Any]], results: dict[str, dict[str, Any]], command: str,
           run_info: dict[str, Any]) -> str:
    """The Markdown table of every ratio of every benchmark, with the machine and how it was made."""
    machines = [r["machine"] for r in results.values() if "machine" in r]
    loads = [m.get("load_avg_1m") for m in machines if m.get("load_avg_1m") is not None]
    out = ["# Benchmarks", "",
           f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')} in {run_info['wall_s'] / 60:.1f} min"
           + (f" (reused from earlier runs, `--reuse`: {', '.join(run_info['reused'])})"
              if run_info.get("reused") else "")
           + "; do not edit by hand, rerun the command (`--help` for its options).", "",
           f"**Machine**: {machine_line(machines)}.  Load average (1 min) at the start "
           f"{_num(run_info['load_start'])}, after each benchmark {', '.join(_num(x) for x in loads) or 'n/a'}: "
           "a load above the CPU count means other work shared the cores and absolute times are inflated; "
           "the ratios come from runs alternated within each benchmark.", "",
           "Every ratio divides two figures produced in the same run (measured: timed or read; counted; "
           "modelled: our cost model on this run's plans).  Figures quoted from papers appear only under "
           "*Context*.  The headline ratio of each benchmark is in bold.", "",
           "| benchmark | ratio | value | goal | numerator | denominator |",
           "|---|---|---|---|---|---|"]
    for e in entries:
        r = results[e["name"]]
        for x in r.get("ratios", []):
            head = x["name"] == r.get("ratio_name")
            value = f"**{_num(x['value'])}**" if head else _num(x["value"])
            ops = [f"{_num(x[s]['value'])} {x[s]['unit']} ({x[s]['kind']}): {x[s]['what']}"
                   for s in ("numerator", "denominator")]
            out.append(f"| {e['name']} | {_cell(x['name'])} | {value} | {_cell(x.get('goal') or '')} | "
                       f"{_cell(ops[0])} | {_cell(ops[1])} |")
    stats = [(e["name"], k, v) for e in entries for k, v in results[e["name"]].get("statistics", {}).items()]
    if stats:
        out += ["", "## Statistics", "", "| benchmark | statistic | value | computed from |", "|---|---|---|---|"]
        for name, k, v in stats:
            head = k == results[name].get("ratio_name")
            value = f"**{_num(v['value'])}**" if head else _num(v["value"])
            out.append(f"| {name} | {_cell(k)} | {value} | {_cell(v.get('computed_from', ''))} |")
    context = [(e["name"], c) for e in entries for c in _context_items(results[e["name"]].get("context", {}))]
    if context:
        out += ["", "## Context (quoted, never divided by)", ""]
        out += [f"- {name}: {_num(c['value'])} {c['unit']}, {c['source']}" for name, c in context]
    out += ["", "## Summaries", ""]
    for e in entries:
        r = results[e["name"]]
        summary = " ".join(str(r.get("summary", "")).split())
        out.append(f"- **{e['name']}** (`{r.get('command', 'gnnflow bench ' + e['bench'])}`): {summary}")
    return "\n".join(out) + "\n"


def _context_items(ctx: Any) -> list[dict[str, Any]]:
    """Every quoted figure (``kind == "quoted"``) in a nested ``context`` mapping."""
    if isinstance(ctx, dict):
        if ctx.get("kind") == "quoted":
            return [ctx]
        return [c for v in ctx.values() for c in _context_items(v)]
    return []
