"""Split parallelism (GSplit §3–§5; hybrid across hosts §6.4).

Every iteration the split group trains **one** mini-batch together instead of
one micro-batch per rank:

1. targets are drawn uniformly from all training vertices by a generator seeded
   identically on every rank; each target goes to the rank owning it in the
   offline partition (online splitting is a lookup, GSplit §4);
2. :func:`~gnnflow.strategies.split.sampling.sp_sample` (Algorithm 1) samples the
   mini-batch cooperatively, layer by layer, and builds the shuffle index; each
   rank draws from the stream of (seed, rank, epoch, batch), as every mini-batch
   sampler here does, so a resumed run samples what an uninterrupted one does;
3. each rank loads input features only for the vertices of its own split
   (features partitioned by the same map: no feature is loaded twice);
4. :func:`sp_forward` (Algorithm 2): at each layer one all-to-all sends the
   activations peers need (an autograd function: backward sends the gradients
   back along the same paths), then the unchanged single-process layer
   (``GNN.layer_step``) computes this rank's destinations.  No model-specific
   code: GraphSAGE, GCN and GAT run as they are;
5. the loss of each rank is its targets' cross-entropy summed and divided by
   the global batch size, so the sum of the ranks' gradients (one all-reduce)
   is exactly the single-process gradient of the whole mini-batch.

``--opt split_group_size=k`` (GSplit §6.4): groups of ``k`` consecutive ranks
are split-parallel inside and data-parallel across groups — each group takes
its own slice of the iteration's targets and all ranks all-reduce gradients.
The partition book then has ``k`` parts and every group uses the same map.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnnflow.comm.collectives import (
    CommStats,
    all_gather,
    all_reduce,
    all_to_all_rows,
    alltoallv,
    world,
)
from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError
from gnnflow.options import option
from gnnflow.results.schema import Recorder
from gnnflow.runtime.devices import COMPUTE, HOST
from gnnflow.sampling import as_long_tensor
from gnnflow.strategies.memory import SPLIT_SHARE, RunSizes, activation_bytes, sampled_layers
from gnnflow.strategies.minibatch.base import SPLITS, MiniBatchStrategy, whole_graph_part
from gnnflow.strategies.minibatch.options import MiniBatchOptions
from gnnflow.strategies.minibatch.pipeline import (
    MiniBatch,
    add_stats_delta,
    stage_groups,
    stats_totals,
)
from gnnflow.strategies.split.sampling import SplitGraph, SplitSample, SplitSampler, sp_sample

Shuffle = Callable[..., torch.Tensor]


def sp_forward(model: Any, sample: SplitSample, feat: torch.Tensor, stats: CommStats | None = None,
               group: Any = None, shuffle: Shuffle = all_to_all_rows) -> torch.Tensor:
    """GSplit Algorithm 2: logits of this rank's targets; collective over the split group.

    ``feat`` holds the input features of ``sample.input_ids`` (this rank's split
    of the bottom layer).  At layer ``l`` the rows of this rank's local frontier
    that peers need are shuffled (``shuffle_idx[l]``), the mixed frontier is
    rebuilt from local and received rows, and ``model.layer_step`` computes the
    local destinations.  ``shuffle`` is the differentiable exchange; it is a
    parameter only so that tests can show a non-differentiable one breaks the
    gradients.
    """
    h = feat
    for layer, (block, sh) in enumerate(zip(sample.blocks, sample.shuffle, strict=True)):
        received = shuffle(h, sh.send_index, sh.recv_counts, stats, group)
        mixed = torch.cat([h, received], 0)[sh.gather_index]
        h = model.layer_step(layer, block, mixed)
    return h


def detached_shuffle(x: torch.Tensor, send_index: list[torch.Tensor], recv_counts: list[int],
                     stats: CommStats | None = None, group: Any = None) -> torch.Tensor:
    """The forward exchange without its backward (gradients of remote rows are dropped).

    Only for tests that check equivalence fails when the backward shuffle is skipped.
    """
    parts = alltoallv([x.detach()[i] for i in send_index], stats, recv_counts, group, kind=COMPUTE)
    return torch.cat(parts, 0)


@dataclass(frozen=True)
class SplitOptions(MiniBatchOptions):
    """Split parallelism's options: those of the mini-batch strategies, and the group size."""

    split_group_size: int | None = option(None, "k ranks per split group, data-parallel across groups "
                                          "(GSplit §6.4; default: all ranks)", minimum=1,
                                          flag="--split-group-size", flag_value=int)


