"""Liveness: telling a stopped rank from a slow one, and naming the rank that stopped.

When one rank stops (SIGSTOP, a debugger, a host that froze) or hangs, the others block in their
next collective until its timeout, and the first of them to give up is the one that reports an
error.  Naming that rank sends the user to the wrong process.  So the launcher watches:

* :class:`Heartbeat` — a daemon thread in each rank bumps the key ``gnnflow/hb/<rank>`` in the
  run's rendezvous store every ``interval`` seconds (``"<beats> <progress>"``, where progress
  counts the rank's collectives and epochs, :func:`note_progress`), after writing
  ``gnnflow/who/<rank>`` = ``"<host> <pid>"`` once.
* :class:`LivenessMonitor` — run by each host's launcher (it holds or reaches the store, so a
  stopped rank cannot take the store down with it).  A rank is declared

  - **stopped** when the operating system says so: its process on this host has been in state
    ``T`` (stopped, e.g. SIGSTOP) or ``t`` (traced) for :data:`STOP_GRACE_S` seconds, read from
    ``/proc/<pid>/stat`` (the launcher of the rank's host sees it, and tells the other hosts);
  - **stuck** when its progress counter has not moved for ``progress_s`` seconds
    (``GNNFLOW_PROGRESS_TIMEOUT``, default: the collective timeout ``GNNFLOW_DIST_TIMEOUT``, 600 s,
    as NCCL's watchdog waits minutes), while it still runs.

  A missed heartbeat alone never fails a run: a rank starved of CPU on a busy host, or inside one
  long native call that holds the interpreter lock, beats late but is not stopped.  When some
  rank fails, the stopped, stuck or lagging ranks are the cause and are named first.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any


def progress_timeout_s() -> float:
    """Seconds without progress after which a running rank counts as stuck
    (``GNNFLOW_PROGRESS_TIMEOUT``, default: the collective timeout)."""
    from gnnflow.config import env_seconds
    from gnnflow.runtime.group import dist_timeout_s

    return env_seconds("GNNFLOW_PROGRESS_TIMEOUT", dist_timeout_s())


#: seconds a rank's process must stay in state T before it counts as stopped (a debugger's brief
#: stop, or SIGSTOP followed at once by SIGCONT, does not end a run)
STOP_GRACE_S = 2.0


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` on this host (``R``, ``S``, ``D``, ``T``, ``t``, ``Z``, ...)
    from ``/proc/<pid>/stat``, or None when there is no such process."""
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: the state follows the last ')'
    return text[text.rindex(")") + 2]


INTERVAL_S = 1.0

_progress = [0]


def note_progress(n: int = 1) -> None:
    """Count one unit of this rank's progress (a collective, an epoch); published with its beat."""
    _progress[0] += n


def progress() -> int:
    return _progress[0]


def _beat_key(rank: int) -> str:
    return f"gnnflow/hb/{rank}"


def _who_key(rank: int) -> str:
    return f"gnnflow/who/{rank}"


