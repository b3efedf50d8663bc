"""A training run's settings, declared once: :class:`TrainConfig`.

Every field of :class:`TrainConfig` carries its help, default and limits (:func:`setting`).
Everything else derives from the fields:

* ``gnnflow train``'s flags (:func:`add_train_arguments`, :func:`config_from_args`): a flag per
  field, named after it unless the field says otherwise (``--layers`` for ``num_layers``);
* the workflow schema's training settings (:func:`settings_schema`), each of which a sweep may
  list; the workflow writes a run's settings to a YAML file and calls ``gnnflow train --config``;
* the checks a config passes when it is made (:meth:`TrainConfig.validate`).

Strategy options (``options``) are typed per strategy (:mod:`gnnflow.options`); the strategy
names, their classes and the model names are the vocabulary below (:data:`STRATEGIES`,
:data:`MODELS`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnflow.errors import ConfigError
from gnnflow.options import StrategyOptions

#: strategy name -> "module:Class"; the module is imported when the strategy is used
STRATEGIES: dict[str, str] = {
    "single": "gnnflow.strategies.single:SingleProcess",
    "data": "gnnflow.strategies.minibatch.data_parallel:DataParallel",
    "distdgl": "gnnflow.strategies.distdgl:DistDGLBaseline",
    "split": "gnnflow.strategies.split.split_parallel:SplitParallel",
    "p3": "gnnflow.strategies.split.p3:PushPull",
    "fullbatch": "gnnflow.strategies.fullbatch.row1d:FullBatch",
    "hec": "gnnflow.strategies.hec.strategy:HistoricalEmbeddingCache",
    "dgcl": "gnnflow.strategies.fullbatch.dgcl:PlannedHalo",
}
MODELS = ("sage", "gcn", "gat", "mlp", "rgcn", "rgat")  # mlp: the no-graph baseline (nn.DstLinear)
#: a model given as a layer class instead of a name (docs/models.md): ``pyg:ConvName`` (a
#: torch_geometric.nn convolution), ``module.path:Name`` or ``path/to/file.py:Name``
LAYER_CLASS = r"pyg:[A-Za-z_]\w*|[A-Za-z_][\w.]*:[A-Za-z_]\w*|[^:]+\.py:[A-Za-z_]\w*"
LAYER_CLASS_FORMS = "pyg:ConvName, module.path:Name or path/to/file.py:Name"
#: models that read edge types and per-type features (a homogenized heterogeneous store)
RELATIONAL_MODELS = ("rgcn", "rgat")
#: models with attention heads (GAT's concatenated hidden heads, averaged output heads)
HEADED_MODELS = ("gat", "rgat")
ACTIVATIONS = ("relu", "elu")  # hidden activations (gnnflow.nn.model)
AGGREGATORS = ("mean", "gcn")  # GraphSAGE aggregators (gnnflow.nn.sage)
#: models whose standard recipe adds self-loops (Kipf & Welling's A + I; GAT attends to itself)
SELF_LOOP_MODELS = ("gcn", "gat")
GCN_DEGREES = ("graph", "block")
DEVICES = ("cpu", "cuda")


def is_layer_class(model: str) -> bool:
    """Whether ``model`` names a layer class (:data:`LAYER_CLASS`) rather than a built-in model."""
    return model not in MODELS and re.fullmatch(LAYER_CLASS, model) is not None


def model_label(model: str) -> str:
    """``model`` as a file-name-safe word for run ids and run names: a built-in's name,
    ``pyg-GINConv``, ``layers-MyConv`` for ``path/to/layers.py:MyConv`` or ``my.pkg:MyConv``."""
    if not is_layer_class(model):
        return model
    where, _, name = model.rpartition(":")
    stem = "pyg" if where == "pyg" else Path(where).stem if where.endswith(".py") else where.rsplit(".", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{stem}-{name}")


class _OpenChoices(tuple):
    """A flag's choices that also admit every value matching ``pattern`` (argparse tests
    ``value in choices``)."""

    pattern: str

    def __new__(cls, items: Sequence[Any], pattern: str) -> _OpenChoices:
        out = super().__new__(cls, items)
        out.pattern = pattern
        return out

    def __contains__(self, value: object) -> bool:
        return tuple.__contains__(self, value) or re.fullmatch(self.pattern, str(value)) is not None


def setting(default: Any, help: str, *, choices: Sequence[Any] | None = None, minimum: float | None = None,
            below: float | None = None, positive: bool = False, flag: str | None = None,
            label: str | None = None, workflow: bool = True, pattern: str | None = None) -> Any:
    """A field of :class:`TrainConfig` with what its flag, schema and checks need.

    ``minimum`` / ``below``: the least value / a bound the value stays under; ``positive``: more
    than 0; ``flag``: the ``gnnflow train`` flag (default ``--field-name``); ``label``: its short
    name in a swept run's name; ``workflow``: whether a workflow config sets it (the workflow
    itself sets the graph, partition, run directory and run id); ``pattern``: a regular expression
    of the values accepted besides ``choices``."""
    meta = {"help": help, "choices": tuple(choices) if choices else None, "minimum": minimum, "below": below,
            "positive": positive, "flag": flag, "label": label, "workflow": workflow, "pattern": pattern}
    if default is dataclasses.MISSING:  # required
        return field(metadata=meta)
    if isinstance(default, list | dict):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    """What a training run needs.  Strategy-specific knobs live in ``options``."""

    graph: str = setting(dataclasses.MISSING, "graph store directory", workflow=False)
    strategy: str = setting("single", "training strategy", choices=STRATEGIES)
    partition: str | None = setting(None, "partition book directory (distributed strategies)", workflow=False)
    model: str = setting("sage", f"model: a built-in ({', '.join(MODELS)}) or a layer class that gnnflow stacks "
                         f"num_layers times ({LAYER_CLASS_FORMS}; docs/models.md)", choices=MODELS,
                         pattern=LAYER_CLASS)
    model_opts: dict[str, int | float | bool | str] = setting(
        {}, "keyword options of a layer class (--model-opt KEY=VALUE, repeatable; the value is read as an "
        "integer, number, true/false or else a string), given to every layer: Name(in, out, **model_opts)",
        flag="--model-opt", label="mo")
    hidden: int = setting(64, "hidden features", minimum=1, label="h")
    num_layers: int = setting(2, "number of layers", minimum=1, flag="--layers", label="L")
    fanouts: list[int | dict[str, int]] = setting(
        [10, 10], "fanout per layer, input layer first (-1 = all neighbours); a flag takes them "
        "comma-separated, e.g. 15,10,5.  On a heterogeneous store a layer may give a count per relation "
        "(relation name or src___rel___dst; '*' for the others; 0 none, -1 all), layers separated by ';', "
        "e.g. 'cites:10,writes:5,*:3;cites:5,*:2'; a plain count there applies to every relation",
        label="f")
    batch_size: int = setting(512, "targets per GLOBAL mini-batch, all ranks together, for every strategy "
                              "(each data-parallel rank takes about batch/P of them)", minimum=1, label="b")
    lr: float = setting(0.003, "Adam learning rate", minimum=0.0, label="lr")
    weight_decay: float = setting(0.0, "Adam weight decay", minimum=0.0, label="wd")
    sparse_lr: float | None = setting(None, "RGCN/R-GAT: learning rate of the featureless vertex types' "
                                      "embedding rows (sparse Adam on the rows a batch touched; default: lr)",
                                      minimum=0.0)
    dropout: float = setting(0.2, "dropout between layers", minimum=0.0, below=1.0, label="do")
    num_bases: int = setting(0, "RGCN: basis matrices the relations' weights combine (Schlichtkrull et al.'s "
                             "basis decomposition); 0: a full weight per relation", minimum=0, label="B")
    heads: int = setting(2, "GAT attention heads of every hidden layer (concatenated)", minimum=1, label="H")
    out_heads: int = setting(1, "GAT attention heads of the output layer (averaged)", minimum=1)
    input_dropout: float = setting(0.0, "dropout on the input features before the first layer",
                                   minimum=0.0, below=1.0)
    feat_drop: float = setting(0.0, "GAT: dropout on every layer's input features", minimum=0.0, below=1.0)
    attn_drop: float = setting(0.0, "GAT: dropout on the attention coefficients", minimum=0.0, below=1.0)
    activation: str | None = setting(None, "hidden activation (default: the model's standard, elu for gat, "
                                     "relu otherwise)", choices=ACTIVATIONS)
    aggregator: str = setting("mean", "GraphSAGE aggregator", choices=AGGREGATORS)
    epochs: int = setting(5, "training epochs", minimum=1, label="e")
    seed: int = setting(0, "random seed", minimum=0, label="s")
    workers: int = setting(1, "number of ranks", minimum=1)
    eval_every: int = setting(1, "evaluate every N epochs (and after the last)", minimum=1)
    device: str = setting("cpu", "where ranks compute", choices=DEVICES)
    out: str | None = setting(None, "run directory to write", workflow=False)
    run_id: str | None = setting(None, "run id in the records (default: the run directory's name)",
                                 workflow=False)
    resume: bool = setting(False, "continue from RUNDIR/ckpt/last.pt", workflow=False)
    #: None: the model's standard (on for gcn and gat, off for sage and mlp)
    self_loops: bool | None = setting(None, "train on A + I in every strategy (default: on for gcn and gat)")
    gcn_degrees: str = setting("graph", "GCN normalisation in mini-batch training: 'graph' (whole-graph "
                               "degrees: a target's output does not depend on the rest of its batch) or "
                               "'block' (the sampled block's own)", choices=GCN_DEGREES)
    max_restarts: int = setting(0, "when a rank dies, stops or hangs, stop every rank and restart the run from "
                                "its last good checkpoint, at most this many times (distributed strategies; "
                                "needs --out)", minimum=0)
    checkpoint_every_s: float | None = setting(None, "also write a checkpoint inside an epoch every this many "
                                               "seconds (mini-batch strategies); a resumed or restarted run "
                                               "continues at the next mini-batch", positive=True)
    force: bool = setting(False, "run even where the memory preflight estimates that the run's processes "
                          "will not fit in the memory available (MemAvailable, the cgroup limit, or "
                          "GNNFLOW_MEMORY_AVAILABLE_MIB)")
    options: dict[str, Any] | StrategyOptions = setting(
        {}, "strategy options (--opt KEY=VALUE, repeatable; the value is read as YAML); a list "
        "value in a workflow config is swept")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Each setting has its field's type and limits; the fanouts fit the layers."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, _checked(f, getattr(self, f.name)))
        if self.fanouts and len(self.fanouts) != self.num_layers:
            raise ConfigError(
                f"fanouts: {len(self.fanouts)} values for num_layers={self.num_layers}; give one per layer"
            )
        for f in self.fanouts:
            if isinstance(f, dict):
                if not f or any(k < -1 for k in f.values()):
                    raise ConfigError(f"fanouts: a per-relation fanout maps relation names to counts >= -1 "
                                      f"(0: none, -1: all), got {f}")
            elif f == 0 or f < -1:
                raise ConfigError(f"fanouts: each must be a positive count or -1 (full), got {self.fanouts}")
        if self.model_opts and not is_layer_class(self.model):
            raise ConfigError(f"model_opts: the built-in model {self.model!r} takes none (its settings are flags: "
                              f"--hidden, --heads, --aggregator, ...); --model-opt is for a layer class "
                              f"({LAYER_CLASS_FORMS})")
        if is_layer_class(self.model) and any(isinstance(f, dict) for f in self.fanouts):
            raise ConfigError(f"fanouts: per-relation fanouts with the layer class {self.model!r}: gnnflow gives a "
                              "layer class untyped blocks; use --model rgcn or rgat, or plain fanouts")
        if self.self_loops and self.relational:
            raise ConfigError("self_loops: a relational run (rgcn/rgat, per-relation fanouts) samples edges by "
                              "relation and an added self-loop has none; RGCN has its own self-loop weight")
        if isinstance(self.options, dict):
            for key, new in (("degrees", "gcn_degrees setting (graph or block; --gcn-degrees)"),
                             ("self_loops", "self_loops setting (--self-loops / --no-self-loops), applied "
                                            "by every strategy")):
                if key in self.options:
                    raise ConfigError(f"options.{key}: replaced by the {new}")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["fanouts"] = [dict(f) if isinstance(f, dict) else f for f in self.fanouts]
        opts = self.options
        out["options"] = opts.to_dict() if isinstance(opts, StrategyOptions) else dict(opts)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A config from settings as a file or a command line gives them: unknown keys fail;
        fanouts may be a string ``15,10,5`` or ``cites:10,*:5;*:5``; ``num_layers`` without fanouts takes 10 per layer,
        fanouts without ``num_layers`` set the layers."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown training setting(s): {', '.join(unknown)}")
        data = dict(data)
        if "fanouts" in data:
            data["fanouts"] = parse_fanouts(data["fanouts"])
        if "num_layers" in data and "fanouts" not in data:
            data["fanouts"] = [10] * int(data["num_layers"])
        if "fanouts" in data and "num_layers" not in data:
            data["num_layers"] = len(data["fanouts"])
        if data.get("options") is None:
            data["options"] = {}
        return cls(**data)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)

    @property
    def adds_self_loops(self) -> bool:
        """Whether the model's graph is A + I (the ``self_loops`` setting, or the model's standard;
        never in a relational run, whose every edge has a relation: RGCN has its own self-loop weight)."""
        if self.self_loops is None:
            return self.model in SELF_LOOP_MODELS and not self.relational
        return bool(self.self_loops)

    @property
    def relational(self) -> bool:
        """Whether the run samples per relation and/or trains a relational model (it needs the
        edge types of a homogenized heterogeneous store)."""
        return self.model in RELATIONAL_MODELS or any(isinstance(f, dict) for f in self.fanouts)

    @property
    def graph_degrees(self) -> bool:
        """Whether mini-batch GCN blocks carry whole-graph degrees."""
        return self.model == "gcn" and self.gcn_degrees == "graph"

    @property
    def run_dir(self) -> Path | None:
        return Path(self.out) if self.out else None


def settings() -> list[dataclasses.Field[Any]]:
    """The fields of :class:`TrainConfig`, in order."""
    return list(dataclasses.fields(TrainConfig))


def base_type(f: dataclasses.Field[Any]) -> tuple[str, bool]:
    """A field's type without ``| None`` (``"int"``, ``"list[int]"``, ...) and whether None is allowed."""
    kind = str(f.type).replace(" ", "")
    if kind.endswith("StrategyOptions"):
        return "dict", False
    return kind.removesuffix("|None"), kind.endswith("|None")


