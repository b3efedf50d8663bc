"""This machine's rates, measured once by short microbenchmarks (``gnnflow advise --calibrate``).

Every rate is measured on the code the strategies run, in CPU seconds of one thread (the thread's
own clock, :func:`time.thread_time`), so other work on the host changes a rate less than a wall
time (caches and memory shared with other processes still raise it); how much of the host's cores
a job's ranks actually get is measured separately (``cores``, below), and what a rank's process
adds to a rate (``rank_<stage>``) too:

* ``sampler`` — :class:`gnnflow.sampling.NeighborSampler` hops on a synthetic power-law graph,
  fitted as ``hop + row x destinations + edge x sampled edges`` seconds per hop, and ``scan``, the
  cost per vertex of the relabelling bitmap's scan (a hop scans the graph's vertices once when
  the bitmap is used, :class:`gnnflow.sampling.neighbor.Relabeler`);
* ``gather`` — rows of a memory-mapped ``float32`` feature file gathered as the feature store does
  (``np.take`` into a buffer): ``call + row x rows + byte x bytes``; ``scatter``: placing rows
  into a batch (:func:`~gnnflow.strategies.rows.scatter_rows`) per byte; ``store_*`` and ``index_*``: the same fit of the load
  stages' own row paths (:meth:`FeatureStore.fetch`; ``take_rows`` of the memory map), each
  timed call reading other rows than the last;
* ``layers`` — per model (sage, gcn, gat) forward and backward of the real model
  (:func:`gnnflow.nn.build_model_from_config`) with cross-entropy, on sampled blocks of many sizes
  and widths, fitted (non-negative least squares) on the work terms of
  :mod:`gnnflow.advise.features`; ``fit_error`` is the median relative error of the fit (the cost
  model times mini-batch shapes instead, :mod:`gnnflow.advise.shapes`, and reads the fit where it
  does not);
* ``step`` — Adam steps on models of several sizes: ``call + param x weights``;
* ``gemm`` (multiply-adds/s), ``spmm`` (non-zeros x width/s, the full-batch strategy's CSR tile
  kernel) — raw rates of the full-batch strategy's hand-written layers: its prediction on a GPU,
  and on the CPU the scale from a timed rank's rounded shape to its exact one
  (:func:`gnnflow.advise.shapes.timed_rows`);
* ``threads`` — wall-time speed-up of forward/backward with all cores' threads over one (what a
  single-process run, which keeps every core's thread, gains);
* ``collectives`` (:mod:`gnnflow.advise.collectives`) — per rank count P: gloo all-reduce and
  all-to-all latency and seconds per byte between P local processes, and ``cores``: how many
  cores' worth of CPU P busy processes get together (P x each one's CPU/wall share);
* ``dgl`` — DGL 1.1.3's own neighbour sampler per edge and its SAGE layer's forward/backward
  relative to ours (the DistDGL peer), when DGL is installed;
* ``strategies`` — the strategy factors: every candidate trained for a few epochs on four probe
  graphs, measured against modelled epoch time fitted as ``factor x modelled + overhead x
  iterations`` per model, rank count and candidate (:mod:`gnnflow.advise.strategy_probe`;
  ``strategy_probe`` says with which settings and graphs, and when).

The file is small JSON; :func:`read_calibration` checks it and names what is wrong.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.advise.features import TERMS, model_terms
from gnnflow.errors import ConfigError

log = logging.getLogger("gnnflow.advise")
#: 2 (2026-11-28): P3's forward/backward timed on the whole first layer restricted to the rank's
#: columns; the strategy factors of version 1 were fitted to the model before (P3's 2-3 times)
VERSION = 2
MODELS = ("sage", "gcn", "gat")
#: fields of earlier calibration files that nothing reads now (dropped when a file is read):
#: ``op``, seconds of one small torch operation
RETIRED = ("op",)
#: draws (rows, targets) a timed gather or sampling hop cycles through (one per call of
#: :func:`cpu_time`'s warm-up and repeats)
GATHER_DRAWS = 6


@dataclass
class Calibration:
    """Rates of one machine (see the module docstring); seconds are CPU seconds of one thread."""

    version: int = VERSION
    created: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    sampler: dict[str, float] = field(default_factory=dict)
    gather: dict[str, float] = field(default_factory=dict)
    layers: dict[str, dict[str, float]] = field(default_factory=dict)
    step: dict[str, float] = field(default_factory=dict)
    gemm: float = 0.0
    spmm: float = 0.0
    threads: float = 1.0
    collectives: dict[str, dict[str, float]] = field(default_factory=dict)
    dgl: dict[str, float] = field(default_factory=dict)
    #: strategy factors, ``model -> rank count -> candidate label -> [factor, overhead seconds per
    #: iteration]`` (:mod:`gnnflow.advise.strategy_probe`); empty: the model alone
    strategies: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    #: per model, what the strategy probe ran (settings, graphs), the points its fits were made
    #: from (``points``: rank count -> label -> ``[modelled, iterations, measured]`` per graph) and when
    strategy_probe: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: forward/backward seconds timed at a run's own block shapes (:mod:`gnnflow.advise.shapes`),
    #: measured where the advice runs and kept in memory only (not written by :meth:`to_json`)
    shapes: dict[str, float] = field(default_factory=dict)

    def layer_coefficients(self, model: str) -> np.ndarray:
        """The per-term seconds of ``model``'s layers (GraphSAGE's for models not calibrated)."""
        fit = self.layers.get(model) or self.layers.get("sage")
        if not fit:
            raise ConfigError(f"calibration: no layer rates for model {model!r}; rerun gnnflow advise --calibrate")
        return np.array([fit[t] for t in TERMS])

    def net(self, workers: int) -> dict[str, float]:
        """The collectives' figures for ``workers`` ranks: measured, else the nearest measured
        count's, latency scaled by ``log2`` of the counts."""
        if str(workers) in self.collectives:
            return self.collectives[str(workers)]
        if not self.collectives:
            raise ConfigError("calibration: no collective figures; rerun gnnflow advise --calibrate")
        have = sorted(int(k) for k in self.collectives if int(k) > 1 or workers <= 1) or \
            sorted(int(k) for k in self.collectives)
        near = min(have, key=lambda k: abs(math.log2(max(k, 1)) - math.log2(max(workers, 1))))
        out = dict(self.collectives[str(near)])
        scale = max(1.0, math.log2(max(workers, 2))) / max(1.0, math.log2(max(near, 2)))
        for k in ("latency", "allreduce_latency", "broadcast_latency"):
            if k in out:
                out[k] = out[k] * scale
        from gnnflow.advise.collectives import usable_cores

        out["cores"] = float(min(workers, usable_cores())) * out.get("cores", 1.0) / max(1.0, min(near, usable_cores()))
        return out

    def strategy_factor(self, model: str, workers: int, label: str, strategy: str) -> tuple[float, float]:
        """``(factor, overhead seconds per iteration)`` of candidate ``label`` (of ``strategy``)
        for ``model`` on ``workers`` ranks (:mod:`gnnflow.advise.strategy_probe`): its own fit, else
        its strategy's (default options), each at the nearest probed rank count (``log2``
        distance, the larger on a tie), else another model's; ``(1, 0)`` when there is none."""
        for m in [model] + sorted(k for k in self.strategies if k != model):
            per_p = self.strategies.get(m) or {}
            near = sorted(per_p, key=lambda k: (abs(math.log2(max(int(k), 1)) - math.log2(max(workers, 1))), -int(k)))
            for key in (label, strategy):
                for k in near:
                    if key in per_p[k]:
                        factor, overhead = per_p[k][key]
                        return float(factor), float(overhead)
        return 1.0, 0.0

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("shapes")
        return json.dumps(data, indent=1, sort_keys=True)


