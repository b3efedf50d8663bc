"""Neighbour sampling in torch tensor operations, on any device (DistDGLv2 §4.2.2: sampling on the GPU).

:class:`TensorNeighborSampler` draws, de-duplicates and builds blocks exactly as
:class:`gnnflow.sampling.NeighborSampler` does, batch for batch, but every step is a tensor
operation on the device that holds the CSR, so a GPU rank samples where it trains:

* **draws** — the counter-based draws of :mod:`gnnflow.sampling.draws` (SplitMix64 finaliser,
  Robert Floyd's algorithm, 53-bit uniforms) in int64 arithmetic.  Multiplication, addition and
  xor of int64 words wrap like uint64 (two's complement), so they give the same bits; a right
  shift of an int64 is arithmetic, so a logical shift is the arithmetic one with the top ``s``
  bits masked off (:func:`shift_right`).  Floyd's ``t = floor(u * (j + 1))`` is the same float64
  product and truncation as numpy's, so the chosen positions are identical;
* **de-duplication and block construction** — DGL's ``to_block`` layout, what
  :class:`gnnflow.sampling.neighbor.Relabeler` produces: destinations first, then the new
  sources in ascending id (:func:`relabel`: one sort of the sampled sources, one
  ``searchsorted`` against the destinations).

On CPU tensors the sampler is therefore the numpy sampler's equal, which the tests check for
whole epochs; on a GPU the same code runs as kernels.  The CSR lives on the device
(:class:`DeviceCSR`); where ``indices`` do not fit the device budget they stay in pinned host
memory and only the sampled entries are gathered there and copied over.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gnnflow.errors import ConfigError
from gnnflow.sampling.block import Block
from gnnflow.sampling.draws import _M1, _M2, _TO_UNIT, GOLDEN, DrawKey
from gnnflow.sampling.neighbor import LayerwiseSampler, check_fanouts

_MASK = (1 << 64) - 1


def as_int64(word: int) -> int:
    """A 64-bit word (0 .. 2**64-1) as the int64 value with the same bits."""
    word &= _MASK
    return word - (1 << 64) if word >> 63 else word


_GOLDEN, _MUL1, _MUL2 = as_int64(GOLDEN), as_int64(_M1), as_int64(_M2)


def shift_right(z: torch.Tensor, s: int) -> torch.Tensor:
    """The logical right shift of int64 words by ``s`` (1..63): torch's is arithmetic, so the
    sign bits it shifts in are masked off."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 words (:func:`gnnflow.sampling.draws.mix` bit for bit)."""
    z = z ^ shift_right(z, 30)
    z = z * _MUL1
    z = z ^ shift_right(z, 27)
    z = z * _MUL2
    return z ^ shift_right(z, 31)


def row_hashes(key: DrawKey, layer: int, vertex_ids: torch.Tensor) -> torch.Tensor:
    """One int64 word per destination vertex (global id): :meth:`DrawKey.row_hashes` in tensors."""
    return mix(mix(vertex_ids.long() + _GOLDEN) ^ as_int64(key.layer(layer)))


def uniforms(row_hash: torch.Tensor, i: int) -> torch.Tensor:
    """The ``i``-th uniform in [0, 1) of every row (float64, the top 53 bits)."""
    z = mix(row_hash + as_int64((i + 1) * GOLDEN))
    return shift_right(z, 11).to(torch.float64) * _TO_UNIT


def floyd_choose(deg: torch.Tensor, k: int, row_hash: torch.Tensor) -> torch.Tensor:
    """``[R, k]`` sorted distinct positions in ``[0, deg_r)`` per row: Floyd's algorithm, as
    :func:`gnnflow.sampling.draws.floyd_choose` (step ``i`` draws ``t`` in ``[0, j]``,
    ``j = d - k + i``, and takes ``j`` when ``t`` was taken already)."""
    chosen = torch.empty((deg.shape[0], k), dtype=torch.int64, device=deg.device)
    base = deg - k
    for i in range(k):
        j = base + i
        t = torch.minimum((uniforms(row_hash, i) * (j + 1)).to(torch.int64), j)
        if i:
            t = torch.where((chosen[:, :i] == t[:, None]).any(1), j, t)
        chosen[:, i] = t
    return chosen.sort(dim=1).values