def _checked(f: dataclasses.Field[Any], value: Any) -> Any:
    """``value`` checked against field ``f`` (integers are accepted where a float is expected;
    numeric strings are not: YAML ``epochs: one`` fails here, naming the key)."""
    base, optional = base_type(f)
    meta = f.metadata
    if value is None and optional:
        return None
    if base == "int":
        ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif base == "float":
        ok, want = isinstance(value, int | float) and not isinstance(value, bool), "a number"
        value = float(value) if ok else value
    elif base == "bool":
        ok, want = isinstance(value, bool), "true or false"
    elif base == "str":
        ok, want = isinstance(value, str), "a string"
    elif base == "list[int|dict[str,int]]":
        ok = isinstance(value, list) and all(_is_int(v) or (isinstance(v, dict) and all(
            isinstance(k, str | int) and _is_int(n) for k, n in v.items())) for v in value)
        want = "a list of integers or {relation: count} mappings"
    elif base == SCALAR_MAP:
        ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, int | float | bool | str)
                                             for k, v in value.items())
        want = "a mapping of names to integers, numbers, true/false or strings"
    else:  # options
        ok, want = isinstance(value, dict | StrategyOptions), "a mapping"
    if not ok:
        raise ConfigError(f"{f.name}: expected {want}, got {value!r}")
    if meta.get("choices") and value not in _choices(f):
        extra = " or a layer class (" + LAYER_CLASS_FORMS + "; docs/models.md)" if meta.get("pattern") else ""
        raise ConfigError(f"{f.name}: unknown {value!r}; choose one of {', '.join(meta['choices'])}{extra}"
                          + (" (or leave it unset for the default)" if optional else ""))
    if meta.get("minimum") is not None and value < meta["minimum"]:
        raise ConfigError(f"{f.name}: must be >= {meta['minimum']:g}, got {value}")
    if meta.get("positive") and not value > 0:
        raise ConfigError(f"{f.name}: must be > 0, got {value}")
    if meta.get("below") is not None and not value < meta["below"]:
        raise ConfigError(f"{f.name}: must be in [{meta.get('minimum') or 0:g}, {meta['below']:g}), got {value}")
    return value


