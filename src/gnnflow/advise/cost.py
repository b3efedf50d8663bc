"""Epoch time of each strategy: the counts of :mod:`gnnflow.advise.counts` times the rates of
:mod:`gnnflow.advise.calibrate` (issue 35.1; every term is written out in docs/advise.md).

For each rank the model adds up the CPU seconds of its stages over one epoch, in the records'
stage names:

* ``sample`` — per sampled hop ``hop + row x destinations + edge x edges`` (and the relabelling
  bitmap's scan of the graph's vertices where it is used), plus the sampling the rank does for its
  peers' remote frontier vertices;
* ``load`` — gathers of the rank's own input rows (and of the rows its peers ask it for), the copy
  of cache hits and received rows into the batch, the bytes of the exchange;
* ``forward_backward`` — the model timed at the rank's own mean block shape
  (:mod:`gnnflow.advise.shapes`: DGCL's halo block, MG-GCN's rank with its tiles; the calibrated
  per-term seconds of :mod:`gnnflow.advise.features` and the raw GEMM and SpMM rates where nothing is
  timed, as on a GPU); split parallelism's and
  P3's layer exchanges and HEC's AEP push, bytes and latencies, go under ``comm``;
* ``allreduce`` — per iteration one gradient all-reduce: latency plus the weights' bytes;
* ``step`` — Adam: per call plus per weight.

A mini-batch rank's CPU seconds of a stage are the microbenchmark's (measured in the calibrating
process) times the measured ``rank_<stage>`` factor of P ranks (:mod:`gnnflow.advise.collectives`:
a rank's allocator maps its large buffers afresh, and P busy ranks share caches and memory).

The rank's wall time is its CPU seconds over the share of a core it gets (``cores`` of the
calibration: P busy ranks on this host get that many cores together, so one gets
``min(1, cores / P)``), or its CPU seconds plus the waits that are not CPU (the latency of every
lock-step collective on the training thread; with the pipeline on, the sample and load exchanges
run in background threads and only the all-reduce waits), whichever is longer: with more busy
ranks than cores a waiting rank's core runs the others.  The epoch is the slowest rank's time.
A single process computes forward/backward with every usable core's thread: its blocks' shape
is timed so, in wall seconds (where no shape is timed: one thread's seconds over ``threads`` of
the calibration).

Full-batch strategies have one iteration: per layer P broadcast rounds (MG-GCN) or one halo
exchange (DGCL) forward and backward, the local SpMM and GEMMs, then the all-reduce and step.

What is ignored is listed in docs/advise.md (evaluation, start-up, imbalance inside an epoch,
memory bandwidth shared between ranks, the GPU path beyond forward/backward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gnnflow.advise.calibrate import Calibration
from gnnflow.advise.collectives import usable_cores
from gnnflow.advise.counts import RankWork
from gnnflow.advise.features import model_terms, param_count
from gnnflow.advise.shapes import timed_fb, timed_rows

STAGES = ("sample", "load", "forward_backward", "comm", "allreduce", "step", "wait")
ID_BYTES = 8


@dataclass
class Prediction:
    """One candidate's predicted epoch: the slowest rank's stage seconds and their sum."""

    epoch_s: float
    stages: dict[str, float]
    per_rank_s: list[float] = field(default_factory=list)
    #: each rank's CPU seconds (its stages before the core share and the waits)
    per_rank_cpu: list[float] = field(default_factory=list)
    #: iterations per rank of the epoch (1 for the full-batch strategies)
    iterations: int = 1
    #: the strategy factor applied (:mod:`gnnflow.advise.strategy_probe`): the model's epoch
    #: times ``factor`` plus ``overhead_s`` per iteration; 1 and 0: the model alone
    factor: float = 1.0
    overhead_s: float = 0.0

    @property
    def model_epoch_s(self) -> float:
        """The model's epoch before the strategy factor."""
        return (self.epoch_s - self.overhead_s * self.iterations) / self.factor

    def scaled(self, factor: float, overhead_s: float = 0.0) -> Prediction:
        """The model's prediction with a strategy factor: epoch, stages and rank times times
        ``factor``, plus ``overhead_s`` per iteration (stage ``overhead``); CPU seconds kept."""
        if (self.factor, self.overhead_s) != (1.0, 0.0):
            raise ValueError("a prediction takes one strategy factor")
        extra = overhead_s * self.iterations
        stages = {k: v * factor for k, v in self.stages.items()}
        if extra > 0:
            stages["overhead"] = extra
        return Prediction(epoch_s=self.epoch_s * factor + extra, stages=stages,
                          per_rank_s=[t * factor + extra for t in self.per_rank_s],
                          per_rank_cpu=list(self.per_rank_cpu), iterations=self.iterations, factor=factor,
                          overhead_s=overhead_s)

    @property
    def dominant(self) -> str:
        return max(self.stages, key=lambda k: self.stages[k]) if self.stages else ""

    def reason(self) -> str:
        """The dominant stages and their shares, e.g. ``forward_backward 61 %, sample 20 %``."""
        if not self.epoch_s or not self.stages:
            return ""
        top = sorted(self.stages.items(), key=lambda kv: -kv[1])[:2]
        return ", ".join(f"{k} {100 * v / self.epoch_s:.0f} %" for k, v in top if v > 0)


