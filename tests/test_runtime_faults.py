"""Issue 17: listeners, stopped ranks, signals to the launcher, shared memory of failed runs.

Every test runs ``gnnflow train`` as a user does (a subprocess with its own ranks) on a
tiny graph, then acts on the process tree:

* while it trains, every listening socket of the run's processes is on loopback;
* SIGSTOP of one rank fails the run naming THAT rank (not the healthy rank that
  timed out waiting for it), for every strategy;
* SIGTERM to the launcher leaves no rank alive after 10 s;
* a failed swap-planner run leaves nothing in /dev/shm.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import launcher_shm, rank_processes, synthetic_graph_book

STRATEGY_ARGS = {
    "data": [],
    "data-process": ["--samplers", "process"],
    "split": [],
    "p3": [],
    "hec": [],
    "fullbatch": ["--model", "gcn"],
    "dgcl": ["--model", "gcn"],
}


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return synthetic_graph_book(tmp_path_factory.mktemp("faults"), 4096, "metis", 2)


def _start(graph_book, out: Path, strategy: str, *extra: str, env: dict[str, str | None] | None = None,
           workers: int = 2) -> subprocess.Popen:
    """``gnnflow train`` in a subprocess; ``env`` entries override (None: unset)."""
    graph, book = graph_book
    cmd = [sys.executable, "-m", "gnnflow.cli", "train", "--strategy", strategy.split("-")[0],
           "--graph", graph, "--partition", book, "--workers", str(workers), "--epochs", "500",
           "--batch-size", str(64 * workers), "--eval-every", "1000", "--out", str(out), *extra]
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_training(proc: subprocess.Popen, out: Path, timeout_s: float = 240) -> None:
    """Until the first epoch's records are written: every rank is training."""
    deadline = time.monotonic() + timeout_s
    while not (out / "records.jsonl").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "training did not start"
        time.sleep(0.2)


def _ranks(proc: subprocess.Popen) -> list[psutil.Process]:
    """The launcher's ranks in rank order (started one after the other)."""
    return rank_processes(proc.pid)


def _listeners(procs: list[psutil.Process]) -> list[tuple[str, int, int]]:
    found = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found += [(c.laddr.ip, c.laddr.port, p.pid) for c in conns if c.status == psutil.CONN_LISTEN]
    return found


def _alive(procs: list[psutil.Process]) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _gone_within(procs: list[psutil.Process], seconds: float) -> list[int]:
    """The processes still alive after waiting up to ``seconds`` for them to end."""
    deadline = time.monotonic() + seconds
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(procs)


def _finish(proc: subprocess.Popen, timeout_s: float) -> str:
    try:
        _, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return err


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGY_ARGS))
def test_listeners_are_loopback_and_a_stopped_rank_is_named(graph_book, tmp_path, strategy):
    """While training, the run listens on loopback only; SIGSTOP of rank 1 fails the run naming rank 1."""
    out = tmp_path / "run"
    proc = _start(graph_book, out, strategy, *STRATEGY_ARGS[strategy])
    try:
        _wait_training(proc, out)
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        listening = _listeners(tree)
        assert listening, "the run should at least hold its rendezvous store"
        assert all(ip == "127.0.0.1" for ip, _, _ in listening), listening
        victim = _ranks(proc)[1]
        t0 = time.monotonic()
        victim.send_signal(signal.SIGSTOP)
        err = _finish(proc, 120)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert elapsed < 90, elapsed
    last = err.strip().splitlines()[-1]
    assert last.startswith("gnnflow train: error: rank 1 ") and "stopped responding" in last, last
    assert not _gone_within(tree[1:], 10), "processes left behind"
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and "rank 1" in info["error"]


@pytest.mark.slow
def test_default_stall_timeout_names_rank_0(graph_book, tmp_path):
    """With the default settings a stopped rank 0 is named within 60 s (its process state says it is
    stopped; before: rank 1 was blamed)."""
    out = tmp_path / "run"
    proc = _start(graph_book, out, "data", env={"GNNFLOW_PROGRESS_TIMEOUT": None, "GNNFLOW_DIST_TIMEOUT": None})
    try:
        _wait_training(proc, out)
        t0 = time.monotonic()
        _ranks(proc)[0].send_signal(signal.SIGSTOP)
        err = _finish(proc, 150)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and elapsed < 60, (elapsed, err[-2000:])
    assert "error: rank 0 " in err and "stopped responding" in err, err[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["data-process", "fullbatch"])
def test_sigterm_to_the_launcher_stops_every_rank(graph_book, tmp_path, strategy):
    out = tmp_path / "run"
    proc = _start(graph_book, out, strategy, *STRATEGY_ARGS[strategy])
    try:
        _wait_training(proc, out)
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert len(tree) >= 2
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        err = _finish(proc, 30)
        left = _gone_within(tree, 10 - (time.monotonic() - t0))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not left, f"processes alive 10 s after SIGTERM: {left}"
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "gnnflow train: stopped by SIGTERM"
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and "SIGTERM" in info["error"]


@pytest.mark.slow
def test_failed_swap_run_leaves_no_shared_memory(graph_book, tmp_path):
    out = tmp_path / "run"
    proc = _start(graph_book, out, "dgcl", "--model", "gcn", "--planner", "swap")
    try:
        _wait_training(proc, out)
        assert launcher_shm(proc.pid), "the swap planner should hold shared memory while it runs"
        _ranks(proc)[0].send_signal(signal.SIGKILL)  # rank 0 made the buffers: it cannot remove them
        err = _finish(proc, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "rank 0 died" in err, err[-2000:]
    assert launcher_shm(proc.pid) == []
