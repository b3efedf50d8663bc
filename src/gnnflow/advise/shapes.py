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
local interpolation of a few per cent).  A shape of more than :data:`MAX_TIMED_EDGES` edges is
timed scaled down to that many (rows and edges divided alike, the degree kept) and scaled back
the same way: at that size a layer's work is linear in its rows and edges.  Timings are kept in
memory on the calibration (``Calibration.shapes``), never in its file: they are measured where
the advice runs.

Two kinds of blocks (``halo``): a mini-batch's, fresh every batch, each layer's sources the
destinations of the layer below; and a full-graph halo block (DGCL's ``inner <- inner | halo``),
the same block every layer and every epoch (its derived structures built once), the halo's rows
arriving between layers (projected first for a narrowing GCN layer, as the strategy does).
MG-GCN's rank is timed apart (:func:`timed_rows`): the strategy's own hand-written forward and
backward on tiles of the rank's shape, its broadcasts left to the cost model's ``comm``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

#: above this many edges (all layers) a shape is timed scaled down to this many (seconds of work)
MAX_TIMED_EDGES = 4_000_000
#: a timing takes at least its ``repeats`` calls and goes on until its calls add up to this many
#: seconds (at most :data:`MAX_REPEATS` calls): the least of five 3 ms calls on two threads moved
#: 2.6-3.4 ms between processes on the same host
MIN_TIMED_S = 0.25
MAX_REPEATS = 60


def _round2(x: float) -> int:
    if x < 1:
        return 0
    e = 10 ** max(0, int(math.floor(math.log10(x))) - 1)
    return int(round(x / e) * e)


def shape_key(model: str, cfg: Any, in_dim: int, classes: int, layers: list[tuple[float, float, float]],
              halo: str = "", columns: int = 0) -> tuple:
    """The rounded shape one timing stands for: the model's settings and widths, per layer the
    destinations, sources, edges (two significant figures; a layer's sources at least its
    destinations; a mini-batch's next layer's sources its destinations), ``halo``: "" for
    mini-batch blocks, "halo" for a full-graph halo block, "halo-project" when a narrowing GCN
    layer's halo rows arrive projected; and ``columns``: 0, or P3's first layer on that many of
    the ``in_dim`` input columns (:func:`_columns_forward`)."""
    dims = []
    below = None
    for dst, src, edges in reversed(layers):  # top layer first: its destinations are the targets
        d = max(1, _round2(dst)) if below is None else below
        s = max(d, _round2(src))
        dims.append((d, s, _round2(edges)))
        below = None if halo else s
    dims.reverse()
    return (model, int(cfg.hidden), int(cfg.num_layers), int(cfg.heads), int(cfg.out_heads), str(cfg.aggregator),
            float(cfg.dropout), int(in_dim), int(classes), tuple(dims), halo, int(columns))


def even_counts(rows: int, entries: int) -> np.ndarray:
    """``entries`` spread over ``rows`` as evenly as they go (the remainder on the first rows)."""
    per = np.full(rows, entries // max(1, rows), dtype=np.int64)
    per[: entries - int(per.sum())] += 1
    return per


def synthetic_blocks(dims: tuple[tuple[int, int, int], ...], seed: int = 0) -> list[Any]:
    """Blocks of the given per-layer (destinations, sources, edges), input layer first: each
    destination's edges ``edges // dst`` (the remainder on the first ones), sources drawn at random."""
    from gnnflow.sampling.block import Block

    rng = np.random.default_rng(seed)
    out = []
    for dst, src, edges in dims:
        per = even_counts(dst, edges)
        indptr = np.zeros(dst + 1, dtype=np.int64)
        np.cumsum(per, out=indptr[1:])
        indices = rng.integers(0, max(1, src), size=int(indptr[-1]), dtype=np.int64)
        ids = torch.arange(src, dtype=torch.int64)
        out.append(Block(dst_ids=ids[:dst], src_ids=ids, indptr=torch.from_numpy(indptr),
                         indices=torch.from_numpy(indices)))
    return out


def more(times: list[float], repeats: int, min_s: float | None = None) -> bool:
    """Whether a timing goes on after ``times``: fewer than ``repeats`` calls, or fewer than
    ``min_s`` (default :data:`MIN_TIMED_S`) seconds in all and fewer than :data:`MAX_REPEATS` calls."""
    least = MIN_TIMED_S if min_s is None else min_s
    return len(times) < repeats or (sum(times) < least and len(times) < MAX_REPEATS)


def least_time(once: Callable[[], float], repeats: int, min_s: float | None = None) -> float:
    """The least seconds ``once()`` returns (it times its own call) over the calls :func:`more`
    asks for, after one warm-up call."""
    once()
    times: list[float] = []
    while more(times, repeats, min_s):
        times.append(once())
    return float(min(times))


def time_shape(key: tuple, cfg: Any, repeats: int = 5, threads: int = 1, min_s: float | None = None) -> float:
    """The least CPU seconds of one thread, over at least ``repeats`` calls and ``min_s`` seconds
    (:func:`more`) after a warm-up, of forward +
    summed cross-entropy + backward of ``cfg``'s model on fresh blocks of ``key``'s shape (the
    least: other processes on the host only add to it; what P ranks add is ``rank_<stage>``);
    a halo key's blocks are kept warm and its halo rows join before every layer.  With
    ``threads`` > 1 the model runs on that many torch threads and the time is the wall time (a
    single process's forward/backward: how much the threads gain depends on the shape, 1.4 times
    at a 1,000-target GCN batch of the default graph against 1.7 at the products-shaped slice's
    on two cores).  A key with ``columns`` runs P3's forward (:func:`_columns_forward`)."""
    import torch.nn.functional as F

    from gnnflow.nn import build_model_from_config
    from gnnflow.strategies.memory import layer_dims

    in_dim, classes, dims, halo, columns = key[7], key[8], key[9], key[10], key[11]
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    clock = time.thread_time if threads <= 1 else time.perf_counter
    try:
        torch.manual_seed(0)
        net = build_model_from_config(cfg, in_dim, classes)
        net.train()
        blocks = synthetic_blocks(dims)
        y = torch.randint(0, classes, (dims[-1][0],))
        if halo:  # the layer's input: the inner rows computed here, the halo's received
            x = torch.randn(dims[0][0], in_dim)
            widths = [d_in for d_in, _ in layer_dims(cfg, in_dim, classes)]
        else:
            x = torch.randn(dims[0][1], columns or in_dim)

        def once() -> float:
            if not halo:
                for b in blocks:
                    b.cache.clear()  # a new batch's blocks: nothing derived yet
            net.zero_grad(set_to_none=False)
            t = clock()
            if halo:
                out = _halo_forward(net, blocks, dims, x, widths, halo == "halo-project")
            else:
                out = _columns_forward(net, blocks, x) if columns else net(blocks, x)
            F.cross_entropy(out, y, reduction="sum").backward()
            return clock() - t

        return least_time(once, repeats, min_s)
    finally:
        torch.set_num_threads(before)


def _halo_forward(net: Any, blocks: list[Any], dims: tuple, x: torch.Tensor, widths: list[int],
                  project: bool) -> torch.Tensor:
    """DGCL's forward on halo blocks: before every layer the halo's rows (``widths``: each layer's
    input width; projected first for a narrowing GCN layer) join the inner rows; the halo rows
    take gradients, as the rows sent back in backward do."""
    h = x
    for i, (b, (dst, src, _)) in enumerate(zip(blocks, dims, strict=True)):
        first = project and net.projects_first(i)
        if first:
            h = net.project(i, h)
        width = int(h.shape[-1]) if first else widths[i]
        halo = torch.zeros(src - dst, width, requires_grad=True)
        h = net.layer_step(i, b, torch.cat([h, halo]), projected=first)
    return h


def _columns_forward(net: Any, blocks: list[Any], x_cols: torch.Tensor) -> torch.Tensor:
    """P3*'s forward on one rank without its push (:class:`~gnnflow.strategies.split.p3.PushPull`):
    the first layer from the first ``x_cols.shape[1]`` input columns alone, by the strategy's own
    code (the whole layer's weights restricted to those columns: a GCN layer wider in than out
    projects the columns first and aggregates at the hidden width, as the strategy does, where a
    layer built that narrow would aggregate the columns first), its activation and the layers
    above on the partial."""
    from gnnflow.strategies.split.p3 import (
        drop_input_columns,
        finish_first_layer,
        partial_first_layer,
    )

    cols = torch.arange(x_cols.shape[1])
    h = finish_first_layer(net, blocks[0], partial_first_layer(net.layers[0], blocks[0], drop_input_columns(net, x_cols),
                                                               cols, with_bias=True))
    for i in range(1, len(blocks)):
        h = net.layer_step(i, blocks[i], h)
    return h


def timed_fb(cal: Any, cfg: Any, model_key: str, layers: list[tuple[float, float, float]], in_dim: int,
             classes: int, halo: str = "", threads: int = 1, columns: int = 0) -> float | None:
    """Seconds of forward + backward of one batch of ``layers`` timed at its rounded shape (kept in
    ``cal.shapes``) and scaled to the exact shape by the linear model; None where the shape is not
    timed (a GPU, a model the calibration has no fit for).  ``halo``: the blocks are a full-graph
    halo block's (:func:`shape_key`); ``threads`` > 1: wall seconds on that many torch threads
    (:func:`time_shape`); ``columns``: P3's first layer on that many of the ``in_dim`` columns."""
    from gnnflow.advise.features import model_terms

    if model_key.endswith("@cuda") or model_key not in cal.layers or not layers:
        return None
    total = sum(e for _, _, e in layers)
    if total > MAX_TIMED_EDGES:  # timed scaled down, scaled back up below
        k = total / MAX_TIMED_EDGES
        layers_timed = [(d / k, s / k, e / k) for d, s, e in layers]
    else:
        layers_timed = layers
    key = shape_key(model_key, cfg, in_dim, classes, layers_timed, halo, columns)
    name = repr(key) if threads <= 1 else f"{key!r}@{threads}"
    if name not in cal.shapes:
        cal.shapes[name] = time_shape(key, cfg, threads=threads)
    coef = cal.layer_coefficients(model_key)
    width = columns or in_dim  # the linear model's terms: the columns read
    exact = float(model_terms(cfg, layers, width, classes) @ coef)
    rounded = float(model_terms(cfg, [tuple(map(float, d)) for d in key[9]], width, classes) @ coef)
    return cal.shapes[name] * (exact / rounded if rounded > 0 else 1.0)


# ------------------------------------------------------------------------------- MG-GCN's rank
def rows_key(cfg: Any, in_dim: int, classes: int, rows: float, train: float, nnz: float,
             block_rows: list[float]) -> tuple:
    """The rounded shape of one MG-GCN rank (two significant figures): the model's settings and
    widths, its rows, training rows, non-zeros of its rows of ``Â`` and the P column blocks'
    rows (its own first)."""
    opts = cfg.options
    return ("rows", str(cfg.model), str(opts.norm), str(opts.memory), bool(opts.cache_input_spmm), int(cfg.hidden),
            int(cfg.num_layers), float(cfg.dropout), int(in_dim), int(classes), max(1, _round2(rows)),
            _round2(train), _round2(nnz), tuple(max(1, _round2(b)) for b in block_rows))


def time_rows(key: tuple, cfg: Any, repeats: int = 5) -> float:
    """The least CPU seconds of one thread, over at least ``repeats`` calls and
    :data:`MIN_TIMED_S` seconds (:func:`more`) after a warm-up, of MG-GCN's
    own forward + loss + backward (:meth:`FullBatch.compute_gradients`) on one rank of ``key``'s
    shape: its tiles of ``Â`` (each row's non-zeros spread evenly, columns drawn at random over
    the blocks, as permute-1d's random rows give), every round's SpMM with the other blocks'
    rows already received (:class:`_LocalRounds`: the broadcasts are the cost model's ``comm``)."""
    from gnnflow.nn import build_model_from_config
    from gnnflow.results.schema import Recorder
    from gnnflow.runtime.context import RankContext
    from gnnflow.strategies.fullbatch.row1d import FullBatch, layer_params
    from gnnflow.strategies.fullbatch.spmm import csr_tiles

    in_dim, classes, n, train, nnz, blocks = key[8], key[9], key[10], key[11], key[12], list(key[13])
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = np.random.default_rng(0)
        row = np.repeat(np.arange(n, dtype=np.int64), even_counts(n, nnz))
        col = rng.integers(0, sum(blocks), size=row.shape[0], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(blocks)[:-1]])
        cblk = np.searchsorted(starts, col, side="right") - 1
        tiles = csr_tiles(row, cblk, col - starts[cblk], np.ones(row.shape[0], dtype=np.float32), n, blocks)
        torch.manual_seed(0)
        s = FullBatch(cfg, RankContext())
        s.engine = _LocalRounds(tiles, blocks)
        s.features = torch.randn(n, in_dim)
        s.labels = torch.randint(0, classes, (n,))
        s.split_rows = {"train": torch.arange(max(1, min(n, train))), "val": torch.arange(0), "test": torch.arange(0)}
        s.split_totals = {k: int(v.numel()) for k, v in s.split_rows.items()}
        s.model = build_model_from_config(cfg, in_dim, classes, model=FullBatch.model_name(cfg))
        s.model.train()
        s.dims = [in_dim] + [layer_params(m)[0].shape[1] for m in s.model.layers]

        def once() -> float:
            s.model.zero_grad(set_to_none=False)
            t = time.thread_time()
            s.compute_gradients(Recorder(torch.device("cpu")))
            return time.thread_time() - t

        return least_time(once, repeats)
    finally:
        torch.set_num_threads(before)


class _LocalRounds:
    """:class:`~gnnflow.strategies.fullbatch.spmm.BroadcastSpMM`'s rounds on one rank with the
    other blocks' rows already received (fixed random rows): its SpMM without the broadcasts."""

    def __init__(self, tiles: list[Any], block_rows: list[int]) -> None:
        self.tiles, self.block_rows = tiles, block_rows
        self.received: dict[tuple[int, int], torch.Tensor] = {}

    @property
    def num_rows(self) -> int:
        return self.block_rows[0]

    def buffer_bytes(self) -> int:
        return sum(b.numel() * 4 for b in self.received.values())

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, transpose: bool = False) -> torch.Tensor:
        x = x.contiguous()
        width = x.shape[1]
        if out is None:
            out = torch.empty((self.num_rows, width))
        for j, tile in enumerate(self.tiles):  # the transposed tiles have the same shapes
            if j and (j, width) not in self.received:
                self.received[(j, width)] = torch.randn(self.block_rows[j], width)
            tile.mm_into(x if j == 0 else self.received[(j, width)], out, accumulate=j > 0)
        return out


