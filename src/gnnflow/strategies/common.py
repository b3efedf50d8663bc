"""Helpers every strategy shares: seeding, optimizer, batching, full-graph evaluation.

Accuracy and loss per split are :mod:`gnnflow.strategies.metrics`'s.  Evaluation is exact full-neighbourhood inference done
layer by layer over chunks of destination vertices (as DGL's examples do), so
it needs memory for one layer's representations, not for the whole
multi-hop neighbourhood; GCN blocks carry the whole graph's degrees so the
chunked computation equals a whole-graph forward pass.  On a typed graph
(:class:`~gnnflow.strategies.relational.TypedGraph`) the blocks carry edge and
vertex types, and a relational model reads per-type input rows.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gnnflow.config import TrainConfig
from gnnflow.io import atomic_file
from gnnflow.nn.adam import FusedAdam
from gnnflow.nn.model import GNN
from gnnflow.runtime.watchdog import note_progress
from gnnflow.sampling import Block, as_long_tensor
from gnnflow.sampling.tensor_sampler import DeviceCSR, TensorRelabeler, full_block, read_only_tensor
from gnnflow.strategies.rows import take_rows

if TYPE_CHECKING:
    from gnnflow.data.store import GraphStore
    from gnnflow.strategies.relational import TypedGraph


@dataclass
class ModelGraph:
    """The graph a model trains on: the store's arrays with the structure the config defines
    (A, or A + I with ``self_loops``); read as a ``GraphStore`` is (:func:`evaluate_full`)."""

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | None
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray


def model_graph(store: GraphStore | ModelGraph, cfg: TrainConfig) -> ModelGraph:
    """``store`` as the model sees it: self-loops added when ``cfg`` asks for them (every
    strategy adds them the same way: v last in its own in-neighbour list)."""
    from gnnflow.data.csr import with_self_loops

    indptr, indices = np.asarray(store.indptr), np.asarray(store.indices)
    if cfg.adds_self_loops:
        indptr, indices = with_self_loops(indptr, indices)
    return ModelGraph(indptr, indices, store.features, np.asarray(store.labels), np.asarray(store.train_idx),
                      np.asarray(store.val_idx), np.asarray(store.test_idx))


def graph_degrees(indptr: np.ndarray, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-graph (in-degree, out-degree) of every vertex, float32."""
    indptr = np.asarray(indptr)
    in_deg = torch.from_numpy(np.diff(indptr).astype(np.float32))
    out_deg = torch.from_numpy(np.bincount(np.asarray(indices), minlength=indptr.shape[0] - 1).astype(np.float32))
    return in_deg, out_deg


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> FusedAdam:
    """Adam with the configured learning rate and weight decay.

    The fused implementation (one kernel for all parameters, CPU and CUDA) issues
    a handful of operators per step instead of ~10 per parameter tensor, which
    matters when a sampling thread shares the interpreter (fewer GIL hand-offs).
    :class:`~gnnflow.nn.adam.FusedAdam` calls that kernel without ``torch.optim``, whose first
    call imports ``torch._dynamo`` (about 2 CPU seconds of every process that trains).
    """
    return FusedAdam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def batch_generator(seed: int) -> torch.Generator:
    """The generator that shuffles training vertices into batches (checkpointable)."""
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def batches(train_ids: np.ndarray | torch.Tensor, batch_size: int,
            generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Shuffle ``train_ids`` with ``generator`` and yield them in batches of ``batch_size`` (last may be short)."""
    ids = as_long_tensor(train_ids)
    perm = torch.randperm(ids.shape[0], generator=generator)
    for start in range(0, ids.shape[0], batch_size):
        yield ids[perm[start : start + batch_size]]


def num_batches(num_ids: int, batch_size: int) -> int:
    return (num_ids + batch_size - 1) // batch_size


def numpy_rng_state(rng: np.random.Generator) -> str:
    """A numpy generator's state as a JSON string (storable in a ``weights_only`` checkpoint)."""
    return json.dumps(rng.bit_generator.state)


def set_numpy_rng_state(rng: np.random.Generator, state: str) -> None:
    rng.bit_generator.state = json.loads(state)


def drop_rows_after_epoch(path: Path, last_epoch: int) -> None:
    """Rewrite the JSON-lines file ``path`` keeping the rows with ``epoch <= last_epoch``.

    What a resume does to a run's per-epoch files: rows of epochs after the
    checkpoint (and a line cut short by the crash) were written by the run that
    died and will be written again.  No file, nothing to do.
    """
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut short by the crash
            continue
        if row["epoch"] <= last_epoch:
            keep.append(line)
    with atomic_file(path) as tmp:
        tmp.write_text("".join(line + "\n" for line in keep))


def feature_rows(features: np.ndarray, ids: torch.Tensor) -> torch.Tensor:
    """Rows ``ids`` of a (memory-mapped) float32 feature matrix as a tensor."""
    return take_rows(features, ids.numpy())


@torch.no_grad()
def full_inference(model: GNN, indptr: np.ndarray, indices: np.ndarray, features: np.ndarray | None,
                   device: torch.device | str = "cpu", chunk_size: int | None = None,
                   typed: TypedGraph | None = None, layers: int | None = None) -> torch.Tensor:
    """Logits of every vertex with full neighbourhoods, computed layer by layer in chunks of
    ``chunk_size`` destinations (default: :func:`~gnnflow.strategies.device_eval.chunk_rows`) on
    ``device``; with ``layers = k`` the outputs of layer ``k`` instead (the first ``k`` layers
    run; an embedding).  A chunk's block is built where the CSR is (:class:`DeviceCSR`, on the
    device); a layer's table stays on a GPU when it fits (:mod:`gnnflow.strategies.device_eval`),
    else in host memory; the result is returned on the host.  ``typed``: the graph's types
    (blocks carry them, built by the typed sampler on the host; a model with an input layer reads
    per-type rows instead of ``features``)."""
    from gnnflow.strategies.device_eval import chunk_rows, fits_on_device
    from gnnflow.strategies.memory import BLOCK_EDGE_BYTES

    device = torch.device(device)
    typed_rows = typed is not None and model.input_layer is not None
    if typed is None:
        csr = DeviceCSR(indptr, indices, device)
        num_nodes, num_edges = csr.num_nodes, csr.num_edges
        in_deg, out_deg = csr.in_degrees().float(), csr.out_degrees().float()
        relabeler = TensorRelabeler(num_nodes, device)

        def build(lo: int, hi: int) -> Block:
            b = full_block(csr, torch.arange(lo, hi, device=device), relabeler)
            b.src_deg, b.dst_deg = out_deg[b.src_ids], in_deg[b.dst_ids]
            return b
    else:
        indptr = np.asarray(indptr)
        num_nodes, num_edges = indptr.shape[0] - 1, int(indptr[-1])
        in_deg, out_deg = graph_degrees(indptr, indices)
        sampler = typed.sampler(indptr, indices, [-1])

        def build(lo: int, hi: int) -> Block:
            b, _ = sampler.sample_layer(torch.arange(lo, hi), -1, 0)
            b.src_deg, b.dst_deg = out_deg[b.src_ids], in_deg[b.dst_ids]
            return b.to(device)

    in_dim = int(features.shape[1]) if features is not None else 128  # a typed graph's rows: for the chunk size
    was_training = model.training
    model.eval()
    try:
        # layer 0 reads the (memory-mapped) feature rows chunk by chunk, or all of them on a GPU
        # where they fit: one copy instead of a gather and a copy per chunk
        h: torch.Tensor | None = None
        if features is not None and not typed_rows and fits_on_device(4 * num_nodes * in_dim, device):
            h = read_only_tensor(np.asarray(features, dtype=np.float32)).to(device)
        step = chunk_size or chunk_rows(num_nodes, num_edges, in_dim, device)
        spans = [(s, min(s + step, num_nodes)) for s in range(0, num_nodes, step)]
        # the blocks are built once for every layer, unless a GPU has no room to keep them
        kept: list[Block] | None = [] if device.type == "cpu" or fits_on_device(BLOCK_EDGE_BYTES * num_edges, device) \
            else None
        for i in range(model.num_layers if layers is None else layers):
            # each chunk's rows go straight into the layer's table (concatenating the chunks'
            # outputs would hold every hidden row twice); the table stays on a GPU where it fits
            out: torch.Tensor | None = None
            for c, (lo, hi) in enumerate(spans):
                b = kept[c] if kept is not None and c < len(kept) else build(lo, hi)
                if kept is not None and c == len(kept):
                    kept.append(b)
                if h is not None:
                    h_src = h[b.src_ids.to(h.device)].to(device)
                elif typed_rows:
                    assert typed is not None
                    h_src = model.embed(typed.rows(b.src_ids.cpu()).to(device))
                else:
                    assert features is not None
                    h_src = feature_rows(features, b.src_ids.cpu()).to(device)
                y = model.layer_step(i, b, h_src)
                if out is None:
                    shape = (num_nodes, *y.shape[1:])
                    on_device = fits_on_device(4 * math.prod(shape), device)
                    out = torch.empty(shape, dtype=y.dtype, device=device if on_device else "cpu")
                out[lo:hi] = y.to(out.device)
                del h_src, y
                note_progress()  # a chunk is progress for the run's watchdog (no collective here)
            h = out
    finally:
        model.train(was_training)
    assert h is not None
    return h.cpu()


def evaluate_full(model: GNN, graph: GraphStore | ModelGraph, device: torch.device | str = "cpu",
                  chunk_size: int | None = None, typed: TypedGraph | None = None) -> dict[str, Any]:
    """Full-neighbourhood accuracies and losses of ``model`` on ``graph``'s train/val/test splits
    (:mod:`gnnflow.strategies.metrics`); ``typed``: see :func:`full_inference`."""
    if graph.features is None and (typed is None or model.input_layer is None):
        from gnnflow.errors import ConfigError

        raise ConfigError("evaluation needs vertex features; the graph store has no features.npy")
    from gnnflow.strategies.metrics import split_metrics, split_sums

    logits = full_inference(model, graph.indptr, graph.indices, graph.features, device, chunk_size, typed)
    labels = as_long_tensor(graph.labels)
    per_split = {}
    for name, ids in (("train", graph.train_idx), ("val", graph.val_idx), ("test", graph.test_idx)):
        ids_t = as_long_tensor(ids)
        per_split[name] = (logits[ids_t], labels[ids_t])
    return split_metrics(split_sums(per_split))
