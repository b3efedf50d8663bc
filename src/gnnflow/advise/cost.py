"""Epoch time of each strategy: the counts of :mod:`gnnflow.advise.counts` times the rates of
:mod:`gnnflow.advise.calibrate` (issue 35.1; every term is written out in docs/advise.md).

For each rank the model adds up the CPU seconds of its stages over one epoch, in the records'
stage names:

* ``sample`` — per sampled hop ``hop + row x destinations + edge x edges`` (and the relabelling
  bitmap's scan of the graph's vertices where it is used), plus the sampling the rank does for its
  peers' remote frontier vertices;
* ``load`` — gathers of the rank's own input rows (and of the rows its peers ask it for), the copy
  of cache hits and received rows into the batch, the bytes of the exchange;
* ``forward_backward`` — the model's work terms per iteration (:mod:`gnnflow.advise.features`)
  times the calibrated per-term seconds; split parallelism's and P3's layer exchanges and HEC's
  AEP push, bytes and latencies, go under ``comm``;
* ``allreduce`` — per iteration one gradient all-reduce: latency plus the weights' bytes;
* ``step`` — Adam: per call plus per weight;
* ``glue`` — per iteration a strategy's own Python work between the measured pieces (queues,
  stitching, bookkeeping), :data:`GLUE` small torch operations' worth.

The rank's wall time is its CPU seconds over the share of a core it gets (``cores`` of the
calibration: P busy ranks on this host get that many cores together, so one gets
``min(1, cores / P)``), plus the waits that are not CPU: the latency of every lock-step collective
on the training thread (with the pipeline on, the sample and load exchanges run in background
threads and only the all-reduce waits).  The epoch is the slowest rank's time.  A single process
computes forward/backward with every core's thread (``threads`` of the calibration).

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
from gnnflow.advise.counts import RankWork
from gnnflow.advise.features import model_terms, param_count

STAGES = ("sample", "load", "forward_backward", "comm", "allreduce", "step", "glue", "wait")
#: per-iteration Python work of each strategy beyond the measured pieces, in small torch
#: operations (the calibration's ``op``); fitted on the default graph's runs (docs/advise.md)
GLUE = {"single": 40.0, "data": 150.0, "distdgl": 400.0, "split": 250.0, "p3": 250.0, "hec": 250.0,
        "fullbatch": 200.0, "dgcl": 200.0}
#: collectives on the training thread per iteration besides the all-reduce (lock-step waits)
ID_BYTES = 8


@dataclass
class Prediction:
    """One candidate's predicted epoch: the slowest rank's stage seconds and their sum."""

    epoch_s: float
    stages: dict[str, float]
    per_rank_s: list[float] = field(default_factory=list)

    @property
    def dominant(self) -> str:
        return max(self.stages, key=lambda k: self.stages[k]) if self.stages else ""

    def reason(self) -> str:
        """The dominant stage and its share, e.g. ``forward_backward 61 %``."""
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


def gather_s(cal: Calibration, rows: float, dim: int, calls: float = 1.0) -> float:
    g = cal.gather
    return calls * g["call"] + rows * (g["row"] + g["byte"] * 4.0 * dim)


def fb_s(cal: Calibration, st: Setting, layers: list[tuple[float, float, float]], in_dim: int | None = None,
         model: str | None = None) -> float:
    """Forward + backward seconds of one batch's blocks (one thread)."""
    key = f"{model or st.cfg.model}@cuda" if st.device == "cuda" else (model or st.cfg.model)
    coef = cal.layer_coefficients(key if key in cal.layers else (model or st.cfg.model))
    terms = model_terms(st.cfg, layers, st.feature_dim if in_dim is None else in_dim, st.num_classes)
    return float(terms @ coef)


def net_s(net: dict[str, float], nbytes: float, collectives: float) -> float:
    """Latency of ``collectives`` lock-step exchanges plus the seconds of ``nbytes`` sent."""
    return collectives * net["latency"] + nbytes * net["byte"]


def allreduce_s(net: dict[str, float], params: int, workers: int) -> float:
    if workers <= 1:
        return 0.0
    return net["allreduce_latency"] + 4.0 * params * net["allreduce_byte"]


def step_s(cal: Calibration, params: int) -> float:
    return cal.step["call"] + cal.step["param"] * params


