"""``gnnflow check`` of a graph store: everything :func:`~gnnflow.data.store.scan_store` checks, the
open-time checks, and for a homogenized typed store its type arrays
(:func:`~gnnflow.data.hetero.validate_hetero`).
"""

from __future__ import annotations

import os

from gnnflow.data.hetero import validate_hetero
from gnnflow.data.store import open_store, scan_store, validate_store
from gnnflow.errors import StoreError


def check_store(path: str | os.PathLike[str], show_progress: bool = True) -> list[str]:
    """Everything :func:`scan_store` checks, plus the open-time checks and, for a
    homogenized typed store, the type arrays; the problems found, one line each."""
    try:
        store = open_store(path, validate=False)
        validate_store(store, checksums=False)  # the scan recomputes every checksum
    except StoreError as exc:
        return [str(exc)]
    problems, _ = scan_store(store, show_progress=show_progress)
    if "edge_id" in store.extra and "node_type" in store.extra:
        try:
            validate_hetero(store)
        except StoreError as exc:
            problems.append(str(exc))
    return problems
