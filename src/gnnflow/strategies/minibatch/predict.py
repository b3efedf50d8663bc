"""Every vertex's prediction or embedding from a trained run's model (``gnnflow predict``).

A run directory (:mod:`gnnflow.strategies.driver`) holds the run's config (``run.json``) and its
final (``model.pt``) and best-validation (``model-best.pt``) weights.  The model is rebuilt as
training built it (:func:`gnnflow.nn.build_model_from_config` with the strategy's model name,
:meth:`~gnnflow.strategies.base.Strategy.model_name`) on the model's graph (self-loops as the
config says, GCN on whole-graph degrees), and every vertex's output is computed with full
neighbourhoods, layer by layer over chunks of vertices -- the computation evaluation runs, so
the predicted classes give back the accuracies the run recorded:

* one process: :func:`gnnflow.strategies.common.full_inference` over the whole graph, as
  single-process evaluation;
* ``P`` ranks over a partition book of ``P`` parts:
  :func:`gnnflow.strategies.minibatch.inference.layerwise_inference`, each rank its own
  vertices (halo rows from their owners, hidden tables in scratch files), as the mini-batch
  strategies' evaluation.  Rank 0 receives the other ranks' rows one chunk per round and
  writes them, so no process holds more than its own part's outputs and a chunk.

``layer = k`` stops after layer ``k`` (``1..L``): its outputs (after the activation; GAT's
hidden heads concatenated) are the embedding.

The output is one Parquet file, written atomically (a temporary file next to it, renamed at
the end; a failure on any rank removes it): column ``vertex`` (int64), then for predictions
``pred`` (int64, the arg-max class) and ``logit_0 .. logit_{C-1}`` (float32), for embeddings
``emb_0 .. emb_{d-1}`` (float32), one row per vertex, in row groups of ``chunk`` rows.  With one
process the rows are in vertex order; with ranks, in rank order chunk by chunk (each rank's
vertices ascending).  The schema's metadata key ``gnnflow`` holds what produced the file (JSON).

The module sits in the mini-batch family's package because the partitioned path is that
family's evaluation (:mod:`~gnnflow.strategies.minibatch.inference`); it serves the runs of every
strategy whose model is a :class:`gnnflow.nn.GNN` (all but the DistDGL peer).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.config import TrainConfig
from gnnflow.data.store import open_store
from gnnflow.errors import ConfigError
from gnnflow.io import atomic_file, proc_memory, provenance
from gnnflow.nn import GNN, build_model_from_config
from gnnflow.partition.book import PartitionBook, check_book_matches_graph, read_book_meta
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.hosts import is_first_rank
from gnnflow.runtime.launch import run_ranks
from gnnflow.strategies.base import strategy_class
from gnnflow.strategies.common import full_inference, model_graph
from gnnflow.strategies.memory import (
    BASE,
    GraphSizes,
    PartSizes,
    RunSizes,
    evaluation_bytes,
    shard_bytes,
)
from gnnflow.strategies.minibatch.inference import (
    layerwise_inference,
    local_degrees,
    max_over_ranks,
)
from gnnflow.strategies.single import SingleProcess

log = logging.getLogger("gnnflow.predict")

#: ``--which`` -> the run directory's weights file (written by the driver)
WEIGHTS = {"final": "model.pt", "best": "model-best.pt"}
#: rows per Parquet row group (and per chunk rank 0 receives) when not given
ROWS_PER_GROUP = 65536


@dataclass
class TrainedRun:
    """A run directory's config and the chosen weights."""

    path: Path
    cfg: TrainConfig
    which: str
    state: dict[str, torch.Tensor]

    @property
    def weights_file(self) -> Path:
        return self.path / WEIGHTS[self.which]

    def model(self, in_dim: int, classes: int, graph: str) -> GNN:
        """The trained model in eval mode; one line when the weights do not fit ``graph``."""
        name = strategy_class(self.cfg.strategy).model_name(self.cfg)
        net = build_model_from_config(self.cfg, in_dim, classes, model=name)
        want = {k: tuple(v.shape) for k, v in net.state_dict().items()}
        have = {k: tuple(v.shape) for k, v in self.state.items()}
        for key in sorted(want.keys() | have.keys()):
            if want.get(key) != have.get(key):
                raise ConfigError(f"{self.weights_file}: weights of {name} do not fit graph {graph} ({in_dim} "
                                  f"features, {classes} classes): {key} is {have.get(key, 'missing')} in the file, "
                                  f"the model needs {want.get(key, 'none')}")
        net.load_state_dict(self.state)
        return net.eval()


