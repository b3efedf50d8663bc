"""Layer-wise distributed inference over a partition, a chunk of destinations at a time.

Evaluation needs every vertex's output with its FULL neighbourhood.  As DGL's
and PyG's inference loops do, the layers run one after another over all
vertices (never a multi-hop neighbourhood at once); here each rank computes its
own (inner) vertices and the work is cut into chunks so that memory is bounded
by a chunk, not by the part:

    for each layer l:
        for each chunk of the rank's inner vertices (same number of rounds on every rank):
            sources = the chunk's in-neighbours (inner or halo, local CSR)
            rows of inner sources  <- this rank's layer-l table
            rows of halo sources   <- their owners' layer-l tables (one exchange)
            table_{l+1}[chunk]     <- layer l on the chunk's block

The tables of the hidden layers (``n_inner x hidden`` floats: 0.6 GB for a
products-sized part at hidden 256) are not anonymous memory: they are an
unlinked scratch file, memory-mapped, whose pages are dropped from the process
after every chunk (:func:`gnnflow.io.release_pages`; the kernel's page cache
keeps them and can write them back under pressure).  While a layer reads the
previous table at random rows, the kernel's fault-around maps most of it, so a
rank's resident set holds about one hidden table at a time (the one being
read), plus a chunk; the feature shard's pages are released after the first
layer.  Small tables stay in memory.  The last layer's outputs (the logits,
``n_inner x classes``) are returned.

On a GPU the chunks run on the rank's device and the tables stay there where they fit
(:mod:`gnnflow.strategies.device_eval`): a chunk's inner rows are gathered on the device, only
its halo rows come over the host (the exchange, whose owners serve them from their device
tables), and a chunk's source rows take at most ``chunk_bytes(device)`` of device memory.

Collective: every rank of ``group`` calls it with the same model.
"""

from __future__ import annotations

import math
import mmap
import os
import tempfile
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.comm.collectives import all_reduce, part_degrees, world
from gnnflow.io import release_pages, ticking
from gnnflow.runtime.devices import HOST
from gnnflow.sampling import Block
from gnnflow.strategies.common import read_only_tensor
from gnnflow.strategies.device_eval import chunk_rows as default_chunk_rows
from gnnflow.strategies.device_eval import empty_block, fits_on_device
from gnnflow.strategies.minibatch.feature_store import FeatureStore


def _limit(name: str, default: int) -> int:
    """A byte limit: ``GNNFLOW_INFERENCE_<name>`` when set (tests shrink them), else ``default``."""
    return int(os.environ.get(f"GNNFLOW_INFERENCE_{name}", default))


def in_memory_bytes() -> int:
    """Tables at most this large stay in memory; larger ones go to a scratch file (64 MiB)."""
    return _limit("IN_MEMORY_BYTES", 64 << 20)


