"""Layer-wise distributed inference over a partition, a chunk of destinations at a time.

Evaluation needs every vertex's output with its FULL neighbourhood.  As DGL's
and PyG's inference loops do, the layers run one after another over all
vertices (never a multi-hop neighbourhood at once); here each rank computes its
own (inner) vertices and the work is cut into chunks so that memory is bounded
by a chunk, not by the part:

    table_0 <- the rank's feature rows (inner), then
    for each layer l:
        sources_l <- table_l, or every row of it projected once (a narrowing layer:
                     GCN, or SAGE into fewer columns; ``GNN.narrows``)
        halo rows of sources_l <- their owners' rows (ONE exchange per layer, in slices)
        for each chunk of the rank's inner vertices (no collective: ranks run at their own pace):
            sources  = the chunk's in-neighbours (inner or halo, local CSR), destinations first
            table_{l+1}[chunk] <- layer l on the chunk's block (rows of sources_l, one gather)

A table holds every local vertex (``[n_inner + n_halo, d]``: inner rows, then
halo rows), so a halo row read by many chunks is fetched once, and a narrowing
layer projects each row once instead of once per chunk that reads it (and its
exchange moves the narrow rows).  The tables of the hidden layers (0.6 GB for
a products-sized part's inner rows at hidden 256) are not anonymous memory:
they are an unlinked scratch file, memory-mapped, whose pages are dropped from
the process after every chunk (:func:`gnnflow.io.release_pages`; the kernel's
page cache keeps them and can write them back under pressure).  While a layer
reads a table at random rows, the kernel's fault-around maps most of it, so a
rank's resident set holds about one table at a time (the one being read), plus
a chunk; the feature shard's pages are released once copied.  Small tables
stay in memory.  The last layer's outputs (the logits, ``n_inner x classes``)
are returned.

On a GPU the chunks run on the rank's device and the tables stay there where they fit
(:mod:`gnnflow.strategies.device_eval`): a chunk's rows are gathered on the device, only the
halo rows come over the host (the layer's exchange, whose owners serve them from their device
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
from gnnflow.io import release_pages, row_chunks, ticking
from gnnflow.runtime.devices import HOST
from gnnflow.runtime.watchdog import note_progress
from gnnflow.sampling import Block
from gnnflow.sampling.tensor_sampler import read_only_tensor
from gnnflow.strategies.device_eval import chunk_bytes, empty_block, fits_on_device
from gnnflow.strategies.device_eval import chunk_rows as default_chunk_rows
from gnnflow.strategies.minibatch.feature_store import EXCHANGE_BYTES, FeatureStore


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


class _ChunkSources:
    """A chunk's sources in block order (its destinations, then their other in-neighbours in
    ascending local id) without sorting: two ``num_local`` arrays reused by every chunk (a mark
    per local vertex and its position in the chunk), beside what a block reads per source (the
    part's local-to-global ids, the GCN ``degrees``).  With ``device`` (a layer whose table is a
    tensor where the chunks run, e.g. on a GPU) all of it lives there and the sources are found
    by tensor operations, in the same order: a chunk's per-edge work leaves the host."""

    def __init__(self, part: Any, num_local: int, degrees: torch.Tensor | None,
                 device: torch.device | None = None) -> None:
        self.device = device
        l2g = np.asarray(part.local_to_global, dtype=np.int64)
        if device is None:
            self.seen: Any = np.zeros(num_local, dtype=bool)
            self.pos: Any = np.zeros(num_local, dtype=np.int64)
            self.l2g: Any = l2g
            self.degrees = degrees
        else:
            self.seen = torch.zeros(num_local, dtype=torch.bool, device=device)
            self.pos = torch.zeros(num_local, dtype=torch.int64, device=device)
            self.l2g = torch.from_numpy(l2g).to(device)
            self.degrees = None if degrees is None else degrees.to(device)

    def __call__(self, rows: np.ndarray, nbr: np.ndarray) -> tuple[Any, Any]:
        """``(src_local, positions of nbr in it)``: numpy arrays, or tensors on the device."""
        if self.device is None:
            self.seen[nbr] = True
            self.seen[rows] = False
            others = np.flatnonzero(self.seen)
            self.seen[others] = False
            src_local = np.concatenate([rows, others])
            self.pos[src_local] = np.arange(src_local.shape[0])
            return src_local, self.pos[nbr]
        dst = torch.arange(int(rows[0]), int(rows[-1]) + 1, device=self.device)  # a chunk's rows are a run
        nbr_t = torch.from_numpy(nbr).to(self.device)
        self.seen[nbr_t] = True
        self.seen[dst] = False
        others = torch.nonzero(self.seen).squeeze(1)  # ascending, as flatnonzero
        self.seen[others] = False
        src = torch.cat([dst, others])
        self.pos[src] = torch.arange(src.shape[0], device=self.device)
        return src, self.pos[nbr_t]