#: the base type of a mapping of names to scalars (``model_opts``)
SCALAR_MAP = "dict[str,int|float|bool|str]"


def _choices(f: dataclasses.Field[Any]) -> tuple[Any, ...] | None:
    """A setting's choices as its flag offers them (with its ``pattern``: open, :class:`_OpenChoices`)."""
    choices, pattern = f.metadata.get("choices"), f.metadata.get("pattern")
    return _OpenChoices(choices, pattern) if choices and pattern else choices


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ------------------------------------------------------------------------------------------ parsing
def parse_fanouts(text: str | Sequence[int | dict[str, int]]) -> list[int | dict[str, int]]:
    """``"15,10,5"`` (or a list) -> ``[15, 10, 5]``; per-relation layers separated by ``;``:
    ``"cites:10,*:5;5"`` -> ``[{"cites": 10, "*": 5}, 5]``."""
    if isinstance(text, list | tuple):  # bools and other types fail the type check
        return [x if isinstance(x, bool | dict) else int(x) for x in text]
    text = str(text)
    try:
        if ":" not in text and ";" not in text:
            return [int(x) for x in text.split(",") if x.strip()]
        out: list[int | dict[str, int]] = []
        for layer in text.split(";"):
            if ":" not in layer:
                out.append(int(layer))
                continue
            counts: dict[str, int] = {}
            for item in layer.split(","):
                name, sep, count = item.strip().rpartition(":")
                if not sep or not name.strip():
                    raise ValueError(item)
                counts[name.strip()] = int(count)
            out.append(counts)
        return out
    except ValueError:
        raise ConfigError(f"fanouts: expected comma-separated integers like 15,10,5, or per-relation layers "
                          f"separated by ';' like 'cites:10,*:5;*:5', got {text!r}") from None