class ScratchRows:
    """An ``[n, d]`` float32 table: in memory when small, else an unlinked memory-mapped file
    (in ``TMPDIR``) whose resident pages :meth:`release` drops."""

    def __init__(self, n: int, d: int, directory: str | None = None) -> None:
        self.shape = (n, d)
        nbytes = n * d * 4
        self._mm: mmap.mmap | None = None
        if nbytes <= in_memory_bytes():
            self.array = np.zeros((n, d), dtype=np.float32)
            return
        fd, path = tempfile.mkstemp(prefix="gnnflow-inference-", dir=directory)
        try:
            os.unlink(path)  # gone from the file system now: nothing outlives the process
            os.ftruncate(fd, nbytes)
            self._mm = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
        self.array = np.frombuffer(self._mm, dtype=np.float32).reshape(n, d)

    def release(self) -> None:
        if self._mm is not None:
            self._mm.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Drop the table (its file goes with the last view of it)."""
        self.array = np.zeros((0, self.shape[1]), dtype=np.float32)
        if self._mm is not None:
            self.release()
            try:
                self._mm.close()
            except BufferError:  # a view is still referenced somewhere; the mapping goes with it
                pass
            self._mm = None


def max_over_ranks(n_chunks: int, group: Any = None) -> int:
    """The most chunks any rank has (every rank runs that many exchange rounds)."""
    if world(group)[1] == 1:
        return n_chunks
    t = torch.tensor([n_chunks], dtype=torch.int64)
    all_reduce(t, HOST, op=dist.ReduceOp.MAX, group=group)
    return int(t.item())


def _chunk_block(part: Any, rows: np.ndarray, degrees: torch.Tensor | None) -> tuple[Block, np.ndarray]:
    """The block of inner rows ``rows`` (contiguous, ascending, non-empty): dst = those vertices,
    src = dst then their other in-neighbours; returns the block and the sources' local ids."""
    indptr = np.asarray(part.indptr)
    lo, hi = int(indptr[rows[0]]), int(indptr[rows[-1] + 1])
    nbr = np.asarray(part.indices[lo:hi], dtype=np.int64)
    sub_ptr = np.asarray(indptr[rows[0]:rows[-1] + 2], dtype=np.int64) - lo
    uniq, inv = np.unique(np.concatenate([rows, nbr]), return_inverse=True)
    # destinations first (DGL layout), then the other sources in ascending local id
    is_dst = np.zeros(uniq.shape[0], dtype=bool)
    is_dst[inv[: rows.shape[0]]] = True
    order = np.concatenate([inv[: rows.shape[0]], np.flatnonzero(~is_dst)])
    pos = np.empty(uniq.shape[0], dtype=np.int64)
    pos[order] = np.arange(order.shape[0])
    src_local = uniq[order]
    l2g = part.local_to_global
    block = Block(dst_ids=torch.from_numpy(l2g[rows]), src_ids=torch.from_numpy(l2g[src_local]),
                  indptr=torch.from_numpy(sub_ptr), indices=torch.from_numpy(pos[inv[rows.shape[0]:]]))
    if part.edge_types is not None:  # a typed book: the relations (rows grouped by them) and vertex types
        block.etypes = torch.from_numpy(np.asarray(part.edge_types[lo:hi], dtype=np.int64))
        block.src_types = torch.from_numpy(np.asarray(part.node_types[src_local], dtype=np.int64))
    if degrees is not None:
        block.src_deg = degrees[torch.from_numpy(src_local), 1]
        block.dst_deg = degrees[torch.from_numpy(rows), 0]
    return block, src_local


def _rows_on(table: Any, pos: np.ndarray, device: torch.device) -> torch.Tensor:
    """Rows ``pos`` of a layer table (host array, scratch file or device tensor) on ``device``."""
    if isinstance(table, torch.Tensor):
        return table[torch.from_numpy(pos).to(table.device)].to(device)
    return torch.from_numpy(np.asarray(np.take(table, pos, axis=0), dtype=np.float32)).to(device)


