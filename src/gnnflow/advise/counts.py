"""What one epoch of each strategy does on each rank, counted before training (issue 35.1).

Every strategy's mini-batches are a pure function of the config: its targets come from a seeded
schedule and its neighbour draws from the keyed draws of (seed, epoch, batch, layer, vertex)
(:mod:`gnnflow.sampling.draws`), which every sampler makes alike whatever the partition.  So the
probe here replays a strategy's schedule for an epoch and samples its batches with the
single-process sampler on the model's graph: the blocks are the ones the ranks will build, and
the counts the records measure come out exact (sampled edges, input vertices, features loaded,
cache hits, remote rows).  Sampling is cheap (tens of millions of edges per second), so the
probe samples every batch by default; ``max_batches`` samples the first batches of the epoch
and scales their means to the epoch.

What comes out, per rank (:class:`RankWork`): the epoch's iterations; per layer the mean
destinations, sources and edges of one iteration's block (input layer first); and named epoch
totals (:data:`COUNT_KEYS` says what each is).  Full-batch strategies have one iteration whose
"block" is the rank's rows of the whole graph.

The probe reads the whole graph's CSR (memory-mapped) in the advising process: a planning
tool's cost, never a rank's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

#: the named epoch totals of a rank (records' counter names where the records have them)
COUNT_KEYS = {
    "sampled_edges": "edges of the blocks this rank computes (records: sampled_edges)",
    "input_vertices": "input rows of the first block (records: input_vertices)",
    "features_loaded": "feature rows read (records: features_loaded; P3: in full-row units)",
    "local_rows": "input rows this rank owns",
    "cache_hits": "remote input rows served by the hot-row cache (records: cache_hits)",
    "remote_features": "input rows fetched from their owners (records: remote_features)",
    "served_rows": "feature rows this rank gathers for its peers",
    "remote_seeds": "frontier vertices sent to their owners to be sampled",
    "served_seeds": "frontier vertices sampled here for a peer",
    "served_edges": "edges sampled here for a peer",
    "exchange_hops": "sampling hops with an exchange, per iteration (x iterations)",
    "shuffle_rows": "rows received in the per-layer shuffles (split; x layer width summed in shuffle_floats)",
    "shuffle_floats": "floats received in the forward shuffles (split), every layer",
    "push_floats": "floats a rank receives in P3's push (layer 0 partials) or HEC's AEP",
    "push_rows": "rows pushed to peers (HEC's AEP, every layer)",
    "column_rows": "rows of feature columns gathered (P3, every micro-batch)",
    "halo_sources": "halo sources of the blocks (HEC), before cache misses are dropped",
    "halo_rows": "halo rows received per layer exchange (DGCL)",
    "tile_nnz": "non-zeros of the rank's rows of A (full-batch)",
}


@dataclass
class Layer:
    """One layer's block on a rank: mean per iteration."""

    dst: float
    src: float
    edges: float


@dataclass
class RankWork:
    """What one rank does in one epoch (see the module docstring)."""

    iterations: int
    layers: list[Layer]
    counts: dict[str, float] = field(default_factory=dict)
    probed: int = 0  # batches sampled (the rest scaled from their means)

    def count(self, key: str) -> float:
        return float(self.counts.get(key, 0.0))

    def per_iteration(self, key: str) -> float:
        return self.count(key) / max(1, self.iterations)


@dataclass
class ProbeInput:
    """What every probe reads: the config (options parsed), the model's graph, the book."""

    cfg: Any
    indptr: np.ndarray
    indices: np.ndarray
    train_ids: np.ndarray  # the store's order
    feature_dim: int
    num_classes: int
    node_part: np.ndarray | None = None  # the book's
    book: Any = None  # a PartitionBook
    graph_path: str = ""
    max_batches: int | None = None
    epoch: int = 0

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @classmethod
    def read(cls, cfg: Any, book_path: str | None, max_batches: int | None = None, epoch: int = 0) -> ProbeInput:
        from gnnflow.data.store import open_store
        from gnnflow.strategies.common import model_graph

        store = open_store(cfg.graph, validate=False)
        graph = model_graph(store, cfg)  # A or A + I, as every strategy trains on it
        book = node_part = None
        if book_path:
            from gnnflow.partition.book import PartitionBook

            book = PartitionBook.open(book_path)
            node_part = np.asarray(book.node_part)
        return cls(cfg=cfg, indptr=np.asarray(graph.indptr), indices=np.asarray(graph.indices),
                   train_ids=np.array(store.train_idx, dtype=np.int64), feature_dim=int(store.feature_dim or 0),
                   num_classes=int(store.num_classes), node_part=node_part, book=book, graph_path=str(cfg.graph),
                   max_batches=max_batches, epoch=epoch)

    def sampler(self, seed: int | None = None) -> Any:
        from gnnflow.sampling import NeighborSampler

        return NeighborSampler(self.indptr, self.indices, list(self.cfg.fanouts),
                               seed=self.cfg.seed if seed is None else seed)

    def probed(self, iterations: int) -> int:
        return iterations if self.max_batches is None else max(1, min(iterations, self.max_batches))


