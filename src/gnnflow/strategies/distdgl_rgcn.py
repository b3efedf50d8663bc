"""The DistDGL peer's RGCN: DGL 1.1.3's distributed heterogeneous training on a typed book.

What DGL's own distributed RGCN example (``examples/pytorch/rgcn/experimental/
entity_classify_dist.py``, 1.1.x) does, on the partitions of gnnflow's typed book
(:func:`gnnflow.partition.dgl_interop.write_dgl_typed_partitions`: DGL's heterogeneous
layout, each vertex's and edge's type in DGL's ``_TYPE`` data, per-type features):

* the trainer opens a heterogeneous ``DistGraph``, takes its share of each label type's
  training vertices with ``node_split(..., ntype=...)`` and samples with
  ``DistNodeDataLoader`` + ``NeighborSampler``.  On a DistGraph of several edge types DGL
  samples with ``sample_etype_neighbors``, which takes a count per relation, so gnnflow's
  per-relation ``--fanouts`` (``cites:10,*:5;...``) become DGL's fanout dicts (a plain count
  applies to every relation, as in gnnflow);
* inputs: a featured type's rows through its own ``nn.Linear`` to ``hidden`` (the
  example's ``node_projs``), a featureless type's rows from a ``dgl.distributed.DistEmbedding``
  (partitioned like the type's vertices, on the servers) trained by
  ``dgl.distributed.optim.SparseAdam`` at ``sparse_lr`` (default ``lr``), the example's
  ``--dgl-sparse`` mode; the dense parameters under ``DistributedDataParallel`` and Adam;
* layers: DGL's ``RelGraphConv(regularizer="basis", num_bases, self_loop=True)`` (no
  regulariser with ``num_bases=0``), :class:`gnnflow.nn.peer.DGLRelationalModel`, the model
  ``gnnflow bench hetero-accuracy`` checks computes our RGCN's function.  DGL's sampler gives
  heterogeneous blocks; each is rewritten as one homogeneous block (:func:`homogeneous_block`:
  the destinations of every type first, edges grouped by relation so ``RelGraphConv`` takes its
  ``presorted`` path, the edge norm ``1 / |N_r(i)|``, a mean per relation, as ours), timed
  with the sampling (it is the batch's graph, built once per batch).

Evaluation: each trainer's ``node_split`` share of every split in batches through
``MultiLayerFullNeighborSampler`` (full neighbourhoods, exact; the example evaluates with
sampled fanouts), summed over trainers.

What differs from gnnflow's RGCN (docs/hetero.md): the embedding rows start from the same
bound (Xavier's uniform on a type's ``[n_t, hidden]`` table) but not the same draws; DGL's
``SparseAdam`` averages a row's gradients over the trainers that touched it where ours sums them;
DGL's sampling streams are its own (patch 3 of :mod:`gnnflow.strategies.distdgl` seeds them per
request here too).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gnnflow.errors import ConfigError
from gnnflow.results.schema import Recorder
from gnnflow.runtime.watchdog import note_progress
from gnnflow.strategies.base import check_loss

SPLITS = ("train", "val", "test")


def init_rows(bound: float, seed: int, shape: tuple[int, ...], dtype: Any) -> torch.Tensor:
    """A ``DistEmbedding``'s rows on a server: uniform in ``(-bound, bound)`` (``init_func``)."""
    gen = torch.Generator().manual_seed(int(seed) * 7919 + int(shape[0]))
    return (torch.rand(tuple(shape), generator=gen, dtype=torch.float32) * 2 - 1).mul_(bound).to(dtype)


def dgl_fanouts(fanouts: Any, typemap: Any, canonical_etypes: list[tuple[str, str, str]]) -> list[Any]:
    """gnnflow's fanouts (a count per layer, or per relation) as DGL's ``NeighborSampler`` takes
    them on a heterogeneous DistGraph: an int, or ``{canonical etype: count}``."""
    from gnnflow.strategies.relational import resolve_fanouts

    out: list[Any] = []
    for layer in resolve_fanouts(typemap, fanouts):
        if isinstance(layer, dict):
            out.append({tuple(typemap.edge_types[r]): int(k) for r, k in layer.items()})
            missing = set(canonical_etypes) - set(out[-1])
            if missing:
                raise ConfigError(f"fanouts: DGL's graph has relations {sorted(missing)} the store does not")
        else:
            out.append(int(layer))
    return out


def type_counts(block: Any, ntypes: list[str]) -> tuple[list[int], list[int]]:
    """``(destinations, sources)`` per vertex type of a heterogeneous DGL block."""
    return ([block.num_dst_nodes(t) if t in block.dsttypes else 0 for t in ntypes],
            [block.num_src_nodes(t) if t in block.srctypes else 0 for t in ntypes])


