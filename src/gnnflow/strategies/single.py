"""Single-process training: the reference every distributed strategy is tested against.

Mini-batch (DistDGLv2 §3.2): each epoch shuffles the training vertices into
batches of ``batch_size`` targets; per batch the layer-wise sampler draws the
blocks (GSplit §5), the input rows are gathered from the feature store, and
the model runs forward/backward with cross-entropy averaged over the targets;
Adam steps.  Full-batch (option ``full_batch``, MG-GCN §2): one iteration
per epoch on the whole graph (every layer's block is the whole graph), loss
over all training vertices.  Evaluation is exact full-neighbourhood inference
(:func:`gnnflow.strategies.common.evaluate_full`).

On a homogenized heterogeneous store (DistDGLv2 §4.1.1, §4.1.4) a relational run
(``--model rgcn|rgat``, or per-relation fanouts) samples per relation (the typed
sampler, blocks carrying edge types) and a relational model reads each vertex
type's own features (:class:`~gnnflow.strategies.relational.TypedGraph`); the
featureless types' embedding rows are updated by the sparse optimizer every
distributed strategy uses (:mod:`gnnflow.strategies.embedding`), on the rows a
batch touched.

With ``sampling=device`` (``auto`` on a CUDA run) the sampler is the tensor sampler on the
rank's device (:class:`~gnnflow.sampling.tensor_sampler.TensorNeighborSampler`: the same blocks),
and ``device_cache_mib`` keeps the rows of the vertices in the most in-neighbour lists on the
device (:mod:`gnnflow.strategies.device_cache`); the rest are read from the store.  A typed
graph samples on the host (the typed sampler has no tensor form yet).

Everything random is seeded from ``cfg.seed``: model init, batch shuffling and
dropout are checkpointed; neighbour draws are a function of (seed, epoch, batch,
layer, vertex) (:mod:`gnnflow.sampling.draws`), the same draws every distributed
sampler makes for the same batch.  A resumed run continues exactly as an
uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from gnnflow.config import RELATIONAL_MODELS, TrainConfig
from gnnflow.data.store import GraphStore, open_store
from gnnflow.errors import ConfigError
from gnnflow.nn import TypedRows, build_model_from_config
from gnnflow.options import option
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext
from gnnflow.sampling import Block, NeighborSampler, full_blocks, sort_rows_by_type
from gnnflow.sampling.tensor_sampler import TensorNeighborSampler
from gnnflow.strategies.base import Strategy
from gnnflow.strategies.common import (
    batch_generator,
    batches,
    evaluate_full,
    feature_rows,
    graph_degrees,
    make_optimizer,
    model_graph,
    seed_everything,
)
from gnnflow.strategies.device_cache import DeviceFeatureCache, record_hit_rate
from gnnflow.strategies.device_path import DevicePathOptions, device_cache_mib, sampling_device
from gnnflow.strategies.embedding import JointOptimizer
from gnnflow.strategies.memory import BASE, BLOCK_EDGE_BYTES, CHUNK, EVAL_CHUNKS, RunSizes
from gnnflow.strategies.relational import TypedGraph, make_embeddings


@dataclass(frozen=True)
class SingleOptions(DevicePathOptions):
    """Single-process training's options."""

    full_batch: bool = option(False, "one iteration per epoch on the whole graph (MG-GCN §2)")