def _chunk_block(part: Any, rows: np.ndarray, sources: _ChunkSources) -> tuple[Block, Any]:
    """The block of inner rows ``rows`` (contiguous, ascending, non-empty): dst = those vertices,
    src = dst then their other in-neighbours; returns the block and the sources' local ids
    (built where ``sources`` lives: tensors on its device, or numpy on the host)."""
    indptr = np.asarray(part.indptr)
    lo, hi = int(indptr[rows[0]]), int(indptr[rows[-1] + 1])
    nbr = np.asarray(part.indices[lo:hi], dtype=np.int64)
    sub_ptr = torch.from_numpy(np.asarray(indptr[rows[0]:rows[-1] + 2], dtype=np.int64) - lo)
    src_local, idx = sources(rows, nbr)
    dst_local = src_local[:rows.shape[0]]  # the destinations lead the sources
    as_tensor = torch.from_numpy if sources.device is None else (lambda a: a)
    block = Block(dst_ids=as_tensor(sources.l2g[dst_local]), src_ids=as_tensor(sources.l2g[src_local]),
                  indptr=sub_ptr if sources.device is None else sub_ptr.to(sources.device), indices=as_tensor(idx))
    if part.edge_types is not None:  # a typed book: the relations (rows grouped by them) and vertex types
        host_src = src_local if sources.device is None else src_local.cpu().numpy()
        block.etypes = torch.from_numpy(np.asarray(part.edge_types[lo:hi], dtype=np.int64))
        block.src_types = torch.from_numpy(np.asarray(part.node_types[host_src], dtype=np.int64))
    if sources.degrees is not None:
        block.src_deg = sources.degrees[as_tensor(src_local), 1]
        block.dst_deg = sources.degrees[as_tensor(dst_local), 0]
    return block, src_local


#: rows a scratch table's gather reads between two releases of its pages: a read fault maps the
#: cached pages around the faulting one too (the kernel's fault-around: 64 KiB, or a whole large
#: folio of the page cache), so one gather of a chunk's random rows would map nearly the whole
#: table.  (``MADV_RANDOM`` maps one page a fault, 767-808 MiB per rank instead of 1045-1613 on
#: the products-shaped graph's evaluation, but made it 2.2x slower: not used.)
GATHER_ROWS = 4096


class _LocalTable:
    """One layer's rows of every local vertex (``[num_local, d]``: the inner rows, then the halo
    rows), on the device where it fits, else in host memory or a scratch file
    (:class:`ScratchRows`, whose pages leave the resident set after every write and every
    :data:`GATHER_ROWS` rows read).  A chunk's source rows are one gather from it."""

    def __init__(self, n_local: int, d: int, device: torch.device) -> None:
        self.scratch: ScratchRows | None = None
        if fits_on_device(4 * n_local * d, device):
            self.rows = torch.empty((n_local, d), device=device)
        else:
            self.scratch = ScratchRows(n_local, d)
            self.rows = torch.from_numpy(self.scratch.array)
        self._buf = torch.empty(0, device=self.rows.device)

    def write(self, lo: int, rows: torch.Tensor) -> None:
        """Rows ``lo:lo+len(rows)`` (host or device rows; the pages leave the resident set)."""
        self.rows[lo:lo + rows.shape[0]] = rows.reshape(rows.shape[0], -1)
        self.release()

    def read(self, pos: Any, out: torch.Tensor) -> torch.Tensor:
        """Rows ``pos`` (a numpy array or a tensor) into ``out`` (contiguous ``[len(pos), d]``, on
        any device)."""
        idx = (pos if isinstance(pos, torch.Tensor) else torch.from_numpy(pos)).to(self.rows.device)
        if out.device != self.rows.device:
            return out.copy_(self.rows[idx])
        if self.scratch is None:
            return torch.index_select(self.rows, 0, idx, out=out)
        for s in range(0, pos.shape[0], GATHER_ROWS):
            torch.index_select(self.rows, 0, idx[s:s + GATHER_ROWS], out=out[s:s + GATHER_ROWS])
            self.scratch.release()
        return out

    def gather(self, pos: Any, device: torch.device) -> torch.Tensor:
        """Rows ``pos`` on ``device``, in a buffer reused by the next call (grown as needed)."""
        n, d = pos.shape[0], int(self.rows.shape[1])
        if self._buf.numel() < n * d:
            self._buf = torch.empty(int(n * d * 1.25), device=self.rows.device)
        return self.read(pos, self._buf[:n * d].view(n, d)).to(device)

    def release(self) -> None:
        if self.scratch is not None:
            self.scratch.release()

    def close(self) -> None:
        self.rows = self._buf = torch.empty(0)
        if self.scratch is not None:
            self.scratch.close()
            self.scratch = None


