"""``gnnflow bench NAME [--json]``: benchmarks that print ratios against a peer.

Each benchmark module defines ``add_arguments(parser)`` and ``run(args) -> dict``.
The dict holds ``ratios`` (every ratio with its two operands, see
:mod:`gnnflow.bench.ratios`), ``ratio`` and ``ratio_name`` (the headline),
``summary`` (one line), and the raw figures.  This command adds the machine it
ran on and prints the summary, or the whole dict as JSON.  ``gnnflow bench
all`` runs the suite in ``config/bench.yaml`` and writes one table
(:mod:`gnnflow.bench.suite`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator

from gnnflow.bench.registry import BENCHES, machine

ACCEPTS_EXTRA = True  # the chosen benchmark parses the remaining options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", choices=sorted(BENCHES), help="which benchmark")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary line")
    parser.epilog = "benchmarks: " + "; ".join(f"{k}: {v[1]}" for k, v in BENCHES.items())


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 points at stderr meanwhile (this process's writes and those of every
    process it starts), so that stdout carries the benchmark's result alone (``--json``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(args: argparse.Namespace) -> int:
    if args.name is None:
        print("usage: gnnflow bench NAME [--json] [options]   (gnnflow bench NAME --help for its options)\n")
        for name, (_module, help_text) in BENCHES.items():
            print(f"  {name:14s} {help_text}")
        return 0 if {"-h", "--help"} & set(args.extra) else 2
    # Re-parse with the chosen benchmark's own options.
    module_name, help_text = BENCHES[args.name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"gnnflow bench {args.name}", description=help_text)
    parser.add_argument("--json", action="store_true")
    module.add_arguments(parser)
    bargs = parser.parse_args(args.extra)
    with stdout_to_stderr():  # what the runs print (DGL's C code prints to the fd) stays off the result
        result = module.run(bargs)
    result.setdefault("benchmark", args.name)
    result["machine"] = machine()
    if bargs.json or args.json:
        print(json.dumps(result, sort_keys=True, default=float))
    else:
        print(result.get("summary", json.dumps(result, default=float)))
    return 0
