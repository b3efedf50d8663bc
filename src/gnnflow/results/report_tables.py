"""The two tables a workflow's report opens with: the results (one row per run) and what each rule
cost (one row per job, from Snakemake's ``benchmark:`` records).

* :func:`results_table` — strategy, run, epoch time, best-validation test accuracy, peak memory per
  rank and bytes moved per epoch, from the per-run summary (:func:`gnnflow.results.table.summarize`);
* :func:`rule_costs` — every ``<benchmarks>/<rule>/<target>.tsv`` (or ``<benchmarks>/<rule>.tsv``)
  Snakemake wrote: wall time, peak RSS and CPU time of the job, and its mean load.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

#: the results table's columns: (summary column, heading)
RESULT_COLUMNS = (
    ("strategy", "strategy"),
    ("run_id", "run"),
    ("dataset", "dataset"),
    ("workers", "ranks"),
    ("epoch_time_s", "epoch time (s)"),
    ("best_test_acc", "test accuracy at the best-validation epoch"),
    ("peak_rss_mib", "peak memory per rank (MiB)"),
    ("bytes_sent_per_epoch", "bytes moved per epoch"),
)


def results_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per run, the columns of :data:`RESULT_COLUMNS` (missing ones empty), by strategy."""
    out = pd.DataFrame({head: summary[col] if col in summary else float("nan") for col, head in RESULT_COLUMNS})
    return out.sort_values(["strategy", "run"], kind="stable").reset_index(drop=True)


def rule_costs(bench_dir: str | Path) -> pd.DataFrame:
    """Every job's Snakemake benchmark record under ``bench_dir``: rule, target (the job's
    wildcards), wall time (s), peak RSS (MiB), CPU time (s) and mean load, by rule and target."""
    bench_dir = Path(bench_dir)
    rows = []
    for f in sorted(bench_dir.rglob("*.tsv")):
        rel = f.relative_to(bench_dir)
        rule, target = (rel.parts[0], str(rel.with_suffix("").relative_to(rel.parts[0]))) if len(rel.parts) > 1 \
            else (rel.stem, "")
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh, delimiter="\t"):
                rows.append({"rule": rule, "target": target, "wall time (s)": _num(r.get("s")),
                             "peak RSS (MiB)": _num(r.get("max_rss")), "CPU time (s)": _num(r.get("cpu_time")),
                             "mean load (%)": _num(r.get("mean_load"))})
    columns = ["rule", "target", "wall time (s)", "peak RSS (MiB)", "CPU time (s)", "mean load (%)"]
    return pd.DataFrame(rows, columns=columns)


def _num(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "", "-", "NA") else float("nan")
    except ValueError:
        return float("nan")