def ragged_arange(starts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``cat([arange(s, s + c) for s, c in zip(starts, counts)])`` in tensor ops."""
    total = int(counts.sum())
    if total == 0:
        return torch.empty(0, dtype=torch.int64, device=starts.device)
    offsets = torch.cumsum(counts, 0) - counts
    return (torch.repeat_interleave(starts - offsets, counts, output_size=total)
            + torch.arange(total, dtype=torch.int64, device=starts.device))


def sample_edge_positions(indptr: torch.Tensor, rows: torch.Tensor, fanout: int, key: DrawKey, layer: int,
                          vertex_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled positions into ``indices`` and per-row counts (CSR over ``rows``):
    :func:`gnnflow.sampling.neighbor.sample_edge_positions` in tensor ops."""
    starts = indptr[rows]
    deg = indptr[rows + 1] - starts
    if fanout < 0:
        return ragged_arange(starts, deg), deg
    counts = deg.clamp(max=fanout)
    eid = ragged_arange(starts, counts)
    big = torch.nonzero(deg > fanout).flatten()
    if big.numel():
        chosen = floyd_choose(deg[big], fanout, row_hashes(key, layer, vertex_ids[big]))
        chosen += starts[big][:, None]
        # rows of ``big`` hold exactly ``fanout`` slots each, starting at their CSR offset
        first_slot = (torch.cumsum(counts, 0) - counts)[big]
        slots = first_slot[:, None] + torch.arange(fanout, dtype=torch.int64, device=rows.device)
        eid[slots.reshape(-1)] = chosen.reshape(-1)
    return eid, counts


def relabel(dst_ids: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src_ids, local)``: the block's sources (``dst_ids`` first, then the other sampled
    sources in ascending id) and each sampled source's position among them (DGL's ``to_block``;
    ``dst_ids`` are unique)."""
    uniq, inv = torch.unique(src, sorted=True, return_inverse=True)
    n_dst = dst_ids.shape[0]
    if n_dst:
        sorted_dst, order = torch.sort(dst_ids, stable=True)
        at = torch.searchsorted(sorted_dst, uniq).clamp_(max=n_dst - 1)
        in_dst = sorted_dst[at] == uniq
    else:
        order = at = torch.zeros_like(uniq)
        in_dst = torch.zeros(uniq.shape[0], dtype=torch.bool, device=uniq.device)
    new = uniq[~in_dst]
    local_uniq = torch.empty_like(uniq)
    local_uniq[in_dst] = order[at[in_dst]]
    local_uniq[~in_dst] = n_dst + torch.arange(new.shape[0], dtype=torch.int64, device=uniq.device)
    return torch.cat([dst_ids, new]), local_uniq[inv.reshape(-1)]


class TensorRelabeler:
    """:func:`relabel` with a vertex bitmap when the graph is not much larger than the sample
    (one scatter and one ``nonzero``, which lists the new sources in ascending id; no sort), as
    :class:`gnnflow.sampling.neighbor.Relabeler` chooses; both paths give the same blocks."""

    # use the bitmap when num_nodes <= _BITMAP_RATIO * number of sampled edges
    _BITMAP_RATIO = 64

    def __init__(self, num_nodes: int, device: torch.device) -> None:
        self.num_nodes = num_nodes
        self.device = device
        self._mark: torch.Tensor | None = None
        self._pos: torch.Tensor | None = None

    def __call__(self, dst_ids: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.num_nodes > self._BITMAP_RATIO * max(src.shape[0], 1):
            return relabel(dst_ids, src)
        if self._mark is None:
            self._mark = torch.zeros(self.num_nodes, dtype=torch.bool, device=self.device)
            self._pos = torch.empty(self.num_nodes, dtype=torch.int32 if self.num_nodes < 2**31 else torch.int64,
                                    device=self.device)
        mark, pos = self._mark, self._pos
        assert pos is not None
        mark[src] = True
        mark[dst_ids] = False
        new = torch.nonzero(mark).flatten()
        mark[new] = False
        src_ids = torch.cat([dst_ids, new])
        pos[src_ids] = torch.arange(src_ids.shape[0], dtype=pos.dtype, device=self.device)
        return src_ids, pos[src].long()


def tensor_block(dst: torch.Tensor, counts: torch.Tensor, src: torch.Tensor,
                 relabeler: TensorRelabeler | None = None) -> Block:
    """The block of destinations ``dst`` whose sampled sources are ``src`` (CSR order, ``counts``
    per destination); ``relabeler`` (default :func:`relabel`) numbers the sources."""
    src_ids, local = (relabeler or relabel)(dst, src)
    indptr = torch.zeros(dst.shape[0] + 1, dtype=torch.int64, device=dst.device)
    torch.cumsum(counts, 0, out=indptr[1:])
    return Block(dst_ids=dst.clone(), src_ids=src_ids, indptr=indptr, indices=local)


def device_budget(device: torch.device, share: float = 0.25) -> int | None:
    """Bytes a structure may take on ``device``: ``share`` of the CUDA memory free now; None
    (no limit: the host holds it anyway) on the CPU."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free * share)


