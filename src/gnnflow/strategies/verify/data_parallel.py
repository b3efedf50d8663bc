"""Data-parallel against single-process training: one step on P ranks vs one step on the union.

Because synchronous SGD sums the ranks' gradients of ``CE_sum(local) / N_global``, one step with
P ranks equals one single-process step on the union of the P micro-batches ("the estimation of
the model gradients is unbiased ... does not affect the convergence rate or the model accuracy",
DistDGLv2 §4.1.2).  With partition-invariant draws (:mod:`gnnflow.sampling.draws`) both sides
sample the same blocks, so finite fanouts are checked exactly too.

A relational model (RGCN, R-GAT) is checked on a small ogbn-mag-shaped homogenized graph whose
authors and institutions are featureless, partitioned into a typed book: per-relation fanouts
(names resolved against the graph), per-type feature rows, and the featureless types' embedding
rows — fetched from their owners, their gradients sent back, one sparse Adam step on their
owners — against one process on the union batch with the same table and optimizer.  Compared
beside loss, logits, gradients and parameters: the whole embedding table after the step (the
owners' rows stitched), and which rows the step advanced.  ``tamper="etypes"`` drops the edge
types from rank 1's blocks (every edge then counts as one relation): the check fails.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.config import RELATIONAL_MODELS, TrainConfig
from gnnflow.results.schema import Recorder
from gnnflow.strategies.minibatch.data_parallel import DataParallel
from gnnflow.strategies.minibatch.pipeline import MiniBatch
from gnnflow.strategies.verify.compare import compare, device_tolerance


def flat_grads(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in net.parameters()])


def flat_params(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _verify_rank(ctx: Any, cfg: TrainConfig, targets: list[np.ndarray], global_n: int,
                 tamper: str | None, perturb: bool = False) -> dict[str, Any]:
    """One inline training step of ``DataParallel`` on this rank's fixed micro-batch."""
    s = DataParallel(cfg, ctx)
    s.prepare()
    if perturb and ctx.rank == 1:  # rank 1 draws (for itself and for the requests it serves) from another stream
        s.sampler.seed += 1
    mine = targets[ctx.rank]
    labels = np.asarray(s.part.labels)[s.part.global_to_local(mine)]
    mb = MiniBatch(epoch=0, index=0, targets=torch.from_numpy(mine), labels=torch.from_numpy(labels),
                   meta={"global_batch": global_n})
    for stage in (s.sample_stage, s.load_stage, s.device_stage):
        mb = stage(mb)
    if tamper == "etypes" and ctx.rank == 1:  # the relations dropped: every edge is relation 0
        for b in mb.blocks:
            b.etypes = None
    elif tamper is not None:
        reduce = s.reduce_gradients

        def tampered(rec: Recorder) -> None:
            if ctx.rank == 1:  # this rank's gradient is dropped / counted twice
                for p in s.net.parameters():
                    p.grad.mul_(0.0 if tamper == "drop" else 2.0)
            reduce(rec)

        s.reduce_gradients = tampered  # type: ignore[method-assign]
    rec = Recorder()
    s.train_batch(mb, rec)
    out = {"loss_share": float(mb.meta["loss"]), "logits": mb.meta["logits"].cpu().numpy(),
           "grads": flat_grads(s.net).cpu().numpy(), "params": flat_params(s.net).cpu().numpy(), "targets": mine}
    if s.embeddings is not None:  # this rank's own rows after the step, and which it advanced
        emb = s.embeddings
        out.update(embedding_ids=emb.owned, embedding_rows=emb.weight.cpu().numpy().copy(),
                   embedding_steps=emb.optimizer.steps.cpu().numpy().copy(), rows_updated=emb.last_updated,
                   counters=dict(rec.counters))
    return out