def refresh_host(cal: Calibration, workers: list[int]) -> None:
    """Measure the host's state again (a few seconds): the cores P busy processes get now and the
    speed-up of every core's threads, for a host whose other work changes (the bench does this
    before each configuration; a quiet host needs it never)."""
    from gnnflow.advise.collectives import host_cores

    for p in sorted({1, *workers}):
        entry = cal.collectives.setdefault(str(p), dict(cal.net(p)) if cal.collectives else {})
        entry["cores"] = host_cores(p)
    cal.threads = calibrate_threads(*calibration_graph(nodes=20_000))


def read_calibration(path: str | os.PathLike[str]) -> Calibration:
    """A calibration file (:func:`calibrate`'s output); a missing or malformed one fails in one
    line naming it."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--calibration {path}: no such file; write one with gnnflow advise --calibrate --out {path}")
    try:
        data = json.loads(p.read_text())
        for old in RETIRED:  # figures earlier files hold and nothing reads now
            data.pop(old, None)
        cal = Calibration(**data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--calibration {path}: not a calibration file ({exc}); rerun gnnflow advise "
                          "--calibrate") from None
    if cal.version != VERSION:
        raise ConfigError(f"--calibration {path}: version {cal.version}, this gnnflow reads {VERSION}; rerun "
                          "gnnflow advise --calibrate")
    for name in ("sampler", "gather", "layers", "step", "collectives"):
        if not getattr(cal, name):
            raise ConfigError(f"--calibration {path}: no {name!r} figures; rerun gnnflow advise --calibrate")
    return cal


def machine() -> dict[str, Any]:
    """The host a calibration was measured on (and its load then)."""
    import platform

    info: dict[str, Any] = {"host": platform.node(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
                            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    return info


# ------------------------------------------------------------------------------------------ timing
def cpu_time(fn: Callable[[], Any], repeats: int = 3, clock: Callable[[], float] = time.thread_time) -> float:
    """Median seconds of ``clock`` (default: this thread's CPU time) over ``repeats`` calls of
    ``fn`` (one warm-up call)."""
    fn()
    out = []
    for _ in range(repeats):
        t = clock()
        fn()
        out.append(clock() - t)
    return float(np.median(out))


def nnls(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Non-negative least squares, relative: each row weighted by ``1 / y`` so small and large
    runs count alike (a model's error is judged relative to the time)."""
    from scipy.optimize import nnls as _nnls

    w = 1.0 / np.maximum(y, 1e-9) if weights is None else weights
    scale = np.maximum(np.abs(x * w[:, None]).max(0), 1e-30)  # columns of similar size for the solver
    coef, _ = _nnls((x * w[:, None]) / scale, y * w)
    return coef / scale


def relative_errors(x: np.ndarray, y: np.ndarray, coef: np.ndarray) -> np.ndarray:
    return np.abs(x @ coef - y) / np.maximum(y, 1e-12)


# ------------------------------------------------------------------------------------------ pieces
def calibration_graph(nodes: int = 100_000, degree: float = 12.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A power-law synthetic graph's CSR (the generator's, in memory)."""
    from gnnflow.data.synthetic import generate_synthetic

    g = generate_synthetic(num_nodes=nodes, avg_degree=degree, feature_dim=1, num_classes=2, seed=seed)
    return np.asarray(g["indptr"]), np.asarray(g["indices"])


def calibrate_sampler(indptr: np.ndarray, indices: np.ndarray) -> dict[str, float]:
    """Seconds per hop, per destination row, per sampled edge; and per vertex of the bitmap scan."""
    from gnnflow.sampling import NeighborSampler

    n = indptr.shape[0] - 1
    mark = np.zeros(n, dtype=bool)
    scan = cpu_time(lambda: np.flatnonzero(mark), 5) / n
    rng = np.random.default_rng(1)
    rows, ys = [], []
    for batch in (64, 256, 1024, 4096):
        for fanout in (3, 10, 25):
            draws = [rng.choice(n, size=batch, replace=False) for _ in range(GATHER_DRAWS)]
            s = NeighborSampler(indptr, indices, [fanout], seed=0)
            edges: list[int] = []

            def hop(targets: np.ndarray, s: Any = s, edges: list[int] = edges) -> None:
                edges.append(s.sample_blocks(targets)[0].num_edges)

            t = cpu_time(_cycling(draws, hop))  # other targets each call: their lists not in the caches
            num_edges = float(np.mean(edges))
            bitmap = n <= 64 * max(1.0, num_edges)
            rows.append([1.0, batch, num_edges])
            ys.append(max(1e-7, t - (scan * n if bitmap else 0.0)))
    x, y = np.array(rows), np.array(ys)
    coef = nnls(x, y)
    return {"hop": float(coef[0]), "row": float(coef[1]), "edge": float(coef[2]), "scan": float(scan),
            "fit_error": float(np.median(relative_errors(x, y, coef)))}


def _cycling(draws: list[Any], fn: Callable[[Any], Any]) -> Callable[[], Any]:
    """``fn`` of the next of ``draws`` at each call: a timed gather or hop reads other rows each
    time, as a training step's does (rows read again at once are in the caches: up to 3x faster)."""
    it = itertools.cycle(draws)
    return lambda: fn(next(it))


def _row_paths(table: np.ndarray, rng: np.random.Generator, count: int) -> tuple[float, float]:
    """CPU seconds of ``count`` random rows read by the two paths the strategies' load stages run:
    :meth:`FeatureStore.fetch` of one rank whose part owns a random half of the vertices (owner
    lookup, global-to-local map, gather), and :func:`take_rows` of the memory map at positions
    in batch order (single, split, P3, HEC)."""
    import types

    from gnnflow.partition.local_ids import LocalIds
    from gnnflow.strategies.minibatch.feature_store import FeatureStore
    from gnnflow.strategies.rows import take_rows

    n = table.shape[0]
    inner = np.sort(rng.choice(2 * n, size=n, replace=False))
    halo = np.zeros(0, dtype=np.int64)
    part = types.SimpleNamespace(part_id=0, num_inner=n, features=table,
                                 global_to_local=LocalIds(inner, halo))
    store = FeatureStore(part, np.zeros(2 * n, dtype=np.int8))
    ids = [torch.from_numpy(rng.choice(inner, size=count, replace=False)) for _ in range(GATHER_DRAWS)]
    pos = [rng.choice(n, size=count, replace=False) for _ in range(GATHER_DRAWS)]
    fetch = cpu_time(_cycling(ids, store.fetch), 5)
    index = cpu_time(_cycling(pos, lambda p: take_rows(table, p)), 5)
    return fetch, index


def calibrate_gather() -> dict[str, float]:
    """A memory-mapped feature file's random row gathers (``np.take``, what an owner serves), the
    load stages' own row paths (``store_*``, ``index_*``: :func:`_row_paths`), and the batch
    scatter."""
    from gnnflow.strategies.rows import scatter_rows

    rng = np.random.default_rng(2)
    rows_x, ys, store_y, index_y = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="gnnflow-cal-") as tmp:
        for dim in (16, 128):
            n = 200_000
            path = Path(tmp) / f"f{dim}.npy"
            np.save(path, rng.standard_normal((n, dim), dtype=np.float32))
            table = np.load(path, mmap_mode="r")
            np.asarray(table).sum()  # resident, as a shard is after its first epoch
            for count in (256, 4096, 32768):
                pos = [np.sort(rng.choice(n, size=count, replace=False)) for _ in range(GATHER_DRAWS)]
                out = np.empty((count, dim), dtype=np.float32)
                t = cpu_time(_cycling(pos, lambda p, out=out, table=table: np.take(table, p, axis=0, out=out,
                                                                                   mode="clip")))
                rows_x.append([1.0, count, 4.0 * count * dim])
                ys.append(max(t, 1e-7))
                fetch, index = _row_paths(table, rng, count)
                store_y.append(max(fetch, 1e-7))
                index_y.append(max(index, 1e-7))
            del table
    x, y = np.array(rows_x), np.array(ys)
    paths = {}
    for name, py in (("store", np.array(store_y)), ("index", np.array(index_y))):
        c = nnls(x, py)
        paths.update({f"{name}_call": float(c[0]), f"{name}_row": float(c[1]), f"{name}_byte": float(c[2])})
    coef = nnls(x, y)
    src = torch.randn(65536, 64)
    dst = torch.empty(65536, 64)
    idx = rng.permutation(65536)
    scatter = cpu_time(lambda: scatter_rows(dst, idx, src)) / (65536 * 64 * 4)
    return {"call": float(coef[0]), "row": float(coef[1]), "byte": float(coef[2]), "scatter": float(scatter),
            "fit_error": float(np.median(relative_errors(x, y, coef))), **paths}


