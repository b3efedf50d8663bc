"""Exact resume for every strategy: a run stopped after an epoch's checkpoint and resumed with
``--resume`` writes the records (timing columns and run id aside), weights and final checkpoint
of an uninterrupted run -- including HEC caches, AEP generators and sampler streams."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import running_checkpoint

from gnnflow.config import TrainConfig
from gnnflow.errors import GnnflowError
from gnnflow.results.schema import is_measurement
from gnnflow.strategies.checkpoint import load_checkpoint
from gnnflow.strategies.driver import run_training


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory) -> tuple[str, str]:
    """A 240-vertex random graph and a random 2-part book (most neighbours are remote)."""
    from conftest import random_store_arrays

    from gnnflow.data.store import write_store
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("resume")
    store = write_store(tmp / "graph", name="tiny", source="test", directed=False,
                        **random_store_arrays(num_nodes=240, seed=3))
    book = partition_graph(store.path, "random", 2, tmp / "book", seed=0)
    return str(store.path), str(book.path)


# per strategy: workers and options that make its training state matter across epochs
STRATEGIES: dict[str, tuple[int, dict[str, Any]]] = {
    "single": (1, {}),
    "data": (2, {}),
    "split": (2, {}),
    "p3": (2, {}),
    # small cache (evictions), long life-span (lines cross epochs), delayed pushes, nc cap (AEP sampling)
    "hec": (2, {"cs": 40, "ls": 6, "nc": 5, "d": 1, "trace": True}),
    "fullbatch": (2, {}),
    "dgcl": (2, {}),
}


def config(graph: str, book: str, strategy: str, out: Path, epochs: int = 2, **kw: Any) -> TrainConfig:
    workers, options = STRATEGIES[strategy]
    full = strategy in ("fullbatch", "dgcl")
    return TrainConfig(graph=graph, partition=book if workers > 1 else None, strategy=strategy,
                       model="gcn" if full else "sage", workers=workers, epochs=epochs, hidden=16,
                       fanouts=[-1, -1] if full else [4, 3], batch_size=16 * workers, dropout=0.3, seed=2, out=str(out),
                       options={**options, **kw.pop("options", {})}, **kw)


def is_timing(key: str) -> bool:
    """Columns measured on the machine (time, memory) or naming the run."""
    return is_measurement(key) or key == "run_id"


def records(run_dir: Path) -> str:
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    return json.dumps([{k: v for k, v in r.items() if not is_timing(k)} for r in rows], sort_keys=True)


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two checkpoint trees differ (tensors bit-exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [path]
    return [] if a == b else [path]


def assert_same_run(whole: Path, resumed: Path) -> None:
    assert records(resumed) == records(whole)
    a, b = load_checkpoint(whole), load_checkpoint(resumed)
    assert a["epoch"] == b["epoch"]
    assert not differences(a, b), differences(a, b)[:10]
    wa = torch.load(whole / "model.pt", weights_only=True)
    wb = torch.load(resumed / "model.pt", weights_only=True)
    assert not differences(wa, wb)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_stop_and_resume_equals_uninterrupted(graph_book, tmp_path, strategy):
    graph, book = graph_book
    whole, parted = tmp_path / "whole", tmp_path / "parted"
    run_training(config(graph, book, strategy, whole))
    run_training(config(graph, book, strategy, parted, options={"stop_after_epoch": 0}))
    assert [json.loads(r)["epoch"] for r in (parted / "records.jsonl").read_text().splitlines()] == \
        [0] * STRATEGIES[strategy][0]
    if strategy == "hec":
        for rank in range(2):
            # what makes the caches' state matter: lines are resident when the run stops
            state = load_checkpoint(parted)["ranks"][rank]["hec"]
            assert all(int(c["lines"].numel()) > 0 for c in state["caches"])
            # a crash after epoch 1's trace rows, before its checkpoint, leaves them behind
            trace = parted / f"hec_trace_rank{rank}.jsonl"
            row = json.loads(trace.read_text().splitlines()[-1])
            with open(trace, "a") as fh:
                fh.write(json.dumps({**row, "epoch": 1}) + "\n" + '{"epoch": 1, "itera')
    run_training(config(graph, book, strategy, parted, resume=True))
    assert_same_run(whole, parted)
    if strategy == "hec":
        for rank in range(2):  # the resumed trace has no row twice
            trace = (whole / f"hec_trace_rank{rank}.jsonl").read_text()
            assert (parted / f"hec_trace_rank{rank}.jsonl").read_text() == trace
    if strategy == "dgcl":  # plans are made again on resume; the checkpoint's digest refuses another
        with pytest.raises(GnnflowError, match="communication plan differs"):
            run_training(config(graph, book, strategy, parted, resume=True, options={"planner": "swap"}))


def _rank_pids(launcher: int) -> list[int]:
    from conftest import rank_processes

    return [p.pid for p in rank_processes(launcher)]


@pytest.mark.slow
def test_hec_sigkill_mid_epoch_then_resume_equals_uninterrupted(graph_book, tmp_path):
    """``gnnflow train --strategy hec`` in a subprocess: SIGKILL a rank during epoch 2 (epoch 1's
    records exist), then ``--resume``; records and weights equal an uninterrupted run's."""
    graph, book = graph_book
    epochs = 8
    cfg = config(graph, book, "hec", tmp_path / "unused", epochs=epochs)
    args = ["train", "--strategy", "hec", "--graph", graph, "--partition", book, "--workers", "2",
            "--model", "sage", "--hidden", "16", "--fanouts", "4,3", "--batch-size", "16",
            "--dropout", "0.3", "--seed", str(cfg.seed), "--epochs", str(epochs)]
    args += [a for k, v in STRATEGIES["hec"][1].items() for a in ("--opt", f"{k}={str(v).lower()}")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    proc = subprocess.Popen([sys.executable, "-m", "gnnflow.cli", *args, "--out", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not _checkpointed(killed, 1):  # epoch 1's records and checkpoint are written
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "epoch 1 did not finish"
            time.sleep(0.02)
        ranks = _rank_pids(proc.pid)
        assert len(ranks) == 2
        os.kill(ranks[1], signal.SIGKILL)  # during epoch 2 (the run has 8)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    stopped_at = load_checkpoint(killed)["epoch"]
    assert 1 <= stopped_at < epochs - 1
    subprocess.run([sys.executable, "-m", "gnnflow.cli", *args, "--out", str(killed), "--resume"],
                   env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "gnnflow.cli", *args, "--out", str(whole)], env=env, check=True,
                   capture_output=True)
    assert_same_run(whole, killed)
    print(f"rank 1 killed after epoch {stopped_at}'s checkpoint; resumed run equals the uninterrupted one")


def _checkpointed(run_dir: Path, epoch: int) -> bool:
    ckpt = running_checkpoint(run_dir)
    return ckpt is not None and ckpt["epoch"] >= epoch


def test_records_comparison_sees_a_changed_loss(tmp_path):
    """The comparison is not blind: one changed loss makes the records differ."""
    row = {"run_id": "a", "epoch": 0, "loss": 1.0, "time_epoch": 0.5, "x_fwd_s": 0.1, "x_hec_hit_rate_l0": 0.5}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "records.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "b" / "records.jsonl").write_text(json.dumps({**row, "run_id": "b", "time_epoch": 9.0}) + "\n")
    assert records(tmp_path / "a") == records(tmp_path / "b")
    (tmp_path / "b" / "records.jsonl").write_text(json.dumps({**row, "loss": float(np.nextafter(1.0, 2))}) + "\n")
    assert records(tmp_path / "a") != records(tmp_path / "b")



def test_resume_from_an_unreadable_checkpoint_fails_every_rank_alike(graph_book, tmp_path):
    """Rank 0 reads the checkpoint for every rank: when it cannot, each rank gets the error
    (none waits for its share), and the run fails with a line naming the file."""
    graph, book = graph_book
    run_dir = tmp_path / "run"
    run_training(config(graph, book, "data", run_dir, options={"stop_after_epoch": 0}))
    (run_dir / "ckpt" / "last.pt").write_bytes(b"not a checkpoint")
    t0 = time.monotonic()
    with pytest.raises(GnnflowError, match="last.pt: cannot be (read|trusted)"):
        run_training(config(graph, book, "data", run_dir, resume=True))
    assert time.monotonic() - t0 < 60
