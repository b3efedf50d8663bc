"""The two tables a workflow's report opens with: the results (one row per run) and what each rule
cost (one row per job, from Snakemake's ``benchmark:`` records).

* :func:`results_table` — strategy, run, epoch time, best-validation test accuracy, peak memory per
  rank and bytes moved per epoch, from the per-run summary (:func:`gnnflow.results.table.summarize`);
* :func:`rule_costs` — every ``<benchmarks>/<rule>/<target>.tsv`` (or ``<benchmarks>/<rule>.tsv``)
  Snakemake wrote: wall time, peak RSS and CPU time of the job, and its mean load;
* :func:`save_frame` — either as CSV, or as a page holding the table (``.html``: what the
  Snakemake report shows inline; a CSV there is only a download).
"""

from __future__ import annotations

import csv
import html
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


def rule_costs(bench_dir: str | Path, datasets: dict[str, str] | None = None) -> pd.DataFrame:
    """Every job's Snakemake benchmark record under ``bench_dir``: rule, dataset, target (the job's
    wildcards), wall time (s), peak RSS (MiB), CPU time (s) and mean load, by rule and dataset.

    ``datasets`` names the dataset of a target (a run id, say); a target ``D`` or ``D.<more>``
    whose ``D`` is one of the datasets named there is that dataset's; other jobs (the tables and
    figures over all runs) have none."""
    bench_dir = Path(bench_dir)
    datasets = datasets or {}
    known = set(datasets.values())
    rows = []
    for f in sorted(bench_dir.rglob("*.tsv")):
        rel = f.relative_to(bench_dir)
        rule, target = (rel.parts[0], str(rel.with_suffix("").relative_to(rel.parts[0]))) if len(rel.parts) > 1 \
            else (rel.stem, "")
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh, delimiter="\t"):
                rows.append({"rule": rule, "dataset": _dataset_of(target, datasets, known), "target": target, "wall time (s)": _num(r.get("s")),
                             "peak RSS (MiB)": _num(r.get("max_rss")), "CPU time (s)": _num(r.get("cpu_time")),
                             "mean load (%)": _num(r.get("mean_load"))})
    columns = ["rule", "dataset", "target", "wall time (s)", "peak RSS (MiB)", "CPU time (s)", "mean load (%)"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["rule", "dataset", "target"], kind="stable").reset_index(drop=True)


def _dataset_of(target: str, datasets: dict[str, str], known: set[str]) -> str:
    if target in datasets:
        return datasets[target]
    head = target.split(".", 1)[0]
    return head if head in known else ""


def _num(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "", "-", "NA") else float("nan")
    except ValueError:
        return float("nan")


#: the page a table is shown in (the report puts it in a frame)
_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font-family: sans-serif; margin: 1em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border-bottom: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }}
th {{ background: #eee; }}
td:first-child, th:first-child, td.text {{ text-align: left; }}
</style></head><body><h2>{title}</h2><p>{caption}</p>
{table}
</body></html>
"""


def save_frame(frame: pd.DataFrame, path: str | Path, title: str = "", caption: str = "") -> None:
    """Write ``frame`` to ``path``: a page with the table (``.html``, numbers to 4 significant
    digits, its ``<table>`` with id ``table``) or CSV (anything else, full precision)."""
    from gnnflow.io import atomic_file

    with atomic_file(path) as tmp:
        if str(path).endswith(".html"):
            table = frame.to_html(index=False, table_id="table", na_rep="", float_format=lambda v: f"{v:.4g}",
                                  border=0)
            Path(tmp).write_text(_PAGE.format(title=html.escape(title), caption=html.escape(caption), table=table))
        else:
            frame.to_csv(tmp, index=False)
