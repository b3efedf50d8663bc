"""One figure per claim: ours as bars, the paper's value as a labelled reference mark.

The paper's number is drawn as what it is, a quotation: a shaded band (a
range), a dashed line (a value or bound) or per-group diamonds (an order),
each labelled "paper: … (Table 1)".  Bars are only ever ours, one per results
table (small, full).  A claim that is not measurable here is drawn in grey and
says so; a claim with nothing measured gets no figure.
"""

from __future__ import annotations

import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gnnflow.results.claims import Claim  # noqa: E402
from gnnflow.results.labels import describe  # noqa: E402
from gnnflow.results.scorecard import (  # noqa: E402
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    SAME_DIRECTION,
    Verdict,
    paper_text,
    side_label,
    value_quantity,
)

COLORS = {REPRODUCED: "#2e7d32", SAME_DIRECTION: "#ef8f00", NOT_REPRODUCED: "#c62828", NOT_MEASURABLE: "#9e9e9e"}
PAPER_COLOR = "#5e35b1"
HATCHES = ("", "//", "..")  # one per results table (small, full, ...)


def claim_figure(claim: Claim, verdicts: list[Verdict]) -> plt.Figure | None:
    """The claim's figure over its verdicts (one per results table), or None if nothing was measured."""
    measured = [v for v in verdicts if v.measured]
    if not measured:
        return None
    if claim.compare == "order":
        fig = _order_figure(claim, measured)
    else:
        fig = _bar_figure(claim, measured)
    fig.suptitle(f"{claim.id}: {claim.ref}", fontsize=9)
    fig.tight_layout()
    return fig


def _bar_figure(claim: Claim, verdicts: list[Verdict]) -> plt.Figure:
    """Ratio, value or difference: one horizontal bar per table, the paper's value behind them."""
    q = value_quantity(claim)
    scale = 100.0 if q.kind in ("fraction", "accuracy", "points") else 1.0
    fig, ax = plt.subplots(figsize=(6.4, 1.6 + 0.5 * len(verdicts)))
    labels = [f"ours ({v.label})" for v in verdicts]
    values = [abs(v.measurement.value) if claim.compare == "difference" else v.measurement.value
              for v in verdicts]  # type: ignore[union-attr]
    bars = ax.barh(labels, [scale * x for x in values], color=[COLORS[v.verdict] for v in verdicts], height=0.5,
                   zorder=2)
    for bar, v, x in zip(bars, verdicts, values, strict=True):
        text = q.format(x) + ("  (context only: not measurable here)" if v.verdict == NOT_MEASURABLE else "")
        ax.annotate(text, (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=7, zorder=3)
    _paper_marks(ax, claim, scale)
    bounds = claim.paper.bounds()
    if claim.compare == "ratio" and bounds and bounds[0] > 0 and bounds[1] / bounds[0] > 20:
        ax.set_xscale("log")  # a range over orders of magnitude (Table 3's loading times)
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi * 3)
    else:
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(lo, 0), hi * 1.45 if hi > 0 else hi)
    ax.set_title(_x_label(claim), fontsize=8)
    ax.invert_yaxis()
    ax.tick_params(axis="both", labelsize=8)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    return fig


def _x_label(claim: Claim) -> str:
    q = value_quantity(claim)
    unit = {"fraction": "%", "accuracy": "%", "points": "percentage points"}.get(q.kind, q.unit)
    if claim.compare == "ratio":
        assert claim.of is not None
        if claim.over is None:  # a benchmark's own ratio
            return f"{side_label(claim.of)} (×)"
        what = describe(claim.of.key if claim.of.bench else claim.metric or "").name
        return f"{what}: {side_label(claim.of)} ÷ {side_label(claim.over)} (×)"
    if claim.compare == "difference":
        assert claim.of is not None and claim.over is not None
        return f"|{q.name}: {side_label(claim.of)} − {side_label(claim.over)}| ({unit})"
    assert claim.of is not None
    what = describe(claim.of.key).name if claim.of.bench else q.name
    return f"{what}, {side_label(claim.of)}" + (f" ({unit})" if unit else "")


def _paper_marks(ax: plt.Axes, claim: Claim, scale: float) -> None:
    """The paper's value as a labelled reference: band (range), dashed line (value, bound)."""
    p = claim.paper
    label = f"paper: {paper_text(claim)} ({claim.ref})"
    if claim.compare == "ratio":
        ax.axvline(1.0, color="k", lw=0.8, ls=":", label="1 = no difference", zorder=4)
    if claim.compare == "difference" and claim.within is not None:
        ax.axvline(scale * claim.within, color=PAPER_COLOR, lw=1.2, ls="--",
                   label=f"our tolerance for \"{p.quote or 'no number given'}\" ({claim.ref})")
        return
    if p.low is not None and p.high is not None:
        ax.axvspan(scale * p.low, scale * p.high, color=PAPER_COLOR, alpha=0.25, label=label, zorder=1)
    elif p.value is not None:
        ax.axvline(scale * p.value, color=PAPER_COLOR, lw=1.5, ls="--", label=label, zorder=4)
    elif p.at_most is not None:
        ax.axvline(scale * p.at_most, color=PAPER_COLOR, lw=1.5, ls="--", label=label, zorder=4)
    elif p.at_least is not None:
        ax.axvline(scale * p.at_least, color=PAPER_COLOR, lw=1.5, ls="--", label=label, zorder=4)
    elif p.direction:
        ax.plot([], [], " ", label=label)  # no number to draw: the legend says so


def _order_figure(claim: Claim, verdicts: list[Verdict]) -> plt.Figure:
    """Order: the groups in the claimed order, ours as bars per table, the paper's values as diamonds."""
    q = describe(claim.groups[0].metric)
    scale = 100.0 if q.kind in ("fraction", "accuracy") else 1.0
    n, k = len(claim.groups), len(verdicts)
    fig, ax = plt.subplots(figsize=(max(5.5, 1.3 * n + 2.5), 3.2))
    width = 0.7 / k
    for j, v in enumerate(verdicts):
        xs = [i + (j - (k - 1) / 2) * width for i in range(n)]
        ys = [v.measurement.parts[g.label] for g in claim.groups]  # type: ignore[union-attr]
        bars = ax.bar(xs, [scale * y for y in ys], width=width, color=COLORS[v.verdict], hatch=HATCHES[j % 3],
                      label=f"ours ({v.label})" + (", context only" if v.verdict == NOT_MEASURABLE else ""))
        for bar, y in zip(bars, ys, strict=True):
            ax.annotate(q.format(y, precise=True), (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
    paper = [(i, g.paper) for i, g in enumerate(claim.groups) if g.paper is not None and not math.isnan(g.paper)]
    if paper:
        ax.scatter([i for i, _ in paper], [scale * y for _, y in paper], marker="D", s=40, color=PAPER_COLOR,
                   zorder=3, label=f"paper ({claim.ref}{', ' + claim.dataset if claim.dataset else ''})")
    ax.set_xticks(range(n), [g.label for g in claim.groups], fontsize=8)
    unit = "%" if scale == 100.0 else q.unit
    names = [describe(g.metric).name for g in claim.groups]
    name = names[0] if len(set(names)) == 1 else os.path.commonprefix(names).rstrip(" ,(") or "value"
    ax.set_ylabel(name + (f" ({unit})" if unit else ""), fontsize=8)
    ax.set_title(f"claimed order: {'decreasing' if claim.expect == 'descending' else 'increasing'} left to right",
                 fontsize=8)
    ax.margins(y=0.2)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    return fig
