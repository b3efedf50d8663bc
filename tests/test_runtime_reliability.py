"""Checkpoints that cannot lie, one run per directory, nothing left behind, one line per bad input.

* a checkpoint whose bytes were damaged is refused, or the one before it is used, saying so;
* a loss that is not finite stops the run, on every rank, in one line (epoch, iteration, rank);
* a second run on a run directory fails at once; the first's records stay as they were;
* shared memory of a run whose launcher was killed is removed by the next run;
* a full disk, a graph without edges, labels out of range, a truncated shard: one line each,
  naming what is wrong, before any rank trains.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import launcher_shm, synthetic_graph_book, unmeasured_records

from gnnflow.errors import GnnflowError, StoreError
from gnnflow.strategies.checkpoint import (
    CKPT,
    PREV_CKPT,
    digest_path,
    load_checkpoint,
    load_verified,
    save_verified,
)


def _train(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnflow.cli", "train", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _flip(path: Path, at: int = 4096, n: int = 64) -> None:
    """Flip ``n`` bytes of ``path`` from offset ``at`` (inside a tensor of a checkpoint)."""
    data = bytearray(path.read_bytes())
    at = min(at, len(data) - n)
    for i in range(at, at + n):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return synthetic_graph_book(tmp_path_factory.mktemp("reliab"), 4096, "metis", 2)


# ------------------------------------------------------------------------------------ checkpoints
def test_a_damaged_file_is_refused_and_the_previous_checkpoint_used(tmp_path, caplog):
    import torch

    ckpt = {"epoch": 0, "world_size": 1, "ranks": [{"w": torch.arange(4096.0)}], "rng": [{}]}
    save_verified(ckpt, tmp_path / CKPT, keep_previous=tmp_path / PREV_CKPT)
    save_verified({**ckpt, "epoch": 1}, tmp_path / CKPT, keep_previous=tmp_path / PREV_CKPT)
    assert load_checkpoint(tmp_path)["epoch"] == 1 and load_verified(tmp_path / PREV_CKPT)["epoch"] == 0
    _flip(tmp_path / CKPT)
    with pytest.raises(StoreError, match="do not match its digest"):
        load_verified(tmp_path / CKPT)
    assert load_checkpoint(tmp_path)["epoch"] == 0  # the one before, said in the log
    assert any("resuming from" in r.getMessage() and "prev.pt" in r.getMessage() for r in caplog.records)
    digest_path(tmp_path / PREV_CKPT).unlink()  # the write of prev.pt's digest never finished
    with pytest.raises(StoreError) as err:
        load_checkpoint(tmp_path)
    assert "last.pt: cannot be trusted" in str(err.value) and "\n" not in str(err.value)


class _Killed(BaseException):
    """The process died here (a BaseException, as a kill is: nothing catches it)."""


def test_a_kill_at_any_step_of_a_checkpoint_write_leaves_a_good_one(tmp_path, monkeypatch):
    """A SIGKILL between any two file operations of ``save_verified`` (renames, links, unlinks)
    leaves ``last.pt`` or ``prev.pt`` whole: resuming loads the new checkpoint or the one before,
    never raises.  (Moving last.pt to prev.pt and then its digest left, between the two, prev.pt
    with the digest of the checkpoint before it: both refused.)"""
    import torch

    def ckpt(epoch: int) -> dict:
        return {"epoch": epoch, "world_size": 1, "ranks": [{"w": torch.full((512,), float(epoch))}], "rng": [{}]}

    steps = 0
    for die_at in range(1, 100):
        run = tmp_path / f"k{die_at}"
        for epoch in (0, 1):
            save_verified(ckpt(epoch), run / CKPT, keep_previous=run / PREV_CKPT)
        count = [0]
        with monkeypatch.context() as m:
            for name in ("replace", "link", "unlink"):
                real = getattr(os, name)

                def step(*a, _real=real, _count=count, _die_at=die_at, **kw):
                    _count[0] += 1
                    if _count[0] == _die_at:
                        raise _Killed
                    return _real(*a, **kw)

                m.setattr(os, name, step)
            try:
                save_verified(ckpt(2), run / CKPT, keep_previous=run / PREV_CKPT)
                finished = True
            except _Killed:
                finished = False
        got = load_checkpoint(run)
        assert got["epoch"] in (1, 2) and torch.equal(got["ranks"][0]["w"], ckpt(got["epoch"])["ranks"][0]["w"])
        if finished:
            assert got["epoch"] == 2 and load_verified(run / PREV_CKPT)["epoch"] == 1
            steps = count[0]
            break
    assert steps >= 5  # every rename of the rotation and of the write was a place to die


def test_a_bit_flipped_checkpoint_resumes_from_the_one_before(tiny_store, tmp_path):
    """4 KB-sized damage inside last.pt: ``--resume`` says so and resumes from prev.pt; the records
    then equal an uninterrupted run's (the damaged epoch is trained again)."""
    common = ["--graph", str(tiny_store.path), "--hidden", "8", "--batch-size", "32", "--fanouts", "3,3",
              "--seed", "1", "--run-id", "r"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert _train(*common, "--epochs", "3", "--out", str(whole)).returncode == 0
    first = _train(*common, "--epochs", "3", "--out", str(cut), "--opt", "stop_after_epoch=1")
    assert first.returncode == 0, first.stderr[-2000:]
    _flip(cut / CKPT)
    resumed = _train(*common, "--epochs", "3", "--out", str(cut), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "last.pt: its bytes do not match its digest" in resumed.stderr
    assert "resuming from" in resumed.stderr and "prev.pt (epoch 0) instead" in resumed.stderr
    assert unmeasured_records(cut) == unmeasured_records(whole)


def test_a_loss_that_is_not_finite_stops_the_run_in_one_line(graph_book, tmp_path):
    graph, book = graph_book
    out = tmp_path / "run"
    proc = _train("--strategy", "data", "--graph", graph, "--partition", book, "--workers", "2", "--epochs", "3",
                  "--batch-size", "128", "--lr", "1e30", "--dropout", "0", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "NotFiniteLoss: the training loss is" in last and " at epoch " in last and ", iteration " in last
    assert " on rank " in last, last
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and "training loss is" in info["error"]


# ------------------------------------------------------------------------------------ the lock
def _records_lines(out: Path) -> list[str]:
    f = out / "records.jsonl"
    return f.read_text().splitlines() if f.exists() else []


def test_a_second_run_on_a_run_directory_fails_at_once(graph_book, tmp_path):
    graph, book = graph_book
    out = tmp_path / "run"
    args = ["--strategy", "data", "--graph", graph, "--partition", book, "--workers", "2", "--epochs", "500",
            "--batch-size", "128", "--eval-every", "1000", "--out", str(out)]
    first = subprocess.Popen([sys.executable, "-m", "gnnflow.cli", "train", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while len(_records_lines(out)) < 2 and time.monotonic() < deadline:  # epoch 0 is written
            time.sleep(0.2)
        before = _records_lines(out)
        assert before, "the first run did not train"
        t0 = time.monotonic()
        second = _train(*args)
        took = time.monotonic() - t0
        assert second.returncode == 1
        last = second.stderr.strip().splitlines()[-1]
        assert f"{out}: in use by another run (host " in last and f"pid {first.pid}" in last, last
        assert _records_lines(out)[: len(before)] == before  # the first run's records untouched
        assert first.poll() is None  # ... and it trains on
        print(f"second run refused after {took:.1f} s (interpreter start and imports included)")
    finally:
        first.kill()
        first.communicate()


def test_a_lock_left_by_a_dead_run_is_reported_and_taken_over(tiny_store, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text("host elsewhere, pid 4242, since 2026-01-01T00:00:00\n")  # its holder died
    proc = _train("--graph", str(tiny_store.path), "--epochs", "1", "--fanouts", "3,3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "taken over from a run that ended without releasing it (host elsewhere, pid 4242" in proc.stderr
    assert (out / ".lock").read_text() == ""  # released in order at the end


# ------------------------------------------------------------------------------------ shared memory
def _dead_pid() -> int:
    """The pid of a process that has ended (a launcher killed outright, for the sweep)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def test_the_next_run_sweeps_shared_memory_of_a_dead_launcher(tmp_path):
    """The sweep's rule, in a directory of its own: in ``/dev/shm`` another run starting
    meanwhile (another test's, a user's) sweeps the dead launcher's entry first.  That each run
    sweeps ``/dev/shm`` is checked by the killed swap launcher's test below."""
    from gnnflow.runtime.processes import sweep_stale_shm

    dead = _dead_pid()
    stale = tmp_path / f"gnnflow-{dead}-0badcafe-swap-test"
    live = tmp_path / f"gnnflow-{os.getpid()}-0badcafe-swap-test"
    other = tmp_path / "gnnflow-notapid-swap-test"
    for d in (stale, live, other):
        d.mkdir()
        (d / "rows").write_bytes(b"x" * 64)
    (tmp_path / f"gnnflow-{dead}-0badcafe-ring").write_bytes(b"x" * 64)  # a file, not a folder
    removed = sweep_stale_shm(str(tmp_path))
    assert sorted(removed) == sorted([str(stale), str(tmp_path / f"gnnflow-{dead}-0badcafe-ring")])
    assert not stale.exists() and live.exists() and other.exists()  # its launcher (this process) is alive


def test_a_run_names_what_it_swept(tmp_path, monkeypatch, caplog):
    """Every local run sweeps first (``launch._sweep``) and names what it removed."""
    from gnnflow.runtime import launch
    from gnnflow.runtime.processes import sweep_stale_shm

    dead = _dead_pid()
    (tmp_path / f"gnnflow-{dead}-0badcafe-swap").mkdir()
    monkeypatch.setattr(launch, "sweep_stale_shm", lambda: sweep_stale_shm(str(tmp_path)))
    with caplog.at_level("WARNING", logger="gnnflow"):
        launch._sweep()
    assert f"removed 1 shared-memory entry left by runs whose launcher is gone: {tmp_path}/gnnflow-{dead}-" in caplog.text
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_sigkill_of_a_swap_launcher_leaves_nothing_after_the_next_run(graph_book, tmp_path):
    graph, book = graph_book
    out = tmp_path / "swap"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "gnnflow.cli", "train", "--strategy", "dgcl", "--model", "gcn", "--opt",
         "planner=swap", "--graph", graph, "--partition", book, "--workers", "2", "--epochs", "2000",
         "--eval-every", "1000", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = launcher.pid
    try:
        deadline = time.monotonic() + 300
        while not (launcher_shm(pid) and _records_lines(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert launcher_shm(pid), "the swap planner made no shared memory"
        ranks = psutil.Process(pid).children(recursive=True)
        launcher.send_signal(signal.SIGKILL)
        launcher.communicate()
        psutil.wait_procs(ranks, timeout=30)  # they die with their parent
    finally:
        if launcher.poll() is None:
            launcher.kill()
    # the entries stay until a next run on this host sweeps them: this one, or another run that
    # started meanwhile (another test's: which one is a race, so only the end state is checked)
    nxt = _train("--strategy", "data", "--graph", graph, "--partition", book, "--workers", "2", "--epochs", "1",
                 "--out", str(tmp_path / "next"))
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    assert not launcher_shm(pid)


# ------------------------------------------------------------------------------------ bad inputs
def test_a_graph_without_edges_is_refused_in_one_line(tmp_path):
    from conftest import random_store_arrays

    from gnnflow.data.store import write_store

    arrays = random_store_arrays()
    n = arrays["indptr"].shape[0] - 1
    arrays.update(indptr=np.zeros(n + 1, dtype=np.int64), indices=np.zeros(0, dtype=np.int64))
    with pytest.raises(GnnflowError) as err:
        write_store(tmp_path / "g", name="g", source="test", directed=False, **arrays)
    assert "no edge" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "g").exists()


def _recompute_checksums(directory: Path, files: list[str], book: bool = False) -> None:
    """What an attacker (or a careless script) does after editing arrays: record their new sums."""
    import dataclasses

    from gnnflow.data.meta import read_store_meta, store_fingerprint, write_store_meta
    from gnnflow.data.store import sha256_file
    from gnnflow.partition.meta import read_book_meta, write_book_meta

    meta = read_book_meta(directory) if book else read_store_meta(directory)
    sums = {**meta.checksums, **{name: sha256_file(directory / name) for name in files}}
    meta = dataclasses.replace(meta, checksums=sums)
    if book:
        write_book_meta(directory, meta)
    else:
        write_store_meta(directory, dataclasses.replace(meta, fingerprint=store_fingerprint(meta)))


def test_labels_out_of_range_are_one_line_before_training(tmp_path):
    from gnnflow.data.synthetic import prepare_synthetic

    store = prepare_synthetic(tmp_path / "g", num_nodes=2000)
    labels = np.load(store.path / "labels.npy")
    victim = int(np.load(store.path / "train_idx.npy")[3])
    labels[victim] = store.num_classes + 5
    np.save(store.path / "labels.npy", labels)
    _recompute_checksums(store.path, ["labels.npy"])
    proc = _train("--graph", str(store.path), "--epochs", "1", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert f"train vertex {victim} has label {store.num_classes + 5}, outside [0, {store.num_classes})" in last
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "records.jsonl").exists()


def test_labels_out_of_range_in_a_shard_name_the_part(graph_book, tmp_path):
    graph, book = graph_book
    book_copy = tmp_path / "book"
    shutil.copytree(book, book_copy)
    meta = json.loads((book_copy / "meta.json").read_text())
    if not Path(meta["graph"]).is_absolute():  # the book names its graph relative to itself
        meta["graph"] = str((Path(book) / meta["graph"]).resolve())
        (book_copy / "meta.json").write_text(json.dumps(meta))
    labels = np.load(book_copy / "part1" / "labels.npy")
    labels[0] = -7
    inner0 = int(np.load(book_copy / "part1" / "inner_ids.npy")[0])
    train = set(np.load(book_copy / "part1" / "train_idx.npy").tolist())
    np.save(book_copy / "part1" / "labels.npy", labels)
    _recompute_checksums(book_copy, ["part1/labels.npy"], book=True)
    proc = _train("--strategy", "data", "--graph", graph, "--partition", str(book_copy), "--workers", "2",
                  "--epochs", "1", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    split = "train" if inner0 in train else ("val" if inner0 in set(np.load(book_copy / "part1" / "val_idx.npy")
                                                                     .tolist()) else "test")
    assert f"part1/labels.npy: {split} vertex {inner0} has label -7" in last, last


def test_a_truncated_shard_is_found_before_any_rank_starts(graph_book, tmp_path):
    graph, book = graph_book
    book_copy = tmp_path / "book"
    shutil.copytree(book, book_copy)
    meta = json.loads((book_copy / "meta.json").read_text())
    if not Path(meta["graph"]).is_absolute():
        meta["graph"] = str((Path(book) / meta["graph"]).resolve())
        (book_copy / "meta.json").write_text(json.dumps(meta))
    victim = book_copy / "part1" / "indices.npy"
    size = victim.stat().st_size
    with open(victim, "r+b") as fh:
        fh.truncate(size - 100)
    t0 = time.monotonic()
    proc = _train("--strategy", "data", "--graph", graph, "--partition", str(book_copy), "--workers", "2",
                  "--epochs", "1", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert f"{victim}: {size - 100} bytes but its header" in last and "truncated" in last, last
    assert "started 2 ranks" not in proc.stderr  # refused by the launcher, before any rank
    print(f"truncated shard refused after {time.monotonic() - t0:.1f} s")


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_is_one_line_naming_the_output(small_disk, tiny_store):
    out = small_disk / "graph"
    proc = subprocess.run([sys.executable, "-m", "gnnflow.cli", "prepare", "synthetic", "--nodes", "200000",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert f"{out}: cannot be written: the disk is full" in last, last
    assert list(small_disk.iterdir()) == []  # nothing left behind
    # training: the run directory on the full disk (filled up first)
    (small_disk / "filler").write_bytes(b"\0" * (2 * 2**20 - 64 * 1024))
    run = small_disk / "run"
    proc = _train("--graph", str(tiny_store.path), "--epochs", "1", "--fanouts", "3,3", "--out", str(run))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert f"{run}" in last and "the disk is full" in last, last
