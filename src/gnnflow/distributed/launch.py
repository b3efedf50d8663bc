"""Starting ranks: one code path for local spawn, torchrun and srun.

``run_ranks(fn, world_size, *args)`` runs ``fn(ctx, *args)`` on every rank with a
process group initialised and returns the list of per-rank results (on the
local launcher) or this rank's result in a list of one (under torchrun/srun,
where the outer launcher owns the other ranks).

* Local: ``world_size`` processes are spawned on this machine.  The parent holds
  the rendezvous store, listening on loopback only
  (:mod:`gnnflow.distributed.network`), and gloo is pinned to loopback too.  It
  watches the ranks: their exits, their error reports and their heartbeats
  (:mod:`gnnflow.distributed.watchdog`).  When one fails, dies or stops
  responding, the rest are terminated at once and :class:`DistributedError`
  names the rank that CAUSED the failure: a dead rank before a stopped one,
  a stopped one before the ranks that then timed out or lost their connection.
  SIGTERM, SIGHUP or SIGINT to the parent stops every rank before it exits; a
  rank dies with its parent (``PR_SET_PDEATHSIG``) even when the parent is
  killed outright.  Shared-memory files the run made are removed on every exit
  path (:mod:`gnnflow.distributed.processes`).  No process is left behind.
* torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT`` come from the environment.
* srun: ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the master is the
  first host of ``SLURM_STEP_NODELIST`` (or ``SLURM_JOB_NODELIST``); the port is
  derived from the job id unless ``MASTER_PORT`` is set.
  Under both, every rank talks over the interface that routes to the master
  (or ``GNNFLOW_IFNAME``), and rank 0 holds the store bound to that address.

On ``--device cuda`` each rank computes on ``cuda:<local rank>`` (``LOCAL_RANK``,
``SLURM_LOCALID`` or the local launcher's rank index, made the current CUDA device) and the
default group is ``cpu:gloo,cuda:nccl`` (``cpu:gloo,cuda:gloo`` when ranks share a GPU, which
NCCL refuses); see :mod:`gnnflow.distributed.devices`.

Every collective has the process-group timeout (``GNNFLOW_DIST_TIMEOUT``
seconds, default 600), so a rank that dies makes the others fail rather than
hang even without a launcher watching.  The launcher's heartbeats find a dead
or stopped rank much sooner (``GNNFLOW_STALL_TIMEOUT``); the collective timeout
only has to outlast the longest honest wait of a rank on a slower peer (a
products-sized evaluation layer on a loaded host took more than 60 s).
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
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

import torch
import torch.distributed as dist

from gnnflow.config import env_seconds
from gnnflow.distributed import devices
from gnnflow.distributed.network import (
    LOOPBACK,
    connect_store,
    local_address_towards,
    resolve,
    set_run_address,
    start_store,
)
from gnnflow.distributed.processes import (
    TAG_ENV,
    die_with_parent,
    new_run_tag,
    remove_run_shm,
    tune_allocator,
)
from gnnflow.distributed.watchdog import Heartbeat, HeartbeatMonitor
from gnnflow.errors import DistributedError, Terminated
from gnnflow.io import configure_logging
from gnnflow.strategies.base import RankContext

log = logging.getLogger("gnnflow.distributed")

def dist_timeout_s() -> float:
    """Seconds a collective waits before it fails (``GNNFLOW_DIST_TIMEOUT``, default 600)."""
    return env_seconds("GNNFLOW_DIST_TIMEOUT", 600.0)


def free_port(address: str = LOOPBACK) -> int:
    """A port free on ``address`` now (another process may take it before it is bound: prefer
    :func:`gnnflow.distributed.network.start_store`, which binds first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
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


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_backend(device: str, ranks_on_host: int = 1) -> str:
    """The default group's backend for ``ranks_on_host`` ranks of this host on ``device``."""
    return devices.default_backend(device, -(-ranks_on_host // max(1, _gpus())))


def _device_for(rank_local: int, device: str) -> torch.device:
    """This rank's compute device, made current (:func:`gnnflow.distributed.devices.set_rank_device`)."""
    return devices.set_rank_device(devices.rank_device(rank_local, device, _gpus()))


def init_group(rank: int, world_size: int, store: Any, backend: str, timeout_s: float) -> None:
    """Join the process group through ``store`` (a rendezvous store already running: the local
    launcher's, or rank 0's under srun/torchrun)."""
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


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
    """Body of a spawned rank: beat, init the group, run ``fn``, report through ``conn``."""
    die_with_parent()
    tune_allocator()
    os.environ["GNNFLOW_RANK"] = str(rank)
    configure_logging()  # rank 0 reports each epoch as it ends (driver)
    torch.set_num_threads(threads)
    heartbeat = None
    try:
        heartbeat = Heartbeat(connect_store(addr, port, world_size, timeout_s), rank)
        ctx = RankContext(rank=rank, world_size=world_size, device=_device_for(rank, device))
        init_group(rank, world_size, connect_store(addr, port, world_size, timeout_s), backend, timeout_s)
        result = fn(ctx, *args)
        # leave together: a rank that tears its connections down while a peer is still setting
        # up (a fn without collectives) would make that peer fail with "connection closed"
        dist.barrier()
        _send(conn, ("ok", result))
    except BaseException as exc:  # report any failure to the parent, then exit non-zero
        _send(conn, ("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        conn.close()
        os._exit(1)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
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
    timeout_s = dist_timeout_s() if timeout_s is None else timeout_s
    launcher = external_launcher()
    ranks_on_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if launcher else world_size
    backend = backend or default_backend(device, ranks_on_host)
    if launcher is not None:
        return [_run_external(launcher, fn, args, device, backend, timeout_s)]
    if world_size == 1:
        return [fn(RankContext(rank=0, world_size=1, device=_device_for(0, device)), *args)]
    return _spawn_local(fn, world_size, args, device, backend, timeout_s, threads_per_rank)


def _run_external(launcher: str, fn: Callable[..., Any], args: tuple[Any, ...], device: str,
                  backend: str, timeout_s: float) -> Any:
    if launcher == "torchrun":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = devices.local_rank(rank)
        master, port = os.environ.get("MASTER_ADDR", LOOPBACK), int(os.environ.get("MASTER_PORT", "29500"))
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    else:
        rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        local = devices.local_rank(rank)
        master, port = _slurm_master()
        agent_store = False
    tune_allocator()
    address = local_address_towards(master)
    set_run_address(address)
    # a rank's own helpers (sampler processes) reach the master at the same address
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = resolve(master), str(port)
    log.info("rank %d/%d started by %s, rendezvous %s:%d, talking over %s", rank, world, launcher,
             master, port, address)
    bound = None
    if rank == 0 and not agent_store:  # rank 0 holds the store, on the run's interface only
        bound = start_store(address, world, timeout_s, port)
        store = bound.store
    else:
        store = connect_store(resolve(master), port, world, timeout_s)
    ctx = RankContext(rank=rank, world_size=world, device=_device_for(local, device))
    init_group(rank, world, store, backend, timeout_s)
    try:
        return fn(ctx, *args)
    finally:
        dist.destroy_process_group()
        if bound is not None:
            bound.close()


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


class _StopSignals:
    """While active (main thread only), SIGTERM and SIGHUP raise :class:`Terminated` in the
    launcher, so its ``finally`` stops the ranks before it exits."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __enter__(self) -> _StopSignals:
        self.saved: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.saved[sig] = signal.signal(sig, _raise_terminated)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def _quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (shared by every rank and sampler process) without
    its exit warning: when a rank is killed, the tracker removes the semaphores of its queues and
    warns about them after the run's error line, which would bury the line that names the rank."""
    from multiprocessing import resource_tracker

    saved = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [saved, "ignore:resource_tracker:UserWarning"]))
    try:
        resource_tracker.ensure_running()
    finally:
        if saved is None:
            os.environ.pop("PYTHONWARNINGS")
        else:
            os.environ["PYTHONWARNINGS"] = saved


def _spawn_local(fn: Callable[..., Any], world_size: int, args: tuple[Any, ...], device: str,
                 backend: str, timeout_s: float, threads_per_rank: int | None) -> list[Any]:
    ctx = mp.get_context("spawn")
    _quiet_resource_tracker()
    # the ranks inherit the environment: gloo on loopback, shared memory named after this run
    set_run_address(LOOPBACK)
    tag = os.environ[TAG_ENV] = new_run_tag()
    # the parent holds the rendezvous store, bound to loopback on a port the OS assigns (no
    # other process can take the port between choosing it and binding it)
    bound = start_store(LOOPBACK, world_size + 1, timeout_s)
    monitor = HeartbeatMonitor(bound.store, world_size)
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    procs: list[Any] = []
    conns: list[Any] = []
    try:
        with _StopSignals():
            for rank in range(world_size):
                parent, child = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=_rank_entry,
                    args=(rank, world_size, LOOPBACK, bound.port, backend, device, timeout_s, threads, fn,
                          args, child),
                    name=f"gnnflow-rank{rank}",
                    daemon=False,
                )
                p.start()
                child.close()
                procs.append(p)
                conns.append(parent)
            return _Watch(procs, conns, monitor).run(timeout_s)
    finally:
        _terminate(procs)
        bound.close()
        removed = remove_run_shm(tag)
        if removed:
            log.debug("removed shared memory left by the run: %s", removed)
        os.environ.pop(TAG_ENV, None)


class _Watch:
    """The local launcher's loop: results, errors, exits and heartbeats of every rank."""

    GRACE_S = 1.0  # after a first failure, how long to wait for the cause to show itself

    def __init__(self, procs: list[Any], conns: list[Any], monitor: HeartbeatMonitor) -> None:
        self.procs, self.conns, self.monitor = procs, conns, monitor
        self.results: list[Any] = [None] * len(procs)
        self.pending = {conns[r]: r for r in range(len(procs))}
        self.sentinels = {procs[r].sentinel: r for r in range(len(procs))}
        self.errors: dict[int, str] = {}  # rank -> its error report
        self.finished: set[int] = set()  # ranks that sent their result

    def run(self, timeout_s: float) -> list[Any]:
        log.info("started %d ranks (pids %s)", len(self.procs), " ".join(str(p.pid) for p in self.procs))
        announced = False
        while self.pending:
            self._take(wait(list(self.pending) + list(self.sentinels), timeout=1.0))
            self.monitor.poll()
            if not announced and self.monitor.all_seen():
                log.info("all %d ranks are running", len(self.procs))
                announced = True
            stalled = [r for r in self.monitor.stalled()
                       if self.procs[r].exitcode is None and r not in self.finished]
            if self.errors or self._died() or stalled:
                self._fail()
        for p in self.procs:
            p.join(timeout=timeout_s)
        return self.results

    def _take(self, ready: list[Any]) -> None:
        for obj in ready:
            if obj in self.pending:
                r = self.pending.pop(obj)
                try:
                    msg = pickle.loads(obj.recv_bytes())
                except (EOFError, OSError):  # the rank exited without a word
                    self.procs[r].join(2.0)
                    continue
                if msg[0] == "error":
                    log.debug("rank %d traceback:\n%s", r, msg[2])
                    self.errors[r] = msg[1]
                else:
                    self.results[r] = msg[1]
                    self.finished.add(r)
            elif obj in self.sentinels:
                r = self.sentinels.pop(obj)
                self.procs[r].join(0.1)
                if self.conns[r] in self.pending and self.conns[r].poll(0.5):
                    # an error report may still be in flight: read it first
                    self._take([self.conns[r]])

    def _died(self) -> list[int]:
        """Ranks that exited without a result or an error report (killed, crashed)."""
        return [r for r, p in enumerate(self.procs)
                if p.exitcode is not None and r not in self.errors and r not in self.finished
                and self.conns[r] not in self.pending]

    def _fail(self) -> None:
        # the first sign is often a healthy rank losing its connection to the one that died or
        # stopped: give the cause a moment to show itself, then name it
        deadline = time.monotonic() + self.GRACE_S
        while time.monotonic() < deadline:
            self._take(wait(list(self.pending) + list(self.sentinels), timeout=0.2))
        self.monitor.poll()
        died = self._died()
        if died:
            r = died[0]
            raise DistributedError(f"rank {r} died ({_describe_exit(self.procs[r].exitcode)})"
                                   + self._others(r))
        stalled = [r for r in self.monitor.stalled(threshold_s=min(self.monitor.stall_s, 5.0))
                   if self.procs[r].exitcode is None and r not in self.errors]
        if stalled:
            r = stalled[0]
            raise DistributedError(self.monitor.describe_stall(r) + self._others(r))
        genuine = [r for r in sorted(self.errors) if not _is_wait_failure(self.errors[r])]
        if genuine:  # an error of its own, not a lost connection or a timeout caused by another
            r = genuine[0]
            raise DistributedError(f"rank {r} failed: {self.errors[r]}" + self._others(r))
        lagging = [r for r in self.monitor.lagging() if r not in self.errors]
        if lagging:
            r = lagging[0]
            raise DistributedError(f"rank {r} fell behind: the others gave up waiting for it"
                                   + self._others(r))
        r = min(self.errors)
        raise DistributedError(f"rank {r} failed: {self.errors[r]}" + self._others(r))

    def _others(self, culprit: int) -> str:
        """What the other ranks reported, briefly (they usually only noticed the culprit)."""
        others = [r for r in sorted(self.errors) if r != culprit]
        if not others:
            return ""
        first = self.errors[others[0]].splitlines()[0][:160]
        more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
        return f"; then rank {others[0]}: {first}{more}"


def _is_wait_failure(error: str) -> bool:
    """An error that only says a collective or connection gave up waiting on some peer."""
    text = error.lower()
    return any(s in text for s in ("timed out", "timeout", "connection reset", "connection closed",
                                   "broken pipe", "connection refused", "read error", "write error"))


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _terminate(procs: list[Any], grace_s: float = 3.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()  # also ends a stopped (SIGSTOP) process
            p.join(1.0)
