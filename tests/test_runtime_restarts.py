"""Automatic recovery (``--max-restarts``): a rank SIGKILLed at epoch 2, or in the middle of an epoch
with ``--checkpoint-every-s``, is restarted from the last good checkpoint, and the run's records
(measurement columns aside) equal those of an uninterrupted run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import rank_processes, synthetic_graph_book, unmeasured_records

STRATEGIES = {
    "data": [],
    "split": [],
    "hec": [],
    "fullbatch": ["--model", "gcn", "--fanouts=-1,-1"],
    "dgcl": ["--model", "gcn", "--fanouts=-1,-1"],
}


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return synthetic_graph_book(tmp_path_factory.mktemp("restarts"), 2048, "metis", 2)


@pytest.fixture(scope="module")
def uninterrupted(graph_book, tmp_path_factory):
    """``uninterrupted(strategy)``: the directory of a run of ``strategy`` that nothing interrupted
    (one per strategy, shared by the kill at epoch 2 and the kill mid-epoch)."""
    done: dict[str, Path] = {}

    def run(strategy: str) -> Path:
        if strategy not in done:
            out = tmp_path_factory.mktemp(f"whole-{strategy}") / "run"
            ref = subprocess.run(_args(graph_book, strategy, out), capture_output=True, text=True, timeout=900)
            assert ref.returncode == 0, ref.stderr[-2000:]
            done[strategy] = out
        return done[strategy]

    return run


def _args(graph_book: tuple[str, str], strategy: str, out: Path, *extra: str) -> list[str]:
    graph, book = graph_book
    epochs = "12" if strategy in ("fullbatch", "dgcl") else "4"  # one step per full-batch epoch
    return [sys.executable, "-m", "gnnflow.cli", "train", "--strategy", strategy, "--graph", graph,
            "--partition", book, "--workers", "2", "--epochs", epochs, "--batch-size", "32", "--hidden", "8",
            "--seed", "0", "--run-id", "r", "--out", str(out), *STRATEGIES[strategy], *extra]


class _Output:
    """A running process's stdout and stderr, read as they come (threads); ``seen(pattern)``
    waits for a matching stderr line (stdout is only drained)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.lines, self.out = proc, [], []
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._read, args=(proc.stderr, self.lines), daemon=True),
                        threading.Thread(target=self._read, args=(proc.stdout, self.out), daemon=True)]
        for t in self.threads:
            t.start()

    def _read(self, stream, into: list[str]) -> None:
        for line in stream:
            with self.cond:
                into.append(line)
                self.cond.notify_all()

    def seen(self, pattern: re.Pattern, timeout_s: float) -> bool:
        deadline, checked = time.monotonic() + timeout_s, 0
        with self.cond:
            while True:
                if any(pattern.search(line) for line in self.lines[checked:]):
                    return True
                checked = len(self.lines)
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    return False
                self.cond.wait(0.05)

    def stderr(self) -> str:
        """Everything the process wrote to stderr (once it ended)."""
        for t in self.threads:
            t.join(timeout=60)
        return "".join(self.lines)


#: where rank 1 is killed, as rank 0 logs it (epochs 0-based): right after it wrote a checkpoint
#: inside epoch 1 or later, or right after epoch 1's records and checkpoint (the driver logs an
#: epoch's line once both are written)
_KILL_AFTER = {True: re.compile(r"epoch [1-9]\d*: checkpoint after mini-batch \d+"),
               False: re.compile(r"epoch 1: loss ")}


@pytest.mark.slow
@pytest.mark.parametrize("mid_epoch", [False, True], ids=["at-epoch-2", "mid-epoch"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_killed_rank_is_restarted_and_the_records_equal_an_uninterrupted_run(graph_book, uninterrupted, tmp_path,
                                                                               strategy, mid_epoch):
    if mid_epoch and strategy in ("fullbatch", "dgcl"):
        pytest.skip("a full-batch epoch is one step: its checkpoints are the epochs'")
    whole = uninterrupted(strategy)
    out = tmp_path / "restarted"
    extra = ["--max-restarts", "1", *(["--checkpoint-every-s", "0.001"] if mid_epoch else [])]
    proc = subprocess.Popen(_args(graph_book, strategy, out, *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # the log line, not a look at the run's files: a run that writes a checkpoint every 4
        # batches replaces them faster than a reader can always catch one whole (a reader that
        # polled them missed every mid-epoch checkpoint of some runs on a quiet host)
        output = _Output(proc)
        assert output.seen(_KILL_AFTER[mid_epoch], 300), f"never logged {_KILL_AFTER[mid_epoch].pattern!r}: " + (
            output.stderr()[-2000:] if proc.poll() is not None else "(still running)")
        rank_processes(proc.pid)[1].kill()  # SIGKILL rank 1
        proc.wait(timeout=900)
        err = output.stderr()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "restart 1 of 1 after: rank 1 died (killed by signal SIGKILL)" in err, err[-3000:]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "done" and len(info["restarts"]) == 1
    if mid_epoch:
        assert info["restarts"][0]["resumed_at_batch"], info["restarts"]  # inside an epoch
    assert unmeasured_records(out) == unmeasured_records(whole)