class _Acc:
    """Sums of one rank's probed batches, scaled to the epoch by :meth:`work`."""

    def __init__(self, num_layers: int) -> None:
        self.layers = np.zeros((num_layers, 3))
        self.counts: dict[str, float] = {}
        self.batches = 0

    def add_blocks(self, dims: list[tuple[float, float, float]]) -> None:
        self.layers += np.asarray(dims, dtype=np.float64)

    def add(self, key: str, value: float) -> None:
        self.counts[key] = self.counts.get(key, 0.0) + float(value)

    def work(self, iterations: int) -> RankWork:
        b = max(1, self.batches)
        scale = iterations / b
        layers = [Layer(*(float(x) / b for x in row)) for row in self.layers]
        return RankWork(iterations=iterations, layers=layers,
                        counts={k: v * scale for k, v in self.counts.items()}, probed=self.batches)


def block_dims(blocks: list[Any]) -> list[tuple[float, float, float]]:
    return [(float(b.num_dst), float(b.num_src), float(b.num_edges)) for b in blocks]


def global_batches(n_train: int, batch_size: int) -> int:
    """Iterations of an epoch over ``n_train`` targets in global batches of ``batch_size``."""
    return max(1, math.ceil(n_train / batch_size))


# ------------------------------------------------------------------------------------------ single
def probe_single(inp: ProbeInput) -> list[RankWork]:
    """Single-process mini-batch training (``SingleProcess.run_epoch``): global batches of the
    shuffled training vertices; with ``full_batch`` one iteration over the whole graph."""
    from gnnflow.strategies.common import batch_generator, batches

    cfg = inp.cfg
    if cfg.options.full_batch:
        n, m = inp.num_nodes, int(inp.indices.shape[0])
        return [RankWork(iterations=1, layers=[Layer(n, n, m) for _ in range(cfg.num_layers)],
                         counts={"sampled_edges": float(m * cfg.num_layers), "tile_nnz": float(m),
                                 "local_rows": float(n)}, probed=1)]
    iterations = global_batches(len(inp.train_ids), cfg.batch_size)
    gen = batch_generator(cfg.seed)
    for _ in range(inp.epoch):  # each epoch draws one permutation from the run's generator
        torch.randperm(len(inp.train_ids), generator=gen)
    acc = _Acc(cfg.num_layers)
    sampler = inp.sampler()
    for j, targets in enumerate(batches(inp.train_ids, cfg.batch_size, gen)):
        if j >= inp.probed(iterations):
            break
        blocks = sampler.at(inp.epoch, j).sample_blocks(targets)
        acc.add_blocks(block_dims(blocks))
        acc.add("sampled_edges", sum(b.num_edges for b in blocks))
        acc.add("input_vertices", blocks[0].num_src)
        acc.add("features_loaded", blocks[0].num_src)
        acc.add("local_rows", blocks[0].num_src)
        acc.batches += 1
    return [acc.work(iterations)]


# ------------------------------------------------------------------------------------------ data
def rank_targets(inp: ProbeInput, r: int) -> np.ndarray:
    """A data-parallel rank's training vertices: its part's, sorted (``local_targets``)."""
    assert inp.node_part is not None
    t = inp.train_ids[np.asarray(inp.node_part[inp.train_ids]) == r]
    return np.sort(t)


def data_schedule(inp: ProbeInput, targets: list[np.ndarray], epoch: int) -> tuple[int, list[list[np.ndarray]]]:
    """(iterations, per rank its batches' targets) of ``MiniBatchStrategy.schedule``: every rank
    runs ``ceil(N / B)`` iterations, cutting its shuffled targets into that many batches."""
    cfg = inp.cfg
    iterations = global_batches(sum(len(t) for t in targets), cfg.batch_size)
    out = []
    for r, t in enumerate(targets):
        perm = np.random.default_rng([cfg.seed, r, epoch]).permutation(t.shape[0])
        out.append([t[c] for c in np.array_split(perm, iterations)])
    return iterations, out


