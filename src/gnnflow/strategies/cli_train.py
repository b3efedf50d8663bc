"""``gnnflow train``: train a model with one strategy and write a run directory.

Settings come from ``--config FILE.yaml`` (keys of :class:`~gnnflow.config.TrainConfig`,
strategy knobs under ``options``), overridden by flags; ``--opt key=value``
(repeatable) sets ``options[key]`` with the value parsed as YAML (``true``,
``3``, ``0.5``, ``a,b``).  See :mod:`gnnflow.strategies.driver` for what the
run directory holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError

# flag -> TrainConfig field (all default to None so the YAML value stays unless given)
_FLAGS: dict[str, tuple[str, type, str]] = {
    "--strategy": ("strategy", str, "training strategy (single, data, split, p3, fullbatch, hec, dgcl, distdgl)"),
    "--graph": ("graph", str, "graph store directory"),
    "--partition": ("partition", str, "partition book directory (distributed strategies)"),
    "--workers": ("workers", int, "number of ranks"),
    "--model": ("model", str, "sage, gcn or gat"),
    "--hidden": ("hidden", int, "hidden features"),
    "--layers": ("num_layers", int, "number of layers"),
    "--batch-size": ("batch_size", int, "targets per GLOBAL mini-batch, all ranks together, for every strategy "
                     "(each data-parallel rank takes about batch/P of them; logged and in run.json)"),
    "--lr": ("lr", float, "Adam learning rate"),
    "--weight-decay": ("weight_decay", float, "Adam weight decay"),
    "--dropout": ("dropout", float, "dropout between layers"),
    "--heads": ("heads", int, "GAT attention heads of every hidden layer (concatenated)"),
    "--out-heads": ("out_heads", int, "GAT attention heads of the output layer (averaged; default 1)"),
    "--input-dropout": ("input_dropout", float, "dropout on the input features before the first layer"),
    "--feat-drop": ("feat_drop", float, "GAT: dropout on every layer's input features"),
    "--attn-drop": ("attn_drop", float, "GAT: dropout on the attention coefficients"),
    "--activation": ("activation", str, "hidden activation, relu or elu (default: the model's standard, "
                     "elu for gat, relu otherwise)"),
    "--aggregator": ("aggregator", str, "GraphSAGE aggregator, mean (default) or gcn"),
    "--gcn-degrees": ("gcn_degrees", str, "GCN normalisation in mini-batch training: 'graph' (whole-graph "
                      "degrees, default) or 'block' (the sampled block's own)"),
    "--epochs": ("epochs", int, "training epochs"),
    "--seed": ("seed", int, "random seed"),
    "--eval-every": ("eval_every", int, "evaluate every N epochs (and after the last)"),
    "--device": ("device", str, "cpu or cuda"),
    "--out": ("out", str, "run directory to write"),
    "--run-id": ("run_id", str, "run id in the records (default: the run directory's name)"),
}


# Shortcut flags for strategy options named in the papers' ablations: flag ->
# (option key, value when the flag is given, or a type for flags taking a value).
_OPTION_FLAGS: dict[str, tuple[str, Any, str]] = {
    "--no-pipeline": ("pipeline", False, "data/split/hec: run the mini-batch stages inline (DistDGLv2 §4.2.1 off)"),
    "--samplers": ("samplers", str, "data: run the sample/load stages in the pipeline's 'thread' (DistDGLv2 §4.2.1, "
                   "default) or in a sampler 'process' per rank (faster on CPU hosts)"),
    "--replicate-structure": ("replicate_structure", True, "data: keep the whole CSR on every rank (no remote sampling)"),
    "--split-group-size": ("split_group_size", int, "split: k ranks per split group, data-parallel across groups (GSplit §6.4)"),
    "--no-overlap": ("overlap", False, "fullbatch: broadcast and SpMM in sequence (MG-GCN §4.3 off)"),
    "--planner": ("planner", str, "dgcl: p2p, spst, swap or replication"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="YAML file with TrainConfig keys")
    for flag, (dest, typ, help_text) in _FLAGS.items():
        parser.add_argument(flag, dest=dest, type=typ, default=None, help=help_text)
    parser.add_argument("--fanouts", default=None, help="comma-separated fanout per layer, input layer first (-1 = all)")
    parser.add_argument("--resume", action="store_true", default=None, help="continue from RUNDIR/ckpt/last.pt")
    loops = parser.add_mutually_exclusive_group()
    loops.add_argument("--self-loops", dest="self_loops", action="store_const", const=True, default=None,
                       help="train on A + I in every strategy (default for gcn and gat)")
    loops.add_argument("--no-self-loops", dest="self_loops", action="store_const", const=False,
                       help="train on the graph as stored (default for sage)")
    parser.add_argument("--force", action="store_true",
                        help="run even where the memory preflight estimates that the run's processes will not "
                             "fit in the memory available (MemAvailable, the cgroup limit, or "
                             "GNNFLOW_MEMORY_AVAILABLE_MIB)")
    from gnnflow.distributed.launch import add_node_arguments

    add_node_arguments(parser)
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                        help="strategy option (repeatable), value parsed as YAML")
    for flag, (key, value, help_text) in _OPTION_FLAGS.items():
        dest = "optflag_" + key
        if isinstance(value, type):
            parser.add_argument(flag, dest=dest, type=value, default=None, metavar=key.upper(),
                                help=f"{help_text} (= --opt {key}=...)")
        else:
            parser.add_argument(flag, dest=dest, action="store_const", const=value, default=None,
                                help=f"{help_text} (= --opt {key}={str(value).lower()})")


def parse_option(text: str) -> tuple[str, Any]:
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--opt {text!r}: expected KEY=VALUE")
    try:
        return key.strip(), yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        return key.strip(), value


def parse_fanouts(text: str | list[int]) -> list[int]:
    if isinstance(text, list):
        return [int(x) for x in text]
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"fanouts: expected comma-separated integers like 15,10,5, got {text!r}") from None


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {path}: no such file")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of training settings")
    return data


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """YAML settings overridden by flags, as a validated :class:`TrainConfig`."""
    data: dict[str, Any] = load_yaml(args.config) if args.config else {}
    for dest, *_ in _FLAGS.values():
        value = getattr(args, dest)
        if value is not None:
            data[dest] = value
    if args.fanouts is not None:
        data["fanouts"] = args.fanouts
    if "fanouts" in data:
        data["fanouts"] = parse_fanouts(data["fanouts"])
    if args.resume:
        data["resume"] = True
    if args.self_loops is not None:
        data["self_loops"] = args.self_loops
    options = dict(data.get("options") or {})
    options.update(parse_option(o) for o in args.opt)
    for key, *_ in _OPTION_FLAGS.values():
        value = getattr(args, "optflag_" + key, None)
        if value is not None:
            options[key] = value
    data["options"] = options
    if not data.get("graph"):
        raise ConfigError("--graph is required (or `graph:` in --config)")
    if "num_layers" in data and "fanouts" not in data:
        data["fanouts"] = [10] * int(data["num_layers"])
    if "fanouts" in data and "num_layers" not in data:
        data["num_layers"] = len(data["fanouts"])
    try:
        return TrainConfig.from_dict(data)
    except TypeError as exc:
        raise ConfigError(f"training settings: {exc}") from None


def main(args: argparse.Namespace) -> int:
    from gnnflow.distributed.launch import apply_node_arguments
    from gnnflow.strategies.driver import run_training

    cfg = config_from_args(args)
    apply_node_arguments(args)  # the memory preflight counts this host's share of the ranks
    records = run_training(cfg, force=bool(getattr(args, "force", False)))
    last = [r for r in records if r.rank == 0]
    from gnnflow.distributed.launch import is_first_rank

    if not is_first_rank():  # another host's launcher: host 0's writes the run directory
        cfg.out = None
    if last:
        r = last[-1]
        print(f"{cfg.strategy}/{cfg.model}: epoch {r.epoch} loss {r.loss:.4f} train {r.train_acc:.4f} "
              f"val {r.val_acc:.4f} test {r.test_acc:.4f}" + (f" -> {cfg.out}" if cfg.out else ""))
    return 0