def src_order(block: Any, ntypes: list[str]) -> torch.Tensor:
    """The homogeneous block's sources (:func:`homogeneous_block`) as positions in the sources
    laid out type after type (each type's sources in DGL's order): what reorders the previous
    layer's output (its destinations type after type) or the input rows."""
    ndst, nsrc = type_counts(block, ntypes)
    off = np.concatenate([[0], np.cumsum(nsrc)])
    first = [np.arange(off[t], off[t] + ndst[t]) for t in range(len(ntypes))]
    rest = [np.arange(off[t] + ndst[t], off[t + 1]) for t in range(len(ntypes))]
    return torch.from_numpy(np.concatenate(first + rest).astype(np.int64))


def homogeneous_block(block: Any, ntypes: list[str], etypes: list[tuple[str, str, str]]) -> Any:
    """A heterogeneous DGL block as one homogeneous block for ``RelGraphConv``: destinations of
    every type first (type after type), then the other sources type after type; edge data
    ``etype`` (the relation's index in ``etypes``; edges grouped by it) and ``norm``
    ``1 / |N_r(i)|``."""
    import dgl

    ndst, nsrc = type_counts(block, ntypes)
    dst_off = np.concatenate([[0], np.cumsum(ndst)])
    rest_off = dst_off[-1] + np.concatenate([[0], np.cumsum(np.subtract(nsrc, ndst))])
    srcs, dsts, rels = [], [], []
    for r, cet in enumerate(etypes):
        if cet not in block.canonical_etypes:
            continue
        u, v = block.edges(etype=cet)
        s, d = ntypes.index(cet[0]), ntypes.index(cet[2])
        srcs.append(torch.where(u < ndst[s], u + int(dst_off[s]), u - ndst[s] + int(rest_off[s])))
        dsts.append(v + int(dst_off[d]))
        rels.append(torch.full((u.shape[0],), r, dtype=torch.int64))
    src, dst, rel = (torch.cat(x).to(torch.int64) if x else torch.zeros(0, dtype=torch.int64)
                     for x in (srcs, dsts, rels))
    key = dst * len(etypes) + rel
    _, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
    hb = dgl.create_block((src, dst), num_src_nodes=int(sum(nsrc)), num_dst_nodes=int(dst_off[-1]))
    hb.edata["etype"] = rel
    hb.edata["norm"] = (1.0 / counts.to(torch.float32))[inverse].unsqueeze(1)
    return hb


def timed_batches(loader: Any, rec: Recorder) -> Iterator[tuple[Any, Any, Any]]:
    """DGL's ``(input_nodes, seeds, blocks)`` batches of ``loader``, the wait for each (DGL's
    sampling, remote neighbourhoods included) added to the ``sample`` timer of ``rec``."""
    it = iter(loader)
    while True:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            return
        rec.add_time("sample", time.perf_counter() - t)
        yield batch