def split_group_size(cfg: TrainConfig, world_size: int) -> int:
    """The ``split_group_size`` option (default: all ranks), validated against the ranks."""
    k = SplitOptions.parse(cfg.options, "split").split_group_size or world_size
    if k < 1 or world_size % k:
        raise ConfigError(
            f"options.split_group_size: {k} must be >= 1 and divide the number of workers ({world_size})"
        )
    return k


def make_split_groups(rank: int, world_size: int, k: int) -> tuple[Any, int, int, int]:
    """(group, group_index, rank_in_group, num_groups) for groups of ``k`` consecutive ranks.

    ``dist.new_group`` is collective over all ranks, so every rank creates every group.
    """
    num_groups = world_size // k
    if num_groups == 1:
        return None, 0, rank, 1
    mine = None
    for g in range(num_groups):
        grp = dist.new_group(ranks=list(range(g * k, (g + 1) * k)))
        if g == rank // k:
            mine = grp
    return mine, rank // k, rank % k, num_groups


def group_targets(batch: torch.Tensor, node_part: torch.Tensor, group_index: int, num_groups: int,
                  rank_in_group: int) -> torch.Tensor:
    """This rank's targets: its group's slice of the batch, then the vertices its split owns."""
    chunk = torch.tensor_split(batch, num_groups)[group_index]
    return chunk[node_part[chunk] == rank_in_group]


