"""Where ranks start from (gnnflow.runtime.forkserver): ``gnnflow train``'s fork server is a fork
of the launcher itself (no second interpreter importing torch); the ranks it forks train as
spawned ones do; it is refused while a thread runs; a killed launcher takes it and its ranks
along."""

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
from conftest import rank_processes, synthetic_graph_book, unmeasured_records

TESTS = Path(__file__).resolve().parent


def parent_pid(ctx) -> list[int]:
    """A rank's parent (the fork server it was forked from), 1 when the rank could start
    processes from that server in turn (its lock is free: no lock was held across the fork),
    and 1 when the rank found ``torch._dynamo`` imported (by the server: its preload)."""
    from multiprocessing import forkserver

    lock = forkserver._forkserver._lock
    free = lock.acquire(blocking=False)
    if free:
        lock.release()
    return [os.getppid(), int(free), int("torch._dynamo" in sys.modules)]


SCRIPT = """
import json, os, sys, threading
from multiprocessing import forkserver
if sys.argv[1] == "thread":
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()
from gnnflow.runtime.forkserver import prestart_fork_server
prestarted = prestart_fork_server(trains_here=sys.argv[1] == "trains_here",
                                  preload=() if sys.argv[1] == "plain" else ("torch._dynamo",))
from gnnflow.runtime.launch import run_ranks
from test_runtime_forkserver import parent_pid
parents = run_ranks(parent_pid, 2)
server = forkserver._forkserver._forkserver_pid
with open(f"/proc/{server}/cmdline", "rb") as f:
    cmdline = f.read().decode().split("\\0")[:-1]
print(json.dumps({"prestarted": prestarted, "parents": parents, "server": server, "me": os.getpid(),
                  "server_parent": int(open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()[1]),
                  "server_cmdline": cmdline, "my_cmdline": sys.orig_argv,
                  "my_dynamo": "torch._dynamo" in sys.modules}))
if sys.argv[1] == "thread":
    stop.set()
"""


def _run_script(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["plain", "preload", "trains_here"])
def test_the_fork_server_is_a_fork_of_the_launcher(mode):
    got = _run_script(mode)
    assert got["prestarted"] is True
    # the ranks came from that server, which imported what it was asked to preload for them
    # (torch._dynamo, the DistDGL peer's): after the fork, or (a launcher that trains too, verify)
    # the launcher before it; nothing else imports it (gnnflow.nn.adam, not torch.optim)
    dynamo = int(mode != "plain")
    assert got["parents"] == [[got["server"], 1, dynamo], [got["server"], 1, dynamo]]
    assert got["my_dynamo"] is (mode == "trains_here")
    assert got["server_parent"] == got["me"]
    assert got["server_cmdline"] == got["my_cmdline"]  # a fork: no new interpreter was started
    try:  # it ends with its launcher
        psutil.Process(got["server"]).wait(timeout=60)
    except psutil.NoSuchProcess:
        pass


def test_no_fork_of_the_launcher_while_a_thread_runs():
    got = _run_script("thread")
    assert got["prestarted"] is False
    # the usual server imports no strategy's rank_imports: it serves every strategy
    assert got["parents"] == [[got["server"], 1, 0], [got["server"], 1, 0]]
    assert "from multiprocessing.forkserver import main" in " ".join(got["server_cmdline"])  # the usual server


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return synthetic_graph_book(tmp_path_factory.mktemp("forkserver"), 1024, "metis", 2)


def _train(graph_book, out: Path, *extra: str) -> list[str]:
    graph, book = graph_book
    return [sys.executable, "-m", "gnnflow.cli", "train", "--strategy", "data", "--graph", graph, "--partition",
            book, "--workers", "2", "--batch-size", "64", "--hidden", "8", "--seed", "0", "--run-id", "r", "--out", str(out), *extra]


CALLED = """
import json, sys
from multiprocessing import forkserver
from gnnflow.cli import main
code = main(sys.argv[1:])
with open(f"/proc/{forkserver._forkserver._forkserver_pid}/cmdline", "rb") as f:
    print(json.dumps({"code": code, "server_cmdline": f.read().decode().split("\\0")[:-1]}))
"""


def test_a_train_called_from_python_does_not_fork_its_caller(graph_book, tmp_path):
    """``gnnflow.cli.main(["train", ...])`` from another program (a test, a notebook: a process
    that may hold gigabytes) starts the usual server; forked, every rank would start with a copy
    of the caller's pages (a test's rank peaks were 146 MiB higher that way)."""
    command = _train(graph_book, tmp_path / "run", "--epochs", "1")
    done = subprocess.run([sys.executable, "-c", CALLED, *command[3:]], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["code"] == 0
    assert "from multiprocessing.forkserver import main" in " ".join(got["server_cmdline"])  # the usual server


def test_train_from_the_launchers_fork_equals_spawned_ranks(graph_book, tmp_path):
    runs = {}
    for method in ("forkserver", "spawn"):
        out = tmp_path / method
        done = subprocess.run(_train(graph_book, out, "--epochs", "2"), capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, GNNFLOW_START_METHOD=method))
        assert done.returncode == 0, done.stderr[-3000:]
        runs[method] = unmeasured_records(out)
    assert len(runs["forkserver"]) == 4 and runs["forkserver"] == runs["spawn"]


def test_a_killed_launcher_takes_its_fork_server_and_ranks_along(graph_book, tmp_path):
    out = tmp_path / "run"
    launcher = subprocess.Popen(_train(graph_book, out, "--epochs", "2000", "--eval-every", "1000"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "records.jsonl").exists():  # every rank trains
            assert launcher.poll() is None, launcher.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        ranks = rank_processes(launcher.pid)
        server = psutil.Process(ranks[0].ppid())
        assert len(ranks) == 2 and server.ppid() == launcher.pid
        assert server.cmdline() == psutil.Process(launcher.pid).cmdline()  # the launcher's own fork
        launcher.send_signal(signal.SIGKILL)
        launcher.communicate(timeout=60)
        gone, alive = psutil.wait_procs([server, *ranks], timeout=60)
        assert not alive, alive
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_only_the_distdgl_peer_has_rank_imports():
    """gnnflow's strategies' ranks import nothing their launcher has not (no torch._dynamo: their
    Adam is gnnflow.nn.adam's); the DistDGL peer's DistributedDataParallel imports it."""
    from gnnflow.config import STRATEGIES
    from gnnflow.strategies.base import strategy_class

    imports = {name: strategy_class(name).rank_imports for name in STRATEGIES}
    assert {name: found for name, found in imports.items() if found} == {
        "distdgl": ("torch._dynamo",)}
