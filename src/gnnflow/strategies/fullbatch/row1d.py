"""Full-batch multi-worker GCN (MG-GCN, §2, §4.1-4.4, §5.2).

Each rank holds one row block of the (randomly permuted, §5.2) vertex set: its
features ``H^i``, labels, and its row block of the normalised adjacency
``Â`` cut into P CSR tiles ``Â^{ij}`` (§4.1).  A GCN layer (§2, eqs. 5-11)
is ``H' = σ(Â H W + b)``; the SpMM ``Â·`` is the P-round broadcast SpMM of
:mod:`gnnflow.strategies.fullbatch.spmm`, everything else (GEMM, bias, activation, dropout,
loss) is local.  Weights are replicated; gradients are all-reduced once per
step (:class:`~gnnflow.strategies.fullbatch.base.FullBatchBase`).

``Â`` matches :class:`gnnflow.nn.GCNConv` (the single-process reference) on
the model's graph: A + I when the ``self_loops`` setting says so (GCN's
standard, as in every strategy), and ``norm="both"`` (Kipf-Welling
``D^-1/2 (A+I) D^-1/2``) or ``norm="right"`` (row-normalised ``D^-1 (A+I)``,
MG-GCN eq. 2).  Rows are
destinations, so the CSR of the graph store *is* the row block of ``Â``.

Options: :class:`FullBatchOptions` (``--opt key=value``).

Order of operations (§4.4): a hidden layer runs the SpMM on the narrower side
(``Â(HW)`` when ``d_in >= d_out``, ``(ÂH)W`` otherwise).  The first layer
runs ``(ÂX)W`` whenever ``d_in <= 2·d_out``: its backward then needs no SpMM
at all (input-feature gradients are not needed, ``W_G = (ÂX)ᵀ G``), which is
the "saved SpMM" of §4.4 made exact for any normalisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnnflow.comm.collectives import all_reduce, world
from gnnflow.config import TrainConfig
from gnnflow.data.meta import StoreMeta, read_store_meta
from gnnflow.errors import ConfigError
from gnnflow.nn.dropout import fill_keep_mask_like, keep_flags_like, keep_scale_on
from gnnflow.options import StrategyOptions, option
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.devices import HOST
from gnnflow.strategies.common import read_only_tensor, seed_everything
from gnnflow.strategies.fullbatch.base import FullBatchBase
from gnnflow.strategies.fullbatch.spmm import (
    BroadcastSpMM,
    csr_tiles,
    dist_spmm,
    transpose_tiles,
)
from gnnflow.strategies.memory import RunSizes

NORMS = ("both", "right")
_CHUNK_ELEMS = 1 << 20  # scratch block of the chunked input-gradient GEMM (4 MiB of float32)
MEMORY_MODES = ("reuse", "autograd")


# ----------------------------------------------------------------------------------------------
# Row partition (MG-GCN §4.1 partition vector p, after the §5.2 permutation)
# ----------------------------------------------------------------------------------------------


@dataclass
class RowPartition:
    """Vertex -> row block, and each vertex's row inside its block (blocks keep global-id order)."""

    node_part: np.ndarray  # int32 [N]
    local_pos: np.ndarray  # int64 [N]
    block_rows: list[int]

    @classmethod
    def from_node_part(cls, node_part: np.ndarray, num_parts: int) -> RowPartition:
        node_part = np.asarray(node_part, dtype=np.int32)
        order = np.argsort(node_part, kind="stable")
        counts = np.bincount(node_part, minlength=num_parts)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        local_pos = np.empty(node_part.shape[0], dtype=np.int64)
        local_pos[order] = np.arange(node_part.shape[0], dtype=np.int64) - np.repeat(starts, counts)
        return cls(node_part, local_pos, [int(c) for c in counts])

    def rows_of(self, part: int) -> np.ndarray:
        """Sorted global ids of block ``part`` (its local row order)."""
        return np.flatnonzero(self.node_part == part).astype(np.int64)


