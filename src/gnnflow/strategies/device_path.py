"""The GPU path of the mini-batch strategies, declared once: where a rank samples, and the hot
feature rows it keeps on its device (DistDGLv2 §4.2.2, §5 Fig. 10).

A CPU-fed GPU spends its epoch waiting: the sampler and the feature store run on the host and
every batch's input rows cross the bus.  :class:`DevicePathOptions` are the options of the
strategies that can move both to the rank's device (``single`` and ``data``):

* ``sampling``: ``host`` (the numpy sampler), ``device`` (the tensor sampler of
  :mod:`gnnflow.sampling.tensor_sampler` on the rank's device: on a CPU run the same tensor
  code on the CPU, which is how CI checks it equal to the host sampler) or ``auto`` (device on a
  CUDA run, host otherwise);
* ``device_cache_mib``: MiB of hot feature rows kept on the rank's device
  (:class:`gnnflow.strategies.device_cache.DeviceFeatureCache`); the other rows come from the
  feature store as before.  0 (the default) keeps none.

A strategy whose options do not derive from :class:`DevicePathOptions` samples on the host and
keeps no device cache (:func:`sampling_device`, :func:`device_cache_mib`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gnnflow.errors import ConfigError
from gnnflow.options import StrategyOptions, option

SAMPLING = ("auto", "host", "device")


@dataclass(frozen=True)
class DevicePathOptions(StrategyOptions):
    """Where a mini-batch rank samples and which feature rows it keeps on its device."""

    sampling: str = option("auto", "where a rank samples: host (numpy sampler), device (tensor sampler on the "
                           "rank's device, the same draws; on a CPU run the tensor code on the CPU) or auto "
                           "(device on a CUDA run, host otherwise)", choices=SAMPLING, flag="--sampling")
    device_cache_mib: float = option(0.0, "MiB of hot feature rows kept on the rank's device (by presampling "
                                     "counts, or in-degree in single-process training); the rest come from the "
                                     "feature store", minimum=0)


def sampling_device(options: Any, compute: torch.device, samplers: str = "thread") -> torch.device | None:
    """The device a rank samples on (None: the host sampler).  ``samplers=process`` (a sampler
    process hands host blocks over shared memory) keeps ``auto`` on the host and refuses
    ``device``."""
    if not isinstance(options, DevicePathOptions):
        return None
    if options.sampling == "device":
        if samplers == "process":
            raise ConfigError("options.sampling=device: a sampler process samples on the host; use "
                              "samplers=thread to sample on the rank's device")
        return compute
    if options.sampling == "auto" and compute.type == "cuda" and samplers != "process":
        return compute
    return None


def device_cache_mib(options: Any) -> float:
    """MiB of hot feature rows on the rank's device (0: none)."""
    return float(options.device_cache_mib) if isinstance(options, DevicePathOptions) else 0.0
