"""Distributed neighbour sampling on the rank's device (DistDGLv2 §4.2.2, sampling on the GPU).

:class:`DeviceDistSampler` is :class:`~gnnflow.strategies.minibatch.sampler.DistNeighborSampler`
with the rank's own work moved to its device: the part's CSR lives there
(:class:`~gnnflow.sampling.tensor_sampler.DeviceCSR`), the rank draws its own vertices' neighbours
with the tensor draws, and stitches and relabels each hop's frontier there.  What must cross
ranks still does, on the host, through the same exchange: the ids of remote seeds go to their
owners, which sample them (on their devices) and reply with counts and sources
(:meth:`DistNeighborSampler._reply`).  The draws are the host sampler's, so the blocks are equal
batch for batch, whichever sampler each rank runs.

:func:`make_device_sampler` is :func:`~gnnflow.strategies.minibatch.sampler.make_sampler`'s
counterpart: the partitioned sampler, or with ``replicate_structure`` the whole CSR on the device
(:class:`~gnnflow.sampling.tensor_sampler.TensorNeighborSampler`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gnnflow.comm.collectives import CommStats, alltoallv
from gnnflow.errors import ConfigError
from gnnflow.runtime.devices import HOST
from gnnflow.sampling.tensor_sampler import (
    DeviceCSR,
    TensorLayerwise,
    TensorNeighborSampler,
    TensorRelabeler,
    csr_sample,
)
from gnnflow.strategies.minibatch.sampler import DistNeighborSampler


class DeviceDistSampler(TensorLayerwise, DistNeighborSampler):
    """The partitioned sampler with the rank's CSR, draws, stitching and relabelling on ``device``
    (module docstring); same arguments as :class:`DistNeighborSampler` plus ``device`` and
    ``csr_budget`` (bytes the part's ``indices`` may take there).  ``node_part`` is copied to
    the device too (4 bytes a vertex), so a frontier's owners are looked up there."""

    def __init__(self, part: Any, node_part: np.ndarray, fanouts: Sequence[int], seed: int = 0,
                 group: Any = None, stats: CommStats | None = None, own_targets: bool = False,
                 device: torch.device | str = "cpu", csr_budget: int | None = None) -> None:
        DistNeighborSampler.__init__(self, part, node_part, fanouts, seed, group=group, stats=stats,
                                     own_targets=own_targets)
        self.device = torch.device(device)
        self.csr = DeviceCSR(part.indptr, part.indices, self.device, csr_budget)
        self.inner = torch.from_numpy(np.asarray(part.inner_ids, dtype=np.int64)).to(self.device)
        self.to_global = torch.from_numpy(np.asarray(part.local_to_global, dtype=np.int64)).to(self.device)
        self.owner = torch.from_numpy(np.array(node_part)).to(self.device)
        self._relabel_t = TensorRelabeler(self.num_nodes, self.device)

    def _draw_own(self, seeds: torch.Tensor, fanout: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw the rank's own ``seeds`` (global ids, on the device): per-seed counts and global
        source ids in CSR order."""
        if seeds.numel() == 0:
            empty = torch.zeros(0, dtype=torch.int64, device=self.device)
            return empty, empty
        rows = torch.searchsorted(self.inner, seeds).clamp_(max=max(0, self.inner.numel() - 1))
        if self.inner.numel() == 0 or not bool((self.inner[rows] == seeds).all()):
            raise ConfigError(f"sampler: rank {self.rank} asked to sample vertices it does not own")
        counts, src_local = csr_sample(self.csr, rows, fanout, self.key, layer, seeds)
        return counts, self.to_global[src_local]

    def _serve(self, request: torch.Tensor, fanout: int, layer: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """A peer's seeds (host ids), drawn on the device; the reply (one column: sources) goes
        back over the host."""
        counts, src = self._draw_own(request.to(self.device), fanout, layer)
        return counts.cpu().numpy(), [src.cpu().numpy()]

    def sample_neighbors(self, frontier: torch.Tensor, fanout: int,  # type: ignore[override]
                         layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-seed counts and sources (CSR over ``frontier``, on the device) of one hop.  Collective."""
        owner = self.owner[frontier].long()
        mine = owner == self.rank
        own = torch.nonzero(mine).flatten()
        counts = torch.zeros(frontier.shape[0], dtype=torch.int64, device=self.device)
        own_counts, own_src = self._draw_own(frontier[own], fanout, layer)
        counts[own] = own_counts
        if self._local_only(layer, own.numel() == frontier.numel()):
            return counts, own_src
        remote = torch.nonzero(~mine).flatten()
        order = remote[torch.argsort(owner[remote], stable=True)]
        send_counts = torch.bincount(owner[remote], minlength=self.world_size).tolist()
        requests = alltoallv(list(torch.split(frontier[order].cpu(), send_counts)), self.stats,
                             group=self.group, kind=HOST)
        empty = np.zeros(0, dtype=np.int64)
        served = [self._serve(req, fanout, layer) if p != self.rank else (empty, [empty])
                  for p, req in enumerate(requests)]
        rcounts_np, (rsrc_np,) = self._reply(served, send_counts, [int(r.shape[0]) for r in requests],
                                             self.max_edges(fanout))
        self.remote_seeds += int(order.numel())
        rcounts = torch.from_numpy(rcounts_np).to(self.device)
        counts[order] = rcounts
        # stitch: edges of own seeds and of remote seeds, reordered into CSR over the frontier
        edge_dst = torch.cat([torch.repeat_interleave(own, own_counts), torch.repeat_interleave(order, rcounts)])
        src = torch.cat([own_src, torch.from_numpy(rsrc_np).to(self.device)])
        return counts, src[torch.argsort(edge_dst, stable=True)]


def make_device_sampler(part: Any, node_part: np.ndarray, fanouts: Sequence[int], seed: int,
                        device: torch.device, replicate_structure: bool = False, graph_path: Any = None,
                        group: Any = None, stats: CommStats | None = None,
                        own_targets: bool = False) -> DeviceDistSampler | TensorNeighborSampler:
    """The partitioned device sampler, or (``replicate_structure``) the whole CSR on ``device``."""
    if not replicate_structure:
        return DeviceDistSampler(part, node_part, fanouts, seed, group=group, stats=stats,
                                 own_targets=own_targets, device=device)
    from gnnflow.data.store import open_store

    store = open_store(graph_path, validate=False)
    return TensorNeighborSampler(store.indptr, store.indices, fanouts, seed=seed, device=device)
