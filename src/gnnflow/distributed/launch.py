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
* Several hosts, gnnflow's own launcher on each (``gnnflow train --nnodes N
  --node-rank K --master HOST:PORT``, :func:`set_nodes`): the launcher of host
  ``K`` spawns ranks ``K*L .. K*L+L-1`` (``L = world_size / N`` local ranks).
  Host 0's launcher holds the store, bound to ``HOST``'s address only; the
  others connect to it.  Every host talks over the interface that routes to
  ``HOST`` (or ``GNNFLOW_IFNAME``).  Each launcher watches its own ranks as
  above and every rank's heartbeat; the first one to find a failure posts it in
  the store (``gnnflow/failed``), so every host stops with the same message
  naming the rank and its host.  Every host's ``run_ranks`` returns every
  rank's result (sent through the store).
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
from dataclasses import dataclass
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
    TUNABLES_ENV,
    die_with_parent,
    environ_set,
    huge_page_tunables,
    new_run_tag,
    remove_run_shm,
    tune_allocator,
)
from gnnflow.distributed.watchdog import Heartbeat, HeartbeatMonitor
from gnnflow.errors import ConfigError, DistributedError, Terminated
from gnnflow.io import configure_logging
from gnnflow.strategies.base import RankContext

log = logging.getLogger("gnnflow.distributed")

def dist_timeout_s() -> float:
    """Seconds a collective waits before it fails (``GNNFLOW_DIST_TIMEOUT``, default 600)."""
    return env_seconds("GNNFLOW_DIST_TIMEOUT", 600.0)


NODES_ENV = "GNNFLOW_NODES"  # "N K HOST:PORT", set by set_nodes (the train/verify flags)
FAILED_KEY = "gnnflow/failed"


@dataclass(frozen=True)
class Nodes:
    """This host's place in a multi-host run started by gnnflow's own launcher on each host."""

    nnodes: int
    node_rank: int
    master: str  # host name or address of node 0
    port: int

    def local_ranks(self, world_size: int) -> range:
        """Global ranks this host runs."""
        if world_size % self.nnodes:
            raise ConfigError(f"--workers {world_size} (all ranks) is not a multiple of --nnodes {self.nnodes}")
        local = world_size // self.nnodes
        return range(self.node_rank * local, (self.node_rank + 1) * local)


