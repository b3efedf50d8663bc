"""The advice as a table (text, markdown, JSON), as the workflow's ``advice.md``, and its figure
(predicted beside measured epoch time per candidate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gnnflow.advise.advice import Advice, Row


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def error_pct(row: Row) -> float | None:
    """100 (predicted - measured) / measured, when both are there."""
    m = (row.measured or {}).get("epoch_s")
    if m is None or row.predicted_s is None or m <= 0:
        return None
    return 100.0 * (row.predicted_s - m) / m


def table_rows(adv: Advice) -> tuple[list[str], list[list[str]]]:
    """The header and cells of the advice table."""
    measured = any(r.measured for r in adv.rows)
    factors = any(r.prediction and (r.prediction.factor, r.prediction.overhead_s) != (1.0, 0.0) for r in adv.rows)
    head = ["#", "candidate", "epoch s (predicted)", "dominant stages", "peak MiB/rank", "fits"]
    if factors:
        head.insert(3, "factor")
    if measured:
        head += ["epoch s (measured)", "error"]
    cells = []
    for r in adv.rows:
        if r.refused and r.prediction is None:
            line = ["-", r.label, "-", f"refused: {r.refused}", "-", "no"]
        else:
            line = [str(r.rank) if r.rank else "-", r.label, _fmt_s(r.predicted_s),
                    r.prediction.reason() if r.prediction else "", f"{r.peak_mib:.0f}",
                    "yes" if r.fits and not r.refused else f"no: {r.refused}" if r.refused else "no"]
        if factors:
            line.insert(3, f"x{r.prediction.factor:.2f} + {1e3 * r.prediction.overhead_s:.0f} ms/it"
                        if r.prediction else "-")
        if measured:
            m = r.measured or {}
            err = error_pct(r)
            line += [_fmt_s(m.get("epoch_s")) if "epoch_s" in m else (f"failed: {m['error']}" if "error" in m else "-"),
                     f"{err:+.0f} %" if err is not None else "-"]
        cells.append(line)
    return head, cells


def headline(adv: Advice) -> str:
    top = adv.ranked[:1]
    where = f"{adv.workers} rank(s)" + (f" on {adv.nnodes} hosts" if adv.nnodes > 1 else "")
    first = (f"advice for {adv.graph} ({adv.model}, {where}, {adv.device}; book {adv.partition or 'none'}): "
             + (f"{top[0].label}, predicted {_fmt_s(top[0].predicted_s)} s per epoch" if top else "no candidate fits"))
    return first


def format_advice(adv: Advice, fmt: str = "text") -> str:
    """The advice as ``text`` (aligned columns), ``markdown`` or ``json``."""
    if fmt == "json":
        return adv.to_json() + "\n"
    head, cells = table_rows(adv)
    notes = [f"calibration: {adv.calibration or '-'}; memory available {adv.available_mib:.0f} MiB "
             f"({adv.available_source}); predictions are training time per epoch (evaluation and start-up "
             "left out), peak memory the preflight's"
             + ("; factor: the strategy factor of the calibration's probe runs, in the predicted epoch"
                if "factor" in head else "")]
    if fmt == "markdown":
        out = [f"**{headline(adv)}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
        return "\n".join(out + ["", *notes]) + "\n"
    widths = [max(len(head[i]), *(len(row[i]) for row in cells)) if cells else len(head[i]) for i in range(len(head))]
    widths = [min(w, 60) for w in widths]
    lines = [headline(adv), "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    for row in cells:
        lines.append("  ".join(c.ljust(w) if len(c) <= w else c for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines + notes) + "\n"


def advice_figure(advices: list[Advice], out: str | Path) -> None:
    """One panel per advice: predicted and (where measured) measured epoch time of each candidate
    that fits, in the advice's order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    n = max(1, len(advices))
    fig, axes = plt.subplots(n, 1, figsize=(8, 2.8 * n), squeeze=False)
    for ax, adv in zip(axes[:, 0], advices, strict=False):
        rows = adv.ranked
        x = np.arange(len(rows))
        pred = [r.predicted_s or 0.0 for r in rows]
        meas = [(r.measured or {}).get("epoch_s", np.nan) for r in rows]
        ax.bar(x - 0.2, pred, 0.4, label="predicted")
        ax.bar(x + 0.2, meas, 0.4, label="measured")
        ax.set_xticks(x, [r.label for r in rows], rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("epoch time (s)")
        ax.set_title(f"{Path(adv.graph).name}, {adv.workers} rank(s), {adv.model}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def advice_markdown(advices: list[Advice], figure: str | None = None) -> str:
    """``advice.md``: every advice's table, then the figure."""
    parts = ["# Advice: which strategy for which dataset and rank count", ""]
    for adv in advices:
        parts += [format_advice(adv, "markdown"), ""]
    if figure:
        parts += [f"![predicted vs measured epoch time]({Path(figure).name})", ""]
    return "\n".join(parts)


def load_advice(path: str | Path) -> Advice:
    """An advice written with ``--format json``."""
    import json

    from gnnflow.advise.cost import Prediction

    data: dict[str, Any] = json.loads(Path(path).read_text())
    rows = []
    for d in data["rows"]:
        r = Row(d["label"], d["strategy"], d.get("options", {}), d["workers"], settings=d.get("settings", {}),
                refused=d.get("refused", ""), fits=d.get("fits", False), peak_mib=d.get("peak_mib_per_rank", 0.0),
                host_mib=d.get("host_mib", 0.0), measured=d.get("measured"), rank=d.get("rank"))
        if "predicted_epoch_s" in d:
            r.prediction = Prediction(d["predicted_epoch_s"], d.get("predicted_stages", {}),
                                      per_rank_cpu=d.get("predicted_cpu_s", []), iterations=d.get("iterations", 1),
                                      factor=d.get("factor", 1.0), overhead_s=d.get("overhead_s", 0.0))
        rows.append(r)
    return Advice(graph=data["graph"], partition=data.get("partition"), workers=data["workers"],
                  nnodes=data.get("nnodes", 1), device=data.get("device", "cpu"), model=data.get("model", ""),
                  rows=rows, calibration=data.get("calibration", ""), available_mib=data.get("available_mib", 0.0),
                  available_source=data.get("available_source", ""))


#: the training settings a run and an advice row must share to be compared
COMPARED = ("model", "hidden", "num_layers", "fanouts", "batch_size", "workers", "device")


def run_epoch_s(run_dir: str | Path) -> float | None:
    """A run's measured training epoch: per epoch the slowest rank's ``time_epoch - time_eval``,
    the median over the epochs after the first (all of them when there is one)."""
    import json
    import statistics

    path = Path(run_dir) / "records.jsonl"
    if not path.exists():
        return None
    per_epoch: dict[int, float] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            t = float(r.get("time_epoch", 0.0)) - float(r.get("time_eval", 0.0))
            per_epoch[int(r["epoch"])] = max(per_epoch.get(int(r["epoch"]), 0.0), t)
    epochs = sorted(per_epoch)
    use = epochs[1:] if len(epochs) > 1 else epochs
    return float(statistics.median(per_epoch[e] for e in use)) if use else None


def attach_runs(adv: Advice, run_dirs: list[str | Path]) -> None:
    """Put the measured epoch of every run that trained one of the advice's candidates (same
    graph, the compared settings alike, the candidate's options among the run's) on its row."""
    import json

    for d in run_dirs:
        info_path = Path(d) / "run.json"
        if not info_path.exists():
            continue
        cfg = json.loads(info_path.read_text()).get("config", {})
        if Path(str(cfg.get("graph", ""))).resolve() != Path(adv.graph).resolve():
            continue
        best: Row | None = None
        for r in adv.rows:
            s = r.settings
            if r.strategy != cfg.get("strategy") or not s or any(s.get(k) != cfg.get(k) for k in COMPARED):
                continue
            opts = cfg.get("options") or {}
            if all(opts.get(k) == v for k, v in r.options.items()) and (best is None or len(r.options) > len(best.options)):
                best = r
        if best is not None and (best.measured is None or not best.options):
            epoch = run_epoch_s(d)
            if epoch is not None:
                best.measured = {"epoch_s": epoch, "run": str(d)}
