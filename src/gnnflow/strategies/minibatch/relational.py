"""Relational models on a typed partition book, mini-batch and distributed (DistDGLv2 §4.1.1, §4.1.4, §4.2).

A rank of a typed book (:mod:`gnnflow.partition.book`) holds its part's CSR with each
entry's relation, its vertices' types, and per featured vertex type the feature rows of
its own vertices of that type ("an ID space in KVStore for each vertex type", §4.1.4).
A relational run adds to the mini-batch stages:

* **sample** — the typed :class:`~gnnflow.strategies.minibatch.sampler.DistNeighborSampler`:
  a fanout per relation, owners draw their seeds' relations (§4.2.2);
* **load** — the input rows of a batch as :class:`~gnnflow.nn.TypedRows`: per featured
  type one :class:`~gnnflow.strategies.minibatch.feature_store.FeatureStore` over that
  type's shard (:class:`TypedInputs`; a row exchange per type), at the type's own width;
* **train** — the featureless types' embedding rows are read synchronously, right before
  the forward pass (§4.2.1: "we read the learnable embeddings synchronously"), from
  their owners through the same row exchange (:class:`EmbeddingExchange`); after
  backward their gradients go back along the same paths and each owner updates the rows
  a batch touched with the sparse optimizer (:mod:`gnnflow.strategies.embedding`);
* **evaluate** — each rank embeds its own vertices' typed inputs (its features and its
  own embedding rows: nothing remote), and layer-wise inference runs on that table with
  typed blocks.

:class:`RelationalMiniBatch` is the mini-batch base with these stages; the
strategies built on it are ``relational``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from gnnflow.comm.collectives import CommStats, exchange_rows_in_rounds, world
from gnnflow.config import RELATIONAL_MODELS
from gnnflow.data.hetero import TypeMap
from gnnflow.errors import ConfigError
from gnnflow.nn.typed_input import GraphSchema, TypedRows
from gnnflow.results.schema import Recorder
from gnnflow.sampling.typed import LayerFanout
from gnnflow.strategies.device_path import device_cache_mib
from gnnflow.strategies.embedding import JointOptimizer, LocalRows, NodeEmbeddings, RowExchange
from gnnflow.strategies.memory import RunSizes, relational_terms
from gnnflow.strategies.minibatch.base import SPLITS, MiniBatchStrategy
from gnnflow.strategies.minibatch.feature_store import EXCHANGE_BYTES, FeatureStore, RowPlan
from gnnflow.strategies.minibatch.inference import ScratchRows, layerwise_inference
from gnnflow.strategies.minibatch.pipeline import MiniBatch, add_stats_delta, stats_totals
from gnnflow.strategies.minibatch.sampler import TypedSampling, make_sampler
from gnnflow.strategies.relational import graph_schema, make_embeddings, resolve_fanouts
from gnnflow.strategies.rows import take_rows

#: inner vertices embedded at a time when evaluation builds the typed input table
EMBED_CHUNK = 65536


class OwnedRows:
    """One row table of a rank as a :class:`FeatureStore` sees it: the rows of ``ids`` (sorted
    global ids this rank owns), row ``i`` being ``ids[i]``'s (a featured type's shard, the
    embedding rows of the rank's featureless vertices)."""

    def __init__(self, part_id: int, ids: np.ndarray) -> None:
        self.part_id, self.ids = int(part_id), np.asarray(ids, dtype=np.int64)

    @property
    def num_inner(self) -> int:
        return int(self.ids.shape[0])

    def global_to_local(self, ids: Any) -> np.ndarray:
        """Rows of global ``ids`` in this table; -1 where not owned here."""
        ids = np.asarray(ids, dtype=np.int64)
        if not self.ids.size:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.shape[0] - 1)
        return np.where(self.ids[pos] == ids, pos, -1).astype(np.int64)


