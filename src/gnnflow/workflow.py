"""The workflow's logic, kept out of the Snakemake rules so tests can reach it.

* :func:`validate_config` — JSON-schema validation (through
  ``snakemake.utils.validate`` when Snakemake runs it) plus the cross-references
  a schema cannot express, each failure one message naming the key.
* :func:`expand_runs` — training sweeps (lists and products in the config)
  expanded into named runs with readable names.
* :func:`cli_options` — a config ``options`` mapping as command-line flags.
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gnnflow.errors import ConfigError

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
# Strategies that train on a partition book, and the partition methods they accept.
PARTITIONED = {
    "data": None, "distdgl": None, "split": None, "p3": None, "hec": None, "dgcl": None,
    "fullbatch": {"permute-1d"},
}
SWEEPABLE = ("strategy", "dataset", "partition", "model", "workers", "hidden", "num_layers",
             "batch_size", "epochs", "heads", "seed", "lr", "dropout")
# Keys that take part in a run's name when they vary inside a sweep, with a short label.
NAME_LABEL = {"hidden": "h", "num_layers": "L", "batch_size": "b", "epochs": "e", "heads": "H",
              "seed": "s", "lr": "lr", "dropout": "do", "fanouts": "f"}


@dataclass
class RunSpec:
    """One training run of the workflow."""

    name: str
    sweep: str
    strategy: str
    dataset: str
    partition: str | None
    settings: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def workers(self) -> int:
        return int(self.settings.get("workers", 1))

    def train_args(self) -> str:
        """``gnnflow train`` flags for everything but graph, partition, out."""
        s = self.settings
        flags = [f"--strategy {self.strategy}", f"--workers {self.workers}"]
        for key, flag in (("model", "--model"), ("hidden", "--hidden"), ("num_layers", "--layers"),
                          ("batch_size", "--batch-size"), ("epochs", "--epochs"), ("lr", "--lr"),
                          ("dropout", "--dropout"), ("heads", "--heads"), ("seed", "--seed"),
                          ("eval_every", "--eval-every"), ("gcn_degrees", "--gcn-degrees")):
            if key in s:
                flags.append(f"{flag} {s[key]}")
        if s.get("self_loops") is not None:
            flags.append("--self-loops" if s["self_loops"] else "--no-self-loops")
        if s.get("force"):  # run even where the memory preflight predicts it will not fit
            flags.append("--force")
        if "fanouts" in s:
            flags.append("--fanouts " + ",".join(str(f) for f in s["fanouts"]))
        for key, value in sorted(self.options.items()):
            flags.append(f"--opt {key}={_opt_value(value)}")
        return " ".join(flags)


def _opt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return "'" + json.dumps(value, separators=(",", ":")) + "'"
    return str(value)


def key_path(path: tuple[Any, ...]) -> str:
    """A validation error's location as a config key: ``train.sweeps[1].workers``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def apply_variant(config: dict[str, Any]) -> dict[str, Any]:
    """Merge ``variants[variant]`` over the config (deep for mappings)."""
    variant = config.get("variant")
    if not variant:
        return config
    variants = config.get("variants") or {}
    if variant not in variants:
        raise ConfigError(f"variant: {variant!r} is not one of the config's variants ({', '.join(variants) or 'none'})")
    merged = copy.deepcopy(config)
    _deep_update(merged, variants[variant])
    return merged


def _deep_update(base: dict[str, Any], over: dict[str, Any]) -> None:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def validate_config(config: dict[str, Any], use_snakemake: bool = True) -> dict[str, Any]:
    """Validate (and fill defaults of) a workflow config; raise ConfigError naming the key."""
    import jsonschema

    schema = yaml.safe_load(SCHEMA.read_text())
    try:
        if use_snakemake:
            from snakemake.utils import validate

            validate(config, str(SCHEMA), set_default=True)
        else:
            jsonschema.validate(config, schema)
    except Exception as exc:  # snakemake wraps the jsonschema error in a WorkflowError
        err = _find_validation_error(exc)
        if err is None:
            raise
        best = jsonschema.exceptions.best_match([err]) or err
        where = key_path(tuple(best.absolute_path))
        raise ConfigError(f"config key {where}: {best.message}") from None
    config = apply_variant(config)
    check_references(config)
    return config


def _find_validation_error(exc: BaseException) -> Any:
    import jsonschema

    seen: set[int] = set()
    stack: list[Any] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen or e is None:
            continue
        seen.add(id(e))
        if isinstance(e, jsonschema.ValidationError):
            return e
        stack.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
        stack.extend([e.__cause__, e.__context__])
    return None