def format_fanouts(fanouts: Sequence[int | dict[str, int]]) -> str:
    """The command-line form of ``fanouts`` (the inverse of :func:`parse_fanouts`)."""
    if not any(isinstance(f, dict) for f in fanouts):
        return ",".join(str(f) for f in fanouts)
    return ";".join(",".join(f"{k}:{n}" for k, n in f.items()) if isinstance(f, dict) else str(f)
                    for f in fanouts)


def fanout_total(layer: int | dict[str, int]) -> int:
    """The most neighbours one layer's fanout draws per vertex (-1: all): a per-relation fanout's
    counts added (at most what a vertex draws; the memory estimate's bound)."""
    if not isinstance(layer, dict):
        return int(layer)
    return -1 if any(k < 0 for k in layer.values()) else sum(layer.values())


def parse_option(text: str) -> tuple[str, Any]:
    """``--opt KEY=VALUE`` -> ``(KEY, VALUE read as YAML)``."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--opt {text!r}: expected KEY=VALUE")
    try:
        return key.strip(), yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        return key.strip(), value


def parse_scalar_option(text: str, flag: str = "--model-opt") -> tuple[str, int | float | bool | str]:
    """``KEY=VALUE`` -> ``(KEY, VALUE)`` with VALUE an integer, a number, true/false, or else the string."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{flag} {text!r}: expected KEY=VALUE")
    value = value.strip()
    if value.lower() in ("true", "false"):
        return key.strip(), value.lower() == "true"
    for kind in (int, float):
        try:
            return key.strip(), kind(value)
        except ValueError:
            pass
    return key.strip(), value


