"""Which device a rank computes on, and where each collective's tensors live (issue 22).

A rank holds two kinds of tensor:

* ``HOST`` — bookkeeping: counts, batch plans, sampled ids, degrees, evaluation sums, AEP
  counts, and the rows the CPU feature store serves (DistDGLv2 keeps features in host memory
  and copies a mini-batch to the device once, §4.2.1).
* ``COMPUTE`` — the payload of computation: activations, embeddings, gradients, parameters,
  SpMM operands, on the rank's compute device (``cuda:<local rank>`` on a GPU run).

With CUDA the default group is ``cpu:gloo,cuda:nccl``: torch carries a collective on CPU
tensors over gloo and one on CUDA tensors over NCCL.  Every collective of the code base goes
through a wrapper of :mod:`gnnflow.comm.collectives` that names the kind of its tensors, and
:func:`check_placement` holds the tensors to that kind's device, so a bookkeeping tensor never
reaches NCCL and no rank touches another rank's GPU.  The choices are pure functions
(:func:`default_backend`, :func:`backend_for`, :func:`rank_device`, :func:`placement_device`),
tested for CUDA on machines without one.

``GNNFLOW_PLACEMENT_LOG=DIR`` makes every rank append one line per collective to
``DIR/rank<r>.jsonl`` (call site, kind, devices, backend): the CPU suite reads it to check
that every collective site uses the device its kind says.

Ranks sharing a GPU.  NCCL refuses two ranks on one GPU, so their group carries CUDA tensors
over gloo (:data:`SHARED_GPU_BACKEND`).  Gloo's collectives stage CUDA tensors through the host
themselves, but its point-to-point sends and receives take host memory only: a payload
exchanged point to point is then staged through host copies (:func:`stages_through_host`),
and those copies are declared as what they are, ``HOST`` tensors (``staged`` in the log names
the kind they carry).  ``GNNFLOW_STAGE_ON_HOST=1`` takes that path on any device, so a CPU run
exercises the staging the shared-GPU case needs (separate host buffers, copied back).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

HOST = "host"
COMPUTE = "compute"
KINDS = (HOST, COMPUTE)
PLACEMENT_LOG_ENV = "GNNFLOW_PLACEMENT_LOG"
STAGE_ON_HOST_ENV = "GNNFLOW_STAGE_ON_HOST"
CUDA_BACKEND = "cpu:gloo,cuda:nccl"
SHARED_GPU_BACKEND = "cpu:gloo,cuda:gloo"


class PlacementError(RuntimeError):
    """A collective's tensor is not where its kind says it must be."""


def default_backend(device: str, ranks_per_gpu: int = 1) -> str:
    """The default group's backend for ``device``: gloo on CPU; gloo for CPU tensors and NCCL for
    CUDA tensors on a GPU run.  NCCL refuses two ranks on one GPU: ``ranks_per_gpu > 1`` carries
    CUDA tensors over gloo too (staged through the host)."""
    if not str(device).startswith("cuda"):
        return "gloo"
    return CUDA_BACKEND if ranks_per_gpu <= 1 else SHARED_GPU_BACKEND


def backend_for(tensor_device: torch.device | str, backend: str) -> str:
    """The backend of ``backend`` (``"gloo"``, ``"nccl"`` or ``"cpu:gloo,cuda:nccl"``) that carries a
    tensor on ``tensor_device``; :class:`PlacementError` when none does (a CPU tensor under NCCL)."""
    dev_type = torch.device(tensor_device).type
    if ":" in backend:
        table = dict(pair.split(":", 1) for pair in backend.split(","))
        if dev_type in table:
            return table[dev_type]
    elif backend == "gloo" and dev_type in ("cpu", "cuda"):
        return "gloo"
    elif backend == "nccl" and dev_type == "cuda":
        return "nccl"
    raise PlacementError(f"no backend of process group '{backend}' carries {dev_type} tensors; "
                         f"a {dev_type} tensor must be moved (or the group built with '{CUDA_BACKEND}')")


def stages_through_host(tensor_device: torch.device | str, backend: str | None) -> bool:
    """Whether a point-to-point exchange of tensors on ``tensor_device`` under a group with
    ``backend`` goes through host copies: a CUDA tensor that gloo carries (ranks sharing a GPU),
    since gloo sends and receives host memory only; or any device with ``GNNFLOW_STAGE_ON_HOST=1``
    (the shared-GPU path, taken on purpose)."""
    if os.environ.get(STAGE_ON_HOST_ENV, "") == "1":
        return True
    dev = torch.device(tensor_device)
    return dev.type == "cuda" and backend is not None and backend_for(dev, backend) == "gloo"


def available_device(name: str) -> torch.device:
    """``name`` (``cpu`` or ``cuda``) as a device, or a one-line error when torch sees no CUDA device."""
    from gnnflow.errors import ConfigError

    if str(name).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: torch sees no CUDA device here (install a CUDA build of torch, "
                          "see README 'GPU install'), or use --device cpu")
    return torch.device(name)


