"""Telling a stopped rank from a slow one (issue: reliability, item 0).

A rank is stopped when its process state says so (``T``), or stuck when its progress has not
moved for the progress timeout; a missed heartbeat alone (a rank starved of CPU, or inside one
long native call that holds the interpreter lock) never fails a run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from gnnflow.runtime.watchdog import LivenessMonitor, process_state


class FakeStore:
    """The part of a TCPStore the monitor reads."""

    def __init__(self) -> None:
        self.kv: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.kv[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        return all(k in self.kv for k in keys)

    def get(self, key: str) -> bytes:
        return self.kv[key]


def test_process_state_reads_proc():
    assert process_state(os.getpid()) in ("R", "S")
    assert process_state(2**22 + 12345) is None  # no such process


def test_a_silent_rank_is_not_stopped_but_a_sigstopped_one_is():
    """Rank 0 stops beating (as a rank starved of CPU or holding the interpreter lock does) while
    its process runs: not stopped.  Rank 1's process is SIGSTOPped: stopped after the grace."""
    store = FakeStore()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monitor = LivenessMonitor(store, 2, pids={0: os.getpid(), 1: sleeper.pid}, progress_s=600)
        store.set("gnnflow/hb/0", "1 5")
        store.set("gnnflow/hb/1", "1 5")
        monitor.poll()
        monitor._changed[0] -= 120  # no beat from rank 0 for two minutes
        monitor.poll()
        assert monitor.stopped(grace_s=0.0) == [] and monitor.stuck() == []
        sleeper.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while process_state(sleeper.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        monitor.poll()
        assert monitor.stopped(grace_s=10.0) == []  # within the grace: maybe a debugger's blip
        assert monitor.stopped(grace_s=0.0) == [1]
        assert "stopped responding: its process is stopped (state T" in monitor.describe(1)
        sleeper.send_signal(signal.SIGCONT)
        time.sleep(0.2)
        monitor.poll()
        assert monitor.stopped(grace_s=0.0) == []  # it runs again: nothing to report
    finally:
        sleeper.kill()
        sleeper.wait()


def test_no_progress_for_the_progress_timeout_is_stuck():
    store = FakeStore()
    monitor = LivenessMonitor(store, 2, progress_s=30)
    store.set("gnnflow/hb/0", "1 5")
    store.set("gnnflow/hb/1", "1 5")
    monitor.poll()
    store.set("gnnflow/hb/0", "2 6")  # rank 0 progresses, rank 1 only beats
    store.set("gnnflow/hb/1", "2 5")
    monitor.poll()
    monitor._progress_changed[1] -= 31
    assert monitor.stuck() == [1] and monitor.lagging() == [1]
    assert "no progress for 31s" in monitor.describe(1)


def _hold_then_sum(ctx, seconds: float) -> float:
    """Rank 1 holds the interpreter lock inside one native call for ``seconds`` (its heartbeat
    thread cannot beat meanwhile), then every rank takes part in an all-reduce."""
    from gnnflow.comm.collectives import all_reduce
    from gnnflow.runtime.devices import HOST

    if ctx.rank == 1:
        ctypes.PyDLL(None).sleep(int(seconds))  # PyDLL keeps the GIL through the call
    t = torch.tensor([float(ctx.rank + 1)])
    all_reduce(t, HOST)
    return float(t.item())


@pytest.mark.slow
def test_a_rank_inside_a_40s_native_call_finishes_the_run():
    """The heartbeat thread of a rank inside a 40 s call that holds the interpreter lock is silent
    for 40 s (40 beats missed): the run goes on and gives the right result (a 30 s heartbeat
    limit, since removed, killed it; no number of missed beats fails a run now)."""
    from gnnflow.runtime.launch import run_ranks

    t0 = time.monotonic()
    assert run_ranks(_hold_then_sum, 2, 40.0, timeout_s=300) == [3.0, 3.0]
    assert time.monotonic() - t0 >= 40