def _blocks(indptr: np.ndarray, indices: np.ndarray, fanouts: list[int], batch: int, seed: int) -> list[Any]:
    from gnnflow.sampling import NeighborSampler

    n = indptr.shape[0] - 1
    targets = np.random.default_rng(seed).choice(n, size=batch, replace=False)
    return NeighborSampler(indptr, indices, fanouts, seed=seed).sample_blocks(targets)


def calibrate_layers(indptr: np.ndarray, indices: np.ndarray, models: tuple[str, ...] = MODELS,
                     device: str = "cpu", progress: Callable[[str], None] = log.info) -> dict[str, dict[str, float]]:
    """Per model, the seconds per work term of forward + backward (see the module docstring)."""
    import torch.nn.functional as F

    from gnnflow.config import TrainConfig
    from gnnflow.nn import build_model_from_config

    configs = []  # (fanouts, batch, hidden, feature width, classes): layers and widths of both kinds
    for i, fanouts in enumerate(([10], [10, 10], [15, 10, 5])):
        for j, batch in enumerate((256, 2048)):
            for k, hidden in enumerate((32, 256)):
                configs.append((fanouts, batch, hidden, (32, 128)[(i + j + k) % 2], (8, 47)[(i + k) % 2]))
    out: dict[str, dict[str, float]] = {}
    dev = torch.device(device)
    for model in models:
        progress(f"calibrating layers: {model}")
        rows, ys = [], []
        for i, (fanouts, batch, hidden, f_dim, classes) in enumerate(configs):
            cfg = TrainConfig(graph="-", model=model, hidden=hidden, num_layers=len(fanouts), fanouts=fanouts)
            blocks = [b.to(dev) for b in _blocks(indptr, indices, fanouts, batch, seed=i)]
            net = build_model_from_config(cfg, f_dim, classes).to(dev)
            x = torch.randn(blocks[0].num_src, f_dim, device=dev)
            y = torch.randint(0, classes, (batch,), device=dev)

            def fb(net: Any = net, blocks: list[Any] = blocks, x: torch.Tensor = x, y: torch.Tensor = y) -> None:
                net.zero_grad(set_to_none=False)
                F.cross_entropy(net(blocks, x), y, reduction="sum").backward()
                if dev.type == "cuda":
                    torch.cuda.synchronize()

            t = _wall(fb) if dev.type == "cuda" else cpu_time(fb, 2)
            dims = [(float(b.num_dst), float(b.num_src), float(b.num_edges)) for b in blocks]
            rows.append(model_terms(cfg, dims, f_dim, classes))
            ys.append(t)
        x, y = np.array(rows), np.array(ys)
        coef = nnls(x, y)
        fit = {t: float(c) for t, c in zip(TERMS, coef, strict=True)}
        fit["fit_error"] = float(np.median(relative_errors(x, y, coef)))
        fit["fit_worst"] = float(np.max(relative_errors(x, y, coef)))
        out[model] = fit
    return out


