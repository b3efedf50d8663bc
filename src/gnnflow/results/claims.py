"""A paper's headline claims as data (``config/paper/<paper>.claims.yaml``).

Each claim quotes the paper's number(s) and where they stand (table or figure,
dataset, hardware) and names how the results table measures it: which metric,
which run(s), and how to compare (``ratio``, ``value``, ``difference``,
``order``).  The file is checked against ``workflow/schemas/claims.schema.yaml``
and then for what a schema cannot say (a range's ends in order, a paper value a
comparison can use); every failure is one line naming the file and the key.
:mod:`gnnflow.results.scorecard` turns claims and a table into verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gnnflow.config import key_path
from gnnflow.errors import ConfigError

SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "claims.schema.yaml"
SELECT_KEYS = ("run", "sweep", "strategy", "partition", "dataset", "model", "workers", "opt")


@dataclass(frozen=True)
class Source:
    """One side of a comparison: a run of the table (by selector) or a benchmark's value."""

    select: dict[str, Any]
    label: str | None = None
    bench: str | None = None
    key: str = "ratio"

    @classmethod
    def parse(cls, spec: dict[str, Any]) -> Source:
        spec = dict(spec)
        label, bench, key = spec.pop("label", None), spec.pop("bench", None), spec.pop("key", "ratio")
        return cls(select=spec, label=label, bench=bench, key=key)

    def describe(self) -> str:
        """The selector in words, for messages: ``sweep table3, strategy data``."""
        if self.bench:
            return f"benchmark {self.bench} ({self.key})"
        return ", ".join(f"{k} {v}" for k, v in self.select.items())


@dataclass(frozen=True)
class PaperValue:
    """The paper's number(s) for a claim, exactly as quoted."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    at_most: float | None = None
    at_least: float | None = None
    direction: str | None = None
    quote: str = ""

    @classmethod
    def parse(cls, spec: dict[str, Any]) -> PaperValue:
        low, high = spec.get("range", (None, None))
        return cls(value=spec.get("value"), low=low, high=high, at_most=spec.get("at_most"),
                   at_least=spec.get("at_least"), direction=spec.get("direction"), quote=spec.get("quote", ""))

    def bounds(self) -> tuple[float, float] | None:
        """The interval the paper states (a value is a one-point interval), or None."""
        if self.value is not None:
            return (self.value, self.value)
        if self.low is not None and self.high is not None:
            return (self.low, self.high)
        lo = self.at_least if self.at_least is not None else None
        hi = self.at_most if self.at_most is not None else None
        if lo is None and hi is None:
            return None
        return (lo if lo is not None else float("-inf"), hi if hi is not None else float("inf"))

    def has_number(self) -> bool:
        return self.bounds() is not None


@dataclass(frozen=True)
class Group:
    """One entry of an ``order`` claim."""

    label: str
    source: Source
    metric: str
    paper: float | None = None


@dataclass(frozen=True)
class Needs:
    """What a run must have for the claim to be measurable; no condition means never here."""

    reason: str
    device: str | None = None
    workers: int | None = None

    def conditional(self) -> bool:
        return self.device is not None or self.workers is not None


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    ref: str
    dataset: str
    hardware: str
    paper: PaperValue
    compare: str
    metric: str | None = None
    reduce: str = "median"
    of: Source | None = None
    over: Source | None = None
    groups: tuple[Group, ...] = ()
    expect: str | None = None
    within: float | None = None
    per_epoch: bool = False
    tolerance: float = 0.1
    needs: Needs | None = None
    note: str = ""

    def where(self) -> str:
        """Where the claim stands in the paper: ``Table 1 · Orkut, Papers100M · 4× V100``."""
        return " · ".join(p for p in (self.ref, self.dataset, self.hardware) if p)

    def sources(self) -> list[Source]:
        return [s for s in (self.of, self.over) if s is not None] + [g.source for g in self.groups]

    def benches(self) -> set[str]:
        return {s.bench for s in self.sources() if s.bench}


@dataclass
class Claims:
    """A claims file: the paper and its claims in order."""

    path: Path
    paper: str
    source: str
    claims: list[Claim] = field(default_factory=list)

    def benches(self) -> set[str]:
        """Benchmarks (``bench/NAME.json``) the claims read."""
        return set().union(*(c.benches() for c in self.claims)) if self.claims else set()


def load_claims(path: str | Path) -> Claims:
    """Read and check a claims file; raise ConfigError naming the file and key."""
    import jsonschema

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such claims file (see config/paper/*.claims.yaml)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    schema = yaml.safe_load(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        best = jsonschema.exceptions.best_match(errors) or errors[0]
        raise ConfigError(f"{path}: key {key_path(tuple(best.absolute_path))}: {best.message}")
    claims = Claims(path=path, paper=data["paper"], source=data.get("source", ""))
    seen: set[str] = set()
    for i, spec in enumerate(data["claims"]):
        where = f"{path}: key claims[{i}]"
        if spec["id"] in seen:
            raise ConfigError(f"{where}.id: claim id {spec['id']!r} is used twice; ids must be unique")
        seen.add(spec["id"])
        claims.claims.append(_claim(spec, data.get("hardware", ""), where))
    return claims


def _claim(spec: dict[str, Any], hardware: str, where: str) -> Claim:
    paper = PaperValue.parse(spec["paper"])
    if paper.low is not None and paper.high is not None and paper.low > paper.high:
        raise ConfigError(f"{where}.paper.range: {paper.low} > {paper.high}; give [low, high]")
    compare = spec["compare"]
    if compare == "ratio" and not (paper.has_number() or paper.direction):
        raise ConfigError(f"{where}.paper: a ratio claim needs the paper's value, range, bound or direction")
    if compare == "value" and not paper.has_number():
        raise ConfigError(f"{where}.paper: a value claim needs the paper's value, range or bound")
    if paper.direction and compare != "ratio":
        raise ConfigError(f"{where}.paper.direction: only a ratio claim has a direction (above/below 1)")
    if compare == "ratio" and "over" not in spec and not spec["of"].get("bench"):
        raise ConfigError(f"{where}.over: a ratio divides `of` by `over`; only a benchmark's ratio stands alone")
    for side in ("of", "over"):
        if side in spec and spec[side].get("key") and not spec[side].get("bench"):
            raise ConfigError(f"{where}.{side}.key: a key reads a benchmark result; name the bench too")
    metric = spec.get("metric")
    if metric is None and spec.get("of", {}).get("bench"):
        metric = spec["of"].get("key", "ratio")  # a benchmark's value is named by its key
    if metric is None and compare != "order":
        raise ConfigError(f"{where}.metric: name the results-table column the claim compares")
    groups = tuple(Group(label=g["label"], source=Source.parse(g["select"]), metric=g.get("metric", spec["metric"]),
                         paper=g.get("paper")) for g in spec.get("groups", []))
    needs = Needs(**spec["needs"]) if "needs" in spec else None
    w = spec["where"]
    return Claim(
        id=spec["id"], statement=spec["statement"], ref=w["ref"], dataset=w.get("dataset", ""),
        hardware=w.get("hardware", hardware), paper=paper, compare=compare, metric=metric,
        reduce=spec.get("reduce", "median"),
        of=Source.parse(spec["of"]) if "of" in spec else None,
        over=Source.parse(spec["over"]) if "over" in spec else None,
        groups=groups, expect=spec.get("expect"), within=spec.get("within"),
        per_epoch=bool(spec.get("per_epoch", False)), tolerance=float(spec.get("tolerance", 0.1)),
        needs=needs, note=spec.get("note", ""))
