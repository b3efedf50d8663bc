"""DistGNN-MB: local mini-batches with a Historical Embedding Cache per layer (§3, Alg. 1-2).

Every rank holds one part of the partition book, read as DistGNN-MB's
partition view (§3.1): the part's own (*solid*) vertices with features, labels
and full in-neighbourhoods, and its 1-hop *halo* vertices — copies of remote
neighbours, without features and without in-edges.  ``db_halo[q]`` lists
which of this rank's solid vertices rank ``q`` holds as halo (Algorithm 1:
every rank's halo list is all-gathered once).

One training iteration on every rank (Algorithm 2):

1. **MBC** (§3.3) — sample a mini-batch from this rank's own training vertices
   over its *local* graph only (solid + halo; no remote sampling).  Halo
   vertices are leaves: they have no local in-edges, so the frontier of the
   next (lower) layer holds only the solid sources.  Each block's sources are
   ``[solid..., halo...]``; the solid prefix is exactly the next lower block's
   destinations.  Input features are loaded for the solid sources of the
   first block only (local rows; nothing is fetched from other ranks).
2. **FWD**, at each layer ``l`` (``l = 0`` is the input layer, whose cache
   holds input features; §4.4 reports hit rates for ``L0, L1, L2``):

   * AEP (:meth:`~gnnflow.strategies.hec.push.EmbeddingPush.exchange`): store the
     embeddings pushed to this rank ``d`` iterations ago into the layer-``l``
     HEC, then push the layer-``l`` inputs of this mini-batch's solid vertices
     (features at ``l = 0``, the previous layer's outputs above) to the ranks
     that hold them as halo — at most ``nc`` per rank, sampled by degree;
   * HECSearch/HECLoad the halo sources: a hit supplies the halo vertex's
     layer-``l`` input, a miss *drops the halo vertex from aggregation* (its
     edges are removed from the block, §3.2.1 line 11) — at every layer,
     including the input layer;
   * the unchanged single-process layer (``GNN.layer_step``) computes the
     block's destinations from ``[solid rows, cached halo rows]``.

   Cached embeddings are constants: no gradient flows to remote ranks.
3. **BWD** locally, **ARed**: gradients are all-reduced every iteration (sum;
   the loss is the local cross-entropy sum over the global batch size, as in
   every mini-batch strategy here), then the optimizer steps.

Options (:class:`HECOptions`, defaults from §4.4; the paper's symbols are aliases):
``cache_lines`` (``cs``) per layer (default: the paper's 1M lines for OGBN-Products' 2,449,029
vertices scaled to the graph, ``round(0.408 * num_nodes)``, lowered to the rank's halo vertices
and to the lines that fit in ``cache_mib`` MiB over all layers, default 512; a deviation: the
paper's nodes had the memory for 1M lines, see :func:`gnnflow.strategies.memory.hec_cache_lines`;
``cache_lines=0`` disables the cache and AEP, so every halo vertex is dropped and nothing is
communicated but gradients), ``life_span`` (``ls``, 2 iterations), ``pushes_per_rank`` (``nc``,
2000 per remote rank and layer), ``push_delay`` (``d``, 1 iteration), ``pipeline`` (false: the
paper samples synchronously, §3.3), ``trace`` (false: with a run directory, append every
iteration's per-layer figures to ``hec_trace_rank<r>.jsonl``; they are always kept in
``iteration_log``).

Relational models (RGCN, R-GAT) on a typed book: the local sampler draws per relation
(blocks carry their relations and vertex types, also after halo misses are dropped); a
solid vertex's layer-0 input is the model's input layer on its typed row (its own type's
features, or its own embedding row: solid vertices are the rank's, so no embedding row is
ever remote and the sparse optimizer updates them locally), and the layer-0 cache holds
those embedded typed inputs of halo vertices, pushed by their owners like any layer's.

Records per epoch and rank: the Fig. 3-4 breakdown ``x_mbc_s``, ``x_fwd_s``,
``x_bwd_s``, ``x_ared_s``; per layer ``x_hec_hit_rate_l{l}``,
``x_hec_stored_l{l}``, ``x_hec_purged_l{l}``, ``x_hec_evicted_l{l}``,
``x_aep_pushed_l{l}``, ``x_aep_bytes_l{l}``; counters ``cache_hits``/
``cache_misses`` (halo lookups), ``remote_bytes`` (bytes received from other
ranks: pushed embeddings with their tags) and ``bytes_sent``.
Evaluation is exact layer-wise full-neighbourhood inference (the shared
mini-batch base), so accuracies compare with single-process training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gnnflow.comm.collectives import world
from gnnflow.errors import ConfigError
from gnnflow.nn.typed_input import TypedRows
from gnnflow.options import option
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext
from gnnflow.sampling import Block, NeighborSampler, TypedNeighborSampler
from gnnflow.strategies.common import drop_rows_after_epoch
from gnnflow.strategies.embedding import LocalRows, NodeEmbeddings, RowExchange
from gnnflow.strategies.hec.cache import EmbeddingCache
from gnnflow.strategies.hec.push import EmbeddingPush, build_db_halo, exchange_halo_ids
from gnnflow.strategies.memory import RunSizes, activation_bytes, hec_cache_lines, pipeline_bytes
from gnnflow.strategies.minibatch.options import MiniBatchOptions
from gnnflow.strategies.minibatch.pipeline import MiniBatch
from gnnflow.strategies.minibatch.relational import RelationalMiniBatch
from gnnflow.strategies.rows import take_rows

#: the life-span of a cache whose rows never go stale (layer 0 on plain features, push='use')
STATIC_LIFE = 2**62


@dataclass(frozen=True)
class HECOptions(MiniBatchOptions):
    """DistGNN-MB's options (§4.4's defaults), by name; the paper's symbols are aliases."""

    pipeline: bool = option(False, "sample ahead of training in a pipeline thread (the paper samples "
                            "synchronously, §3.3)", flag="--no-pipeline", flag_value=False)
    cache_lines: int | None = option(None, "cs: cache lines per layer (default: 0.408 lines per vertex as the "
                                     "paper's 1M for OGBN-Products, at most the rank's halo vertices and "
                                     "cache_mib; 0 disables the cache and the push)", minimum=0, aliases=("cs",))
    cache_mib: float = option(512.0, "MiB the cache lines of all layers may take (a rank's budget)", minimum=0)
    life_span: int = option(2, "ls: iterations a cached embedding stays usable", minimum=0, aliases=("ls",))
    pushes_per_rank: int = option(2000, "nc: embeddings pushed to each remote rank per layer and iteration",
                                  minimum=0, aliases=("nc",))
    push_delay: int = option(1, "d: iterations between a push and its arrival in the caches", minimum=0,
                             aliases=("d",))
    trace: bool = option(False, "with a run directory, append every iteration's per-layer figures to "
                         "hec_trace_rank<r>.jsonl (always kept in iteration_log)")
    push: str = option("use", "which embeddings AEP pushes: 'use' those the receiver is expected to read "
                       "before they expire, at most what its cache holds (docs/hec.md); 'degree' any the "
                       "receiver holds as halo, nc sampled by degree (Algorithm 2 as published)",
                       choices=("use", "degree"))
    min_reads: float = option(1.0, "push='use': the reads a pushed embedding must be expected to serve",
                              minimum=0)

    def check(self) -> None:
        if self.ddp:
            raise ConfigError("options.ddp: the hec strategy all-reduces gradients itself; remove ddp")