def layer_tuples(w: RankWork) -> list[tuple[float, float, float]]:
    return [(x.dst, x.src, x.edges) for x in w.layers]


def share(cal: Calibration, st: Setting) -> float:
    """The core share one rank gets (see the module docstring)."""
    if st.workers <= 1:
        return 1.0
    net = cal.net(st.local_ranks)
    return min(1.0, max(1e-3, net.get("cores", 1.0)) / st.local_ranks)


def finish(cal: Calibration, st: Setting, cpu: list[dict[str, float]], waits: list[dict[str, float]]) -> Prediction:
    """The epoch from per-rank CPU seconds and waits per stage (see the module docstring)."""
    f = share(cal, st)
    per_rank = []
    for c, w in zip(cpu, waits, strict=True):
        per_rank.append({k: c.get(k, 0.0) / f + w.get(k, 0.0) for k in set(c) | set(w)})
    totals = [sum(r.values()) for r in per_rank]
    slow = int(np.argmax(totals))
    stages = {k: float(v) for k, v in sorted(per_rank[slow].items()) if v > 0}
    return Prediction(epoch_s=float(totals[slow]), stages=stages, per_rank_s=[float(t) for t in totals])


# ------------------------------------------------------------------------------------------ strategies
def predict_single(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    w = works[0]
    cfg, it = st.cfg, w.iterations
    params = param_count(cfg, st.feature_dim, st.num_classes)
    layers = layer_tuples(w)
    fb = fb_s(cal, st, layers) / max(1.0, cal.threads)
    if cfg.options.full_batch:
        cpu = {"forward_backward": fb, "step": step_s(cal, params), "glue": GLUE["single"] * cal.op}
        return finish(cal, st, [cpu], [{}])
    cpu = {"sample": it * sample_hops(cal, layers, st.num_nodes),
           "load": gather_s(cal, w.count("features_loaded"), st.feature_dim, it),
           "forward_backward": it * fb, "step": it * step_s(cal, params), "glue": it * GLUE["single"] * cal.op}
    return finish(cal, st, [cpu], [{}])


def predict_data(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """Data-parallel ranks (``data``; also the base of P3 and DistDGL below)."""
    cfg, p = st.cfg, st.workers
    net = cal.net(st.local_ranks)
    params = param_count(cfg, st.feature_dim, st.num_classes)
    f_bytes = 4.0 * st.feature_dim
    cpu, waits = [], []
    for w in works:
        it = w.iterations
        layers = layer_tuples(w)
        sample = it * sample_hops(cal, layers, st.num_nodes) + cal.sampler["row"] * w.count("served_seeds") \
            + cal.sampler["edge"] * w.count("served_edges")
        sample_bytes = ID_BYTES * (w.count("remote_seeds") + w.count("served_seeds") + w.count("served_edges"))
        exch = w.count("exchange_hops") * 3  # per hop: request counts, ids, replies
        remote = w.count("remote_features")
        load = gather_s(cal, w.count("local_rows") + w.count("served_rows"), st.feature_dim, it) \
            + (w.count("cache_hits") + remote) * f_bytes * cal.gather["scatter"]
        load_bytes = remote * (ID_BYTES + f_bytes) + w.count("served_rows") * (ID_BYTES + f_bytes)
        load_coll = 3 * it if p > 1 else 0
        if cfg.graph_degrees:  # whole-graph degrees come with the features
            load_bytes += (w.count("remote_features") + w.count("cache_hits")) * (ID_BYTES + 8)
            load_coll *= 2
        c = {"sample": sample + sample_bytes * net["byte"], "load": load + load_bytes * net["byte"],
             "forward_backward": it * fb_s(cal, st, layers), "step": it * step_s(cal, params),
             "allreduce": it * 4.0 * params * net["allreduce_byte"] if p > 1 else 0.0,
             "glue": it * GLUE["data"] * cal.op}
        wt = {"allreduce": it * net["allreduce_latency"] if p > 1 else 0.0}
        if not cfg.options.pipeline:  # the exchanges wait on the training thread
            wt["sample"] = exch * net["latency"]
            wt["load"] = load_coll * net["latency"]
        cpu.append(c)
        waits.append(wt)
    return finish(cal, st, cpu, waits)


def predict_p3(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """P3*: data-parallel sampling, then every rank computes the first layer of every micro-batch
    on its feature columns and pushes the partials to their owners."""
    cfg, p = st.cfg, st.workers
    net = cal.net(st.local_ranks)
    params = param_count(cfg, st.feature_dim, st.num_classes)
    cols = max(1, st.feature_dim // max(1, p))
    cpu, waits = [], []
    for w in works:
        it = w.iterations
        layers = layer_tuples(w)
        sample = it * sample_hops(cal, layers, st.num_nodes) + cal.sampler["row"] * w.count("served_seeds") \
            + cal.sampler["edge"] * w.count("served_edges")
        sample_bytes = ID_BYTES * (w.count("remote_seeds") + w.count("served_seeds") + w.count("served_edges")
                                   + w.count("structure_ids"))
        first = (w.per_iteration("first_layer_dst"), w.per_iteration("first_layer_src"),
                 w.per_iteration("first_layer_edges"))
        rest = fb_s(cal, st, layers) - _first_layer_s(cal, st, layers[0], st.feature_dim)
        fb = _first_layer_s(cal, st, first, cols) + rest
        push_bytes = 4.0 * w.count("push_floats") * 2  # the push forward, the pull backward
        c = {"sample": sample + sample_bytes * net["byte"],
             "load": gather_s(cal, w.count("column_rows"), cols, it),
             "forward_backward": it * fb, "comm": push_bytes * net["byte"],
             "step": it * step_s(cal, params), "allreduce": it * 4.0 * params * net["allreduce_byte"],
             "glue": it * GLUE["p3"] * cal.op}
        wt = {"allreduce": it * net["allreduce_latency"], "comm": it * 2 * net["latency"]}
        if not cfg.options.pipeline:
            wt["sample"] = (w.count("exchange_hops") * 3 + it) * net["latency"]
        cpu.append(c)
        waits.append(wt)
    return finish(cal, st, cpu, waits)


def _first_layer_s(cal: Calibration, st: Setting, layer: tuple[float, float, float], in_dim: int) -> float:
    """Forward + backward seconds of the first layer alone (``in_dim`` wide inputs)."""
    from gnnflow.advise.features import layer_terms
    from gnnflow.strategies.memory import layer_dims

    d_out = layer_dims(st.cfg, max(1, st.feature_dim), st.num_classes)[0][1]
    terms = layer_terms(st.cfg.model, *layer, in_dim, d_out, st.cfg.heads if st.cfg.model == "gat" else 1)
    return float(terms @ cal.layer_coefficients(st.cfg.model))


def predict_split(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """Split parallelism: the rank's share of one global batch; per layer one id exchange when
    sampling and one row shuffle forward and backward."""
    cfg, p = st.cfg, st.workers
    net = cal.net(st.local_ranks)
    params = param_count(cfg, st.feature_dim, st.num_classes)
    cpu, waits = [], []
    for w in works:
        it = w.iterations
        layers = layer_tuples(w)
        nl = len(layers)
        sample = it * sample_hops(cal, layers, st.num_nodes)
        sample_bytes = ID_BYTES * (w.count("remote_seeds") + w.count("served_seeds"))
        shuffle_bytes = 4.0 * (w.count("shuffle_floats") + w.count("shuffle_sent_floats")) * 2  # fwd + bwd
        c = {"sample": sample + sample_bytes * net["byte"],
             "load": gather_s(cal, w.count("local_rows"), st.feature_dim, it),
             "forward_backward": it * fb_s(cal, st, layers), "comm": shuffle_bytes * net["byte"],
             "step": it * step_s(cal, params), "allreduce": it * 4.0 * params * net["allreduce_byte"],
             "glue": it * GLUE["split"] * cal.op}
        wt = {"allreduce": it * net["allreduce_latency"], "comm": it * nl * 2 * 2 * net["latency"]}
        if not cfg.options.pipeline:
            wt["sample"] = it * nl * 2 * net["latency"]
        if p <= 1:
            c["comm"], wt = 0.0, {}
        cpu.append(c)
        waits.append(wt)
    return finish(cal, st, cpu, waits)


def hec_hit_rate(cfg: Any, w: RankWork, workers: int, layer: int) -> float:
    """The share of a layer's halo sources found in the cache: what the peers pushed within the
    life span (``ls`` iterations, at most ``nc`` per peer and iteration) over the halo vertices,
    at most 1 (DistGNN-MB §3.2; a rough figure: pushes go to the vertices in the batches)."""
    opts = cfg.options
    if opts.cache_lines == 0 or workers <= 1:
        return 0.0
    pushed = min(w.per_iteration("push_rows") / max(1, len(w.layers)), (workers - 1) * opts.pushes_per_rank)
    halo = max(1.0, w.count("halo"))
    return float(min(1.0, pushed * max(1, opts.life_span) / halo))


def predict_hec(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """DistGNN-MB: local sampling and features; per layer the AEP push and the cache lookup, and
    the layer over the solid sources and the cached halo rows."""
    cfg, p = st.cfg, st.workers
    net = cal.net(st.local_ranks)
    params = param_count(cfg, st.feature_dim, st.num_classes)
    cpu, waits = [], []
    for w in works:
        it = w.iterations
        layers = layer_tuples(w)
        kept = []
        for i, (dst, src, edges) in enumerate(layers):
            h = hec_hit_rate(cfg, w, p, i)
            miss_src = w.per_iteration(f"halo_src_l{i}") * (1 - h)
            miss_edges = w.per_iteration(f"halo_edges_l{i}") * (1 - h)
            kept.append((dst, src - miss_src, edges - miss_edges))
        push_bytes = 4.0 * (w.count("push_floats") + w.count("push_floats_sent")) + 2 * ID_BYTES * w.count("push_rows")
        lookups = w.count("halo_sources") * cal.gather["row"]
        c = {"sample": it * sample_hops(cal, layers, st.num_nodes),
             "load": gather_s(cal, w.count("local_rows"), st.feature_dim, it),
             "forward_backward": it * fb_s(cal, st, kept) + lookups,
             "comm": push_bytes * net["byte"], "step": it * step_s(cal, params),
             "allreduce": it * 4.0 * params * net["allreduce_byte"] if p > 1 else 0.0,
             "glue": it * GLUE["hec"] * cal.op}
        wt = {"allreduce": it * net["allreduce_latency"] if p > 1 else 0.0,
              "comm": it * len(layers) * 3 * net["latency"] if p > 1 and cfg.options.cache_lines != 0 else 0.0}
        cpu.append(c)
        waits.append(wt)
    return finish(cal, st, cpu, waits)


def predict_distdgl(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """The DistDGL peer: DGL's sampler (its calibrated rates), remote neighbourhoods and feature
    rows by RPC from the servers, DGL's layers (their calibrated ratio to ours), DDP's all-reduce.
    Sampler processes and servers compete for the same cores, so their work is the rank's."""
    cfg = st.cfg
    net = cal.net(st.local_ranks)
    params = param_count(cfg, st.feature_dim, st.num_classes)
    dgl = cal.dgl or {}
    ratio = dgl.get("layer_ratio", 1.0)
    f_bytes = 4.0 * st.feature_dim
    cpu, waits = [], []
    for w in works:
        it = w.iterations
        layers = layer_tuples(w)
        sample = it * sample_hops(cal, layers, st.num_nodes, per_edge=dgl.get("edge"), per_hop=dgl.get("hop"))
        remote = w.count("remote_features")
        rpc_bytes = ID_BYTES * (w.count("remote_seeds") + w.count("served_edges")) + remote * (ID_BYTES + f_bytes)
        c = {"sample": sample, "load": gather_s(cal, w.count("input_vertices"), st.feature_dim, it)
             + remote * f_bytes * cal.gather["scatter"] + 2 * rpc_bytes * net["byte"],
             "forward_backward": it * ratio * fb_s(cal, st, layers), "step": it * step_s(cal, params),
             "allreduce": it * 4.0 * params * net["allreduce_byte"], "glue": it * GLUE["distdgl"] * cal.op}
        wt = {"allreduce": it * net["allreduce_latency"],
              "wait": it * (len(layers) + 1) * 2 * net["latency"] if cfg.options.num_samplers == 0 else 0.0}
        cpu.append(c)
        waits.append(wt)
    return finish(cal, st, cpu, waits)


def spmm_width(layer: int, d_in: int, d_out: int) -> int:
    """MG-GCN §4.4's order: the SpMM runs on the narrower side (layer 0: before the GEMM whenever
    ``d_in <= 2 d_out``)."""
    first = d_in <= 2 * d_out if layer == 0 else d_in < d_out
    return d_in if first else d_out


def predict_fullbatch(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """MG-GCN: per layer P broadcast rounds of the narrower side's row blocks with the tile SpMM,
    one GEMM forward, two backward, and the backward SpMM except in the first layer."""
    from gnnflow.strategies.memory import layer_dims

    cfg, p = st.cfg, st.workers
    net = cal.net(st.local_ranks) if p > 1 else {"latency": 0.0, "byte": 0.0, "allreduce_latency": 0.0,
                                                  "allreduce_byte": 0.0}
    params = param_count(cfg, st.feature_dim, st.num_classes)
    dims = layer_dims(cfg, max(1, st.feature_dim), st.num_classes)
    coef = cal.layer_coefficients("gcn")
    cpu, waits = [], []
    for w in works:
        n, nnz = w.count("local_rows"), w.count("tile_nnz")
        comp = bytes_ = lat = 0.0
        for i, (d_in, d_out) in enumerate(dims):
            width = spmm_width(i, d_in, d_out)
            passes = 1 if i == 0 else 2  # the first layer's backward needs no SpMM (§4.4)
            comp += passes * nnz * width / cal.spmm + 3 * n * d_in * d_out / cal.gemm
            comp += coef[0] * 2 + coef[4] * 2 * n * (d_in + d_out)
            bytes_ += passes * 4.0 * width * w.count("broadcast_rows")
            lat += passes * (p - 1) * net["latency"] if p > 1 else 0.0
        c = {"forward_backward": comp, "comm": bytes_ * net["byte"], "step": step_s(cal, params),
             "allreduce": 4.0 * params * net["allreduce_byte"], "glue": GLUE["fullbatch"] * cal.op}
        cpu.append(c)
        waits.append({"comm": lat, "allreduce": net["allreduce_latency"]})
    return finish(cal, st, cpu, waits)


def predict_dgcl(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """DGCL: the unchanged layers on ``inner <- inner | halo`` with a halo exchange before every
    layer (projected rows for a narrowing GCN layer) and its reverse in backward."""
    from gnnflow.strategies.memory import layer_dims

    cfg = st.cfg
    net = cal.net(st.local_ranks)
    params = param_count(cfg, st.feature_dim, st.num_classes)
    dims = layer_dims(cfg, max(1, st.feature_dim), st.num_classes)
    project = cfg.model == "gcn" and cfg.options.project
    cpu, waits = [], []
    for w in works:
        layers = layer_tuples(w)
        fb = fb_s(cal, st, layers)
        bytes_ = lat = 0.0
        if cfg.options.planner != "replication":
            for d_in, d_out in dims:
                width = d_out if project and d_in > d_out else d_in
                bytes_ += 2 * 4.0 * width * (w.count("halo_rows") + w.count("halo_rows_sent"))
                lat += 2 * 2 * net["latency"]
        c = {"forward_backward": fb, "comm": bytes_ * net["byte"], "step": step_s(cal, params),
             "allreduce": 4.0 * params * net["allreduce_byte"], "glue": GLUE["dgcl"] * cal.op}
        cpu.append(c)
        waits.append({"comm": lat, "allreduce": net["allreduce_latency"]})
    return finish(cal, st, cpu, waits)


PREDICTORS = {"single": predict_single, "data": predict_data, "distdgl": predict_distdgl,
              "split": predict_split, "p3": predict_p3, "hec": predict_hec, "fullbatch": predict_fullbatch,
              "dgcl": predict_dgcl}


def predict(cal: Calibration, st: Setting, works: list[RankWork]) -> Prediction:
    """The epoch of ``st.cfg.strategy`` on ``works`` (one :class:`RankWork` per rank)."""
    pred = PREDICTORS[st.cfg.strategy](cal, st, works)
    if not math.isfinite(pred.epoch_s):
        raise ValueError(f"cost model: no finite epoch time for {st.cfg.strategy}")
    return pred
