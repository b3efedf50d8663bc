"""The options of the mini-batch strategies (data-parallel and those built on it), declared once."""

from __future__ import annotations

from dataclasses import dataclass

from gnnflow.options import StrategyOptions, option
from gnnflow.strategies.minibatch.pipeline import DEFAULT_CAPACITIES, DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class MiniBatchOptions(StrategyOptions):
    """Options of the mini-batch strategies (data-parallel and those built on it)."""

    pipeline: bool = option(True, "run scheduling, sampling, loading and the device copy ahead of training in "
                            "background threads (DistDGLv2 §4.2.1); false: inline", flag="--no-pipeline",
                            flag_value=False)
    capacities: tuple[int, ...] = option(DEFAULT_CAPACITIES, "queue capacities of the sampled, loaded and "
                                         "copied batches, e.g. 25,5,1", minimum=1)
    pipeline_mib: int = option(DEFAULT_MAX_BYTES >> 20, "MiB the batches in flight may hold (at least one batch)",
                               minimum=1)
    replicate_structure: bool = option(False, "keep the whole CSR on every rank (no remote sampling)",
                                       flag="--replicate-structure", flag_value=True)
    two_level: bool = option(True, "targets are the rank's own part's training vertices (DistDGLv2 §4.1.2); "
                             "false: the machine's, split randomly among its ranks (Fig. 10's METIS only)")
    cache_rows: int | None = option(None, "rows of hot remote features cached per rank (default: what fits "
                                    "in feature_cache_mib)", minimum=0)
    feature_cache_mib: float = option(0.0, "MiB of hot remote feature rows a rank caches, chosen from "
                                      "presampled batches (DistDGLv2 §4.2.1's local cache)", minimum=0)
    presample_batches: int = option(8, "batches presampled to choose the cached rows", minimum=1)
    ddp: bool = option(False, "all-reduce gradients with PyTorch DDP instead of one all-reduce per batch")
    samplers: str = option("thread", "run the sample/load stages in the pipeline's 'thread' (DistDGLv2 "
                           "§4.2.1) or in a sampler 'process' per rank (faster on CPU hosts)",
                           choices=("thread", "process"), flag="--samplers")
