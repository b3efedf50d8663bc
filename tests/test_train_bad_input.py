"""Issue 17: a user's mistake in training input is one line naming the key or file, exit 1,
no partial output, and ``run.json`` says ``failed`` where a run directory exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import synthetic_graph_book


def _train(*args: str, timeout: float = 300, verbose: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnflow.cli", *(["-v"] if verbose else []), "train", *args],
                          capture_output=True, text=True, timeout=timeout)


def _no_rank_started(proc: subprocess.CompletedProcess) -> None:
    """A verbose launcher logs ``started N ranks (pids ...)`` once it started them (and every
    rank logs as it starts): none of that in its output."""
    assert "gnnflow.runtime" not in proc.stderr and "ranks (pids" not in proc.stderr, proc.stderr[-3000:]


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return synthetic_graph_book(tmp_path_factory.mktemp("badin"), 1024, "random", 2)


def test_config_value_of_the_wrong_type_names_the_key(graph_book, tmp_path):
    graph, _ = graph_book
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"graph: {graph}\nepochs: one\n")
    out = tmp_path / "run"
    line = _one_error_line(_train("--config", str(cfg), "--out", str(out)))
    assert "epochs: expected an integer, got 'one'" in line
    assert not out.exists()


def test_parts_not_workers_fails_before_any_rank_starts(graph_book, tmp_path):
    graph, book = graph_book
    out = tmp_path / "run"
    proc = _train("--strategy", "data", "--graph", graph, "--partition", book, "--workers", "4", "--out", str(out),
                  verbose=True)
    line = _one_error_line(proc)
    _no_rank_started(proc)
    assert f"{book}: 2 parts" in line and "needs 4" in line, line
    assert not out.exists()


def test_book_of_another_graph_is_refused_before_any_rank_starts(graph_book, tmp_path):
    from gnnflow.data.synthetic import prepare_synthetic

    _, book = graph_book
    other = prepare_synthetic(tmp_path / "other", num_nodes=1024, seed=5)  # same size, other edges
    out = tmp_path / "run"
    proc = _train("--strategy", "data", "--graph", str(other.path), "--partition", book, "--workers", "2",
                  "--out", str(out), verbose=True)
    line = _one_error_line(proc)
    _no_rank_started(proc)
    assert f"{book} was partitioned from" in line and str(other.path) in line, line
    assert not out.exists()


def test_more_ranks_than_cores_warns(graph_book, tmp_path):
    graph, book = graph_book
    cores = os.cpu_count() or 1
    proc = _train("--strategy", "data", "--graph", graph, "--partition", book, "--workers", str(cores + 1),
                  "--out", str(tmp_path / "run"))
    # the book has 2 parts, so the run is refused after the warning: nothing is spawned
    assert f"{cores + 1} ranks on {cores} cores" in proc.stderr, proc.stderr[-2000:]


def _mount_tmpfs(path: Path, options: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True, capture_output=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/mounts").exists(),
                                reason="mounting a read-only or tiny file system needs root")


@needs_root
def test_read_only_output_directory_is_one_line(graph_book, tmp_path):
    graph, _ = graph_book
    ro = tmp_path / "ro"
    _mount_tmpfs(ro, "ro,size=1m")
    try:
        line = _one_error_line(_train("--graph", graph, "--epochs", "1", "--out", str(ro / "run")))
        assert str(ro / "run") in line and "Read-only file system" in line, line
    finally:
        subprocess.run(["umount", str(ro)], check=False)


@needs_root
def test_full_output_directory_marks_the_run_failed(graph_book, tmp_path):
    graph, _ = graph_book
    small = tmp_path / "small"
    _mount_tmpfs(small, "size=256k")
    try:
        out = small / "run"
        # the checkpoint (weights + Adam moments of a 512-wide model) does not fit in 256 KiB
        line = _one_error_line(_train("--graph", graph, "--epochs", "2", "--hidden", "512", "--out", str(out)))
        assert "No space left on device" in line, line
        info = json.loads((out / "run.json").read_text())
        assert info["status"] == "failed" and "No space left on device" in info["error"]
        assert not list(out.glob("**/.*.tmp-*")), "temporary files left behind"
    finally:
        subprocess.run(["umount", str(small)], check=False)