def check_references(config: dict[str, Any]) -> None:
    """Cross-references: sweeps name known datasets/partitions; strategies get partitions."""
    datasets = config.get("datasets", {})
    partitions = config.get("partitions", {})
    for name, spec in partitions.items():
        if spec["method"] == "two-level" and "levels" not in spec:
            raise ConfigError(f"config key partitions.{name}.levels: two-level needs levels: MxW")
    for run in expand_runs(config):
        key = f"train.sweeps[{run.sweep}]"
        if run.dataset not in datasets:
            raise ConfigError(f"config key {key}.dataset: unknown dataset {run.dataset!r} (known: {', '.join(datasets)})")
        if run.partition is not None and run.partition not in partitions:
            raise ConfigError(f"config key {key}.partition: unknown partition {run.partition!r} (known: {', '.join(partitions) or 'none'})")
        need = run.strategy in PARTITIONED
        if need and run.partition is None:
            raise ConfigError(f"config key {key}.partition: strategy {run.strategy!r} trains on a partition; name one")
        if run.partition is not None:
            spec = partitions[run.partition]
            allowed = PARTITIONED.get(run.strategy)
            if allowed and spec["method"] not in allowed:
                raise ConfigError(
                    f"config key {key}.partition: strategy {run.strategy!r} needs a {'/'.join(sorted(allowed))} partition, "
                    f"{run.partition!r} is {spec['method']}")
            if need and spec["parts"] != run.workers and spec["method"] != "two-level":
                raise ConfigError(
                    f"config key {key}.workers: {run.workers} workers on partition {run.partition!r} with {spec['parts']} parts; "
                    "use as many workers as parts")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def expand_runs(config: dict[str, Any]) -> list[RunSpec]:
    """Every training run of the config, in order, with unique readable names."""
    train = config.get("train", {})
    defaults = train.get("defaults", {}) or {}
    runs: list[RunSpec] = []
    names: set[str] = set()
    for sweep in train.get("sweeps", []):
        merged = {**defaults, **sweep}
        merged_opts = {**(defaults.get("options") or {}), **(sweep.get("options") or {})}
        axes = {k: _as_list(merged[k]) for k in SWEEPABLE if k in merged}
        fan = merged.get("fanouts")
        axes["fanouts"] = fan if fan and isinstance(fan[0], list) else [fan] if fan else [None]
        opt_axes = {k: _as_list(v) for k, v in merged_opts.items()}
        varying = {k for k, v in {**axes, **opt_axes}.items() if len(v) > 1}
        keys, opt_keys = list(axes), list(opt_axes)
        for combo in itertools.product(*axes.values(), *opt_axes.values()):
            values = dict(zip(keys, combo[: len(keys)], strict=True))
            options = dict(zip(opt_keys, combo[len(keys):], strict=True))
            strategy, dataset = values.pop("strategy"), values.pop("dataset")
            partition = values.pop("partition", None)
            if strategy not in PARTITIONED:  # single-process: no partition, one rank
                partition = None
                values["workers"] = 1
            if values.get("fanouts") is None:
                values.pop("fanouts", None)
            for key in ("eval_every", "self_loops", "gcn_degrees", "force"):  # settings that are not swept
                if key in merged:
                    values[key] = merged[key]
            parts = [sweep["name"], strategy, dataset, str(values.get("model", "sage")), f"w{values.get('workers', 1)}"]
            if partition:
                parts.append(partition)
            for k in sorted(varying - {"strategy", "dataset", "partition", "model", "workers"}):
                if k in values:
                    v = values[k]
                    parts.append(NAME_LABEL.get(k, k) + ("x".join(map(str, v)) if isinstance(v, list) else str(v)))
                elif k in options:
                    parts.append(f"{k}{options[k]}")
            name = "-".join(parts)
            if name in names:
                raise ConfigError(f"config key train.sweeps: two runs are both named {name!r}; give sweeps distinct names")
            names.add(name)
            runs.append(RunSpec(name=name, sweep=sweep["name"], strategy=strategy, dataset=dataset,
                                partition=partition, settings=values, options=options))
    return runs


def cli_options(options: dict[str, Any] | None) -> str:
    """``{"nodes": 1000, "avg_degree": 10}`` -> ``--nodes 1000 --avg-degree 10``."""
    out = []
    for key, value in (options or {}).items():
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            if value:
                out.append(flag)
        elif isinstance(value, list):
            out.append(f"{flag} " + ",".join(map(str, value)))
        else:
            out.append(f"{flag} {value}")
    return " ".join(out)
