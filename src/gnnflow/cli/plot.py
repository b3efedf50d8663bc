"""``gnnflow plot``: one paper-style figure from the results table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gnnflow.errors import ConfigError
from gnnflow.io import atomic_file
from gnnflow.plots.figures import KINDS, make_figure
from gnnflow.results.table import read_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", required=True, help="results table (.parquet or .csv)")
    parser.add_argument("--spec", help="figure spec as JSON: {name, kind, sweeps?, options?}")
    parser.add_argument("--kind", choices=sorted(KINDS), help="figure kind (instead of --spec)")
    parser.add_argument("--bench-dir", help="directory of benchmark JSON results (kind benchmark)")
    parser.add_argument("--out", required=True, help="output image (.png, .pdf, .svg)")


def main(args: argparse.Namespace) -> int:
    if args.spec:
        try:
            spec = json.loads(args.spec)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--spec: not valid JSON ({exc})") from None
    elif args.kind:
        spec = {"name": Path(args.out).stem, "kind": args.kind}
    else:
        raise ConfigError("give --spec or --kind")
    fig = make_figure(read_table(args.table), spec, Path(args.bench_dir) if args.bench_dir else None)
    out = Path(args.out)
    with atomic_file(out) as tmp:
        fig.savefig(tmp, dpi=120, format=out.suffix.lstrip(".") or "png", bbox_inches="tight")
    print(f"wrote {out}")
    return 0