def load_settings(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A YAML file of training settings (``gnnflow train --config``, a recipe, a workflow run's
    settings file) as a mapping."""
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


def flag_of(f: dataclasses.Field[Any]) -> str:
    """The ``gnnflow train`` flag of a setting."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_train_arguments(parser: Any, option_flags: Sequence[tuple[str, str, Any, str]] = ()) -> None:
    """A flag for every setting of :class:`TrainConfig` (all default to None, so that a value
    from ``--config`` stays unless the flag is given), ``--config``, and ``option_flags``:
    ``(flag, option, value or a type, help)`` shortcuts for strategy options."""
    parser.add_argument("--config", default=None, help="YAML file of training settings (the keys below, "
                        "strategy options under 'options'); flags override it")
    for f in settings():
        base, optional = base_type(f)
        meta, flag = f.metadata, flag_of(f)
        default = f"default {f.default}" if f.default is not dataclasses.MISSING and f.default not in ("", None) \
            else ""
        help_text = meta["help"] + (f" ({default})" if default and base not in ("bool",) else "")
        if base == "dict":
            parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help=help_text)
        elif base == SCALAR_MAP:
            parser.add_argument(flag, dest=f.name, action="append", default=None, metavar="KEY=VALUE",
                                help=meta["help"])
        elif base == "bool" and optional:
            group = parser.add_mutually_exclusive_group()
            group.add_argument(flag, dest=f.name, action="store_const", const=True, default=None, help=help_text)
            group.add_argument("--no-" + flag[2:], dest=f.name, action="store_const", const=False,
                               help=f"the opposite of {flag}")
        elif base == "bool":
            parser.add_argument(flag, dest=f.name, action="store_const", const=True, default=None, help=help_text)
        else:
            typ = {"int": int, "float": float}.get(base, str)
            parser.add_argument(flag, dest=f.name, type=typ, default=None, choices=_choices(f),
                                metavar=f.name.upper() if meta.get("pattern") else None, help=help_text)
    for flag, key, value, help_text in option_flags:
        dest = "optflag_" + key
        if isinstance(value, type):
            parser.add_argument(flag, dest=dest, type=value, default=None, metavar=key.upper(),
                                help=f"{help_text} (= --opt {key}=...)")
        else:
            parser.add_argument(flag, dest=dest, action="store_const", const=value, default=None,
                                help=f"{help_text} (= --opt {key}={str(value).lower()})")