@dataclass
class Setting:
    """What the rates are applied to: the config (options parsed), graph widths, the host."""

    cfg: Any
    feature_dim: int
    num_classes: int
    num_nodes: int
    workers: int
    nnodes: int = 1
    device: str = "cpu"

    @property
    def local_ranks(self) -> int:
        return max(1, -(-self.workers // max(1, self.nnodes)))


class Rank:
    """One rank's epoch: CPU seconds and waits per stage."""

    def __init__(self, cal: Calibration, st: Setting, batched: bool = True) -> None:
        #: ``batched``: a mini-batch rank, whose pieces the rank probe measured (a full-batch
        #: rank's buffers are beyond any mmap threshold and its work the whole part: factor 1)
        self.cal, self.st, self.batched = cal, st, batched
        self.net = cal.net(st.local_ranks) if st.workers > 1 else {
            "latency": 0.0, "byte": 0.0, "latency_cpu": 0.0, "allreduce_latency": 0.0, "allreduce_byte": 0.0}
        self.cpu: dict[str, float] = {}
        self.wait: dict[str, float] = {}

    def work(self, stage: str, seconds: float) -> None:
        """``seconds`` of a microbenchmark (the calibrating process's) as a rank spends them: times
        the measured ``rank_<stage>`` of P ranks (``forward_backward``'s for a stage not probed;
        none for a single process, which runs in the advising process)."""
        factor = 1.0
        if self.st.workers > 1 and self.batched:
            factor = self.net.get(f"rank_{stage}", self.net.get("rank_forward_backward", 1.0))
        self.cpu[stage] = self.cpu.get(stage, 0.0) + seconds * factor

    def exchange(self, stage: str, collectives: float, nbytes: float = 0.0, waits: bool = True,
                 kind: str = "") -> None:
        """``collectives`` lock-step exchanges moving ``nbytes``: their CPU (the calling thread's
        CPU per byte, ``byte_cpu``, where calibrated) and the rest of their wall time, latency and
        the bytes' remainder, as a wait when they run on the training thread (``waits``).
        ``kind="broadcast"``: broadcasts, at the calibrated broadcast's seconds per byte and
        latency (all-to-all's where the calibration has none)."""
        if self.st.workers <= 1:
            return
        pre = f"{kind}_" if kind and f"{kind}_byte" in self.net else ""
        per_byte = self.net[pre + "byte"]
        cpu_byte = min(per_byte, self.net.get(pre + "byte_cpu", per_byte))
        self.cpu[stage] = self.cpu.get(stage, 0.0) + collectives * self.net.get("latency_cpu", 0.0) \
            + nbytes * cpu_byte
        if waits:
            self.wait[stage] = self.wait.get(stage, 0.0) + collectives * self.net[pre + "latency"] \
                + nbytes * (per_byte - cpu_byte)

    def allreduce(self, iterations: int, params: int) -> None:
        if self.st.workers <= 1:
            return
        self.cpu["allreduce"] = self.cpu.get("allreduce", 0.0) + iterations * (
            4.0 * params * self.net["allreduce_byte"] + self.net.get("latency_cpu", 0.0))
        self.wait["allreduce"] = self.wait.get("allreduce", 0.0) + iterations * self.net["allreduce_latency"]

    def step(self, iterations: int, params: int) -> None:
        self.work("step", iterations * (self.cal.step["call"] + self.cal.step["param"] * params))


# ------------------------------------------------------------------------------------------ pieces
def sample_hops(cal: Calibration, layers: list[tuple[float, float, float]], num_nodes: int,
                per_edge: float | None = None, per_hop: float | None = None) -> float:
    """Seconds of sampling one batch's hops (``layers``: (dst, src, edges) input layer first)."""
    s = cal.sampler
    total = 0.0
    for dst, _src, edges in layers:
        total += (s["hop"] if per_hop is None else per_hop) + s["row"] * dst
        total += (s["edge"] if per_edge is None else per_edge) * edges
        if num_nodes <= 64 * max(1.0, edges):
            total += s["scan"] * num_nodes
    return total


def gather_s(cal: Calibration, rows: float, dim: int, calls: float = 1.0, path: str = "") -> float:
    """Seconds of reading ``rows`` rows ``dim`` floats wide in ``calls`` calls: by ``np.take``
    (``path=""``, what an owner serves), by :meth:`FeatureStore.fetch` (``"store"``) or by
    :func:`~gnnflow.strategies.rows.take_rows` of the memory map
    (``"index"``); a calibration without the path's figures gives ``np.take``'s."""
    g = cal.gather
    pre = f"{path}_" if path and f"{path}_row" in g else ""
    return calls * g[pre + "call"] + rows * (g[pre + "row"] + g[pre + "byte"] * 4.0 * dim)


def fb_s(cal: Calibration, st: Setting, layers: list[tuple[float, float, float]], timed: bool = True,
         halo: str = "", threads: int = 1, columns: int = 0) -> float:
    """Forward + backward seconds of one batch's blocks: the model timed at their shape
    (:func:`gnnflow.advise.shapes.timed_fb`: sampled mini-batches, or with ``halo`` a full-graph
    halo block; ``timed``), one thread's CPU seconds, or with ``threads`` > 1 the wall seconds on
    that many threads; else the calibration's linear model (one thread) over the calibration's
    speed-up ``threads`` when ``threads`` > 1.  ``columns``: P3's first layer on that many of the
    input columns (the linear model: a layer that many columns wide)."""
    model = st.cfg.model
    key = f"{model}@cuda" if st.device == "cuda" and f"{model}@cuda" in cal.layers else model
    width = st.feature_dim
    got = timed_fb(cal, st.cfg, key, layers, max(1, width), st.num_classes, halo, threads, columns) if timed else None
    if got is not None:
        return got
    terms = model_terms(st.cfg, layers, columns or width, st.num_classes)
    return float(terms @ cal.layer_coefficients(key)) / (cal.threads if threads > 1 else 1.0)


def layer_tuples(w: RankWork) -> list[tuple[float, float, float]]:
    return [(x.dst, x.src, x.edges) for x in w.layers]


def share(cal: Calibration, st: Setting) -> float:
    """The core share one rank gets (see the module docstring)."""
    net = cal.net(st.local_ranks) if cal.collectives else {}
    return min(1.0, max(1e-3, net.get("cores", 1.0)) / st.local_ranks)


def finish(cal: Calibration, st: Setting, ranks: list[Rank]) -> Prediction:
    """The epoch from the ranks' CPU seconds and waits (see the module docstring)."""
    f = share(cal, st)
    per_rank, totals = [], []
    for r in ranks:
        cpu, wait = sum(r.cpu.values()), sum(r.wait.values())
        # a rank that waits leaves its core to the others: with more busy ranks than cores
        # (f < 1) a wait costs only what the ranks' CPU seconds do not already fill
        hidden = min(wait, cpu / f - cpu)
        keep = (wait - hidden) / wait if wait > 0 else 0.0
        per_rank.append({k: r.cpu.get(k, 0.0) / f + keep * r.wait.get(k, 0.0) for k in set(r.cpu) | set(r.wait)})
        totals.append(cpu / f + wait - hidden)
    slow = int(np.argmax(totals))
    stages = {k: float(v) for k, v in sorted(per_rank[slow].items()) if v > 0}
    return Prediction(epoch_s=float(totals[slow]), stages=stages, per_rank_s=[float(t) for t in totals],
                      per_rank_cpu=[float(sum(r.cpu.values())) for r in ranks])


def sampling_rank(cal: Calibration, st: Setting, w: RankWork, waits: bool) -> tuple[int, list[Any], Rank]:
    """``(iterations, layers, rank)`` of a data-parallel-sampling rank ``w`` with its sampling
    counted: its own hops and :func:`remote_sampling`."""
    it, layers, r = w.iterations, layer_tuples(w), Rank(cal, st)
    r.work("sample", it * sample_hops(cal, layers, st.num_nodes))
    remote_sampling(r, w, waits)
    return it, layers, r


def remote_sampling(r: Rank, w: RankWork, waits: bool) -> None:
    """A data-parallel rank's sampling exchanges: per hop beyond the targets' request counts, ids
    and replies (3 collectives); the sampling it does for its peers."""
    cal = r.cal
    r.work("sample", cal.sampler["row"] * w.count("served_seeds") + cal.sampler["edge"] * w.count("served_edges"))
    r.exchange("sample", 3 * w.count("exchange_hops"),
               ID_BYTES * (w.count("remote_seeds") + w.count("served_seeds") + w.count("served_edges")), waits)


# ------------------------------------------------------------------------------------------ strategies
def predict_single(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    w, cfg = works[0], st.cfg
    it = w.iterations
    params = param_count(cfg, st.feature_dim, st.num_classes)
    layers = layer_tuples(w)
    r = Rank(cal, st)
    full = bool(cfg.options.full_batch)
    r.work("forward_backward", it * fb_s(cal, st, layers, timed=not full, threads=usable_cores()))
    if not cfg.options.full_batch:
        r.work("sample", it * sample_hops(cal, layers, st.num_nodes))
        r.work("load", gather_s(cal, w.count("features_loaded"), st.feature_dim, it, "index"))
    r.step(it, params)
    return finish(cal, st, [r])


def predict_data(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """Data-parallel ranks: sample (own hops, remote hops through the owners), load (own rows,
    cache hits, rows from the owners, rows served to them), forward/backward, all-reduce, step."""
    cfg = st.cfg
    params = param_count(cfg, st.feature_dim, st.num_classes)
    f_bytes = 4.0 * st.feature_dim
    inline = not cfg.options.pipeline
    ranks = []
    for w in works:
        it, layers, r = sampling_rank(cal, st, w, inline)
        remote = w.count("remote_features")
        r.work("load", gather_s(cal, w.count("local_rows"), st.feature_dim, it, "store")
               + gather_s(cal, w.count("served_rows"), st.feature_dim, 0)
               + (w.count("cache_hits") + remote) * f_bytes * cal.gather["scatter"])
        coll = 3 * it * (2 if cfg.graph_degrees else 1)  # whole-graph degrees come the same way
        r.exchange("load", coll, (remote + w.count("served_rows")) * (ID_BYTES + f_bytes), inline)
        r.work("forward_backward", it * fb_s(cal, st, layers))
        r.allreduce(it, params)
        r.step(it, params)
        ranks.append(r)
    return finish(cal, st, ranks)


def predict_p3(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """P3*: data-parallel sampling plus the first blocks' structure to every rank (one all-gather
    of pickled blocks), this rank's feature columns of every micro-batch's inputs, the first layer
    of every micro-batch on those columns, the push of the partials and the pull of their
    gradients, the layers above as data-parallel."""
    cfg, p = st.cfg, st.workers
    params = param_count(cfg, st.feature_dim, st.num_classes)
    cols = max(1, st.feature_dim // max(1, p))
    inline = not cfg.options.pipeline
    ranks = []
    for w in works:
        it, layers, r = sampling_rank(cal, st, w, inline)
        r.exchange("sample", 3 * it, ID_BYTES * w.count("structure_ids"), inline)
        r.work("load", gather_s(cal, w.count("column_rows"), cols, it, "index"))
        # layer 0 of every micro-batch on this rank's columns (the whole layer restricted to them,
        # as the strategy runs it), the layers above on its own (their first one timed with layer
        # 0's destinations as sources: the stacked partials' rows)
        first = (w.per_iteration("first_layer_dst"), w.per_iteration("first_layer_src"),
                 w.per_iteration("first_layer_edges"))
        above = [(layers[1][0], first[0], layers[1][2]), *layers[2:]] if len(layers) > 1 else []
        r.work("forward_backward", it * fb_s(cal, st, [first, *above], columns=cols))
        r.exchange("comm", 2 * 2 * it, 4.0 * w.count("push_floats") * 2)  # push forward, pull backward
        r.allreduce(it, params)
        r.step(it, params)
        ranks.append(r)
    return finish(cal, st, ranks)


def predict_split(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """Split parallelism: the rank's share of one global batch; per layer one id exchange when
    sampling (two collectives) and one row shuffle forward and one backward (two each)."""
    cfg = st.cfg
    params = param_count(cfg, st.feature_dim, st.num_classes)
    inline = not cfg.options.pipeline
    ranks = []
    for w in works:
        it, layers, r = w.iterations, layer_tuples(w), Rank(cal, st)
        nl = len(layers)
        r.work("sample", it * sample_hops(cal, layers, st.num_nodes))
        r.exchange("sample", 2 * nl * it, ID_BYTES * (w.count("remote_seeds") + w.count("served_seeds")), inline)
        r.work("load", gather_s(cal, w.count("local_rows"), st.feature_dim, it, "index"))
        r.work("forward_backward", it * fb_s(cal, st, layers))
        r.exchange("comm", 2 * 2 * nl * it, 4.0 * (w.count("shuffle_floats") + w.count("shuffle_sent_floats")) * 2)
        r.allreduce(it, params)
        r.step(it, params)
        ranks.append(r)
    return finish(cal, st, ranks)


def hec_hit_rate(cfg: Any, w: RankWork, workers: int) -> float:
    """The share of halo lookups that hit: what the peers pushed within the life span (``ls``
    iterations, at most ``nc`` per peer, layer and iteration) over the rank's halo vertices, at
    most 1 (DistGNN-MB §3.2; a rough figure: pushes go to the vertices in the batches)."""
    opts = cfg.options
    if opts.cache_lines == 0 or workers <= 1:
        return 0.0
    pushed = w.per_iteration("push_rows") / max(1, len(w.layers))
    return float(min(1.0, pushed * max(1, opts.life_span) / max(1.0, w.count("halo"))))


def predict_hec(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """DistGNN-MB: local sampling and features; per layer the AEP push (three collectives) and
    the cache lookup, then the layer over the solid sources and the halo rows that hit."""
    cfg, p = st.cfg, st.workers
    params = param_count(cfg, st.feature_dim, st.num_classes)
    ranks = []
    for w in works:
        it, layers, r = w.iterations, layer_tuples(w), Rank(cal, st)
        h = hec_hit_rate(cfg, w, p)
        kept = [(dst, src - w.per_iteration(f"halo_src_l{i}") * (1 - h),
                 edges - w.per_iteration(f"halo_edges_l{i}") * (1 - h)) for i, (dst, src, edges) in enumerate(layers)]
        r.work("sample", it * sample_hops(cal, layers, st.num_nodes))
        r.work("load", gather_s(cal, w.count("local_rows"), st.feature_dim, it, "index"))
        r.work("forward_backward", it * fb_s(cal, st, kept) + w.count("halo_sources") * cal.gather["row"])
        if cfg.options.cache_lines != 0:
            nbytes = 4.0 * (w.count("push_floats") + w.count("push_floats_sent")) + 2 * ID_BYTES * w.count("push_rows")
            # the push is started and waited for d iterations later (start_alltoallv): its CPU
            # counts, its latency is not the training thread's (between ranks of one host it
            # completes as it starts, gnnflow.comm.local, in microseconds: not counted either)
            r.exchange("comm", 3 * len(layers) * it, nbytes, waits=False)
        r.allreduce(it, params)
        r.step(it, params)
        ranks.append(r)
    return finish(cal, st, ranks)


def predict_distdgl(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """The DistDGL peer: DGL's sampler (its calibrated rates), remote neighbourhoods and feature
    rows by RPC from the servers, DGL's layers (their calibrated ratio to ours), DDP's all-reduce.
    Sampler processes and servers compete for the same cores, so their work is the rank's."""
    cfg = st.cfg
    params = param_count(cfg, st.feature_dim, st.num_classes)
    dgl = cal.dgl or {}
    f_bytes = 4.0 * st.feature_dim
    inline = cfg.options.num_samplers == 0
    ranks = []
    for w in works:
        it, layers, r = w.iterations, layer_tuples(w), Rank(cal, st)
        remote = w.count("remote_features")
        r.work("sample", it * sample_hops(cal, layers, st.num_nodes, per_edge=dgl.get("edge"), per_hop=dgl.get("hop")))
        r.exchange("sample", 2 * len(layers) * it, ID_BYTES * (w.count("remote_seeds") + w.count("served_edges")) * 2,
                   inline)
        r.work("load", gather_s(cal, w.count("input_vertices"), st.feature_dim, it) + remote * f_bytes * cal.gather["scatter"])
        r.exchange("load", 2 * it, remote * (ID_BYTES + f_bytes) * 2, inline)
        r.work("forward_backward", it * dgl.get("layer_ratio", 1.0) * fb_s(cal, st, layers))
        r.allreduce(it, params)
        r.step(it, params)
        ranks.append(r)
    return finish(cal, st, ranks)


def spmm_width(layer: int, d_in: int, d_out: int) -> int:
    """MG-GCN §4.4's order: the SpMM runs on the narrower side (layer 0: before the GEMM whenever
    ``d_in <= 2 d_out``)."""
    first = d_in <= 2 * d_out if layer == 0 else d_in < d_out
    return d_in if first else d_out


def predict_fullbatch(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """MG-GCN: per layer P broadcast rounds of the narrower side's row blocks, the backward's
    except in the first layer (§4.4); the rank's forward/backward (tile SpMM, GEMMs, the rest)
    timed at its own shape (:func:`gnnflow.advise.shapes.timed_rows`), else per layer the raw
    SpMM and GEMM rates: the SpMM forward and (but in the first layer) backward, one GEMM
    forward and two backward."""
    from gnnflow.strategies.memory import layer_dims

    cfg, p = st.cfg, st.workers
    params = param_count(cfg, st.feature_dim, st.num_classes)
    dims = layer_dims(cfg, max(1, st.feature_dim), st.num_classes)
    coef = cal.layer_coefficients("gcn")

    def linear(n: float, nnz: float) -> float:
        return sum((1 if i == 0 else 2) * nnz * spmm_width(i, d_in, d_out) / cal.spmm
                   + 3 * n * d_in * d_out / cal.gemm + 2 * coef[0] + coef[4] * 2 * n * (d_in + d_out)
                   for i, (d_in, d_out) in enumerate(dims))

    ranks = []
    for w in works:
        n, nnz, r = w.count("local_rows"), w.count("tile_nnz"), Rank(cal, st, batched=False)
        timed = timed_rows(cal, st, n, w.count("train_rows"), nnz, linear)
        r.work("forward_backward", linear(n, nnz) if timed is None else timed)
        for i, (d_in, d_out) in enumerate(dims):
            width = spmm_width(i, d_in, d_out)
            passes = 1 if i == 0 else 2  # the first layer's backward needs no SpMM
            r.exchange("comm", passes * (p - 1), passes * 4.0 * width * w.count("broadcast_rows"), kind="broadcast")
        r.allreduce(1, params)
        r.step(1, params)
        ranks.append(r)
    return finish(cal, st, ranks)


def predict_dgcl(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """DGCL: the unchanged layers on ``inner <- inner | halo`` (timed on such a block, its halo
    rows arriving between layers; the replication baseline's L-hop blocks by the linear model)
    with a halo exchange before every layer (projected rows for a narrowing GCN layer) and its
    reverse in backward."""
    from gnnflow.strategies.memory import layer_dims

    cfg = st.cfg
    params = param_count(cfg, st.feature_dim, st.num_classes)
    dims = layer_dims(cfg, max(1, st.feature_dim), st.num_classes)
    project = cfg.model == "gcn" and cfg.options.project
    exchanged = cfg.options.planner != "replication"
    ranks = []
    for w in works:
        r = Rank(cal, st, batched=False)
        r.work("forward_backward", fb_s(cal, st, layer_tuples(w), timed=exchanged,
                                        halo="halo-project" if project else "halo"))
        if exchanged:
            for d_in, d_out in dims:
                width = d_out if project and d_in > d_out else d_in
                r.exchange("comm", 2 * 2, 2 * 4.0 * width * (w.count("halo_rows") + w.count("halo_rows_sent")))
        r.allreduce(1, params)
        r.step(1, params)
        ranks.append(r)
    return finish(cal, st, ranks)


PREDICTORS = {"single": predict_single, "data": predict_data, "distdgl": predict_distdgl,
              "split": predict_split, "p3": predict_p3, "hec": predict_hec, "fullbatch": predict_fullbatch,
              "dgcl": predict_dgcl}


def predict(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """The epoch of ``st.cfg.strategy`` on ``works`` (one :class:`RankWork` per rank)."""
    pred = PREDICTORS[st.cfg.strategy](cal, st, works)
    pred.iterations = max((w.iterations for w in works), default=1)
    if not math.isfinite(pred.epoch_s):
        raise ValueError(f"cost model: no finite epoch time for {st.cfg.strategy}")
    return pred