def local_rank(fallback: int) -> int:
    """This process's rank on its host: ``LOCAL_RANK`` (torchrun), ``SLURM_LOCALID`` (srun), else
    ``fallback`` (the local launcher's rank index)."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return fallback


def rank_device(local: int, device: str, device_count: int) -> torch.device:
    """The compute device of the rank with local rank ``local``: ``cuda:<local>`` (ranks beyond the
    host's ``device_count`` GPUs share them round-robin), else ``device`` itself."""
    if str(device).startswith("cuda"):
        return torch.device("cuda", local % max(1, device_count))
    return torch.device(device)


_compute = torch.device("cpu")


def set_rank_device(dev: torch.device) -> torch.device:
    """Make ``dev`` this process's compute device (and the current CUDA device, so NCCL and every
    ``torch.cuda`` call default to this rank's GPU, not GPU 0)."""
    global _compute
    _compute = torch.device(dev)
    if _compute.type == "cuda":
        torch.cuda.set_device(_compute)
    return _compute


def compute_device() -> torch.device:
    """This rank's compute device (CPU until :func:`set_rank_device`)."""
    return _compute


def placement_device(kind: str, compute: torch.device | None = None) -> torch.device:
    """Where tensors of ``kind`` live: the host for ``HOST``, the compute device for ``COMPUTE``."""
    if kind == HOST:
        return torch.device("cpu")
    if kind == COMPUTE:
        return compute if compute is not None else _compute
    raise ValueError(f"unknown tensor kind {kind!r} (one of {KINDS})")


def placement_problem(kind: str, tensor_device: torch.device | str, compute: torch.device | str,
                      backend: str | None) -> str | None:
    """Why a ``kind`` tensor on ``tensor_device`` may not enter a collective of a group with
    ``backend`` on a rank computing on ``compute`` (None when it may): it is not where its kind
    lives (a bookkeeping tensor on a GPU, a payload left on the host, another rank's GPU), or no
    backend of the group carries its device (a CPU tensor under plain NCCL)."""
    have, want = torch.device(tensor_device), placement_device(kind, torch.device(compute))
    if have.type != want.type or (have.type == "cuda" and (have.index or 0) != (want.index or 0)):
        return f"a {kind} tensor on {have}, expected {want}"
    if backend is not None:
        try:
            backend_for(have, backend)
        except PlacementError as exc:
            return str(exc)
    return None


def group_backend(group: Any = None) -> str | None:
    """The backend string of ``group`` (None outside a process group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return str(dist.get_backend(group))


def check_placement(kind: str, op: str, tensors: Iterable[torch.Tensor], group: Any = None,
                    staged: str | None = None) -> None:
    """Raise :class:`PlacementError` unless every tensor of collective ``op`` is on ``kind``'s device
    and ``group`` has a backend for it; log the call when ``GNNFLOW_PLACEMENT_LOG`` is set.
    ``staged``: the kind these (host) tensors are staged copies of (:func:`stages_through_host`)."""
    placement_device(kind)  # a known kind, even without tensors
    devices = [t.device for t in tensors]
    backend = group_backend(group)
    for d in devices:
        problem = placement_problem(kind, d, _compute, backend)
        if problem:
            raise PlacementError(f"{op} at {_call_site()}: {problem}")
    log_dir = os.environ.get(PLACEMENT_LOG_ENV)
    if log_dir:
        record = {"site": _call_site(), "op": op, "kind": kind, "devices": sorted({str(d) for d in devices}),
                  "backend": backend}
        if staged is not None:
            record["staged"] = staged
        _log(Path(log_dir), record)


# the thin wrappers of gnnflow.comm.collectives, whose tensors' kind their caller chooses
_WRAPPERS = {"all_reduce", "all_reduce_sum", "_every_rank", "all_gather", "broadcast", "all_to_all_single", "exchange_point_to_point",
             "alltoallv", "start_alltoallv", "alltoall_slots", "count_matrix", "all_to_all_rows",
             "AllToAllRows.forward"}


def _call_site() -> str:
    """``module:qualname`` of the first caller outside the thin collective wrappers (and torch's
    autograd machinery); the outermost wrapper when there is none (a backward run by autograd)."""
    f, last = sys._getframe(1), None
    while f is not None:
        module = str(f.f_globals.get("__name__"))
        if module == "gnnflow.comm.collectives":
            last = f
            if f.f_code.co_qualname not in _WRAPPERS:
                break
        elif module != __name__ and not module.startswith("torch."):
            break
        f = f.f_back
    f = f or last
    if f is None:
        return "?"
    return f"{f.f_globals.get('__name__')}:{f.f_code.co_qualname}"


def _log(log_dir: Path, record: dict[str, Any]) -> None:
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"rank{rank}.jsonl", "a") as fh:
        fh.write(json.dumps(record) + "\n")
