"""The tidy results table: one row per run x epoch x rank.

Built from run directories (``records.jsonl`` written by the training driver and
``run.json`` with the run's configuration).  Configuration columns are prefixed
``cfg_`` (``cfg_partition``, ``cfg_fanouts``, ``cfg_opt_<option>``) so sweeps
over any setting can be grouped without parsing run names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from gnnflow.config import format_fanouts
from gnnflow.errors import GnnflowError
from gnnflow.results.schema import read_records
from gnnflow.results.selection import best_row

#: per-epoch evaluation columns (the same on every rank)
EVAL_COLUMNS = ("train_acc", "val_acc", "test_acc", "train_loss", "val_loss", "test_loss")
#: what identifies a run besides its seed: runs equal in these are repeats (summarize over seeds)
SETTING_KEYS = ("dataset", "strategy", "model", "workers")

CONFIG_KEYS = ("partition", "fanouts", "batch_size", "hidden", "num_layers", "epochs", "lr", "heads", "dropout",
               "device")


def _config_columns(run_dir: Path) -> dict[str, Any]:
    run_json = run_dir / "run.json"
    if not run_json.exists():
        return {}
    info = json.loads(run_json.read_text())
    cfg = info.get("config", info)
    cols: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        if key in cfg:
            value = cfg[key]
            if key == "partition" and value:
                value = Path(value).name
            if key == "fanouts" and isinstance(value, list):
                value = format_fanouts(value)  # "15,10,5", or per relation "cites:10,*:5;5"
            elif isinstance(value, list):
                value = ",".join(map(str, value))
            cols[f"cfg_{key}"] = value
    for key, value in (cfg.get("options") or {}).items():
        cols[f"cfg_opt_{key}"] = value if isinstance(value, (int, float, str, bool)) else json.dumps(value)
    return cols


def load_runs(run_dirs: list[str | Path]) -> pd.DataFrame:
    """Read every run directory into one table; a directory without records is an error."""
    frames = []
    for d in run_dirs:
        d = Path(d)
        rec = d / "records.jsonl" if d.is_dir() else d
        if not rec.exists():
            raise GnnflowError(f"{rec}: no run records here (did the training run finish?)")
        frame = read_records([rec])
        frames.append(frame.assign(**_config_columns(rec.parent), run_dir=str(rec.parent)))
    if not frames:
        raise GnnflowError("no run directories given")
    return pd.concat(frames, ignore_index=True, sort=False)


def save_table(table: pd.DataFrame, out: str | Path) -> list[Path]:
    """Write ``out`` as parquet and the same table as CSV beside it (atomically)."""
    from gnnflow.io import atomic_file

    out = Path(out)
    written = []
    with atomic_file(out.with_suffix(".parquet")) as tmp:
        table.to_parquet(tmp, index=False)
    written.append(out.with_suffix(".parquet"))
    with atomic_file(out.with_suffix(".csv")) as tmp:
        table.to_csv(tmp, index=False)
    written.append(out.with_suffix(".csv"))
    return written


def read_table(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise GnnflowError(f"{path}: no such results table (run `gnnflow results aggregate` first)")
    if path.suffix == ".csv":
        return pd.read_csv(path)
    return pd.read_parquet(path)


def per_run_epoch(table: pd.DataFrame) -> pd.DataFrame:
    """Collapse ranks per run and epoch: the slowest rank's times, the summed counters, the
    mean of the strategy extras (``x_*``: per-rank rates, ratios, sizes) and the largest
    rank's memory (``mem_*``)."""
    keys = [c for c in ("run_id", "strategy", "dataset", "model", "workers", "epoch") if c in table]
    time_cols = [c for c in table if c.startswith(("time_", "mem_"))]  # both: the worst rank
    acc_cols = [c for c in ("loss", *EVAL_COLUMNS) if c in table]
    numeric = table.select_dtypes("number").columns
    extra_cols = [c for c in numeric if c.startswith("x_")]
    cfg_cols = [c for c in table if c.startswith("cfg_")]  # settings (numeric ones too: a CSV's empty column)
    count_cols = [c for c in numeric if c not in time_cols + acc_cols + extra_cols + keys + cfg_cols + ["rank", "seed"]]
    grouped = table.groupby(keys, dropna=False)
    parts = [grouped[cols].agg(how) for cols, how in
             ((time_cols, "max"), (acc_cols, "mean"), (count_cols, "sum"), (extra_cols, "mean"),
              (cfg_cols, "first")) if cols]
    return pd.concat(parts, axis=1).reset_index()


def sweep_of(run_ids: pd.Series) -> pd.Series:
    """The sweep each run belongs to: the first part of its workflow name (``abl1-data-…``)."""
    return run_ids.astype(str).str.split("-").str[0]


def per_run(table: pd.DataFrame, reduce: str = "median") -> pd.DataFrame:
    """One row per run: each per-epoch value (ranks collapsed as in :func:`per_run_epoch`)
    reduced over epochs, ``median`` (times, counters: the papers' epoch figures) or
    ``last`` (the final epoch: accuracies after training)."""
    if reduce not in ("median", "last"):
        raise GnnflowError(f"reduce must be median or last, not {reduce!r}")
    per_epoch = per_run_epoch(table).sort_values("epoch", kind="stable")
    numeric = per_epoch.select_dtypes("number").columns.difference(["epoch"])
    firsts = [c for c in per_epoch if c not in numeric and c not in ("run_id", "epoch")]
    grouped = per_epoch.groupby("run_id", sort=False)
    values = grouped[list(numeric)].median() if reduce == "median" else grouped[list(numeric)].last()  # last non-NaN
    return pd.concat([values, grouped[firsts].first()], axis=1).reset_index()