def hot_rows(inp: ProbeInput, r: int, batches: list[np.ndarray], capacity: int) -> np.ndarray:
    """The remote rows a data-parallel rank caches (``MiniBatchStrategy._build_caches``): the
    ``capacity`` most frequent remote inputs of its first ``presample_batches`` batches of epoch 0,
    sampled with seed + 7919."""
    from gnnflow.strategies.device_cache import hottest
    from gnnflow.strategies.minibatch.sampler import presample_input_counts

    assert inp.node_part is not None
    if capacity <= 0:
        return np.zeros(0, dtype=np.int64)
    sampler = inp.sampler(inp.cfg.seed + 7919)
    ids, counts = presample_input_counts(sampler, batches[: inp.cfg.options.presample_batches])
    remote = np.asarray(inp.node_part[ids]) != r
    return hottest(ids[remote], counts[remote], capacity)


def probe_data(inp: ProbeInput, cache: bool = True, first_layer_columns: bool = False) -> list[RankWork]:
    """Data-parallel ranks (``data``; P3 with ``first_layer_columns``; the DistDGL peer reads
    these too): per rank its own training vertices in ``ceil(N / B)`` batches, each sampled with
    the rank's keyed draws; remote frontier vertices go to their owners to be sampled, remote
    input rows come from the hot-row cache or their owners."""
    from gnnflow.strategies.memory import feature_cache_rows

    cfg, node_part = inp.cfg, inp.node_part
    assert node_part is not None
    p = int(cfg.workers)
    targets = [rank_targets(inp, r) for r in range(p)]
    iterations, sched = data_schedule(inp, targets, inp.epoch)
    inner = np.bincount(np.asarray(node_part), minlength=p)
    hot: list[np.ndarray] = []
    for r in range(p):
        cap = feature_cache_rows(cfg.options, inp.feature_dim, inp.num_nodes - int(inner[r])) if cache and p > 1 else 0
        first = sched[r] if inp.epoch == 0 else data_schedule(inp, targets, 0)[1][r]
        hot.append(hot_rows(inp, r, first, cap))
    accs = [_Acc(cfg.num_layers) for _ in range(p)]
    sampler = inp.sampler()
    fanouts = [int(f) for f in cfg.fanouts]
    for j in range(inp.probed(iterations)):
        per_rank = [sampler.at(inp.epoch, j).sample_blocks(torch.from_numpy(sched[r][j])) for r in range(p)]
        served_seeds = np.zeros(p)
        served_edges = np.zeros(p)
        served_rows = np.zeros(p)
        for r, blocks in enumerate(per_rank):
            acc = accs[r]
            acc.add_blocks(block_dims(blocks))
            inputs = blocks[0].src_ids.numpy()
            owner = np.asarray(node_part[inputs])
            remote = inputs[owner != r]
            hits = np.isin(remote, hot[r], assume_unique=True) if hot[r].size else np.zeros(remote.shape[0], bool)
            acc.add("sampled_edges", sum(b.num_edges for b in blocks))
            acc.add("input_vertices", inputs.shape[0])
            acc.add("local_rows", inputs.shape[0] - remote.shape[0])
            if hot[r].size:
                acc.add("cache_hits", int(hits.sum()))
            acc.add("remote_features", int((~hits).sum()))
            served_rows += np.bincount(np.asarray(node_part[remote[~hits]]), minlength=p)
            if first_layer_columns:
                acc.add("features_loaded", 0.0)  # set below: P3 counts column rows in full-row units
            else:
                acc.add("features_loaded", inputs.shape[0])
            # the targets' hop is local (own targets); every other hop exchanges its remote seeds
            for layer in range(len(blocks) - 1):
                front = blocks[layer].dst_ids.numpy()
                fown = np.asarray(node_part[front])
                far = fown != r
                acc.add("remote_seeds", int(far.sum()))
                per_owner = np.bincount(fown[far], minlength=p)
                served_seeds += per_owner
                # a seed's reply carries min(degree, fanout) sources
                deg = np.diff(inp.indptr)[front[far]]
                f = fanouts[layer]
                got = deg if f < 0 else np.minimum(deg, f)
                served_edges += np.bincount(fown[far], weights=got, minlength=p)
            acc.add("exchange_hops", len(blocks) - 1 if p > 1 else 0)
        if first_layer_columns:
            rows0 = sum(b[0].num_src for b in per_rank)
            for r in range(p):
                cols = len(np.array_split(np.arange(inp.feature_dim), p)[r])
                accs[r].add("column_rows", rows0)
                accs[r].add("features_loaded", rows0 * cols / max(1, inp.feature_dim))
                accs[r].add("first_layer_edges", sum(b[0].num_edges for b in per_rank))
                accs[r].add("first_layer_dst", sum(b[0].num_dst for b in per_rank))
                accs[r].add("first_layer_src", rows0)
                accs[r].add("push_floats", (p - 1) * per_rank[r][0].num_dst * cfg.hidden)
                accs[r].add("structure_ids", sum(b[0].num_src + b[0].num_edges + 2 * b[0].num_dst
                                                 for q, b in enumerate(per_rank) if q != r))
        for r in range(p):
            accs[r].add("served_seeds", served_seeds[r])
            accs[r].add("served_edges", served_edges[r])
            accs[r].add("served_rows", served_rows[r])
            accs[r].batches += 1
    return [a.work(iterations) for a in accs]