def config_from_args(args: Any) -> TrainConfig:
    """``--config`` settings overridden by the flags :func:`add_train_arguments` made."""
    data: dict[str, Any] = load_settings(args.config) if getattr(args, "config", None) else {}
    for f in settings():
        if f.name == "options":
            continue
        value = getattr(args, f.name, None)
        if value is not None and base_type(f)[0] == SCALAR_MAP:  # flags add to the file's mapping
            value = {**(data.get(f.name) or {}), **dict(parse_scalar_option(v, flag_of(f)) for v in value)}
        if value is not None:
            data[f.name] = value
    options = dict(data.get("options") or {})
    options.update(parse_option(o) for o in getattr(args, "opt", None) or [])
    for name, value in vars(args).items():
        if name.startswith("optflag_") and value is not None:
            options[name.removeprefix("optflag_")] = value
    data["options"] = options
    if not data.get("graph"):
        raise ConfigError("--graph is required (or `graph:` in --config)")
    try:
        return TrainConfig.from_dict(data)
    except TypeError as exc:
        raise ConfigError(f"training settings: {exc}") from None


# ------------------------------------------------------------------------------------------ schema
def settings_schema() -> dict[str, dict[str, Any]]:
    """JSON-schema properties of the training settings a workflow config may set: one per field
    that the workflow does not set itself, each either a value or a list of values to sweep
    (for ``fanouts``: a list, or a list of lists)."""
    out: dict[str, dict[str, Any]] = {}
    for f in settings():
        if not f.metadata["workflow"]:
            continue
        out[f.name] = _field_schema(f)
    return out


def _field_schema(f: dataclasses.Field[Any]) -> dict[str, Any]:
    base, optional = base_type(f)
    meta = f.metadata
    one: dict[str, Any]
    if base == "dict":
        return {"type": "object", "description": meta["help"]}
    if base == "list[int|dict[str,int]]":
        per_relation = {"type": "object", "minProperties": 1, "additionalProperties": {"type": "integer"}}
        one = {"type": "array", "minItems": 1, "items": {"anyOf": [{"type": "integer"}, per_relation]}}
        return {"description": meta["help"], "anyOf": [one, {"type": "array", "minItems": 1, "items": one}]}
    if base == SCALAR_MAP:
        one = {"type": "object", "additionalProperties": {"type": ["integer", "number", "boolean", "string"]}}
        return {"description": meta["help"], "anyOf": [one, {"type": "array", "minItems": 1, "items": one}]}
    if meta.get("choices") and meta.get("pattern"):
        one = {"anyOf": [{"enum": list(meta["choices"])}, {"type": "string", "pattern": f"^({meta['pattern']})$"}]}
    elif meta.get("choices"):
        one = {"enum": list(meta["choices"])}
    else:
        one = {"type": {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}[base]}
    if meta.get("minimum") is not None:
        one["minimum"] = meta["minimum"]
    if meta.get("positive"):
        one["exclusiveMinimum"] = 0
    if meta.get("below") is not None:
        one["exclusiveMaximum"] = meta["below"]
    if optional:
        one = {"anyOf": [one, {"type": "null"}]}
    return {"description": meta["help"], "anyOf": [one, {"type": "array", "minItems": 1, "items": one}]}


# ------------------------------------------------------------------------------------------ helpers
def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from environment variable ``name`` (unset or empty: ``default``)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{name}={text!r}: expected a positive number of seconds")
    return value


def key_path(path: tuple[Any, ...]) -> str:
    """A validation error's location as a config key: ``train.sweeps[1].workers``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


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