def natural_blocks(num_nodes: int, num_parts: int) -> np.ndarray:
    """P contiguous row blocks of the original order (permute-1d without the permutation)."""
    bounds = (np.arange(num_parts + 1, dtype=np.int64) * num_nodes) // num_parts
    return np.repeat(np.arange(num_parts, dtype=np.int32), np.diff(bounds))


def row_blocks(store: Any, num_parts: int, seed: int, permute: bool) -> np.ndarray:
    """node_part of the permute-1d partition (from the partition package) or natural blocks."""
    if not permute:
        return natural_blocks(store.num_nodes, num_parts)
    from gnnflow.partition.methods import permute_1d_partition

    return permute_1d_partition(store, num_parts, seed).node_part


def tile_balance(tile_nnz: np.ndarray) -> dict[str, float]:
    """Load balance of a P×P tile-nnz table (Fig. 7): max/avg over tiles and over ranks."""
    t = np.asarray(tile_nnz, dtype=np.float64)
    per_rank = t.sum(1)
    return {
        "tile_nnz_max": float(t.max()),
        "tile_nnz_avg": float(t.mean()),
        "tile_nnz_max_over_avg": float(t.max() / t.mean()) if t.sum() else 1.0,
        "rank_nnz_max_over_avg": float(per_rank.max() / per_rank.mean()) if per_rank.sum() else 1.0,
    }


# ----------------------------------------------------------------------------------------------
# This rank's rows and tiles
# ----------------------------------------------------------------------------------------------


@dataclass
class RankRows:
    """One rank's share of the graph: rows (global ids), in-edges, features, labels, splits."""

    global_ids: np.ndarray  # sorted, int64 [n]
    indptr: np.ndarray  # int64 [n+1]
    sources: np.ndarray  # int64 global ids of in-neighbours
    features: np.ndarray  # float32 [n, D]
    labels: np.ndarray  # int64 [n]
    split_rows: dict[str, np.ndarray]  # local rows per split


def _split_rows(global_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    pos = np.searchsorted(global_ids, ids)
    ok = (pos < global_ids.shape[0]) & (global_ids[np.minimum(pos, global_ids.shape[0] - 1)] == ids)
    return np.sort(pos[ok])


def rows_from_store(store: Any, rows: np.ndarray) -> RankRows:
    from gnnflow.partition.book import gather_rows

    indptr, sources = gather_rows(store.indptr, store.indices, rows)
    feats = np.asarray(store.features[rows], dtype=np.float32)
    return RankRows(rows, indptr, sources, feats, np.asarray(store.labels[rows], dtype=np.int64),
                    {k: _split_rows(rows, getattr(store, f"{k}_idx")) for k in ("train", "val", "test")})


def rows_from_part(part: Any) -> RankRows:
    feats = np.asarray(part.features, dtype=np.float32)
    sources = part.local_to_global[np.asarray(part.indices)]
    return RankRows(np.asarray(part.inner_ids, dtype=np.int64), np.asarray(part.indptr, dtype=np.int64),
                    sources, feats, np.asarray(part.labels, dtype=np.int64),
                    {k: _split_rows(part.inner_ids, getattr(part, f"{k}_idx")) for k in ("train", "val", "test")})


def global_out_degrees(sources: np.ndarray, num_nodes: int) -> np.ndarray:
    """Out-degree of every vertex: each rank counts its in-edges' sources, summed by all-reduce."""
    counts = torch.from_numpy(np.bincount(sources, minlength=num_nodes).astype(np.float64))
    if world()[1] > 1:
        all_reduce(counts, HOST)
    return counts.numpy()


def normalized_entries(rows: RankRows, rp: RowPartition, norm: str, out_deg: np.ndarray,
                       self_loops: bool = True) -> tuple[np.ndarray, ...]:
    """Entries (local row, column block, column in block, value) of this rank's rows of Â.

    ``right``: ``1/(d_in(v)+1)``; ``both``: ``1/sqrt((d_in(v)+1)(d_out(u)+1))``
    (degrees clamped to >= 1 without self-loops), as :class:`gnnflow.nn.GCNConv`.
    """
    n = rows.global_ids.shape[0]
    in_deg = np.diff(rows.indptr).astype(np.float64)
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(rows.indptr))
    col = np.asarray(rows.sources, dtype=np.int64)
    extra = 1.0 if self_loops else 0.0
    if self_loops:
        row = np.concatenate([row, np.arange(n, dtype=np.int64)])
        col = np.concatenate([col, rows.global_ids])
    d_row = np.maximum(in_deg + extra, 1.0)
    if norm == "right":
        val = 1.0 / d_row[row]
    else:
        d_col = np.maximum(out_deg + extra, 1.0)
        val = 1.0 / np.sqrt(d_row[row] * d_col[col])
    return row, rp.node_part[col], rp.local_pos[col], val.astype(np.float32)


