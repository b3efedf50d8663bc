"""The workflow's logic, kept out of the Snakemake rules so tests can reach it.

* :func:`schema` — the config's JSON schema: ``workflow/schemas/config.schema.yaml`` with the
  parts declared in code filled in (the training settings from :class:`~gnnflow.config.TrainConfig`,
  the strategies, the benchmark entries).
* :func:`validate_config` — validation (defaults filled in) plus the cross-references a schema
  cannot express, each failure one message naming the key.
* :func:`expand_runs` — training sweeps (lists and products in the config) expanded into named
  runs with readable names; :meth:`RunSpec.settings` is what a run's settings file holds
  (:func:`write_settings`), which the training rule hands to ``gnnflow train --config``.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gnnflow.config import STRATEGIES, key_path, model_label, settings, settings_schema
from gnnflow.errors import ConfigError

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
#: keys of a sweep that are the workflow's own, not training settings
RUN_KEYS = ("name", "dataset", "partition", "runtime")


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
    #: minutes its job asks for when it has never run (the sweep's ``runtime``)
    runtime: int | None = None

    @property
    def workers(self) -> int:
        return int(self.settings.get("workers", 1))

    def train_settings(self) -> dict[str, Any]:
        """The run's training settings as ``gnnflow train --config`` reads them (the workflow adds
        the graph, the partition book and the run directory on the command line)."""
        return {"strategy": self.strategy, **self.settings, "options": dict(self.options)}


def write_settings(run: RunSpec, path: str | Path) -> None:
    """Write ``run``'s training settings as YAML (atomically)."""
    from gnnflow.io import atomic_file

    with atomic_file(path) as tmp:
        tmp.write_text(yaml.safe_dump(run.train_settings(), sort_keys=False))


def strategy_info(name: str) -> tuple[bool, frozenset[str] | None]:
    """(trains on a partition book, the partition methods it accepts or None for any) of a strategy,
    from its class."""
    from gnnflow.strategies.base import strategy_class

    cls = strategy_class(name)
    return cls.distributed, cls.partition_methods


def option_names(name: str) -> set[str]:
    """The option keys strategy ``name`` takes (its class's ``Options``, aliases included)."""
    from gnnflow.strategies.base import strategy_class

    return strategy_class(name).Options.names()


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


