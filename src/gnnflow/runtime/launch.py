"""Starting ranks: one code path for local spawn, torchrun and srun.

``run_ranks(fn, world_size, *args)`` runs ``fn(ctx, *args)`` on every rank with a
process group initialised and returns the list of per-rank results (on the
local launcher) or this rank's result in a list of one (under torchrun/srun,
where the outer launcher owns the other ranks).

* Local: ``world_size`` processes are started on this machine, forked from the
  launcher's fork server (:func:`rank_start_context`), each named
  ``gnnflow-rank<N>`` in ``ps``.  The parent holds
  the rendezvous store, listening on loopback only
  (:mod:`gnnflow.runtime.network`), and gloo is pinned to loopback too.  It
  watches the ranks: their exits, their error reports and their heartbeats
  (:mod:`gnnflow.runtime.watchdog`).  When one fails, dies or stops
  responding, the rest are terminated at once and :class:`DistributedError`
  names the rank that CAUSED the failure: a dead rank before a stopped one,
  a stopped one before the ranks that then timed out or lost their connection.
  SIGTERM, SIGHUP or SIGINT to the parent stops every rank before it exits; a
  rank dies with its parent, the fork server (``PR_SET_PDEATHSIG``), which
  exits when the launcher does, even when the launcher is killed outright.
  Shared-memory files the run made are removed on every exit path
  (:mod:`gnnflow.runtime.processes`).  No process is left behind.
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
NCCL refuses); see :mod:`gnnflow.runtime.devices`.

Every collective has the process-group timeout (``GNNFLOW_DIST_TIMEOUT``
seconds, default 600), so a rank that dies makes the others fail rather than
hang even without a launcher watching.  The launcher finds a dead rank at once and a stopped
one (process state ``T``) within seconds (:mod:`gnnflow.runtime.watchdog`); a rank that is only
slow (a busy host, a long native call) is never taken for a stopped one.  The collective timeout
only has to outlast the longest honest wait of a rank on a slower peer (a products-sized
evaluation layer on a loaded host took more than 60 s).
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from gnnflow.io import configure_logging
from gnnflow.runtime import devices
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.forkserver import (
    quiet_resource_tracker,
    rank_start_context,
    release_fork_server,
)
from gnnflow.runtime.group import default_backend, device_for, dist_timeout_s, init_group
from gnnflow.runtime.hosts import Nodes, external_launcher, nodes, slurm_master, slurm_task_threads
from gnnflow.runtime.network import (
    LOOPBACK,
    connect_store,
    local_address_towards,
    resolve,
    set_run_address,
    start_store,
)
from gnnflow.runtime.processes import (
    TAG_ENV,
    TUNABLES_ENV,
    die_with_parent,
    environ_set,
    huge_page_tunables,
    new_run_tag,
    remove_run_shm,
    set_process_name,
    sweep_stale_shm,
    tune_allocator,
)
from gnnflow.runtime.supervisor import StopSignals, Supervisor, result_key, terminate
from gnnflow.runtime.watchdog import Heartbeat, LivenessMonitor

log = logging.getLogger("gnnflow.runtime")


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
    environ: dict[str, str],
) -> None:
    """Body of a started rank: take the launcher's environment, beat, init the group, run
    ``fn``, report through ``conn``."""
    os.environ.clear()  # the fork server's environment is the one of the launcher's first run
    os.environ.update(environ)
    set_process_name(f"gnnflow-rank{rank}")
    release_fork_server()
    die_with_parent()
    tune_allocator()
    os.environ["GNNFLOW_RANK"] = str(rank)
    configure_logging()  # rank 0 reports each epoch as it ends (driver)
    torch.set_num_threads(threads)
    heartbeat = None
    try:
        heartbeat = Heartbeat(connect_store(addr, port, world_size, timeout_s), rank)
        ctx = RankContext(rank=rank, world_size=world_size, device=device_for(local_rank, device),
                          local_rank=local_rank)
        init_group(rank, world_size, connect_store(addr, port, world_size, timeout_s), backend, timeout_s)
        result = fn(ctx, *args)
        if nodes() is not None:  # the other hosts' launchers read it from the store
            connect_store(addr, port, world_size, timeout_s).set(
                result_key(rank), pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
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
    # a process forked by the fork server ends with os._exit, which skips the atexit handlers a
    # spawned rank ran as it exited (the DistDGL peer's client and servers, the swap planner's
    # shared files): run them here, as the interpreter would have
    atexit._run_exitfuncs()


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
        return [fn(RankContext(rank=0, world_size=1, device=device_for(0, device)), *args)]
    return _spawn_local(fn, world_size, args, device, backend, timeout_s, threads_per_rank, spec)


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
        master, port = slurm_master()
        agent_store = False
    tune_allocator()
    _sweep()
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
    ctx = RankContext(rank=rank, world_size=world, device=device_for(local, device), local_rank=local)
    init_group(rank, world, store, backend, timeout_s)
    try:
        return fn(ctx, *args)
    finally:
        dist.destroy_process_group()
        if bound is not None:
            bound.close()


def _sweep() -> None:
    """Remove the shared memory that runs whose launcher was killed left on this host."""
    stale = sweep_stale_shm()
    if stale:
        log.warning("removed %d shared-memory entr%s left by runs whose launcher is gone: %s", len(stale),
                    "y" if len(stale) == 1 else "ies", " ".join(stale))


def _spawn_local(fn: Callable[..., Any], world_size: int, args: tuple[Any, ...], device: str,
                 backend: str, timeout_s: float, threads_per_rank: int | None,
                 spec: Nodes | None = None) -> list[Any]:
    ctx = rank_start_context()
    quiet_resource_tracker()
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
    _sweep()
    tag = os.environ[TAG_ENV] = new_run_tag()  # shared memory named after this run on this host
    monitor = LivenessMonitor(store, world_size)
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // len(ranks))
    procs: list[Any] = []
    conns: list[Any] = []
    try:
        # the ranks' glibc backs big buffers with huge pages (read at their start)
        with StopSignals(), environ_set(TUNABLES_ENV, huge_page_tunables(os.environ)):
            for local, rank in enumerate(ranks):
                parent, child = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=_rank_entry,
                    args=(rank, local, world_size, store_addr, port, backend, device, timeout_s, threads, fn,
                          args, child, dict(os.environ)),
                    name=f"gnnflow-rank{rank}",
                    daemon=False,
                )
                p.start()
                child.close()
                procs.append(p)
                conns.append(parent)
            return Supervisor(procs, conns, monitor, list(ranks), world_size, spec).run(timeout_s)
    finally:
        terminate(procs)
        if bound is not None:
            bound.close()
        removed = remove_run_shm(tag)
        if removed:
            log.debug("removed shared memory left by the run: %s", removed)
        os.environ.pop(TAG_ENV, None)


