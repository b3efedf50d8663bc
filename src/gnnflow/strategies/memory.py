"""Peak memory of a training run, estimated before any rank starts (issue 19.5).

The estimate reads only small metadata: the graph store's ``meta.json`` (N, M,
feature dimension, classes), the partition book's ``meta.json`` (per part:
inner vertices, halo vertices, local edges, index width) and the training
config.  Every term follows what the code allocates (numbers in bytes, ``F``
the feature dimension, ``H`` the hidden width, ``L`` layers, ``P`` ranks):

* **process baseline** ``BASE``: Python, torch, numpy and gnnflow imported, a
  gloo process group and its threads (measured: about 200 MiB per rank, 313 while
  ranks imported ``torch._dynamo``; the DistDGL peer imports DGL too);
* **shard** (mini-batch strategies, HEC, full-batch, DGCL): the part's files.
  Features are memory-mapped, but an epoch reads rows at random and
  evaluation reads all of them, so the whole shard counts as resident;
  the local CSR, id maps (``4 N`` more for a dense global-to-local one) and labels are read into memory;
* **whole-graph vectors** a rank holds: ``node_part`` (4 N), the full-batch
  row partition (20 N), split's int64 owner map and training ids, P3's
  feature columns of every vertex (``4 N F / P``; P3 reads them from the whole
  feature file once, at preparation, when nothing else is resident yet), and
  its layer-0 partial outputs of every rank's micro-batch;
* **pipeline** (data; HEC only with ``pipeline=true``): the batches in
  flight, bounded by the option ``pipeline_mib`` but at least one batch:
  input rows of one batch ``n_0 F 4`` where ``n_0`` is the expected number of
  distinct sampled input vertices (below), the trained batch and the next
  one; split holds one batch, its owned share (about ``1.25 / P``) of every
  level of the global batch;
* **activations** of one batch: for a layer with ``n_dst`` destinations,
  ``n_src`` sources, widths ``d_in -> d_out`` the layer keeps about
  ``ACT_DST * n_dst * (d_in + d_out)`` floats (aggregation, the self and
  neighbour maps, their sum, activation, dropout mask, and their gradients),
  plus ``ACT_SRC * n_src * d_out`` where it projects its sources first
  (``d_in > d_out``); the input rows themselves are the pipeline's;
* **model**: parameters, gradients and Adam's two moments (16 bytes per weight);
* **evaluation** (layer-wise inference, :mod:`gnnflow.strategies.minibatch.inference`):
  one hidden table of the part's local vertices (``(n_inner + n_halo) H 4``: inner rows,
  then the halo's from their owners; a memory-mapped scratch file read a slice at a time, so at
  most ``EVAL_TABLE_WINDOW`` of it is resident) plus ``EVAL_CHUNKS`` chunks of source rows (64 MiB each), the
  logits and ``METRIC_CHUNKS`` chunks of the metrics (16 MiB each, no more than
  the logits); the feature shard's pages are released after layer 0, so the
  peak is ``max(training, evaluation)`` over the non-shared terms;
* **HEC** (DistGNN-MB): sources are solid vertices and cached halo rows,
  about ``1 - cut`` of data-parallel's; per layer a cache of ``cs`` lines of
  that layer's input width (``torch.zeros`` writes them all at once; the
  default ``cs`` is :func:`hec_cache_lines`, at most the option ``cache_mib`` of
  lines) and its int64 tag tables (``8 (3 cs + halo)``);
* **feature cache** (data-parallel): the hot remote feature rows and their ids,
  ``(4 F + 8)`` bytes per row for :func:`feature_cache_rows` rows (at most
  the option ``feature_cache_mib``, never more than the vertices a rank does not own) and a
  vertex -> cache row map of ``4 N`` bytes (as ``node_part``);
* **full-batch / DGCL**: the part's ``Â`` tiles (12 bytes per non-zero), the
  shared buffers of MG-GCN §4.2 (aggregated input, every layer's output, one
  scratch: ``4 n_r (F + sum d_out + max d)``), the received broadcast blocks
  (two in flight, the narrower width) or, for DGCL (autograd layers on the local
  graph), ``DGCL_SRC`` floats per gathered row ``(n_inner + n_halo) x d_in`` and
  ``DGCL_DST`` per output ``n_inner x d_out`` of every layer (a narrowing GCN
  layer gathers ``d_out``-wide projected rows); DGCL's rank 0
  also gathers every part's halo ids to plan (``16 sum(n_halo)``);
* **relational models** (RGCN, R-GAT on a typed book): the shard's features are
  the per-type shards (``4 d_t`` per inner vertex of a featured type ``t``), the
  edge and vertex types a byte each; the rank's embedding rows (its featureless
  inner vertices) with sparse Adam's two moments and step, ``12 H + 8`` bytes
  per row; the model's input projections and per-relation weights; a batch's
  typed input rows at their own widths, the embedded layer-0 rows and their
  gradient, and per layer ``REL_PAIRS`` relation-major rows per destination
  (RGCN's per-(destination, relation) means and their transforms);
* **DistDGL peer**: one DGL server per part holding its partition (the inner
  and halo structure in int64 and the features, shared memory) and one sampler
  process per trainer (``BASE_DGL`` + sampled blocks); the trainer's evaluation
  is DGL's layer-wise inference: one-hop full-neighbourhood blocks of 4096
  seeds (about ``DGL_EVAL_EDGE_BYTES`` per edge, fitted on one run, and the
  pulled rows), and its part of the two hidden DistTensors in use (the layer
  read and the layer written, ``4 (N / P) d`` each; the server holds them too).

The expected distinct vertices of a sampled layer: ``n_src = min(N, max(n_dst, a N (1 - exp(-n_dst
(1 + f) / (a N)))))`` with ``f = min(fanout, M / N)``: the destinations and their draws at random
from a pool of ``a N`` vertices (``a = DISTINCT_POOL``: neighbours are drawn in proportion to
degree, so on skewed graphs draws repeat more than uniform ones would).

Constants were fitted on 2-rank runs of a 300k-vertex synthetic graph and checked against the
products-shaped runs (docs/runtime.md "Memory preflight"); ``predicted vs measured`` is reported
by ``gnnflow bench scale``.  The figure is an epoch's steady state: an epoch of a few iterations peaks lower.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gnnflow.partition.meta import BookMeta

from gnnflow.config import HEADED_MODELS, RELATIONAL_MODELS, fanout_total
from gnnflow.partition.local_ids import dense_map_bytes
from gnnflow.strategies.metrics import CHUNK_BYTES as METRIC_CHUNK

MIB = 1 << 20
BASE = 210 * MIB  # one rank: interpreter, torch, numpy, gnnflow, gloo (measured on a tiny graph: 200 MiB)
BASE_LAUNCHER = 200 * MIB  # the `gnnflow train` process that spawns the ranks and waits
BASE_DGL = 300 * MIB  # a process that imports DGL too
ACT_DST = 6.0  # floats kept per destination and per (d_in + d_out) of a layer, forward + backward
ACT_SRC = 2.0  # floats per source row and output feature of a layer that projects first
#: sampled vertices are drawn in proportion to degree: on skewed (power-law) graphs a layer's
#: draws fall on about this share of the vertices (fitted: 300k- and 2.45M-vertex synthetic graphs)
DISTINCT_POOL = 0.65
EVAL_CHUNKS = 4  # 64 MiB chunks of source rows alive in inference (rows, fetched halo, copy, output)
CHUNK = 64 * MIB
#: a layer table read at random: pages dropped every 4096 rows (``inference.GATHER_ROWS``), but a
#: fault maps cached pages around it (64 KiB or a large folio; products, 4 ranks: evaluation added
#: 370-450 MiB above training's resident set on three ranks, 940 on one); smaller tables whole
EVAL_TABLE_WINDOW = 1 << 30
#: the metrics read the logits a chunk at a time: its masked copy, log-softmax and arg-max
METRIC_CHUNKS = 3
#: bytes per edge of the full-neighbourhood blocks whole-graph inference keeps for every layer
#: (:func:`gnnflow.strategies.common.full_inference`: int64 indices, source ids, source degrees)
BLOCK_EDGE_BYTES = 3 * 8
#: DGCL: floats per gathered source row and input width (the gathered rows of a layer's forward),
#: per destination row and output width (the saved activations and their gradients in backward);
#: fitted on 4-rank GCN 2x256 runs of the 1M-vertex and products-shaped graphs (measured within 6 %)
DGCL_SRC, DGCL_DST = 1.0, 3.25
#: DistDGL peer's evaluation: bytes per edge of a full-neighbourhood batch (DGL's blocks, their
#: formats and RPC copies; fitted on one run: 300k vertices, 6M edges, 2 ranks, SAGE 3 layers)
DGL_EVAL_EDGE_BYTES = 240
DGL_EVAL_BATCH = 4096  # destinations per batch of the DistDGL peer's layer-wise evaluation
SPLIT_SHARE = 1.25  # split: a rank's share of a level is about 1.25 / P of it (vertices near a cut)
#: DistGNN-MB §4.4: cs = 1M lines per layer for OGBN-Products (2,449,029 vertices)
HEC_CS_PER_VERTEX = 1_000_000 / 2_449_029
#: relational layers: (destination, relation) rows with edges per destination, each ``d_in + d_out``
#: floats kept forward and backward (RGCN's relation-major means and messages)
REL_PAIRS = 3.0


@dataclass
class PartSizes:
    inner: int
    halo: int
    edges: int  # local CSR entries (in-edges of the inner vertices)


@dataclass
class TypedSizes:
    """A homogenized store's types as the estimate reads them (store and book meta)."""

    num_nodes: list[int]  # per vertex type
    feature_dims: list[int]  # per vertex type; 0: featureless
    num_rels: int
    inner_per_type: list[list[int]] | None = None  # per part of a typed book
    target: int | None = None  # the labelled vertex type (ogbn-mag: papers)

    def inner_of(self, r: int, inner: int) -> list[int]:
        """Part ``r``'s inner vertices per type (the book's, else ``inner`` split as the graph's)."""
        if self.inner_per_type is not None and r < len(self.inner_per_type):
            return [int(x) for x in self.inner_per_type[r]]
        total = max(1, sum(self.num_nodes))
        return [int(inner * n / total) for n in self.num_nodes]


