"""Human names and units for the results table's columns, strategies and benchmarks.

Every figure (:mod:`gnnflow.plots`) and the scorecard name a quantity through
:func:`describe`, never by its column name: ``features_loaded`` is shown as
"input features loaded (rows per epoch)".  A column missing from
:data:`COLUMNS` still gets a readable name (prefixes dropped, words spaced),
but every column a figure kind or a paper config uses is listed here
(``tests/test_plots_labels.py`` checks both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Quantity:
    """What a column holds: a name, its unit and how its values print."""

    name: str
    unit: str = ""
    kind: str = "count"  # count | bytes | seconds | fraction | ratio | accuracy | points

    def format(self, value: float, precise: bool = False) -> str:
        """One value as the figure and the scorecard print it (``2.28×``, ``29.3 %``, ``18.5 MB``);
        ``precise`` keeps two more digits (to tell close values of an order apart)."""
        if value != value:  # NaN
            return "n/a"
        extra = 2 if precise else 0
        if self.kind in ("fraction", "accuracy"):
            return f"{100 * value:.{1 + extra}f} %"
        if self.kind == "points":  # a difference of two fractions
            return f"{100 * value:.2f} points"
        if self.kind == "ratio":
            digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
            return f"{value:.{digits + extra}f}×"
        if self.kind == "bytes":
            return _engineering(value, " B" if abs(value) < 1e3 else "B")
        if self.kind == "seconds":
            return f"{value:.3g} s" if value >= 1e-3 else f"{value * 1e6:.3g} µs"
        return _engineering(value, "") if abs(value) >= 1e4 else f"{value:.4g}"


def _engineering(value: float, unit: str) -> str:
    """``205829 -> 205.8k``, ``1.8e7 B -> 18.0 MB``."""
    for power, prefix in ((12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(value) >= 10**power:
            return f"{value / 10**power:.1f}{' ' if unit else ''}{prefix}{unit}"
    return f"{value:.4g}{unit}"


_S = "s"
_PER_EPOCH = "per epoch"
COLUMNS: dict[str, Quantity] = {
    # accuracies and loss
    "loss": Quantity("training loss"),
    "train_acc": Quantity("training accuracy", "%", "accuracy"),
    "val_acc": Quantity("validation accuracy", "%", "accuracy"),
    "test_acc": Quantity("test accuracy", "%", "accuracy"),
    # times: the slowest rank's seconds in the epoch
    "time_epoch": Quantity("epoch time", _S, "seconds"),
    "time_sample": Quantity("sampling time (S / MBC)", _S, "seconds"),
    "time_load": Quantity("feature loading time (L)", _S, "seconds"),
    "time_forward_backward": Quantity("forward + backward time (FB)", _S, "seconds"),
    "time_comm": Quantity("communication time", _S, "seconds"),
    "time_allreduce": Quantity("gradient all-reduce time (ARed)", _S, "seconds"),
    "time_wait": Quantity("time waiting on the pipeline", _S, "seconds"),
    "time_step": Quantity("optimizer step time", _S, "seconds"),
    "time_eval": Quantity("evaluation time", _S, "seconds"),
    "time_device_copy": Quantity("host-to-device copy time", _S, "seconds"),
    # CPU seconds of the thread that ran a stage (a pipelined stage's thread shares the cores)
    "time_sample_cpu": Quantity("sampling CPU time", _S, "seconds"),
    "time_load_cpu": Quantity("feature loading CPU time", _S, "seconds"),
    "time_forward_backward_cpu": Quantity("forward + backward CPU time", _S, "seconds"),
    # counters: totals over the epoch, summed over ranks
    "iterations": Quantity("iterations", _PER_EPOCH),
    "sampled_edges": Quantity("edges computed", _PER_EPOCH),
    "features_loaded": Quantity("input features loaded", "rows per epoch"),
    "remote_features": Quantity("remote input features fetched", "rows per epoch"),
    "remote_bytes": Quantity("remote bytes received", "per epoch", "bytes"),
    "bytes_sent": Quantity("bytes sent between ranks", "per epoch", "bytes"),
    "bytes_received": Quantity("bytes received from other ranks", "per epoch", "bytes"),
    "cache_hits": Quantity("cache hits", _PER_EPOCH),
    "cache_misses": Quantity("cache misses", _PER_EPOCH),
    "input_vertices": Quantity("input vertices", _PER_EPOCH),
    "shuffled_rows": Quantity("rows shuffled between splits", _PER_EPOCH),
    # GSplit Fig. 5 (split-parallel extras)
    "x_load_imbalance": Quantity("load imbalance (max / mean edges per split)", "×", "ratio"),
    "x_load_imbalance_max": Quantity("worst load imbalance (max / mean edges per split)", "×", "ratio"),
    "x_cross_edge_fraction": Quantity("cross-split edges", "% of mini-batch edges", "fraction"),
    # MG-GCN Fig. 7 (full-batch extras)
    "x_tile_nnz_max_over_avg": Quantity("tile load imbalance (max / mean nonzeros per tile)", "×", "ratio"),
    "x_rank_nnz_max_over_avg": Quantity("rank load imbalance (max / mean nonzeros per rank)", "×", "ratio"),
    # DistGNN-MB (HEC extras)
    "x_hec_hit_rate_l0": Quantity("HEC hit rate, input layer (L0)", "%", "fraction"),
    "x_hec_hit_rate_l1": Quantity("HEC hit rate, hidden layer (L1)", "%", "fraction"),
    "x_hec_hit_rate_l2": Quantity("HEC hit rate, layer L2", "%", "fraction"),
    "x_mbc_s": Quantity("mini-batch creation (MBC)", _S, "seconds"),
    "x_fwd_s": Quantity("forward incl. remote aggregation (FWD)", _S, "seconds"),
    "x_bwd_s": Quantity("backward (BWD)", _S, "seconds"),
    "x_ared_s": Quantity("gradient all-reduce (ARed)", _S, "seconds"),
    # DGCL extras
    "x_plan_s": Quantity("communication planning time", _S, "seconds"),
    "x_relay_rows": Quantity("rows relayed by other ranks", ""),
    "x_table_bytes": Quantity("send/receive table size", "", "bytes"),
    # benchmark result keys a claim may read (gnnflow bench NAME --json)
    "fit.max_rel_divergence": Quantity("largest divergence of measured from modeled allgather time", "%",
                                       "fraction"),
    "ratio": Quantity("headline ratio", "×", "ratio"),
    "dgl_epoch_s": Quantity("DGL's epoch time", _S, "seconds"),
    "ours_epoch_s": Quantity("our epoch time", _S, "seconds"),
}

STRATEGIES = {
    "single": "single process",
    "data": "data-parallel",
    "distdgl": "DistDGL (DGL 1.1.3)",
    "split": "split-parallel",
    "p3": "P3*",
    "fullbatch": "full-batch 1D",
    "hec": "HEC",
    "dgcl": "DGCL",
}

# `gnnflow bench` headline ratios, by benchmark kind (their ratio_name is a key, not a label).
BENCH_RATIOS = {
    "sampler": "sampling time, ours / DGL",
    "layers": "layer time, ours / DGL",
    "partition": "partitioning time, ours / DGL",
    "pipeline": "epoch time, pipeline on / off",
    "data-parallel": "epoch time, ours / DistDGL",
    "split": "epoch time, split / data-parallel",
    "fullbatch": "epoch time, ours / DGL GraphConv",
    "hec": "remote bytes, HEC / data-parallel",
    "allgather": "R² of measured vs modeled allgather time",
}

_PREFIXES = ("x_", "time_", "cfg_opt_", "cfg_")


def describe(column: str) -> Quantity:
    """The quantity a column holds; a column not listed gets a readable name, never its raw one."""
    if column in COLUMNS:
        return COLUMNS[column]
    if " / " in column:  # a derived metric "a / b"
        a, b = (describe(c.strip()) for c in column.split(" / ", 1))
        return Quantity(f"{a.name} / {b.name}", "", "fraction" if a.kind == b.kind == "seconds" else "ratio")
    name = column
    for p in _PREFIXES:
        if name.startswith(p):
            name = name[len(p):]
            break
    m = re.fullmatch(r"(.*)_l(\d+)", name)
    if m:
        name = f"{m.group(1)}, layer {m.group(2)}"
    kind = "seconds" if column.startswith("time_") or name.endswith("_s") else "count"
    name = re.sub(r"_s$", "", name)
    return Quantity(name.replace("_", " "), _S if kind == "seconds" else "", kind)


def strategy_label(strategy: str) -> str:
    return STRATEGIES.get(strategy, str(strategy))