# ----------------------------------------------------------------------------------------------
# The strategy
# ----------------------------------------------------------------------------------------------


def layer_params(layer: torch.nn.Module) -> tuple[torch.nn.Parameter, torch.nn.Parameter | None]:
    """(W [in, out], bias [out] or None) of a :class:`gnnflow.nn.GCNConv`."""
    return layer.weight, getattr(layer, "bias", None)


@dataclass(frozen=True)
class FullBatchOptions(StrategyOptions):
    """MG-GCN's options (§4.2-4.4, §5.2)."""

    norm: str = option("both", "GCN normalisation of Â: both (D^-1/2 Â D^-1/2) or right (row-normalised "
                       "D^-1 Â, MG-GCN eq. 2)", choices=NORMS)
    memory: str = option("reuse", "'reuse': hand-written forward/backward over L+3 shared n×d buffers "
                         "(§4.2); 'autograd': the same mathematics through autograd", choices=MEMORY_MODES)
    overlap: bool = option(True, "the broadcast of round j+1 overlaps the SpMM of round j (§4.3)",
                           flag="--no-overlap", flag_value=False)
    permute: bool = option(True, "permute-1d row blocks (§5.2); false: natural order (used only when no "
                           "partition book is given)")
    transpose: str = option("auto", "'auto': reuse Â's tiles when Â is symmetric, else build Âᵀ's tiles with one "
                            "all-to-all; 'exchange': always build them", choices=("auto", "exchange"))
    cache_input_spmm: bool = option(False, "keep ÂX across epochs (X is constant); false: recompute it")


