"""Acceptance 5 of issue 5: killing one rank mid-epoch ends ``gnnflow train`` promptly and cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import rank_processes, synthetic_graph_book


@pytest.fixture
def default_graph_book(tmp_path):
    return synthetic_graph_book(tmp_path, 8192, "metis", 4)


def _rank_processes(parent: psutil.Process) -> list[psutil.Process]:
    """The ranks in rank order (not their sampler processes, each a child of its rank)."""
    return rank_processes(parent.pid)


@pytest.mark.slow
def test_killed_rank_fails_the_run_within_60s_and_leaves_nothing(default_graph_book, tmp_path):
    graph, book = default_graph_book
    out = tmp_path / "run"
    env = dict(os.environ, GNNFLOW_DIST_TIMEOUT="30")
    cmd = [sys.executable, "-m", "gnnflow.cli", "train", "--strategy", "data", "--graph", str(graph),
           "--partition", str(book), "--workers", "4", "--epochs", "200", "--batch-size", "256",
           "--eval-every", "1000", "--samplers", "process", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(proc.pid)
    try:
        # wait until the first epoch is written: the ranks are training now
        deadline = time.monotonic() + 240
        while not (out / "records.jsonl").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        ranks = _rank_processes(parent)
        assert len(ranks) == 4
        everything = parent.children(recursive=True)
        samplers = [p for r in ranks for p in r.children() if "spawn_main" in " ".join(p.cmdline())]
        assert len(samplers) == 4  # one sampler process per rank; they must go too
        time.sleep(0.5)  # mid-epoch
        victim = ranks[2]
        t0 = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=90)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert elapsed < 60, elapsed
    assert "rank 2 died" in err, err
    time.sleep(1.0)
    left = [p for p in everything if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [(p.pid, p.cmdline()) for p in left]
    print(f"rank 2 killed; gnnflow train exited {proc.returncode} after {elapsed:.1f}s: "
          f"{err.strip().splitlines()[-1]}")
