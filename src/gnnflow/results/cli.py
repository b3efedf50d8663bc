"""``gnnflow results aggregate|summarize``."""

from __future__ import annotations

import argparse

from gnnflow.results.table import load_runs, read_table, save_table, summarize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    agg = sub.add_parser("aggregate", help="collect run directories into one parquet + CSV table")
    agg.add_argument("runs", nargs="+", help="run directories (each with records.jsonl)")
    agg.add_argument("--out", required=True, help="table path; .parquet and .csv are written")
    summ = sub.add_parser("summarize", help="print the table per run/strategy")
    summ.add_argument("table", help="results table (.parquet or .csv)")
    summ.add_argument("--out", help="also write the summary as CSV here")
    summ.add_argument("--json", action="store_true", help="print JSON records instead of text")


def main(args: argparse.Namespace) -> int:
    if args.action == "aggregate":
        table = load_runs(args.runs)
        for path in save_table(table, args.out):
            print(f"wrote {path} ({len(table)} rows)")
        return 0
    summary = summarize(read_table(args.table))
    if args.out:
        from gnnflow.io import atomic_file

        with atomic_file(args.out) as tmp:
            summary.to_csv(tmp, index=False)
    if args.json:
        print(summary.to_json(orient="records"))
    else:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", 30):
            print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0