def verify(workers: int, model: str = "sage", seed: int = 0, *, tamper: str | None = None,
           num_nodes: int = 600, batch_per_rank: int = 16, atol: float = 1e-5,
           workdir: str | None = None, fanouts: list[Any] | None = None, perturb_sampler: bool = False,
           device: str = "cpu", **kw: Any) -> dict[str, Any]:
    """One data-parallel step on ``workers`` ranks vs one single-process step on the union.

    A small synthetic graph (average degree 24, so fanouts of 10 and 15 really sample; for a
    relational model the typed graph of the module docstring) is partitioned at random into
    ``workers`` parts (so most neighbours are remote); rank r takes the first ``batch_per_rank``
    training vertices of part r.  ``fanouts`` (default ``[10, 10]``; -1 = full neighbourhood; a
    relational model may give ``{relation: count}`` layers): the distributed sampler (each vertex
    sampled by its owner) and the single-process sampler draw the same samples.  Compared: the
    global loss, the logits of every target, the summed gradients (on every rank) and the
    parameters after the optimizer step (and a relational model's embedding table).  ``tamper``
    ("drop" / "double") corrupts rank 1's gradient, ("etypes") drops its blocks' edge types, and
    ``perturb_sampler`` gives rank 1 another sampling stream, to show the check fails.
    ``device``: where the ranks compute (and, on a GPU, sample: ``sampling=auto``); the
    reference runs on the CPU (:func:`~gnnflow.strategies.verify.compare.device_tolerance`).
    """
    from gnnflow.partition.api import partition_graph
    from gnnflow.partition.book import PartitionBook
    from gnnflow.runtime.launch import run_ranks

    relational = model in RELATIONAL_MODELS
    fanouts = [10, 10] if fanouts is None else [f if isinstance(f, dict) else int(f) for f in fanouts]
    with tempfile.TemporaryDirectory(dir=workdir, prefix="gnnflow-verify-") as tmp:
        store = _graph(Path(tmp) / "graph", relational, num_nodes, seed)
        book = partition_graph(store.path, "random", workers, Path(tmp) / "book", seed=seed)
        cfg = DataParallel.parse_options(TrainConfig(
            graph=str(store.path), strategy="data", partition=str(book.path), model=model, hidden=16,
            num_layers=len(fanouts), fanouts=fanouts, batch_size=batch_per_rank * workers, dropout=0.0, heads=2,
            seed=seed, workers=workers, sparse_lr=0.05 if relational else None,
            options={"pipeline": False, **kw.get("options", {})}))
        parts = PartitionBook.open(book.path)
        targets = [np.asarray(parts.load_part(r).train_idx[:batch_per_rank], dtype=np.int64)
                   for r in range(workers)]
        union = np.concatenate(targets)
        results = run_ranks(_verify_rank, workers, cfg, targets, int(union.shape[0]), tamper, perturb_sampler,
                            timeout_s=120, device=device)
        ref = _reference(store, cfg, union)

    pairs = {
        "loss": (np.array([sum(r["loss_share"] for r in results)]), np.array([ref["loss"]])),
        "logits": (np.concatenate([r["logits"] for r in results]), ref["logits"]),
        "grads": ([r["grads"] for r in results], ref["grads"]),
        "params": ([r["params"] for r in results], ref["params"]),
    }
    out: dict[str, Any] = {}
    if relational:  # the owners' rows stitched into the whole table, and the rows each step advanced
        ids = np.concatenate([r["embedding_ids"] for r in results])
        order = np.argsort(ids)
        pairs["embeddings"] = (np.concatenate([r["embedding_rows"] for r in results])[order],
                               ref["embedding_rows"][ids[order]])
        pairs["embedding_steps"] = (np.concatenate([r["embedding_steps"] for r in results])[order],
                                    ref["embedding_steps"][ids[order]])
        out = {"rows_updated": [int(r["rows_updated"]) for r in results],
               "rows_touched": int(ref["rows_touched"]), "embedding_rows": int(ids.shape[0])}
    check = compare(pairs, device_tolerance(atol, device))
    return {"strategy": "data", "workers": workers, "model": model, "seed": seed, "fanouts": fanouts, **check,
            "device": device, "atol": atol, "targets": int(union.shape[0]), "tamper": tamper,
            "grad_norm": float(np.linalg.norm(ref["grads"])), **out}


