"""Push-pull parallelism, GSplit's P3* baseline (GSplit §2 Fig. 1(b), §6.1; Gandhi & Iyer, OSDI'21).

Data-parallel micro-batches (one per rank, sampled as in
:class:`~gnnflow.strategies.minibatch.data_parallel.DataParallel`), except for the first
layer, which is model-parallel over the **feature dimension**:

1. every rank holds the columns ``cols_r`` of the input features of *all*
   vertices (``np.array_split`` of the feature dimension), so no input feature
   row ever crosses the network;
2. after sampling, the ranks exchange the structure of their first-layer
   blocks (one all-gather), and each rank computes, for **every** micro-batch,
   the first layer's *partial* activation from its feature columns (the
   first-layer weights restricted to ``cols_r``);
3. one all-to-all sends each partial to the micro-batch's owner, which sums
   them (the push; its backward pulls the gradients back along the same
   paths, :func:`gnnflow.comm.collectives.all_to_all_rows`), finishes layer 1 and
   runs the layers above data-parallel.

Partial activations need layer-specific code (GSplit §5: P3's edge-centric
split "requires a custom implementation" for GAT).  Layers affine in their
input (GraphSAGE-mean, GCN, the MLP layer, and a layer class that declares
``affine_split``, docs/models.md) push partial *outputs* per destination, with
the bias added once, by the owner.  GAT pushes partial
*projections* ``W h`` per source vertex; the owner runs attention and
aggregation on their sum (its projection replaced by the identity).
The sum of the partials is the full first layer, so one step equals a
data-parallel step on the same micro-batches up to float rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from gnnflow.comm.collectives import CommStats, all_to_all_rows, world
from gnnflow.errors import ConfigError
from gnnflow.nn.gat import GATConv
from gnnflow.nn.gcn import GCNConv
from gnnflow.nn.model import DstLinear
from gnnflow.nn.sage import SAGEConv
from gnnflow.results.schema import Recorder
from gnnflow.sampling import Block
from gnnflow.strategies.memory import RunSizes
from gnnflow.strategies.minibatch.base import MiniBatchStrategy
from gnnflow.strategies.minibatch.feature_store import FeatureStore
from gnnflow.strategies.minibatch.pipeline import MiniBatch

# Affine first layers: {input weight name: axis of the input dimension}, bias names.
AFFINE: dict[type, tuple[dict[str, int], tuple[str, ...]]] = {
    SAGEConv: ({"fc_self.weight": 1, "fc_neigh.weight": 1}, ("fc_self.bias",)),
    GCNConv: ({"weight": 0}, ("bias",)),
    DstLinear: ({"linear.weight": 1}, ("linear.bias",)),
}
# Layers whose first operation is a bias-free input projection: its weight (axis 1 = input).
PROJECTED: dict[type, str] = {GATConv: "fc.weight"}


# GraphSAGE with the GCN aggregator: one weight, on the mean of the neighbours and the vertex itself.
SAGE_GCN: tuple[dict[str, int], tuple[str, ...]] = ({"fc_neigh.weight": 1}, ("bias",))


def affine_split(conv: nn.Module) -> tuple[dict[str, int], tuple[str, ...]] | None:
    """The input weights ``{name: input axis}`` and biases of a first layer affine in its input:
    gnnflow's own (:data:`AFFINE`; :data:`SAGE_GCN` for GraphSAGE's GCN aggregator), or a layer
    class that declares them as ``affine_split`` (docs/models.md; :class:`gnnflow.nn.pyg.PyGLayer`
    does for GraphConv and GCNConv)."""
    if isinstance(conv, SAGEConv) and conv.aggregator == "gcn":
        return SAGE_GCN
    return AFFINE.get(type(conv)) or getattr(conv, "affine_split", None)


class _Given(nn.Module):
    """Stands in for a conv whose output is already computed: returns its input."""

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        return h


@contextlib.contextmanager
def _conv_replaced(net: nn.Module, i: int, module: nn.Module) -> Iterator[None]:
    """Run ``net.layer_step(i, ...)`` with conv ``i`` replaced (its activation/dropout/head handling kept)."""
    conv = net.layers[i]
    net.layers[i] = module
    try:
        yield
    finally:
        net.layers[i] = conv


def feature_columns(dim: int, parts: int, rank: int) -> np.ndarray:
    """The input-feature columns rank ``rank`` holds (near-equal contiguous slices)."""
    return np.array_split(np.arange(dim), parts)[rank]


def check_first_layer(net: nn.Module, model: str) -> None:
    """Refuse a model whose first layer P3 cannot split by feature columns, in one line."""
    first = net.layers[0]
    if affine_split(first) is None and type(first) not in PROJECTED:
        raise ConfigError(f"strategy p3: model {model!r} has no push-pull first layer (P3 splits layer 0 by "
                          "feature columns: a layer affine in its input declares affine_split, docs/models.md)")


def partial_first_layer(conv: nn.Module, block: Block, x_cols: torch.Tensor, cols: torch.Tensor,
                        with_bias: bool) -> torch.Tensor:
    """This rank's share of the first layer on ``block`` from feature columns ``cols``.

    Affine layers: the layer with its input weights restricted to ``cols`` (and
    its bias only when ``with_bias``), ``[num_dst, ...]``.  Projected layers
    (GAT): the partial projection ``x[:, cols] W[:, cols]^T``, ``[num_src, ...]``.
    """
    kind = type(conv)
    params = dict(conv.named_parameters())
    split = affine_split(conv)
    if split is not None:
        weights, biases = split
        override = {n: params[n].index_select(axis, cols) for n, axis in weights.items()}
        for b in biases:
            if b in params and not with_bias:
                override[b] = torch.zeros_like(params[b])
        return functional_call(conv, override, (block, x_cols))
    if kind in PROJECTED:
        return F.linear(x_cols, params[PROJECTED[kind]].index_select(1, cols))
    raise ConfigError(f"strategy p3: no push-pull split for first layer {kind.__name__}; "
                      f"supported: {', '.join(t.__name__ for t in (*AFFINE, *PROJECTED))}")


def drop_input_columns(net: nn.Module, x_cols: torch.Tensor) -> torch.Tensor:
    """Layer 0's input dropout (the model's ``input_dropout``, GAT's ``feat_drop``) on this rank's
    feature columns: element-wise, so a mask per column slice is a mask of the whole input."""
    x_cols = net.input_dropout(x_cols)
    feat_drop = getattr(net.layers[0], "feat_drop", None)
    return feat_drop(x_cols) if feat_drop is not None else x_cols


@contextlib.contextmanager
def _input_dropout_done(net: nn.Module) -> Iterator[None]:
    """Layer 0 without its input dropouts (:func:`drop_input_columns` applied them to the columns)."""
    conv = net.layers[0]
    saved = net.input_dropout, getattr(conv, "feat_drop", None)
    net.input_dropout = nn.Identity()
    if saved[1] is not None:
        conv.feat_drop = nn.Identity()
    try:
        yield
    finally:
        net.input_dropout = saved[0]
        if saved[1] is not None:
            conv.feat_drop = saved[1]


def finish_first_layer(net: nn.Module, block: Block, summed: torch.Tensor) -> torch.Tensor:
    """Layer 0's output (activation, dropout, heads as ``layer_step``) from the summed partials."""
    conv = net.layers[0]
    with _input_dropout_done(net):
        if type(conv) in PROJECTED:
            name = PROJECTED[type(conv)]
            eye = torch.eye(summed.shape[1], dtype=summed.dtype, device=summed.device)
            out = functional_call(conv, {name: eye}, (block, summed))
        else:
            out = summed
        with _conv_replaced(net, 0, _Given()):
            return net.layer_step(0, block, out)


