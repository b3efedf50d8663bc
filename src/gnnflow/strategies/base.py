"""The interface every training strategy implements.

A strategy is a small composition of shared pieces (sampler, layers, feature
store, shuffles, plans).  The driver calls, on every rank::

    s = cls(cfg, ctx); s.prepare()
    for epoch: loss = s.run_epoch(epoch, recorder); accs = s.evaluate()

and writes one :class:`~gnnflow.results.schema.EpochRecord` per epoch and rank.

A strategy class also owns what is known about it before any rank starts: its typed options
(``Options``, :mod:`gnnflow.options`), the partition book it trains on (``partition_methods``,
:meth:`book_parts`), whether it claims single-process mathematics (``exact``: then
:mod:`gnnflow.strategies.verify` has its check), and its peak memory per process
(:meth:`memory_terms`, with the shared terms of :mod:`gnnflow.strategies.memory`).  Strategy
names map to classes in :data:`gnnflow.config.STRATEGIES`.
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from gnnflow.config import RELATIONAL_MODELS, STRATEGIES, TrainConfig
from gnnflow.errors import ConfigError, NotFiniteLoss
from gnnflow.nn.adam import FusedAdam
from gnnflow.options import StrategyOptions
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext


class Strategy(ABC):
    """One training strategy on one rank."""

    name: ClassVar[str]
    #: True when the strategy runs several ranks (needs a partition book).
    distributed: ClassVar[bool] = True
    #: the strategy's typed options (``cfg.options`` is parsed into one, once)
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions
    #: the partition methods whose books it trains on (None: any)
    partition_methods: ClassVar[frozenset[str] | None] = None
    #: True when it claims single-process mathematics (``gnnflow verify`` checks it exactly);
    #: False when it is approximate (checked by accuracy at equal epochs) or a peer
    exact: ClassVar[bool] = False
    #: True when it samples per relation and trains relational models (rgcn, rgat)
    relational: ClassVar[bool] = False
    #: modules its ranks import as they train and the launcher does not: a launcher run as a
    #: command has its fork server import them once, not each rank (gnnflow.runtime.forkserver)
    rank_imports: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parse_options(cls, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` with its options parsed into :attr:`Options` (the same object when they are)."""
        if isinstance(cfg.options, cls.Options):
            return cfg
        return cfg.replace(options=cls.Options.parse(cfg.options, cls.name))

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """What this strategy refuses in ``cfg`` (options parsed), in one line; run before any rank
        starts (:func:`gnnflow.strategies.preflight.check_run`) and by every rank.  The base
        refuses nothing."""
        return None

    @classmethod
    def check_relational(cls, cfg: TrainConfig) -> None:
        """Refuse a relational model or per-relation fanouts where this strategy has no typed path."""
        if cfg.relational and not cls.relational:
            what = f"model {cfg.model}" if cfg.model in RELATIONAL_MODELS else "per-relation fanouts"
            raise ConfigError(f"{what}: strategy {cls.name!r} has no typed (per-relation) path; use --strategy "
                              "single, data or hec (docs/hetero.md, 'What each strategy supports')")

    @classmethod
    def estimate_memory(cls, cfg: TrainConfig) -> Any:
        """The run's peak memory per process (:class:`~gnnflow.strategies.memory.MemoryEstimate`),
        from the store's and the book's metadata."""
        from gnnflow.strategies.memory import estimate_run

        return estimate_run(cfg, cls)

    @classmethod
    def memory_terms(cls, cfg: TrainConfig, sizes: Any, r: int, parts: list[Any]) -> tuple[dict[str, int], dict[str, int]]:
        """Rank ``r``'s peak bytes by term, and its helper processes' by role (see
        :func:`gnnflow.strategies.memory.estimate`); ``cfg.options`` are parsed."""
        from gnnflow.strategies.memory import BASE, shard_bytes

        return {"baseline": BASE, **shard_bytes(parts[r], sizes)}, {}

    @classmethod
    def model_name(cls, cfg: TrainConfig) -> str:
        """The :func:`gnnflow.nn.build_model` name of the model this strategy trains for ``cfg``
        (what ``gnnflow predict`` rebuilds from a run's weights); the base: ``cfg.model``."""
        return cfg.model

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
        self.cfg = self.parse_options(cfg)
        self.check_relational(self.cfg)
        self.check_config(self.cfg)
        #: the parsed options (``self.cfg.options``)
        self.options: Any = self.cfg.options
        self.ctx = ctx
        self.model: torch.nn.Module | None = None
        self.optimizer: FusedAdam | None = None
        #: learnable rows outside the model (featureless vertex types' embeddings,
        #: :class:`~gnnflow.strategies.embedding.NodeEmbeddings`: this process's rows), or None
        self.embeddings: Any = None
        #: the driver's hook after every mini-batch (mid-epoch checkpoints), or None
        self.on_batch: Any = None
        #: where the next run_epoch starts: (first mini-batch, the losses of those before it)
        self._start: tuple[int, list[float]] = (0, [])

    def start_epoch_at(self, batch: int, losses: list[float]) -> None:
        """Make the next :meth:`run_epoch` start at mini-batch ``batch`` (a checkpoint written
        inside an epoch: the batches before it were trained, with ``losses``)."""
        self._start = (int(batch), list(losses))

    def take_start(self) -> tuple[int, list[float]]:
        """(first mini-batch, losses so far) of the epoch about to run; then (0, []) again."""
        start, self._start = self._start, (0, [])
        return start

    def batch_done(self, epoch: int, index: int, rec: Recorder, losses: list[float]) -> None:
        """After mini-batch ``index`` of ``epoch`` (``losses`` so far): a loss that is not finite
        stops the run, in one line; then the driver's hook runs (a mid-epoch checkpoint)."""
        check_loss(losses[-1], epoch, index, self.ctx.rank)
        if self.on_batch is not None:
            self.on_batch(epoch, index, rec, losses)

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
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.embeddings is not None:
            state["embeddings"] = self.embeddings.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        assert self.model is not None and self.optimizer is not None
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.embeddings is not None:
            self.embeddings.load_state_dict(state["embeddings"])


