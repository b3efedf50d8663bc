"""Paper-style figures from the results table (one function per figure kind).

Each function takes the tidy table (one row per run x epoch x rank), the figure
spec from the config (``options`` may hold ``columns``, ``logy``, ``title``,
``relative_to``), and returns a matplotlib Figure.  Times use the slowest rank
per epoch and the median over epochs, as the papers report epoch times.  Every
axis names its quantity and unit through :mod:`gnnflow.results.labels`, never by
column name; runs are named by strategy, ranks and partition.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from gnnflow.errors import GnnflowError  # noqa: E402
from gnnflow.plots.labels import axis_label, formatter  # noqa: E402
from gnnflow.plots.titles import figure_title  # noqa: E402
from gnnflow.results.labels import BENCH_RATIOS, describe, strategy_label  # noqa: E402
from gnnflow.results.table import match_runs, per_run, per_run_epoch, sweep_of  # noqa: E402

# Timer columns in stacking order (GSplit Table 3: S/L/FB; DistGNN-MB Fig. 3:
# MBC/FWD+BWD/ARed); their labels come from gnnflow.results.labels.
BREAKDOWN = ["time_sample", "time_load", "time_forward_backward", "time_comm", "time_allreduce",
             "time_wait", "time_step"]


def _rotate_labels(ax: plt.Axes) -> None:
    ax.tick_params(axis="x", labelsize=7)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")


def _label(row: pd.Series) -> str:
    label = f"{strategy_label(row['strategy'])} ×{int(row['workers'])}"
    if isinstance(row.get("cfg_partition"), str) and row.get("cfg_partition"):
        label += f" [{row['cfg_partition']}]"
    return label


def _per_run(table: pd.DataFrame, reduce: str = "median") -> pd.DataFrame:
    runs = per_run(table, reduce)
    return runs.assign(label=_unique_labels(runs))


def _unique_labels(runs: pd.DataFrame) -> pd.Series:
    """Short labels; where two runs would share one, the options that tell them apart
    (``pipeline on``), then the parts of their names that differ (``deg12``), then the run id."""
    labels = runs.apply(_label, axis=1)
    opts = [c for c in runs if c.startswith("cfg_opt_") and runs[c].astype(str).nunique() > 1]
    clash = labels.duplicated(keep=False)
    for i in runs.index[clash]:
        labels[i] += "".join(f", {c[len('cfg_opt_'):]} {_opt_text(runs.at[i, c])}" for c in opts
                             if not pd.isna(runs.at[i, c]))
    for _, group in labels[labels.duplicated(keep=False)].groupby(labels, sort=False):
        names = {i: str(runs.at[i, "run_id"]).split("-") for i in group.index}
        shared = set.intersection(*(set(n) for n in names.values()))
        for i, parts in names.items():
            labels[i] += ", " + "-".join(p for p in parts if p not in shared)
    clash = labels.duplicated(keep=False)
    return labels.where(~clash, runs["run_id"].astype(str))


def _opt_text(value: object) -> str:
    text = str(value)
    return {"true": "on", "false": "off"}.get(text.lower(), text)


def _annotate(ax: plt.Axes, bars: Any, texts: list[str]) -> None:
    """Write a short text (a value, a ratio) above each bar."""
    for bar, text in zip(bars, texts, strict=True):
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height()),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7)


def accuracy_per_epoch(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Test accuracy per epoch, one line per run (GSplit Fig. 7)."""
    per_epoch = per_run_epoch(table)
    fig, ax = plt.subplots(figsize=(6, 4))
    firsts = per_epoch.groupby("run_id", sort=False).first().reset_index()
    labels = dict(zip(firsts["run_id"], _unique_labels(firsts), strict=True))
    for run_id, g in per_epoch.groupby("run_id", sort=False):
        g = g.sort_values("epoch").dropna(subset=["test_acc"])
        ax.plot(g["epoch"] + 1, g["test_acc"], marker="o", ms=3, label=labels[run_id])
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(axis_label("test_acc"))
    ax.yaxis.set_major_formatter(formatter(describe("test_acc")))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def epoch_breakdown(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Stacked epoch-time breakdown per run (GSplit Table 3, DistGNN-MB Fig. 3), with the epoch
    time marked on each bar (phases that overlap, as in a pipeline, stack above it)."""
    runs = _per_run(table)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(runs) + 3.5), 4))
    bottom = pd.Series(0.0, index=runs.index)
    for col in BREAKDOWN:
        if col in runs and runs[col].sum() > 0:
            ax.bar(runs["label"], runs[col], bottom=bottom, label=describe(col).name)
            bottom = bottom + runs[col]
    x = range(len(runs))
    ax.scatter(x, runs["time_epoch"], marker="_", s=900, color="k", zorder=3, label="epoch time")
    for i, t in zip(x, runs["time_epoch"], strict=True):
        ax.annotate(f"{t:.3g} s", (i, max(t, bottom.iloc[i])), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7)
    ax.set_title("each phase: its slowest rank; black mark: epoch time (medians over epochs)", fontsize=8)
    ax.set_ylabel("time per epoch (s)")
    ax.margins(y=0.15)
    _rotate_labels(ax)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def epoch_time(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Median epoch time per run (DistDGLv2 Fig. 6/10, DGCL Fig. 7), with speed-ups
    over the first run (or ``options.relative_to``) on the bars."""
    runs = _per_run(table)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(runs) + 2), 4))
    bars = ax.bar(runs["label"], runs["time_epoch"])
    ref = _reference_row(runs, spec)
    _annotate(ax, bars, [f"{v:.3g} s\n{runs.at[ref, 'time_epoch'] / v:.2f}× speed-up" if i != ref else f"{v:.3g} s"
                         for i, v in zip(runs.index, runs["time_epoch"], strict=True)])
    ax.set_title(f"speed-up over {runs.at[ref, 'label']}", fontsize=9)
    ax.set_ylabel(f"{axis_label('time_epoch')}, slowest rank")
    ax.margins(y=0.2)
    if spec.get("options", {}).get("logy"):
        ax.set_yscale("log")
    _rotate_labels(ax)
    return fig