@dataclass
class TypedView:
    """The typed side of a run over a typed book, from the graph's ``meta.json`` alone."""

    typemap: TypeMap
    schema: GraphSchema
    sampling: TypedSampling
    fanouts: list[LayerFanout]

    @classmethod
    def of(cls, part: Any, graph_path: Any, cfg: Any) -> TypedView:
        from gnnflow.data.meta import read_store_meta

        if part.edge_types is None:
            raise ConfigError(f"{cfg.partition or cfg.graph}: part {part.part_id} has no edge_type.npy; a relational "
                              "run needs a typed book of a homogenized store (re-partition it with `gnnflow partition`)")
        meta = read_store_meta(graph_path)
        tm = TypeMap.from_meta(meta)
        return cls(tm, graph_schema(meta), TypedSampling(len(tm.edge_types), tm.node_type_offsets),
                   resolve_fanouts(tm, cfg.fanouts or [-1] * cfg.num_layers))

    @property
    def offsets(self) -> np.ndarray:
        return self.typemap.node_type_offsets

    def types_of(self, ids: np.ndarray) -> np.ndarray:
        return (np.searchsorted(self.offsets, ids, side="right") - 1).astype(np.int64)


class TypedInputs:
    """A batch's input rows on a typed book: per featured type a feature store over the part's
    ``features_<ntype>`` shard; :meth:`fetch` (a row exchange per featured type, collective)
    and :meth:`local` (the rank's own vertices, no exchange) give :class:`TypedRows`."""

    def __init__(self, part: Any, node_part: np.ndarray, view: TypedView, stats: Any = None,
                 group: Any = None) -> None:
        self.view = view
        self.stores: dict[int, FeatureStore] = {}
        for t, name in enumerate(view.typemap.node_types):
            if view.schema.feature_dims[t] is None:
                continue
            if name not in part.type_features:
                raise ConfigError(f"part {part.part_id} has no features_{name}.npy; re-partition the homogenized "
                                  "store with its features (gnnflow partition)")
            lo, hi = np.searchsorted(part.inner_ids, view.offsets[t:t + 2])
            self.stores[t] = FeatureStore(OwnedRows(part.part_id, part.inner_ids[lo:hi]), node_part,
                                          local_rows=part.type_features[name], stats=stats, group=group)

    def _rows(self, ids: Any, gather: Any) -> TypedRows:
        gid = np.asarray(ids, dtype=np.int64)
        types = self.view.types_of(gid)
        features = {t: gather(t, store, gid[types == t]) for t, store in self.stores.items()}
        return TypedRows(torch.from_numpy(types), torch.from_numpy(gid - self.view.offsets[types]), features)

    def fetch(self, ids: Any, counters: dict[str, float] | None = None, out: Any = None) -> TypedRows:
        """Rows of global ``ids``, remote ones from their owners.  Collective."""
        if out is not None:
            raise ConfigError("relational runs hand typed rows over, not one table (options.samplers=thread)")
        return self._rows(ids, lambda t, store, sel: store.fetch(sel, counters))

    def local(self, ids: Any) -> TypedRows:
        """Rows of this rank's own vertices ``ids`` (no exchange)."""
        def gather(t: int, store: FeatureStore, sel: np.ndarray) -> torch.Tensor:
            pos = store.part.global_to_local(sel)
            if (pos < 0).any():
                raise ConfigError(f"typed inputs: vertex {int(sel[pos < 0][0])} is not this rank's")
            return take_rows(store.table, pos)

        return self._rows(ids, gather)