def strategy_class(name: str) -> type[Strategy]:
    """The class of strategy ``name`` (its module is imported now)."""
    if name not in STRATEGIES:
        raise ConfigError(f"strategy: unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    module, cls = STRATEGIES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def option_flags() -> list[tuple[str, str, Any, str]]:
    """``gnnflow train``'s shortcut flags for strategy options: ``(flag, option, value or type,
    help)`` for every option field that names a ``flag`` (:func:`gnnflow.options.option`), once
    per flag, its help prefixed by the strategies that have it."""
    import dataclasses

    found: dict[str, tuple[str, Any, str]] = {}
    users: dict[str, list[str]] = {}
    for name in STRATEGIES:
        for f in dataclasses.fields(strategy_class(name).Options):
            flag = f.metadata.get("flag")
            if not flag:
                continue
            value = f.metadata["flag_value"]
            if value is None:  # the flag takes the option's value
                base = str(f.type).replace(" ", "").removesuffix("|None")
                value = {"int": int, "float": float}.get(base, str)
            spec = (f.name, value, f.metadata["help"])
            if found.setdefault(flag, spec)[:2] != spec[:2]:
                raise TypeError(f"option flag {flag} means two things: {found[flag][:2]} and {spec[:2]}")
            users.setdefault(flag, []).append(name)
    return [(flag, key, value, f"{'/'.join(users[flag])}: {help_text}")
            for flag, (key, value, help_text) in found.items()]


def check_loss(loss: float, epoch: int, iteration: int, rank: int) -> None:
    """Raise :class:`~gnnflow.errors.NotFiniteLoss` (one line: epoch, iteration, rank) when
    ``loss`` is NaN or infinite: training diverged or an input is not finite."""
    if not math.isfinite(loss):
        raise NotFiniteLoss(f"the training loss is {loss} at epoch {epoch}, iteration {iteration} on rank "
                            f"{rank}: training diverged or an input is not finite; lower --lr, or check the "
                            "graph's features and labels (gnnflow check)")
