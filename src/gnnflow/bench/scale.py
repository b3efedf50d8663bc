"""``gnnflow bench scale``: time and peak memory of every stage as the graph grows (issue 19.6).

For each size (default: 1M vertices with average degree 25 and 8 % training
vertices; 2.45M shaped like
ogbn-products, degree 50.5, 8 % training vertices; 10M, degree 25, 1 %
training vertices as in ogbn-papers100M; 100 features each) it

1. prepares a synthetic graph store (``gnnflow prepare synthetic``),
2. partitions it into ``--workers`` METIS parts (``gnnflow partition``),
3. trains one epoch with evaluation of every strategy (``gnnflow train``, SAGE
   3 x 256 with fanouts 15,10,5 and 1000 targets per rank, or GCN 2 x 256 for
   fullbatch and dgcl) on ``--workers`` ranks,

each stage in a fresh process, and records wall time and peak RSS: ``VmHWM``
of the prepare/partition process (written by the process itself at exit:
``ru_maxrss`` would carry the parent's high-water mark over ``vfork``, see
:mod:`gnnflow.bench.partition`) and, for training, every rank's (and helper
process's) ``mem_*`` columns of the records.  Beside each training run's
measured peak it puts the memory preflight's prediction
(:mod:`gnnflow.strategies.memory`) and their ratio, and between consecutive
sizes the growth exponents ``log(t2/t1) / log(n2/n1)`` of time and memory.

Prepared graphs are kept under ``--workdir`` and reused; ``--graph-dir
LABEL=STORE[:BOOK]`` runs a size on an existing store and book instead
(``products=/work/scratch-data/products:/work/scale/products-metis4``); a
size is ``1m``, ``products``, ``10m`` or ``NODES[:DEGREE[:TRAIN_FRAC]]``.
``--out FILE`` writes the markdown tables.  Counts beside the times (sampled
edges, input vertices, bytes sent, summed over ranks) come from the records.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.data.meta import read_store_meta
from gnnflow.errors import ConfigError

MIB = 1 << 20
STRATEGIES = ("data", "split", "hec", "fullbatch", "dgcl", "p3", "distdgl")
#: name -> (vertices, average degree, training fraction)
SIZES: dict[str, tuple[int, float, float]] = {
    # 8 % training vertices as products: an epoch of 20 iterations reaches the steady state of
    # the pipeline (with 1 %, 3 iterations peak 25-40 % lower than the estimate, docs/runtime.md)
    "1m": (1_000_000, 25.0, 0.08),
    "products": (2_449_029, 50.5, 0.08),
    "10m": (10_000_000, 25.0, 0.01),
}
COUNTED = ("sampled_edges", "input_vertices", "features_loaded", "bytes_sent", "remote_bytes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1m,products,10m",
                        help="comma-separated sizes: 1m, products, 10m or NODES[:DEGREE[:TRAIN_FRAC]]")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated strategies")
    parser.add_argument("--workers", type=int, default=4, help="ranks (and METIS parts)")
    parser.add_argument("--feature-dim", type=int, default=100)
    parser.add_argument("--classes", type=int, default=47)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--fanouts", default="15,10,5", help="mini-batch strategies' fanouts (SAGE, one per layer)")
    parser.add_argument("--batch-per-rank", type=int, default=1000, help="targets per rank (global = x workers)")
    parser.add_argument("--workdir", default="results/bench-scale", help="prepared graphs and runs (reused)")
    parser.add_argument("--graph-dir", action="append", default=[], metavar="LABEL=STORE[:BOOK]",
                        help="use an existing store (and book) for size LABEL (repeatable)")
    parser.add_argument("--timeout", type=float, default=6 * 3600.0, help="seconds per stage")
    parser.add_argument("--force", action="store_true", help="pass --force to gnnflow train (memory preflight)")
    parser.add_argument("--out", default=None, help="markdown file to write the tables to")


def parse_size(text: str) -> tuple[str, int, float, float]:
    """(label, vertices, average degree, training fraction) of a ``--sizes`` entry."""
    key = text.strip().lower()
    if key in SIZES:
        return (key, *SIZES[key])
    fields = key.split(":")
    try:
        nodes = int(float(fields[0]))
        degree = float(fields[1]) if len(fields) > 1 else 25.0
        frac = float(fields[2]) if len(fields) > 2 else 0.01
    except ValueError:
        raise ConfigError(f"--sizes: {text!r} is not 1m, products, 10m or NODES[:DEGREE[:TRAIN_FRAC]]") from None
    if nodes < 2 or degree <= 0 or not 0 < frac < 1:
        raise ConfigError(f"--sizes: {text!r}: need NODES >= 2, DEGREE > 0 and 0 < TRAIN_FRAC < 1")
    return key, nodes, degree, frac


def _gnnflow(args: list[str], log: Path, timeout: float) -> dict[str, Any]:
    """Run ``gnnflow ARGS`` in a fresh process; its wall time, exit code and own peak RSS (the
    kernel's ``ru_maxrss`` of that process, which :func:`os.wait4` reports for it alone)."""
    cmd = [sys.executable, "-m", "gnnflow.cli", *args]
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, _, usage = os.wait4(proc.pid, 0)
                rc = 124
                break
            time.sleep(0.05)
        proc.returncode = rc  # reaped here: Popen must not wait for it again
    wall = time.perf_counter() - t0
    peak = usage.ru_maxrss / 1024.0  # KiB on Linux
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    error = next((ln for ln in reversed(lines) if "error:" in ln), lines[-1] if lines and rc else "")
    return {"rc": rc, "wall_s": wall, "peak_rss_mib": peak, "error": error.strip() if rc else ""}


def _train_args(strategy: str, args: argparse.Namespace) -> list[str]:
    if strategy in ("fullbatch", "dgcl"):
        return ["--model", "gcn", "--hidden", str(args.hidden), "--layers", "2"]
    fanouts = [f for f in str(args.fanouts).split(",") if f]
    return ["--model", "sage", "--hidden", str(args.hidden), "--layers", str(len(fanouts)), "--fanouts",
            ",".join(fanouts), "--batch-size", str(args.batch_per_rank * args.workers)]


def _records(run: Path) -> list[dict[str, Any]]:
    f = run / "records.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []


def _stage(size: str, nodes: int, edges: int, stage: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"size": size, "nodes": nodes, "edges": edges, "stage": stage, **result}


def run_size(label: str, nodes: int, degree: float, frac: float, args: argparse.Namespace,
             strategies: list[str], given: dict[str, tuple[str, str | None]]) -> list[dict[str, Any]]:
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.base import strategy_class

    root = Path(args.workdir) / label.replace(":", "-")  # no ':' in paths: --graph-dir splits on it
    root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    graph, book = root / "graph", root / f"metis{args.workers}"
    if label in given:
        graph = Path(given[label][0])
        book = Path(given[label][1]) if given[label][1] else book
    if not (graph / "meta.json").exists():
        res = _gnnflow(["prepare", "synthetic", "--nodes", str(nodes), "--avg-degree", str(degree),
                        "--feature-dim", str(args.feature_dim), "--classes", str(args.classes),
                        "--train-frac", str(frac), "--val-frac", str(min(0.2, 2 * frac)), "--out", str(graph)],
                       root / "prepare.log", args.timeout)
        rows.append(_stage(label, nodes, int(nodes * degree), "prepare", res))
        if res["rc"]:
            return rows
    meta = read_store_meta(graph)
    nodes, edges = meta.num_nodes, meta.num_edges
    for r in rows:
        r["nodes"], r["edges"] = nodes, edges
    if not (book / "meta.json").exists():
        res = _gnnflow(["partition", str(graph), "--method", "metis", "--parts", str(args.workers),
                        "--out", str(book)], root / "partition.log", args.timeout)
        rows.append(_stage(label, nodes, edges, "partition", res))
        if res["rc"]:
            return rows
    for strategy in strategies:
        out = root / f"run-{strategy}"
        if out.exists():
            import shutil

            shutil.rmtree(out)
        cmd = ["train", "--strategy", strategy, "--graph", str(graph), "--partition", str(book),
               "--workers", str(args.workers), *_train_args(strategy, args), "--epochs", "1", "--out", str(out)]
        res = _gnnflow(cmd + (["--force"] if args.force else []), root / f"train-{strategy}.log", args.timeout)
        recs = _records(out)
        row = _stage(label, nodes, edges, strategy, res)
        row["launcher_peak_rss_mib"] = row.pop("peak_rss_mib")
        if recs:
            row["epoch_s"] = max(float(r["time_epoch"]) for r in recs)
            row.update(epoch_split(recs))
            row["peak_rss_mib"] = max(float(r["mem_peak_rss_mib"]) for r in recs)
            row["rank_peak_rss_mib"] = [float(r["mem_peak_rss_mib"]) for r in sorted(recs, key=lambda r: r["rank"])]
            helpers = {k: max(float(r[k]) for r in recs if k in r) for r0 in recs for k in r0
                       if k.startswith("mem_") and k != "mem_peak_rss_mib"}
            row["helper_peak_rss_mib"] = helpers
            row["counts"] = {k: float(sum(float(r.get(k, 0) or 0) for r in recs)) for k in COUNTED}
            row["test_acc"] = float(recs[-1]["test_acc"])
        else:
            row["epoch_s"] = float("nan")
            row["peak_rss_mib"] = float("nan")
        try:
            run_json = out / "run.json"
            cfg_dict = json.loads(run_json.read_text())["config"] if run_json.exists() else None
            if cfg_dict is None:  # refused or failed before writing: the same config, rebuilt
                cfg_dict = _config_dict(strategy, graph, book, args)
            cfg = TrainConfig.from_dict(cfg_dict)
            est = strategy_class(cfg.strategy).estimate_memory(cfg)
            row["predicted_peak_rss_mib"] = est.max_rank / MIB
            row["predicted_host_mib"] = est.total / MIB
        except (OSError, ValueError, KeyError) as exc:  # pragma: no cover - estimate needs the metas
            row["predicted_error"] = str(exc)
        rows.append(row)
    return rows


def epoch_split(recs: list[dict[str, Any]]) -> dict[str, float]:
    """Training and evaluation of the epoch apart, each the slowest rank's: ``eval_s`` the
    evaluation timer (``time_eval``; every strategy and the DistDGL peer record it), ``train_s``
    the epoch without it."""
    evals = [float(r.get("time_eval", 0.0) or 0.0) for r in recs]
    return {"train_s": max(float(r["time_epoch"]) - e for r, e in zip(recs, evals, strict=True)),
            "eval_s": max(evals)}


#: what each part of the epoch must come to against the DistDGL peer (issue 36's acceptance)
PEER_GOALS = {"epoch_s": "<= 0.6", "train_s": "<= 0.5", "eval_s": "<= 0.5"}
PARTS = {"epoch_s": "whole epoch with evaluation", "train_s": "training (the epoch without evaluation)",
         "eval_s": "evaluation"}


def peer_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per size and strategy, the epoch, its training and its evaluation against the DistDGL
    peer's on the same graph and book (goals for ``data``, the strategy the peer implements)."""
    out = []
    peers = {r["size"]: r for r in rows if r["stage"] == "distdgl" and not r["rc"] and "eval_s" in r}
    for r in rows:
        peer = peers.get(r["size"])
        if peer is None or r["stage"] not in STRATEGIES or r["stage"] == "distdgl" or r["rc"] or "eval_s" not in r:
            continue
        for key, what in PARTS.items():
            if not (r[key] > 0 and peer[key] > 0):
                continue
            out.append(ratio(f"{r['stage']} / DistDGL: {what}, {r['size']}",
                             operand(r[key], "s", f"gnnflow {r['stage']}: {what}, slowest rank"),
                             operand(peer[key], "s", f"DistDGL peer: {what}, slowest rank"),
                             goal=PEER_GOALS[key] if r["stage"] == "data" else None))
    return out


def _config_dict(strategy: str, graph: Path, book: Path, args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.config import add_train_arguments, config_from_args
    from gnnflow.strategies.base import option_flags

    p = argparse.ArgumentParser()
    add_train_arguments(p, option_flags())
    ns = p.parse_args(["--strategy", strategy, "--graph", str(graph), "--partition", str(book), "--workers",
                       str(args.workers), *_train_args(strategy, args), "--epochs", "1"])
    return config_from_args(ns).to_dict()


def exponent(a: float, b: float, n1: int, n2: int) -> float:
    """``log(b / a) / log(n2 / n1)`` (NaN where undefined)."""
    if not (a > 0 and b > 0 and n1 > 0 and n2 > 0 and n1 != n2) or math.isnan(a) or math.isnan(b):
        return float("nan")
    return math.log(b / a) / math.log(n2 / n1)


def growth(rows: list[dict[str, Any]], sizes: list[str]) -> list[dict[str, Any]]:
    """Exponents of time and peak memory between consecutive sizes, per stage."""
    by = {(r["size"], r["stage"]): r for r in rows}
    out = []
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    for s1, s2 in zip(sizes, sizes[1:], strict=False):
        for stage in stages:
            a, b = by.get((s1, stage)), by.get((s2, stage))
            if a is None or b is None:
                continue
            t = "epoch_s" if "epoch_s" in a else "wall_s"
            out.append({"stage": stage, "from": s1, "to": s2,
                        "time_exponent": exponent(a.get(t, float("nan")), b.get(t, float("nan")), a["nodes"], b["nodes"]),
                        "memory_exponent": exponent(a.get("peak_rss_mib", float("nan")),
                                                    b.get("peak_rss_mib", float("nan")), a["nodes"], b["nodes"])})
    return out


def _fmt(x: Any, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def markdown(rows: list[dict[str, Any]], exps: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"Scale: {args.workers} ranks/parts, SAGE {len(str(args.fanouts).split(','))}x{args.hidden} "
             f"fanouts {args.fanouts}, {args.batch_per_rank} targets per rank (GCN 2x{args.hidden} for "
             "fullbatch, dgcl); one epoch with evaluation.", "",
             "| size | vertices | edges | stage | rc | time s | training s | evaluation s | "
             "peak RSS MiB (max rank) | predicted MiB | predicted/measured | sampled edges |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = r.get("epoch_s", r.get("wall_s"))
        pred = r.get("predicted_peak_rss_mib")
        meas = r.get("peak_rss_mib", float("nan"))
        rat = pred / meas if pred and meas and not math.isnan(meas) else float("nan")
        lines.append(f"| {r['size']} | {r['nodes']} | {r['edges']} | {r['stage']} | {r['rc']} | {_fmt(t, 1)} | "
                     f"{_fmt(r.get('train_s'), 1)} | {_fmt(r.get('eval_s'), 1)} | "
                     f"{_fmt(meas)} | {_fmt(pred)} | {_fmt(rat, 2)} | "
                     f"{_fmt(r.get('counts', {}).get('sampled_edges'))} |")
    against = peer_ratios(rows)
    if against:
        lines += ["", "Against the DistDGL peer (same graph, book and settings; slowest rank):", "",
                  "| size | strategy | epoch | training | evaluation |", "|---|---|---:|---:|---:|"]
        peers = {r["size"]: r for r in rows if r["stage"] == "distdgl" and "eval_s" in r}
        for r in rows:
            peer = peers.get(r["size"])
            if peer is None or r["stage"] == "distdgl" or "eval_s" not in r:
                continue
            cells = [f"{r[k]:.1f} / {peer[k]:.1f} s = {r[k] / peer[k]:.3f}" if peer[k] > 0 else "-" for k in PARTS]
            lines.append(f"| {r['size']} | {r['stage']} | " + " | ".join(cells) + " |")
    lines += ["", "Growth exponents log(t2/t1)/log(n2/n1) (time; training: the epoch) and of peak RSS:", "",
              "| stage | from | to | time exponent | memory exponent |", "|---|---|---|---:|---:|"]
    for e in exps:
        lines.append(f"| {e['stage']} | {e['from']} | {e['to']} | {_fmt(e['time_exponent'], 2)} | "
                     f"{_fmt(e['memory_exponent'], 2)} |")
    failed = [r for r in rows if r["rc"]]
    if failed:
        lines += ["", "Failed stages:", ""] + [f"- {r['size']} {r['stage']}: rc {r['rc']}: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict[str, Any]:
    strategies = [s for s in str(args.strategies).split(",") if s]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        raise ConfigError(f"--strategies: unknown {unknown}; choose from {', '.join(STRATEGIES)}")
    given: dict[str, tuple[str, str | None]] = {}
    for g in args.graph_dir:
        label, sep, paths = g.partition("=")
        if not sep or not paths:
            raise ConfigError(f"--graph-dir {g!r}: expected LABEL=STORE[:BOOK]")
        store, _, book = paths.partition(":")
        if not (Path(store) / "meta.json").exists():
            raise ConfigError(f"--graph-dir {g!r}: {store} is not a graph store (no meta.json)")
        given[label.strip().lower()] = (store, book or None)
    labels = [s.strip().lower() for s in str(args.sizes).split(",") if s.strip()]
    if not labels:
        raise ConfigError("--sizes: give at least one size")
    sizes = [(label, 0, 0.0, 0.0) if label in given and label not in SIZES else parse_size(label) for label in labels]
    rows: list[dict[str, Any]] = []
    for i, (label, nodes, degree, frac) in enumerate(sizes):
        print(f"bench scale: size {label} ({i + 1}/{len(sizes)})", file=sys.stderr, flush=True)
        rows.extend(run_size(label, nodes, degree, frac, args, strategies, given))
    exps = growth(rows, [s[0] for s in sizes])
    table = markdown(rows, exps, args)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table)
    ratios = []
    for r in rows:
        if r.get("predicted_peak_rss_mib") and r.get("peak_rss_mib", float("nan")) == r.get("peak_rss_mib"):
            ratios.append(ratio(f"predicted/measured peak RSS {r['stage']} {r['size']}",
                                operand(r["predicted_peak_rss_mib"], "MiB", "memory preflight estimate, max rank",
                                        "modelled"),
                                operand(r["peak_rss_mib"], "MiB", f"gnnflow train {r['stage']}: VmHWM, max rank"),
                                goal="0.75..1.25"))
    if not ratios:  # nothing trained: the prepare/partition figures still make a result
        ratios.append(ratio("bench scale: no training run", operand(0.0, "runs", "gnnflow train", "counted"),
                            operand(1.0, "runs", "requested", "counted")))
    memory = list(ratios)
    against = peer_ratios(rows)
    ratios += against
    result = headline({"rows": rows, "exponents": exps, "table": table,
                       "counts": {"sizes": len(sizes), "rows": len(rows), "runs": sum(1 for r in rows if r["stage"]
                                                                                     in STRATEGIES),
                                  "failed": sum(1 for r in rows if r["rc"])}}, ratios)
    worst = max(memory, key=lambda q: abs(math.log(q["value"])) if q["value"] > 0 else float("inf"))
    peer = "; ".join(f"{q['name']} {q['value']:.3f}" for q in against if q["name"].startswith("data /"))
    result["summary"] = (f"bench scale: {len(rows)} stages over {len(sizes)} size(s), "
                         f"{result['counts']['failed']} failed; predicted/measured peak "
                         f"{min(q['value'] for q in memory):.2f}..{max(q['value'] for q in memory):.2f} "
                         f"(furthest: {worst['name']})" + (f"; {peer}" if peer else "")
                         + (f" -> {args.out}" if args.out else ""))
    return result