class FullBatch(FullBatchBase):
    """MG-GCN full-batch GCN over a 1D row partition with the multi-round broadcast SpMM."""

    name = "fullbatch"
    Options = FullBatchOptions
    partition_methods = frozenset({"permute-1d"})

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        super().check_config(cfg)
        if cfg.model != "gcn":
            raise ConfigError(f"model: strategy fullbatch trains GCN (MG-GCN) only, got {cfg.model!r}; "
                              "use --model gcn")
        if cfg.input_dropout > 0 or (cfg.activation or "relu") != "relu":
            raise ConfigError("fullbatch: its hand-written GCN layers (MG-GCN §4.2) apply ReLU and dropout "
                              "between layers only; set input_dropout: 0 and activation: relu, or train "
                              "with --strategy dgcl or single")

    @classmethod
    def memory_terms(cls, run: RunSizes, r: int) -> tuple[dict[str, int], dict[str, int]]:
        """The shared terms, the row partition (20 bytes a vertex) and the two receive buffers of
        the broadcast SpMM, on the narrower side of each layer."""
        terms, helper = super().memory_terms(run, r)
        terms["row_partition"] = 20 * run.sizes.num_nodes
        terms["broadcast"] = int(2 * 4 * max(q.inner for q in run.parts) * min(run.f_dim, run.cfg.hidden))
        return terms, helper

    def __init__(self, cfg: TrainConfig, ctx: RankContext, skip_rounds: tuple[int, ...] = ()) -> None:
        super().__init__(cfg, ctx)
        opts = self.options
        self.norm = opts.norm
        self.memory = opts.memory
        self.overlap = opts.overlap
        self.permute = opts.permute
        self.transpose = opts.transpose
        self.cache_input_spmm = opts.cache_input_spmm
        self.self_loops = cfg.adds_self_loops  # the model's graph: A + I for GCN by default
        self.skip_rounds = skip_rounds
        self.engine: BroadcastSpMM | None = None
        self.features: torch.Tensor | None = None
        self.balance: dict[str, float] = {}
        self._buffers: dict[str, torch.Tensor] = {}
        self._agg0_valid = False

    # ----- data ------------------------------------------------------------------------------
    def _load_rows(self) -> tuple[RankRows, RowPartition, int, StoreMeta | None]:
        from gnnflow.data.store import open_store

        p, rank = self.ctx.world_size, self.ctx.rank
        if self.cfg.partition:
            from gnnflow.partition.book import PartitionBook

            book = PartitionBook.open(self.cfg.partition)
            if book.num_parts != p:
                raise ConfigError(f"partition: {self.cfg.partition} has {book.num_parts} parts but workers={p}; "
                                  f"re-run `gnnflow partition --method permute-1d --parts {p}`")
            rp = RowPartition.from_node_part(np.asarray(book.node_part), p)
            part = book.load_part(rank)
            part.check_labels(int(book.meta.num_classes))
            rows = rows_from_part(part)
            graph = book.graph_path  # a staged copy may hold the book without its graph's meta
            meta = read_store_meta(graph) if (graph / "meta.json").exists() else None
            return rows, rp, book.num_nodes, meta
        store = open_store(self.cfg.graph)
        store.check_labels()
        rp = RowPartition.from_node_part(row_blocks(store, p, self.cfg.seed, self.permute), p)
        rows = rows_from_store(store, rp.rows_of(rank))
        return rows, rp, store.num_nodes, store.meta

    def prepare(self) -> None:
        from gnnflow.nn import build_model_from_config

        rows, rp, num_nodes, meta = self._load_rows()
        directed = meta.directed if meta is not None else True
        rank, p = self.ctx.rank, self.ctx.world_size
        dev = self.ctx.device
        out_deg = global_out_degrees(rows.sources, num_nodes) if self.norm == "both" else np.zeros(0)
        row, cblk, cloc, val = normalized_entries(rows, rp, self.norm, out_deg, self.self_loops)
        n = rows.global_ids.shape[0]
        tiles = csr_tiles(row, cblk, cloc, val, n, rp.block_rows)
        symmetric = (not directed) and self.norm == "both"
        tiles_t = None if (symmetric and self.transpose == "auto") else transpose_tiles(tiles, rp.block_rows, rank)
        self.engine = BroadcastSpMM(tiles, tiles_t, rp.block_rows, rank, p, overlap=self.overlap, device=dev,
                                    skip_rounds=self.skip_rounds)
        nnz = torch.zeros(p, p, dtype=torch.float64)
        nnz[rank] = torch.tensor(self.engine.tile_nnz(), dtype=torch.float64)
        if p > 1:
            all_reduce(nnz, HOST)
        self.tile_nnz = nnz.numpy()
        self.balance = tile_balance(self.tile_nnz)
        self.global_ids = rows.global_ids
        self.features = read_only_tensor(rows.features).to(dev)
        self.set_local_data(read_only_tensor(rows.labels), *(read_only_tensor(rows.split_rows[k])
                                                             for k in ("train", "val", "test")))
        num_classes = (meta.num_classes if meta is not None else 0) or \
            _global_max(int(rows.labels.max(initial=-1)) + 1)
        seed_everything(self.cfg.seed)
        self.model = build_model_from_config(self.cfg, rows.features.shape[1], num_classes,
                                             model=self.model_name(self.cfg)).to(dev)
        self.dims = [rows.features.shape[1]] + [layer_params(m)[0].shape[1] for m in self.model.layers]
        self.optimizer = self.build_optimizer()

    # ----- order of operations (§4.4) ---------------------------------------------------------
    def spmm_first(self, layer: int) -> bool:
        d_in, d_out = self.dims[layer], self.dims[layer + 1]
        if layer == 0:
            return d_in <= 2 * d_out
        return d_in < d_out

    # ----- autograd path ------------------------------------------------------------------------
    def forward_local(self, training: bool) -> torch.Tensor:
        if self.memory == "reuse" and not torch.is_grad_enabled():
            return self._forward_buffers(training=False).clone()
        assert self.model is not None and self.engine is not None and self.features is not None
        h = self.features
        num = len(self.model.layers)
        for i, layer in enumerate(self.model.layers):
            w, b = layer_params(layer)
            if self.spmm_first(i):
                if i == 0 and self.cache_input_spmm:
                    h = self._cached_agg0() @ w
                else:
                    h = dist_spmm(h, self.engine) @ w
            else:
                h = dist_spmm(h @ w, self.engine)
            if b is not None:
                h = h + b
            if i < num - 1:
                h = F.relu(h)
                if training and self.cfg.dropout > 0:
                    # the mask is drawn exactly as the buffer path draws it (same RNG stream)
                    # (a bool mask, as F.dropout saves, so the autograd baseline's memory is not inflated)
                    keep, scale = keep_flags_like(h, self.cfg.dropout)
                    h = h * keep * scale
        return h

    def _cached_agg0(self) -> torch.Tensor:
        assert self.engine is not None and self.features is not None
        buf = self._buffer("agg0", self.features.shape[0] * self.dims[0]).view(self.features.shape[0], self.dims[0])
        if not self._agg0_valid:
            self.engine(self.features, out=buf)
            self._agg0_valid = True
        return buf

    # ----- buffer-reuse path (§4.2) -------------------------------------------------------------
    def _buffer(self, name: str, numel: int) -> torch.Tensor:
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < numel:
            assert self.features is not None
            buf = torch.empty(numel, dtype=torch.float32, device=self.features.device)
            self._buffers[name] = buf
        return buf

    def buffer_bytes(self) -> int:
        """Bytes of every n×d buffer this rank holds (layer outputs, temporary, receive buffers)."""
        assert self.engine is not None
        return sum(b.numel() * 4 for b in self._buffers.values()) + self.engine.buffer_bytes()

    def _layer_out(self, i: int) -> torch.Tensor:
        """Layer i's private buffer (n × d_out): its output, then its dZ (§4.2 eqs. 16-21)."""
        n = self.engine.num_rows  # type: ignore[union-attr]
        return self._buffer(f"out{i}", n * self.dims[i + 1])

    def _forward_buffers(self, training: bool) -> torch.Tensor:
        assert self.model is not None and self.engine is not None and self.features is not None
        n = self.engine.num_rows
        h = self.features
        num = len(self.model.layers)
        tmp = self._buffer("tmp", n * max(self.dims))
        p = self.cfg.dropout if training else 0.0
        for i, layer in enumerate(self.model.layers):
            w, b = layer_params(layer)
            d_in, d_out = self.dims[i], self.dims[i + 1]
            out = self._layer_out(i)[: n * d_out].view(n, d_out)
            with torch.no_grad():
                if self.spmm_first(i):
                    if i == 0:  # ÂX stays for the backward pass (no SpMM there, §4.4)
                        agg = self._buffer("agg0", n * d_in)[: n * d_in].view(n, d_in)
                        if not (self.cache_input_spmm and self._agg0_valid):
                            self.engine(h, out=agg)
                            self._agg0_valid = True
                    else:
                        agg = self.engine(h, out=tmp[: n * d_in].view(n, d_in))
                    torch.mm(agg, w, out=out)
                else:
                    hw = tmp[: n * d_out].view(n, d_out)
                    torch.mm(h, w, out=hw)
                    self.engine(hw, out=out)
                if b is not None:
                    out.add_(b)
                if i < num - 1:
                    out.relu_()
                    if p > 0:  # as the autograd path: h * keep * scale
                        out.mul_(fill_keep_mask_like(tmp[: n * d_out].view(n, d_out), p))
            h = out
        return h

    def compute_gradients(self, rec: Recorder) -> float:
        if self.memory == "autograd":
            return super().compute_gradients(rec)
        assert self.model is not None and self.engine is not None and self.features is not None
        n = self.engine.num_rows
        logits = self._forward_buffers(training=True)
        # loss and dL/dlogits on the local training rows; the logits buffer becomes dZ (§4.2 eq. 19)
        rows = self.split_rows["train"]
        sel = logits[rows].detach().requires_grad_(True)
        loss = self.local_loss_rows(sel)
        loss.backward()
        with torch.no_grad():
            logits.zero_()
            logits[rows] = sel.grad
        scale = keep_scale_on(self.features.device, self.cfg.dropout)
        tmp = self._buffer("tmp", n * max(self.dims))
        layers = list(self.model.layers)
        with torch.no_grad():
            for i in range(len(layers) - 1, -1, -1):
                w, b = layer_params(layers[i])
                d_in, d_out = self.dims[i], self.dims[i + 1]
                g = self._layer_out(i)[: n * d_out].view(n, d_out)  # dZ of layer i
                if b is not None:
                    _acc_grad(b, g.sum(0))
                if i == 0 and self.spmm_first(0):
                    agg = self._buffer("agg0", n * d_in)[: n * d_in].view(n, d_in)
                    _acc_grad(w, agg.t() @ g)
                    continue
                y = self.engine(g, out=tmp[: n * d_out].view(n, d_out), transpose=True)  # Âᵀ dZ
                h_in = self.features if i == 0 else self._layer_out(i - 1)[: n * d_in].view(n, d_in)
                _acc_grad(w, h_in.t() @ y)
                if i == 0:
                    continue
                # dZ_{i-1} = (Y Wᵀ) ⊙ [H_{i-1} > 0] · scale (a kept unit's), written over H_{i-1} in row chunks,
                # so the n × d_in input gradient never exists as a whole (one small scratch block)
                chunk = max(1, min(n, _CHUNK_ELEMS // max(1, d_in)))
                scratch = self._buffer("scratch", chunk * d_in)
                for s0 in range(0, n, chunk):
                    s1 = min(n, s0 + chunk)
                    hg = scratch[: (s1 - s0) * d_in].view(s1 - s0, d_in)
                    torch.mm(y[s0:s1], w.t(), out=hg)
                    h_in[s0:s1].gt_(0).mul_(hg)
                if self.cfg.dropout > 0:
                    h_in.mul_(scale)
        return float(loss.detach())

    def local_loss_rows(self, train_logits: torch.Tensor) -> torch.Tensor:
        """This rank's loss share from the logits of its training rows (already selected)."""
        assert self.labels is not None
        total = max(1, self.split_totals["train"])
        return F.cross_entropy(train_logits, self.labels[self.split_rows["train"]], reduction="sum") / total

    # ----- the loop -----------------------------------------------------------------------------------
    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        assert self.engine is not None
        self.engine.reset_records()
        loss = super().run_epoch(epoch, rec)
        s = self.engine.summary()
        rec.add_time("comm", s["spmm_comm_s"])
        rec.count("bytes_sent", self.engine.bytes_sent)
        rec.count("bytes_received", self.engine.bytes_received)
        rec.extra.update({k: float(v) for k, v in s.items()})
        rec.extra.update(self.balance)
        rec.extra["buffer_bytes"] = float(self.buffer_bytes())
        return loss

    def timeline(self) -> list[dict[str, Any]]:
        """Per-round records of the last epoch (Fig. 6/8): op, round, comm/compute intervals.

        Times are relative to ``t0``, this rank's ``time.perf_counter()`` at the epoch start
        (CLOCK_MONOTONIC, comparable between the ranks of one host)."""
        assert self.engine is not None
        return [dict(r.__dict__, rank=self.ctx.rank, t0=self.engine.t0) for r in self.engine.records]


def _acc_grad(p: torch.nn.Parameter, g: torch.Tensor) -> None:
    if p.grad is None:
        p.grad = g.clone()
    else:
        p.grad.add_(g)


def _global_max(v: int) -> int:
    t = torch.tensor([v], dtype=torch.int64)
    if world()[1] > 1:
        all_reduce(t, HOST, op=dist.ReduceOp.MAX)
    return int(t.item())