class SingleProcess(Strategy):
    """Mini-batch or full-batch training in one process."""

    name: ClassVar[str] = "single"
    distributed: ClassVar[bool] = False
    relational: ClassVar[bool] = True
    Options = SingleOptions

    @classmethod
    def batch_shares(cls, cfg: TrainConfig) -> dict[str, float] | None:
        full = SingleOptions.parse(cfg.options).full_batch
        return None if full else super().batch_shares(cfg)

    @classmethod
    def memory_terms(cls, run: RunSizes, r: int) -> tuple[dict[str, int], dict[str, int]]:
        """The whole store (features, CSR, labels), one batch and the whole graph's evaluation
        (on the CPU with the blocks it keeps for every layer, ``BLOCK_EDGE_BYTES`` per edge)."""
        cfg, sizes = run.cfg, run.sizes
        n, m = sizes.num_nodes, sizes.num_edges
        blocks = BLOCK_EDGE_BYTES * m if cfg.device == "cpu" else 0
        return {"baseline": BASE, "model": run.model,
                "store": int(4 * n * run.f_dim + 8 * (n + 1) + sizes.store_idx_bytes * m + 8 * n),
                "batch": int(run.batch_rows + run.acts),
                "evaluation": int(EVAL_CHUNKS * CHUNK + 4 * n * (cfg.hidden + run.classes) + blocks)}, {}

    def __init__(self, cfg: TrainConfig, ctx: RankContext | None = None) -> None:
        super().__init__(cfg, ctx or RankContext())
        self.full_batch = self.options.full_batch
        self.store: GraphStore | None = None
        self.sampler: NeighborSampler | TensorNeighborSampler | None = None
        self.device_cache: DeviceFeatureCache | None = None
        self.batch_gen = batch_generator(cfg.seed)
        self._epoch_gen_state = self.batch_gen.get_state()
        self.full: list[Block] | None = None
        self.features: torch.Tensor | TypedRows | None = None
        self.typed: TypedGraph | None = None
        self.degrees: tuple[torch.Tensor, torch.Tensor] | None = None

    def prepare(self) -> None:
        cfg = self.cfg
        self.store = store = open_store(cfg.graph)
        store.check_labels()  # a bad label is one line now, not an IndexError in the first step
        self.typed = typed = TypedGraph(store) if cfg.relational else None
        if store.features is None and cfg.model not in RELATIONAL_MODELS:
            raise ConfigError(f"graph {cfg.graph}: has no features.npy; training needs vertex features")
        self.graph = graph = model_graph(store, cfg)  # A or A + I, as every strategy builds it
        seed_everything(cfg.seed)
        self.model = build_model_from_config(cfg, store.feature_dim, store.num_classes,
                                             schema=typed.schema if typed else None).to(self.ctx.device)
        self.optimizer = make_optimizer(self.model, cfg)
        if typed is not None:  # a row per featureless vertex, all of them owned here
            self.embeddings = typed.embeddings = make_embeddings(
                typed.schema, typed.offsets, np.arange(store.num_nodes, dtype=np.int64), cfg)
            if self.embeddings is not None:
                self.optimizer = JointOptimizer(self.optimizer, self.embeddings)  # type: ignore[assignment]
        self.labels = torch.from_numpy(np.array(store.labels, dtype=np.int64))
        self.train_ids = torch.from_numpy(np.array(store.train_idx, dtype=np.int64))
        if self.full_batch:
            if typed is None:
                full = full_blocks(graph.indptr, graph.indices, 1)
            else:
                indices, etypes = sort_rows_by_type(graph.indptr, graph.indices, np.asarray(typed.etypes))
                full = full_blocks(graph.indptr, indices, 1, etypes, typed.vertex_types())
            self.full = [b.to(self.ctx.device) for b in full] * cfg.num_layers
            # the features once; the embedding rows (learnable) are attached at every step
            self.features = self.input_rows(torch.arange(store.num_nodes), embeddings=False).to(self.ctx.device)
        else:
            fanouts = cfg.fanouts or [-1] * cfg.num_layers
            if typed is not None and self.options.sampling == "device":
                raise ConfigError("options.sampling=device: a typed (relational) graph samples on the host "
                                  "(the typed sampler has no tensor form); use sampling=auto or host")
            where = sampling_device(self.options, self.ctx.device) if typed is None else None
            if typed is not None:
                self.sampler = typed.sampler(graph.indptr, graph.indices, fanouts, seed=cfg.seed)
            elif where is None:
                self.sampler = NeighborSampler(graph.indptr, graph.indices, fanouts, seed=cfg.seed)
            else:
                self.sampler = TensorNeighborSampler(graph.indptr, graph.indices, fanouts, seed=cfg.seed, device=where)
            # GCN on whole-graph degrees (cfg.gcn_degrees), as the distributed mini-batch strategies
            if cfg.graph_degrees:
                in_deg, out_deg = graph_degrees(graph.indptr, graph.indices)
                self.degrees = (in_deg.to(where or "cpu"), out_deg.to(where or "cpu"))
            mib = device_cache_mib(self.options)
            if mib > 0:  # hotness: how many in-neighbour lists hold a vertex (its chance to be drawn)
                hot = np.bincount(np.asarray(graph.indices), minlength=store.num_nodes)
                self.device_cache = DeviceFeatureCache.build(
                    np.arange(store.num_nodes), hot, mib, store.feature_dim, self.ctx.device,
                    lambda ids: feature_rows(store.features, torch.from_numpy(ids)))

    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        assert self.model is not None
        self.model.train()
        if self.full_batch:
            return self._full_batch_step(epoch, rec)
        assert self.sampler is not None and self.store is not None
        first, losses = self.take_start()
        if first:  # inside an epoch: draw its order again from the generator as it was at its start
            self.batch_gen.set_state(self._epoch_gen_state)
        self._epoch_gen_state = self.batch_gen.get_state()
        total, count = 0.0, 0
        for index, targets in enumerate(batches(self.train_ids, self.cfg.batch_size, self.batch_gen)):
            if index < first:  # trained before the checkpoint: its loss is kept, in order
                total += losses[index] * targets.shape[0]
                count += targets.shape[0]
                continue
            with rec.timer("sample"):
                blocks = self.sampler.at(epoch, index).sample_blocks(targets)
                if self.degrees is not None:
                    in_deg, out_deg = self.degrees
                    for b in blocks:
                        b.src_deg, b.dst_deg = out_deg[b.src_ids], in_deg[b.dst_ids]
            rec.count("sampled_edges", sum(b.num_edges for b in blocks))
            with rec.timer("load"):
                x = self.input_rows(blocks[0].src_ids, rec)
                y = self.labels[targets]
                blocks = [b.to(self.ctx.device) for b in blocks]
                x, y = x.to(self.ctx.device), y.to(self.ctx.device)
            loss = self._step(blocks, x, y, rec)
            total += loss * targets.shape[0]
            count += targets.shape[0]
            rec.count("iterations")
            losses.append(loss)
            self.batch_done(epoch, index, rec, losses)
        record_hit_rate(rec, self.device_cache)
        return total / max(count, 1)

    def input_rows(self, ids: torch.Tensor, rec: Recorder | None = None,
                   embeddings: bool = True) -> torch.Tensor | TypedRows:
        """The model's input rows of vertices ``ids`` in a training step: per-type rows for a
        relational model (with the featureless types' embedding rows as the step's leaf, unless
        ``embeddings`` is false), else rows of the store's (common-width) features, from the device
        cache where it holds them, the rest (all of them without a cache) read from the store
        (``features_loaded`` on ``rec``)."""
        assert self.store is not None
        if self.typed is not None and self.cfg.model in RELATIONAL_MODELS:
            if rec is not None:
                rec.count("features_loaded", int(ids.shape[0]))
            return self.typed.rows(ids.cpu(), embeddings=embeddings, learn=True)
        assert self.store.features is not None
        features = self.store.features

        def read(missing: torch.Tensor) -> torch.Tensor:
            if rec is not None:
                rec.count("features_loaded", missing.shape[0])
            return feature_rows(features, missing)

        if self.device_cache is None or rec is None:
            return read(ids.cpu())
        return self.device_cache.fetch(ids, read, rec.counters)

    def _full_batch_step(self, epoch: int, rec: Recorder) -> float:
        assert self.full is not None and self.features is not None
        train = self.train_ids.to(self.ctx.device)
        rec.count("sampled_edges", sum(b.num_edges for b in self.full))
        x = self.features
        if self.embeddings is not None:
            assert isinstance(x, TypedRows)
            x = self.embeddings.attach(x)
        loss = self._step(self.full, x, self.labels.to(self.ctx.device)[train], rec, rows=train)
        rec.count("iterations")
        self.batch_done(epoch, 0, rec, [loss])
        return loss

    def _step(self, blocks: list[Block], x: torch.Tensor | TypedRows, y: torch.Tensor, rec: Recorder,
              rows: torch.Tensor | None = None) -> float:
        assert self.model is not None and self.optimizer is not None
        with rec.timer("forward_backward"):
            logits = self.model(blocks, x)
            if rows is not None:
                logits = logits[rows]
            loss = F.cross_entropy(logits, y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with rec.timer("step"):
            self.optimizer.step()
        return float(loss.detach())

    def evaluate(self) -> dict[str, float]:
        assert self.model is not None
        return evaluate_full(self.model, self.graph, self.ctx.device, typed=self.typed)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["batch_generator"] = self.batch_gen.get_state()  # the sampler's draws are keyed by batch
        # the generator before this epoch's order was drawn (what a mid-epoch checkpoint resumes from)
        state["epoch_generator"] = self._epoch_gen_state
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.batch_gen.set_state(state["batch_generator"])
        self._epoch_gen_state = state.get("epoch_generator", state["batch_generator"])
