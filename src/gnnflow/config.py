"""Training configuration shared by every strategy."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnflow.errors import ConfigError

MODELS = ("sage", "gcn", "gat", "mlp")  # mlp: the no-graph baseline (nn.DstLinear)
ACTIVATIONS = ("relu", "elu")  # hidden activations (gnnflow.nn.model)
AGGREGATORS = ("mean", "gcn")  # GraphSAGE aggregators (gnnflow.nn.sage)
#: models whose standard recipe adds self-loops (Kipf & Welling's A + I; GAT attends to itself)
SELF_LOOP_MODELS = ("gcn", "gat")
GCN_DEGREES = ("graph", "block")


def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from environment variable ``name`` (unset or empty: ``default``)."""
    import os

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


TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def option_bool(value: Any, name: str | None = None) -> bool:
    """An option value as a bool (``--opt key=true`` arrives as a string: true for
    ``TRUE_WORDS``).  With ``name``, a word in neither ``TRUE_WORDS`` nor ``FALSE_WORDS`` is a
    ConfigError naming ``--opt name``; without, it reads as false."""
    if not isinstance(value, str):
        return bool(value)
    word = value.strip().lower()
    if name is not None and word not in TRUE_WORDS + FALSE_WORDS:
        raise ConfigError(f"--opt {name}={value}: true or false")
    return word in TRUE_WORDS


@dataclass
class TrainConfig:
    """What a training run needs.  Strategy-specific knobs live in ``options``."""

    graph: str
    strategy: str = "single"
    partition: str | None = None
    model: str = "sage"
    hidden: int = 64
    num_layers: int = 2
    fanouts: list[int] = field(default_factory=lambda: [10, 10])
    batch_size: int = 512
    lr: float = 0.003
    weight_decay: float = 0.0
    dropout: float = 0.2
    heads: int = 2
    # the model's standard recipe settings (docs/core.md "Layers and models"); every strategy
    # builds its model from these through gnnflow.nn.build_model_from_config
    out_heads: int = 1
    input_dropout: float = 0.0
    feat_drop: float = 0.0
    attn_drop: float = 0.0
    activation: str | None = None
    aggregator: str = "mean"
    epochs: int = 5
    seed: int = 0
    workers: int = 1
    eval_every: int = 1
    device: str = "cpu"
    out: str | None = None
    run_id: str | None = None
    resume: bool = False
    #: add v to its own in-neighbours (the graph becomes A + I) in every strategy; None: the
    #: model's standard (on for gcn and gat, off for sage and mlp)
    self_loops: bool | None = None
    #: GCN's normalisation degrees in mini-batch training: "graph" (whole-graph degrees: a
    #: target's output does not depend on the rest of its batch) or "block" (the block's own)
    gcn_degrees: str = "graph"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def _check_types(self) -> None:
        """Each setting has its field's type (YAML ``epochs: one`` fails here, naming the key).
        Integers are accepted where a float is expected; numeric strings are not."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind = str(f.type)
            optional = "None" in kind
            if value is None and optional:
                continue
            base = kind.replace("| None", "").strip()
            if base == "int":
                ok = isinstance(value, int) and not isinstance(value, bool)
                want = "an integer"
            elif base == "float":
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                if ok:
                    setattr(self, f.name, float(value))
                want = "a number"
            elif base == "bool":
                ok, want = isinstance(value, bool), "true or false"
            elif base == "str":
                ok, want = isinstance(value, str), "a string"
            elif base.startswith("list[int]"):
                ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
                want = "a list of integers"
            elif base.startswith("dict"):
                ok, want = isinstance(value, dict), "a mapping"
            else:  # pragma: no cover - a new field type: extend this table
                continue
            if not ok:
                raise ConfigError(f"{f.name}: expected {want}, got {value!r}")

    def validate(self) -> None:
        self._check_types()
        if self.model not in MODELS:
            raise ConfigError(f"model: unknown model {self.model!r}; choose one of {', '.join(MODELS)}")
        if self.workers < 1:
            raise ConfigError(f"workers: must be >= 1, got {self.workers}")
        if self.num_layers < 1:
            raise ConfigError(f"num_layers: must be >= 1, got {self.num_layers}")
        if self.fanouts and len(self.fanouts) != self.num_layers:
            raise ConfigError(
                f"fanouts: {len(self.fanouts)} values for num_layers={self.num_layers}; give one per layer"
            )
        if any(f == 0 or f < -1 for f in self.fanouts):
            raise ConfigError(f"fanouts: each must be a positive count or -1 (full), got {self.fanouts}")
        for name in ("hidden", "batch_size", "epochs", "heads", "out_heads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("dropout", "input_dropout", "feat_drop", "attn_drop"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {getattr(self, name)}")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation: unknown {self.activation!r}; choose one of {', '.join(ACTIVATIONS)} "
                              "(or leave it unset for the model's standard one)")
        if self.aggregator not in AGGREGATORS:
            raise ConfigError(f"aggregator: unknown {self.aggregator!r}; choose one of {', '.join(AGGREGATORS)}")
        if self.gcn_degrees not in GCN_DEGREES:
            raise ConfigError(f"gcn_degrees: one of {', '.join(GCN_DEGREES)}, got {self.gcn_degrees!r}")
        if "degrees" in self.options:
            raise ConfigError("options.degrees: replaced by the gcn_degrees setting (graph or block; "
                              "--gcn-degrees)")
        if "self_loops" in self.options:
            raise ConfigError("options.self_loops: replaced by the self_loops setting (--self-loops / "
                              "--no-self-loops), applied by every strategy")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown training setting(s): {', '.join(unknown)}")
        return cls(**data)

    @property
    def adds_self_loops(self) -> bool:
        """Whether the model's graph is A + I (the ``self_loops`` setting, or the model's standard)."""
        return self.model in SELF_LOOP_MODELS if self.self_loops is None else bool(self.self_loops)

    @property
    def graph_degrees(self) -> bool:
        """Whether mini-batch GCN blocks carry whole-graph degrees."""
        return self.model == "gcn" and self.gcn_degrees == "graph"

    @property
    def run_dir(self) -> Path | None:
        return Path(self.out) if self.out else None