class PushPull(MiniBatchStrategy):
    """GSplit's P3*: first layer split by feature dimension, data-parallel above (``--strategy p3``)."""

    name = "p3"
    loads_features = False  # a rank holds feature columns of every vertex, not its shard's rows

    @classmethod
    def batch_memory(cls, run: RunSizes, r: int) -> tuple[float, dict[str, int]]:
        """Every vertex's feature columns of this rank, and layer-0 partial outputs of every rank's
        micro-batch three times: computed, received from the peers, and their gradients
        (products-shaped graph, 4 ranks: 2194 MiB measured, 1681 predicted with one copy)."""
        n = run.sizes.num_nodes
        partials = 3 * 4.0 * run.levels[1] * run.cfg.hidden * run.workers
        return run.acts + partials, {"p3_columns": int(4 * n * run.f_dim / run.workers)}

    def prepare(self) -> None:
        from gnnflow.data.store import open_store

        super().prepare()
        rank, size = world()
        self.use_ddp = False  # layer 0's gradients arrive through the push-pull exchange
        store = open_store(self.graph_path)
        if store.features is None:
            raise ConfigError(f"{self.graph_path}: strategy p3 needs input features (features.npy)")
        dim = int(store.features.shape[1])
        self.cols_np = feature_columns(dim, size, rank)
        self.cols = torch.from_numpy(self.cols_np.astype(np.int64))
        self.feature_dim = dim
        # this rank's feature columns of every vertex (P3: features partitioned by dimension)
        self.feature_slice = np.ascontiguousarray(store.features[:, self.cols_np[0]:self.cols_np[-1] + 1]) \
            if self.cols_np.size else np.zeros((store.num_nodes, 0), dtype=np.float32)
        self.push_stats = CommStats(size)
        assert self.net is not None
        check_first_layer(self.net, self.cfg.model)

    def build_feature_store(self, group: Any) -> None:
        return None  # no input row is fetched: every rank holds its columns of all rows

    def prepare_degrees(self) -> None:
        # the load stage has no exchange here: degrees travel in the sample stage, with the blocks
        self.degree_store = FeatureStore(self.part, self.node_part, local_rows=self.global_degrees(),
                                         stats=self.sample_stats, group=self.groups["sample"])

    def sample_stage(self, mb: MiniBatch) -> MiniBatch:
        mb = super().sample_stage(mb)
        self.attach_degrees(mb)
        assert mb.blocks is not None
        b = mb.blocks[0]
        mine = (b.dst_ids, b.src_ids, b.indptr, b.indices, b.src_deg, b.dst_deg)
        _, size = world()
        every: list[Any] = [mine]
        if size > 1:
            every = [None] * size
            dist.all_gather_object(every, mine, group=self.groups["sample"])
        mb.meta["first_blocks"] = [Block(dst_ids=d, src_ids=s, indptr=p, indices=i, src_deg=sd, dst_deg=dd)
                                   for d, s, p, i, sd, dd in every]
        mb.counters["structure_bytes_received"] = float(sum(
            t.element_size() * t.numel() for r, e in enumerate(every) if r != world()[0] for t in e
            if t is not None))
        return mb

    def load_stage(self, mb: MiniBatch) -> MiniBatch:
        """This rank's feature columns of the input vertices of every micro-batch (all local)."""
        blocks = mb.meta["first_blocks"]
        mb.meta["column_inputs"] = [torch.from_numpy(self.feature_slice[b.src_ids.numpy()]) for b in blocks]
        rows = sum(b.num_src for b in blocks)
        # in full-row units: the group together loads what data parallelism loads, but all locally
        mb.counters["features_loaded"] = mb.counters.get("features_loaded", 0.0) + \
            rows * len(self.cols_np) / max(1, self.feature_dim)
        mb.counters["feature_column_rows"] = mb.counters.get("feature_column_rows", 0.0) + rows
        mb.inputs = torch.empty(0)
        return mb

    def device_stage(self, mb: MiniBatch) -> MiniBatch:
        dev = self.ctx.device
        if dev.type != "cpu":
            mb.meta["first_blocks"] = [b.to(dev) for b in mb.meta["first_blocks"]]
            mb.meta["column_inputs"] = [x.to(dev, non_blocking=True) for x in mb.meta["column_inputs"]]
        return super().device_stage(mb)

    def compute_loss(self, mb: MiniBatch, rec: Recorder) -> torch.Tensor:
        assert self.net is not None and mb.blocks is not None and mb.labels is not None
        rank, size = world()
        net = self.net
        conv = net.layers[0]
        firsts, inputs = mb.meta["first_blocks"], mb.meta["column_inputs"]
        cols = self.cols.to(self.ctx.device)
        partials = [partial_first_layer(conv, b, drop_input_columns(net, x), cols, with_bias=(q == rank))
                    for q, (b, x) in enumerate(zip(firsts, inputs, strict=True))]
        shape = partials[rank].shape[1:]
        flat = torch.cat([p.reshape(p.shape[0], -1) for p in partials], 0)
        sizes = [p.shape[0] for p in partials]
        offsets = np.cumsum([0, *sizes])
        send_index = [torch.arange(int(offsets[q]), int(offsets[q + 1]), device=flat.device) for q in range(size)]
        recv = all_to_all_rows(flat, send_index, [sizes[rank]] * size, self.push_stats)
        summed = recv.view(size, sizes[rank], -1).sum(0).view(sizes[rank], *shape)
        h = finish_first_layer(net, mb.blocks[0], summed)
        for i in range(1, len(net.layers)):
            h = net.layer_step(i, mb.blocks[i], h)
        mb.meta["logits"] = h.detach()
        return F.cross_entropy(h, mb.labels, reduction="sum") / max(1, mb.meta["global_batch"])

    def train_batch(self, mb: MiniBatch, rec: Recorder) -> float:
        return self.train_batch_counting(mb, rec, self.push_stats, "push")  # push forward + pull backward