def _reference_row(runs: pd.DataFrame, spec: dict[str, Any]) -> Any:
    """The run ratios are taken against: ``options.relative_to`` (a run selector: strategy,
    partition, run, opt, ...) or the first run."""
    want = spec.get("options", {}).get("relative_to")
    if not want:
        return runs.index[0]
    mask = match_runs(runs, want)
    if mask.sum() != 1:
        raise GnnflowError(f"figure {spec['name']}: options.relative_to {want} matches {int(mask.sum())} runs; "
                           "name exactly one")
    return runs.index[mask][0]


def counters(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Chosen counter columns per run, e.g. sampled edges and features loaded (GSplit Table 1);
    with ``options.relative_to`` each bar carries its ratio to that run (Table 1's "Ratio")."""
    runs = _per_run(table)
    options = spec.get("options", {})
    columns = options.get("columns", ["sampled_edges", "features_loaded"])
    missing = [c for c in columns if c not in runs]
    if missing:
        raise GnnflowError(f"figure {spec['name']}: no column(s) {', '.join(missing)} in the results table")
    ref = _reference_row(runs, spec) if options.get("relative_to") else None
    fig, axes = plt.subplots(1, len(columns), figsize=(4 * len(columns) + 1, 4.2), squeeze=False)
    for ax, col in zip(axes[0], columns, strict=True):
        q = describe(col)
        bars = ax.bar(runs["label"], runs[col])
        texts = [q.format(v) for v in runs[col]]
        if ref is not None:
            base = runs.at[ref, col]
            texts = [f"{t}\n{v / base:.2f}×" if base else t for t, v in zip(texts, runs[col], strict=True)]
        _annotate(ax, bars, texts)
        ax.set_title(q.name + (f"\nratio to {runs.at[ref, 'label']}" if ref is not None else ""), fontsize=9)
        ax.set_ylabel(q.unit, fontsize=8)
        ax.yaxis.set_major_formatter(formatter(q))
        ax.margins(y=0.2)
        _rotate_labels(ax)
        if options.get("logy"):
            ax.set_yscale("log")
    return fig


def comm_volume(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Bytes moved between ranks per epoch (DGCL Fig. 8, DistGNN-MB remote bytes)."""
    spec = {**spec, "options": {"columns": ["remote_bytes", "bytes_sent"], "logy": True, **spec.get("options", {})}}
    return counters(table, spec)


def scaling(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Epoch time against workers per strategy, log2 x axis (MG-GCN Figs. 12-13), speed-up over
    each strategy's fewest workers at every point."""
    runs = _per_run(table)
    fig, ax = plt.subplots(figsize=(6, 4))
    for strategy, g in runs.groupby("strategy", sort=False):
        g = g.sort_values("workers")
        ax.plot(g["workers"], g["time_epoch"], marker="o", label=strategy_label(strategy))
        base = g["time_epoch"].iloc[0]
        for w, t in zip(g["workers"], g["time_epoch"], strict=True):
            ax.annotate(f"{base / t:.2f}×", (w, t), xytext=(4, 4), textcoords="offset points", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:.3g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("workers (ranks)")
    ax.set_ylabel(f"{axis_label('time_epoch')}, slowest rank")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def benchmark(table: pd.DataFrame, spec: dict[str, Any], bench_dir: Path | None = None) -> plt.Figure:
    """Headline ratios of the named benchmarks (``options.benchmarks``), one bar each."""
    names = spec.get("options", {}).get("benchmarks", [])
    if not names or bench_dir is None:
        raise GnnflowError(f"figure {spec['name']}: kind benchmark needs options.benchmarks")
    labels, ratios = [], []
    for name in names:
        path = Path(bench_dir) / f"{name}.json"
        if not path.exists():
            raise GnnflowError(f"figure {spec['name']}: benchmark result {path} is missing")
        result = json.loads(path.read_text().strip().splitlines()[-1])
        labels.append(f"{name}\n{BENCH_RATIOS.get(result.get('benchmark', name), 'headline ratio')}")
        ratios.append(float(result["ratio"]))
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(names) + 2), 4))
    bars = ax.bar(labels, ratios)
    _annotate(ax, bars, [f"{r:.3g}" for r in ratios])
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_ylabel("headline value (each bar names it; dashed: 1)")
    ax.margins(y=0.2)
    ax.tick_params(axis="x", labelsize=7)
    return fig


KINDS: dict[str, Callable[..., plt.Figure]] = {
    "accuracy-per-epoch": accuracy_per_epoch,
    "epoch-breakdown": epoch_breakdown,
    "epoch-time": epoch_time,
    "comm-volume": comm_volume,
    "scaling": scaling,
    "counters": counters,
    "benchmark": benchmark,
}


def make_figure(table: pd.DataFrame, spec: dict[str, Any], bench_dir: Path | None = None) -> plt.Figure:
    kind = spec["kind"]
    if kind not in KINDS:
        raise GnnflowError(f"figure {spec.get('name')}: unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    sweeps = spec.get("sweeps")
    if sweeps and "run_id" in table:
        table = table[sweep_of(table["run_id"]).isin(sweeps)]
        if table.empty:
            raise GnnflowError(f"figure {spec['name']}: no runs of sweeps {sweeps} in the results table")
    fig = KINDS[kind](table, spec, bench_dir) if kind == "benchmark" else KINDS[kind](table, spec)
    fig.suptitle(figure_title(spec), fontsize=10)
    fig.tight_layout()
    return fig
