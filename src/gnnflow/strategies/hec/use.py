"""What an AEP push is worth: the reads it is expected to serve (a deviation from DistGNN-MB).

Algorithm 2 pushes, at every layer and iteration, up to ``nc`` of the mini-batch's solid vertices
that a peer holds as halo, sampled by degree, and leaves to chance whether the peer reads a row
before it expires (``ls + 1`` iterations after it arrives).  In the paper's regime a rank's halo
lookups far outnumber the ``nc`` rows a peer pushes, so few pushed rows go unread; on a small
graph most of them are never read, and HEC then moves more bytes than data-parallel training
fetches (docs/hec.md).  Here a push goes where it is expected to be read:

* every rank presamples a few of its own mini-batches (as data-parallel does to choose its
  feature cache: the first ``presample_batches`` of epoch 0, drawn from another stream) and
  counts, per layer, how often each halo vertex is a source (``r``: its reads per iteration)
  and how often each of its solid vertices is (``s``: how often the owner could push it);
* each rank sends the owners of its halo vertices their ``r`` (one exchange at setup, of
  ``(id, r per layer)`` for the halo vertices it read at all);
* a push of ``v`` to rank ``q`` at layer ``l`` is worth ``r_q[v] * min(ls + 1, 1 / s[v])``
  expected reads: the row is readable for ``ls + 1`` iterations, and the next push of ``v``
  (``1 / s`` iterations later on average) refreshes it, so a push is credited with the reads up
  to then;
* AEP pushes only rows worth at least ``min_reads`` (default 1: read once, on average, before
  they expire) and samples the ``nc`` by value instead of degree;
* and, per peer and layer, at most ``cs_q // ((ls + 1) (P - 1))`` rows per iteration: what the
  peer's cache holds for a whole life-span (more would evict rows before they could be read).

Layer 0 of a model on plain features reads rows that training never changes, so they cannot
go stale: there the life-span buys nothing and every push of a row after its first is waste.
Its cache is instead filled once at setup (:func:`fill_static`) with the halo rows the
presampled batches read most, at most ``cs``, and keeps them (no life-span; AEP pushes nothing
at that layer) -- what data-parallel training's hot feature cache does with the same presample.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gnnflow.comm.collectives import CommStats, all_gather, alltoallv, world
from gnnflow.runtime.devices import HOST
from gnnflow.strategies.device_cache import hottest
from gnnflow.strategies.rows import take_rows


def presample_use(sampler: Any, batches: list[torch.Tensor], num_inner: int,
                  num_halo: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(solid_rate [L, num_inner], halo_rate [L, num_halo])``: per layer, the fraction of the
    presampled ``batches`` (local target ids) in which each solid vertex and each halo vertex is a
    source (``sampler``: a :class:`~gnnflow.strategies.hec.strategy.LocalHaloSampler`)."""
    layers = len(sampler.fanouts)
    solid = torch.zeros((layers, num_inner), dtype=torch.float32)
    halo = torch.zeros((layers, num_halo), dtype=torch.float32)
    for i, targets in enumerate(batches):
        blocks, solid_counts = sampler.at(0, i).sample_blocks(targets)
        for layer, (block, n_solid) in enumerate(zip(blocks, solid_counts, strict=True)):
            src = block.src_ids
            solid[layer, src[:n_solid]] += 1.0
            halo[layer, src[n_solid:] - num_inner] += 1.0
    n = max(1, len(batches))
    return solid / n, halo / n


def expected_use(inner: torch.Tensor, halo: torch.Tensor, node_part: np.ndarray, solid_rate: torch.Tensor,
                 halo_rate: torch.Tensor, cache_lines: int, life_span: int) -> tuple[list[torch.Tensor], list[int],
                                                                                       int]:
    """``(value, caps, bytes)``: per layer ``value[l][v, q]``, the reads expected on rank ``q`` per
    push of this rank's solid vertex ``v`` (local index; 0 where ``q`` never read it); per rank
    the rows per iteration and layer its cache holds for a life-span (``caps``); and the bytes
    this rank received to learn them.  ``solid_rate``/``halo_rate``: :func:`presample_use`'s.
    Collective (one exchange of the halo's read rates, one all-gather of the cache sizes)."""
    rank, size = world()
    layers = int(halo_rate.shape[0])
    n_inner = int(inner.numel())
    value = [torch.zeros((n_inner, size), dtype=torch.float32) for _ in range(layers)]
    if size == 1:
        return value, [0], 0
    # tell each owner how often this rank reads its vertices (ids exact in float64 below 2**53)
    read = (halo_rate > 0).any(0)
    ids = halo[read]
    owner = torch.from_numpy(np.asarray(node_part[ids.numpy()], dtype=np.int64))
    rows = torch.cat([ids.double().unsqueeze(1), halo_rate[:, read].t().double()], 1)
    order = torch.argsort(owner, stable=True)
    counts = torch.bincount(owner, minlength=size).tolist()
    stats = CommStats(size)
    received = alltoallv(list(torch.split(rows[order], counts)), stats, kind=HOST)
    # a push is credited with the reads until the vertex's next push refreshes the row
    span = torch.where(solid_rate > 0, (1.0 / solid_rate.clamp(min=1e-12)).clamp(max=life_span + 1.0),
                       torch.full_like(solid_rate, life_span + 1.0))
    for q, got in enumerate(received):
        if q == rank or got.numel() == 0:
            continue
        local = torch.searchsorted(inner, got[:, 0].long())
        for layer in range(layers):
            value[layer][local, q] = (got[:, 1 + layer].float() * span[layer, local])
    lines = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    all_gather(lines, torch.tensor([int(cache_lines)], dtype=torch.int64), HOST)
    caps = [int(c) // ((life_span + 1) * (size - 1)) if q != rank else 0 for q, c in enumerate(lines)]
    return value, caps, int(stats.total_received)


def fill_static(cache: Any, halo: torch.Tensor, read_rate: torch.Tensor, node_part: np.ndarray,
                inner: torch.Tensor, features: Any) -> tuple[int, int]:
    """Store in ``cache`` the rows of the halo vertices this rank reads most often (``read_rate``:
    layer 0's of :func:`presample_use`; never-read ones are left out), at most its capacity,
    asked of their owners (``inner``: this rank's sorted solid ids, ``features[i]``: the row of
    ``inner[i]``).  Returns ``(rows stored, bytes received)``.  Collective (the ids to each owner,
    then the rows back)."""
    _, size = world()
    read = read_rate > 0
    ids = torch.from_numpy(hottest(halo[read].numpy(), read_rate[read].numpy(), cache.capacity))
    owner = torch.from_numpy(np.asarray(node_part[ids.numpy()], dtype=np.int64))
    order = torch.argsort(owner, stable=True)
    ids = ids[order]
    stats = CommStats(size)
    asked = alltoallv(list(torch.split(ids, torch.bincount(owner, minlength=size).tolist())), stats, kind=HOST)
    replies = [take_rows(features, torch.searchsorted(inner, got).numpy()) for got in asked]
    rows = alltoallv(replies, stats, kind=HOST)
    if ids.numel():
        cache.store(ids, torch.cat(rows, 0).to(cache.data.dtype))
    return int(ids.numel()), int(stats.total_received)
