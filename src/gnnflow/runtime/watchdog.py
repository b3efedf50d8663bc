"""Heartbeats: naming the rank that stopped, not the rank that noticed.

When one rank stops (SIGSTOP, a hang in native code, a host that froze) the
others block in their next collective until its timeout, and the first of them
to give up is the one that reports an error.  Naming that rank sends the user
to the wrong process.  So every rank beats:

* :class:`Heartbeat` — a daemon thread in each rank bumps the key
  ``gnnflow/hb/<rank>`` in the run's rendezvous store every ``interval``
  seconds (``"<beats> <progress>"``, where progress counts the rank's
  collectives and epochs, :func:`note_progress`), after writing
  ``gnnflow/who/<rank>`` = ``"<host> <pid>"`` once.
* :class:`HeartbeatMonitor` — reads every rank's key (the local launcher's
  parent polls it every second; it holds the store, so a stopped rank cannot
  take the store down with it) and knows for each rank when its beat last
  changed.  A rank whose beat has not changed for ``stall_s`` seconds
  (``GNNFLOW_STALL_TIMEOUT``, default 30) has stopped; when some rank fails, the
  stopped or lagging ranks are the cause and are named first.

Liveness comes from a thread, so a rank busy in one long native call that
holds the interpreter lock for more than ``stall_s`` seconds would also look
stopped; no call in gnnflow's ranks comes near that at the sizes it targets
(the default leaves a wide margin; raise it for huge shards).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any


def stall_timeout_s() -> float:
    """Seconds without a heartbeat after which a rank counts as stopped (``GNNFLOW_STALL_TIMEOUT``,
    default 30)."""
    from gnnflow.config import env_seconds

    return env_seconds("GNNFLOW_STALL_TIMEOUT", 30.0)

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


class HeartbeatMonitor:
    """Watches every rank's beat in ``store`` (see the module docstring)."""

    def __init__(self, store: Any, world_size: int, stall_s: float | None = None) -> None:
        self.store = store
        self.world_size = world_size
        self.stall_s = stall_timeout_s() if stall_s is None else stall_s
        now = time.monotonic()
        self._value: list[str | None] = [None] * world_size
        self._changed = [now] * world_size
        self._progress = [0] * world_size
        self._who: list[str | None] = [None] * world_size

    def poll(self) -> None:
        """Read every rank's beat once (keys not written yet count as unchanged)."""
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
                self._progress[r] = int(parts[1]) if len(parts) > 1 else 0

    def all_seen(self) -> bool:
        """True once every rank has beaten."""
        return all(v is not None for v in self._value)

    def silent_for(self, rank: int) -> float:
        return time.monotonic() - self._changed[rank]

    def stalled(self, threshold_s: float | None = None) -> list[int]:
        """Ranks whose beat has not changed for ``threshold_s`` (default ``stall_s``) seconds."""
        limit = self.stall_s if threshold_s is None else threshold_s
        return [r for r in range(self.world_size) if self.silent_for(r) > limit]

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

    def describe_stall(self, rank: int) -> str:
        where = self.who(rank)
        return (f"rank {rank}{f' ({where})' if where else ''} stopped responding: no heartbeat for "
                f"{self.silent_for(rank):.0f}s (stopped, e.g. SIGSTOP, or stuck in native code)")
