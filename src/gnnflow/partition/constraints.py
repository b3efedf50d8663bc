"""Balance constraints: per-vertex weights that a partition should spread evenly.

DistDGLv2 §4.1.3 balances several quantities at once with METIS's
multi-constraint mode: the number of vertices, of training (validation, test)
vertices, of edges (in-degree), and of vertices of each node type.  Each
constraint is one integer weight per vertex; a partition is balanced for it when
``max_p sum(w[part == p]) / mean_p sum(w[part == p])`` is near 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnflow.errors import ConfigError

BASE_CONSTRAINTS = ("vertices", "train", "val", "test", "edges")
DEFAULT_CONSTRAINTS = ("vertices", "train", "edges")


def known_constraints(store: Any) -> list[str]:
    """Names valid for ``store``: the base ones plus ``ntype:<name>`` per node type."""
    names = list(BASE_CONSTRAINTS)
    if "node_type" in store.extra:
        names += [f"ntype:{t}" for t in store.meta.get("node_types", [])]
    return names


def parse_constraints(spec: str | list[str] | tuple[str, ...] | None) -> list[str]:
    if spec is None:
        return list(DEFAULT_CONSTRAINTS)
    if isinstance(spec, str):
        spec = [s.strip() for s in spec.split(",") if s.strip()]
    names = list(dict.fromkeys(spec))
    if not names:
        raise ConfigError("constraints: empty list; give e.g. vertices,train,edges")
    return names


def constraint_weights(store: Any, names: list[str]) -> np.ndarray:
    """int64 [N, len(names)] vertex weights, one column per constraint name.

    Raises :class:`ConfigError` for an unknown name, listing the valid ones.
    """
    n = store.num_nodes
    cols = []
    for name in names:
        if name == "vertices":
            col = np.ones(n, dtype=np.int64)
        elif name in ("train", "val", "test"):
            col = np.zeros(n, dtype=np.int64)
            col[np.asarray(store.split(name))] = 1
        elif name == "edges":
            col = np.diff(np.asarray(store.indptr)).astype(np.int64)
        elif name.startswith("ntype:") and "node_type" in store.extra:
            types = list(store.meta.get("node_types", []))
            tname = name.split(":", 1)[1]
            if tname not in types:
                raise ConfigError(f"constraint {name!r}: node type {tname!r} not in the graph's node types {types}")
            col = (np.asarray(store.extra["node_type"]) == types.index(tname)).astype(np.int64)
        else:
            raise ConfigError(
                f"unknown balance constraint {name!r}; choose among {', '.join(known_constraints(store))}"
            )
        cols.append(col)
    return np.stack(cols, axis=1)


def balance(weights: np.ndarray, node_part: np.ndarray, num_parts: int) -> np.ndarray:
    """max/avg per-part weight sum, per column of ``weights`` (1.0 = perfect)."""
    w = weights.reshape(weights.shape[0], -1)
    out = np.empty(w.shape[1])
    for c in range(w.shape[1]):
        sums = np.bincount(node_part, weights=w[:, c], minlength=num_parts)
        mean = sums.mean()
        out[c] = float(sums.max() / mean) if mean > 0 else 1.0
    return out