def parse_master(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--master {text!r}: expected HOST:PORT (node 0's host and a free port on it)")
    return host, int(port)


def set_nodes(nnodes: int, node_rank: int, master: str | None) -> None:
    """Make this process (and what it starts) one host of ``nnodes`` (see the module docstring)."""
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ConfigError(f"--node-rank {node_rank}: expected 0 <= node-rank < --nnodes {nnodes}")
    if master is None:
        if nnodes > 1:
            raise ConfigError("--nnodes > 1 needs --master HOST:PORT (node 0's host and a port to listen on)")
        os.environ.pop(NODES_ENV, None)
        return
    host, port = parse_master(master)
    os.environ[NODES_ENV] = f"{nnodes} {node_rank} {host}:{port}"


def nodes() -> Nodes | None:
    """This host's :class:`Nodes` when set by :func:`set_nodes`, else None."""
    text = os.environ.get(NODES_ENV)
    if not text:
        return None
    n, k, master = text.split()
    host, port = parse_master(master)
    return Nodes(int(n), int(k), host, port)


def add_node_arguments(parser: Any) -> None:
    """``--nnodes``, ``--node-rank``, ``--master``: this host's place in a run across hosts."""
    group = parser.add_argument_group("several hosts (gnnflow's launcher on each; --workers counts all ranks)")
    group.add_argument("--nnodes", type=int, default=1, help="hosts taking part (default 1)")
    group.add_argument("--node-rank", type=int, default=0, help="this host's index, 0 .. nnodes-1 (0 holds the store)")
    group.add_argument("--master", default=None, metavar="HOST:PORT",
                       help="node 0's host name or address and the port its store listens on (only there)")


def apply_node_arguments(args: Any) -> None:
    """Act on :func:`add_node_arguments`' flags (before any rank starts)."""
    if args.nnodes > 1 or args.master is not None:
        set_nodes(args.nnodes, args.node_rank, args.master)


def is_first_rank() -> bool:
    """True in the process that holds (or, with the local launcher, starts) global rank 0:
    only it writes a run's files."""
    launcher = external_launcher()
    if launcher == "torchrun":
        return int(os.environ["RANK"]) == 0
    if launcher == "srun":
        return int(os.environ["SLURM_PROCID"]) == 0
    spec = nodes()
    return spec is None or spec.node_rank == 0


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
    local_rank: int,
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
        ctx = RankContext(rank=rank, world_size=world_size, device=_device_for(local_rank, device),
                          local_rank=local_rank)
        init_group(rank, world_size, connect_store(addr, port, world_size, timeout_s), backend, timeout_s)
        result = fn(ctx, *args)
        if nodes() is not None:  # the other hosts' launchers read it from the store
            connect_store(addr, port, world_size, timeout_s).set(
                _result_key(rank), pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
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
    spec = nodes()
    if world_size == 1 and spec is None:
        return [fn(RankContext(rank=0, world_size=1, device=_device_for(0, device)), *args)]
    return _spawn_local(fn, world_size, args, device, backend, timeout_s, threads_per_rank, spec)


def slurm_task_threads() -> int | None:
    """Threads for a rank started by srun: the CPUs SLURM gave its task (``SLURM_CPUS_PER_TASK``,
    set by ``--cpus-per-task``, the cluster profile's ``cpus_per_task``); None when unset (torch's
    default then, every CPU the task may run on)."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "").strip()
    return max(1, int(value)) if value.isdigit() else None


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
    threads = slurm_task_threads() if launcher == "srun" else None
    if threads is not None:  # as many as the job gave the task, as the local launcher gives cores / ranks
        torch.set_num_threads(threads)
    address = local_address_towards(master)
    set_run_address(address)
    # a rank's own helpers (sampler processes) reach the master at the same address
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = resolve(master), str(port)
    log.info("rank %d/%d on host %s (local rank %d) started by %s, rendezvous %s:%d, talking over %s, "
             "%d thread(s)", rank, world, socket.gethostname(), local, launcher, master, port, address,
             torch.get_num_threads())
    bound = None
    if rank == 0 and not agent_store:  # rank 0 holds the store, on the run's interface only
        bound = start_store(address, world, timeout_s, port)
        store = bound.store
    else:
        store = connect_store(resolve(master), port, world, timeout_s)
    ctx = RankContext(rank=rank, world_size=world, device=_device_for(local, device), local_rank=local)
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

    quiet = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:resource_tracker:UserWarning"]))
    with environ_set("PYTHONWARNINGS", quiet):
        resource_tracker.ensure_running()


def _result_key(rank: int) -> str:
    return f"gnnflow/result/{rank}"


def _spawn_local(fn: Callable[..., Any], world_size: int, args: tuple[Any, ...], device: str,
                 backend: str, timeout_s: float, threads_per_rank: int | None,
                 spec: Nodes | None = None) -> list[Any]:
    ctx = mp.get_context("spawn")
    _quiet_resource_tracker()
    ranks = spec.local_ranks(world_size) if spec is not None else range(world_size)
    if spec is None:
        # one host: the ranks inherit the environment (gloo on loopback); the parent holds the
        # rendezvous store, bound to loopback on a port the OS assigns (no other process can
        # take the port between choosing it and binding it)
        address = store_addr = LOOPBACK
        set_run_address(address)
        bound = start_store(LOOPBACK, world_size + 1, timeout_s)
        store, port = bound.store, bound.port
    else:
        # several hosts: node 0 holds the store on the master's address only, the others connect;
        # every host talks over its interface towards the master
        store_addr, port = resolve(spec.master), spec.port
        address = local_address_towards(store_addr)
        set_run_address(address)
        bound = start_store(store_addr, world_size + spec.nnodes, timeout_s, port) if spec.node_rank == 0 else None
        store = bound.store if bound is not None else connect_store(store_addr, port, world_size, timeout_s)
        log.info("host %d of %d: ranks %d..%d of %d, store %s:%d, talking over %s", spec.node_rank, spec.nnodes,
                 ranks[0], ranks[-1], world_size, store_addr, port, address)
    tag = os.environ[TAG_ENV] = new_run_tag()  # shared memory named after this run on this host
    monitor = HeartbeatMonitor(store, world_size)
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // len(ranks))
    procs: list[Any] = []
    conns: list[Any] = []
    try:
        # the ranks' glibc backs big buffers with huge pages (read at their start)
        with _StopSignals(), environ_set(TUNABLES_ENV, huge_page_tunables(os.environ)):
            for local, rank in enumerate(ranks):
                parent, child = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=_rank_entry,
                    args=(rank, local, world_size, store_addr, port, backend, device, timeout_s, threads, fn,
                          args, child),
                    name=f"gnnflow-rank{rank}",
                    daemon=False,
                )
                p.start()
                child.close()
                procs.append(p)
                conns.append(parent)
            return _Watch(procs, conns, monitor, list(ranks), world_size, spec).run(timeout_s)
    finally:
        _terminate(procs)
        if bound is not None:
            bound.close()
        removed = remove_run_shm(tag)
        if removed:
            log.debug("removed shared memory left by the run: %s", removed)
        os.environ.pop(TAG_ENV, None)


class _Watch:
    """The launcher's loop: results, errors, exits and heartbeats of this host's ranks (the
    procs, local index ``i`` is global rank ``ranks[i]``), and, across hosts, failures posted
    by the other hosts' launchers and the results of their ranks."""

    GRACE_S = 1.0  # after a first failure, how long to wait for the cause to show itself

    def __init__(self, procs: list[Any], conns: list[Any], monitor: HeartbeatMonitor,
                 ranks: list[int] | None = None, world_size: int | None = None, spec: Nodes | None = None) -> None:
        self.procs, self.conns, self.monitor = procs, conns, monitor
        self.ranks = ranks if ranks is not None else list(range(len(procs)))
        self.world_size = world_size if world_size is not None else len(procs)
        self.spec = spec
        self.results: list[Any] = [None] * self.world_size
        self.pending = {conns[i]: i for i in range(len(procs))}
        self.sentinels = {procs[i].sentinel: i for i in range(len(procs))}
        self.errors: dict[int, str] = {}  # local index -> its error report
        self.finished: set[int] = set()  # local indexes of ranks that sent their result
        local = set(self.ranks)
        self.remote = {r for r in range(self.world_size) if r not in local}  # results still to read
        self.remote_done: set[int] = set()

    def run(self, timeout_s: float) -> list[Any]:
        log.info("started %d ranks (pids %s)", len(self.procs), " ".join(str(p.pid) for p in self.procs))
        announced = False
        while self.pending or self.remote:
            self._take(wait(list(self.pending) + list(self.sentinels), timeout=1.0))
            self.monitor.poll()
            self._collect_remote()
            if not announced and self.monitor.all_seen():
                log.info("all %d ranks are running", self.world_size)
                announced = True
            if self.errors or self._died() or self._stalled() or self._posted():
                self._fail()
        for p in self.procs:
            p.join(timeout=timeout_s)
        self._leave_together(timeout_s)
        return self.results

    def _stalled(self, threshold_s: float | None = None) -> list[int]:
        """Global ranks that stopped beating while still running (not finished, not failed)."""
        out = []
        for r in self.monitor.stalled(threshold_s):
            if r in self.remote_done:
                continue
            if r in self.ranks:
                i = self.ranks.index(r)
                if self.procs[i].exitcode is not None or i in self.finished or i in self.errors:
                    continue
            out.append(r)
        return out

    def _collect_remote(self) -> None:
        """Read the results other hosts' ranks left in the store."""
        for r in sorted(self.remote):
            try:
                if self.monitor.store.check([_result_key(r)]):
                    self.results[r] = pickle.loads(self.monitor.store.get(_result_key(r)))
                    self.remote.discard(r)
                    self.remote_done.add(r)
            except Exception:  # the store went away: the other checks name why
                return

    def _posted(self) -> str | None:
        """A failure another host's launcher posted, if any."""
        if self.spec is None:
            return None
        try:
            if self.monitor.store.check([FAILED_KEY]):
                return self.monitor.store.get(FAILED_KEY).decode()
        except Exception:
            # the store is gone: host 0's launcher ended; say so unless a local cause shows up
            return (f"lost the run's store at {self.spec.master}:{self.spec.port} (host 0's launcher ended)"
                    if self.spec.node_rank != 0 else None)
        return None

    def post_failure(self, message: str) -> None:
        """Tell the other hosts' launchers why the run failed (first one wins)."""
        if self.spec is None:
            return
        try:
            self.monitor.store.compare_set(FAILED_KEY, "", message)
        except Exception:
            pass

    def _leave_together(self, timeout_s: float) -> None:
        """Host 0 keeps the store up until every host has read the results."""
        if self.spec is None:
            return
        store = self.monitor.store
        deadline = time.monotonic() + timeout_s
        try:
            store.add("gnnflow/collected", 1)
            if self.spec.node_rank == 0:
                while int(store.add("gnnflow/collected", 0)) < self.spec.nnodes and time.monotonic() < deadline:
                    time.sleep(0.1)
                return
            # the others return once host 0's store has gone, so that a next run_ranks of the same
            # program (verify runs several) cannot reach this run's store on the same port
            while time.monotonic() < deadline:
                store.check(["gnnflow/collected"])
                time.sleep(0.1)
        except Exception:
            pass

    def _take(self, ready: list[Any]) -> None:
        for obj in ready:
            if obj in self.pending:
                i = self.pending.pop(obj)
                try:
                    msg = pickle.loads(obj.recv_bytes())
                except (EOFError, OSError):  # the rank exited without a word
                    self.procs[i].join(2.0)
                    continue
                if msg[0] == "error":
                    log.debug("rank %d traceback:\n%s", self.ranks[i], msg[2])
                    self.errors[i] = msg[1]
                else:
                    self.results[self.ranks[i]] = msg[1]
                    self.finished.add(i)
            elif obj in self.sentinels:
                i = self.sentinels.pop(obj)
                self.procs[i].join(0.1)
                if self.conns[i] in self.pending and self.conns[i].poll(0.5):
                    # an error report may still be in flight: read it first
                    self._take([self.conns[i]])

    def _died(self) -> list[int]:
        """Local indexes of ranks that exited without a result or an error report (killed, crashed)."""
        return [i for i, p in enumerate(self.procs)
                if p.exitcode is not None and i not in self.errors and i not in self.finished
                and self.conns[i] not in self.pending]

    def _on(self, rank: int) -> str:
        """`` on host H, pid P`` where ``rank`` said so (across hosts, the host is half the answer)."""
        where = self.monitor.who(rank)
        return f" on {where}" if where else ""

    def _fail(self) -> None:
        # the first sign is often a healthy rank losing its connection to the one that died or
        # stopped: give the cause a moment to show itself, then name it
        deadline = time.monotonic() + self.GRACE_S
        while time.monotonic() < deadline:
            self._take(wait(list(self.pending) + list(self.sentinels), timeout=0.2))
        self.monitor.poll()
        died = self._died()
        if died:
            i, r = died[0], self.ranks[died[0]]
            self._raise(f"rank {r} died ({_describe_exit(self.procs[i].exitcode)}){self._on(r)}" + self._others(r))
        posted = self._posted()
        if posted:  # another host's launcher found the cause first
            raise DistributedError(posted)
        stalled = self._stalled(threshold_s=min(self.monitor.stall_s, 5.0))
        if stalled:
            r = stalled[0]
            self._raise(self.monitor.describe_stall(r) + self._others(r))
        genuine = [i for i in sorted(self.errors) if not _is_wait_failure(self.errors[i])]
        if genuine:  # an error of its own, not a lost connection or a timeout caused by another
            i, r = genuine[0], self.ranks[genuine[0]]
            self._raise(f"rank {r} failed: {self.errors[i]}{self._at(r)}" + self._others(r))
        if self.spec is not None:  # only lost connections here: the host that lost a rank says which
            deadline = time.monotonic() + 3 * self.GRACE_S
            while time.monotonic() < deadline:
                posted = self._posted()
                if posted:
                    raise DistributedError(posted)
                time.sleep(0.2)
        lagging = [r for r in self.monitor.lagging() if r not in self.ranks or self.ranks.index(r) not in self.errors]
        if lagging:
            r = lagging[0]
            self._raise(f"rank {r} fell behind: the others gave up waiting for it{self._on(r)}" + self._others(r))
        if not self.errors:  # a rank looked stopped but beats again (a long call on a busy host): watch on
            return
        i = min(self.errors)
        r = self.ranks[i]
        raise DistributedError(f"rank {r} failed: {self.errors[i]}{self._at(r)}" + self._others(r))

    def _at(self, rank: int) -> str:
        where = self.monitor.who(rank)
        return f" ({where})" if where else ""

    def _raise(self, message: str) -> None:
        """Fail with ``message``, a cause found on this host: the other hosts stop with it too."""
        self.post_failure(message)
        raise DistributedError(message)

    def _others(self, culprit: int) -> str:
        """What the other ranks reported, briefly (they usually only noticed the culprit)."""
        others = [i for i in sorted(self.errors) if self.ranks[i] != culprit]
        if not others:
            return ""
        first = self.errors[others[0]].splitlines()[0][:160]
        more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
        return f"; then rank {self.ranks[others[0]]}: {first}{more}"


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
