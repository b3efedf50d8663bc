"""The one comparison every equivalence check uses: distributed results against the single-process
reference, quantity by quantity.

A quantity is compared as arrays (a rank's or the stitched whole against the reference; named
gradients are flattened in the reference's order).  ``max_abs_diff`` is the largest absolute
difference over the ranks given; ``max_rel_diff`` divides it by the reference's largest
magnitude.  ``passed`` holds when every checked difference (absolute, or relative with
``relative``) is at most ``tol``: near float32 rounding for the exact strategies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def as_array(x: Any, order: Sequence[str] | None = None) -> np.ndarray:
    """``x`` as one float64 array: a mapping of named arrays is concatenated in ``order``."""
    if isinstance(x, Mapping):
        keys = list(order) if order is not None else list(x)
        if set(keys) != set(x):
            return np.full(1, np.nan)  # other names than the reference's: not comparable
        return np.concatenate([np.asarray(_numpy(x[k]), dtype=np.float64).reshape(-1) for k in keys])
    return np.asarray(_numpy(x), dtype=np.float64)


def _numpy(x: Any) -> Any:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def max_diff(got: Any, ref: Any) -> tuple[float, float]:
    """(largest absolute difference, that over the reference's largest magnitude); infinite when
    the shapes differ or anything is not finite."""
    order = list(ref) if isinstance(ref, Mapping) else None
    a, b = as_array(got, order), as_array(ref, order)
    if a.shape != b.shape:
        return float("inf"), float("inf")
    if a.size == 0:
        return 0.0, 0.0
    d = np.abs(a - b)
    if not np.isfinite(d).all():
        return float("inf"), float("inf")
    worst = float(d.max())
    return worst, worst / max(float(np.abs(b).max()), 1e-30)


def device_tolerance(tol: float, device: str) -> float:
    """The tolerance of a check run on ``device`` against the CPU reference: ``tol`` on the CPU,
    ten times it on a GPU (its float32 kernels sum in other orders than the CPU's)."""
    return tol if str(device) == "cpu" else 10.0 * tol


def compare(pairs: Mapping[str, tuple[Any, Any]], tol: float, relative: bool = False) -> dict[str, Any]:
    """``pairs``: name -> (distributed, reference), where distributed is one result or a list of
    per-rank results (each compared with the reference, the worst kept).  Returns ``passed``,
    ``max_abs_diff`` and ``max_rel_diff`` by name, and ``tol``."""
    abs_diff: dict[str, float] = {}
    rel_diff: dict[str, float] = {}
    for name, (got, ref) in pairs.items():
        runs = got if isinstance(got, list) else [got]
        worst = [max_diff(g, ref) for g in runs]
        abs_diff[name] = max(a for a, _ in worst)
        rel_diff[name] = max(r for _, r in worst)
    checked = rel_diff if relative else abs_diff
    return {"passed": bool(all(v <= tol for v in checked.values())), "max_abs_diff": abs_diff,
            "max_rel_diff": rel_diff, "tol": tol}