class PeerRGCN(torch.nn.Module):
    """DGL's RGCN (:class:`~gnnflow.nn.peer.DGLRelationalModel`) on a batch of heterogeneous DGL
    blocks; the module DDP wraps (the input projections and the layers; the featureless rows
    come in as ``rows``)."""

    def __init__(self, net: torch.nn.Module, ntypes: list[str], etypes: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.net, self.ntypes, self.etypes = net, ntypes, etypes

    def graphs(self, blocks: list[Any]) -> list[tuple[Any, torch.Tensor]]:
        """What :meth:`forward` runs on: per heterogeneous block its homogeneous block and the
        order of its sources (:func:`homogeneous_block`, :func:`src_order`)."""
        return [(homogeneous_block(b, self.ntypes, self.etypes), src_order(b, self.ntypes)) for b in blocks]

    def forward(self, graphs: list[tuple[Any, torch.Tensor]], features: dict[str, torch.Tensor],
                rows: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits of the last block's destinations, type after type; ``graphs`` of :meth:`graphs`;
        ``features[t]`` / ``rows[t]``: the first block's sources of type ``t`` (featured, every
        featured type, maybe no rows / featureless)."""
        h = self.net.inputs(features, {}, rows)
        x = torch.cat([h[t] for t in self.ntypes if t in h])
        for i, (graph, order) in enumerate(graphs):
            x = self.net.layer(i, graph, x[order], presorted=True)
        return x


class RelationalPeer:
    """The training side of the DistDGL peer's RGCN on an open heterogeneous DistGraph (module
    docstring); its ``run_epoch`` and ``evaluate`` are the strategy's."""

    def __init__(self, cfg: Any, g: Any, label_types: list[str], rank: int, size: int) -> None:
        import dgl
        import dgl.distributed as dgld
        from dgl.distributed.optim import SparseAdam

        from gnnflow.data.hetero import TypeMap
        from gnnflow.data.meta import read_store_meta
        from gnnflow.nn.peer import dgl_relational_from_config
        from gnnflow.partition.book import PartitionBook
        from gnnflow.strategies.common import make_optimizer, seed_everything
        from gnnflow.strategies.relational import graph_schema

        self.cfg, self.g, self.rank = cfg, g, rank
        book = PartitionBook.open(cfg.partition)
        meta = read_store_meta(book.graph_path)
        tm, schema = TypeMap.from_meta(meta), graph_schema(meta)
        self.ntypes = list(g.ntypes)
        # relation r is the store's relation r (as in ours and in bench hetero-accuracy's DGL model)
        self.etypes = [tuple(e) for e in tm.edge_types]
        theirs = [tuple(e) for e in g.canonical_etypes]
        if self.ntypes != list(tm.node_types) or sorted(self.etypes) != sorted(theirs):
            raise ConfigError(f"{cfg.partition}: the DGL layout's types {self.ntypes} / {theirs} are not the "
                              "graph's; remove the book's .dgl-typed directory to rewrite it")
        self.label_types = list(label_types)
        pb = g.get_partition_book()
        self.split_nids = {s: {t: dgld.node_split(g.nodes[t].data[f"{s}_mask"], pb, ntype=t, force_even=True)
                               for t in self.label_types} for s in SPLITS}
        fanouts = dgl_fanouts(cfg.fanouts, tm, self.etypes)
        # DGL's batch_size is per trainer; ours (cfg.batch_size) is the global mini-batch
        self.trainer_batch = -(-cfg.batch_size // size)
        self.loader = dgl.dataloading.DistNodeDataLoader(
            g, self.split_nids["train"], dgl.dataloading.NeighborSampler(fanouts),
            batch_size=self.trainer_batch, shuffle=True, drop_last=False)
        seed_everything(cfg.seed)
        torch.manual_seed(cfg.seed)
        net = dgl_relational_from_config(cfg, schema, self.ntypes, self.etypes, int(book.meta.num_classes),
                                         embed=False)
        self.module = PeerRGCN(net, self.ntypes, self.etypes)
        # every parameter takes part in every batch (a featured type without rows projects none)
        self.model = torch.nn.parallel.DistributedDataParallel(self.module)
        self.optimizer = make_optimizer(self.module, cfg)
        self.featured = [t for t in self.ntypes if "feat" in g.nodes[t].data]
        self.embeds: dict[str, Any] = {}
        for t in self.ntypes:
            if t in self.featured:
                continue
            n = g.num_nodes(t)
            bound = math.sqrt(6.0 / (n + cfg.hidden))  # xavier-uniform on [n_t, hidden], as ours and HeteroEmbedding
            self.embeds[t] = dgld.DistEmbedding(n, cfg.hidden, f"node_emb_{t}",
                                                functools.partial(init_rows, bound, cfg.seed),
                                                g.get_node_partition_policy(t))
        lr = cfg.sparse_lr if cfg.sparse_lr is not None else cfg.lr
        self.sparse = SparseAdam(list(self.embeds.values()), lr=lr) if self.embeds else None

    def num_batches(self) -> int:
        return -(-sum(len(v) for v in self.split_nids["train"].values()) // self.trainer_batch)

    def _inputs(self, input_nodes: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        features = {t: self.g.nodes[t].data["feat"][input_nodes[t] if t in input_nodes
                                                     else torch.zeros(0, dtype=torch.int64)]
                    for t in self.featured}
        rows = {t: self.embeds[t](ids) for t, ids in input_nodes.items() if t in self.embeds and ids.shape[0]}
        return features, rows

    def _labels(self, seeds: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([self.g.nodes[t].data["label"][seeds[t]].long() for t in self.ntypes if t in seeds])

    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        self.model.train()
        losses = []
        for input_nodes, seeds, blocks in timed_batches(self.loader, rec):
            with rec.timer("sample"):
                graphs = self.module.graphs(blocks)  # the batch's graph as RelGraphConv takes it
            with rec.timer("load"):
                features, rows = self._inputs(input_nodes)
                y = self._labels(seeds)
            rec.count("sampled_edges", sum(b.num_edges() for b in blocks))
            rec.count("features_loaded", int(sum(ids.shape[0] for ids in input_nodes.values())))
            with rec.timer("forward_backward"):
                self.optimizer.zero_grad()
                loss = F.cross_entropy(self.model(graphs, features, rows), y)
                loss.backward()  # DDP all-reduces the dense gradients inside backward
            with rec.timer("step"):
                self.optimizer.step()
                if self.sparse is not None:
                    self.sparse.step()  # collective: the rows' gradients go to their owners
            rec.count("iterations")
            losses.append(float(loss.detach()))
            check_loss(losses[-1], epoch, len(losses) - 1, self.rank)
        return float(np.mean(losses)) if losses else float("nan")

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Every split's vertices of this trainer's share, full neighbourhoods, summed over trainers
        (collective)."""
        import dgl

        from gnnflow.strategies.metrics import reduce_sums, split_metrics, split_sums

        self.model.eval()
        full = dgl.dataloading.MultiLayerFullNeighborSampler(len(self.module.net.layers))
        sums = split_sums({})
        for split in SPLITS:
            loader = dgl.dataloading.DistNodeDataLoader(self.g, self.split_nids[split], full,
                                                        batch_size=self.trainer_batch, shuffle=False,
                                                        drop_last=False)
            for input_nodes, seeds, blocks in loader:
                features, rows = self._inputs(input_nodes)
                logits = self.module(self.module.graphs(blocks), features, rows)
                sums += split_sums({split: (logits, self._labels(seeds))})
                note_progress()  # DGL's pulls are no collective of ours: the watchdog sees this
        return split_metrics(reduce_sums(sums))