def _fill_halo(table: _LocalTable, part: Any, node_part: np.ndarray, group: Any) -> None:
    """The halo rows of ``table`` from their owners' inner rows (their tables of the same layer),
    in slices of about :data:`~gnnflow.strategies.minibatch.feature_store.EXCHANGE_BYTES` (every
    rank runs as many slices as the rank with the most; the pages leave the resident set after
    each).  Collective."""
    n_in = part.num_inner
    halo = np.asarray(part.halo_ids, dtype=np.int64)
    d = int(table.rows.shape[1])
    step = max(1, EXCHANGE_BYTES // (4 * max(1, d)))
    on_host = table.rows.device.type == "cpu"
    store = FeatureStore(part, node_part, local_rows=table.rows[:n_in], group=group, read_rows=table.read)
    for c in range(max_over_ranks(-(-halo.shape[0] // step), group)):
        lo, hi = min(c * step, halo.shape[0]), min((c + 1) * step, halo.shape[0])
        if on_host:
            store.fetch(halo[lo:hi], out=table.rows[n_in + lo:n_in + hi])
        else:
            table.rows[n_in + lo:n_in + hi] = store.fetch(halo[lo:hi]).to(table.rows.device)
        table.release()


def _projected(net: Any, layer: int, table: _LocalTable, n_in: int, device: torch.device) -> _LocalTable:
    """``net.project(layer, .)`` of ``table``'s inner rows, in slices of about
    :func:`~gnnflow.strategies.device_eval.chunk_bytes`, into a new table (halo rows not filled)."""
    dim = int(table.rows.shape[1])
    width = int(net.project(layer, torch.zeros((0, dim), device=device)).shape[1])
    out = _LocalTable(int(table.rows.shape[0]), width, device)
    step = max(1, chunk_bytes(device) // (4 * max(dim, width)))
    for lo in range(0, n_in, step):
        out.write(lo, net.project(layer, table.rows[lo:min(n_in, lo + step)].to(device)))
        table.release()
    return out


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
    n_local = n_in + int(np.asarray(part.halo_ids).shape[0])
    # layer 0's rows of the inner vertices: the memory-mapped feature shard, or the given table
    first: Any = part.features if inputs is None else inputs.array if isinstance(inputs, ScratchRows) else inputs
    stop = net.num_layers if layers is None else layers
    marks: dict[bool, _ChunkSources] = {}  # by where a layer's chunk sources are found (on the device?)
    table = _LocalTable(n_local, int(first.shape[1]), device)
    try:
        for lo, rows in row_chunks(first):  # the inner rows (the halo's come from their owners)
            table.write(lo, read_only_tensor(np.asarray(rows, dtype=np.float32)))
        if isinstance(inputs, ScratchRows):
            inputs.close()
        elif not isinstance(first, torch.Tensor):  # the feature shard is not read again
            release_pages(first)
        for layer in range(stop):
            dim = int(table.rows.shape[1])
            # a narrowing layer's sources: every local row projected once (the halo's by their
            # owners), not once per chunk that reads it
            narrow = net.narrows(layer)
            src = _projected(net, layer, table, n_in, device) if narrow else table
            _fill_halo(src, part, node_part, group)
            # the layer's output shape (an empty block: every rank knows it, even one owning nothing)
            shape = net.layer_step(layer, empty_block(device), torch.zeros((0, dim), device=device)).shape[1:]
            last = layer == stop - 1
            out = torch.empty((n_in, *shape)) if last else None
            nxt = None if last else _LocalTable(n_local, int(math.prod(shape)), device)
            step = chunk_rows or default_chunk_rows(n_in, part.num_edges, int(src.rows.shape[1]), device)
            chunks = _chunks(np.arange(n_in, dtype=np.int64) if wanted is None or not last
                             else np.asarray(wanted, dtype=np.int64), step)
            rounds: Any = chunks
            if world()[0] == 0:
                rounds = ticking(chunks, f"evaluation, layer {layer + 1}/{stop}: chunk", len(chunks))
            # a table that is a tensor where the chunks run: their sources are found there too
            dev = src.scratch is None
            if dev not in marks:
                marks[dev] = _ChunkSources(part, n_local, degrees, src.rows.device if dev else None)
            for rows in rounds:  # no exchange inside a layer: a rank runs its chunks at its own pace
                block, src_local = _chunk_block(part, rows, marks[dev])
                h_src = src.gather(src_local, device)
                if narrow:
                    h_dst = table.rows[int(rows[0]):int(rows[-1]) + 1].to(device)
                    h = net.layer_step(layer, block.to(device), h_src, projected=True, h_dst=h_dst)
                else:
                    h = net.layer_step(layer, block.to(device), h_src)
                if out is not None:
                    out[rows[0]:rows[-1] + 1] = h.cpu()
                else:
                    assert nxt is not None
                    nxt.write(int(rows[0]), h)
                src.release()
                if narrow:  # the destinations' own rows came from the unprojected table
                    table.release()
                note_progress()  # a chunk is progress (no collective inside a layer)
            if narrow:
                src.close()
            table.close()
            if out is not None:
                return out
            assert nxt is not None
            table = nxt
    finally:
        table.close()
        net.train(was)
    raise AssertionError("unreachable: the model has no layers")
