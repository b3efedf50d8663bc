"""Verdicts on a paper's claims from a results table (``gnnflow results scorecard``).

For each claim of a claims file (:mod:`gnnflow.results.claims`) and each
results table given (the small variant, the full one when it was run):

1. *measure*: reduce every run the claim names to one value of its metric
   (ranks collapsed as :func:`gnnflow.results.table.per_run_epoch` does, then
   the median over epochs, or the last epoch for accuracies) or read a
   benchmark result, and combine them as the claim compares (a ratio, a value,
   a difference, an order);
2. *judge* the measurement against the paper's quoted number(s):

   - **reproduced**: ours lies in the paper's value or range, widened by the
     claim's relative ``tolerance`` (default 10 %); an order holds at every step;
     a difference is within ``within``; a direction-only ratio is beyond
     ``1 ± tolerance`` on the claimed side;
   - **same direction**: ours is on the paper's side of 1 (a ratio) or the
     order's ends are right, but the size is not the paper's;
   - **not reproduced**: otherwise;
   - **not measurable here**: the claim needs what the runs did not have
     (GPUs, many ranks, DGX-1 links: ``needs``), or a run, column or
     benchmark it reads is missing; the reason says which.  Where the runs
     exist, ours is still shown, for context only.

The paper's numbers are quoted from the claims file and never enter a
measurement; the scorecard prints them in their own column.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gnnflow.errors import ConfigError
from gnnflow.results.claims import Claim, Claims, PaperValue, Source
from gnnflow.results.labels import Quantity, describe, strategy_label
from gnnflow.results.table import match_runs, per_run, per_run_epoch, sweep_of

REPRODUCED = "reproduced"
SAME_DIRECTION = "same direction"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURABLE = "not measurable here"
VERDICTS = (REPRODUCED, SAME_DIRECTION, NOT_REPRODUCED, NOT_MEASURABLE)


class Unmeasurable(Exception):
    """A claim cannot be measured from this table; the message is the reason."""


@dataclass
class Measurement:
    """Ours for one claim on one table: the combined value and the parts it came from."""

    value: float = float("nan")
    parts: dict[str, float] = field(default_factory=dict)  # side/group label -> its metric value
    devices: set[str] = field(default_factory=set)
    workers: list[int] = field(default_factory=list)


@dataclass
class Verdict:
    claim: Claim
    label: str  # which table: small, full, ...
    verdict: str
    reason: str
    measurement: Measurement | None = None

    @property
    def measured(self) -> bool:
        """Whether ours exists (an order's values count; other kinds need their combined value)."""
        m = self.measurement
        if m is None:
            return False
        return bool(m.parts) if self.claim.compare == "order" else not math.isnan(m.value)


# ------------------------------------------------------------------------------------------------
# measuring
# ------------------------------------------------------------------------------------------------


class RunIndex:
    """The table's runs, reduced per run, and the benchmark results beside it."""

    def __init__(self, table: pd.DataFrame, bench_dir: str | Path | None = None) -> None:
        self.table = table
        self.bench_dir = Path(bench_dir) if bench_dir else None
        self._runs: dict[str, pd.DataFrame] = {}

    def runs(self, reduce: str) -> pd.DataFrame:
        if reduce not in self._runs:
            runs = per_run(self.table, reduce)
            self._runs[reduce] = runs.assign(sweep=sweep_of(runs["run_id"]))
        return self._runs[reduce]

    def select(self, source: Source, reduce: str, claim: Claim) -> pd.Series:
        """The one run a selector names; none is unmeasurable, several is a claims-file error."""
        runs = self.runs(reduce)
        hits = runs[match_runs(runs, source.select)]
        if hits.empty:
            raise Unmeasurable(f"the results table has no run with {source.describe()}")
        if len(hits) > 1:
            raise ConfigError(f"claim {claim.id}: the selector ({source.describe()}) matches {len(hits)} runs "
                              f"({', '.join(hits['run_id'].astype(str))}); narrow it (add run, partition or opt)")
        return hits.iloc[0]

    def bench_value(self, source: Source) -> tuple[float, str]:
        """A benchmark result's value at ``source.key`` and the device it ran on."""
        if self.bench_dir is None:
            raise Unmeasurable(f"benchmark {source.bench} was not given (pass --bench-dir)")
        path = self.bench_dir / f"{source.bench}.json"
        if not path.exists():
            raise Unmeasurable(f"benchmark {source.bench} was not run ({path} is missing)")
        lines = path.read_text().strip().splitlines()
        try:
            value: Any = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            raise ConfigError(f"{path}: not a benchmark result (last line is not JSON)") from None
        result = value
        for part in source.key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise Unmeasurable(f"benchmark {source.bench} has no value {source.key}")
            value = value[part]
        machine = result.get("machine") if isinstance(result, dict) else None
        device = "cuda" if isinstance(machine, dict) and machine.get("cuda") else "cpu"
        return float(value), device


def _metric(row: pd.Series, metric: str) -> float:
    """A column of a reduced run, or a share ``a / b`` of two."""
    cols = [c.strip() for c in metric.split(" / ")] if " / " in metric else [metric]
    vals = []
    for c in cols:
        if c not in row.index or pd.isna(row[c]):
            raise Unmeasurable(f"run {row['run_id']} does not record {describe(c).name}")
        vals.append(float(row[c]))
    if len(vals) == 2:
        return vals[0] / vals[1] if vals[1] else float("nan")
    return vals[0]


def _side(index: RunIndex, claim: Claim, source: Source, metric: str, m: Measurement) -> float:
    if source.bench:
        value, device = index.bench_value(source)
        m.devices.add(device)
        return value
    row = index.select(source, claim.reduce, claim)
    if "cfg_device" in row.index and isinstance(row["cfg_device"], str):
        m.devices.add(row["cfg_device"])
    else:
        m.devices.add("cpu")
    m.workers.append(int(row.get("workers", 1)))
    return _metric(row, metric)


def side_label(source: Source) -> str:
    """How a side of a comparison is named: its label, else its strategy's name."""
    if source.label:
        return source.label
    if source.bench:
        return f"benchmark {source.bench}"
    if "strategy" in source.select:
        return strategy_label(source.select["strategy"])
    return str(source.select.get("run") or source.describe())


def measure(claim: Claim, index: RunIndex) -> Measurement:
    """Ours for a claim; raises Unmeasurable with the reason when the table cannot say."""
    m = Measurement()
    if claim.compare == "order":
        for g in claim.groups:
            m.parts[g.label] = _side(index, claim, g.source, g.metric, m)
        return m
    assert claim.of is not None and claim.metric is not None
    a = _side(index, claim, claim.of, claim.metric, m)
    m.parts[side_label(claim.of)] = a
    if claim.compare == "value" or claim.over is None:  # a value, or a benchmark's own ratio
        m.value = a
        return m
    b = _side(index, claim, claim.over, claim.metric, m)
    m.parts[side_label(claim.over)] = b
    if claim.compare == "ratio":
        m.value = a / b if b else float("nan")
        if math.isnan(m.value):
            raise Unmeasurable(f"{side_label(claim.over)} measured 0, so the ratio is undefined")
    elif claim.per_epoch:
        m.value = _max_epoch_difference(index, claim)
    else:
        m.value = a - b
    return m


def _max_epoch_difference(index: RunIndex, claim: Claim) -> float:
    """The largest |of - over| over the epochs both runs have (GSplit Fig. 7's curves)."""
    assert claim.of is not None and claim.over is not None and claim.metric is not None
    ids = [str(index.select(s, claim.reduce, claim)["run_id"]) for s in (claim.of, claim.over)]
    per_epoch = per_run_epoch(index.table[index.table["run_id"].astype(str).isin(ids)])
    curves = [per_epoch[per_epoch["run_id"].astype(str) == i].set_index("epoch")[claim.metric] for i in ids]
    diff = (curves[0] - curves[1]).dropna()
    if diff.empty:
        raise Unmeasurable("the two runs share no epoch with a measured value")
    return float(diff.abs().max())


# ------------------------------------------------------------------------------------------------
# judging
# ------------------------------------------------------------------------------------------------


def _needs_unmet(claim: Claim, m: Measurement) -> str | None:
    needs = claim.needs
    if needs is None:
        return None
    if not needs.conditional():
        return needs.reason
    if needs.device and not all(d.startswith(needs.device) for d in m.devices):
        return f"{needs.reason} (these runs trained on {', '.join(sorted(m.devices)) or 'cpu'})"
    if needs.workers and min(m.workers, default=0) < needs.workers:
        return f"{needs.reason} (these runs used {min(m.workers, default=0)} ranks)"
    return None


def judge(claim: Claim, m: Measurement) -> tuple[str, str]:
    """(verdict, reason) for a measured claim."""
    q = value_quantity(claim)
    ours = q.format(m.value)
    p, tol = claim.paper, claim.tolerance
    if claim.compare == "order":
        vals = [m.parts[g.label] for g in claim.groups]
        sign = -1 if claim.expect == "descending" else 1
        steps = [sign * (b - a) > 0 for a, b in zip(vals, vals[1:], strict=False)]
        listing = " > " if claim.expect == "descending" else " < "
        claimed = listing.join(g.label for g in claim.groups)
        fmt = describe(claim.groups[0].metric)
        got = ", ".join(f"{g.label} {fmt.format(v, precise=True)}" for g, v in zip(claim.groups, vals, strict=True))
        if all(steps):
            return REPRODUCED, f"{claimed} holds ({got})"
        if sign * (vals[-1] - vals[0]) > 0:
            return SAME_DIRECTION, f"the ends are ordered as claimed but not every step ({got})"
        return NOT_REPRODUCED, f"{claimed} does not hold ({got})"
    if claim.compare == "difference":
        assert claim.within is not None
        what = "largest difference over epochs" if claim.per_epoch else "difference"
        if abs(m.value) <= claim.within:
            return REPRODUCED, f"{what} {ours}, within {q.format(claim.within)}"
        return NOT_REPRODUCED, f"{what} {ours}, beyond {q.format(claim.within)}"
    bounds = p.bounds()
    if bounds is not None:
        lo, hi = bounds
        lo_t = lo / (1 + tol) if lo > 0 else lo * (1 + tol)
        hi_t = hi * (1 + tol) if hi > 0 else hi / (1 + tol)
        if lo_t <= m.value <= hi_t:
            return REPRODUCED, f"ours {ours} is within the paper's {paper_text(claim)} (±{tol:.0%})"
    direction = p.direction or _implied_direction(claim, p)
    if claim.compare == "ratio" and direction:
        above = m.value > 1
        if bounds is None:  # direction only: the effect must clear the tolerance
            clear = m.value > 1 + tol if direction == "above" else m.value < 1 / (1 + tol)
            if clear:
                return REPRODUCED, f"ours {ours}, {'above' if direction == 'above' else 'below'} 1 as claimed"
            if above == (direction == "above") and m.value != 1:
                return SAME_DIRECTION, f"ours {ours}: the claimed direction, but within ±{tol:.0%} of no effect"
            return NOT_REPRODUCED, f"ours {ours}: {'above' if above else 'below'} 1, the paper's is {direction}"
        if above == (direction == "above") and m.value != 1:
            return SAME_DIRECTION, f"ours {ours} is on the paper's side of 1 but outside its {paper_text(claim)}"
        return NOT_REPRODUCED, f"ours {ours} is on the other side of 1 from the paper's {paper_text(claim)}"
    return NOT_REPRODUCED, f"ours {ours} is outside the paper's {paper_text(claim)} (±{tol:.0%})"


def _implied_direction(claim: Claim, p: PaperValue) -> str | None:
    """A ratio's direction from its numbers: all above 1 or all below."""
    b = p.bounds()
    if claim.compare != "ratio" or b is None:
        return None
    if b[0] > 1:
        return "above"
    if b[1] < 1:
        return "below"
    return None


def evaluate(claim: Claim, index: RunIndex, label: str) -> Verdict:
    try:
        m = measure(claim, index)
    except Unmeasurable as exc:
        reason = claim.needs.reason if claim.needs and not claim.needs.conditional() else str(exc)
        return Verdict(claim, label, NOT_MEASURABLE, reason)
    unmet = _needs_unmet(claim, m)
    if unmet:
        return Verdict(claim, label, NOT_MEASURABLE, unmet, m)
    verdict, reason = judge(claim, m)
    return Verdict(claim, label, verdict, reason, m)


# ------------------------------------------------------------------------------------------------
# the scorecard table
# ------------------------------------------------------------------------------------------------


def value_quantity(claim: Claim) -> Quantity:
    """The quantity a claim's combined value is (a ratio is ×, a value or difference the metric's)."""
    if claim.compare == "ratio":
        return Quantity("ratio", "×", "ratio")
    metric = claim.metric or claim.groups[0].metric
    q = describe(metric)
    if claim.compare == "difference" and q.kind in ("fraction", "accuracy"):
        return Quantity(q.name, "points", "points")
    return q


def paper_text(claim: Claim) -> str:
    """The paper's value as the scorecard prints it: ``1.2–2.5×``, ``≤ 16.2 s``, or the quote."""
    q = value_quantity(claim)
    p = claim.paper
    if claim.compare == "order" and any(g.paper is not None for g in claim.groups):
        fmt = _group_quantity(claim)
        return ", ".join(f"{g.label} {fmt.format(g.paper)}" for g in claim.groups if g.paper is not None)
    if p.value is not None:
        return q.format(p.value)
    if p.low is not None and p.high is not None:
        a, b = q.format(p.low), q.format(p.high)
        return f"{a}–{b}" if q.kind != "ratio" else f"{a[:-1]}–{b}"
    if p.at_most is not None:
        return f"≤ {q.format(p.at_most)}"
    if p.at_least is not None:
        return f"≥ {q.format(p.at_least)}"
    if p.direction:
        return "above 1 (no number given)" if p.direction == "above" else "below 1 (no number given)"
    return p.quote or "no number given"


def _group_quantity(claim: Claim) -> Quantity:
    return describe(claim.groups[0].metric)


def measured_as(claim: Claim) -> str:
    """How ours is measured, in words (label map names, never column names)."""
    reduce = "final epoch" if claim.reduce == "last" else "median over epochs"
    if claim.per_epoch:
        reduce = "epoch by epoch"

    def what(metric: str) -> str:
        q = describe(metric)
        return f"{q.name} ({q.unit + '; ' if q.unit else ''}{reduce})"

    if claim.compare == "order":
        names = sorted({what(g.metric) for g in claim.groups})
        order = "decreasing" if claim.expect == "descending" else "increasing"
        return f"{'; '.join(names)}, expected {order}: " + ", ".join(g.label for g in claim.groups)
    assert claim.of is not None and claim.metric is not None
    op = "÷" if claim.compare == "ratio" else "−"
    if claim.of.bench:
        base = f"benchmark {claim.of.bench}: {describe(claim.of.key).name}"
        if claim.of.key == "ratio":
            base = f"benchmark {claim.of.bench}: its headline ratio, {side_label(claim.of)}"
        if claim.over is not None and claim.over.bench:
            return f"{base} {op} {describe(claim.over.key).name}"
        return base
    base = what(claim.metric)
    if claim.compare == "value":
        return f"{base}: {side_label(claim.of)}"
    assert claim.over is not None
    tail = ", the largest difference" if claim.per_epoch else ""
    return f"{base}: {side_label(claim.of)} {op} {side_label(claim.over)}{tail}"


def scorecard(claims: Claims, tables: dict[str, pd.DataFrame],
              bench_dirs: dict[str, str | Path | None] | None = None) -> list[Verdict]:
    """Every claim judged on every table (label -> table), claim-major."""
    indexes = {label: RunIndex(t, (bench_dirs or {}).get(label)) for label, t in tables.items()}
    return [evaluate(c, idx, label) for c in claims.claims for label, idx in indexes.items()]


def ours_text(v: Verdict) -> str:
    """Ours as printed: the combined value, or an order's values in the claimed order."""
    m = v.measurement
    if m is None:
        return "—"
    if v.claim.compare == "order":
        q = _group_quantity(v.claim)
        return ", ".join(f"{g.label} {q.format(m.parts[g.label], precise=True)}" for g in v.claim.groups)
    return value_quantity(v.claim).format(m.value) if v.measured else "—"


def scorecard_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """One row per claim: the paper's value, ours and the verdict per table, with human headers."""
    rows: dict[str, dict[str, Any]] = {}
    for v in verdicts:
        c = v.claim
        row = rows.setdefault(c.id, {
            "claim": c.id, "statement": c.statement, "in the paper": c.ref, "paper's dataset": c.dataset,
            "paper's hardware": c.hardware,
            "paper (quoted)": paper_text(c), "measured here as": measured_as(c)})
        ours = ours_text(v)
        if ours != "—" and v.verdict == NOT_MEASURABLE:
            ours += " (context only)"
        row[f"ours ({v.label})"] = ours
        row[f"verdict ({v.label})"] = v.verdict
        row[f"why ({v.label})"] = v.reason + (f"; {c.note}" if c.note else "")
    return pd.DataFrame(list(rows.values()))


def counts(verdicts: list[Verdict]) -> dict[str, dict[str, int]]:
    """Per table label, how many claims got each verdict."""
    out: dict[str, dict[str, int]] = {}
    for v in verdicts:
        out.setdefault(v.label, dict.fromkeys(VERDICTS, 0))[v.verdict] += 1
    return out


def to_markdown(frame: pd.DataFrame, columns: list[str] | None = None) -> str:
    """A Markdown table of the scorecard (for the README and terminals that render it); by
    default the compact columns: claim, where, the paper's value, ours and the verdict per table."""
    cols = columns or ["claim", "in the paper", "paper (quoted)"] + [
        c for c in frame.columns if c.startswith(("ours (", "verdict ("))]
    esc = [[str(r[c]).replace("|", "\\|") for c in cols] for _, r in frame.iterrows()]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


def scorecard_text(frame: pd.DataFrame) -> str:
    """The scorecard for a terminal: one block per claim."""
    lines = []
    for _, row in frame.iterrows():
        where = " · ".join(str(row[c]) for c in ("in the paper", "paper's dataset", "paper's hardware") if row[c])
        lines.append(f"{row['claim']}  [{where}]")
        lines.append(f"  {row['statement']}")
        lines.append(f"  paper (quoted): {row['paper (quoted)']}")
        for c in frame.columns:
            if c.startswith("ours ("):
                label = c[len("ours ("):-1]
                lines.append(f"  {label}: ours {row[c]} -> {row[f'verdict ({label})']}: {row[f'why ({label})']}")
        lines.append("")
    return "\n".join(lines)