class Heartbeat:
    """This rank's heartbeat thread (see the module docstring).  ``store``: a client of the
    run's store used by this thread only (a TCPStore connection is not shared with the
    process group's)."""

    def __init__(self, store: Any, rank: int, interval_s: float = INTERVAL_S) -> None:
        self.store = store
        self.rank = rank
        self.interval_s = interval_s
        self._stop = threading.Event()
        store.set(_who_key(rank), f"{socket.gethostname()} {os.getpid()}")
        self._beats = 0
        self._beat()
        self._thread = threading.Thread(target=self._run, name=f"gnnflow-heartbeat{rank}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        self._beats += 1
        self.store.set(_beat_key(self.rank), f"{self._beats} {progress()}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._beat()
            except Exception:  # the store is gone: the run is ending; nothing left to tell
                return

    def stop(self) -> None:
        self._stop.set()


class LivenessMonitor:
    """Watches every rank's beat and progress in ``store``, and the process state of this host's
    ranks (``pids``: rank -> pid); see the module docstring."""

    def __init__(self, store: Any, world_size: int, pids: dict[int, int] | None = None,
                 progress_s: float | None = None) -> None:
        self.store = store
        self.world_size = world_size
        self.pids = dict(pids or {})
        self.progress_s = progress_timeout_s() if progress_s is None else progress_s
        now = time.monotonic()
        self._value: list[str | None] = [None] * world_size
        self._changed = [now] * world_size  # the beat
        self._progress = [0] * world_size
        self._progress_changed = [now] * world_size
        self._stopped_since: dict[int, float] = {}
        self._state: dict[int, str | None] = {}
        self._who: list[str | None] = [None] * world_size

    def poll(self) -> None:
        """Read every rank's beat once (keys not written yet count as unchanged) and the process
        state of this host's ranks."""
        now = time.monotonic()
        for r in range(self.world_size):
            key = _beat_key(r)
            try:
                if not self.store.check([key]):
                    continue
                value = self.store.get(key).decode()
            except Exception:
                continue
            if value != self._value[r]:
                self._value[r] = value
                self._changed[r] = now
                parts = value.split()
                progress = int(parts[1]) if len(parts) > 1 else 0
                if progress != self._progress[r]:
                    self._progress[r] = progress
                    self._progress_changed[r] = now
        for r, pid in self.pids.items():
            state = self._state[r] = process_state(pid)
            if state in ("T", "t"):
                self._stopped_since.setdefault(r, now)
            else:
                self._stopped_since.pop(r, None)

    def all_seen(self) -> bool:
        """True once every rank has beaten."""
        return all(v is not None for v in self._value)

    def silent_for(self, rank: int) -> float:
        """Seconds since ``rank``'s beat last changed."""
        return time.monotonic() - self._changed[rank]

    def stopped(self, grace_s: float = STOP_GRACE_S) -> list[int]:
        """This host's ranks whose process has been stopped (state T) for ``grace_s`` seconds."""
        now = time.monotonic()
        return sorted(r for r, since in self._stopped_since.items() if now - since >= grace_s)

    def stuck(self) -> list[int]:
        """Ranks whose progress has not moved for ``progress_s`` seconds."""
        now = time.monotonic()
        return [r for r in range(self.world_size) if now - self._progress_changed[r] > self.progress_s]

    def lagging(self) -> list[int]:
        """Ranks whose progress is behind every other rank's (a rank the others wait for)."""
        if self.world_size < 2 or any(v is None for v in self._value):
            return []
        low = min(self._progress)
        behind = [r for r in range(self.world_size) if self._progress[r] == low]
        return behind if len(behind) < self.world_size else []

    def who(self, rank: int) -> str:
        """``"host H, pid P"`` of ``rank`` when it has said so."""
        if self._who[rank] is None:
            try:
                if self.store.check([_who_key(rank)]):
                    self._who[rank] = self.store.get(_who_key(rank)).decode()
            except Exception:
                return ""
        if not self._who[rank]:
            return ""
        host, _, pid = self._who[rank].partition(" ")
        return f"host {host}, pid {pid}"

    def describe(self, rank: int) -> str:
        """Why ``rank`` counts as stopped or stuck, in words."""
        where = self.who(rank)
        at = f" ({where})" if where else ""
        if rank in self._stopped_since:
            since = time.monotonic() - self._stopped_since[rank]
            return (f"rank {rank}{at} stopped responding: its process is stopped (state "
                    f"{self._state.get(rank)}, e.g. SIGSTOP or a debugger) for {since:.0f}s")
        quiet = time.monotonic() - self._progress_changed[rank]
        return (f"rank {rank}{at} stopped responding: no progress for {quiet:.0f}s "
                f"(GNNFLOW_PROGRESS_TIMEOUT {self.progress_s:.0f}s; hung in a call, or deadlocked)")
