"""Ratios whose two operands are recorded, so that no benchmark divides by a quoted figure.

Every benchmark's JSON holds ``ratios``: a list of entries made by :func:`ratio`,
each with its ``numerator`` and ``denominator`` as operands made by
:func:`operand`: a value, its unit, what produced it (the system and setting
run in this benchmark) and its kind:

* ``measured``: timed or read (RSS) in this run;
* ``counted``: counted in this run (edges, bytes, rows);
* ``modelled``: computed in this run by our cost model from this run's plans.

A figure quoted from a paper is not an operand; it may appear under
``context`` (:func:`context`), never inside a ratio.  :func:`check_ratios`
verifies all of this on a benchmark's result (the bench tests call it), and
the headline ``ratio`` (kept for the figures and the Snakemake rule) must be
one of the ratios, or a statistic of measured points named in ``statistics``.
"""

from __future__ import annotations

import math
from typing import Any

KINDS = ("measured", "counted", "modelled")


def operand(value: float, unit: str, what: str, kind: str = "measured") -> dict[str, Any]:
    """One side of a ratio: ``value`` in ``unit``, produced in this run by ``what``."""
    if kind not in KINDS:
        raise ValueError(f"operand kind must be one of {KINDS}, got {kind!r}")
    return {"value": float(value), "unit": unit, "what": what, "kind": kind}


def ratio(name: str, numerator: dict[str, Any], denominator: dict[str, Any],
          goal: str | None = None) -> dict[str, Any]:
    """``numerator / denominator`` with both operands kept (``goal`` e.g. ``"<= 1.0"``)."""
    den = denominator["value"]
    value = numerator["value"] / den if den else float("nan")
    return {"name": name, "value": value, "numerator": numerator, "denominator": denominator, "goal": goal}


def context(value: float, unit: str, source: str) -> dict[str, Any]:
    """A figure quoted from elsewhere (a paper), shown next to ours, never divided by."""
    return {"value": float(value), "unit": unit, "source": source, "kind": "quoted"}


def headline(result: dict[str, Any], ratios: list[dict[str, Any]], index: int = 0) -> dict[str, Any]:
    """Store ``ratios`` in ``result`` and make ``ratios[index]`` its headline ``ratio``."""
    result["ratios"] = ratios
    result["ratio"] = ratios[index]["value"]
    result["ratio_name"] = ratios[index]["name"]
    return result


def check_ratios(result: dict[str, Any]) -> list[str]:
    """Problems with ``result``'s ratios (empty when every ratio is two recorded operands)."""
    problems = []
    ratios = result.get("ratios")
    if not ratios:
        return ["no 'ratios' recorded"]
    for r in ratios:
        name = r.get("name", "?")
        for side in ("numerator", "denominator"):
            op = r.get(side)
            if not isinstance(op, dict) or op.get("kind") not in KINDS:
                problems.append(f"{name}: {side} is not a measured, counted or modelled operand: {op!r}")
            elif not op.get("what") or not op.get("unit"):
                problems.append(f"{name}: {side} does not say what produced it")
        if problems:
            continue
        num, den = r["numerator"]["value"], r["denominator"]["value"]
        expect = num / den if den else float("nan")
        if not (math.isclose(r["value"], expect, rel_tol=1e-9) or (math.isnan(expect) and math.isnan(r["value"]))):
            problems.append(f"{name}: value {r['value']} is not {num} / {den}")
    head = result.get("ratio")
    names = {r.get("name"): r.get("value") for r in ratios}
    stats = result.get("statistics", {})
    if result.get("ratio_name") in names:
        if not math.isclose(head, names[result["ratio_name"]], rel_tol=1e-9):
            problems.append(f"headline ratio {head} is not the ratio {result['ratio_name']!r}")
    elif result.get("ratio_name") in stats:
        if not math.isclose(head, stats[result["ratio_name"]]["value"], rel_tol=1e-9):
            problems.append(f"headline {head} is not the statistic {result['ratio_name']!r}")
    else:
        problems.append(f"headline {result.get('ratio_name')!r} is neither a recorded ratio nor a statistic")
    return problems
