"""The interface every training strategy implements, and the registry of strategies.

A strategy is a small composition of shared pieces (sampler, layers, feature
store, shuffles, plans).  The driver calls, on every rank::

    s = cls(cfg, ctx); s.prepare()
    for epoch: loss = s.run_epoch(epoch, recorder); accs = s.evaluate()

and writes one :class:`~gnnflow.results.schema.EpochRecord` per epoch and rank.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError
from gnnflow.results.schema import Recorder

# strategy name -> "module:Class"; modules are imported on use.
STRATEGIES: dict[str, str] = {
    "single": "gnnflow.strategies.single:SingleProcess",
    "data": "gnnflow.strategies.data_parallel:DataParallel",
    "distdgl": "gnnflow.strategies.distdgl:DistDGLBaseline",
    "split": "gnnflow.strategies.split_parallel:SplitParallel",
    "p3": "gnnflow.strategies.p3:PushPull",
    "fullbatch": "gnnflow.strategies.fullbatch:FullBatch",
    "hec": "gnnflow.strategies.hec:HistoricalEmbeddingCache",
    "dgcl": "gnnflow.strategies.dgcl:PlannedHalo",
}


@dataclass
class RankContext:
    """Where this rank runs: its index, the group size and the device."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    #: index among the ranks of this host (picks the device); equals ``rank`` on one host
    local_rank: int = 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


class Strategy(ABC):
    """One training strategy on one rank."""

    name: ClassVar[str]
    #: True when the strategy runs several ranks (needs a partition book).
    distributed: ClassVar[bool] = True

    @classmethod
    def book_parts(cls, cfg: TrainConfig) -> int | None:
        """How many parts ``cfg.partition`` must have for this strategy (None: no book is read)."""
        return cfg.workers if cls.distributed and cfg.partition else None

    @classmethod
    def batch_shares(cls, cfg: TrainConfig) -> dict[str, float] | None:
        """``{"global_batch", "per_rank"}``: ``cfg.batch_size`` is the global mini-batch of every
        strategy; a rank's share is about ``global / P``.  None for full-batch training."""
        ranks = cfg.workers if cls.distributed else 1
        return {"global_batch": cfg.batch_size, "per_rank": cfg.batch_size / ranks}

    def __init__(self, cfg: TrainConfig, ctx: RankContext) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    @abstractmethod
    def prepare(self) -> None:
        """Load this rank's data, build the model and optimizer."""

    @abstractmethod
    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        """Train one epoch, filling ``rec``; return the mean training loss."""

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Return ``{"train_acc", "val_acc", "test_acc"}`` (the same on every rank)."""

    def helper_pids(self) -> dict[str, int]:
        """Processes this rank started for the strategy, by role (their memory is recorded too)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds; loadable with ``torch.load(weights_only=True)``."""
        assert self.model is not None and self.optimizer is not None
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        assert self.model is not None and self.optimizer is not None
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def strategy_class(name: str) -> type[Strategy]:
    if name not in STRATEGIES:
        raise ConfigError(f"strategy: unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    module, cls = STRATEGIES[name].split(":")
    return getattr(importlib.import_module(module), cls)
