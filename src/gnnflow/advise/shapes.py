"""Forward and backward of the real model timed at the blocks' own shape (issue 35.1).

A linear fit of a layer's work terms over a far grid of shapes misses GCN's cost by up to a
factor of two at the shapes a run trains on (docs/advise.md, "Measured errors"), so the cost
model does not extrapolate: it builds blocks with a rank's own mean per-layer shape (destinations,
sources, edges, spread evenly over the destinations, random sources) and times the model the
strategies build (:func:`gnnflow.nn.build_model_from_config`) on them, forward, summed
cross-entropy and backward, in CPU seconds of one thread.

Every timed call gets fresh blocks: a block caches its derived structures (transposed CSR, degrees,
expanded destinations) on first use, and in training every batch's blocks are new, so that work is
part of every iteration (a timing that reuses warm blocks leaves it out: 20-40 % of a GCN's
forward/backward at these shapes).

Shapes are rounded to two significant figures (:func:`shape_key`) so ranks and candidates of
nearly the same shape share one timing; the exact shape's time is the rounded one scaled by the
calibration's linear model (:meth:`Calibration.layer_coefficients`) from one to the other (a
local interpolation of a few per cent).  Timings are kept in memory on the calibration
(``Calibration.shapes``), never in its file: they are measured where the advice runs.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

#: above this many edges a shape is not timed (seconds of work): the linear fit is used
MAX_TIMED_EDGES = 4_000_000


def _round2(x: float) -> int:
    if x < 1:
        return 0
    e = 10 ** max(0, int(math.floor(math.log10(x))) - 1)
    return int(round(x / e) * e)


def shape_key(model: str, cfg: Any, in_dim: int, classes: int, layers: list[tuple[float, float, float]]) -> tuple:
    """The rounded shape one timing stands for: the model's settings and widths, per layer the
    destinations, sources, edges (two significant figures; a layer's sources at least its
    destinations, the next layer's sources its destinations)."""
    dims = []
    below = None
    for dst, src, edges in reversed(layers):  # top layer first: its destinations are the targets
        d = max(1, _round2(dst)) if below is None else below
        s = max(d, _round2(src))
        dims.append((d, s, _round2(edges)))
        below = s
    dims.reverse()
    return (model, int(cfg.hidden), int(cfg.num_layers), int(cfg.heads), int(cfg.out_heads), str(cfg.aggregator),
            float(cfg.dropout), int(in_dim), int(classes), tuple(dims))


def synthetic_blocks(dims: tuple[tuple[int, int, int], ...], seed: int = 0) -> list[Any]:
    """Blocks of the given per-layer (destinations, sources, edges), input layer first: each
    destination's edges ``edges // dst`` (the remainder on the first ones), sources drawn at random."""
    from gnnflow.sampling.block import Block

    rng = np.random.default_rng(seed)
    out = []
    for dst, src, edges in dims:
        per = np.full(dst, edges // max(1, dst), dtype=np.int64)
        per[: edges - int(per.sum())] += 1
        indptr = np.zeros(dst + 1, dtype=np.int64)
        np.cumsum(per, out=indptr[1:])
        indices = rng.integers(0, max(1, src), size=int(indptr[-1]), dtype=np.int64)
        ids = torch.arange(src, dtype=torch.int64)
        out.append(Block(dst_ids=ids[:dst], src_ids=ids, indptr=torch.from_numpy(indptr),
                         indices=torch.from_numpy(indices)))
    return out


def time_shape(key: tuple, cfg: Any, repeats: int = 5) -> float:
    """The least CPU seconds of one thread, over ``repeats`` calls after a warm-up, of forward +
    summed cross-entropy + backward of ``cfg``'s model on fresh blocks of ``key``'s shape (the
    least: other processes on the host only add to it; what P ranks add is ``rank_<stage>``)."""
    import torch.nn.functional as F

    from gnnflow.nn import build_model_from_config

    in_dim, classes, dims = key[7], key[8], key[9]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        net = build_model_from_config(cfg, in_dim, classes)
        net.train()
        blocks = synthetic_blocks(dims)
        x = torch.randn(dims[0][1], in_dim)
        y = torch.randint(0, classes, (dims[-1][0],))
        times = []
        for i in range(repeats + 1):
            for b in blocks:
                b.cache.clear()  # a new batch's blocks: nothing derived yet
            net.zero_grad(set_to_none=False)
            t = time.thread_time()
            F.cross_entropy(net(blocks, x), y, reduction="sum").backward()
            if i:
                times.append(time.thread_time() - t)
    finally:
        torch.set_num_threads(before)
    return float(min(times))


def timed_fb(cal: Any, cfg: Any, model_key: str, layers: list[tuple[float, float, float]], in_dim: int,
             classes: int) -> float | None:
    """Seconds of forward + backward of one batch of ``layers`` timed at its rounded shape (kept in
    ``cal.shapes``) and scaled to the exact shape by the linear model; None where the shape is not
    timed (a GPU, a model the calibration has no fit for, beyond :data:`MAX_TIMED_EDGES`)."""
    from gnnflow.advise.features import model_terms

    if model_key.endswith("@cuda") or model_key not in cal.layers or not layers:
        return None
    if sum(e for _, _, e in layers) > MAX_TIMED_EDGES:
        return None
    key = shape_key(model_key, cfg, in_dim, classes, layers)
    name = repr(key)
    if name not in cal.shapes:
        cal.shapes[name] = time_shape(key, cfg)
    coef = cal.layer_coefficients(model_key)
    exact = float(model_terms(cfg, layers, in_dim, classes) @ coef)
    rounded = float(model_terms(cfg, [tuple(map(float, d)) for d in key[9]], in_dim, classes) @ coef)
    return cal.shapes[name] * (exact / rounded if rounded > 0 else 1.0)



#: the stages a rank's probe times (:func:`rank_probe`)
PROBED_STAGES = ("sample", "load", "forward_backward")


def rank_probe(seconds: float = 0.9) -> dict[str, float]:
    """Median CPU seconds of one thread of three fixed pieces of a rank's iteration, run in turn for
    about ``seconds``: ``sample``, a two-hop neighbour sample of 512 targets (fanouts 10, 10)
    on a random graph of 50,000 vertices, degree 12; ``load``, 8,192 random rows of a 100,000 x 32
    float32 table read by fancy indexing into a tensor; ``forward_backward``, a two-layer GCN 64 wide
    at about a 500-target batch's blocks (fresh blocks each call).  What
    :mod:`gnnflow.advise.collectives` compares between the calibrating process and P ranks running
    it at once."""
    from gnnflow.config import TrainConfig
    from gnnflow.sampling import NeighborSampler

    rng = np.random.default_rng(5)
    n = 50_000
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rng.poisson(12, n), out=indptr[1:])
    indices = rng.integers(0, n, size=int(indptr[-1]), dtype=np.int64)
    sampler = NeighborSampler(indptr, indices, [10, 10], seed=0)
    targets = torch.from_numpy(rng.choice(n, size=512, replace=False))
    table = rng.standard_normal((100_000, 32), dtype=np.float32)
    rows = rng.choice(100_000, size=8192, replace=False)
    cfg = TrainConfig(graph="-", model="gcn", hidden=64, num_layers=2, fanouts=[10, 10])
    key = shape_key("gcn", cfg, 32, 8, [(3300.0, 14000.0, 29000.0), (500.0, 3300.0, 4000.0)])

    def clocked(fn: Any) -> float:
        t = time.thread_time()
        fn()
        return time.thread_time() - t

    pieces = {"sample": lambda: clocked(lambda: sampler.sample_blocks(targets)),
              "load": lambda: clocked(lambda: torch.from_numpy(np.asarray(table[rows]))),
              "forward_backward": lambda: time_shape(key, cfg, repeats=3)}
    got: dict[str, list[float]] = {name: [] for name in pieces}
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(got["sample"]) < 3:
        for name, fn in pieces.items():  # in turn, as an iteration runs them
            got[name].append(fn())
    return {name: float(np.median(v)) for name, v in got.items()}
