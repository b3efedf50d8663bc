"""The local launcher's watch over its ranks: results, error reports, exits and heartbeats.

When a rank fails, dies or stops responding, :class:`Supervisor` names the rank that CAUSED the
failure (a dead rank before a stopped one, a stopped one before the ranks that then timed out or
lost their connection); across hosts, the first launcher to find a failure posts it in the store
(``gnnflow/failed``) so that every host stops with the same message.
"""

from __future__ import annotations

import logging
import pickle
import signal
import threading
import time
from multiprocessing.connection import wait
from typing import Any

from gnnflow.errors import DistributedError, RankLost, Terminated
from gnnflow.runtime.hosts import Nodes
from gnnflow.runtime.watchdog import LivenessMonitor

log = logging.getLogger("gnnflow.runtime")
FAILED_KEY = "gnnflow/failed"
#: how a posted failure says its kind: a lost rank (restartable) or a rank's own error
LOST, FAILED = "lost", "failed"


def raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


class StopSignals:
    """While active (main thread only), SIGTERM and SIGHUP raise :class:`Terminated` in the
    launcher, so its ``finally`` stops the ranks before it exits."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __enter__(self) -> StopSignals:
        self.saved: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.saved[sig] = signal.signal(sig, raise_terminated)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def result_key(rank: int) -> str:
    return f"gnnflow/result/{rank}"


class Supervisor:
    """The launcher's loop: results, errors, exits and heartbeats of this host's ranks (the
    procs, local index ``i`` is global rank ``ranks[i]``), and, across hosts, failures posted
    by the other hosts' launchers and the results of their ranks."""

    GRACE_S = 1.0  # after a first failure, how long to wait for the cause to show itself

    def __init__(self, procs: list[Any], conns: list[Any], monitor: LivenessMonitor,
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
        monitor.pids.update({r: p.pid for r, p in zip(self.ranks, procs, strict=True)})

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

    def _stalled(self) -> list[int]:
        """Global ranks that are stopped (their process, on this host) or stuck (no progress for
        the progress timeout) while still running (not finished, not failed): see
        :mod:`gnnflow.runtime.watchdog`."""
        out = []
        for r in sorted(set(self.monitor.stopped()) | set(self.monitor.stuck())):
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
                if self.monitor.store.check([result_key(r)]):
                    self.results[r] = pickle.loads(self.monitor.store.get(result_key(r)))
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
            return (f"{LOST} lost the run's store at {self.spec.master}:{self.spec.port} (host 0's launcher ended)"
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
            self._raise(f"rank {r} died ({describe_exit(self.procs[i].exitcode)}){self._on(r)}" + self._others(r))
        self._raise_posted()  # another host's launcher found the cause first
        stalled = self._stalled()
        if stalled:
            r = stalled[0]
            self._raise(self.monitor.describe(r) + self._others(r))
        genuine = [i for i in sorted(self.errors) if not is_wait_failure(self.errors[i])]
        if genuine:  # an error of its own, not a lost connection or a timeout caused by another
            i, r = genuine[0], self.ranks[genuine[0]]
            self._raise(f"rank {r} failed: {self.errors[i]}{self._at(r)}" + self._others(r), lost=False)
        if self.spec is not None:  # only lost connections here: the host that lost a rank says which
            deadline = time.monotonic() + 3 * self.GRACE_S
            while time.monotonic() < deadline:
                self._raise_posted()
                time.sleep(0.2)
        lagging = [r for r in self.monitor.lagging() if r not in self.ranks or self.ranks.index(r) not in self.errors]
        if lagging:
            r = lagging[0]
            self._raise(f"rank {r} fell behind: the others gave up waiting for it{self._on(r)}" + self._others(r))
        if not self.errors:  # nothing failed after all: watch on
            return
        i = min(self.errors)
        r = self.ranks[i]
        raise RankLost(f"rank {r} failed: {self.errors[i]}{self._at(r)}" + self._others(r))

    def _raise_posted(self) -> None:
        """Fail with the failure another host's launcher posted, of the kind it posted, if any."""
        posted = self._posted()
        if posted:
            kind, _, message = posted.partition(" ")
            raise (DistributedError if kind == FAILED else RankLost)(message)

    def _at(self, rank: int) -> str:
        where = self.monitor.who(rank)
        return f" ({where})" if where else ""

    def _raise(self, message: str, lost: bool = True) -> None:
        """Fail with ``message``, a cause found on this host, the other hosts with it too:
        :class:`RankLost` for a rank that died, stopped or fell behind, :class:`DistributedError`
        for a rank's own error (``lost=False``)."""
        self.post_failure(f"{LOST if lost else FAILED} {message}")
        raise (RankLost if lost else DistributedError)(message)

    def _others(self, culprit: int) -> str:
        """What the other ranks reported, briefly (they usually only noticed the culprit)."""
        others = [i for i in sorted(self.errors) if self.ranks[i] != culprit]
        if not others:
            return ""
        first = self.errors[others[0]].splitlines()[0][:160]
        more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
        return f"; then rank {self.ranks[others[0]]}: {first}{more}"


def is_wait_failure(error: str) -> bool:
    """An error that only says a collective or connection gave up waiting on some peer."""
    text = error.lower()
    return any(s in text for s in ("timed out", "timeout", "connection reset", "connection closed",
                                   "broken pipe", "connection refused", "read error", "write error"))


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def terminate(procs: list[Any], grace_s: float = 3.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()  # also ends a stopped (SIGSTOP) process
            p.join(1.0)
