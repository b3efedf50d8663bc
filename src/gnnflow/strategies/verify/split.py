"""Split parallelism against single-process training on the same global mini-batch (GSplit §5).

``workers`` ranks in split groups sample one mini-batch cooperatively, run :func:`sp_forward`,
backward and the gradient all-reduce.  The single-process side samples the same targets on the
whole graph, independently: with partition-invariant draws the splits' edges must be exactly its
edges, and its unchanged model with the same initial parameters must give the same loss, target
logits and parameter gradients.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gnnflow.comm.collectives import all_reduce, all_reduce_gradients, all_to_all_rows
from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.devices import HOST
from gnnflow.sampling import as_long_tensor
from gnnflow.strategies.split.sampling import SplitGraph, SplitSampler, sp_sample
from gnnflow.strategies.split.split_parallel import (
    detached_shuffle,
    group_targets,
    make_split_groups,
    sp_forward,
)
from gnnflow.strategies.verify.compare import compare, device_tolerance


def _verify_rank(ctx: RankContext, arrays: dict[str, Any], node_part: np.ndarray, targets: np.ndarray,
                 model_name: str, fanouts: list[int], seed: int, backward_shuffle: bool, k: int,
                 perturb: bool) -> dict[str, Any]:
    from gnnflow.nn import build_model

    group, gi, gr, ng = make_split_groups(ctx.rank, ctx.world_size, k)
    graph = SplitGraph.from_arrays(arrays["indptr"], arrays["indices"], node_part, gr, arrays["features"],
                                   arrays["labels"], num_parts=k)
    if arrays.get("degrees") is not None:  # GCN: whole-graph degrees of the owned vertices
        graph.degrees = torch.from_numpy(arrays["degrees"][graph.inner_ids])
    # perturb: rank 1 draws from another stream (the check must then fail)
    sampler = SplitSampler(graph, fanouts, seed=seed + (1 if perturb and ctx.rank == 1 else 0), group=group)
    local = group_targets(torch.from_numpy(targets), as_long_tensor(node_part), gi, ng, gr)
    sample = sp_sample(sampler.at(0, 0), local)
    torch.manual_seed(seed)
    model = build_model(model_name, arrays["features"].shape[1], 16, int(arrays["num_classes"]), len(fanouts),
                        0.0, 2)
    edges = [(b.dst_ids[b.edge_dst()].numpy(), b.src_ids[b.indices].numpy()) for b in sample.blocks]
    x = graph.load_features(sample.input_ids).to(ctx.device)
    y = graph.load_labels(sample.targets).to(ctx.device)
    model = model.to(ctx.device)
    shuffle = all_to_all_rows if backward_shuffle else detached_shuffle
    logits = sp_forward(model, sample.to(ctx.device), x, group=group, shuffle=shuffle)
    loss = F.cross_entropy(logits, y, reduction="sum") / len(targets)
    loss.backward()
    all_reduce_gradients(model, average=False)
    loss_sum = loss.detach().double().reshape(1).cpu()
    all_reduce(loss_sum, HOST)
    return {
        "targets": sample.targets.numpy(),
        "logits": logits.detach().cpu().numpy(),
        "loss": float(loss_sum),
        # numpy, not tensors: torch would share tensor storage with this (exiting) process by fd
        "grads": {n: p.grad.detach().cpu().numpy().copy() for n, p in model.named_parameters()}
        if ctx.rank == 0 else None,
        "edges": edges,
        "inputs": sample.input_ids.numpy(),
    }


def _edge_set(dst: np.ndarray, src: np.ndarray, n: int) -> np.ndarray:
    return np.unique(dst.astype(np.int64) * n + src)


def verify(workers: int, model: str = "sage", seed: int = 0, **kw: Any) -> dict[str, Any]:
    """Split-parallel vs single-process on the same global mini-batch (issue 6, acceptance 1-2; issue 18).

    ``workers`` ranks in split groups of ``split_group_size`` (default all) sample one
    mini-batch cooperatively (a random ``node_part`` over a small synthetic graph), run
    :func:`sp_forward`, backward and the gradient all-reduce.  The single-process side
    samples the same targets with :class:`~gnnflow.sampling.NeighborSampler` on the whole
    graph, independently: with partition-invariant draws the splits' edges must be
    exactly its edges (``sample_equal``), and its unchanged model with the same initial
    parameters must give the same loss, target logits and parameter gradients.
    Options: ``num_nodes`` (300), ``batch_size`` (48), ``fanouts`` ([4, 3]),
    ``split_group_size`` (workers), ``backward_shuffle`` (True; False drops the backward
    exchange and must fail), ``perturb_sampler`` (False; True gives rank 1 another
    stream and must fail), ``tol`` (1e-5), ``timeout_s`` (120), ``device`` ("cpu": where the
    ranks compute; the reference runs on the CPU).
    """
    from gnnflow.data.synthetic import generate_synthetic
    from gnnflow.nn import build_model
    from gnnflow.runtime.launch import run_ranks
    from gnnflow.sampling import NeighborSampler
    from gnnflow.strategies.common import graph_degrees
    from gnnflow.strategies.split.redundancy import microbatch_counts, split_targets

    num_nodes = int(kw.get("num_nodes", 300))
    fanouts = [int(f) for f in kw.get("fanouts", [4, 3])]
    batch_size = int(kw.get("batch_size", 48))
    k = int(kw.get("split_group_size", workers))
    if k < 1 or workers % k:
        raise ConfigError(f"split_group_size: {k} must divide the number of workers ({workers})")
    device = str(kw.get("device", "cpu"))
    tol = device_tolerance(float(kw.get("tol", 1e-5)), device)
    data = generate_synthetic(num_nodes=num_nodes, avg_degree=24.0, feature_dim=12, num_classes=4, seed=seed)
    arrays = {k_: np.asarray(data[k_]) for k_ in ("indptr", "indices", "features", "labels", "train_idx")}
    arrays["num_classes"] = data["num_classes"]
    # the model's graph and degrees, as training defines them (self_loops, gcn_degrees=graph)
    model_cfg = TrainConfig(graph="-", model=model)
    if model_cfg.adds_self_loops:
        from gnnflow.data.csr import with_self_loops

        arrays["indptr"], arrays["indices"] = with_self_loops(arrays["indptr"], arrays["indices"])
    in_deg, out_deg = graph_degrees(arrays["indptr"], arrays["indices"])
    arrays["degrees"] = torch.stack([in_deg, out_deg], 1).numpy() if model_cfg.graph_degrees else None
    rng = np.random.default_rng(seed)
    node_part = rng.integers(0, k, num_nodes).astype(np.int32)
    targets = rng.choice(arrays["train_idx"], min(batch_size, arrays["train_idx"].shape[0]), replace=False)
    t0 = time.perf_counter()
    out = run_ranks(_verify_rank, workers, arrays, node_part, targets, model, fanouts, seed,
                    bool(kw.get("backward_shuffle", True)), k, bool(kw.get("perturb_sampler", False)),
                    timeout_s=float(kw.get("timeout_s", 120)), device=device)
    wall = time.perf_counter() - t0

    order = np.concatenate([r["targets"] for r in out])
    blocks = NeighborSampler(arrays["indptr"], arrays["indices"], fanouts, seed=seed).at(0, 0).sample_blocks(order)
    if arrays["degrees"] is not None:
        for b in blocks:
            b.src_deg, b.dst_deg = out_deg[b.src_ids], in_deg[b.dst_ids]
    sample_equal = all(
        np.array_equal(_edge_set(b.dst_ids[b.edge_dst()].numpy(), b.src_ids[b.indices].numpy(), num_nodes),
                       np.unique(np.concatenate([_edge_set(*r["edges"][layer], num_nodes) for r in out])))
        for layer, b in enumerate(blocks))
    torch.manual_seed(seed)
    ref_model = build_model(model, arrays["features"].shape[1], 16, int(arrays["num_classes"]), len(fanouts), 0.0, 2)
    input_ids = blocks[0].src_ids
    x = torch.from_numpy(arrays["features"][input_ids.numpy()])
    y = torch.from_numpy(arrays["labels"][order])
    ref_logits = ref_model(blocks, x)
    ref_loss = F.cross_entropy(ref_logits, y)
    ref_loss.backward()

    check = compare({"loss": (np.array([out[0]["loss"]]), np.array([float(ref_loss.detach())])),
                     "logits": (np.concatenate([r["logits"] for r in out]), ref_logits.detach().numpy()),
                     "grads": (out[0]["grads"], {n: p.grad.numpy() for n, p in ref_model.named_parameters()})},
                    tol)
    loaded = sum(int(r["inputs"].shape[0]) for r in out)
    # the same targets as ``workers`` data-parallel micro-batches (split by owner, each sampled alone)
    dp = microbatch_counts(NeighborSampler(arrays["indptr"], arrays["indices"], fanouts, seed=seed),
                           split_targets(targets, k, node_part))
    return {
        "strategy": "split",
        "workers": workers,
        "split_group_size": k,
        "model": model,
        "fanouts": fanouts,
        **check,
        "passed": sample_equal and check["passed"],
        "sample_equal": sample_equal,
        "loss": float(ref_loss.detach()),
        "num_targets": int(targets.shape[0]),
        "sampled_edges": sum(b.num_edges for b in blocks),
        "features_loaded": loaded,
        "unique_input_vertices": int(input_ids.numel()),
        "features_loaded_ratio": loaded / max(1, int(input_ids.numel())),
        "dp_features_loaded": dp["features"],
        "dp_sampled_edges": dp["edges"],
        "backward_shuffle": bool(kw.get("backward_shuffle", True)),
        "wall_s": wall,
    }
