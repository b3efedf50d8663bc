"""Blocks: one layer of a sampled computation graph (GSplit §5, DistDGLv2 §3.2).

A block is the bipartite graph ``dst <- src`` that one GNN layer aggregates
over.  As in DGL, the source vertices list the destinations first
(``src_ids[:num_dst] == dst_ids``), so a layer reads its own vertex's
previous representation as ``h_src[:num_dst]``.  Edges are stored in CSR over
destinations: the sources of destination ``i`` are
``src_ids[indices[indptr[i]:indptr[i+1]]]`` (``indices`` are *local* positions
into ``src_ids``).

On a typed (homogenized) graph a block also carries ``etypes``, the relation of
every edge (aligned with ``indices``; the typed sampler lists a destination's
edges grouped by relation, in relation order), and ``src_types``, the vertex
type of every source (so ``src_types[:num_dst]`` are the destinations').
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch


def as_long_tensor(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """``x`` as an int64 tensor, sharing memory where possible (read-only arrays are copied)."""
    if isinstance(x, torch.Tensor):
        return x.long()
    arr = np.asarray(x)
    if arr.dtype != np.int64:
        arr = arr.astype(np.int64)
    if not arr.flags.writeable:
        arr = np.array(arr)
    return torch.from_numpy(arr)


@dataclass
class Block:
    """One sampled layer: ``dst_ids <- src_ids`` with CSR edges over destinations.

    ``src_deg`` / ``dst_deg`` optionally carry degrees taken from the whole
    graph (float); :class:`gnnflow.nn.GCNConv` uses them for its normalisation
    when present and the block's own degrees otherwise.  ``etypes`` (int64 per
    edge) and ``src_types`` (int64 per source) are None on an untyped graph.
    """

    dst_ids: torch.Tensor
    src_ids: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    src_deg: torch.Tensor | None = None
    dst_deg: torch.Tensor | None = None
    etypes: torch.Tensor | None = None
    src_types: torch.Tensor | None = None
    #: derived structures (expanded destinations, transposed CSR) computed on first use
    cache: dict[Any, Any] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def num_dst(self) -> int:
        return int(self.dst_ids.shape[0])

    @property
    def num_src(self) -> int:
        return int(self.src_ids.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def device(self) -> torch.device:
        return self.indices.device

    def in_degrees(self) -> torch.Tensor:
        """In-degree of each destination within the block (int64 [num_dst])."""
        return self.indptr[1:] - self.indptr[:-1]

    def out_degrees(self) -> torch.Tensor:
        """Out-degree of each source within the block (int64 [num_src]), cached."""
        out = self.cache.get("out_degrees")
        if out is None:
            out = torch.bincount(self.indices, minlength=self.num_src)
            self.cache["out_degrees"] = out
        assert isinstance(out, torch.Tensor)
        return out

    def edge_dst(self, cache: bool = True) -> torch.Tensor:
        """Local destination of every edge (CSR row index expanded), cached unless ``cache`` is false."""
        out = self.cache.get("edge_dst")
        if out is None:
            out = torch.repeat_interleave(
                torch.arange(self.num_dst, device=self.device), self.in_degrees(), output_size=self.num_edges
            )
            if cache:
                self.cache["edge_dst"] = out
        assert isinstance(out, torch.Tensor)
        return out

    def to(self, device: torch.device | str) -> Block:
        """A copy with every tensor on ``device`` (self when already there)."""
        device = torch.device(device)
        if self.indices.device == device:
            return self
        moved = {
            f.name: (getattr(self, f.name).to(device) if getattr(self, f.name) is not None else None)
            for f in fields(self)
            if f.name != "cache"
        }
        return Block(**moved)

    @classmethod
    def empty(cls, device: torch.device | str = "cpu") -> Block:
        """A block with no vertices (with degrees, for GCN; edge and vertex types, for the relational
        layers): a layer on it tells its output width without computing anything."""
        none = torch.zeros(0, dtype=torch.int64, device=device)
        return cls(dst_ids=none, src_ids=none, indptr=torch.zeros(1, dtype=torch.int64, device=device),
                   indices=none, src_deg=torch.zeros(0, device=device), dst_deg=torch.zeros(0, device=device),
                   etypes=none, src_types=none)

    @classmethod
    def full_graph(cls, indptr: np.ndarray | torch.Tensor, indices: np.ndarray | torch.Tensor,
                   etypes: np.ndarray | torch.Tensor | None = None,
                   src_types: np.ndarray | torch.Tensor | None = None) -> Block:
        """The whole graph as one block: ``dst = src = all vertices`` (full-batch training);
        ``etypes``/``src_types``: its edge and vertex types, on a typed graph."""
        indptr_t = as_long_tensor(indptr)
        ids = torch.arange(indptr_t.shape[0] - 1, dtype=torch.int64)
        return cls(dst_ids=ids, src_ids=ids, indptr=indptr_t, indices=as_long_tensor(indices),
                   etypes=None if etypes is None else as_long_tensor(etypes),
                   src_types=None if src_types is None else as_long_tensor(src_types))

    def __repr__(self) -> str:
        return f"Block(num_dst={self.num_dst}, num_src={self.num_src}, num_edges={self.num_edges})"
