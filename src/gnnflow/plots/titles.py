"""A figure's title: what it shows, in words (the report's label and the figure's heading)."""

from __future__ import annotations

from typing import Any

from gnnflow.results.labels import describe

#: what a figure of each kind shows
KIND_TITLES = {
    "accuracy-per-epoch": "Test accuracy per epoch",
    "epoch-breakdown": "Epoch time by stage (each stage's slowest rank)",
    "epoch-time": "Epoch time per run",
    "comm-volume": "Bytes moved between ranks per epoch",
    "scaling": "Epoch time as the ranks grow",
    "counters": "Counts per epoch",
    "benchmark": "Benchmark ratios against their peers",
}


def figure_title(spec: dict[str, Any]) -> str:
    """The spec's own ``title`` (or ``options.title``), else what its kind shows; a counters figure
    names the quantities it plots."""
    title = spec.get("title") or (spec.get("options") or {}).get("title")
    if title:
        return str(title)
    columns = (spec.get("options") or {}).get("columns")
    if spec.get("kind") == "counters" and columns:
        names = [describe(c).name for c in columns]
        return (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]) + " per epoch"
    return KIND_TITLES.get(str(spec.get("kind")), str(spec.get("name")))
