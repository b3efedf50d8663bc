"""``gnnflow verify --strategy S --workers P [--model M (a name or a layer class)] [--fanouts F] [--split-group-size K] [--device D] [--json]``.

Runs the equivalence check of a distributed strategy that claims single-process
mathematics (data-parallel with a fixed sample, split-parallel, full-batch 1D,
graph_allgather): its check in :mod:`gnnflow.strategies.verify` compares loss, outputs and gradients with the single-process computation on
the same input and returns ``{"passed", "max_abs_diff", "max_rel_diff", ...}``.
Tests call the same function.  ``--device cuda`` runs the ranks on GPUs (ranks beyond the GPU
count share them) against the CPU reference, at ten times the CPU tolerance.  Exit status 0 when
passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gnnflow.config import (
    LAYER_CLASS_FORMS,
    MODELS,
    RELATIONAL_MODELS,
    STRATEGIES,
    is_layer_class,
    parse_fanouts,
)
from gnnflow.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strategy", required=True, help=f"one of {', '.join(STRATEGIES)}")
    parser.add_argument("--workers", type=int, default=4, help="number of ranks (default 4)")
    parser.add_argument("--model", default=None,
                        help=f"model to check: {', '.join(MODELS)} or a layer class ({LAYER_CLASS_FORMS}; data and "
                             "split) (default: the strategy's own, e.g. gcn for fullbatch/dgcl, sage otherwise)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fanouts", default=None,
                        help="data/split: comma-separated fanouts, input layer first (default 10,10 for data, "
                             "4,3 for split; -1 = full neighbourhood); data with --model rgcn/rgat: per-relation "
                             "counts too, layers separated by ';', e.g. 'cites:5,writes:3,*:2;cites:3,*:2'")
    parser.add_argument("--planner", default=None,
                        help="dgcl: comma-separated planners to check (default all: spst,p2p,swap,replication)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where the ranks compute (the single-process reference runs on the CPU)")
    parser.add_argument("--split-group-size", type=int, default=None,
                        help="split: ranks per split group, data-parallel across groups (GSplit §6.4)")
    from gnnflow.runtime.hosts import add_node_arguments

    add_node_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the whole result as one JSON object")


def _fmt(d: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.3g}" for k, v in d.items())


def main(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    from gnnflow.runtime.devices import available_device
    from gnnflow.runtime.forkserver import prestart_fork_server
    from gnnflow.runtime.hosts import apply_node_arguments
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.verify import check_of

    if args.strategy not in STRATEGIES:
        raise ConfigError(f"--strategy: unknown strategy {args.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    # before this process has a thread (gnnflow.runtime.forkserver); it trains the reference too.
    # Only as the command: a call from another program (a test) is not forked into the server
    if getattr(args, "command_line", False):
        prestart_fork_server(trains_here=True, preload=strategy_class(args.strategy).rank_imports)
    fn = check_of(args.strategy)
    available_device(args.device)
    apply_node_arguments(args)
    if args.model is None:
        import inspect

        args.model = inspect.signature(fn).parameters["model"].default
    elif args.model not in MODELS and not is_layer_class(args.model):
        raise ConfigError(f"--model: unknown {args.model!r}; choose one of {', '.join(MODELS)} or a layer class "
                          f"({LAYER_CLASS_FORMS})")
    kw: dict[str, Any] = {}
    if args.fanouts is not None:
        kw["fanouts"] = parse_fanouts(args.fanouts)
        if any(isinstance(f, dict) for f in kw["fanouts"]) and (args.strategy != "data"
                                                                 or args.model not in RELATIONAL_MODELS):
            raise ConfigError(f"--fanouts: per-relation fanouts are verified for --strategy data with --model "
                              f"{' or '.join(RELATIONAL_MODELS)} (a typed graph); give one count per layer")
    if args.split_group_size is not None:
        kw["split_group_size"] = args.split_group_size
    if args.planner is not None:
        kw["planner"] = [p.strip() for p in args.planner.split(",") if p.strip()]
    for key in kw:
        if key == "planner" and args.strategy == "dgcl":
            continue
        if args.strategy not in ("data", "split") or (key == "split_group_size" and args.strategy != "split"):
            raise ConfigError(f"--{key.replace('_', '-')}: not an option of verify --strategy {args.strategy}")
    result = fn(args.workers, model=args.model, seed=args.seed, device=args.device, **kw)
    if args.json:
        print(json.dumps(result, sort_keys=True, default=float))
    else:
        status = "PASSED" if result["passed"] else "FAILED"
        extra = "".join(f" {k}={result[k]}" for k in ("fanouts", "split_group_size") if k in result)
        print(f"verify {args.strategy} workers={args.workers} model={args.model} device={args.device}{extra}: "
              f"{status}; "
              f"max abs diff: {_fmt(result['max_abs_diff'])}; max rel diff: {_fmt(result['max_rel_diff'])}")
    return 0 if result["passed"] else 1