class DeviceCSR:
    """A CSR (over destinations) for tensor sampling on ``device``: ``indptr`` on the device;
    ``indices`` on the device when they fit ``budget`` bytes (default: a quarter of the free
    device memory), else in pinned host memory, gathered there for the sampled positions only.
    ``indices`` keep their stored width (int32 stores half the bytes)."""

    def __init__(self, indptr: np.ndarray | torch.Tensor, indices: np.ndarray | torch.Tensor,
                 device: torch.device | str, budget: int | None = None) -> None:
        self.device = torch.device(device)
        self.indptr = _tensor(indptr).long().to(self.device)
        idx = _tensor(indices)
        if idx.dtype not in (torch.int32, torch.int64):
            idx = idx.long()
        budget = device_budget(self.device) if budget is None else budget
        self.resident = budget is None or idx.numel() * idx.element_size() <= budget
        if self.resident:
            self.indices = idx.to(self.device)
        else:  # too large for the device: pinned, so the sampled entries cross without staging
            self.indices = idx.pin_memory() if self.device.type == "cuda" else idx
        self.num_nodes = int(self.indptr.shape[0]) - 1

    def sources(self, eid: torch.Tensor) -> torch.Tensor:
        """``indices[eid]`` (int64) on the device."""
        if self.resident:
            return self.indices[eid].long()
        return self.indices[eid.cpu()].long().to(self.device, non_blocking=True)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def in_degrees(self) -> torch.Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def out_degrees(self) -> torch.Tensor:
        """How many in-neighbour lists hold each vertex (int64, on the device)."""
        return torch.bincount(self.indices, minlength=self.num_nodes).to(self.device)  # int32 too: no copy


def read_only_tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``a``'s memory, also when ``a`` is a read-only memory map (a store's CSR,
    a shard's features: they stay paged from the file; nothing writes them), without torch's
    warning about non-writable arrays."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(a)


def _tensor(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return read_only_tensor(np.asarray(x))  # no copy of a memory-mapped CSR; nothing writes it


class TensorLayerwise(LayerwiseSampler):
    """A layer-wise sampler whose ``sample_neighbors(dst, fanout, layer) -> (counts, src)`` takes
    and returns tensors on ``self.device``; the blocks are assembled there (:func:`tensor_block`)."""

    device: torch.device
    _relabel_t: TensorRelabeler

    def sample_layer(self, frontier: np.ndarray | torch.Tensor, fanout: int,
                     layer: int) -> tuple[Block, torch.Tensor]:
        dst = _tensor(frontier).long().to(self.device)
        counts, src = self.sample_neighbors(dst, int(fanout), int(layer))  # type: ignore[arg-type]
        block = tensor_block(dst, counts, src, self._relabel_t)
        return block, block.src_ids


class TensorNeighborSampler(TensorLayerwise):
    """:class:`gnnflow.sampling.NeighborSampler` in tensor ops on ``device`` (same arguments, the
    same blocks batch for batch, on that device).  ``csr_budget``: bytes the CSR's ``indices``
    may take on the device (:class:`DeviceCSR`)."""

    def __init__(
        self,
        indptr: np.ndarray | torch.Tensor,
        indices: np.ndarray | torch.Tensor,
        fanouts: Sequence[int],
        seed: int = 0,
        vertex_ids: np.ndarray | torch.Tensor | None = None,
        device: torch.device | str = "cpu",
        csr_budget: int | None = None,
    ) -> None:
        if np.ndim(indptr) != 1 or len(indptr) < 1:
            raise ConfigError("TensorNeighborSampler: indptr must be a 1-D array of num_nodes+1 offsets")
        self.device = torch.device(device)
        self.csr = DeviceCSR(indptr, indices, self.device, csr_budget)
        self.fanouts = check_fanouts(fanouts)
        self.num_nodes = self.csr.num_nodes
        self.seed = int(seed)
        self.vertex_ids = None if vertex_ids is None else _tensor(vertex_ids).long().to(self.device)
        self.at(0, 0)
        self._relabel_t = TensorRelabeler(self.num_nodes, self.device)

    def sample_neighbors(self, dst: torch.Tensor, fanout: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Uniform sampling without replacement from the whole CSR (``dst``: rows, on the device)."""
        return csr_sample(self.csr, dst, fanout, self.key, layer,
                          dst if self.vertex_ids is None else self.vertex_ids[dst])


def full_block(csr: DeviceCSR, rows: torch.Tensor, relabeler: TensorRelabeler | None = None) -> Block:
    """The block of ``rows`` (unique vertex ids, on the CSR's device) with all their in-edges:
    what sampling with fanout -1 gives (no draws), as full-neighbourhood inference needs."""
    counts, src = csr_sample(csr, rows, -1, DrawKey(0), 0, rows)
    return tensor_block(rows, counts, src, relabeler)


def csr_sample(csr: DeviceCSR, rows: torch.Tensor, fanout: int, key: DrawKey, layer: int,
               vertex_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counts, sources)`` of ``rows`` of ``csr``: per row how many in-neighbours were drawn, and
    their ``indices`` entries in CSR order (``vertex_ids``: the rows' global ids, which key the
    draws)."""
    eid, counts = sample_edge_positions(csr.indptr, rows, fanout, key, layer, vertex_ids)
    return counts, csr.sources(eid)