def load_run(run_dir: str | Path, which: str = "final") -> TrainedRun:
    """Read ``run_dir``'s config and its ``which`` weights (``final``: ``model.pt``, ``best``:
    ``model-best.pt``), with one-line errors for what is missing or unreadable."""
    path = Path(run_dir)
    if which not in WEIGHTS:
        raise ConfigError(f"--which: {which!r}; choose one of {', '.join(WEIGHTS)}")
    info_file = path / "run.json"
    try:
        info = json.loads(info_file.read_text())
        cfg = TrainConfig.from_dict(info["config"])
    except FileNotFoundError:
        raise ConfigError(f"{info_file}: missing; {path} is not a gnnflow run directory (gnnflow train --out)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{info_file}: cannot read the run's config ({type(exc).__name__}: {exc})") from None
    weights = path / WEIGHTS[which]
    if not weights.exists():
        status = info.get("status", "unknown")
        why = ("the run has no evaluated epoch yet" if which == "best"
               else "a run writes it when its last epoch ends")
        raise ConfigError(f"{weights}: missing (run status: {status}; {why})")
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a truncated or foreign file
        raise ConfigError(f"{weights}: cannot load ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    # a DDP-wrapped model (option ddp) saves its weights under "module."
    state = {k.removeprefix("module."): v for k, v in state.items()}
    return TrainedRun(path, cfg, which, state)


def output_layer(cfg: TrainConfig, embeddings: bool, layer: int | None) -> int | None:
    """The layer whose outputs are written: None for the logits; for embeddings ``layer``
    (``1..L``), by default the last hidden layer (``L - 1``; the only layer when ``L = 1``)."""
    if not embeddings:
        if layer is not None:
            raise ConfigError("--layer: only with --embeddings (predictions are the last layer's outputs)")
        return None
    if layer is None:
        return max(1, cfg.num_layers - 1)
    if not 1 <= layer <= cfg.num_layers:
        raise ConfigError(f"--layer: {layer}; the model has layers 1..{cfg.num_layers}")
    return layer


class PredictionWriter:
    """Rows ``(vertex, values)`` into one Parquet file, a row group per :meth:`write` call."""

    def __init__(self, path: str | Path, width: int, embeddings: bool, metadata: dict[str, Any]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.embeddings = embeddings
        prefix = "emb_" if embeddings else "logit_"
        fields = [pa.field("vertex", pa.int64())] + ([] if embeddings else [pa.field("pred", pa.int64())])
        fields += [pa.field(f"{prefix}{j}", pa.float32()) for j in range(width)]
        self.schema = pa.schema(fields, metadata={"gnnflow": json.dumps(metadata, sort_keys=True, default=str)})
        self.rows = 0
        self._writer = pq.ParquetWriter(str(path), self.schema)

    def write(self, vertices: np.ndarray, values: np.ndarray) -> None:
        import pyarrow as pa

        values = np.asarray(values, dtype=np.float32)
        cols = [pa.array(np.asarray(vertices, dtype=np.int64))]
        if not self.embeddings:
            cols.append(pa.array(values.argmax(axis=1).astype(np.int64)))
        cols += [pa.array(np.ascontiguousarray(values[:, j])) for j in range(values.shape[1])]
        self._writer.write_table(pa.Table.from_arrays(cols, schema=self.schema))
        self.rows += int(values.shape[0])

    def close(self) -> None:
        self._writer.close()


@dataclass
class PredictJob:
    """What every rank needs: the run (its config and weights), where to read and write."""

    run: TrainedRun
    graph: str
    partition: str | None
    layer: int | None
    rows: int  # rows per row group and per chunk sent to rank 0
    chunk: int | None  # destinations per inference chunk (None: evaluation's own)
    out: str | None  # the temporary file rank 0 writes (None on other hosts' launchers)
    metadata: dict[str, Any] = field(default_factory=dict)


def _writer(job: PredictJob, width: int) -> PredictionWriter:
    assert job.out is not None
    return PredictionWriter(job.out, width, job.layer is not None, job.metadata)


def predict_whole_graph(job: PredictJob, device: torch.device | str = "cpu") -> dict[str, Any]:
    """One process: every vertex's outputs by full inference over the model's graph, written to
    ``job.out``; returns the rows written and this process's peak memory."""
    store = open_store(job.graph)
    if store.features is None:
        raise ConfigError(f"graph {job.graph}: has no features.npy; the model reads vertex features")
    net = job.run.model(store.feature_dim, store.num_classes, job.graph).to(device)
    graph = model_graph(store, job.run.cfg)  # A or A + I, as training built it
    out = full_inference(net, graph.indptr, graph.indices, graph.features, device,
                         job.chunk or ROWS_PER_GROUP, layers=job.layer)
    writer = _writer(job, int(out.shape[1]))
    try:
        for start in range(0, out.shape[0], job.rows):
            stop = min(start + job.rows, out.shape[0])
            writer.write(np.arange(start, stop, dtype=np.int64), out[start:stop].numpy())
    finally:
        writer.close()
    return {"rows": writer.rows, "written": writer.rows, "width": int(out.shape[1]),
            "peak_rss_mib": proc_memory("VmHWM") / 2**20}


def _predict_rank(ctx: RankContext, job: PredictJob) -> dict[str, Any]:
    """One rank: its part's outputs by layer-wise inference over the book, sent to rank 0 a chunk
    per round; rank 0 writes every rank's rows to ``job.out``."""
    assert job.partition is not None
    cfg = job.run.cfg
    book = PartitionBook.open(job.partition)
    if book.num_parts != ctx.world_size:
        raise ConfigError(f"{job.partition}: {book.num_parts} parts for {ctx.world_size} ranks; "
                          "predict with --workers equal to the book's parts")
    part = book.load_part(ctx.rank)
    if part.features is None:
        raise ConfigError(f"{book.part_dir(ctx.rank)}: no features.npy; partition with features")
    if cfg.adds_self_loops:  # the model's graph is A + I, as in training
        part = part.with_self_loops()
    node_part = np.asarray(book.node_part)
    net = job.run.model(int(part.features.shape[1]), int(book.meta.num_classes), job.graph).to(ctx.device)
    # GCN normalises by whole-graph degrees in evaluation (MiniBatchStrategy.inference)
    degrees = local_degrees(part, node_part) if cfg.model == "gcn" else None
    # [inner, width] (a rank owning no vertex knows the width too)
    out = layerwise_inference(net, part, node_part, ctx.device, degrees, layers=job.layer,
                              chunk_rows=job.chunk).numpy()
    ids = np.asarray(part.inner_ids, dtype=np.int64)
    width = int(out.shape[1])
    writer = _writer(job, width) if ctx.rank == 0 else None
    n_chunks = math.ceil(ids.shape[0] / job.rows)
    try:
        for c in range(max_over_ranks(n_chunks)):  # every rank takes part in every round
            rows = slice(c * job.rows, (c + 1) * job.rows)
            piece = (ids[rows], out[rows]) if c < n_chunks else None
            got: list[Any] | None = [piece]
            if ctx.world_size > 1:
                got = [None] * ctx.world_size if ctx.rank == 0 else None
                dist.gather_object(piece, got, dst=0)
            for p in got or []:
                if writer is not None and p is not None:
                    writer.write(*p)
    finally:
        if writer is not None:
            writer.close()
    return {"rank": ctx.rank, "rows": int(ids.shape[0]), "written": writer.rows if writer is not None else 0,
            "width": width, "peak_rss_mib": proc_memory("VmHWM") / 2**20}


def predict(run_dir: str | Path, out: str | Path, *, graph: str | None = None, partition: str | None = None,
            workers: int | None = None, which: str = "final", embeddings: bool = False,
            layer: int | None = None, chunk_size: int | None = None, device: str = "cpu",
            overwrite: bool = False) -> dict[str, Any]:
    """Write every vertex's predictions (or, with ``embeddings``, layer ``layer``'s outputs) of
    the run in ``run_dir`` to the Parquet file ``out`` (see the module docstring); return a
    summary (rows, columns, peak memory measured and estimated).

    ``graph``: the graph store (default: the run's).  ``partition`` / ``workers``: compute on
    ``workers`` ranks over a book of as many parts (``workers > 1`` without ``partition`` takes
    the run's book).  ``chunk_size``: rows per row group, and destinations per inference chunk
    (default: evaluation's own chunks, 65536 rows per group)."""
    run = load_run(run_dir, which)
    cfg = run.cfg
    strategy_class(cfg.strategy).model_name(cfg)  # a strategy without a gnnflow model fails here
    layer = output_layer(cfg, embeddings, layer)
    graph = graph or cfg.graph
    if chunk_size is not None and chunk_size < 1:
        raise ConfigError(f"--chunk-size: {chunk_size}; give a positive number of rows")
    out = Path(out)
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} already exists; remove it or pass --overwrite")
    partition, workers = _placement(cfg, graph, partition, workers)
    meta = {"run": str(run.path), "weights": run.weights_file.name, "which": which, "strategy": cfg.strategy,
            "model": cfg.model, "graph": graph, "partition": partition, "workers": workers,
            "output": "logits" if layer is None else f"layer {layer}", "provenance": provenance()}
    job = PredictJob(run=run, graph=graph, partition=partition, layer=layer, rows=chunk_size or ROWS_PER_GROUP,
                     chunk=chunk_size, out=None, metadata=meta)
    log.info("%s (%s weights) -> %s: %s of every vertex on %d rank(s)", run.path, which, out, meta["output"],
             workers)
    if not is_first_rank():  # torchrun/srun: another rank's process; rank 0's writes the file
        return _run(job, workers, device)[0]
    with atomic_file(out) as tmp:  # any failure, on any rank, removes it
        job.out = str(tmp)
        results = _run(job, workers, device)
    summary = {"out": str(out), "rows": results[0]["written"], "columns": _columns(layer, results[0]["width"]),
               "which": which, "weights": str(run.weights_file), "output": meta["output"], "workers": workers,
               "peak_rss_mib": round(max(r["peak_rss_mib"] for r in results), 1),
               "peak_rss_mib_ranks": [round(r["peak_rss_mib"], 1) for r in results]}
    summary["estimate_mib"] = {k: round(v / 2**20, 1) for k, v in memory_estimate(cfg, graph, partition, workers).items()}
    return summary


def _run(job: PredictJob, workers: int, device: str) -> list[dict[str, Any]]:
    if job.partition is None:
        return [predict_whole_graph(job, device)]
    return run_ranks(_predict_rank, workers, job, device=device)


def _columns(layer: int | None, width: int) -> list[str]:
    names = [f"emb_{j}" for j in range(width)] if layer is not None else \
        ["pred"] + [f"logit_{j}" for j in range(width)]
    shown = names if len(names) <= 6 else [*names[:4], "...", names[-1]]
    return ["vertex", *shown]


def _placement(cfg: TrainConfig, graph: str, partition: str | None, workers: int | None) -> tuple[str | None, int]:
    """(book, ranks): no book and one process; or ``workers`` ranks over a book of as many parts
    (the given one, else the run's)."""
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers: {workers}; give at least 1")
    if partition is None and (workers or 1) > 1:
        if not cfg.partition:
            raise ConfigError(f"--workers {workers}: needs --partition BOOK (a partition book of {workers} parts); "
                              "the run had none")
        partition = cfg.partition
    if partition is None:
        return None, 1
    parts = int(read_book_meta(partition).num_parts)
    check_book_matches_graph(partition, graph)
    if workers is not None and workers != parts:
        raise ConfigError(f"{partition}: {parts} parts, but --workers {workers}; predict with --workers {parts} "
                          "or a book of as many parts")
    return partition, parts


def memory_estimate(cfg: TrainConfig, graph: str, partition: str | None, workers: int) -> dict[str, int]:
    """The memory preflight's figures for this computation (bytes, the largest rank): its
    evaluation term (:func:`gnnflow.strategies.memory.evaluation_bytes` of a part, or of the whole
    graph as one part) and the process total (baseline, model, the store or shard, evaluation;
    the ``single`` strategy's :meth:`memory_terms` without its training batch)."""
    sizes = GraphSizes.read(graph, partition)
    one = cfg.replace(graph=graph, strategy="single", workers=1, partition=None, options={})
    if partition is None:
        run = RunSizes.of(SingleProcess.parse_options(one), sizes, distributed=False)
        terms, _ = SingleProcess.memory_terms(run, 0)
        whole = PartSizes(sizes.num_nodes, 0, sizes.num_edges)
        return {"evaluation_bytes": evaluation_bytes(whole, one, run.classes, run.f_dim),
                "single_evaluation_term": terms["evaluation"],
                "process": sum(v for k, v in terms.items() if k != "batch")}
    run = RunSizes.of(one, sizes, distributed=False)
    best: dict[str, int] = {}
    for part in sizes.parts[:workers]:
        ev = evaluation_bytes(part, one, run.classes, run.f_dim)
        total = BASE + run.model + sum(shard_bytes(part, sizes).values()) + 4 * sizes.num_nodes + ev
        if total > best.get("process", -1):
            best = {"evaluation_bytes": ev, "process": total}
    return best
