"""What a partitioning method returns (vertex -> part, plus its own arrays and meta), and the
two-level layout ``MxW`` (machines x workers per machine, DistDGLv2 §4.1.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gnnflow.errors import ConfigError


@dataclass
class Assignment:
    """What a method returns: vertex -> part, plus method-specific arrays and meta."""

    node_part: np.ndarray
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. node_machine, perm
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. tile_nnz, levels, library
    constraints: list[str] | None = None  # constraints whose balance the report checks


def parse_levels(levels: Any) -> tuple[int, int]:
    """``"2x4"`` / ``(2, 4)`` -> (machines, workers per machine)."""
    try:
        if isinstance(levels, str):
            m, w = (int(x) for x in levels.lower().replace("×", "x").split("x"))
        else:
            m, w = (int(x) for x in levels)
    except (ValueError, TypeError):
        raise ConfigError(f"--levels must look like MxW (machines x workers), got {levels!r}") from None
    if m < 1 or w < 1:
        raise ConfigError(f"--levels {levels}: machines and workers must be >= 1")
    return m, w
