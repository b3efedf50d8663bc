"""``gnnflow train``: train a model with one strategy and write a run directory.

Settings come from ``--config FILE.yaml`` (keys of :class:`~gnnflow.config.TrainConfig`,
strategy options under ``options``), overridden by flags: one per setting, derived from
:class:`~gnnflow.config.TrainConfig`'s fields; ``--opt key=value`` (repeatable) sets
``options[key]`` with the value parsed as YAML (``true``, ``3``, ``0.5``, ``a,b``), and the
strategies' option fields that name a flag (``--no-pipeline``, ``--planner``) add it.  See :mod:`gnnflow.strategies.driver` for what the
run directory holds.
"""

from __future__ import annotations

import argparse

from gnnflow.config import add_train_arguments, config_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """A flag per training setting (:func:`gnnflow.config.add_train_arguments`), the strategies'
    option shortcuts, and this host's place in a run across hosts."""
    from gnnflow.runtime.hosts import add_node_arguments
    from gnnflow.strategies.base import option_flags

    add_train_arguments(parser, option_flags())
    add_node_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from gnnflow.runtime.forkserver import prestart_fork_server
    from gnnflow.runtime.hosts import apply_node_arguments
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.driver import run_training

    cfg = config_from_args(args)
    # a strategy that starts ranks (`single` trains in this process), run as the command: a call
    # from another program (a test, a notebook) is not forked into the server
    cls = strategy_class(cfg.strategy)
    if cls.distributed and getattr(args, "command_line", False):
        prestart_fork_server(preload=cls.rank_imports)  # before this process has a thread (gnnflow.runtime.forkserver)
    apply_node_arguments(args)  # the memory preflight counts this host's share of the ranks
    records = run_training(cfg)
    last = [r for r in records if r.rank == 0]
    from gnnflow.runtime.hosts import is_first_rank

    if not is_first_rank():  # another host's launcher: host 0's writes the run directory
        cfg.out = None
    if last:
        r = last[-1]
        print(f"{cfg.strategy}/{cfg.model}: epoch {r.epoch} loss {r.loss:.4f} train {r.train_acc:.4f} "
              f"val {r.val_acc:.4f} test {r.test_acc:.4f}" + (f" -> {cfg.out}" if cfg.out else ""))
    return 0
