"""Shared base of the full-batch distributed strategies (MG-GCN §4, DGCL §3).

In full-batch training every rank owns a block of vertices (its rows of H and
of the adjacency) and one epoch is one step over the whole graph.  What is
common to every such strategy lives here:

* **loss** — softmax cross-entropy summed over this rank's *local* training
  vertices and divided by the *global* number of training vertices, so the sum
  of the ranks' losses is exactly the single-process mean loss and the sum of
  their gradients is exactly its gradient;
* **weights replicated** (MG-GCN §4.1) — after the backward pass the
  parameter gradients are summed across ranks with one all-reduce
  (:func:`gnnflow.distributed.comm.all_reduce_gradients`, ``average=False``), then
  every rank takes the same optimizer step;
* **evaluation** — a forward pass without gradients; correct/total counts per
  split are all-reduced, so every rank reports the global accuracy;
* **records** — ``forward_backward``, ``allreduce``, ``step``, ``eval`` timers
  and ``iterations``; subclasses add ``comm`` and their own counters.

Hooks a subclass provides (the DGCL strategy supplies only the first two):

``prepare()``
    Load this rank's data, then call :meth:`FullBatchBase.set_local_data`
    with the local labels and the *local row positions* of the train/val/test
    vertices, and set ``self.model`` (parameters replicated, same seed on every
    rank) and ``self.optimizer`` (:meth:`FullBatchBase.build_optimizer`).
``forward_local(training: bool) -> Tensor``
    Logits ``[num_local_rows, num_classes]`` of this rank's rows, connected to
    ``self.model``'s parameters by autograd when ``training``.  May run
    collectives (every rank calls it the same number of times).
``compute_gradients(rec) -> float`` (optional)
    Fill ``p.grad`` of every parameter with this rank's share and return this
    rank's share of the loss.  The default runs ``forward_local(True)``,
    :meth:`local_loss` and ``backward()``; a strategy with a hand-written
    backward pass (MG-GCN §4.2 buffer reuse) overrides it.

:meth:`run_epoch` = ``compute_gradients`` → gradient all-reduce → step, and
returns the global loss (all-reduced sum of the shares).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F

from gnnflow.distributed.comm import all_reduce_gradients
from gnnflow.results.schema import Recorder
from gnnflow.strategies.base import RankContext, Strategy

SPLITS = ("train", "val", "test")


def all_reduce_sum(values: list[float] | torch.Tensor) -> torch.Tensor:
    """Sum a small float64 vector across ranks (identity with one rank)."""
    from gnnflow.strategies.metrics import reduce_sums

    return reduce_sums(torch.as_tensor(values, dtype=torch.float64).clone())


class FullBatchBase(Strategy):
    """Full-batch training loop shared by the 1D-broadcast (MG-GCN) and DGCL strategies."""

    distributed = True

    @classmethod
    def batch_shares(cls, cfg: Any) -> None:
        """Full-batch: one step per epoch on every training vertex; no mini-batch."""
        return None

    def __init__(self, cfg: Any, ctx: RankContext) -> None:
        super().__init__(cfg, ctx)
        self.labels: torch.Tensor | None = None
        self.split_rows: dict[str, torch.Tensor] = {}
        self.split_totals: dict[str, int] = {}

    # ----- data the subclass hands over -------------------------------------------------
    def set_local_data(self, labels: torch.Tensor, train_rows: torch.Tensor, val_rows: torch.Tensor,
                       test_rows: torch.Tensor) -> None:
        """Local labels and the local row positions of each split; global counts all-reduced."""
        self.labels = torch.as_tensor(labels, dtype=torch.int64).to(self.ctx.device)
        rows = {"train": train_rows, "val": val_rows, "test": test_rows}
        self.split_rows = {k: torch.as_tensor(v, dtype=torch.int64).to(self.ctx.device) for k, v in rows.items()}
        totals = all_reduce_sum([float(self.split_rows[k].numel()) for k in SPLITS])
        self.split_totals = {k: int(totals[i].item()) for i, k in enumerate(SPLITS)}

    def build_optimizer(self) -> torch.optim.Optimizer:
        """``strategies.common.make_optimizer(model, cfg)`` (Adam, MG-GCN §6.1)."""
        from gnnflow.strategies.common import make_optimizer

        assert self.model is not None
        return make_optimizer(self.model, self.cfg)

    # ----- hooks ---------------------------------------------------------------------------
    def forward_local(self, training: bool) -> torch.Tensor:
        """Logits of this rank's rows; subclasses implement (see module docstring)."""
        raise NotImplementedError

    def local_loss(self, logits: torch.Tensor) -> torch.Tensor:
        """This rank's share of the mean training loss (sum over local train rows / global count)."""
        assert self.labels is not None, "prepare() must call set_local_data()"
        rows = self.split_rows["train"]
        total = max(1, self.split_totals["train"])
        if rows.numel() == 0:
            return logits.sum() * 0.0  # keeps the graph connected so backward still runs collectives
        return F.cross_entropy(logits[rows], self.labels[rows], reduction="sum") / total

    def compute_gradients(self, rec: Recorder) -> float:
        """Default: autograd through :meth:`forward_local`; returns this rank's loss share."""
        assert self.model is not None
        logits = self.forward_local(True)
        loss = self.local_loss(logits)
        loss.backward()
        return float(loss.detach())

    # ----- the loop --------------------------------------------------------------------------
    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        """One full-batch step: gradients → all-reduce (sum) → optimizer step."""
        assert self.model is not None and self.optimizer is not None
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        t = time.perf_counter()
        share = self.compute_gradients(rec)
        rec.add_time("forward_backward", time.perf_counter() - t)
        with rec.timer("allreduce"):
            all_reduce_gradients(self.model, average=False)
            loss = float(all_reduce_sum([share])[0].item())
        with rec.timer("step"):
            self.optimizer.step()
        rec.count("iterations", 1)
        return loss

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Global accuracy and loss per split from all-reduced sums (:mod:`gnnflow.strategies.metrics`)."""
        from gnnflow.strategies.metrics import evaluate_logits

        assert self.model is not None and self.labels is not None
        self.model.eval()
        logits = self.forward_local(False)
        return evaluate_logits({k: (logits[r], self.labels[r]) for k, r in self.split_rows.items()})


# ------------------------------------------------------------------------------------------------
# Verification against single-process full-batch training (shared by fullbatch and dgcl)
# ------------------------------------------------------------------------------------------------


def verify_graph(graph: str | None, tmp: str, seed: int) -> str:
    """The graph a ``verify`` runs on: ``graph``, or a small synthetic one written under ``tmp``."""
    if graph is not None:
        return str(graph)
    from gnnflow.data.synthetic import prepare_synthetic

    return str(prepare_synthetic(f"{tmp}/graph", num_nodes=600, avg_degree=6, feature_dim=12,
                                 num_classes=5, seed=seed).path)


def gcn_model_name(model: str, norm: str) -> str:
    """``gnnflow.nn.build_model`` name: GCN with row normalisation is ``gcn-right``."""
    return "gcn-right" if model == "gcn" and norm == "right" else model


def full_graph_reference(graph: str, model: str, hidden: int, num_layers: int, *, norm: str = "both",
                         self_loops: bool = False, dropout: float = 0.0, heads: int = 1,
                         seed: int = 0) -> dict[str, Any]:
    """Single-process full-batch forward/backward of ``model`` (``gnnflow.nn``) on the whole graph:
    logits, mean training loss, weight gradients and the initial weights."""
    import numpy as np

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
        logits = strategy.forward_local(False).numpy().copy()
    strategy.model.zero_grad(set_to_none=True)
    share = strategy.compute_gradients(Recorder())
    all_reduce_gradients(strategy.model, average=False)
    loss = float(all_reduce_sum([share])[0].item())
    return {"logits": logits, "loss": loss,
            "grads": {k: p.grad.numpy().copy() for k, p in strategy.model.named_parameters()}}


def compare_to_reference(results: list[dict[str, Any]], ref: dict[str, Any], tol: float,
                         relative: bool) -> dict[str, Any]:
    """Stitch the ranks' logits by their global ``ids`` and compare logits, loss and gradients
    with the reference; also require every rank to hold the same (replicated) gradients.
    ``passed`` uses the relative differences when ``relative`` else the absolute ones."""
    import numpy as np

    logits = np.zeros_like(ref["logits"])
    for r in results:
        logits[r["ids"]] = r["logits"]
    grads = results[0]["grads"]
    diffs = {"logits": float(np.abs(logits - ref["logits"]).max()),
             "loss": abs(results[0]["loss"] - ref["loss"]),
             "grads": max(float(np.abs(grads[k] - ref["grads"][k]).max()) for k in ref["grads"])}
    scale = {"logits": float(np.abs(ref["logits"]).max()), "loss": abs(ref["loss"]),
             "grads": max(float(np.abs(g).max()) for g in ref["grads"].values())}
    rel = {k: diffs[k] / max(scale[k], 1e-30) for k in diffs}
    same = all(np.array_equal(r["grads"][k], grads[k]) for r in results for k in grads)
    checked = rel if relative else diffs
    return {"passed": bool(all(v <= tol for v in checked.values()) and same), "max_abs_diff": diffs,
            "max_rel_diff": rel, "replicated_grads_equal": same}
