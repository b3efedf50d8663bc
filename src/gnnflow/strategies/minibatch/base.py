"""Shared base of the mini-batch distributed strategies (DistDGLv2 §3.3, §4.1.2, §4.2).

Every rank holds one part of the partition book (``PartitionBook.load_part``;
never the whole graph or feature file).  One training iteration on every rank:

1. **schedule** — the rank's next local batch of target vertices.  Targets are
   this rank's part's training vertices (level-2 part with two-level
   partitioning, DistDGLv2 §4.1.2) or, with ``two_level=false``, the
   training vertices of its whole machine (level-1 part) split randomly among
   the machine's ranks (the "METIS only" baseline of Fig. 10).  An epoch
   covers every training vertex once: ``batch_size`` is the GLOBAL mini-batch
   ``B``, every rank runs the same number of iterations ``ceil(N / B)`` (``N``
   training vertices over all ranks) and cuts its ``n_r`` shuffled targets into
   that many near-equal batches, so its share is about ``B n_r / N`` (``B / P``
   on a balanced partition);
2. **sample** — :class:`~gnnflow.strategies.minibatch.sampler.DistNeighborSampler`
   (owners sample their vertices, §4.2.2) or, with ``replicate_structure``,
   the full CSR locally; or the same draws on the rank's device (``sampling``, docs/gpu.md);
3. **load** — input rows from the :class:`~gnnflow.strategies.minibatch.feature_store.FeatureStore`
   (local rows, optional hot-row cache, one all-to-all for remote rows; ``device_cache_mib``:
   hot rows first from the rank's device) into a buffer reused batch after batch (``input_rows``);
4. **device copy**;
5. **forward/backward** — loss = cross-entropy summed over the local targets
   divided by the GLOBAL batch size (known from the schedule without
   communication), so the sum over ranks of the gradients is exactly the
   gradient of the single-process mean loss over the union of the batches;
6. **all-reduce** of the gradients (sum; or ``ddp=true``: PyTorch DDP, with the
   loss scaled by P to undo DDP's averaging) and an optimizer **step**.

Stages 1-4 run in :class:`~gnnflow.strategies.minibatch.pipeline.MiniBatchPipeline`,
asynchronously (``pipeline=true``, default) or inline (``pipeline=false``,
the ``--no-pipeline`` flag).  Evaluation is exact full-neighbourhood
layer-wise inference over the partitions: per layer each rank computes its
inner vertices' representations and fetches its halo rows from their owners
(one all-to-all per layer); correct counts are all-reduced, so every rank
returns the same global accuracies.

Options: :class:`MiniBatchOptions` (``gnnflow train --help`` lists them; ``data`` caches 256 MiB
of hot remote feature rows by default, the strategies built on it none).  The model settings
``self_loops`` (the part becomes its share of A + I) and ``gcn_degrees`` ("graph": GCN blocks
carry whole-graph degrees, fetched with the features; "block": the block's own) are applied here
as in every strategy.

Hooks for subclasses (split-parallel, p3, HEC): override any of

``local_targets() -> (ids, labels)``   the training vertices this rank draws from;
``build_sampler(group)``               the sampler the sample stage calls;
``build_feature_store(group)``         the store the load stage calls;
``sample_stage(mb)`` / ``load_stage(mb)`` / ``device_stage(mb)``   one stage each;
``compute_loss(mb, rec) -> Tensor``    this rank's share of the loss (before backward);
``reduce_gradients(rec)``              synchronise gradients;
``train_batch(mb, rec) -> float``      one whole iteration after the pipeline.

Subclasses that do not use one of the pieces (e.g. no feature store) return None from its
builder.  :meth:`prepare` sets ``self.part``, ``self.book``, ``self.node_part``, ``self.num_batches``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnnflow.comm.collectives import CommStats, all_gather, all_reduce_gradients, broadcast, world
from gnnflow.errors import ConfigError
from gnnflow.io import ticking
from gnnflow.results.schema import Recorder
from gnnflow.runtime.buffers import BufferPool
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.devices import COMPUTE, HOST
from gnnflow.strategies.base import Strategy
from gnnflow.strategies.device_cache import DeviceFeatureCache, record_hit_rate
from gnnflow.strategies.device_path import device_cache_mib, sampling_device
from gnnflow.strategies.memory import (
    BASE,
    MIB,
    RunSizes,
    evaluation_bytes,
    feature_cache_rows,
    pipeline_bytes,
    shard_bytes,
)
from gnnflow.strategies.minibatch.device_sampler import make_device_sampler
from gnnflow.strategies.minibatch.feature_store import FeatureStore
from gnnflow.strategies.minibatch.options import MiniBatchOptions
from gnnflow.strategies.minibatch.pipeline import (
    DeviceCopier,
    MiniBatch,
    MiniBatchPipeline,
    add_stats_delta,
    stage_groups,
    stats_totals,
)
from gnnflow.strategies.minibatch.sampler import (
    make_sampler,
    presample_input_counts,
    sample_minibatch,
)

if TYPE_CHECKING:
    from gnnflow.data.meta import StoreMeta
    from gnnflow.strategies.minibatch.sampler_process import SamplerProcess

SPLITS = ("train", "val", "test")
INPUT_BUFFERS = 4  #: batches' input-row buffers a rank keeps (a products-shaped pipeline holds 3 at once)


def already_done(mb: MiniBatch) -> MiniBatch:
    """A stage a sampler process has run already (sample, load)."""
    return mb


def whole_graph_part(graph_path: str) -> tuple[Any, np.ndarray, StoreMeta]:
    """One part holding the whole graph (single rank without a partition book)."""
    from gnnflow.data.store import open_store
    from gnnflow.partition.book import Part

    store = open_store(graph_path)
    n = store.num_nodes
    part = Part(part_id=0, inner_ids=np.arange(n, dtype=np.int64), halo_ids=np.zeros(0, dtype=np.int64),
                indptr=np.asarray(store.indptr), indices=np.asarray(store.indices), features=store.features,
                labels=np.asarray(store.labels), train_idx=np.asarray(store.train_idx),
                val_idx=np.asarray(store.val_idx), test_idx=np.asarray(store.test_idx))
    return part, np.zeros(n, dtype=np.int32), store.meta


class MiniBatchStrategy(Strategy):
    """Data-parallel mini-batch training loop over a partition book (see module docstring)."""

    name = "minibatch"
    distributed = True
    Options = MiniBatchOptions

    def __init__(self, cfg: Any, ctx: RankContext) -> None:
        super().__init__(cfg, ctx)
        opts = self.options
        self.use_pipeline = opts.pipeline
        self.capacities = opts.capacities
        self.pipeline_mib = opts.pipeline_mib  # bytes the batches in flight may hold, MiB
        self.replicate_structure = opts.replicate_structure
        self.two_level = opts.two_level
        self.cache_rows = 0  # set in prepare: feature_cache_rows, capped by the remote vertices
        self.presample_batches = opts.presample_batches
        self.use_ddp = opts.ddp
        self.samplers = opts.samplers
        #: where the sample stage draws (None: the host sampler)
        self.sample_device = sampling_device(opts, ctx.device, opts.samplers)
        self.device_cache: DeviceFeatureCache | None = None
        self.sampler_proc: SamplerProcess | None = None
        # GCN normalises by degrees: whole-graph degrees (cfg.gcn_degrees = graph) make each
        # target's output independent of the other targets in its batch, so P micro-batches sum
        # to the union batch (verify())
        self.degree_store: FeatureStore | None = None
        #: the process group whose rank i holds part i (None: all ranks; split groups have their own)
        self.part_group: Any = None
        self.pipeline: MiniBatchPipeline | None = None
        self._copier: DeviceCopier | None = None
        self.net: torch.nn.Module | None = None  # the plain GNN (self.model may be its DDP wrapper)
        self.sample_stats: CommStats | None = None
        self.load_stats: CommStats | None = None
        self.input_rows = BufferPool(INPUT_BUFFERS)  # the batches' input rows, reused (runtime.buffers)

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        if cfg.options.samplers == "process" and not cls.has_shared_stages():
            raise ConfigError(f"options.samplers=process: strategy {cfg.strategy!r} has its own sample or load "
                              "stage; sampler processes serve the data-parallel stages only")
        if cfg.options.samplers == "process" and device_cache_mib(cfg.options) > 0:
            raise ConfigError("options.device_cache_mib: a sampler process loads on the host; use "
                              "samplers=thread to keep hot rows on the rank's device")
        sampling_device(cfg.options, torch.device(cfg.device), cfg.options.samplers)  # refuses device + process

    #: whether a rank's shard holds its feature rows (P3 reads feature columns instead)
    loads_features: ClassVar[bool] = True
    #: a relational model's view of the graph (set by :class:`~.relational.RelationalMiniBatch`)
    schema: Any = None

    @classmethod
    def memory_terms(cls, run: RunSizes, r: int) -> tuple[dict[str, int], dict[str, int]]:
        """A rank's shard and ``node_part``, its batches (:meth:`batch_memory`), its hot-row cache
        and what evaluation adds; a sampler process with ``samplers=process``."""
        cfg, sizes, part, opts = run.cfg, run.sizes, run.parts[r], run.cfg.options
        n = sizes.num_nodes
        terms = {"baseline": BASE, "model": run.model, **shard_bytes(part, sizes, features=cls.loads_features),
                 "node_part": 4 * n}
        train, extra = cls.batch_memory(run, r)
        terms.update(extra)
        rows = feature_cache_rows(opts, run.f_dim, n - part.inner)
        if rows:  # the cached rows, their sorted ids and the vertex -> cache row map
            terms["feature_cache"] = int(rows * (4 * run.f_dim + 8) + 4 * n)
        terms["batch"] = int(train)
        ev = evaluation_bytes(part, cfg, run.classes, run.f_dim)
        if ev > train:  # evaluation runs after training's batches are gone
            terms["evaluation"] = int(ev - train)
        helper = {}
        if opts.samplers == "process":
            helper["sampler"] = BASE + int(terms["shard_structure"] + opts.pipeline_mib * MIB / 8)
        return terms, helper

    @classmethod
    def batch_memory(cls, run: RunSizes, r: int) -> tuple[float, dict[str, int]]:
        """Bytes of the batches a rank holds in training (in flight and being trained on), and
        terms of its own (a subclass's)."""
        return pipeline_bytes(run.batch_rows, run.cfg.options) + run.acts, {}

    @classmethod
    def has_shared_stages(cls) -> bool:
        """True when this strategy samples and loads with the base stages (what a sampler process runs)."""
        return cls.sample_stage is MiniBatchStrategy.sample_stage and cls.load_stage is MiniBatchStrategy.load_stage

    # ---------------------------------------------------------------- preparation
    def prepare(self) -> None:
        self.prepare_stages()
        self.build_model()
        if self.samplers == "process" and self.use_pipeline:
            self.sampler_proc = self.start_sampler_process()

    def prepare_stages(self) -> None:
        """Everything the pipeline's stages need (part, targets, sampler, feature store, cache);
        no model.  A sampler process (``samplers=process``) runs exactly this on its side."""
        rank, size = world()
        cfg = self.cfg
        if cfg.partition:
            from gnnflow.partition.book import PartitionBook

            self.book: Any = PartitionBook.open(cfg.partition)
            if self.book.num_parts != size:
                raise ConfigError(f"{cfg.partition}: {self.book.num_parts} parts for {size} workers; "
                                  "partition into as many parts as --workers")
            self.part = self.book.load_part(rank)
            self.node_part = self.book.node_part
            self.meta = self.book.meta
            self.graph_path = str(self.book.graph_path)
        elif size == 1:
            self.book = None
            self.part, self.node_part, self.meta = whole_graph_part(cfg.graph)
            self.graph_path = cfg.graph
        else:
            raise ConfigError(f"strategy {cfg.strategy}: --workers {size} needs --partition (a partition book)")
        if cfg.adds_self_loops:  # the model's graph is A + I (cfg.self_loops), as in every strategy
            self.part = self.part.with_self_loops()
        self.num_classes = int(self.meta.num_classes)
        self.part.check_labels(self.num_classes)  # a bad label is one line now, not an IndexError later
        self.in_dim = int(self.part.features.shape[1]) if self.part.features is not None else 0
        self.target_ids, self.target_labels = self.local_targets()
        if self.own_targets() and self.target_ids.size and \
                (np.asarray(self.node_part[self.target_ids]) != self.part.part_id).any():
            raise ConfigError(f"rank {rank}: own_targets() holds but local_targets() gave vertices of other "
                              "parts; the sampler would skip the exchange their first hop needs")
        self.num_batches, self.target_counts = self._plan_batches(len(self.target_ids))
        self.groups = stage_groups(("sample", "load"))
        self.sample_stats = CommStats(size)
        self.load_stats = CommStats(size)
        self.sampler = self.build_sampler(self.groups["sample"])
        self.feature_store = self.build_feature_store(self.groups["load"])
        if cfg.graph_degrees:
            self.prepare_degrees()
        if self.feature_store is not None and size > 1:
            self.cache_rows = feature_cache_rows(self.options, self.in_dim,
                                                 int(self.node_part.shape[0]) - self.part.num_inner)
        device_mib = device_cache_mib(self.options) if self.feature_store is not None else 0.0
        if self.cache_rows > 0 or device_mib > 0:  # the same on every rank: the presampling is collective
            self._build_caches(device_mib)

    def local_targets(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted training vertex ids this rank draws targets from, with their labels."""
        part = self.part
        ids = np.asarray(part.train_idx, dtype=np.int64)
        labels = np.asarray(part.labels)[part.global_to_local(ids)]
        if self.own_targets():
            return ids, labels.astype(np.int64)
        # METIS only (Fig. 10 baseline): pool the machine's training vertices, split them randomly
        rank, size = world()
        machine = self.book.node_machine
        my_machine = int(machine[part.inner_ids[0]]) if part.num_inner else -1
        shared: list[Any] = [None] * size
        dist.all_gather_object(shared, (my_machine, ids, labels))
        peers = [r for r in range(size) if shared[r][0] == my_machine]
        pool = np.concatenate([shared[r][1] for r in peers])
        pool_labels = np.concatenate([shared[r][2] for r in peers])
        perm = np.random.default_rng([self.cfg.seed, max(my_machine, 0)]).permutation(pool.shape[0])
        mine = np.array_split(perm, len(peers))[peers.index(rank)]
        order = np.argsort(pool[mine])
        return pool[mine][order], pool_labels[mine][order].astype(np.int64)

    def _plan_batches(self, n_local: int) -> tuple[int, list[int]]:
        _, size = world()
        counts = torch.tensor([n_local], dtype=torch.int64)
        if size > 1:
            allc = [torch.zeros_like(counts) for _ in range(size)]
            all_gather(allc, counts, HOST)
            target_counts = [int(c.item()) for c in allc]
        else:
            target_counts = [n_local]
        nb = max(1, math.ceil(sum(target_counts) / self.cfg.batch_size))  # batch_size: the global mini-batch
        return nb, target_counts

    def global_batch_sizes(self) -> np.ndarray:
        """Global batch size of each iteration of an epoch (sum over ranks of array_split sizes)."""
        nb = self.num_batches
        total = np.zeros(nb, dtype=np.int64)
        for c in self.target_counts:
            total += np.array([c // nb + (1 if j < c % nb else 0) for j in range(nb)], dtype=np.int64)
        return total

    def build_sampler(self, group: Any) -> Any:
        return self.new_sampler(self.cfg.seed, group, self.sample_stats)

    def new_sampler(self, seed: int, group: Any, stats: CommStats) -> Any:
        """A sampler of this rank's part drawing with ``seed``: on the host, or on
        :attr:`sample_device` (the same draws)."""
        kw = dict(replicate_structure=self.replicate_structure, graph_path=self.graph_path, group=group,
                  stats=stats, own_targets=self.own_targets())
        if self.sample_device is not None:
            return make_device_sampler(self.part, self.node_part, self.cfg.fanouts, seed, self.sample_device, **kw)
        return make_sampler(self.part, self.node_part, self.cfg.fanouts, seed, **kw)

    def own_targets(self) -> bool:
        """True when every rank's targets are its own part's training vertices (:meth:`local_targets`
        pools them per machine only for a METIS-only book): the sampler's first hop then needs no
        exchange."""
        return self.two_level or self.book is None or self.book.node_machine is None

    def start_sampler_process(self) -> SamplerProcess:
        """Spawn this rank's sampler process (``samplers=process``; collective with several ranks)."""
        from gnnflow.strategies.minibatch.sampler_process import start_sampler_process

        return start_sampler_process(self)

    def build_feature_store(self, group: Any) -> FeatureStore | None:
        return FeatureStore(self.part, self.node_part, stats=self.load_stats, group=group)

    def build_model(self) -> None:
        from gnnflow.nn import build_model_from_config
        from gnnflow.strategies.common import make_optimizer, seed_everything

        cfg = self.cfg
        seed_everything(cfg.seed)
        net = build_model_from_config(cfg, self.in_dim, self.num_classes, schema=self.schema).to(self.ctx.device)
        _, size = world()
        if size > 1:  # identical initial weights everywhere, whatever the local RNG did
            for p in net.parameters():
                broadcast(p.data, 0, COMPUTE)
        self.net = net
        if self.use_ddp and size > 1:
            self.model = torch.nn.parallel.DistributedDataParallel(net)
        else:
            self.model = net
        self.optimizer = make_optimizer(net, cfg)

    def _build_caches(self, device_mib: float) -> None:
        """Presample a few local batches; cache the most requested remote feature rows on the host
        (``cache_rows``) and the most requested rows of all on the device (``device_mib``).
        Collective."""
        sampler = self.new_sampler(self.cfg.seed + 7919, self.groups["sample"], CommStats(world()[1]))
        batches = [mb.targets for mb, _ in zip(self.schedule(0, 1), range(self.presample_batches), strict=False)]
        ids, counts = presample_input_counts(sampler, batches)
        assert self.feature_store is not None
        if self.cache_rows > 0:
            self.cached = self.feature_store.build_cache(ids, counts, self.cache_rows)
        if device_mib > 0:
            self.device_cache = DeviceFeatureCache.build(ids, counts, device_mib, self.in_dim, self.ctx.device,
                                                         self.feature_store.fetch)

    # ---------------------------------------------------------------- pipeline stages
    def schedule(self, first_epoch: int, epochs: int, skip: int = 0) -> Iterator[MiniBatch]:
        """Target batches of epochs ``first_epoch .. first_epoch+epochs-1`` (the same count on every
        rank), without the first ``skip`` batches of the first epoch (trained before a checkpoint)."""
        rank, _ = world()
        sizes = self.global_batch_sizes()
        for epoch in range(first_epoch, first_epoch + epochs):
            rng = np.random.default_rng([self.cfg.seed, rank, epoch])
            perm = rng.permutation(self.target_ids.shape[0])
            for j, chunk in enumerate(np.array_split(perm, self.num_batches)):
                if epoch == first_epoch and j < skip:
                    continue
                yield MiniBatch(epoch=epoch, index=j, targets=torch.from_numpy(self.target_ids[chunk]),
                                labels=torch.from_numpy(self.target_labels[chunk]),
                                meta={"global_batch": int(sizes[j])})

    def sample_stage(self, mb: MiniBatch) -> MiniBatch:
        return sample_minibatch(self.sampler, mb, self.sample_stats)

    def load_stage(self, mb: MiniBatch) -> MiniBatch:
        assert self.feature_store is not None and mb.blocks is not None
        before = stats_totals(self.load_stats)
        ids = mb.blocks[0].src_ids
        store = self.feature_store
        if self.device_cache is not None:  # hot rows from the device, the rest from the store
            mb.inputs = self.device_cache.fetch(ids, lambda missing: store.fetch(missing, mb.counters), mb.counters)
        else:  # a sampler process passes its hand-over slot as the destination of the rows
            out = mb.meta.pop("inputs_out", None)
            if out is None and isinstance(store, FeatureStore):
                out = self.input_rows.take(int(ids.shape[0]), store.row_shape)
            mb.inputs = store.fetch(ids.cpu(), mb.counters, out=out)
        self.attach_degrees(mb)
        add_stats_delta(mb, self.load_stats, before, "load")
        return mb

    def prepare_degrees(self) -> None:
        """What :meth:`attach_degrees` needs (``cfg.gcn_degrees = graph``): a store of the whole-graph
        degrees of this rank's vertices, served to peers like feature rows.  Collective."""
        self.degree_store = FeatureStore(self.part, self.node_part, local_rows=self.global_degrees(),
                                         stats=self.load_stats, group=self.groups["load"])

    def attach_degrees(self, mb: MiniBatch) -> None:
        """Whole-graph degrees on the batch's blocks (``cfg.gcn_degrees = graph``; collective then)."""
        if self.degree_store is None:
            return
        assert mb.blocks is not None
        # every block's vertices are a prefix of blocks[0].src_ids (dst first, DGL layout)
        deg = self.degree_store.fetch(mb.blocks[0].src_ids.cpu()).to(mb.blocks[0].device)
        for b in mb.blocks:
            b.src_deg, b.dst_deg = deg[: b.num_src, 1], deg[: b.num_dst, 0]

    def copy_inputs(self, mb: MiniBatch) -> None:
        """Input rows and labels to the device through the pinned buffers and copy stream of
        :class:`~gnnflow.strategies.minibatch.pipeline.DeviceCopier` (one per strategy, made on first use)."""
        if self._copier is None:
            self._copier = DeviceCopier(self.ctx.device)
        assert mb.inputs is not None
        moved = self._copier({"inputs": mb.inputs} | ({} if mb.labels is None else {"labels": mb.labels}))
        mb.inputs, mb.labels = moved["inputs"], moved.get("labels")

    def device_stage(self, mb: MiniBatch) -> MiniBatch:
        dev = self.ctx.device
        if dev.type != "cpu":
            assert mb.blocks is not None and mb.inputs is not None
            mb.blocks = [b.to(dev) for b in mb.blocks]  # ids and CSR: small, on the default stream
            self.copy_inputs(mb)
        return mb

    def train_batch_counting(self, mb: MiniBatch, rec: Recorder, stats: CommStats, stage: str) -> float:
        """:meth:`train_batch`, also recording the bytes ``stats`` counted during it (exchanges
        inside forward/backward: P3's push/pull, split parallelism's shuffles) under ``stage``."""
        before = stats_totals(stats)
        loss = MiniBatchStrategy.train_batch(self, mb, rec)
        probe = MiniBatch(epoch=mb.epoch, index=mb.index, targets=mb.targets)
        add_stats_delta(probe, stats, before, stage)
        for key in ("bytes_sent", "bytes_received", f"{stage}_bytes_received"):
            rec.count(key, probe.counters.get(key, 0.0))
        return loss

    def make_pipeline(self, first_epoch: int, epochs: int, asynchronous: bool | None = None,
                      skip: int = 0) -> MiniBatchPipeline:
        """The stages over the schedule of ``epochs`` epochs (the first ``skip`` batches left out);
        ``asynchronous`` defaults to ``pipeline``.

        With a sampler process (``samplers=process``) an asynchronous pipeline's
        sampling thread only hands targets to the process and takes back its
        blocks and input rows.
        """
        asynchronous = self.use_pipeline if asynchronous is None else asynchronous
        schedule: Any = self.schedule(first_epoch, epochs, skip)
        sample, load = self.sample_stage, self.load_stage
        if asynchronous and self.sampler_proc is not None:
            schedule, sample, load = self.sampler_proc.map(schedule), already_done, already_done
        to_device = self.device_stage if self.ctx.device.type != "cpu" else None  # nothing to copy on a CPU
        return MiniBatchPipeline(schedule, sample, load, to_device, asynchronous=asynchronous,
                                 capacities=self.capacities, max_bytes=self.pipeline_mib << 20)

    # ---------------------------------------------------------------- training
    def compute_loss(self, mb: MiniBatch, rec: Recorder) -> torch.Tensor:
        """This rank's share of the global mean loss: local CE sum / global batch size."""
        assert self.model is not None and mb.blocks is not None and mb.labels is not None
        logits = self.model(mb.blocks, mb.inputs)
        mb.meta["logits"] = logits.detach()
        loss = F.cross_entropy(logits, mb.labels, reduction="sum") / max(1, mb.meta["global_batch"])
        mb.meta["loss"] = loss.detach()  # this rank's share of the global mean loss
        if self.use_ddp and world()[1] > 1:
            loss = loss * world()[1]  # DDP averages the gradients over ranks; we want their sum
        return loss

    def reduce_gradients(self, rec: Recorder) -> None:
        if not (self.use_ddp and world()[1] > 1):
            assert self.net is not None
            all_reduce_gradients(self.net, average=False)

    def train_batch(self, mb: MiniBatch, rec: Recorder) -> float:
        """forward/backward -> gradient all-reduce -> step; returns the local mean CE."""
        assert self.optimizer is not None and self.model is not None
        if not (self.model.training and self.net is not None and self.net.training):
            self.model.train()  # it walks every submodule: after an evaluation, not per batch
        cpu = time.thread_time()
        with rec.timer("forward_backward"):
            self.optimizer.zero_grad(set_to_none=False)
            loss = self.compute_loss(mb, rec)
            if self.use_ddp and world()[1] > 1:
                with rec.timer("allreduce"):  # DDP overlaps its all-reduce with backward
                    loss.backward()
            else:
                loss.backward()
        rec.add_time("forward_backward_cpu", time.thread_time() - cpu)
        with rec.timer("allreduce"):
            self.reduce_gradients(rec)
        with rec.timer("step"):
            self.optimizer.step()
        n = max(1, int(mb.targets.shape[0]))
        scale = mb.meta["global_batch"] / n / (world()[1] if self.use_ddp and world()[1] > 1 else 1)
        return float(loss.detach()) * scale

    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        first, losses = self.take_start()
        if self.pipeline is None:
            # one schedule from this epoch to the last: the pipeline runs across epoch boundaries
            self.pipeline = self.make_pipeline(epoch, max(1, self.cfg.epochs - epoch), skip=first).start()
        batches: Any = range(first, self.num_batches)
        if world()[0] == 0:  # long epochs log their progress from rank 0
            batches = ticking(batches, f"{self.cfg.strategy} epoch {epoch}: batch", self.num_batches - first)
        for index in batches:
            try:
                mb = self.pipeline.get()
            except StopIteration:  # more epochs than scheduled (driver ran past cfg.epochs)
                self.pipeline.close()
                self.pipeline = self.make_pipeline(epoch, 1).start()
                mb = self.pipeline.get()
            if mb.epoch != epoch:
                raise ConfigError(f"pipeline delivered a batch of epoch {mb.epoch} during epoch {epoch}")
            for name in ("sample", "load", "wait", "sample_cpu", "load_cpu"):  # seconds, CPU seconds
                rec.add_time(name, mb.times.get(name, 0.0))
            rec.add_time("device_copy", mb.times.get("device", 0.0))
            for k, v in mb.counters.items():
                rec.count(k, v)
            rec.count("iterations")
            losses.append(self.train_batch(mb, rec))
            self.batch_done(epoch, index, rec, losses)
        if epoch + 1 >= self.cfg.epochs and self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
        self.input_rows.release()  # nothing kept through the evaluation but the batches in flight
        rec.extra["num_batches"] = float(self.num_batches)
        rec.extra["local_targets"] = float(self.target_ids.shape[0])
        rec.extra["pipeline"] = float(self.use_pipeline)
        if getattr(self, "cached", None) is not None:
            rec.extra["cache_rows"] = float(self.cached)
            # the rows received once, at setup, to fill it (no epoch's remote_bytes counts them)
            rec.extra["setup_bytes"] = float(self.cached * 4 * self.in_dim)
        record_hit_rate(rec, self.device_cache)
        return float(np.mean(losses)) if losses else float("nan")

    # ---------------------------------------------------------------- evaluation
    def local_degrees(self) -> torch.Tensor:
        """``[num_local, 2]`` float32 whole-graph (in, out)-degrees of the part's local vertices
        (inner, then halo; a halo vertex's in-degree is not known here and is 0).  Collective:
        a source's out-degree is spread over the parts that hold its out-edges, so the halo
        vertices' totals come from their owners (one exchange, once)."""
        from gnnflow.strategies.minibatch.inference import local_degrees

        if getattr(self, "_local_degrees", None) is None:
            self._local_degrees = local_degrees(self.part, self.node_part, self.global_degrees(), self.part_group)
        return self._local_degrees

    def global_degrees(self) -> torch.Tensor:
        """``[num_inner, 2]`` float32: whole-graph in- and out-degree of this rank's vertices.  Collective.

        Counted from the parts (:func:`gnnflow.strategies.minibatch.inference.inner_degrees`).
        """
        from gnnflow.strategies.minibatch.inference import inner_degrees

        if getattr(self, "_global_degrees", None) is None:
            self._global_degrees = inner_degrees(self.part, self.node_part, self.part_group)
        return self._global_degrees

    def inference(self) -> torch.Tensor:
        """Logits of this rank's inner vertices by exact layer-wise inference over the parts, chunk
        by chunk (:func:`gnnflow.strategies.minibatch.inference.layerwise_inference`; collective)."""
        from gnnflow.strategies.minibatch.inference import layerwise_inference

        assert self.net is not None
        # GCN normalises by whole-graph degrees in evaluation, as single-process inference does
        degrees = self.local_degrees() if self.cfg.model == "gcn" else None
        return layerwise_inference(self.net, self.part, self.node_part, self.ctx.device, degrees,
                                   group=self.part_group)

    def evaluate(self) -> dict[str, float]:
        """Accuracies and losses per split over every rank's inner vertices (collective)."""
        from gnnflow.strategies.metrics import reduce_sums, split_metrics, split_sums_at

        logits = self.inference().cpu()
        labels = torch.from_numpy(np.asarray(self.part.labels, dtype=np.int64))
        positions = {split: torch.from_numpy(self.part.global_to_local(
            np.asarray(getattr(self.part, f"{split}_idx"), dtype=np.int64))) for split in SPLITS}
        return split_metrics(reduce_sums(split_sums_at(logits, labels, positions)))

    def helper_pids(self) -> dict[str, int]:
        return {"sampler": int(self.sampler_proc.proc.pid)} if self.sampler_proc is not None else {}

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
        if self.sampler_proc is not None:
            self.sampler_proc.close()
            self.sampler_proc = None