@dataclass
class GraphSizes:
    """What the estimate needs from the store and the book (metadata only)."""

    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    parts: list[PartSizes] = field(default_factory=list)
    idx_bytes: int = 4  # a part's local indices (books record idx_bits)
    store_idx_bytes: int = 8  # the store's CSR indices
    num_train: int = 0
    cut_fraction: float = 0.0  # edges between parts / all edges (the book's quality)
    typed: TypedSizes | None = None  # a homogenized store's types

    @classmethod
    def read(cls, graph: str | os.PathLike[str], book: str | os.PathLike[str] | None = None) -> GraphSizes:
        from gnnflow.data.meta import read_store_meta
        from gnnflow.partition.meta import read_book_meta

        meta = read_store_meta(graph)
        sizes = cls(num_nodes=meta.num_nodes, num_edges=meta.num_edges,
                    feature_dim=meta.feature_dim or 0, num_classes=meta.num_classes or 2)
        sizes.store_idx_bytes = _store_idx_bytes(Path(graph), sizes.num_edges)
        sizes.num_train = int(meta.num_train or 0.1 * sizes.num_nodes)
        if meta.node_types and meta.node_type_offsets:
            dims = meta.type_feature_dims or {}
            offsets = meta.node_type_offsets
            sizes.typed = TypedSizes(num_nodes=[offsets[t + 1] - offsets[t] for t in range(len(meta.node_types))],
                                     feature_dims=[int(dims.get(t, 0)) for t in meta.node_types],
                                     num_rels=len(meta.edge_types or []),
                                     target=(meta.node_types.index(meta.target_node_type)
                                             if meta.target_node_type in meta.node_types else None))
        if book is not None:
            bmeta = read_book_meta(book)
            if sizes.typed is not None and bmeta.typed:
                sizes.typed.inner_per_type = bmeta.typed.get("inner_per_type")
            sizes.idx_bytes = (bmeta.idx_bits or 64) // 8
            sizes.parts = _book_parts(bmeta, sizes.num_nodes, sizes.num_edges)
            sizes.cut_fraction = float((bmeta.quality or {}).get("edge_cut_pct", 0.0)) / 100.0
        return sizes

    def even_parts(self, p: int) -> list[PartSizes]:
        """An even split when no book is given (full-batch row blocks, a whole graph)."""
        n, m = self.num_nodes / p, self.num_edges / p
        halo = min(self.num_nodes - n, m * (p - 1) / p)  # a part's in-edges from other parts, at most
        return [PartSizes(int(n), int(halo), int(m)) for _ in range(p)]