def drop_sources(block: Block, keep: torch.Tensor) -> Block:
    """The block without the sources where ``keep`` is False, and without their edges.

    Destinations must all be kept (``keep[:num_dst]`` True).  Vectorized.
    """
    if bool(keep.all()):
        return block
    new_pos = torch.cumsum(keep.to(torch.int64), 0) - 1
    edge_keep = keep[block.indices]
    counts = torch.zeros(block.num_dst, dtype=torch.int64, device=block.indices.device)
    counts.index_add_(0, block.edge_dst(), edge_keep.to(torch.int64))
    indptr = torch.zeros(block.num_dst + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(counts, 0, out=indptr[1:])
    return Block(dst_ids=block.dst_ids, src_ids=block.src_ids[keep], indptr=indptr,
                 indices=new_pos[block.indices[edge_keep]],
                 src_deg=block.src_deg[keep] if block.src_deg is not None else None, dst_deg=block.dst_deg,
                 etypes=block.etypes[edge_keep] if block.etypes is not None else None,
                 src_types=block.src_types[keep] if block.src_types is not None else None)


class LocalHaloSampler:
    """§3.3 local sampling over a part's solid + halo graph; halo vertices are leaves.

    Ids are the part's local ids (solid ``0..n_inner-1``, halo after); draws are keyed
    by global ids (``local_to_global``), so a solid vertex gets the neighbours any other
    sampler would draw for it in the same batch.  Returns blocks input -> output and,
    per block, the number of solid sources (a prefix of ``src_ids``).
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, num_inner: int, num_halo: int,
                 fanouts: list[Any], seed: int, local_to_global: np.ndarray, typed: Any = None,
                 etypes: np.ndarray | None = None) -> None:
        indptr = np.asarray(indptr, dtype=np.int64)
        # halo rows have no in-edges locally: degree 0
        ext = np.concatenate([indptr, np.full(num_halo, indptr[-1], dtype=np.int64)])
        self.sampler: NeighborSampler | TypedNeighborSampler
        if typed is None:
            self.sampler = NeighborSampler(ext, np.asarray(indices), fanouts, seed, vertex_ids=local_to_global)
        else:  # per relation (``typed``: a TypedSampling; ``etypes``: the part's edge types)
            self.sampler = TypedNeighborSampler(ext, np.asarray(indices), etypes, fanouts, typed.num_rels, seed,
                                                vertex_ids=local_to_global,
                                                node_type_offsets=typed.node_type_offsets)
        self.fanouts = list(fanouts)
        self.num_inner = int(num_inner)

    def at(self, epoch: int, batch: int) -> LocalHaloSampler:
        self.sampler.at(epoch, batch)
        return self

    def sample_blocks(self, targets_local: torch.Tensor) -> tuple[list[Block], list[int]]:
        frontier = targets_local
        blocks: list[Block] = []
        solid_counts: list[int] = []
        for layer in reversed(range(len(self.fanouts))):
            block, src = self.sampler.sample_layer(frontier, self.fanouts[layer], layer)
            is_halo = src >= self.num_inner
            n_solid = int((~is_halo).sum())
            if bool(is_halo[:n_solid].any()):  # keep [solid..., halo...]; the sampler already does
                block = _solid_first(block, is_halo)
            blocks.append(block)
            solid_counts.append(n_solid)
            frontier = block.src_ids[:n_solid]
        blocks.reverse()
        solid_counts.reverse()
        return blocks, solid_counts


def _solid_first(block: Block, is_halo: torch.Tensor) -> Block:
    perm = torch.argsort(is_halo.to(torch.int8), stable=True)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return Block(dst_ids=block.dst_ids, src_ids=block.src_ids[perm], indptr=block.indptr,
                 indices=inv[block.indices], etypes=block.etypes,
                 src_types=block.src_types[perm] if block.src_types is not None else None)


class HistoricalEmbeddingCache(RelationalMiniBatch):
    """DistGNN-MB training (see module docstring)."""

    name = "hec"
    distributed = True
    Options = HECOptions

    @classmethod
    def batch_memory(cls, run: RunSizes, r: int) -> tuple[float, dict[str, int]]:
        """Sources are solid vertices and cached halo rows, about ``1 - cut`` of data-parallel's;
        per layer a cache of ``cache_lines`` lines of the layer's input width (``torch.zeros`` writes
        them all at once) and its tag tables (``line_slot``, ``stored_at``, ``order``: a line each;
        ``slot_line``: one per halo vertex)."""
        share = 1.0 - run.sizes.cut_fraction
        levels = [x * share for x in run.levels[:-1]] + [run.levels[-1]]
        rows = 4.0 * levels[0] * run.f_dim
        train = pipeline_bytes(rows, run.cfg.options) + activation_bytes(levels, run.dims, run.cfg.model)
        part = run.parts[r]
        cs = hec_cache_lines(run.sizes.num_nodes, part.halo, [d_in for d_in, _ in run.dims], run.cfg.options)
        cache = int(sum(4 * cs * d_in for d_in, _ in run.dims) + 8 * len(run.dims) * (3 * cs + part.halo))
        return train, {"hec_cache": cache}

    def __init__(self, cfg: Any, ctx: RankContext) -> None:
        super().__init__(cfg, ctx)
        opts = self.options
        self.ls = opts.life_span
        self.nc = opts.pushes_per_rank
        self.delay = opts.push_delay
        self.trace = opts.trace
        self.iteration_log: list[dict[str, Any]] = []
        self._in_epoch = False  # inside run_epoch: a checkpoint then holds the epoch's AEP state
        self._resumed_in_epoch = False
        self.last_epoch = -1  # the last epoch trained (what a checkpoint after it holds)

    # ---------------------------------------------------------------- preparation
    def prepare(self) -> None:
        super().prepare()
        part = self.part
        rank, _ = world()
        num_nodes = self.meta.num_nodes
        self.local_to_global = torch.from_numpy(np.asarray(part.local_to_global, dtype=np.int64))
        self.features = part.features
        halo = torch.from_numpy(np.asarray(part.halo_ids, dtype=np.int64))
        inner = torch.from_numpy(np.asarray(part.inner_ids, dtype=np.int64))
        db_halo = build_db_halo(inner, exchange_halo_ids(halo))  # Algorithm 1
        # a relational model's layer 0 reads (and caches) the typed inputs embedded at the hidden width
        dims = [self.input_width] + [self._layer_in_dim(i) for i in range(1, self.cfg.num_layers)]
        self.cs = hec_cache_lines(num_nodes, int(halo.numel()), dims, self.options)
        # push='use': layer 0's rows are the features (no relational input layer learns them), which
        # never go stale; that cache is filled once and keeps its rows (hec/use.py, docs/hec.md)
        self.static_inputs = self.options.push == "use" and not self.relational_model and self.cs > 0
        self.caches = [EmbeddingCache(self.cs, STATIC_LIFE if (i == 0 and self.static_inputs) else self.ls, dim, halo)
                       for i, dim in enumerate(dims)]
        degree = torch.from_numpy(np.diff(np.asarray(part.indptr, dtype=np.int64)).astype(np.float32))
        value = caps = None
        self.setup_bytes = self.static_rows = 0
        if self.options.push == "use" and self.cs > 0:
            value, caps = self._expected_use(inner, halo)
        self.aep = EmbeddingPush(self.caches, inner, db_halo, degree, delay=self.delay,
                                 max_per_rank=self.nc, seed=self.cfg.seed, value=value,
                                 min_value=self.options.min_reads, caps=caps)
        self.db_halo_sizes = [int(d.numel()) for d in db_halo]

    @property
    def input_width(self) -> int:
        """Width of layer 0's input rows: the features, or a relational model's embedded typed inputs."""
        return int(self.cfg.hidden) if self.relational_model else self.in_dim

    def _expected_use(self, inner: torch.Tensor, halo: torch.Tensor) -> tuple[list[torch.Tensor], list[int]]:
        """What a push is worth (:mod:`gnnflow.strategies.hec.use`): presample a few of this
        rank's batches, send each owner how often this rank reads its vertices per layer, and
        learn every rank's cache size.  Collective."""
        from gnnflow.strategies.hec.use import expected_use, fill_static, presample_use

        sampler = self.build_sampler(None, seed=self.cfg.seed + 7919)  # another stream than training's
        batches = [torch.from_numpy(self.part.global_to_local(mb.targets.numpy()))
                   for mb, _ in zip(self.schedule(0, 1), range(self.options.presample_batches), strict=False)]
        solid_rate, halo_rate = presample_use(sampler, batches, self.part.num_inner, int(halo.numel()))
        value, caps, self.setup_bytes = expected_use(inner, halo, self.node_part, solid_rate, halo_rate,
                                                     self.cs, self.ls)
        if self.static_inputs:  # filled here once; nothing to push at layer 0
            self.static_rows, fill_bytes = fill_static(self.caches[0], halo, halo_rate[0], self.node_part, inner,
                                                       self.features)
            self.setup_bytes += fill_bytes
            value[0] = torch.zeros_like(value[0])
        return value, caps

    def _layer_in_dim(self, layer: int) -> int:
        """Width of layer ``layer``'s input: the previous layer's output."""
        assert self.net is not None
        with torch.no_grad():
            zero = torch.zeros(1, dtype=torch.int64)
            probe = Block(dst_ids=zero, src_ids=zero, indptr=torch.tensor([0, 1]), indices=zero, etypes=zero,
                          src_types=zero)
            h = torch.zeros(1, self.input_width, device=self.ctx.device)
            was = self.net.training
            self.net.eval()
            for i in range(layer):
                h = self.net.layer_step(i, probe.to(self.ctx.device), h)
            self.net.train(was)
        return int(h.shape[1])

    def build_sampler(self, group: Any, seed: int | None = None) -> LocalHaloSampler:
        p = self.part
        seed = self.cfg.seed if seed is None else seed
        if self.cfg.relational:
            view = self.typed_view()
            return LocalHaloSampler(p.indptr, p.indices, p.num_inner, p.num_halo, view.fanouts, seed=seed,
                                    local_to_global=p.local_to_global, typed=view.sampling, etypes=p.edge_types)
        return LocalHaloSampler(p.indptr, p.indices, p.num_inner, p.num_halo, self.cfg.fanouts,
                                seed=seed, local_to_global=p.local_to_global)

    def build_feature_store(self, group: Any) -> None:
        return None  # HEC fetches no remote features

    def embedding_exchange(self, embeddings: NodeEmbeddings) -> RowExchange:
        return LocalRows(embeddings.owned, embeddings.weight)  # a batch reads its solid vertices' rows only

    # ---------------------------------------------------------------- pipeline stages
    def sample_stage(self, mb: MiniBatch) -> MiniBatch:
        targets_local = torch.from_numpy(self.part.global_to_local(mb.targets.numpy()))
        blocks, solid = self.sampler.at(mb.epoch, mb.index).sample_blocks(targets_local)
        mb.blocks = blocks
        mb.meta["solid_counts"] = solid
        mb.counters["sampled_edges"] = float(sum(b.num_edges for b in blocks))
        mb.counters["input_vertices"] = float(blocks[0].num_src)
        mb.counters["halo_vertices"] = float(sum(b.num_src - s for b, s in zip(blocks, solid, strict=True)))
        return mb

    def load_stage(self, mb: MiniBatch) -> MiniBatch:
        assert mb.blocks is not None
        rows = mb.blocks[0].src_ids[: mb.meta["solid_counts"][0]].numpy()
        if self.relational_model:  # the solid vertices' own typed rows
            mb.inputs = self.typed_inputs().local(self.part.local_to_global[rows])  # type: ignore[assignment]
            mb.counters["features_loaded"] = float(rows.shape[0])
            return mb
        mb.inputs = take_rows(self.features, rows)
        mb.counters["features_loaded"] = float(rows.shape[0])
        self.attach_degrees(mb)
        return mb

    def prepare_degrees(self) -> None:
        self.local_degrees()  # collective, so on the main thread, once

    def attach_degrees(self, mb: MiniBatch) -> None:
        """Whole-graph degrees of the blocks' local ids (a table over solid + halo vertices)."""
        if not self.cfg.graph_degrees:
            return
        deg = self.local_degrees()
        assert mb.blocks is not None
        for b in mb.blocks:
            b.src_deg, b.dst_deg = deg[b.src_ids, 1], deg[b.dst_ids, 0]

    def device_stage(self, mb: MiniBatch) -> MiniBatch:
        # Blocks stay on the host: halo misses are dropped from them (on the host, where the
        # HEC lives) right before each layer runs, and then the block moves.
        dev = self.ctx.device
        if dev.type != "cpu":
            if isinstance(mb.inputs, TypedRows):
                mb.inputs = mb.inputs.to(dev)  # type: ignore[assignment]
                mb.labels = None if mb.labels is None else mb.labels.to(dev)
            else:
                self.copy_inputs(mb)
        return mb

    # ---------------------------------------------------------------- training
    def forward(self, mb: MiniBatch) -> torch.Tensor:
        """Algorithm 2 for one mini-batch: AEP + HEC at every layer, then the layer."""
        assert self.net is not None and mb.blocks is not None and mb.inputs is not None
        dev = self.ctx.device
        self.aep.begin_iteration()  # the caches' clock: ages and life-span purges
        h_solid: Any = mb.inputs
        if isinstance(h_solid, TypedRows):  # the solid inputs embedded: layer 0's rows (and what AEP pushes)
            h_solid = self.net.embed(self.embeddings.attach(h_solid) if self.embeddings is not None else h_solid)
        for layer, (block, n_solid) in enumerate(zip(mb.blocks, mb.meta["solid_counts"], strict=True)):
            src = block.src_ids
            if self.cs > 0:  # with no cache lines nothing pushed could be stored: no AEP at all
                # the push is payload: it leaves from the compute device (NCCL, or gloo's own host
                # staging when ranks share a GPU); receivers store the rows in their host caches
                self.aep.exchange(layer, src[:n_solid], h_solid.detach())
            hit, cached = self.caches[layer].lookup(self.local_to_global[src[n_solid:]])
            keep = torch.cat([torch.ones(n_solid, dtype=torch.bool), hit])
            block = drop_sources(block, keep).to(dev)
            h_src = torch.cat([h_solid, cached.to(dev, h_solid.dtype)], 0)
            h_solid = self.net.layer_step(layer, block, h_src)
        return h_solid

    def _layer_totals(self) -> list[tuple[int, ...]]:
        return [(c.stats.searched, c.stats.hits, c.stats.stored, c.stats.purged, c.stats.evicted,
                 p.pushed, p.bytes_sent, p.received) for c, p in zip(self.caches, self.aep.stats, strict=True)]

    def compute_loss(self, mb: MiniBatch, rec: Recorder) -> torch.Tensor:
        assert mb.labels is not None
        before = self._layer_totals()
        with rec.timer("forward"):
            logits = self.forward(mb)
        row: dict[str, Any] = {"epoch": mb.epoch, "iteration": mb.index, "clock": self.aep.clock}
        for layer, (a, b) in enumerate(zip(before, self._layer_totals(), strict=True)):
            searched, hits, stored, purged, evicted, pushed, sent, received = (y - x for x, y in zip(a, b, strict=True))
            row[f"l{layer}"] = {"searched": searched, "hits": hits, "hit_rate": hits / searched if searched else None,
                                "stored": stored, "purged": purged, "evicted": evicted, "pushed": pushed,
                                "bytes_sent": sent, "received": received}
        self.iteration_log.append(row)
        mb.meta["logits"] = logits.detach()
        return F.cross_entropy(logits, mb.labels, reduction="sum") / max(1, mb.meta["global_batch"])

    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        if not self._resumed_in_epoch:  # else a mid-epoch checkpoint set the epoch's state
            self.aep.reset_stats()
            self.aep.begin_epoch(self.num_batches)
            self.iteration_log = []
        self._resumed_in_epoch = False
        self._in_epoch = True
        loss = super().run_epoch(epoch, rec)
        self._in_epoch = False
        self.aep.end_epoch()
        self.last_epoch = epoch
        self._record(rec)
        if self.trace and self.cfg.run_dir is not None:
            self._write_trace()
        return loss

    # ---------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Model and optimizer, plus every layer's cache (resident lines, ages, store order),
        the caches' clock and the AEP sample's generator (:meth:`EmbeddingPush.state_dict`)."""
        hec = {**self.aep.state_dict(in_epoch=self._in_epoch), "epoch": self.last_epoch}
        if self._in_epoch:
            hec["iteration_log"] = json.dumps(self.iteration_log)
        return {**super().state_dict(), "hec": hec}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.aep.load_state_dict(state["hec"])
        self.last_epoch = int(state["hec"]["epoch"])
        self._resumed_in_epoch = "iteration_log" in state["hec"]
        if self._resumed_in_epoch:
            self.iteration_log = json.loads(state["hec"]["iteration_log"])
        if self.trace and self.cfg.run_dir is not None:
            self._truncate_trace(self.last_epoch)

    def _trace_path(self) -> Path:
        assert self.cfg.run_dir is not None
        return Path(self.cfg.run_dir) / f"hec_trace_rank{world()[0]}.jsonl"

    def _truncate_trace(self, last_epoch: int) -> None:
        """Drop trace rows of epochs after the checkpoint (written before the run died), as the
        driver drops their records, so the resumed trace equals an uninterrupted run's."""
        drop_rows_after_epoch(self._trace_path(), last_epoch)

    def _write_trace(self) -> None:
        """Append this epoch's per-iteration, per-layer figures to ``<run>/hec_trace_rank<r>.jsonl``."""
        path = self._trace_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            for row in self.iteration_log:
                fh.write(json.dumps(row, sort_keys=True) + "\n")

    def _record(self, rec: Recorder) -> None:
        t = rec.times
        rec.extra["mbc_s"] = float(t.get("sample", 0.0) + t.get("load", 0.0) + t.get("wait", 0.0))
        rec.extra["fwd_s"] = float(t.get("forward", 0.0))
        rec.extra["bwd_s"] = float(max(0.0, t.get("forward_backward", 0.0) - t.get("forward", 0.0)))
        rec.extra["ared_s"] = float(t.get("allreduce", 0.0))
        hits = misses = 0
        sent = received = 0
        wait = 0.0
        for layer, (cache, push) in enumerate(zip(self.caches, self.aep.stats, strict=True)):
            s = cache.stats
            hits += s.hits
            misses += s.searched - s.hits
            rec.extra[f"hec_hit_rate_l{layer}"] = float(s.hit_rate)
            rec.extra[f"hec_searched_l{layer}"] = float(s.searched)
            rec.extra[f"hec_stored_l{layer}"] = float(s.stored)
            rec.extra[f"hec_purged_l{layer}"] = float(s.purged)
            rec.extra[f"hec_evicted_l{layer}"] = float(s.evicted)
            rec.extra[f"aep_pushed_l{layer}"] = float(push.pushed)
            rec.extra[f"aep_bytes_l{layer}"] = float(push.bytes_sent)
            sent += push.bytes_sent
            received += push.bytes_received
            wait += push.wait_s
        rec.count("cache_hits", hits)
        rec.count("cache_misses", misses)
        rec.count("remote_bytes", received)
        rec.count("bytes_received", received)
        rec.count("bytes_sent", sent)
        rec.add_time("comm", wait)
        rec.extra["cs"] = float(self.cs)
        rec.extra["ls"] = float(self.ls)
        rec.extra["nc"] = float(self.nc)
        rec.extra["d"] = float(self.delay)
        rec.extra["db_halo"] = float(sum(self.db_halo_sizes))
        rec.extra["setup_bytes"] = float(self.setup_bytes)
        rec.extra["hec_static_rows"] = float(self.static_rows)
