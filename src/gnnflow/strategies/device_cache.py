"""Hot feature rows on the rank's device (DistDGLv2 §4.2.1's feature cache, moved to the GPU).

A GPU rank fed from the host copies every input row of every batch across the bus; on a
power-law graph a few rows are most of the inputs.  :class:`DeviceFeatureCache` keeps the
hottest rows (by presampling counts, or by how many in-neighbour lists hold a vertex) in device
memory, as many as ``device_cache_mib`` holds, and serves a batch's input ids there; the misses
are fetched as before (the feature store, local or remote) and copied over.  The cache is
read-only: rows never change during training.

The same code runs with the device = CPU (then it is a host-side row cache): a test checks its
hit counts and that a run's outputs do not change with it.  Hits and misses are counted per
batch (``device_cache_hits`` / ``device_cache_misses``) and the epoch's hit rate is recorded
(``x_device_cache_hit_rate``, :func:`record_hit_rate`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from gnnflow.results.schema import Recorder

MIB = 1 << 20


def cache_rows(budget_mib: float, feature_dim: int) -> int:
    """Rows that fit in ``budget_mib`` MiB: each a float32 row and its int64 id."""
    return int(budget_mib * MIB // (4 * max(1, feature_dim) + 8))


def hottest(ids: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` ids with the largest counts (ties to the smaller id), sorted by id."""
    ids = np.asarray(ids, dtype=np.int64)
    k = max(0, min(int(k), ids.shape[0]))
    top = np.lexsort((ids, -np.asarray(counts, dtype=np.float64)))[:k]
    return np.sort(ids[top])


class DeviceFeatureCache:
    """Feature rows of the sorted global ``ids`` held on ``device`` (``rows[i]`` is ``ids[i]``'s)."""

    def __init__(self, ids: np.ndarray, rows: torch.Tensor, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.ids = torch.as_tensor(np.asarray(ids, dtype=np.int64)).to(self.device)
        self.rows = rows.to(self.device, dtype=torch.float32)
        self.hits = 0
        self.misses = 0

    @classmethod
    def build(cls, ids: np.ndarray, counts: np.ndarray, budget_mib: float, feature_dim: int,
              device: torch.device | str, load: Callable[[np.ndarray], torch.Tensor]) -> DeviceFeatureCache | None:
        """The cache of the hottest ``ids`` (by ``counts``) that fit ``budget_mib``, their rows read
        with ``load(sorted ids) -> host rows`` (called even with none: it may be a collective);
        None when nothing fits."""
        hot = hottest(ids, counts, cache_rows(budget_mib, feature_dim))
        rows = load(hot)
        return cls(hot, rows, device) if hot.size else None

    @property
    def num_rows(self) -> int:
        return int(self.ids.shape[0])

    @property
    def nbytes(self) -> int:
        return self.rows.numel() * 4 + self.ids.numel() * 8

    def fetch(self, ids: torch.Tensor, load_missing: Callable[[torch.Tensor], torch.Tensor],
              counters: dict[str, float] | None = None) -> torch.Tensor:
        """Rows of global ``ids`` on the device, in the order of ``ids``: hits gathered on the
        device, the rest from ``load_missing(host ids) -> host rows`` (called once per batch,
        also with no misses: it may be a collective)."""
        ids = ids.to(self.device)
        n_cached = self.num_rows
        pos = torch.searchsorted(self.ids, ids).clamp_(max=n_cached - 1)
        hit = self.ids[pos] == ids
        out = torch.empty((ids.shape[0], self.rows.shape[1]), dtype=torch.float32, device=self.device)
        hit_at = torch.nonzero(hit).flatten()
        out[hit_at] = self.rows[pos[hit_at]]
        miss_at = torch.nonzero(~hit).flatten()
        missing = load_missing(ids[miss_at].cpu())
        out[miss_at] = missing.to(self.device, non_blocking=True)
        hits, misses = int(hit_at.shape[0]), int(miss_at.shape[0])
        self.hits += hits
        self.misses += misses
        if counters is not None:
            counters["device_cache_hits"] = counters.get("device_cache_hits", 0.0) + hits
            counters["device_cache_misses"] = counters.get("device_cache_misses", 0.0) + misses
        return out


def record_hit_rate(rec: Recorder, cache: DeviceFeatureCache | None) -> None:
    """The epoch's hit rate from the recorder's counters (``x_device_cache_hit_rate``) and the
    cache's size (``x_device_cache_rows``); nothing without a cache."""
    if cache is None:
        return
    hits, misses = rec.counters.get("device_cache_hits", 0.0), rec.counters.get("device_cache_misses", 0.0)
    rec.extra["device_cache_hit_rate"] = hits / (hits + misses) if hits + misses else float("nan")
    rec.extra["device_cache_rows"] = float(cache.num_rows)