def _chunks(rows: np.ndarray, step: int) -> list[np.ndarray]:
    """``rows`` (sorted) cut into contiguous runs of at most ``step`` rows (a chunk's block reads
    one slice of the CSR)."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    out = []
    for run in np.split(rows, breaks) if rows.size else []:
        out += [run[s:s + step] for s in range(0, run.shape[0], step)]
    return out


def inner_degrees(part: Any, node_part: np.ndarray, group: Any = None) -> torch.Tensor:
    """``[num_inner, 2]`` float32: whole-graph in- and out-degree of ``part``'s inner vertices,
    counted from the parts (:func:`gnnflow.comm.collectives.part_degrees`).  Collective.  Float32
    rows (exact below 2**24) so that they travel through a feature store."""
    in_deg, out_inner = part_degrees(part, node_part, group)
    return torch.from_numpy(np.stack([in_deg, out_inner], 1).astype(np.float32))


def local_degrees(part: Any, node_part: np.ndarray, inner: torch.Tensor | None = None,
                  group: Any = None) -> torch.Tensor:
    """``[num_local, 2]`` float32 whole-graph (in, out)-degrees of ``part``'s local vertices
    (inner, then halo; a halo vertex's in-degree is not known here and is 0): what
    :func:`layerwise_inference` takes for GCN.  ``inner``: :func:`inner_degrees`, when already
    known.  Collective: a source's out-degree is spread over the parts that hold its out-edges,
    so the halo vertices' totals come from their owners (one exchange)."""
    if inner is None:
        inner = inner_degrees(part, node_part, group)
    store = FeatureStore(part, node_part, local_rows=inner[:, 1:], group=group)
    halo_out = store.fetch(part.halo_ids)[:, 0]
    return torch.cat([inner, torch.stack([torch.zeros_like(halo_out), halo_out], 1)], 0)


@torch.no_grad()
def layerwise_inference(net: Any, part: Any, node_part: np.ndarray, device: torch.device,
                        degrees: torch.Tensor | None = None, group: Any = None,
                        layers: int | None = None, chunk_rows: int | None = None,
                        inputs: Any = None, wanted: np.ndarray | None = None) -> torch.Tensor:
    """Logits of ``part``'s inner vertices (see the module docstring).  ``degrees``: the
    ``[num_local, 2]`` whole-graph (in, out)-degrees of the part's local vertices, for GCN.
    ``layers = k``: the outputs of layer ``k`` instead (the first ``k`` layers run; an
    embedding).  ``chunk_rows``: destinations per chunk (default: about ``chunk_bytes()`` of
    source rows).  ``inputs``: layer 0's rows of the inner vertices (default: the feature
    shard), e.g. a relational model's embedded typed inputs
    (:mod:`gnnflow.strategies.minibatch.relational`); a :class:`ScratchRows` given is closed after
    layer 0, as a hidden table is.  On a typed book the blocks carry edge and vertex types.
    ``wanted``: the inner rows whose outputs are read (sorted; e.g. the labelled vertices):
    the last layer computes only those, the other rows of the result stay unwritten (and
    never resident: ogbn-mag's authors need no 349 logits each)."""
    was = net.training
    net.eval()
    n_in = part.num_inner
    halo = np.asarray(part.halo_ids, dtype=np.int64)
    scratch: ScratchRows | None = inputs if isinstance(inputs, ScratchRows) else None
    # layer 0's rows: the memory-mapped feature shard, or the given table
    table: Any = part.features if inputs is None else scratch.array if scratch is not None else inputs
    if inputs is None and fits_on_device(4 * n_in * int(table.shape[1]), device):  # or all of it on a GPU
        table = read_only_tensor(np.asarray(table, dtype=np.float32)).to(device)
    stop = net.num_layers if layers is None else layers
    try:
        for layer in range(stop):
            dim = int(table.shape[1])
            # the layer's output shape (an empty block: every rank knows it, even one owning nothing)
            shape = net.layer_step(layer, empty_block(device), torch.zeros((0, dim), device=device)).shape[1:]
            last = layer == stop - 1
            out = torch.empty((n_in, *shape)) if last else None
            width = int(math.prod(shape))
            nxt: Any = None
            if not last:  # the next table: on the device where it fits, else a host table
                nxt = torch.empty((n_in, width), device=device) if fits_on_device(4 * n_in * width, device) \
                    else ScratchRows(n_in, width)
            step = chunk_rows or default_chunk_rows(n_in, part.num_edges, dim, device)
            chunks = _chunks(np.arange(n_in, dtype=np.int64) if wanted is None or not last
                             else np.asarray(wanted, dtype=np.int64), step)
            store = FeatureStore(part, node_part, local_rows=table, group=group)
            rounds: Any = range(max_over_ranks(len(chunks), group))
            if world()[0] == 0:
                rounds = ticking(rounds, f"evaluation, layer {layer + 1}/{stop}: chunk", len(rounds))
            for c in rounds:
                if c >= len(chunks):  # this rank is done; it still serves its peers' requests
                    store.fetch(np.zeros(0, dtype=np.int64))
                    continue
                rows = chunks[c]
                block, src_local = _chunk_block(part, rows, degrees)
                is_halo = src_local >= n_in
                h_src = torch.empty((src_local.shape[0], dim), dtype=torch.float32, device=device)
                h_src[torch.from_numpy(np.flatnonzero(is_halo)).to(device)] = \
                    store.fetch(halo[src_local[is_halo] - n_in]).to(device)
                h_src[torch.from_numpy(np.flatnonzero(~is_halo)).to(device)] = \
                    _rows_on(table, src_local[~is_halo], device)
                h = net.layer_step(layer, block.to(device), h_src)
                if out is not None:
                    out[rows[0]:rows[-1] + 1] = h.cpu()
                elif isinstance(nxt, torch.Tensor):
                    nxt[rows[0]:rows[-1] + 1] = h.reshape(h.shape[0], -1)
                else:
                    nxt.array[rows[0]:rows[-1] + 1] = h.reshape(h.shape[0], -1).cpu().numpy()
                    nxt.release()
                if scratch is not None:
                    scratch.release()
            del store
            if out is not None:
                return out
            if scratch is not None:
                scratch.close()
            elif not isinstance(table, torch.Tensor):  # the feature shard is not read again: its
                release_pages(table)  # pages may leave the resident set
            scratch = nxt if isinstance(nxt, ScratchRows) else None
            table = nxt if isinstance(nxt, torch.Tensor) else nxt.array
    finally:
        if scratch is not None:
            scratch.close()
        net.train(was)
    raise AssertionError("unreachable: the model has no layers")
