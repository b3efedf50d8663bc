"""Starting ranks: one code path for local spawn, torchrun and srun.

``run_ranks(fn, world_size, *args)`` runs ``fn(ctx, *args)`` on every rank with a
process group initialised and returns the list of per-rank results (on the
local launcher) or this rank's result in a list of one (under torchrun/srun,
where the outer launcher owns the other ranks).

* Local: ``world_size`` processes are spawned on this machine; rendezvous on a
  free loopback port.  The parent watches them: if one exits abnormally or
  raises, the rest are terminated at once and :class:`DistributedError` names
  the rank and its error.  No process is left behind.
* torchrun: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` come from
  the environment.
* srun: ``SLURM_PROCID``, ``SLURM_NTASKS``; the master is the first host of
  ``SLURM_STEP_NODELIST`` (or ``SLURM_JOB_NODELIST``); the port is derived from
  the job id unless ``MASTER_PORT`` is set.

Every collective has the process-group timeout (``GNNFLOW_DIST_TIMEOUT``
seconds, default 60), so a rank that dies makes the others fail rather than hang.
"""

from __future__ import annotations

import datetime
import logging
import multiprocessing as mp
import os
import pickle
import signal
import socket
import subprocess
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

import torch
import torch.distributed as dist

from gnnflow.errors import DistributedError
from gnnflow.strategies.base import RankContext

log = logging.getLogger("gnnflow.distributed")

DEFAULT_TIMEOUT_S = float(os.environ.get("GNNFLOW_DIST_TIMEOUT", "60"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def external_launcher() -> str | None:
    """'torchrun' or 'srun' when this process is one rank started by them, else None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return "torchrun"
    if "SLURM_PROCID" in os.environ and "SLURM_NTASKS" in os.environ and "SLURM_STEP_ID" in os.environ:
        return "srun"
    return None


def _slurm_master() -> tuple[str, int]:
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", "localhost")
    try:
        hosts = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10, check=True
        ).stdout.split()
        host = hosts[0] if hosts else "localhost"
    except (OSError, subprocess.SubprocessError):
        host = nodelist.split(",")[0].split("[")[0]
    port = int(os.environ.get("MASTER_PORT", 20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))
    return host, port


def default_backend(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def _device_for(rank_local: int, device: str) -> torch.device:
    if device.startswith("cuda"):
        return torch.device("cuda", rank_local % max(1, torch.cuda.device_count()))
    return torch.device(device)


def init_group(rank: int, world_size: int, addr: str, port: int, backend: str, timeout_s: float,
               store_is_external: bool = False) -> None:
    """Join the process group.  With ``store_is_external`` the rendezvous store already
    runs (the local launcher's parent holds it), so every rank connects as a client."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if store_is_external:
        store = dist.TCPStore(addr, port, world_size, is_master=False, timeout=timeout)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        return
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{addr}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timeout,
    )


def _send(conn: Any, message: tuple[Any, ...]) -> None:
    """Send with plain pickle: tensors are copied, not shared through file
    descriptors (torch's multiprocessing pickler), which would race with this
    process exiting before the parent has received them."""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _rank_entry(
    rank: int,
    world_size: int,
    addr: str,
    port: int,
    backend: str,
    device: str,
    timeout_s: float,
    threads: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    conn: Any,
) -> None:
    """Body of a spawned rank: init the group, run ``fn``, report through ``conn``."""
    os.environ["GNNFLOW_RANK"] = str(rank)
    torch.set_num_threads(threads)
    try:
        init_group(rank, world_size, addr, port, backend, timeout_s, store_is_external=True)
        ctx = RankContext(rank=rank, world_size=world_size, device=_device_for(rank, device))
        result = fn(ctx, *args)
        _send(conn, ("ok", result))
    except BaseException as exc:  # report any failure to the parent, then exit non-zero
        _send(conn, ("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        conn.close()
        os._exit(1)
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass
    conn.close()


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    device: str = "cpu",
    backend: str | None = None,
    timeout_s: float | None = None,
    threads_per_rank: int | None = None,
) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` ranks; return per-rank results.

    ``fn`` must be importable (a module-level function) for the local spawner.
    """
    backend = backend or default_backend(device)
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    launcher = external_launcher()
    if launcher is not None:
        return [_run_external(launcher, fn, args, device, backend, timeout_s)]
    if world_size == 1:
        return [fn(RankContext(rank=0, world_size=1, device=_device_for(0, device)), *args)]
    return _spawn_local(fn, world_size, args, device, backend, timeout_s, threads_per_rank)


def _run_external(launcher: str, fn: Callable[..., Any], args: tuple[Any, ...], device: str,
                  backend: str, timeout_s: float) -> Any:
    if launcher == "torchrun":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
    else:
        rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        local = int(os.environ.get("SLURM_LOCALID", rank))
        addr, port = _slurm_master()
    log.info("rank %d/%d started by %s, rendezvous %s:%d", rank, world, launcher, addr, port)
    init_group(rank, world, addr, port, backend, timeout_s)
    try:
        return fn(RankContext(rank=rank, world_size=world, device=_device_for(local, device)), *args)
    finally:
        dist.destroy_process_group()


def _spawn_local(fn: Callable[..., Any], world_size: int, args: tuple[Any, ...], device: str,
                 backend: str, timeout_s: float, threads_per_rank: int | None) -> list[Any]:
    ctx = mp.get_context("spawn")
    # The parent holds the rendezvous store on a port the OS assigns, so no other
    # process can take the port between choosing it and binding it.
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    port = int(store.port)
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    procs, conns = [], []
    for rank in range(world_size):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=_rank_entry,
            args=(rank, world_size, "127.0.0.1", port, backend, device, timeout_s, threads, fn, args, child),
            name=f"gnnflow-rank{rank}",
            daemon=False,
        )
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    results: list[Any] = [None] * world_size
    pending = {conns[r]: r for r in range(world_size)}
    sentinels = {procs[r].sentinel: r for r in range(world_size)}
    try:
        while pending:
            ready = wait(list(pending) + list(sentinels), timeout=5.0)
            for obj in ready:
                if obj in pending:
                    r = pending[obj]
                    try:
                        msg = pickle.loads(obj.recv_bytes())
                    except EOFError:
                        msg = None
                    del pending[obj]
                    if msg is None:
                        procs[r].join(2.0)
                        _fail(procs, r, f"rank {r} died without a result ({_describe_exit(procs[r].exitcode)})")
                    elif msg[0] == "error":
                        log.debug("rank %d traceback:\n%s", r, msg[2])
                        _fail(procs, r, f"rank {r} failed: {msg[1]}")
                    else:
                        results[r] = msg[1]
                elif obj in sentinels:
                    r = sentinels.pop(obj)
                    procs[r].join(0.1)
                    code = procs[r].exitcode
                    if code not in (0, None) and conns[r] in pending:
                        # Give the pipe a moment: an error message may still be in flight.
                        if conns[r].poll(0.5):
                            continue
                        _fail(procs, r, f"rank {r} died ({_describe_exit(code)})")
        for p in procs:
            p.join(timeout=timeout_s)
    finally:
        _terminate(procs)
        del store
    return results


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _fail(procs: list[Any], rank: int, message: str) -> None:
    _terminate(procs)
    raise DistributedError(message)


def _terminate(procs: list[Any], grace_s: float = 3.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)