def match_runs(runs: pd.DataFrame, select: dict[str, Any]) -> pd.Series:
    """Which rows of a per-run table a selector names: ``{sweep, strategy, partition, workers,
    dataset, model, run, opt: {name: value}}`` (all must match; values compare as written in YAML)."""
    if "sweep" in select and "sweep" not in runs:
        runs = runs.assign(sweep=sweep_of(runs["run_id"]))
    mask = pd.Series(True, index=runs.index)
    for key, want in select.items():
        pairs = [(f"cfg_opt_{k}", v) for k, v in want.items()] if key == "opt" else \
            [({"run": "run_id", "partition": "cfg_partition"}.get(key, key), want)]
        for col, value in pairs:
            mask &= runs[col].map(_same_value(value)) if col in runs else False
    return mask


def _same_value(want: Any) -> Any:
    def match(have: Any) -> bool:
        if isinstance(want, bool) or isinstance(have, bool):
            return str(have).lower() == str(want).lower()
        if isinstance(want, (int, float)):
            try:
                return float(have) == float(want)
            except (TypeError, ValueError):
                return False
        return str(have) == str(want)

    return match


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: final and best-validation accuracies, median epoch time (slowest rank), totals per epoch.

    ``test_acc``/``val_acc`` are the last epoch's; ``best_epoch``, ``best_val_acc`` and
    ``best_test_acc`` the epoch :mod:`gnnflow.results.selection` picks (best validation
    accuracy, ties to the lower validation loss), as the driver's ``ckpt/best.pt``.
    """
    per_epoch = per_run_epoch(table)
    rows = []
    for run_id, g in per_epoch.groupby("run_id", sort=False):
        g = g.sort_values("epoch")
        last = g.iloc[-1]
        evaluated = g.dropna(subset=["test_acc"]) if "test_acc" in g else g
        final = evaluated.iloc[-1] if len(evaluated) else last
        best = best_row(g.to_dict("records")) if "val_acc" in g else None
        row = {
            "run_id": run_id,
            "strategy": last.get("strategy"),
            "dataset": last.get("dataset"),
            "model": last.get("model"),
            "workers": int(last.get("workers", 1)),
            "seed": int(table.loc[table["run_id"] == run_id, "seed"].iloc[0]) if "seed" in table else 0,
            "epochs": int(g["epoch"].max()) + 1 if "epoch" in g else len(g),
            "test_acc": float(final.get("test_acc", float("nan"))),
            "val_acc": float(final.get("val_acc", float("nan"))),
            "best_epoch": best["epoch"] if best else float("nan"),
            "best_val_acc": best["val_acc"] if best else float("nan"),
            "best_test_acc": best["test_acc"] if best else float("nan"),
            "epoch_time_s": float(g["time_epoch"].median()) if "time_epoch" in g else float("nan"),
        }
        for c in g:
            if c.startswith("cfg_"):
                row[c] = last[c]
        for c in ("sampled_edges", "features_loaded", "remote_bytes", "bytes_sent"):
            if c in g:
                row[f"{c}_per_epoch"] = float(g[c].mean())
        if "mem_peak_rss_mib" in table:  # the largest rank's peak (VmHWM) over the run
            row["peak_rss_mib"] = float(table.loc[table["run_id"] == run_id, "mem_peak_rss_mib"].max())
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["dataset", "strategy", "workers"], kind="stable")


def summarize_seeds(summary: pd.DataFrame) -> pd.DataFrame:
    """Runs that differ only in their seed, as one row: how many seeds, and mean and standard
    deviation (over seeds, ``ddof=1``; 0 for one seed) of the final and best-validation test
    accuracy, the best epoch and the median epoch time."""
    keys = [c for c in SETTING_KEYS if c in summary] + sorted(c for c in summary if c.startswith("cfg_"))
    values = {"test_acc": "final_test_acc", "best_test_acc": "best_test_acc", "best_epoch": "best_epoch",
              "epoch_time_s": "epoch_time_s"}
    rows = []
    for key, g in summary.groupby(keys, dropna=False, sort=False):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        row["seeds"] = int(g["seed"].nunique()) if "seed" in g else len(g)
        for col, name in values.items():
            v = g[col].astype(float)
            row[f"{name}_mean"] = float(v.mean())
            row[f"{name}_std"] = float(v.std(ddof=1)) if len(v) > 1 else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def _pm(mean: float, std: float, scale: float = 100.0, digits: int = 2) -> str:
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def summary_text(summary: pd.DataFrame, seeds: pd.DataFrame) -> str:
    """The per-run table, then the over-seeds table with accuracies in percent as mean ± std."""
    run_cols = [c for c in ("run_id", "strategy", "dataset", "model", "workers", "seed", "epochs", "test_acc",
                            "best_epoch", "best_val_acc", "best_test_acc", "epoch_time_s") if c in summary]
    run_cols += [c for c in summary if c.endswith("_per_epoch")]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        runs = summary[run_cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")
        table = pd.DataFrame({
            **{c: seeds[c] for c in SETTING_KEYS if c in seeds},
            "seeds": seeds["seeds"],
            "final test acc %": [_pm(m, s) for m, s in zip(seeds["final_test_acc_mean"],
                                                          seeds["final_test_acc_std"], strict=True)],
            "best-val test acc %": [_pm(m, s) for m, s in zip(seeds["best_test_acc_mean"],
                                                             seeds["best_test_acc_std"], strict=True)],
            "best epoch": [_pm(m, s, 1.0, 1) for m, s in zip(seeds["best_epoch_mean"], seeds["best_epoch_std"],
                                                            strict=True)],
        })
        over = table.to_string(index=False)
    return f"{runs}\n\nmean ± std over seeds (settings equal up to the seed):\n{over}"
