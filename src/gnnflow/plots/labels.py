"""Axis titles and tick formats from the label map (:mod:`gnnflow.results.labels`)."""

from __future__ import annotations

from matplotlib.ticker import EngFormatter, Formatter, FuncFormatter, PercentFormatter

from gnnflow.results.labels import Quantity, describe


def tick_unit(q: Quantity) -> str:
    """The unit an axis title still needs once its ticks carry one (bytes, percent do)."""
    return "" if q.kind in ("bytes", "fraction", "accuracy") else q.unit


def axis_label(column: str) -> str:
    """The axis title for a column's values: its name and unit."""
    q = describe(column)
    return f"{q.name} ({tick_unit(q)})" if tick_unit(q) else q.name


def formatter(q: Quantity) -> Formatter:
    """Tick labels in the quantity's unit."""
    if q.kind in ("fraction", "accuracy"):
        return PercentFormatter(xmax=1.0, decimals=0)
    if q.kind == "bytes":
        return EngFormatter(unit="B", sep=" ")
    if q.kind == "count":
        return EngFormatter(sep="")
    return FuncFormatter(lambda v, _pos: f"{v:.3g}")