# ------------------------------------------------------------------------------------------ split
def probe_split(inp: ProbeInput) -> list[RankWork]:
    """Split parallelism (GSplit Algorithm 1): one global batch per iteration, sampled as the
    single process samples it; rank ``r`` computes the destinations it owns at every layer, its
    sources are their sampled neighbours, and the sources it does not own arrive in the layer's
    shuffle (forward; their gradients go back in backward)."""
    from gnnflow.strategies.common import batch_generator

    cfg, node_part = inp.cfg, inp.node_part
    assert node_part is not None
    p = int(cfg.workers)
    owner_all = np.asarray(node_part)
    train = torch.from_numpy(inp.train_ids)
    iterations = global_batches(len(inp.train_ids), cfg.batch_size)
    perm = torch.randperm(len(inp.train_ids), generator=batch_generator(cfg.seed * 1_000_003 + inp.epoch))
    chunks = torch.tensor_split(perm, iterations)
    accs = [_Acc(cfg.num_layers) for _ in range(p)]
    sampler = inp.sampler()
    dims_in = _layer_widths(cfg, inp.feature_dim, inp.num_classes)
    for j in range(inp.probed(iterations)):
        blocks = sampler.at(inp.epoch, j).sample_blocks(train[chunks[j]])
        inputs = blocks[0].src_ids.numpy()
        in_owner = owner_all[inputs]
        per_layer = [[(0.0, 0.0, 0.0)] * len(blocks) for _ in range(p)]
        for layer, b in enumerate(blocks):
            dst = b.dst_ids.numpy()
            src = b.src_ids.numpy()
            dst_owner = owner_all[dst]
            edge_dst = np.repeat(np.arange(dst.shape[0]), np.diff(b.indptr.numpy()))
            edge_owner = dst_owner[edge_dst]
            edge_src = src[b.indices.numpy()]
            # a rank's mixed frontier: its destinations, then their sampled sources (unique)
            key = np.unique(np.concatenate([edge_owner.astype(np.int64) * inp.num_nodes + edge_src,
                                            dst_owner.astype(np.int64) * inp.num_nodes + dst]))
            mixed_rank = key // inp.num_nodes
            mixed_owner = owner_all[key % inp.num_nodes]
            for r in range(p):
                n_dst = float((dst_owner == r).sum())
                n_edges = float((edge_owner == r).sum())
                mine = mixed_rank == r
                n_src = float(mine.sum())
                received = float((mine & (mixed_owner != r)).sum())
                sent = float(((mixed_rank != r) & (mixed_owner == r)).sum())
                per_layer[r][layer] = (n_dst, n_src, n_edges)
                accs[r].add("shuffle_rows", received)
                accs[r].add("shuffle_sent_rows", sent)
                accs[r].add("shuffle_floats", received * dims_in[layer])
                accs[r].add("shuffle_sent_floats", sent * dims_in[layer])
                accs[r].add("remote_seeds", received)
                accs[r].add("served_seeds", sent)
        for r in range(p):
            accs[r].add_blocks(per_layer[r])
            n_in = float((in_owner == r).sum())
            accs[r].add("sampled_edges", sum(d[2] for d in per_layer[r]))
            accs[r].add("input_vertices", n_in)
            accs[r].add("features_loaded", n_in)
            accs[r].add("local_rows", n_in)
            accs[r].add("exchange_hops", len(blocks))
            accs[r].batches += 1
    return [a.work(iterations) for a in accs]


