"""Data-parallel against single-process training: one step on P ranks vs one step on the union.

Because synchronous SGD sums the ranks' gradients of ``CE_sum(local) / N_global``, one step with
P ranks equals one single-process step on the union of the P micro-batches ("the estimation of
the model gradients is unbiased ... does not affect the convergence rate or the model accuracy",
DistDGLv2 §4.1.2).  With partition-invariant draws (:mod:`gnnflow.sampling.draws`) both sides
sample the same blocks, so finite fanouts are checked exactly too.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnflow.config import TrainConfig
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
    if tamper is not None:
        reduce = s.reduce_gradients

        def tampered(rec: Recorder) -> None:
            if ctx.rank == 1:  # this rank's gradient is dropped / counted twice
                for p in s.net.parameters():
                    p.grad.mul_(0.0 if tamper == "drop" else 2.0)
            reduce(rec)

        s.reduce_gradients = tampered  # type: ignore[method-assign]
    rec = Recorder()
    s.train_batch(mb, rec)
    return {"loss_share": float(mb.meta["loss"]), "logits": mb.meta["logits"].cpu().numpy(),
            "grads": flat_grads(s.net).cpu().numpy(), "params": flat_params(s.net).cpu().numpy(),
            "targets": mine}


def verify(workers: int, model: str = "sage", seed: int = 0, *, tamper: str | None = None,
           num_nodes: int = 600, batch_per_rank: int = 16, atol: float = 1e-5,
           workdir: str | None = None, fanouts: list[int] | None = None, perturb_sampler: bool = False,
           device: str = "cpu", **kw: Any) -> dict[str, Any]:
    """One data-parallel step on ``workers`` ranks vs one single-process step on the union.

    A small synthetic graph (average degree 24, so fanouts of 10 and 15 really sample) is
    partitioned at random into ``workers`` parts (so most neighbours are remote); rank r takes
    the first ``batch_per_rank`` training vertices of part r.  ``fanouts`` (default ``[10, 10]``;
    -1 = full neighbourhood): the distributed sampler (each vertex sampled by its owner) and the
    single-process sampler draw the same samples.  Compared: the global loss, the logits of every
    target, the summed gradients (on every rank) and the parameters after the optimizer step.
    ``tamper`` ("drop" / "double") corrupts rank 1's gradient and ``perturb_sampler`` gives rank
    1 another sampling stream, to show the check fails.  ``device``: where the ranks compute (and,
    on a GPU, sample: ``sampling=auto``); the reference runs on the CPU
    (:func:`~gnnflow.strategies.verify.compare.device_tolerance`).
    """
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.nn import build_model_from_config
    from gnnflow.partition.api import partition_graph
    from gnnflow.partition.book import PartitionBook
    from gnnflow.runtime.launch import run_ranks
    from gnnflow.sampling import NeighborSampler
    from gnnflow.strategies.common import (
        graph_degrees,
        make_optimizer,
        model_graph,
        seed_everything,
    )

    fanouts = [10, 10] if fanouts is None else [int(f) for f in fanouts]
    with tempfile.TemporaryDirectory(dir=workdir, prefix="gnnflow-verify-") as tmp:
        store = prepare_synthetic(Path(tmp) / "graph", num_nodes=num_nodes, avg_degree=24, feature_dim=8,
                                  num_classes=4, seed=seed)
        book = partition_graph(store.path, "random", workers, Path(tmp) / "book", seed=seed)
        cfg = DataParallel.parse_options(TrainConfig(
            graph=str(store.path), strategy="data", partition=str(book.path), model=model, hidden=16,
            num_layers=len(fanouts), fanouts=fanouts, batch_size=batch_per_rank * workers, dropout=0.0, heads=2,
            seed=seed, workers=workers, options={"pipeline": False, **kw.get("options", {})}))
        parts = PartitionBook.open(book.path)
        targets = [np.asarray(parts.load_part(r).train_idx[:batch_per_rank], dtype=np.int64)
                   for r in range(workers)]
        union = np.concatenate(targets)
        n = int(union.shape[0])
        results = run_ranks(_verify_rank, workers, cfg, targets, n, tamper, perturb_sampler, timeout_s=120,
                            device=device)

        # single process: the same model, the union batch, the whole graph
        seed_everything(seed)
        net = build_model_from_config(cfg, store.feature_dim, store.num_classes)
        opt = make_optimizer(net, cfg)
        graph = model_graph(store, cfg)  # A or A + I, as the strategy builds it
        blocks = NeighborSampler(graph.indptr, graph.indices, cfg.fanouts, seed=seed).sample_blocks(union)
        if cfg.graph_degrees:  # whole-graph degrees, as DataParallel's GCN blocks carry
            in_deg, out_deg = graph_degrees(graph.indptr, graph.indices)
            for b in blocks:
                b.src_deg, b.dst_deg = out_deg[b.src_ids], in_deg[b.dst_ids]
        x = torch.from_numpy(np.asarray(store.features)[blocks[0].src_ids.numpy()])
        y = torch.from_numpy(np.asarray(store.labels)[union])
        net.train()
        opt.zero_grad()
        logits = net(blocks, x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        grads = flat_grads(net).numpy()
        opt.step()
        params = flat_params(net).numpy()

    check = compare({
        "loss": (np.array([sum(r["loss_share"] for r in results)]), np.array([float(loss.detach())])),
        "logits": (np.concatenate([r["logits"] for r in results]), logits.detach().numpy()),
        "grads": ([r["grads"] for r in results], grads),
        "params": ([r["params"] for r in results], params),
    }, device_tolerance(atol, device))
    return {"strategy": "data", "workers": workers, "model": model, "seed": seed, "fanouts": fanouts, **check,
            "device": device,
            "atol": atol, "targets": n, "tamper": tamper, "grad_norm": float(np.linalg.norm(grads))}
