"""The ``gnnflow`` command line.

Each subcommand lives in its own module, which defines ``add_arguments(parser)``
and ``main(args) -> int | None``.  Modules are imported only when their
subcommand runs, so ``gnnflow --help`` stays fast and one broken area does not
take the others down.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from gnnflow.errors import GnnflowError, Terminated

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("gnnflow.cli.prepare", "download/convert/generate a dataset into a graph store"),
    "info": ("gnnflow.cli.info", "print a graph store's meta and statistics as JSON"),
    "check": ("gnnflow.cli.check", "full validation scan of a graph store or partition book"),
    "homogenize": ("gnnflow.cli.homogenize", "turn a heterogeneous graph store into one homogeneous id space"),
    "presample": ("gnnflow.cli.presample", "run the training sampler to count vertex/edge appearances (GSplit §4)"),
    "partition": ("gnnflow.cli.partition", "partition a graph store into a partition book"),
    "stage": ("gnnflow.cli.stage", "copy the shards of some parts and small metadata to a host-local directory"),
    "partition-report": ("gnnflow.cli.partition_report", "quality metrics of a partition book"),
    "train": ("gnnflow.cli.train", "train with a strategy (single, data, split, p3, fullbatch, hec, dgcl, distdgl)"),
    "predict": ("gnnflow.cli.predict", "every vertex's predictions or embeddings of a trained run, as Parquet"),
    "verify": ("gnnflow.cli.verify", "check a distributed strategy against single-process training"),
    "advise": ("gnnflow.cli.advise", "which strategy for this graph and cluster: predicted epoch time and memory "
               "per strategy, ranked (--measure K: measured beside)"),
    "plan": ("gnnflow.cli.plan", "model the halo-exchange cost of each communication planner (DGCL)"),
    "topology": ("gnnflow.cli.topology", "topology presets and probing of local link bandwidth"),
    "bench": ("gnnflow.cli.bench", "benchmarks that print ratios against a peer measured side by side"),
    "results": ("gnnflow.cli.results", "aggregate and summarize run records; paper scorecards"),
    "plot": ("gnnflow.cli.plot", "paper-style figures from a results table"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gnnflow",
        description="End-to-end pipelines for distributed GNN training strategies.",
    )
    parser.add_argument("--version", action="version", version=f"gnnflow {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _version() -> str:
    from gnnflow import __version__

    return __version__


def _exec_with_huge_pages() -> None:
    """Start this command again with glibc's huge-page tunable in the environment (glibc reads it
    at process start; see :func:`gnnflow.runtime.processes.huge_page_tunables`): a rank that
    torchrun or srun started, or a one-process run, trains in this very process."""
    import os

    from gnnflow.runtime.processes import TUNABLES_ENV, huge_page_tunables

    tunables = huge_page_tunables(os.environ)
    if tunables is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-P", "-m", "gnnflow.cli", *sys.argv[1:]],
                  dict(os.environ, **{TUNABLES_ENV: tunables}))


def main(argv: list[str] | None = None) -> int:
    command_line = argv is None  # the process's command line, not a call from Python (e.g. a test)
    if command_line:
        _exec_with_huge_pages()
    from gnnflow.io import configure_logging  # numpy: after the exec above, not twice

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Parse only the global part; the subcommand's module parses the rest.
    top, rest = parser.parse_known_args(argv)
    configure_logging(logging.DEBUG if top.verbose else logging.INFO)
    if top.command is None:
        parser.print_help()
        return 2
    module_name, help_text = COMMANDS[top.command]
    module = importlib.import_module(module_name)
    passthrough = getattr(module, "ACCEPTS_EXTRA", False)
    # a pass-through command leaves -h to the parser of what it dispatches to
    sub = argparse.ArgumentParser(prog=f"gnnflow {top.command}", description=help_text, add_help=not passthrough)
    module.add_arguments(sub)
    if passthrough:
        # e.g. `gnnflow bench NAME ...`: the module parses the rest with its own options
        args, extra = sub.parse_known_args(rest)
        args.extra = extra
    else:
        args = sub.parse_args(rest)
    # this process runs the command (not a call from another program): train and verify may fork
    # it into their ranks' fork server (gnnflow.runtime.forkserver)
    args.command_line = command_line
    try:
        code = module.main(args)
    except GnnflowError as exc:
        first, _, rest = str(exc).partition("\n")
        print(f"gnnflow {top.command}: error: {first}", file=sys.stderr)
        if rest:
            logging.getLogger("gnnflow").debug("details:\n%s", rest)
        return 1
    except BrokenPipeError:  # output piped into a reader that closed early (`| head`)
        sys.stderr.close()
        return 0
    except OSError as exc:  # an output that cannot be written: read-only, full, missing directory
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"gnnflow {top.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"gnnflow {top.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"gnnflow {top.command}: {exc}", file=sys.stderr)
        return 128 + exc.signum
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
