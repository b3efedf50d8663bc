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
        names += [f"ntype:{t}" for t in store.meta.node_types or []]
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


def constraint_weights(store: Any, names: list[str], dtype: Any = np.int64) -> np.ndarray:
    """[N, len(names)] vertex weights of ``dtype`` (int64 default), one column per constraint name.

    Columns are written into one preallocated array (METIS's ``idx_t`` width when
    partitioning, so METIS reads it without a copy).  Raises :class:`ConfigError`
    for an unknown name, listing the valid ones.
    """
    n = store.num_nodes
    out = np.zeros((n, len(names)), dtype=dtype)
    for c, name in enumerate(names):
        col = out[:, c]
        if name == "vertices":
            col[:] = 1
        elif name in ("train", "val", "test"):
            col[np.asarray(store.split(name))] = 1
        elif name == "edges":
            indptr = store.indptr
            np.subtract(indptr[1:], indptr[:-1], out=col, casting="unsafe")  # in-degree < 2^31 per vertex
        elif name.startswith("ntype:") and "node_type" in store.extra:
            types = list(store.meta.node_types or [])
            tname = name.split(":", 1)[1]
            if tname not in types:
                raise ConfigError(f"constraint {name!r}: node type {tname!r} not in the graph's node types {types}")
            col[:] = np.asarray(store.extra["node_type"]) == types.index(tname)
        else:
            raise ConfigError(
                f"unknown balance constraint {name!r}; choose among {', '.join(known_constraints(store))}"
            )
    return out


def balance(weights: np.ndarray, node_part: np.ndarray, num_parts: int) -> np.ndarray:
    """max/avg per-part weight sum, per column of ``weights`` (1.0 = perfect)."""
    w = weights.reshape(weights.shape[0], -1)
    out = np.empty(w.shape[1])
    for c in range(w.shape[1]):
        sums = np.bincount(node_part, weights=w[:, c], minlength=num_parts)
        mean = sums.mean()
        out[c] = float(sums.max() / mean) if mean > 0 else 1.0
    return out