def _graph(path: Path, relational: bool, num_nodes: int, seed: int) -> Any:
    """The check's graph: a homogeneous synthetic one, or (``relational``) an ogbn-mag-shaped typed
    one with featured papers and fields and featureless authors and institutions."""
    if not relational:
        from gnnflow.data.synthetic import prepare_synthetic

        return prepare_synthetic(path, num_nodes=num_nodes, avg_degree=24, feature_dim=8, num_classes=4, seed=seed)
    from gnnflow.data.hetero_synthetic import prepare_synthetic_hetero

    return prepare_synthetic_hetero(path, num_papers=num_nodes // 2, num_authors=num_nodes // 2,
                                    num_institutions=max(4, num_nodes // 40), num_fields=max(8, num_nodes // 20),
                                    num_classes=4, author_dim=0, field_dim=6, paper_dim=8, cites_per_paper=8.0,
                                    authors_per_paper=3.0, fields_per_paper=3, seed=seed)


def _reference(store: Any, cfg: TrainConfig, union: np.ndarray) -> dict[str, Any]:
    """One single-process step of ``cfg``'s model on the union batch, on the whole graph (a
    relational model: typed sampler, per-type rows, every embedding row owned here)."""
    from gnnflow.nn import build_model_from_config
    from gnnflow.sampling import NeighborSampler
    from gnnflow.strategies.common import (
        graph_degrees,
        make_optimizer,
        model_graph,
        seed_everything,
    )
    from gnnflow.strategies.embedding import JointOptimizer
    from gnnflow.strategies.relational import TypedGraph, make_embeddings

    typed = TypedGraph(store) if cfg.relational else None
    seed_everything(cfg.seed)
    net = build_model_from_config(cfg, store.feature_dim, store.num_classes,
                                  schema=typed.schema if typed is not None else None)
    opt: Any = make_optimizer(net, cfg)
    graph = model_graph(store, cfg)  # A or A + I, as the strategy builds it
    if typed is None:
        blocks = NeighborSampler(graph.indptr, graph.indices, cfg.fanouts, seed=cfg.seed).sample_blocks(union)
    else:
        blocks = typed.sampler(graph.indptr, graph.indices, cfg.fanouts, seed=cfg.seed).sample_blocks(union)
    if cfg.graph_degrees:  # whole-graph degrees, as DataParallel's GCN blocks carry
        in_deg, out_deg = graph_degrees(graph.indptr, graph.indices)
        for b in blocks:
            b.src_deg, b.dst_deg = out_deg[b.src_ids], in_deg[b.dst_ids]
    x: Any
    if typed is not None and cfg.model in RELATIONAL_MODELS:
        typed.embeddings = make_embeddings(typed.schema, typed.offsets, np.arange(store.num_nodes), cfg)
        if typed.embeddings is not None:
            opt = JointOptimizer(opt, typed.embeddings)
        x = typed.rows(blocks[0].src_ids, learn=True)
    else:
        x = torch.from_numpy(np.asarray(store.features)[blocks[0].src_ids.numpy()])
    y = torch.from_numpy(np.asarray(store.labels)[union])
    net.train()
    opt.zero_grad()
    logits = net(blocks, x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    grads = flat_grads(net).numpy()
    opt.step()
    out = {"loss": float(loss.detach()), "logits": logits.detach().numpy(), "grads": grads,
           "params": flat_params(net).numpy()}
    emb = typed.embeddings if typed is not None else None
    if emb is not None:  # the table by global id (rows of featured vertices stay 0)
        table = np.zeros((store.num_nodes, emb.dim), dtype=np.float32)
        table[emb.owned] = emb.weight.numpy()
        steps = np.zeros(store.num_nodes, dtype=np.int64)
        steps[emb.owned] = emb.optimizer.steps.numpy()
        out.update(embedding_rows=table, embedding_steps=steps, rows_touched=emb.last_updated)
    return out