def schema() -> dict[str, Any]:
    """The workflow config's JSON schema, with the parts declared in code filled in."""
    from gnnflow.bench.registry import suite_entry_schema

    doc = yaml.safe_load(SCHEMA.read_text())
    train = doc["$defs"]["train_settings"]
    train["properties"].update(settings_schema())
    doc["$defs"]["strategy"] = {"enum": list(STRATEGIES)}
    doc["properties"]["benchmarks"]["items"] = suite_entry_schema()
    return doc


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Validate (and fill defaults of) a workflow config, its variant merged in; raise ConfigError
    naming the key."""
    import jsonschema

    config = apply_variant(config)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema())
    errors = list(validator.iter_errors(config))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"config key {key_path(tuple(best.absolute_path))}: {best.message}")
    check_references(config)
    return config


def _with_defaults(cls: Any) -> Any:
    """A validator class that also fills in the schema's ``default`` values (jsonschema's FAQ)."""
    import jsonschema

    validate_properties = cls.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(cls, {"properties": set_defaults})


def check_references(config: dict[str, Any]) -> None:
    """Cross-references: sweeps name known datasets/partitions; strategies get partitions."""
    datasets = config.get("datasets", {})
    partitions = config.get("partitions", {})
    for name, spec in partitions.items():
        if spec["method"] == "two-level" and "levels" not in spec:
            raise ConfigError(f"config key partitions.{name}.levels: two-level needs levels: MxW")
    train = config.get("train", {})
    for sweep in train.get("sweeps", []):
        strategies = sweep.get("strategy", (train.get("defaults") or {}).get("strategy"))
        known = set().union(*(option_names(s) for s in _as_list(strategies)))
        opts = {**((train.get("defaults") or {}).get("options") or {}), **(sweep.get("options") or {})}
        for k in sorted(set(opts) - known):
            raise ConfigError(f"config key train.sweeps[{sweep['name']}].options.{k}: not an option of "
                              f"strategy {'/'.join(_as_list(strategies))}; its options are {', '.join(sorted(known))}")
    for run in expand_runs(config):
        key = f"train.sweeps[{run.sweep}]"
        if run.dataset not in datasets:
            raise ConfigError(f"config key {key}.dataset: unknown dataset {run.dataset!r} (known: {', '.join(datasets)})")
        if run.partition is not None and run.partition not in partitions:
            raise ConfigError(f"config key {key}.partition: unknown partition {run.partition!r} (known: {', '.join(partitions) or 'none'})")
        need, allowed = strategy_info(run.strategy)
        if need and run.partition is None:
            raise ConfigError(f"config key {key}.partition: strategy {run.strategy!r} trains on a partition; name one")
        if run.partition is not None:
            spec = partitions[run.partition]
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


def _name_part(value: Any) -> str:
    """A value in a run's name: a per-relation fanout reads ``cites10+writes5+rest3``, model
    options ``eps0.1+train_epsTrue``."""
    if isinstance(value, dict):
        return "+".join(f"{'rest' if k == '*' else k}{n}" for k, n in value.items())
    return str(value)


def _labels() -> dict[str, str]:
    """Each training setting's short name in a swept run's name."""
    return {f.name: f.metadata.get("label") or f.name for f in settings()}


def expand_runs(config: dict[str, Any]) -> list[RunSpec]:
    """Every training run of the config, in order, with unique readable names.

    Every training setting of a sweep may be a list, and every option's value too: the runs are
    their product.  ``fanouts`` is a list already: a list of lists sweeps it.
    """
    train = config.get("train", {})
    defaults = train.get("defaults", {}) or {}
    labels = _labels()
    runs: list[RunSpec] = []
    names: set[str] = set()
    for sweep in train.get("sweeps", []):
        merged = {**defaults, **sweep}
        merged_opts = {**(defaults.get("options") or {}), **(sweep.get("options") or {})}
        axes = {k: _as_list(v) for k, v in merged.items() if k not in ("name", "options", "fanouts", "runtime")}
        fan = merged.get("fanouts")
        if fan:
            axes["fanouts"] = fan if isinstance(fan[0], list) else [fan]
        opt_axes = {k: _as_list(v) for k, v in merged_opts.items()}
        varying = {k for k, v in {**axes, **opt_axes}.items() if len(v) > 1}
        keys, opt_keys = list(axes), list(opt_axes)
        for combo in itertools.product(*axes.values(), *opt_axes.values()):
            values = dict(zip(keys, combo[: len(keys)], strict=True))
            options = dict(zip(opt_keys, combo[len(keys):], strict=True))
            strategy, dataset = values.pop("strategy"), values.pop("dataset")
            partition = values.pop("partition", None)
            # a sweep over several strategies holds the options of each: a run gets its own
            options = {k: v for k, v in options.items() if k in option_names(strategy)}
            if not strategy_info(strategy)[0]:  # single-process: no partition, one rank
                partition = None
                values["workers"] = 1
            parts = [sweep["name"], strategy, dataset, model_label(str(values.get("model", "sage"))), f"w{values.get('workers', 1)}"]
            if partition:
                parts.append(partition)
            for k in sorted(varying - {"strategy", "dataset", "partition", "model", "workers"}):
                if k in values:
                    v = values[k]
                    parts.append(labels.get(k, k) + ("x".join(map(_name_part, v)) if isinstance(v, list)
                                                     else _name_part(v)))
                elif k in options:
                    parts.append(f"{k}{options[k]}")
            name = "-".join(parts)
            run = RunSpec(name=name, sweep=sweep["name"], strategy=strategy, dataset=dataset,
                          partition=partition, settings=values, options=options, runtime=merged.get("runtime"))
            if name in names:
                if run in runs:  # an option swept that this strategy does not take: the same run again
                    continue
                raise ConfigError(f"config key train.sweeps: two runs are both named {name!r}; give sweeps distinct names")
            names.add(name)
            runs.append(run)
    return runs


# ------------------------------------------------------------------------------------------ job sizes
#: what a job asks SLURM for above the preflight's estimate (the estimate is within ~25 % of
#: measured peaks: docs/runtime.md "Memory preflight")
MEM_MARGIN = 0.25
#: minutes asked for a run never measured and without a configured ``runtime``
DEFAULT_RUNTIME_MIN = 60


def planned_sizes(dataset: dict[str, Any]) -> Any:
    """The sizes a dataset will have, from its config alone (before it is prepared): known for the
    synthetic generator (its options and defaults); None for sources whose size is only known
    once the data is read."""
    from gnnflow.data.synthetic import DEFAULTS
    from gnnflow.strategies.memory import GraphSizes

    if dataset.get("source") != "synthetic":
        return None
    opts = {str(k).replace("-", "_"): v for k, v in (dataset.get("options") or {}).items()}
    n = int(opts.get("nodes", opts.get("num_nodes", DEFAULTS["num_nodes"])))
    degree = float(opts.get("avg_degree", DEFAULTS["avg_degree"]))
    return GraphSizes(num_nodes=n, num_edges=int(n * degree), feature_dim=int(opts.get("feature_dim", DEFAULTS["feature_dim"])),
                      num_classes=int(opts.get("classes", opts.get("num_classes", DEFAULTS["num_classes"]))),
                      num_train=int(round(float(opts.get("train_frac", DEFAULTS["train_frac"])) * n)))


def run_memory(run: RunSpec, dataset: dict[str, Any], graph: str, book: str | None) -> Any:
    """The memory preflight's estimate for ``run`` (:class:`~gnnflow.strategies.memory.MemoryEstimate`):
    from the store's and book's metadata once they exist, else from the dataset's planned sizes;
    None when neither is known yet."""
    from gnnflow.config import TrainConfig
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.memory import GraphSizes, estimate

    cls = strategy_class(run.strategy)
    cfg = cls.parse_options(TrainConfig.from_dict({**run.train_settings(), "graph": graph, "partition": book}))
    if (Path(graph) / "meta.json").exists():
        sizes = GraphSizes.read(graph, book if book and (Path(book) / "meta.json").exists() else None)
    else:
        sizes = planned_sizes(dataset)
        if sizes is None:
            return None
    return estimate(cfg, sizes, cls)


def job_mem_mb(run: RunSpec, dataset: dict[str, Any], graph: str, book: str | None, fallback: int = 4000) -> int:
    """MiB a training job asks for: what the memory preflight of ``gnnflow train`` will count for
    all the run's processes on one host (the job's ranks may share a node) plus :data:`MEM_MARGIN`;
    ``fallback`` per rank when the sizes are not known yet.  Refuses, with the preflight's one
    line, a run that will not fit in the memory the preflight sees (``GNNFLOW_MEMORY_AVAILABLE_MIB``:
    set it to a node's memory when planning for a cluster)."""
    import math

    from gnnflow.errors import ResourceError
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.memory import MIB, available_memory, host_need, shortfall

    est = run_memory(run, dataset, graph, book)
    if est is None:
        return fallback * max(1, run.workers)
    need = host_need(est, strategy_class(run.strategy), run.workers)
    avail, source = available_memory()
    if avail and need > avail and not run.settings.get("force"):
        raise ResourceError(f"run {run.name}: {shortfall(run.strategy, run.workers, need, est, avail, source)}; "
                            "use fewer workers, a smaller batch_size or hidden, or force: true to run anyway")
    return int(math.ceil(need / MIB * (1 + MEM_MARGIN)))


def job_runtime_min(run: RunSpec, benchmark_tsv: str | Path, configured: int | None = None) -> int:
    """Minutes a training job asks for: measured (1.5 x the wall time the run's last execution
    recorded in its Snakemake benchmark file, plus 5) when there is one, else the sweep's
    ``runtime`` setting, else :data:`DEFAULT_RUNTIME_MIN`."""
    import csv
    import math

    path = Path(benchmark_tsv)
    if path.exists():
        try:
            with open(path) as fh:
                rows = list(csv.DictReader(fh, delimiter="\t"))
            seconds = max(float(r["s"]) for r in rows)
            return int(math.ceil(1.5 * seconds / 60)) + 5
        except (OSError, ValueError, KeyError):
            pass
    return int(configured or DEFAULT_RUNTIME_MIN)


# ------------------------------------------------------------------------------------------ advice
def advice_groups(config: dict[str, Any]) -> dict[tuple[str, int], str | None]:
    """(dataset, workers) of every distributed run -> the partition the advice for it reads: the
    first such run's book with as many parts as workers (not a 1D row partition), else None (the
    advice then partitions with METIS itself).  Empty when the config has no ``advise`` section or
    it is disabled."""
    spec = config.get("advise")
    if not spec or not spec.get("enabled", True):
        return {}
    partitions = config.get("partitions", {})
    out: dict[tuple[str, int], str | None] = {}
    for run in expand_runs(config):
        if run.workers <= 1:
            continue
        key = (run.dataset, run.workers)
        part = partitions.get(run.partition or "", {})
        fits = part and part.get("parts") == run.workers and part.get("method") not in ("permute-1d", "two-level")
        if out.get(key) is None:
            out[key] = run.partition if fits else None
        else:
            out.setdefault(key, None)
    return out


def advice_settings(config: dict[str, Any], dataset: str, workers: int) -> dict[str, Any]:
    """The training settings an advice predicts for: ``train.defaults`` (their first value where
    they sweep), the dataset's runs' rank count, and ``advise.settings`` over them."""
    defaults = dict((config.get("train") or {}).get("defaults") or {})
    defaults.pop("options", None)
    out: dict[str, Any] = {}
    for k, v in defaults.items():
        if k in ("name", "dataset", "partition", "runtime", "strategy"):
            continue
        if k == "fanouts":
            out[k] = v[0] if v and isinstance(v[0], list) else v
        else:
            out[k] = v[0] if isinstance(v, list) else v
    out.update((config.get("advise") or {}).get("settings") or {})
    out["workers"] = workers
    return out


def advised_strategies(advice_json: str | Path, top_k: int) -> list[str]:
    """The strategies of the ``top_k`` best-ranked candidates of an advice file (``--format json``)."""
    import json

    rows = json.loads(Path(advice_json).read_text())["rows"]
    ranked = sorted((r for r in rows if r.get("rank")), key=lambda r: r["rank"])
    out: list[str] = []
    for r in ranked:
        if r["strategy"] not in out:
            out.append(r["strategy"])
        if len(out) >= top_k:
            break
    return out


def keep_run(run: RunSpec, advice_json: str | Path | None, top_k: int | None) -> bool:
    """Whether the workflow trains ``run`` when it trains only the advised top K strategies of
    each dataset x workers: single-process runs (the references) always; a distributed run when
    its strategy is among the top K of its advice."""
    if not top_k or run.workers <= 1 or advice_json is None:
        return True
    return run.strategy in advised_strategies(advice_json, top_k)