def _wall(fn: Callable[[], Any], repeats: int = 3) -> float:
    """Median wall seconds (a GPU's work is not CPU time of this thread)."""
    return cpu_time(fn, repeats, time.perf_counter)


def calibrate_step() -> dict[str, float]:
    """Adam steps (the strategies' :class:`~gnnflow.nn.adam.FusedAdam`): seconds per call and per weight."""
    from gnnflow.nn.adam import FusedAdam

    rows, ys = [], []
    for width in (32, 128, 256, 512):
        params = [torch.nn.Parameter(torch.randn(width, width)) for _ in range(3)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = FusedAdam(params, lr=1e-3)
        t = cpu_time(opt.step, 5)
        rows.append([1.0, 3.0 * width * width])
        ys.append(t)
    x, y = np.array(rows), np.array(ys)
    coef = nnls(x, y)
    return {"call": float(coef[0]), "param": float(coef[1])}


def calibrate_raw(indptr: np.ndarray, indices: np.ndarray) -> tuple[float, float]:
    """(dense multiply-adds/s, the CSR tile kernel's non-zeros x width/s)."""
    from gnnflow.strategies.fullbatch.spmm import csr_tiles

    a, b = torch.randn(4096, 256), torch.randn(256, 256)
    gemm = 4096 * 256 * 256 / cpu_time(lambda: a @ b)
    n = indptr.shape[0] - 1
    row = np.repeat(np.arange(n), np.diff(indptr))
    tile = csr_tiles(row, np.zeros(row.shape[0], dtype=np.int64), np.asarray(indices, dtype=np.int64),
                     np.ones(row.shape[0], dtype=np.float32), n, [n])[0]
    x = torch.randn(n, 64)
    out = torch.empty(n, 64)
    spmm = row.shape[0] * 64 / cpu_time(lambda: tile.mm_into(x, out, False))
    return float(gemm), float(spmm)


def calibrate_threads(indptr: np.ndarray, indices: np.ndarray) -> float:
    """Wall-time speed-up of a mid-size SAGE forward/backward with every core's thread over one."""
    import torch.nn.functional as F

    from gnnflow.advise.collectives import usable_cores
    from gnnflow.config import TrainConfig
    from gnnflow.nn import build_model_from_config

    cores = usable_cores()
    if cores == 1:
        return 1.0
    cfg = TrainConfig(graph="-", model="sage", hidden=128, num_layers=2, fanouts=[10, 10])
    blocks = _blocks(indptr, indices, [10, 10], 1024, seed=7)
    net = build_model_from_config(cfg, 100, 47)
    x = torch.randn(blocks[0].num_src, 100)
    y = torch.randint(0, 47, (1024,))

    def fb() -> None:
        net.zero_grad(set_to_none=False)
        F.cross_entropy(net(blocks, x), y).backward()

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _wall(fb, 5)
        torch.set_num_threads(cores)
        many = _wall(fb, 5)
    finally:
        torch.set_num_threads(before)
    return float(max(0.05, min(cores, one / max(many, 1e-9))))


def calibrate_dgl(indptr: np.ndarray, indices: np.ndarray) -> dict[str, float]:
    """DGL's neighbour sampler per edge (and per hop) and its SAGE layers' forward/backward time
    over ours on the same blocks; empty when DGL is not installed."""
    try:
        os.environ.setdefault("DGLBACKEND", "pytorch")
        import dgl
    except Exception:  # noqa: BLE001 - any import failure means: no DGL here
        return {}
    import torch.nn.functional as F

    from gnnflow.config import TrainConfig
    from gnnflow.nn import build_model_from_config

    n = indptr.shape[0] - 1
    g = dgl.graph(("csc", (torch.from_numpy(np.asarray(indptr, np.int64)), torch.from_numpy(np.asarray(indices, np.int64)),
                           torch.tensor([], dtype=torch.int64))), num_nodes=n)
    rng = np.random.default_rng(4)
    rows, ys = [], []
    for batch in (256, 1024, 4096):
        seeds = torch.from_numpy(rng.choice(n, size=batch, replace=False))
        sampler = dgl.dataloading.NeighborSampler([10, 10])
        got: list[Any] = []

        def run(seeds: torch.Tensor = seeds, sampler: Any = sampler, got: list[Any] = got) -> None:
            got[:] = [sampler.sample_blocks(g, seeds)]

        t = cpu_time(run)
        blocks = got[0][2]
        rows.append([2.0, float(sum(b.num_edges() for b in blocks))])
        ys.append(t)
    coef = nnls(np.array(rows), np.array(ys))
    # layers: DGL's SAGEConv model on DGL blocks vs ours on ours, same sizes
    from gnnflow.nn.peer import dgl_model_from_config

    cfg = TrainConfig(graph="-", model="sage", hidden=64, num_layers=2, fanouts=[10, 10])
    ours_blocks = _blocks(indptr, indices, [10, 10], 1024, seed=5)
    seeds = torch.from_numpy(rng.choice(n, size=1024, replace=False))
    _, _, dgl_blocks = dgl.dataloading.NeighborSampler([10, 10]).sample_blocks(g, seeds)
    x_ours = torch.randn(ours_blocks[0].num_src, 100)
    x_dgl = torch.randn(dgl_blocks[0].num_src_nodes(), 100)
    y = torch.randint(0, 47, (1024,))
    ours, theirs = build_model_from_config(cfg, 100, 47), dgl_model_from_config(cfg, 100, 47)

    def fb(net: Any, blocks: list[Any], x: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            net.zero_grad(set_to_none=False)
            F.cross_entropy(net(blocks, x), y).backward()
        return run

    t_ours = cpu_time(fb(ours, ours_blocks, x_ours))
    t_dgl = cpu_time(fb(theirs, dgl_blocks, x_dgl))
    edges_ours = sum(b.num_edges for b in ours_blocks)
    edges_dgl = sum(b.num_edges() for b in dgl_blocks)
    return {"hop": float(coef[0]), "edge": float(coef[1]),
            "layer_ratio": float((t_dgl / max(edges_dgl, 1)) / max(t_ours / max(edges_ours, 1), 1e-12))}


def calibrate(workers: list[int], device: str = "cpu", models: tuple[str, ...] = MODELS,
              progress: Callable[[str], None] = log.info, collectives: bool = True) -> Calibration:
    """Measure this machine (a minute or two on a quiet 2-core host; the strategy factors are
    :func:`gnnflow.advise.strategy_probe.probe_into`'s, two to four minutes more per rank count)."""
    from gnnflow.advise.collectives import calibrate_collectives
    from gnnflow.runtime.processes import tune_allocator

    tune_allocator()  # buffers mapped afresh from the size on where a rank's are (its gathers' page faults)
    cal = Calibration(created=time.strftime("%Y-%m-%d %H:%M:%S %Z"), machine=machine(), device=device)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        progress("calibrating: graph")
        indptr, indices = calibration_graph()
        progress("calibrating: sampler")
        cal.sampler = calibrate_sampler(indptr, indices)
        progress("calibrating: feature gathers")
        cal.gather = calibrate_gather()
        cal.layers = calibrate_layers(indptr, indices, models, "cpu", progress)
        cal.step = calibrate_step()
        progress("calibrating: raw rates")
        cal.gemm, cal.spmm = calibrate_raw(indptr, indices)
        progress("calibrating: DGL")
        cal.dgl = calibrate_dgl(indptr, indices)
    finally:
        torch.set_num_threads(before)
    progress("calibrating: threads")
    cal.threads = calibrate_threads(indptr, indices)
    if device == "cuda" and torch.cuda.is_available():
        progress("calibrating: layers on the GPU")
        cal.layers.update({f"{m}@cuda": v for m, v in calibrate_layers(indptr, indices, models, "cuda",
                                                                       progress).items()})
    if collectives:
        for p in sorted({1, *workers}):
            progress(f"calibrating: collectives on {p} local ranks")
            cal.collectives[str(p)] = calibrate_collectives(p)
    return cal