class SplitParallel(MiniBatchStrategy):
    """GSplit split-parallel mini-batch training on one rank (see module docstring).

    Reuses the shared mini-batch loop (:class:`~gnnflow.strategies.minibatch.base.MiniBatchStrategy`:
    pipeline, model replication, gradient all-reduce, partitioned evaluation) and
    replaces its stages: the schedule (one global mini-batch per iteration), the
    sample stage (:func:`sp_sample`), the load stage (own split only, no remote
    fetch) and the loss (:func:`sp_forward`).
    """

    name = "split"
    distributed = True
    Options = SplitOptions
    exact = True

    @classmethod
    def book_parts(cls, cfg: Any) -> int | None:
        """A split group's ranks share one book: it has ``split_group_size`` parts."""
        return split_group_size(cfg, cfg.workers) if cfg.partition else None

    @classmethod
    def batch_memory(cls, run: RunSizes, r: int) -> tuple[float, dict[str, int]]:
        """One global mini-batch split across the group: a rank loads and computes its owned share
        (about ``SPLIT_SHARE / P``) of every level; its int64 owner map and the training ids."""
        cfg, sizes = run.cfg, run.sizes
        share = min(1.0, SPLIT_SHARE / run.workers)
        levels = [x * share for x in sampled_layers(float(cfg.batch_size), list(cfg.fanouts), sizes.num_nodes,
                                                     sizes.num_edges)]
        rows = 4.0 * levels[0] * run.f_dim
        owners = 4 * sizes.num_nodes + 8 * sizes.num_nodes + 8 * sizes.num_train
        return rows + activation_bytes(levels, run.dims, cfg.model), {"node_part": owners}

    # ------------------------------------------------------------------ setup
    def prepare(self) -> None:
        from gnnflow.data.store import load_split
        from gnnflow.partition.book import PartitionBook

        rank, size = world()
        cfg = self.cfg
        k = split_group_size(cfg, size)
        if cfg.partition:
            self.book: Any = PartitionBook.open(cfg.partition)
            if self.book.num_parts != k:
                raise ConfigError(
                    f"partition: {cfg.partition} has {self.book.num_parts} parts but a split group has {k} ranks; "
                    f"partition with --parts {k} (or set --opt split_group_size={self.book.num_parts})"
                )
            self.node_part = self.book.node_part
            self.meta = self.book.meta
            self.graph_path = str(self.book.graph_path)
        elif k == 1:
            self.book = None
            _, self.node_part, self.meta = whole_graph_part(cfg.graph)
            self.graph_path = cfg.graph
        else:
            raise ConfigError(f"strategy split: --workers {size} needs --partition (a partition book with "
                              f"{k} parts)")
        self.k = k
        self.use_ddp = False  # gradients flow through the shuffles, not through DDP hooks
        self.group_index, self.group_rank, self.num_groups = rank // k, rank % k, size // k
        self.part = self.book.load_part(self.group_rank) if self.book is not None else whole_graph_part(cfg.graph)[0]
        if cfg.adds_self_loops:  # the model's graph is A + I, as in every strategy
            self.part = self.part.with_self_loops()
        self.num_classes = int(self.meta.num_classes)
        self.part.check_labels(self.num_classes)
        self.in_dim = int(self.part.features.shape[1]) if self.part.features is not None else 0
        self.graph = SplitGraph.from_part(self.part, self.node_part, k)
        self.node_part_t = as_long_tensor(self.node_part)
        self.train_ids = as_long_tensor(load_split(self.graph_path, "train_idx"))
        self.target_ids = np.asarray(self.part.train_idx, dtype=np.int64)  # the targets this rank can own
        # batch_size is the global mini-batch: ceil(N / batch_size) iterations, as data parallelism
        # and single-process training take on the same training set
        _, self.target_counts = self._plan_batches(len(self.target_ids))
        self.num_batches = max(1, math.ceil(len(self.train_ids) / cfg.batch_size))
        # the sample stage may run on a pipeline thread: it gets its own groups
        if self.num_groups == 1:
            self.groups = stage_groups(("sample",))
            self.shuffle_group = None
        else:
            self.groups = {"sample": make_split_groups(rank, size, k)[0]}
            self.shuffle_group = make_split_groups(rank, size, k)[0]
        self.sample_stats = CommStats(k)
        self.shuffle_stats = CommStats(k)
        self.load_stats = None
        # its stream is set per mini-batch (sample_stage): nothing to checkpoint
        self.part_group = self.shuffle_group  # rank i of a split group holds part i
        # GCN on whole-graph degrees (cfg.gcn_degrees): owners send them with the sampled ids
        self.graph.degrees = self.global_degrees() if cfg.graph_degrees else None
        self.sampler = SplitSampler(self.graph, cfg.fanouts, seed=cfg.seed, group=self.groups["sample"])
        self.feature_store = None
        self.split_counts: list[tuple[list[int], list[int]]] = []
        self._in_epoch = self._resumed_in_epoch = False  # a mid-epoch checkpoint holds split_counts
        self.build_model()

    # --------------------------------------------------------------- stages
    def schedule(self, first_epoch: int, epochs: int, skip: int = 0) -> Iterator[MiniBatch]:
        """One global mini-batch per iteration, drawn identically on every rank (GSplit §3);
        the first ``skip`` of the first epoch left out (trained before a checkpoint)."""
        from gnnflow.strategies.common import batch_generator

        n = self.train_ids.numel()
        for epoch in range(first_epoch, first_epoch + epochs):
            gen = batch_generator(self.cfg.seed * 1_000_003 + epoch)
            perm = torch.randperm(n, generator=gen)
            for j, chunk in enumerate(torch.tensor_split(perm, self.num_batches)):
                if epoch == first_epoch and j < skip:
                    continue
                batch = self.train_ids[chunk]
                local = group_targets(batch, self.node_part_t, self.group_index, self.num_groups, self.group_rank)
                yield MiniBatch(epoch=epoch, index=j, targets=local, labels=self.graph.load_labels(local),
                                meta={"global_batch": int(batch.numel())})

    def sample_stage(self, mb: MiniBatch) -> MiniBatch:
        from gnnflow.partition.metrics import split_metrics

        before = stats_totals(self.sample_stats)
        sample = sp_sample(self.sampler.at(mb.epoch, mb.index), mb.targets, self.sample_stats)
        mb.blocks = sample.blocks
        mb.meta["split"] = sample
        mb.counters["sampled_edges"] = float(sample.num_edges)
        mb.counters["input_vertices"] = float(sample.input_ids.numel())
        m = split_metrics(sample.blocks, self.graph.node_part, self.k)
        mb.meta["split_edges"] = m["edges"]
        mb.meta["split_cross"] = [round(c * e) for c, e in zip(m["cross_fraction"], m["edges"], strict=True)]
        add_stats_delta(mb, self.sample_stats, before, "sample")
        return mb

    def load_stage(self, mb: MiniBatch) -> MiniBatch:
        """Input features of this rank's split only: every row is local, none loaded twice."""
        sample = mb.meta["split"]
        mb.inputs = self.graph.load_features(sample.input_ids)
        mb.counters["features_loaded"] = mb.counters.get("features_loaded", 0) + float(sample.input_ids.numel())
        return mb

    def device_stage(self, mb: MiniBatch) -> MiniBatch:
        if self.ctx.device.type != "cpu":
            mb.meta["split"] = mb.meta["split"].to(self.ctx.device)
            mb.blocks = mb.meta["split"].blocks
        return super().device_stage(mb)

    def compute_loss(self, mb: MiniBatch, rec: Recorder) -> torch.Tensor:
        assert self.net is not None and mb.blocks is not None and mb.labels is not None
        split = mb.meta["split"]
        sample = SplitSample(list(mb.blocks), split.frontiers, split.shuffle)
        logits = sp_forward(self.net, sample, mb.inputs, self.shuffle_stats, self.shuffle_group)
        mb.meta["logits"] = logits.detach()
        self.split_counts.append((mb.meta["split_edges"], mb.meta["split_cross"]))
        rec.count("shuffled_rows", sum(sh.rows_received for sh in split.shuffle))
        return F.cross_entropy(logits, mb.labels, reduction="sum") / max(1, mb.meta["global_batch"])

    def train_batch(self, mb: MiniBatch, rec: Recorder) -> float:
        return self.train_batch_counting(mb, rec, self.shuffle_stats, "shuffle")  # forward + backward shuffles

    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        if not self._resumed_in_epoch:  # else a mid-epoch checkpoint held the epoch's counts so far
            self.split_counts = []
        self._resumed_in_epoch, self._in_epoch = False, True
        loss = super().run_epoch(epoch, rec)
        self._in_epoch = False
        rec.extra.update(self.group_split_metrics())
        rec.extra["split_group_size"] = float(self.k)
        return loss

    def state_dict(self) -> dict[str, Any]:
        """Model and optimizer; inside an epoch (a mid-epoch checkpoint) also the epoch's split
        counts so far, so the resumed epoch's Fig. 5 figures equal an uninterrupted one's."""
        state = super().state_dict()
        if self._in_epoch:
            state["split_counts"] = json.dumps(self.split_counts, default=int)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._resumed_in_epoch = "split_counts" in state
        if self._resumed_in_epoch:
            self.split_counts = [tuple(c) for c in json.loads(state["split_counts"])]

    def group_split_metrics(self) -> dict[str, float]:
        """GSplit Fig. 5 inside training: per-layer load imbalance and cross-split edge fraction.

        One all-gather per epoch (in the split group) of this rank's
        per-iteration, per-layer edge and cross-edge counts.
        """
        from gnnflow.strategies.split.redundancy import combine_split_counts

        edges = [e for e, _ in self.split_counts]
        cross = [c for _, c in self.split_counts]
        counts = torch.tensor([edges, cross], dtype=torch.float64).reshape(2, len(edges), -1)
        _, size = world(self.shuffle_group)
        if size > 1:
            gathered = [torch.empty_like(counts) for _ in range(size)]
            all_gather(gathered, counts, HOST, group=self.shuffle_group)
            stacked = torch.stack(gathered)
        else:
            stacked = counts.unsqueeze(0)
        return combine_split_counts(stacked[:, 0].numpy(), stacked[:, 1].numpy())

    def evaluate(self) -> dict[str, float]:
        """Exact accuracies, the same on every rank.

        One split group: the shared layer-wise inference over the partitions.
        Several groups (whose ranks hold the same parts): each group runs
        split-parallel inference with full neighbourhoods (:func:`sp_sample`
        with fanout -1, then :func:`sp_forward`), in chunks of targets.
        """
        if self.num_groups == 1:
            return super().evaluate()
        return self.split_evaluate()

    @torch.no_grad()
    def split_evaluate(self, chunk: int = 8192) -> dict[str, float]:
        from gnnflow.strategies.metrics import evaluate_logits

        assert self.net is not None
        net = self.net
        was = net.training
        net.eval()
        full = SplitSampler(self.graph, [-1] * self.cfg.num_layers, seed=0, group=self.shuffle_group)
        ids = {s: np.asarray(getattr(self.part, f"{s}_idx"), dtype=np.int64) for s in SPLITS}
        every = np.concatenate(list(ids.values()))
        rounds = torch.tensor([math.ceil(every.shape[0] / chunk)], dtype=torch.int64)
        all_reduce(rounds, HOST, op=dist.ReduceOp.MAX, group=self.shuffle_group)
        logits = []
        for j in range(int(rounds)):
            mine = torch.from_numpy(every[j * chunk:(j + 1) * chunk])
            sample = sp_sample(full, mine)
            x = self.graph.load_features(sample.input_ids).to(self.ctx.device)
            sample = sample.to(self.ctx.device)
            logits.append(sp_forward(net, sample, x, group=self.shuffle_group).cpu())
        net.train(was)
        every_logits = torch.cat(logits)[: every.shape[0]]
        labels = self.graph.load_labels(torch.from_numpy(every))
        bounds = np.cumsum([0] + [ids[s].shape[0] for s in SPLITS])
        per_split = {s: (every_logits[bounds[i]:bounds[i + 1]], labels[bounds[i]:bounds[i + 1]])
                     for i, s in enumerate(SPLITS)}
        return evaluate_logits(per_split, group=self.shuffle_group)
