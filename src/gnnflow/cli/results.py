"""``gnnflow results aggregate|summarize|scorecard``."""

from __future__ import annotations

import argparse
from pathlib import Path

from gnnflow.errors import GnnflowError
from gnnflow.results.table import (
    load_runs,
    read_table,
    save_table,
    summarize,
    summarize_seeds,
    summary_text,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    agg = sub.add_parser("aggregate", help="collect run directories into one parquet + CSV table")
    agg.add_argument("runs", nargs="+", help="run directories (each with records.jsonl)")
    agg.add_argument("--out", required=True, help="table path; .parquet and .csv are written")
    summ = sub.add_parser(
        "summarize", help="per run: final and best-validation test accuracy; mean ± std over seeds",
        description="One row per run (final test accuracy, and the test accuracy of the epoch with the best "
                    "validation accuracy, ties to the lower validation loss), then one row per setting with "
                    "the mean ± standard deviation over the seeds that ran it.")
    summ.add_argument("table", help="results table (.parquet or .csv)")
    summ.add_argument("--out", help="also write the per-run summary as CSV here")
    summ.add_argument("--seeds-out", help="also write the over-seeds summary as CSV here")
    summ.add_argument("--results-out", action="append", default=[], metavar="PATH",
                      help="also write the results table (one row per run: strategy, epoch time, best-validation "
                           "test accuracy, peak memory per rank, bytes moved) here: a page if PATH ends in .html, "
                           "else CSV (repeat for both)")
    summ.add_argument("--json", action="store_true",
                      help='print one JSON object {"runs": [...], "over_seeds": [...]} instead of text')
    costs = sub.add_parser("costs", help="what each workflow rule cost, from Snakemake's benchmark records",
                           description="One row per job: wall time, peak RSS, CPU time and mean load of every "
                                       "Snakemake benchmark record (RULE/TARGET.tsv) under a directory.")
    costs.add_argument("bench_dir", help="the workflow's benchmarks directory (results/benchmarks)")
    costs.add_argument("--out", required=True, action="append", metavar="PATH",
                       help="write the table here: a page if PATH ends in .html, else CSV (repeat for both)")
    costs.add_argument("--datasets", default="{}", metavar="JSON",
                       help="the dataset of each target, as a JSON object (run id or dataset name -> dataset)")
    card = sub.add_parser(
        "scorecard", help="verdicts on a paper's claims (config/paper/*.claims.yaml) from results tables",
        description="Judge every claim of a claims file on one or more results tables: the paper's quoted "
                    "value, ours, and a verdict (reproduced / same direction / not reproduced / not "
                    "measurable here, with the reason).")
    card.add_argument("tables", nargs="+", metavar="TABLE",
                      help="results table (.parquet or .csv); LABEL=TABLE names its column, e.g. "
                           "small=results/gsplit/table.parquet full=results/gsplit-full/table.parquet")
    card.add_argument("--claims", required=True, help="claims file (config/paper/<paper>.claims.yaml)")
    card.add_argument("--label", default="here", help="column label of an unlabelled TABLE (default: here)")
    card.add_argument("--bench-dir", help="benchmark results (NAME.json) for claims that read one "
                                          "(default: the bench/ directory beside each table)")
    card.add_argument("--out", help="write the scorecard as CSV here")
    card.add_argument("--html", help="write the scorecard page (HTML, figures embedded) here")
    card.add_argument("--title", default="", help="a line under the page's heading (e.g. the config)")
    card.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                      help="what to print (default: text)")


def _labelled_tables(specs: list[str], default_label: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        label, path = (label, path) if sep and not Path(spec).exists() else (default_label, spec)
        if label in out:
            raise GnnflowError(f"table label {label!r} is given twice; write LABEL=TABLE with distinct labels")
        out[label] = Path(path)
    return out


def scorecard_main(args: argparse.Namespace) -> int:
    from gnnflow.io import atomic_file
    from gnnflow.results.claims import load_claims
    from gnnflow.results.scorecard import (
        counts,
        scorecard,
        scorecard_frame,
        scorecard_text,
        to_markdown,
    )

    claims = load_claims(args.claims)
    paths = _labelled_tables(args.tables, args.label)
    tables = {label: read_table(path) for label, path in paths.items()}
    benches = {label: args.bench_dir or path.parent / "bench" for label, path in paths.items()}
    verdicts = scorecard(claims, tables, benches)
    frame = scorecard_frame(verdicts)
    if args.out:
        with atomic_file(args.out) as tmp:
            frame.to_csv(tmp, index=False)
    if args.html:
        from gnnflow.plots.page import render_page

        page = render_page(claims, verdicts, args.title)
        with atomic_file(args.html) as tmp:
            tmp.write_text(page, encoding="utf-8")
    if args.format == "json":
        print(frame.to_json(orient="records", force_ascii=False))
    elif args.format == "markdown":
        print(to_markdown(frame))
    else:
        print(f"{claims.paper}\n")
        print(scorecard_text(frame))
        for label, n in counts(verdicts).items():
            print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in n.items()))
    return 0


def main(args: argparse.Namespace) -> int:
    if args.action == "scorecard":
        return scorecard_main(args)
    if args.action == "costs":
        import json

        from gnnflow.results.report_tables import rule_costs, save_frame

        frame = rule_costs(args.bench_dir, json.loads(args.datasets))
        for path in args.out:
            save_frame(frame, path, "What each rule cost", "One row per job, from Snakemake's benchmark records.")
            print(f"wrote {path} ({len(frame)} jobs)")
        return 0
    if args.action == "aggregate":
        table = load_runs(args.runs)
        for path in save_table(table, args.out):
            print(f"wrote {path} ({len(table)} rows)")
        return 0
    import json

    from gnnflow.io import atomic_file

    summary = summarize(read_table(args.table))
    seeds = summarize_seeds(summary)
    from gnnflow.results.report_tables import results_table, save_frame

    for path, frame in ((args.out, summary), (args.seeds_out, seeds)):
        if path:
            with atomic_file(path) as tmp:
                frame.to_csv(tmp, index=False)
    for path in args.results_out:
        save_frame(results_table(summary), path, "Results",
                   "One row per run: the slowest rank's median epoch time, the test accuracy at the epoch with "
                   "the best validation accuracy, the largest rank's peak memory and the bytes sent per epoch.")
    if args.json:
        print(json.dumps({"runs": json.loads(summary.to_json(orient="records")),
                          "over_seeds": json.loads(seeds.to_json(orient="records"))}))
    else:
        print(summary_text(summary, seeds))
    return 0
