"""Checks before a training run starts any rank or writes anything.

A user's mistake (a book with the wrong number of parts, a book made from
another graph (:func:`~gnnflow.partition.book.check_book_matches_graph`), a bad
strategy option, a path that does not exist) is found
here, in the launching process, in well under a second, and reported as one
line; nothing is spawned and no run directory is made.  Ranks repeat the checks
they depend on (they also run without this driver: verify, benches).

The memory preflight (:func:`gnnflow.strategies.memory.check_memory`, issue
19.5) estimates every process's peak from small metadata, logs it on one line
with the memory available, and refuses a run whose processes on this host would
not fit (``--force`` runs it anyway, with a warning).
"""

from __future__ import annotations

import logging
import os

from gnnflow.config import TrainConfig, is_layer_class
from gnnflow.data.meta import read_store_meta
from gnnflow.errors import ConfigError
from gnnflow.strategies.base import Strategy
from gnnflow.strategies.memory import check_memory

log = logging.getLogger("gnnflow.train")


def check_run(cfg: TrainConfig, cls: type[Strategy], memory: bool = True) -> TrainConfig:
    """Everything about ``cfg`` that can be checked without ranks (raises a one-line error);
    ``memory``: also the memory preflight (``cfg.force``: run even where the estimate exceeds
    what is available; ``gnnflow train`` runs it first, before any rank starts).  Returns
    ``cfg`` with its options parsed (:meth:`Strategy.parse_options`)."""
    cfg = cls.parse_options(cfg)
    cores = os.cpu_count() or 1
    if cfg.workers > cores:
        log.warning("%d ranks on %d cores: each rank gets %.2f of a core, so the run will be slow "
                    "(use fewer --workers, or a machine with more cores)", cfg.workers, cores,
                    cores / cfg.workers)
    if not cls.distributed and cfg.workers > 1:
        raise ConfigError(f"strategy {cfg.strategy!r} runs in one process; use --workers 1")
    cls.check_relational(cfg)
    cls.check_config(cfg)
    meta = read_store_meta(cfg.graph)  # there, and a graph store of this gnnflow's format
    if is_layer_class(cfg.model):  # an unknown class or option, a layer that breaks the contract: one line now
        from gnnflow.nn import build_model_from_config

        build_model_from_config(cfg, meta.feature_dim or 1, max(1, meta.num_classes))
    want = cls.book_parts(cfg)
    if cfg.partition and want is not None:
        from gnnflow.partition.book import check_book_matches_graph
        from gnnflow.partition.meta import read_book_meta

        have = read_book_meta(cfg.partition).num_parts
        check_book_matches_graph(cfg.partition, cfg.graph)
        if have != want:
            raise ConfigError(f"{cfg.partition}: {have} parts, but --strategy {cfg.strategy} with "
                              f"--workers {cfg.workers} needs {want}; partition into {want} parts "
                              f"(gnnflow partition --parts {want}) or change --workers")
    if memory:  # from the metadata alone: a run that cannot fit is refused before any file is scanned
        check_memory(cfg, cls, cfg.force)
    if cfg.partition and want is not None:
        from gnnflow.partition.book import PartitionBook

        PartitionBook.open(cfg.partition).check_part_files()  # a truncated shard: one line, now
    return cfg