def _layer_widths(cfg: Any, feature_dim: int, classes: int) -> list[int]:
    from gnnflow.strategies.memory import layer_dims

    return [d_in for d_in, _ in layer_dims(cfg, max(1, feature_dim), classes)]


# ------------------------------------------------------------------------------------------ hec
def probe_hec(inp: ProbeInput) -> list[RankWork]:
    """DistGNN-MB: each rank samples its own targets over its part's solid + halo graph only
    (halo vertices are leaves), loads its solid inputs, and pushes at most ``nc`` of each layer's
    solid inputs to every peer that holds them as halo (AEP); cache hits are a dynamic figure,
    estimated by the cost model."""
    from gnnflow.strategies.hec.strategy import LocalHaloSampler
    from gnnflow.strategies.memory import layer_dims

    cfg, book = inp.cfg, inp.book
    assert book is not None and inp.node_part is not None
    p = int(cfg.workers)
    parts = [book.load_part(r, verify=False) for r in range(p)]
    if cfg.adds_self_loops:
        parts = [q.with_self_loops() for q in parts]
    halos = [np.asarray(q.halo_ids, dtype=np.int64) for q in parts]
    targets = [np.sort(np.asarray(q.train_idx, dtype=np.int64)) for q in parts]
    iterations, sched = data_schedule(inp, targets, inp.epoch)
    widths = [d_in for d_in, _ in layer_dims(cfg, max(1, inp.feature_dim), inp.num_classes)]
    nc = int(cfg.options.pushes_per_rank)
    out = []
    for r, part in enumerate(parts):
        sampler = LocalHaloSampler(part.indptr, part.indices, part.num_inner, part.num_halo, list(cfg.fanouts),
                                   seed=cfg.seed, local_to_global=part.local_to_global)
        acc = _Acc(cfg.num_layers)
        for j in range(inp.probed(iterations)):
            local = torch.from_numpy(part.global_to_local(sched[r][j]))
            blocks, solid = sampler.at(inp.epoch, j).sample_blocks(local)
            acc.add_blocks(block_dims(blocks))
            acc.add("sampled_edges", sum(b.num_edges for b in blocks))
            acc.add("input_vertices", blocks[0].num_src)
            acc.add("features_loaded", solid[0])
            acc.add("local_rows", solid[0])
            acc.add("halo_sources", sum(b.num_src - s for b, s in zip(blocks, solid, strict=True)))
            for layer, (b, s) in enumerate(zip(blocks, solid, strict=True)):
                ids = part.local_to_global[b.src_ids[:s].numpy()]
                # halo sources of this layer whose edges reach them (hits are estimated later)
                halo_edges = float((b.indices.numpy() >= s).sum())
                acc.add(f"halo_edges_l{layer}", halo_edges)
                acc.add(f"halo_src_l{layer}", float(b.num_src - s))
                for q in range(p):
                    if q != r and halos[q].size:
                        n = int(np.isin(ids, halos[q], assume_unique=True).sum())
                        acc.add("push_rows", min(n, nc))
                        acc.add("push_floats_sent", min(n, nc) * widths[layer])
            acc.batches += 1
        w = acc.work(iterations)
        w.counts["halo"] = float(part.num_halo)
        out.append(w)
    for r in range(p):  # what a rank receives is what its peers push to it
        received = [out[q].count("push_floats_sent") / max(1, p - 1) for q in range(p) if q != r]
        out[r].counts["push_floats"] = float(sum(received))
    return out


# ------------------------------------------------------------------------------------------ full batch
def probe_fullbatch(inp: ProbeInput) -> list[RankWork]:
    """MG-GCN 1D: the store's own permute-1d row blocks (the strategy's rows without a book);
    a rank holds its rows of Â, cut into P tiles by the column blocks; per layer P broadcast
    rounds, one row block of the narrower side each."""
    from types import SimpleNamespace

    from gnnflow.strategies.fullbatch.row1d import row_blocks

    cfg = inp.cfg
    p = int(cfg.workers)
    store = SimpleNamespace(num_nodes=inp.num_nodes, indptr=inp.indptr, indices=inp.indices)
    part = row_blocks(store, p, cfg.seed, cfg.options.permute)
    return _row_works(inp, np.asarray(part), p)


