"""The default process group of a run: its backend, its timeout and each rank's device.

Every collective has the process-group timeout (``GNNFLOW_DIST_TIMEOUT`` seconds, default 600), so
a rank that dies makes the others fail rather than hang even without a launcher watching.
"""

from __future__ import annotations

import datetime
import socket
from typing import Any

import torch
import torch.distributed as dist

from gnnflow.config import env_seconds
from gnnflow.runtime import devices
from gnnflow.runtime.network import (
    LOOPBACK,
)


def dist_timeout_s() -> float:
    """Seconds a collective waits before it fails (``GNNFLOW_DIST_TIMEOUT``, default 600)."""
    return env_seconds("GNNFLOW_DIST_TIMEOUT", 600.0)


def free_port(address: str = LOOPBACK) -> int:
    """A port free on ``address`` now (another process may take it before it is bound: prefer
    :func:`gnnflow.runtime.network.start_store`, which binds first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_backend(device: str, ranks_on_host: int = 1) -> str:
    """The default group's backend for ``ranks_on_host`` ranks of this host on ``device``."""
    return devices.default_backend(device, -(-ranks_on_host // max(1, gpus())))


def device_for(rank_local: int, device: str) -> torch.device:
    """This rank's compute device, made current (:func:`gnnflow.runtime.devices.set_rank_device`)."""
    return devices.set_rank_device(devices.rank_device(rank_local, device, gpus()))


def init_group(rank: int, world_size: int, store: Any, backend: str, timeout_s: float) -> None:
    """Join the process group through ``store`` (a rendezvous store already running: the local
    launcher's, or rank 0's under srun/torchrun)."""
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
