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
  (:func:`gnnflow.comm.collectives.all_reduce_gradients`, ``average=False``), then
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

from gnnflow.comm.collectives import all_reduce_gradients
from gnnflow.config import is_layer_class
from gnnflow.errors import ConfigError
from gnnflow.nn.adam import FusedAdam
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext
from gnnflow.strategies.base import Strategy
from gnnflow.strategies.memory import BASE, RunSizes, shard_bytes

SPLITS = ("train", "val", "test")


def all_reduce_sum(values: list[float] | torch.Tensor) -> torch.Tensor:
    """Sum a small float64 vector across ranks (identity with one rank)."""
    from gnnflow.strategies.metrics import reduce_sums

    return reduce_sums(torch.as_tensor(values, dtype=torch.float64).clone())


class FullBatchBase(Strategy):
    """Full-batch training loop shared by the 1D-broadcast (MG-GCN) and DGCL strategies."""

    distributed = True
    exact = True

    @classmethod
    def batch_shares(cls, cfg: Any) -> None:
        """Full-batch: one step per epoch on every training vertex; no mini-batch."""
        return None

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """A layer class is refused: full-batch training runs gnnflow's own layers on the whole
        partitioned graph (MG-GCN's hand-written GCN, DGCL's halo exchange per layer)."""
        if is_layer_class(cfg.model):
            raise ConfigError(f"model {cfg.model}: strategy {cls.name} needs a GCN-form layer of gnnflow's own "
                              "(--model gcn); a layer class trains under a layer-wise strategy: single, data, "
                              "split, p3 or hec")

    @classmethod
    def model_name(cls, cfg: Any) -> str:
        """GCN with the option ``norm=right`` is the row-normalised ``gcn-right``."""
        return gcn_model_name(cfg.model, cls.parse_options(cfg).options.norm)

    @classmethod
    def memory_terms(cls, run: RunSizes, r: int) -> tuple[dict[str, int], dict[str, int]]:
        """The shard, the part's ``Â`` tiles (12 bytes per non-zero, the self-loops included) and
        MG-GCN §4.2's shared buffers (aggregated input, every layer's output, one scratch)."""
        part = run.parts[r]
        loops = part.inner if run.cfg.adds_self_loops else 0
        terms = {"baseline": BASE, "model": run.model, **shard_bytes(part, run.sizes),
                 "adjacency": int(12 * (part.edges + loops) * cls.adjacency_copies),
                 "buffers": int(4 * part.inner * (run.f_dim + sum(d for _, d in run.dims)
                                                  + max(d for _, d in run.dims)))}
        return terms, {}

    #: copies of the adjacency a rank holds (DGCL keeps the CSR and its transpose for autograd)
    adjacency_copies: int = 1

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

    def build_optimizer(self) -> FusedAdam:
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
        self.batch_done(epoch, 0, rec, [loss])  # the global loss: every rank stops alike on a NaN
        return loss

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Global accuracy and loss per split from all-reduced sums (:mod:`gnnflow.strategies.metrics`)."""
        from gnnflow.strategies.metrics import evaluate_logits

        assert self.model is not None and self.labels is not None
        self.model.eval()
        logits = self.forward_local(False)
        return evaluate_logits({k: (logits[r], self.labels[r]) for k, r in self.split_rows.items()})


def gcn_model_name(model: str, norm: str) -> str:
    """``gnnflow.nn.build_model`` name: GCN with row normalisation is ``gcn-right``."""
    return "gcn-right" if model == "gcn" and norm == "right" else model
