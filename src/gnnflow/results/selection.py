"""Model selection: the evaluation epoch with the best validation accuracy.

Ties in validation accuracy go to the lower validation loss, then to the
earlier epoch; epochs without a validation accuracy (not evaluated, or no
validation split) are never selected.  The training driver keeps the best
checkpoint by this rule (``ckpt/best.pt``, ``model-best.pt``) and the results
table reports the test accuracy of the epoch it selects, so both agree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: what a selected epoch reports (run.json "best", the summary's best_* columns)
BEST_FIELDS = ("epoch", "val_acc", "val_loss", "test_acc", "test_loss", "train_acc", "train_loss")


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def better(val_acc: float, val_loss: float, best: Mapping[str, Any] | None) -> bool:
    """Whether an epoch with ``val_acc``/``val_loss`` beats ``best`` (None: nothing selected yet)."""
    if not _finite(val_acc):
        return False
    if best is None:
        return True
    if val_acc != best["val_acc"]:
        return val_acc > best["val_acc"]
    have = float(best.get("val_loss", math.nan))
    return _finite(val_loss) and (not _finite(have) or val_loss < have)


def best_row(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The selected row among one run's per-epoch rows (any order), as ``BEST_FIELDS``; None if none."""
    best: dict[str, Any] | None = None
    for row in sorted(rows, key=lambda r: int(r["epoch"])):
        if better(float(row.get("val_acc", math.nan)), float(row.get("val_loss", math.nan)), best):
            best = {k: (int(row[k]) if k == "epoch" else float(row.get(k, math.nan))) for k in BEST_FIELDS}
    return best


def best_of_records(path: str | Path) -> dict[str, Any] | None:
    """:func:`best_row` over rank 0's rows of a ``records.jsonl`` (None when there is no file)."""
    path = Path(path)
    if not path.exists():
        return None
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if int(row.get("rank", 0)) == 0:
                rows.append(row)
    return best_row(rows)