def timed_rows(cal: Any, st: Any, rows: float, train: float, nnz: float, linear: Callable[..., float]) -> float | None:
    """Seconds of MG-GCN's forward + backward on one rank of ``rows`` rows (``train`` of them
    training rows, ``nnz`` non-zeros) of ``st``'s graph in ``st.workers`` even column blocks,
    timed at its rounded shape (kept in ``cal.shapes``) and scaled to the exact one by
    ``linear(rows, nnz)`` (the per-term model), a shape over :data:`MAX_TIMED_EDGES` non-zeros
    timed scaled down to that many (rows, training rows and every block alike); None on a GPU."""
    if st.device == "cuda" or rows < 1 or nnz < 1:
        return None
    p, n_all = int(st.workers), float(st.num_nodes)
    k = max(1.0, nnz / MAX_TIMED_EDGES)
    others = [(n_all - rows) / max(1, p - 1)] * (p - 1)
    key = rows_key(st.cfg, max(1, st.feature_dim), st.num_classes, rows / k, train / k, nnz / k,
                   [rows / k] + [b / k for b in others])
    name = repr(key)
    if name not in cal.shapes:
        cal.shapes[name] = time_rows(key, st.cfg)
    rounded = linear(float(key[10]), float(key[12]))
    return cal.shapes[name] * (linear(rows, nnz) / rounded if rounded > 0 else k)