def _store_idx_bytes(graph: Path, num_edges: int) -> int:
    f = graph / "indices.npy"
    try:
        size = f.stat().st_size
    except OSError:
        return 8
    return 4 if num_edges and size < 6 * num_edges else 8


def _book_parts(bmeta: BookMeta, n: int, m: int) -> list[PartSizes]:
    p = bmeta.num_parts
    q = bmeta.quality or {}
    inner = q.get("part_sizes") or [n // p] * p
    edges = q.get("edges_per_part") or [m // p] * p
    halo = q.get("halo_per_part") or [min(n - int(i), int(e)) for i, e in zip(inner, edges, strict=True)]
    return [PartSizes(int(i), int(h), int(e)) for i, h, e in zip(inner, halo, edges, strict=True)]


@dataclass
class MemoryEstimate:
    """Peak resident bytes per process of a run on one host."""

    strategy: str
    ranks: list[dict[str, int]]  # per rank: term -> bytes (the peak is their sum)
    helpers: list[dict[str, int]] = field(default_factory=list)  # per rank: role -> bytes (samplers, servers)
    launcher: int = BASE_LAUNCHER

    def rank_peak(self, r: int) -> int:
        return sum(self.ranks[r].values())

    @property
    def max_rank(self) -> int:
        return max(self.rank_peak(r) for r in range(len(self.ranks)))

    @property
    def total(self) -> int:
        """All processes of the run together (one host)."""
        return self.host_total(len(self.ranks))

    def host_total(self, local: int) -> int:
        """The processes of ``local`` ranks sharing a host (the largest ranks: a bound), their
        helpers and the launcher."""
        order = sorted(range(len(self.ranks)), key=self.rank_peak, reverse=True)[:max(1, local)]
        return (sum(self.rank_peak(r) for r in order)
                + sum(sum(self.helpers[r].values()) for r in order if r < len(self.helpers)) + self.launcher)

    def terms(self, r: int = 0) -> str:
        parts = sorted(self.ranks[r].items(), key=lambda kv: -kv[1])
        return ", ".join(f"{k} {v / MIB:.0f}" for k, v in parts if v >= MIB)

    def line(self, local: int | None = None) -> str:
        per = [self.rank_peak(r) / MIB for r in range(len(self.ranks))]
        span = f"{min(per):.0f}" if max(per) - min(per) < 1 else f"{min(per):.0f}-{max(per):.0f}"
        helpers = ""
        if self.helpers and any(self.helpers):
            roles: dict[str, int] = {}
            for h in self.helpers:
                for k, v in h.items():
                    roles[k] = max(roles.get(k, 0), v)
            helpers = "; " + ", ".join(f"{k} {v / MIB:.0f} MiB each" for k, v in roles.items())
        return (f"memory estimate: {self.strategy}, {len(self.ranks)} rank(s), {span} MiB per rank "
                f"(rank 0: {self.terms(0)}){helpers}; "
                f"{self.host_total(len(self.ranks) if local is None else local) / MIB:.0f} MiB on this host")


# ------------------------------------------------------------------------------------------ pieces
def sampled_layers(targets: float, fanouts: list[Any], num_nodes: int, num_edges: int) -> list[float]:
    """Expected distinct vertices per block level, outermost (input) first: ``[n_0, ..., n_L]``
    with ``n_L = targets``; ``fanouts`` input layer first (``-1``: all neighbours; a per-relation
    layer counts as its counts added)."""
    n = float(max(1, num_nodes))
    avg = num_edges / n
    out = [float(min(targets, n))]
    for f in map(fanout_total, reversed(fanouts)):
        k = avg if f < 0 else min(float(f), avg)
        dst, pool = out[0], DISTINCT_POOL * n
        out.insert(0, min(n, max(dst, pool * (1.0 - math.exp(-dst * (1.0 + k) / pool)))))
    return out


def layer_dims(cfg: Any, in_dim: int, classes: int) -> list[tuple[int, int]]:
    """(d_in, d_out) of every layer (GAT hidden layers concatenate their heads; a layer class's
    layers give ``hidden`` and, the last, ``classes`` features: docs/models.md)."""
    heads = int(getattr(cfg, "heads", 1)) if cfg.model in HEADED_MODELS else 1
    dims = []
    d = in_dim
    for i in range(cfg.num_layers):
        last = i == cfg.num_layers - 1
        out = classes if last else cfg.hidden * heads
        dims.append((d, out))
        d = out
    return dims


def model_bytes(cfg: Any, in_dim: int, classes: int) -> int:
    """Weights, gradients and Adam's two moments."""
    mult = 2 if cfg.model == "sage" else 1  # SAGE: self and neighbour maps
    weights = sum(mult * a * b + b for a, b in layer_dims(cfg, in_dim, classes))
    return 16 * weights


def relational_model_bytes(cfg: Any, typed: TypedSizes, classes: int) -> int:
    """RGCN / R-GAT: the input projections of the featured types and every layer's relation
    weights (RGCN: ``B`` bases or one per relation, the self-loop weight; R-GAT: a GAT per
    relation), with gradients and Adam's moments (16 bytes a weight)."""
    h, rels = cfg.hidden, typed.num_rels
    weights = sum(d * h + h for d in typed.feature_dims if d)
    for d_in, d_out in layer_dims(cfg, h, classes):
        if cfg.model == "rgcn":
            weights += (cfg.num_bases or rels) * d_in * d_out + rels * cfg.num_bases + d_in * d_out + d_out
        else:
            weights += rels * (d_in * d_out + 3 * d_out)
    return 16 * weights


def activation_bytes(levels: list[float], dims: list[tuple[int, int]], model: str) -> float:
    """Bytes one batch's forward and backward keep (see the module docstring): per layer
    ``ACT_DST`` floats per destination and ``d_in + d_out``, and where a layer projects its
    sources first (``d_in > d_out``, the output layer) ``ACT_SRC`` per source and ``d_out``."""
    heads_factor = 2.0 if model in HEADED_MODELS else 1.0  # attention scores per edge and head
    total = 0.0
    for (d_in, d_out), n_src, n_dst in zip(dims, levels[:-1], levels[1:], strict=True):
        total += ACT_DST * n_dst * (d_in + d_out) * heads_factor
        if d_in > d_out:
            total += ACT_SRC * n_src * d_out
    return 4.0 * total


def shard_bytes(p: PartSizes, sizes: GraphSizes, features: bool = True) -> dict[str, int]:
    """A part as the book stores it and ``load_part`` reads it."""
    local = p.inner + p.halo  # CSR, inner/halo ids; labels, local_to_global, the global-to-local map
    structure = (p.edges * sizes.idx_bytes + (p.inner + 1) * 8 + 8 * local
                 + 8 * p.inner + 8 * local + dense_map_bytes(sizes.num_nodes, local))
    out = {"shard_structure": int(structure)}
    if features:
        out["shard_features"] = int(4 * p.inner * sizes.feature_dim)
    return out


def evaluation_bytes(p: PartSizes, cfg: Any, classes: int, feature_dim: int) -> int:
    """Layer-wise inference beyond the shard: a hidden table of the local rows, chunks, logits."""
    hidden = cfg.hidden * (int(getattr(cfg, "heads", 1)) if cfg.model in HEADED_MODELS else 1)
    table = min(4 * (p.inner + p.halo) * hidden, EVAL_TABLE_WINDOW) if cfg.num_layers > 1 else 0
    chunk = min(CHUNK, 4 * (p.inner + p.halo) * max(feature_dim, hidden))  # no more than the part's rows
    logits = 4 * p.inner * classes
    return int(table + EVAL_CHUNKS * chunk + logits + METRIC_CHUNKS * min(METRIC_CHUNK, logits))


# ------------------------------------------------------------------------------------------ a run
@dataclass
class RunSizes:
    """What every strategy's terms read: the config (options parsed), the graph's sizes, the
    parts, the model's layer widths and bytes, and one sampled batch's expected levels."""

    cfg: Any
    sizes: GraphSizes
    workers: int
    parts: list[PartSizes]
    f_dim: int
    dims: list[tuple[int, int]]
    model: int
    #: expected distinct vertices per level of a rank's sampled batch, input first
    levels: list[float]
    #: bytes of one batch's input rows
    batch_rows: float
    #: bytes one batch's forward and backward keep
    acts: float

    @classmethod
    def of(cls, cfg: Any, sizes: GraphSizes, distributed: bool) -> RunSizes:
        workers = max(1, int(cfg.workers)) if distributed else 1
        parts = sizes.parts if len(sizes.parts) == workers else sizes.even_parts(workers)
        levels = sampled_layers(cfg.batch_size / workers, list(cfg.fanouts), sizes.num_nodes, sizes.num_edges)
        typed = sizes.typed if cfg.model in RELATIONAL_MODELS else None
        if typed is None:
            f_dim = max(1, sizes.feature_dim)
            dims = layer_dims(cfg, f_dim, sizes.num_classes)
            return cls(cfg=cfg, sizes=sizes, workers=workers, parts=parts, f_dim=f_dim, dims=dims,
                       model=model_bytes(cfg, f_dim, sizes.num_classes), levels=levels,
                       batch_rows=4.0 * levels[0] * f_dim, acts=activation_bytes(levels, dims, cfg.model))
        # a relational model: layer 0 reads the typed inputs embedded at the hidden width; a batch's
        # rows come at their types' widths (embedding rows: hidden, with their gradient)
        h = cfg.hidden
        dims = layer_dims(cfg, h, sizes.num_classes)
        total = max(1, sum(typed.num_nodes))
        width = sum(n * (d or 2 * h) for n, d in zip(typed.num_nodes, typed.feature_dims, strict=True)) / total
        acts = activation_bytes(levels, dims, cfg.model) + 4.0 * levels[0] * 2 * h
        acts += 4.0 * REL_PAIRS * 2 * sum(n_dst * (d_in + d_out) for (d_in, d_out), n_dst in
                                          zip(dims, levels[1:], strict=True))
        return cls(cfg=cfg, sizes=sizes, workers=workers, parts=parts, f_dim=h, dims=dims,
                   model=relational_model_bytes(cfg, typed, sizes.num_classes), levels=levels,
                   batch_rows=4.0 * levels[0] * width, acts=acts)

    @property
    def classes(self) -> int:
        return self.sizes.num_classes


def relational_terms(run: RunSizes, r: int, terms: dict[str, int]) -> dict[str, int]:
    """A mini-batch rank's ``terms`` for a relational model on a typed book: the per-type feature
    shards instead of the common-width one, the edge and vertex types (a byte each), the rank's
    embedding rows with sparse Adam's state; no hot-row cache (not kept for typed rows);
    evaluation's logits for the labelled type's vertices only (the last layer computes no others)."""
    typed, cfg = run.sizes.typed, run.cfg
    if typed is None or cfg.model not in RELATIONAL_MODELS:
        return terms
    part = run.parts[r]
    inner = typed.inner_of(r, part.inner)
    out = {k: v for k, v in terms.items() if k != "feature_cache"}
    out["shard_features"] = int(sum(4 * n * d for n, d in zip(inner, typed.feature_dims, strict=True)))
    out["shard_types"] = int(part.edges + part.inner + part.halo)
    rows = sum(n for n, d in zip(inner, typed.feature_dims, strict=True) if not d)
    if rows:
        out["embeddings"] = int(rows * (12 * cfg.hidden + 16))  # rows, two moments; step and owned id
    labelled = inner[typed.target] if typed.target is not None else part.inner
    whole = evaluation_bytes(part, cfg, run.classes, cfg.hidden)
    ev = whole - 4 * (part.inner - labelled) * run.classes
    out.pop("evaluation", None)
    if ev > out.get("batch", 0):  # evaluation runs after training's batches are gone
        out["evaluation"] = int(ev - out.get("batch", 0))
    return out


def pipeline_bytes(batch_rows: float, options: Any) -> float:
    """The batches in flight of a mini-batch pipeline: bounded by ``pipeline_mib`` but at least
    one batch (inline, ``pipeline=false``: the one batch)."""
    if not options.pipeline:
        return batch_rows
    return max(batch_rows, min(2 * batch_rows, options.pipeline_mib * MIB))


def estimate(cfg: Any, sizes: GraphSizes, cls: Any) -> MemoryEstimate:
    """Peak bytes per rank and helper process of ``cfg`` on a graph of ``sizes``: the terms of
    strategy class ``cls`` (:meth:`~gnnflow.strategies.base.Strategy.memory_terms`) per rank."""
    cfg = cls.parse_options(cfg)
    run = RunSizes.of(cfg, sizes, cls.distributed)
    ranks: list[dict[str, int]] = []
    helpers: list[dict[str, int]] = []
    for r in range(len(run.parts)):
        terms, helper = cls.memory_terms(run, r)
        ranks.append(terms)
        if helper:
            helpers.append(helper)
    return MemoryEstimate(strategy=cfg.strategy, ranks=ranks, helpers=helpers)


def feature_cache_rows(options: Any, feature_dim: int, remote: int) -> int:
    """Rows of the hot remote feature cache a mini-batch rank holds at most: ``cache_rows`` when
    given, else the rows that fit in ``feature_cache_mib`` MiB, never more than the ``remote``
    vertices a rank does not own."""
    if options.cache_rows is not None:
        rows = int(options.cache_rows)
    else:
        rows = int(options.feature_cache_mib * MIB // (4 * max(1, feature_dim) + 8))
    return max(0, min(rows, int(remote)))


def hec_cache_lines(num_nodes: int, halo: int, widths: list[int], options: Any) -> int:
    """HEC's cache lines per layer on a rank: ``cache_lines`` (the paper's ``cs``) when given,
    else the paper's lines-per-vertex ratio on OGBN-Products (``0.408 N``, §4.4) lowered to the
    rank's halo vertices (only they are ever cached) and to the lines of all layers (``widths``:
    every layer's input width, float32) that fit in ``cache_mib``.

    The paper's 1M lines were sized for its 2-socket Xeon nodes; 4 ranks of products on a
    24 GiB host would spend 9.6 GB on caches alone, hence the budget (docs/hec.md)."""
    if options.cache_lines is not None:
        return int(options.cache_lines)
    fit = int(options.cache_mib * MIB // max(1, 4 * sum(widths)))
    return max(1, min(round(HEC_CS_PER_VERTEX * num_nodes), halo, fit))


def estimate_run(cfg: Any, cls: Any) -> MemoryEstimate:
    """:func:`estimate` for a :class:`~gnnflow.config.TrainConfig` of strategy class ``cls``
    (reads its store's and book's meta)."""
    book = cfg.partition if cls.distributed else None
    return estimate(cfg, GraphSizes.read(cfg.graph, book), cls)


# ------------------------------------------------------------------------------------------ the host
AVAILABLE_ENV = "GNNFLOW_MEMORY_AVAILABLE_MIB"


def available_memory() -> tuple[int, str]:
    """Bytes a run may use on this host and where the figure comes from.

    ``GNNFLOW_MEMORY_AVAILABLE_MIB`` when set (a cluster node's size, or tests); else
    MemAvailable of /proc/meminfo, lowered to the cgroup's free room
    (``memory.max - memory.current``) when a limit is set."""
    text = os.environ.get(AVAILABLE_ENV, "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if value <= 0:
            from gnnflow.errors import ConfigError

            raise ConfigError(f"{AVAILABLE_ENV}={text!r}: expected a positive number of MiB")
        return int(value * MIB), f"{AVAILABLE_ENV}={text}"
    avail, source = 0, "MemAvailable"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except OSError:
        return 0, "unknown (no /proc/meminfo)"
    limit = _cgroup_room()
    if limit is not None and limit < avail:
        avail, source = limit, "cgroup memory.max - memory.current"
    return avail, source


def _cgroup_room() -> int | None:
    base = Path("/sys/fs/cgroup")
    try:
        text = (base / "memory.max").read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        current = int((base / "memory.current").read_text().strip())
    except (OSError, ValueError):
        current = 0
    return max(0, int(text) - current)


# ------------------------------------------------------------------------------------------ preflight
def ranks_on_this_host(cfg: Any) -> int:
    """Ranks of the run that share this host: all of them when gnnflow launches them on one
    host, ``workers / nnodes`` with ``--nnodes`` (:func:`gnnflow.runtime.hosts.nodes`);
    under torchrun/srun the launcher's local count."""
    from gnnflow.runtime.hosts import nodes

    if cfg.workers == 1:
        return 1
    spec = nodes()
    if spec is not None and spec.nnodes > 1:
        return -(-int(cfg.workers) // spec.nnodes)
    for name in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        text = os.environ.get(name, "").split("(")[0].split(",")[0].strip()
        if text.isdigit() and int(text) > 0:
            return min(cfg.workers, int(text))
    return int(cfg.workers)


def check_memory(cfg: Any, cls: Any, force: bool = False) -> MemoryEstimate | None:
    """Log the run's memory estimate and what is available; refuse (ResourceError, one line)
    when the processes on this host would not fit, unless ``force`` (then a warning).

    Reads meta.json files only and imports no torch, so a refusal takes well under a second
    after the interpreter starts."""
    import logging

    from gnnflow.errors import ResourceError, StoreError

    log = logging.getLogger("gnnflow.train")
    try:
        est = estimate_run(cfg, cls)
    except (FileNotFoundError, StoreError):  # a missing or malformed store or book: the input checks name it
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # no sizes to go on: say so, go on
        log.warning("memory estimate: not available (%s: %s)", type(exc).__name__, exc)
        return None
    local = ranks_on_this_host(cfg)
    need = host_need(est, cls, local)
    avail, source = available_memory()
    log.info("%s; available %s", est.line(local),
             f"{avail / MIB:.0f} MiB ({source})" if avail else f"unknown ({source})")
    if not avail or need <= avail:
        return est
    msg = shortfall(cfg.strategy, local, need, est, avail, source)
    if force:
        log.warning("%s; --force: running anyway", msg)
        return est
    raise ResourceError(f"{msg}; use fewer --workers (or hosts with more memory), a smaller --batch-size, "
                        "--hidden or --opt pipeline_mib, or --force to run anyway")


def host_need(est: MemoryEstimate, cls: Any, local: int) -> int:
    """Bytes the processes of ``local`` ranks of a run need on one host (a one-process strategy
    has no launcher: the process that checks is the one that trains)."""
    if not cls.distributed:
        est.launcher = 0
    return est.host_total(local)


def shortfall(strategy: str, local: int, need: int, est: MemoryEstimate, avail: int, source: str) -> str:
    """The preflight's line for a run that will not fit."""
    return (f"memory: {strategy} with {local} rank(s) on this host needs about {need / MIB:.0f} MiB "
            f"(up to {est.max_rank / MIB:.0f} MiB per rank), but {avail / MIB:.0f} MiB is available ({source})")
