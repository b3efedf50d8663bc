"""Full-batch strategies against single-process full-batch training: MG-GCN's 1D broadcast SpMM
(``fullbatch``) and DGCL's planned halo exchange (``dgcl``).

Each rank loads the reference's initial weights, computes its rows' logits, its share of the
loss and the all-reduced gradients; the check stitches the logits by global id and compares
them, the loss and the gradients with one single-process forward/backward on the whole graph.
"""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gnnflow.comm.collectives import all_reduce_gradients
from gnnflow.comm.plan import PLANNERS
from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext
from gnnflow.strategies.fullbatch.base import FullBatchBase, all_reduce_sum, gcn_model_name
from gnnflow.strategies.fullbatch.dgcl import PlannedHalo
from gnnflow.strategies.fullbatch.row1d import FullBatch
from gnnflow.strategies.verify.compare import compare, device_tolerance


def verify_graph(graph: str | None, tmp: str, seed: int) -> str:
    """The graph a ``verify`` runs on: ``graph``, or a small synthetic one written under ``tmp``."""
    if graph is not None:
        return str(graph)
    from gnnflow.data.synthetic import prepare_synthetic

    return str(prepare_synthetic(f"{tmp}/graph", num_nodes=600, avg_degree=6, feature_dim=12,
                                 num_classes=5, seed=seed).path)


def full_graph_reference(graph: str, model: str, hidden: int, num_layers: int, *, norm: str = "both",
                         self_loops: bool = False, dropout: float = 0.0, heads: int = 1,
                         seed: int = 0) -> dict[str, Any]:
    """Single-process full-batch forward/backward of ``model`` (``gnnflow.nn``) on the whole graph:
    logits, mean training loss, weight gradients and the initial weights."""
    from gnnflow.data.csr import with_self_loops
    from gnnflow.data.store import open_store
    from gnnflow.nn import build_model
    from gnnflow.sampling import Block
    from gnnflow.strategies.common import seed_everything

    store = open_store(graph)
    x = torch.from_numpy(np.array(store.features, dtype=np.float32))
    y = torch.from_numpy(np.array(store.labels, dtype=np.int64))
    train = torch.from_numpy(np.array(store.train_idx, dtype=np.int64))
    seed_everything(seed)
    net = build_model(gcn_model_name(model, norm), x.shape[1], hidden, int(store.num_classes), num_layers,
                      dropout, heads)
    indptr, indices = np.asarray(store.indptr), np.asarray(store.indices)
    if self_loops:
        indptr, indices = with_self_loops(indptr, indices)
    logits = net([Block.full_graph(indptr, indices)] * num_layers, x)
    loss = F.cross_entropy(logits[train], y[train])
    loss.backward()
    return {"logits": logits.detach().numpy(), "loss": float(loss.detach()),
            "grads": {k: p.grad.numpy().copy() for k, p in net.named_parameters()},
            "state": {k: v.clone() for k, v in net.state_dict().items()}}