def _row_works(inp: ProbeInput, node_part: np.ndarray, p: int) -> list[RankWork]:
    deg = np.diff(inp.indptr)
    rows = np.bincount(node_part, minlength=p).astype(np.float64)
    nnz = np.bincount(node_part, weights=deg, minlength=p)
    train = np.bincount(node_part[np.asarray(inp.train_ids, dtype=np.int64)], minlength=p).astype(np.float64)
    out = []
    for r in range(p):
        n, m = float(rows[r]), float(nnz[r])
        layers = [Layer(n, float(inp.num_nodes), m) for _ in range(inp.cfg.num_layers)]
        out.append(RankWork(iterations=1, layers=layers, probed=1,
                            counts={"tile_nnz": m, "local_rows": n, "train_rows": float(train[r]),
                                    "block_rows_max": float(rows.max()),
                                    "broadcast_rows": float(inp.num_nodes - n)}))
    return out


def probe_dgcl(inp: ProbeInput) -> list[RankWork]:
    """DGCL: each rank's block is ``inner <- inner | halo`` of its part (1-hop halo); before every
    layer the halo rows arrive by ``graph_allgather`` (and their gradients go back in backward).
    ``replication``: no exchange; each rank computes its L-hop in-neighbourhood itself."""
    cfg, node_part = inp.cfg, inp.node_part
    assert node_part is not None
    p = int(cfg.workers)
    owner = np.asarray(node_part)
    deg = np.diff(inp.indptr)
    edge_owner = np.repeat(owner, deg)
    if cfg.options.planner == "replication":
        from gnnflow.sampling import NeighborSampler

        sampler = NeighborSampler(inp.indptr, inp.indices, [-1] * cfg.num_layers, seed=cfg.seed)
        out = []
        for r in range(p):
            blocks = sampler.sample_blocks(torch.from_numpy(np.flatnonzero(owner == r)))
            out.append(RankWork(iterations=1, layers=[Layer(*d) for d in block_dims(blocks)], probed=1,
                                counts={"local_rows": float(blocks[0].num_src),
                                        "features_loaded": float(blocks[0].num_src)}))
        return out
    # halo of part r: sources of its rows' edges owned elsewhere (unique)
    key = np.unique(edge_owner.astype(np.int64) * inp.num_nodes + inp.indices)
    part_of, vertex = key // inp.num_nodes, key % inp.num_nodes
    far = owner[vertex] != part_of
    halo = np.bincount(part_of[far], minlength=p).astype(np.float64)
    sent = np.bincount(owner[vertex[far]], minlength=p).astype(np.float64)
    inner = np.bincount(owner, minlength=p).astype(np.float64)
    edges = np.bincount(edge_owner, minlength=p).astype(np.float64)
    out = []
    for r in range(p):
        layers = [Layer(inner[r], inner[r] + halo[r], edges[r]) for _ in range(cfg.num_layers)]
        out.append(RankWork(iterations=1, layers=layers, probed=1,
                            counts={"halo_rows": halo[r], "halo_rows_sent": sent[r], "local_rows": inner[r],
                                    "tile_nnz": edges[r]}))
    return out


# ------------------------------------------------------------------------------------------ DistDGL
def probe_distdgl(inp: ProbeInput) -> list[RankWork]:
    """The DistDGL peer: DGL's ``node_split`` gives every trainer an even share of the training
    vertices and DGL's loader takes ``ceil(B / P)`` of them per batch.  DGL draws its own
    neighbours, so the blocks are our draws of batches that size (the same distribution) and the
    counts are estimates; every remote input row is pulled from its server (no cache)."""
    cfg = inp.cfg
    p = int(cfg.workers)
    works = probe_data(inp, cache=False)
    per_trainer = math.ceil(len(inp.train_ids) / p)
    iterations = max(1, math.ceil(per_trainer / max(1, math.ceil(cfg.batch_size / p))))
    for w in works:
        scale = iterations / max(1, w.iterations)
        w.counts = {k: v * scale for k, v in w.counts.items()}
        w.iterations = iterations
    return works


PROBES = {
    "single": probe_single,
    "data": probe_data,
    "distdgl": probe_distdgl,
    "split": probe_split,
    "p3": lambda inp: probe_data(inp, cache=False, first_layer_columns=True),
    "hec": probe_hec,
    "fullbatch": probe_fullbatch,
    "dgcl": probe_dgcl,
}


def probe(cfg: Any, inp: ProbeInput) -> list[RankWork]:
    """The per-rank work of ``cfg.strategy`` (``cfg.options`` parsed)."""
    return PROBES[cfg.strategy](inp)