class EmbeddingExchange(FeatureStore):
    """The embedding rows a rank owns, served to peers like feature rows; :meth:`push_back`
    sends the last fetch's gradients to the owners along the fetch's own paths, reversed."""

    def __init__(self, part_id: int, embeddings: NodeEmbeddings, node_part: np.ndarray, stats: Any = None,
                 group: Any = None) -> None:
        super().__init__(OwnedRows(part_id, embeddings.owned), node_part, local_rows=embeddings.weight, stats=stats,
                         group=group)
        self._ids = np.zeros(0, dtype=np.int64)
        self._plan: RowPlan | None = None

    def fetch(self, ids: Any, counters: dict[str, float] | None = None, out: Any = None) -> torch.Tensor:
        self._ids = np.asarray(ids, dtype=np.int64)
        self._plan = None
        return super().fetch(self._ids, counters, out)

    def _exchange(self, ids: np.ndarray, owner: np.ndarray, out: torch.Tensor, dest: np.ndarray) -> RowPlan | None:
        self._plan = super()._exchange(ids, owner, out, dest)
        return self._plan

    def push_back(self, grad: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
        ids = self._ids
        local = self.owners(ids) == self.rank if ids.size else np.zeros(0, dtype=bool)
        positions = [self.part.global_to_local(ids[local])]
        rows = [grad[torch.from_numpy(np.flatnonzero(local))]]
        plan = self._plan
        if plan is not None:  # q sends p the gradients of the rows q asked p for: the fetch's matrix
            def gather(peer: int, lo: int, hi: int, buf: torch.Tensor) -> None:
                torch.index_select(grad, 0, torch.from_numpy(plan.dest[peer][lo:hi]), out=buf)

            def scatter(peer: int, lo: int, hi: int, got: torch.Tensor) -> None:
                positions.append(plan.positions[peer][lo:hi])
                rows.append(got.clone())

            exchange_rows_in_rounds(gather, plan.matrix, scatter, (self.dim,), EXCHANGE_BYTES, self.stats, self.group)
        return np.concatenate(positions), torch.cat(rows)


class RelationalMiniBatch(MiniBatchStrategy):
    """A mini-batch strategy that trains RGCN / R-GAT (and samples per relation) on a typed book;
    an untyped run takes the base's stages unchanged."""

    relational: ClassVar[bool] = True
    _typed: TypedView | None = None
    _typed_inputs: TypedInputs | None = None
    embed_stats: CommStats | None = None

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        super().check_config(cfg)
        opts = cfg.options
        if cfg.relational and opts.samplers == "process":
            raise ConfigError("options.samplers=process: a relational run hands typed rows over and reads "
                              "embedding rows in the training step; use samplers=thread")
        if cfg.relational and opts.replicate_structure:
            raise ConfigError("options.replicate_structure: per-relation sampling reads the typed book's parts; "
                              "turn replicate_structure off")
        if cfg.relational and (getattr(opts, "sampling", "auto") == "device" or device_cache_mib(opts) > 0):
            raise ConfigError("options.sampling=device / device_cache_mib: a typed (relational) run samples on the "
                              "host and reads per-type rows there (the typed sampler has no tensor form); use "
                              "sampling=auto or host and device_cache_mib=0")

    @classmethod
    def memory_terms(cls, run: RunSizes, r: int) -> tuple[dict[str, int], dict[str, int]]:
        """The base's terms, with a relational model's: the per-type feature shard instead of the
        common-width one, the edge and vertex types, and the rank's embedding rows with their
        optimizer state (:func:`gnnflow.strategies.memory.relational_terms`)."""
        terms, helpers = super().memory_terms(run, r)
        return relational_terms(run, r, terms), helpers

    # -------------------------------------------------------------- the typed pieces
    def typed_view(self) -> TypedView:
        if self._typed is None:
            self._typed = TypedView.of(self.part, self.graph_path, self.cfg)
        return self._typed

    @property
    def relational_model(self) -> bool:
        return self.cfg.model in RELATIONAL_MODELS

    def typed_inputs(self, group: Any = None) -> TypedInputs:
        """The per-type feature stores (made on first use, on ``group``)."""
        if self._typed_inputs is None:
            self._typed_inputs = TypedInputs(self.part, self.node_part, self.typed_view(), self.load_stats, group)
        return self._typed_inputs

    def new_sampler(self, seed: int, group: Any, stats: CommStats) -> Any:
        """A typed book's sampler draws per relation, on the host (the typed sampler has no
        tensor form); otherwise the base class's."""
        if not self.cfg.relational:
            return super().new_sampler(seed, group, stats)
        view = self.typed_view()
        return make_sampler(self.part, self.node_part, view.fanouts, seed, group=group,
                            stats=stats, own_targets=self.own_targets(), typed=view.sampling)

    def build_feature_store(self, group: Any) -> Any:
        if not self.relational_model:
            return super().build_feature_store(group)
        return self.typed_inputs(group)

    def _build_caches(self, device_mib: float) -> None:
        if not self.relational_model:
            return super()._build_caches(device_mib)
        self.cache_rows = self.cached = 0  # no hot-row cache of typed rows (docs/hetero.md)

    def build_model(self) -> None:
        if not self.relational_model:
            return super().build_model()
        view = self.typed_view()
        self.schema = view.schema
        super().build_model()
        self.embeddings = make_embeddings(view.schema, view.offsets, self.part.inner_ids, self.cfg)
        if self.embeddings is not None:
            self.embed_stats = CommStats(world()[1])
            self.embeddings.exchange = self.embedding_exchange(self.embeddings)
            assert self.optimizer is not None
            self.optimizer = JointOptimizer(self.optimizer, self.embeddings)  # type: ignore[assignment]

    def embedding_exchange(self, embeddings: NodeEmbeddings) -> RowExchange:
        """Where a batch's embedding rows come from: their owners, on the training thread's group."""
        return EmbeddingExchange(self.part.part_id, embeddings, self.node_part, stats=self.embed_stats)

    # -------------------------------------------------------------- the stages
    def device_stage(self, mb: MiniBatch) -> MiniBatch:
        if not isinstance(mb.inputs, TypedRows):
            return super().device_stage(mb)
        dev = self.ctx.device
        if dev.type != "cpu":
            assert mb.blocks is not None
            mb.blocks = [b.to(dev) for b in mb.blocks]
            mb.inputs = mb.inputs.to(dev)  # type: ignore[assignment]
            mb.labels = None if mb.labels is None else mb.labels.to(dev)
        return mb

    def compute_loss(self, mb: MiniBatch, rec: Recorder) -> torch.Tensor:
        if self.embeddings is not None and isinstance(mb.inputs, TypedRows):
            # read synchronously, after the last step's update (DistDGLv2 §4.2.1)
            mb.inputs = self.embeddings.attach(mb.inputs)  # type: ignore[assignment]
            rec.count("embedding_rows", sum(int(mb.inputs.features[t].shape[0])  # type: ignore[union-attr]
                                            for t in self.embeddings.featureless))
        return super().compute_loss(mb, rec)

    def train_batch(self, mb: MiniBatch, rec: Recorder) -> float:
        if self.embeddings is None:
            return super().train_batch(mb, rec)
        before = stats_totals(self.embed_stats)
        loss = super().train_batch(mb, rec)
        # the rows fetched, their gradients sent back, and this rank's own rows the batch touched
        probe = MiniBatch(epoch=mb.epoch, index=mb.index, targets=mb.targets)
        add_stats_delta(probe, self.embed_stats, before, "embedding")
        for key, value in probe.counters.items():
            rec.count(key, value)
        rec.count("embedding_rows_updated", self.embeddings.last_updated)
        return loss

    # -------------------------------------------------------------- evaluation
    @torch.no_grad()
    def typed_input_table(self) -> ScratchRows:
        """Layer 0's rows of this rank's vertices: the model's input layer on their typed rows
        (own features, own embedding rows), chunk by chunk into a scratch table."""
        assert self.net is not None
        part, dev, emb = self.part, self.ctx.device, self.embeddings
        inputs = self.typed_inputs()
        local = LocalRows(emb.owned, emb.weight) if emb is not None else None
        table = ScratchRows(part.num_inner, int(self.cfg.hidden))
        for s in range(0, part.num_inner, EMBED_CHUNK):
            rows = inputs.local(part.inner_ids[s:s + EMBED_CHUNK])
            if emb is not None:
                rows = emb.attach(rows, learn=False, exchange=local)
            table.array[s:s + EMBED_CHUNK] = self.net.embed(rows.to(dev)).cpu().numpy()
            table.release()
        return table

    def inference(self) -> torch.Tensor:
        if not self.relational_model:
            return super().inference()
        assert self.net is not None
        was = self.net.training
        self.net.eval()
        try:
            table = self.typed_input_table()
        finally:
            self.net.train(was)
        # the last layer for the labelled vertices only (mag: papers; not authors' 349 logits each)
        part = self.part
        wanted = np.unique(part.global_to_local(np.concatenate(
            [np.asarray(getattr(part, f"{split}_idx"), dtype=np.int64) for split in SPLITS])))
        return layerwise_inference(self.net, part, self.node_part, self.ctx.device, group=self.part_group,
                                   inputs=table, wanted=wanted)