def rank_outputs(strategy: FullBatchBase, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """On one rank of a prepared strategy: load the reference weights, then this rank's
    logits (no grad), the global loss and the all-reduced (summed) weight gradients."""
    assert strategy.model is not None
    strategy.model.load_state_dict(state)
    strategy.model.eval()
    with torch.no_grad():
        logits = strategy.forward_local(False).cpu().numpy().copy()
    strategy.model.zero_grad(set_to_none=True)
    share = strategy.compute_gradients(Recorder())
    all_reduce_gradients(strategy.model, average=False)
    loss = float(all_reduce_sum([share])[0].item())
    return {"logits": logits, "loss": loss,
            "grads": {k: p.grad.cpu().numpy().copy() for k, p in strategy.model.named_parameters()}}


def compare_to_reference(results: list[dict[str, Any]], ref: dict[str, Any], tol: float,
                         relative: bool) -> dict[str, Any]:
    """Stitch the ranks' logits by their global ``ids`` and compare logits, loss and gradients with
    the reference (:func:`~gnnflow.strategies.verify.compare.compare`); also require every rank to
    hold the same (replicated) gradients."""
    logits = np.zeros_like(ref["logits"])
    for r in results:
        logits[r["ids"]] = r["logits"]
    check = compare({"logits": (logits, ref["logits"]), "loss": (np.array([results[0]["loss"]]),
                                                                 np.array([ref["loss"]])),
                     "grads": (results[0]["grads"], ref["grads"])}, tol, relative)
    grads = results[0]["grads"]
    same = all(np.array_equal(r["grads"][k], grads[k]) for r in results for k in grads)
    return {**check, "passed": check["passed"] and same, "replicated_grads_equal": same}


def _row1d_rank(ctx: RankContext, cfg: TrainConfig, state: dict[str, torch.Tensor],
                 skip_rounds: tuple[int, ...]) -> dict[str, Any]:
    s = FullBatch(cfg, ctx, skip_rounds=skip_rounds)
    s.prepare()
    out = rank_outputs(s, state)
    return {**out, "ids": s.global_ids, "rounds": len(s.engine.records) if s.engine else 0}


def verify_row1d(workers: int, model: str = "gcn", seed: int = 0, **kw: Any) -> dict[str, Any]:
    """Logits, loss and weight gradients of the P-rank full-batch GCN vs single-process GCN.

    ``kw``: ``graph`` (a store path; default: a small power-law synthetic graph),
    ``partition`` (a partition book of ``graph`` with ``workers`` parts, e.g. permute-1d),
    ``num_layers`` (2), ``hidden`` (16), ``norm`` ("both"), ``memory`` ("reuse"),
    ``overlap`` (True), ``permute`` (True), ``transpose`` ("auto"), ``tol`` (1e-5,
    relative to the largest reference magnitude), ``skip_rounds`` (test only: rounds
    whose SpMM is dropped, which must make the check fail), ``device`` ("cpu": where the ranks
    compute; the reference runs on the CPU).
    """
    from gnnflow.runtime.launch import run_ranks

    if model != "gcn":
        raise ConfigError(f"--model {model}: strategy fullbatch verifies GCN only (MG-GCN); pass --model gcn")
    device = str(kw.pop("device", "cpu"))
    tol = device_tolerance(float(kw.pop("tol", 1e-5)), device)
    skip_rounds = tuple(kw.pop("skip_rounds", ()))
    norm = str(kw.pop("norm", "both"))
    graph = kw.pop("graph", None)
    partition = kw.pop("partition", None)
    options = {"norm": norm, "memory": kw.pop("memory", "reuse"), "overlap": kw.pop("overlap", True),
               "permute": kw.pop("permute", True), "transpose": kw.pop("transpose", "auto")}
    self_loops = kw.pop("self_loops", None)
    num_layers = int(kw.pop("num_layers", 2))
    hidden = int(kw.pop("hidden", 16))
    timeout_s = float(kw.pop("timeout_s", 120))
    if kw:
        raise ConfigError(f"verify fullbatch: unknown option(s) {sorted(kw)}")
    with tempfile.TemporaryDirectory(prefix="gnnflow-verify-") as tmp:
        graph = verify_graph(graph, tmp, seed)
        cfg = TrainConfig(graph=str(graph), strategy="fullbatch", model="gcn", hidden=hidden,
                          num_layers=num_layers, fanouts=[-1] * num_layers, dropout=0.0, seed=seed,
                          workers=workers, partition=str(partition) if partition else None,
                          self_loops=self_loops, options=options)
        ref = full_graph_reference(str(graph), "gcn", hidden, num_layers, norm=norm,
                                   self_loops=cfg.adds_self_loops, seed=seed)
        results = run_ranks(_row1d_rank, workers, FullBatch.parse_options(cfg), ref["state"], skip_rounds,
                            timeout_s=timeout_s, device=device)
    check = compare_to_reference(results, ref, tol, relative=True)
    return {**check, "workers": workers, "num_layers": num_layers, "norm": norm,
            "memory": options["memory"], "overlap": options["overlap"], "tolerance": tol,
            "rounds_per_rank": results[0]["rounds"], "loss": ref["loss"]}


def _dgcl_rank(ctx: RankContext, cfg: TrainConfig, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    s = PlannedHalo(cfg, ctx)
    s.prepare()
    out = {**rank_outputs(s, state), "ids": s.inner_ids,
           "relay_rows": int(getattr(s.table, "relay_ids", np.zeros(0)).shape[0]) if s.table is not None else 0}
    s.close()
    return out


def verify_dgcl(workers: int, model: str = "gcn", seed: int = 0, **kw: Any) -> dict[str, Any]:
    """Logits, loss and weight gradients of ``--strategy dgcl`` vs single-process full-batch training.

    ``kw``: ``planner`` (one name or a list; default all four), ``topology`` (preset or
    file; default ``dgx1-v100`` restricted to ``workers`` when ``workers <= 8``),
    ``graph`` (store path; default a small synthetic graph), ``num_layers`` (2),
    ``hidden`` (16), ``norm`` ("both"), ``project`` (True: narrowing GCN layers fetch projected
    rows), ``tol`` (1e-5 absolute), ``timeout_s``, ``device`` ("cpu": where the ranks compute).
    """
    from gnnflow.partition.api import partition_graph
    from gnnflow.runtime.launch import run_ranks

    planners = kw.pop("planner", list(PLANNERS))
    planners = [planners] if isinstance(planners, str) else list(planners)
    for pl in planners:
        if pl not in PLANNERS:
            raise ConfigError(f"verify dgcl: unknown planner {pl!r}; choose among {', '.join(PLANNERS)}")
    topology = kw.pop("topology", "dgx1-v100" if workers <= 8 else None)
    device = str(kw.pop("device", "cpu"))
    tol = device_tolerance(float(kw.pop("tol", 1e-5)), device)
    graph = kw.pop("graph", None)
    num_layers = int(kw.pop("num_layers", 2))
    hidden = int(kw.pop("hidden", 16))
    norm = str(kw.pop("norm", "both"))
    self_loops = kw.pop("self_loops", None)
    project = bool(kw.pop("project", True))
    timeout_s = float(kw.pop("timeout_s", 120))
    if kw:
        raise ConfigError(f"verify dgcl: unknown option(s) {sorted(kw)}")
    with tempfile.TemporaryDirectory(prefix="gnnflow-verify-dgcl-") as tmp:
        graph = verify_graph(graph, tmp, seed)
        book = partition_graph(graph, "metis", workers, f"{tmp}/parts", seed=seed)
        loops = TrainConfig(graph=str(graph), model=model, self_loops=self_loops).adds_self_loops
        ref = full_graph_reference(graph, model, hidden, num_layers, norm=norm, self_loops=loops, seed=seed)
        per: dict[str, Any] = {}
        for pl in planners:
            options = {"planner": pl, "norm": norm, "project": str(project).lower()}
            if topology:
                options["topology"] = topology
            cfg = TrainConfig(graph=str(graph), strategy="dgcl", partition=str(book.path), model=model,
                              hidden=hidden, num_layers=num_layers, fanouts=[-1] * num_layers, dropout=0.0,
                              seed=seed, workers=workers, self_loops=self_loops, options=options)
            results = run_ranks(_dgcl_rank, workers, PlannedHalo.parse_options(cfg), ref["state"],
                                timeout_s=timeout_s, device=device)
            per[pl] = {**compare_to_reference(results, ref, tol, relative=False),
                       "relay_rows": sum(r["relay_rows"] for r in results)}
    worst = {k: max(per[pl]["max_abs_diff"][k] for pl in per) for k in ("logits", "loss", "grads")}
    worst_rel = {k: max(per[pl]["max_rel_diff"][k] for pl in per) for k in ("logits", "loss", "grads")}
    return {"passed": all(v["passed"] for v in per.values()), "max_abs_diff": worst, "max_rel_diff": worst_rel,
            "planners": per, "workers": workers, "model": model, "topology": topology, "tolerance": tol,
            "loss": ref["loss"]}
