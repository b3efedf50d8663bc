"""Paper-style figures from the results table (one function per figure kind).

Each function takes the tidy table (one row per run x epoch x rank), the figure
spec from the config (``options`` may hold ``columns``, ``logy``, ``title``), and
returns a matplotlib Figure.  Times use the slowest rank per epoch and the
median over epochs, as the papers report epoch times.
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
from matplotlib.ticker import MaxNLocator  # noqa: E402

from gnnflow.errors import GnnflowError  # noqa: E402
from gnnflow.results.table import per_run_epoch  # noqa: E402

# Timer columns in stacking order with the papers' labels (GSplit Table 3: S/L/FB;
# DistGNN-MB Fig. 3: MBC/FWD+BWD/ARed).
BREAKDOWN = [
    ("time_sample", "sampling (S / MBC)"),
    ("time_load", "feature loading (L)"),
    ("time_forward_backward", "forward+backward (FB)"),
    ("time_comm", "communication"),
    ("time_allreduce", "all-reduce (ARed)"),
    ("time_wait", "waiting"),
    ("time_step", "optimizer step"),
]


def _rotate_labels(ax: plt.Axes) -> None:
    ax.tick_params(axis="x", labelsize=7)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")


def _label(row: pd.Series) -> str:
    label = f"{row['strategy']} ×{int(row['workers'])}"
    if isinstance(row.get("cfg_partition"), str) and row.get("cfg_partition"):
        label += f" [{row['cfg_partition']}]"
    return label


def _per_run(table: pd.DataFrame) -> pd.DataFrame:
    per_epoch = per_run_epoch(table)
    numeric = per_epoch.select_dtypes("number").columns.difference(["epoch"])
    firsts = [c for c in per_epoch if c not in numeric and c != "run_id"]
    grouped = per_epoch.groupby("run_id", sort=False)
    runs = pd.concat([grouped[list(numeric)].median(), grouped[firsts].first()], axis=1).reset_index()
    return runs.assign(label=_unique_labels(runs))


def _unique_labels(runs: pd.DataFrame) -> pd.Series:
    """Short labels, or the run id where two runs would share one."""
    labels = runs.apply(_label, axis=1)
    clash = labels.duplicated(keep=False)
    return labels.where(~clash, runs["run_id"].astype(str))


def accuracy_per_epoch(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Test accuracy per epoch, one line per run (GSplit Fig. 7)."""
    per_epoch = per_run_epoch(table)
    fig, ax = plt.subplots(figsize=(6, 4))
    firsts = per_epoch.groupby("run_id", sort=False).first().reset_index()
    labels = dict(zip(firsts["run_id"], _unique_labels(firsts), strict=True))
    for run_id, g in per_epoch.groupby("run_id", sort=False):
        g = g.sort_values("epoch").dropna(subset=["test_acc"])
        ax.plot(g["epoch"] + 1, 100 * g["test_acc"], marker="o", ms=3, label=labels[run_id])
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def epoch_breakdown(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Stacked epoch-time breakdown per run (GSplit Table 3, DistGNN-MB Fig. 3)."""
    runs = _per_run(table)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(runs) + 2), 4))
    bottom = pd.Series(0.0, index=runs.index)
    for col, label in BREAKDOWN:
        if col in runs and runs[col].sum() > 0:
            ax.bar(runs["label"], runs[col], bottom=bottom, label=label)
            bottom = bottom + runs[col]
    ax.set_ylabel("time per epoch (s), slowest rank")
    _rotate_labels(ax)
    ax.legend(fontsize=7)
    return fig


def epoch_time(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Median epoch time per run (DistDGLv2 Fig. 6/10, DGCL Fig. 7)."""
    runs = _per_run(table)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(runs) + 2), 4))
    ax.bar(runs["label"], runs["time_epoch"])
    ax.set_ylabel("epoch time (s)")
    if spec.get("options", {}).get("logy"):
        ax.set_yscale("log")
    _rotate_labels(ax)
    return fig


def counters(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Chosen counter columns per run, e.g. sampled edges and features loaded (GSplit Table 1)."""
    runs = _per_run(table)
    columns = spec.get("options", {}).get("columns", ["sampled_edges", "features_loaded"])
    missing = [c for c in columns if c not in runs]
    if missing:
        raise GnnflowError(f"figure {spec['name']}: no column(s) {', '.join(missing)} in the results table")
    fig, axes = plt.subplots(1, len(columns), figsize=(4 * len(columns) + 1, 4), squeeze=False)
    for ax, col in zip(axes[0], columns, strict=True):
        ax.bar(runs["label"], runs[col])
        ax.set_title(col.replace("_", " ") + " per epoch", fontsize=9)
        _rotate_labels(ax)
        if spec.get("options", {}).get("logy"):
            ax.set_yscale("log")
    return fig


def comm_volume(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Bytes moved between ranks per epoch (DGCL Fig. 8, DistGNN-MB remote bytes)."""
    spec = {**spec, "options": {"columns": ["remote_bytes", "bytes_sent"], "logy": True, **spec.get("options", {})}}
    return counters(table, spec)


def scaling(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Epoch time against workers per strategy, log2 x axis (MG-GCN Figs. 12-13)."""
    runs = _per_run(table)
    fig, ax = plt.subplots(figsize=(6, 4))
    for strategy, g in runs.groupby("strategy", sort=False):
        g = g.sort_values("workers")
        ax.plot(g["workers"], g["time_epoch"], marker="o", label=strategy)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("workers")
    ax.set_ylabel("epoch time (s)")
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
        labels.append(f"{name}\n{result.get('ratio_name', 'ratio')}")
        ratios.append(float(result["ratio"]))
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(names) + 2), 4))
    ax.bar(labels, ratios)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_ylabel("ratio (ours / peer)")
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
        table = table[table["run_id"].astype(str).str.split("-").str[0].isin(sweeps)]
        if table.empty:
            raise GnnflowError(f"figure {spec['name']}: no runs of sweeps {sweeps} in the results table")
    fig = KINDS[kind](table, spec, bench_dir) if kind == "benchmark" else KINDS[kind](table, spec)
    fig.suptitle(spec.get("options", {}).get("title", spec["name"]), fontsize=10)
    fig.tight_layout()
    return fig
