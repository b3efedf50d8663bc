"""Where local ranks start from: one fork server per launcher process.

A rank is forked from a server process that imported torch and the training driver once; a
spawned rank imports torch again (2-3 CPU seconds each, with 4 ranks on 2 cores several seconds
of every run).  The server is multiprocessing's fork server (``forkserver`` start method):

* :func:`prestart_fork_server` — ``gnnflow verify``, and ``gnnflow train`` for a strategy that
  starts ranks, run as commands (not ``gnnflow.cli.main([...])`` called from another program,
  whose process may be large: a test's, a notebook's), call it before anything else runs
  (``train`` parses its settings first): the server is then a fork of the launcher itself,
  made before the launcher has started a thread, a process or a torch operation, in the same
  state as a fresh server after its imports (the modules of :data:`FORKSERVER_PRELOAD`
  imported, no Python thread, no CUDA, no thread pool);
  it imports what the strategy's ranks import beyond that (``Strategy.rank_imports``: the
  DistDGL peer's DistributedDataParallel imports ``torch._dynamo``, 1.8-2.3 CPU seconds) itself
  while the launcher goes on (verify's launcher, which trains the reference too, imports them
  before the fork).  gnnflow's own ranks import nothing more (their Adam,
  ``gnnflow.nn.adam``, does not import ``torch._dynamo`` as ``torch.optim`` does).
  multiprocessing's own way starts a new interpreter that imports torch again: another 1.5-2.5
  CPU seconds of every command that trains, which this saves.
* otherwise (a launcher inside another program, e.g. a test or ``gnnflow bench``, or a Python
  whose multiprocessing differs) the server starts the usual way, on the first run, and serves
  every later run of that process.

``GNNFLOW_START_METHOD=spawn`` starts every rank as a fresh interpreter instead.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import warnings
from typing import Any

from gnnflow.errors import ConfigError
from gnnflow.runtime.hosts import external_launcher
from gnnflow.runtime.processes import environ_set

#: what the fork server imports once, so that a rank starts without importing torch again
FORKSERVER_PRELOAD = ("gnnflow.runtime.launch", "gnnflow.strategies.driver")

#: ``multiprocessing.forkserver.main``'s parameters this module drives (CPython 3.9-3.12)
_SERVER_MAIN_PARAMS = ["listener_fd", "alive_r", "preload", "main_path", "sys_path"]


def start_method() -> str:
    """``forkserver`` (the default) or ``spawn`` (``GNNFLOW_START_METHOD``)."""
    method = os.environ.get("GNNFLOW_START_METHOD", "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ConfigError(f"GNNFLOW_START_METHOD={method!r}: use forkserver or spawn")
    return method


def rank_start_context() -> Any:
    """The multiprocessing context ranks start from (module docstring); each rank takes the
    launcher's environment of its own run (``gnnflow.runtime.launch._rank_entry``)."""
    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":
        # a usual server serves every later run of its process, whatever its strategy: it imports
        # no strategy's rank_imports (the DistDGL peer's ranks import torch._dynamo themselves;
        # preloaded, it would add ~110 MiB to every rank of every strategy)
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return ctx


def quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (shared by every rank and sampler process) without
    its exit warning: when a rank is killed, the tracker removes the semaphores of its queues and
    warns about them after the run's error line, which would bury the line that names the rank."""
    from multiprocessing import resource_tracker

    quiet = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:resource_tracker:UserWarning"]))
    with environ_set("PYTHONWARNINGS", quiet):
        resource_tracker.ensure_running()


def release_fork_server() -> None:
    """Close this rank's copy of the launcher's end of the fork server's liveness pipe.

    multiprocessing hands it to every process the server forks (so that they could start
    processes from it too); while a rank holds it, the server never sees its launcher exit and
    outlives it, and so do the ranks, whose parent it is (``PR_SET_PDEATHSIG``).  Without it,
    a killed launcher ends the server and the server's exit ends the ranks."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


def _can_fork_server(server: Any) -> str | None:
    """Why this process cannot be forked into the fork server now (None: it can)."""
    from multiprocessing import forkserver

    if start_method() != "forkserver":
        return "ranks are spawned"
    if external_launcher() is not None:
        return f"ranks are started by {external_launcher()}"
    if getattr(server, "_forkserver_pid", None) is not None:
        return "a fork server runs already"
    if threading.active_count() != 1:
        return "threads run"
    if list(inspect.signature(forkserver.main).parameters) != _SERVER_MAIN_PARAMS or not all(
            hasattr(server, a) for a in ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid")):
        return f"multiprocessing of Python {sys.version_info.major}.{sys.version_info.minor} differs"
    return None


def prestart_fork_server(trains_here: bool = False, preload: tuple[str, ...] = ()) -> bool:
    """Make this process's fork server a fork of this process (module docstring); False, and
    nothing done, where it cannot be (another start method, a server already running, a Python
    thread running, an unknown multiprocessing, ranks started by srun or torchrun): the server
    then starts the usual way, if at all.  ``preload``: what the ranks import beyond
    :data:`FORKSERVER_PRELOAD` (``Strategy.rank_imports``), imported by the server after the fork;
    ``trains_here``: this process will train too (verify's single-process reference), so it
    imports ``preload`` itself, before the fork, and the server has it from there."""
    from multiprocessing import connection, forkserver, util

    server = forkserver._forkserver
    if _can_fork_server(server) is not None:
        return False
    for name in (*FORKSERVER_PRELOAD, *(preload if trains_here else ())):
        importlib.import_module(name)
    quiet_resource_tracker()  # before the fork: the server and the ranks share this one
    # no lock taken: one thread runs (checked), and a lock held across the fork would stay held
    # in the server and in every rank it forks
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    if not util.is_abstract_socket_namespace(address):
        os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()  # the server exits when every holder of alive_w closed it
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():  # Python 3.12 warns of native threads (OpenBLAS's idle
        warnings.simplefilter("ignore", DeprecationWarning)  # pool, fork-safe) at fork
        pid = os.fork()
    if pid == 0:  # the server: what a fresh interpreter would be after its imports
        try:
            os.close(alive_w)
            atexit._clear()  # the launcher's exit handlers are not the server's or a rank's
            for sig in signal.valid_signals():  # as exec would: caught signals to default
                if callable(signal.getsignal(sig)):
                    signal.signal(sig, signal.SIG_DFL)
            # ends with SystemExit; imports what it has not yet (preload) first
            forkserver.main(listener.fileno(), alive_r, [m for m in preload if m not in sys.modules])
        except SystemExit:
            pass
        except BaseException:  # noqa: BLE001 - the server must never return into the launcher
            import traceback

            traceback.print_exc()
        finally:
            os._exit(0)
    os.close(alive_r)
    listener.close()
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid
    return True