#: the stages a rank's probe times (:func:`rank_probe`)
PROBED_STAGES = ("sample", "load", "forward_backward")


def rank_probe(seconds: float = 0.9) -> dict[str, float]:
    """Median CPU seconds of one thread of three fixed pieces of a rank's iteration, run in turn for
    about ``seconds``: ``sample``, a two-hop neighbour sample of 512 targets (fanouts 10, 10)
    on a random graph of 50,000 vertices, degree 12; ``load``, 8,192 random rows of a 100,000 x 32
    float32 table read into a tensor (:func:`~gnnflow.strategies.rows.take_rows`); ``forward_backward``, a two-layer GCN 64 wide
    at about a 500-target batch's blocks (fresh blocks each call).  What
    :mod:`gnnflow.advise.collectives` compares between the calibrating process and P ranks running
    it at once."""
    from gnnflow.config import TrainConfig
    from gnnflow.sampling import NeighborSampler
    from gnnflow.strategies.rows import take_rows

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
              "load": lambda: clocked(lambda: take_rows(table, rows)),
              "forward_backward": lambda: time_shape(key, cfg, repeats=3, min_s=0.0)}
    got: dict[str, list[float]] = {name: [] for name in pieces}
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(got["sample"]) < 3:
        for name, fn in pieces.items():  # in turn, as an iteration runs them
            got[name].append(fn())
    return {name: float(np.median(v)) for name, v in got.items()}
