"""Shared fixtures.  Graphs are tiny so that multi-rank tests run in seconds on 2 cores."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

os.environ.setdefault("DGLBACKEND", "pytorch")
os.environ.setdefault("OUTDATED_IGNORE", "1")


def random_store_arrays(num_nodes: int = 200, avg_degree: int = 6, feature_dim: int = 8,
                        num_classes: int = 4, seed: int = 0) -> dict:
    """A small undirected random graph with no self-loops or duplicate edges."""
    rng = np.random.default_rng(seed)
    m = num_nodes * avg_degree // 2
    src = rng.integers(0, num_nodes, m)
    dst = rng.integers(0, num_nodes, m)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    u = np.concatenate([src, dst])
    v = np.concatenate([dst, src])
    key = np.unique(v * num_nodes + u)
    v, u = key // num_nodes, key % num_nodes
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.add.at(indptr, v + 1, 1)
    indptr = np.cumsum(indptr)
    perm = rng.permutation(num_nodes)
    n_train, n_val = num_nodes // 2, num_nodes // 4
    return dict(
        indptr=indptr,
        indices=u.astype(np.int64),
        features=rng.standard_normal((num_nodes, feature_dim)).astype(np.float32),
        labels=rng.integers(0, num_classes, num_nodes),
        train_idx=np.sort(perm[:n_train]),
        val_idx=np.sort(perm[n_train : n_train + n_val]),
        test_idx=np.sort(perm[n_train + n_val :]),
        num_classes=num_classes,
    )


@pytest.fixture
def one_thread():
    """One intra-op thread: on a shared 2-core machine OpenMP spinning costs far more than it gains."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_store(tmp_path):
    """A 200-node random graph store (no class signal; for mechanics, not accuracy)."""
    from gnnflow.data.store import write_store

    arrays = random_store_arrays()
    return write_store(tmp_path / "tiny", name="tiny", source="test", directed=False, **arrays)


def synthetic_graph_book(tmp, num_nodes: int, method: str, num_parts: int) -> tuple[str, str]:
    """(graph store path, partition book path): a synthetic graph under ``tmp`` partitioned with ``method``."""
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph

    store = prepare_synthetic(tmp / "graph", num_nodes=num_nodes)
    book = partition_graph(store.path, method, num_parts, tmp / "book", seed=0)
    return str(store.path), str(book.path)


def unmeasured_records(run_dir) -> list[dict]:
    """A run directory's records by (epoch, rank), without the columns measured on the machine
    (``is_measurement``): what two runs of the same config and seed must agree on."""
    import json
    from pathlib import Path

    from gnnflow.results.schema import is_measurement

    lines = (Path(run_dir) / "records.jsonl").read_text().splitlines()
    rows = [{k: v for k, v in json.loads(line).items() if not is_measurement(k)} for line in lines if line.strip()]
    return sorted(rows, key=lambda r: (r["epoch"], r["rank"]))


def same_value(a, b) -> bool:
    """Equality of two record values with NaN equal to NaN: a column that is NaN by design (a
    hit rate with nothing searched, an accuracy of a non-evaluation epoch) matches itself."""
    import math

    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def assert_records_match(got: list[dict], ref: list[dict], loss_rtol: float = 0.0, acc_atol: float = 0.0,
                         ignore: tuple[str, ...] = ()) -> None:
    """Two runs' records (rows in the same order) agree column by column: accuracies within
    ``acc_atol``, losses within ``loss_rtol`` relative, everything else equal; NaN equals NaN
    everywhere (:func:`same_value`).  ``ignore``: columns left out (e.g. ``device``)."""
    import math

    assert len(got) == len(ref), (len(got), len(ref))
    for a, b in zip(got, ref, strict=True):
        assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
        for k, v in b.items():
            w = a[k]
            if k in ignore or same_value(w, v):
                continue
            both = isinstance(v, float) and isinstance(w, float) and not (math.isnan(v) or math.isnan(w))
            if both and k.endswith("_acc"):
                assert abs(w - v) <= acc_atol, (k, w, v)
            elif both and "loss" in k:
                assert math.isclose(w, v, rel_tol=loss_rtol), (k, w, v)
            else:
                raise AssertionError((k, w, v))


def results_table(runs: list[dict], epochs: int = 2, ranks: int = 2):
    """A hand-made results table (one row per run × epoch × rank) whose per-run figures are
    exactly the given values once ranks are collapsed (times: slowest rank, counters: summed).

    Each run is ``{"run_id", "strategy", ...settings, "metrics": {column: value or per-epoch list}}``;
    settings may be ``workers``, ``partition`` (cfg_partition), ``device`` (cfg_device) and
    ``opt`` (cfg_opt_<name>).
    """
    import pandas as pd

    rows = []
    for run in runs:
        for epoch in range(epochs):
            for rank in range(ranks):
                row = {"run_id": run["run_id"], "strategy": run.get("strategy", "data"), "dataset": "synthetic",
                       "model": "sage", "workers": run.get("workers", ranks), "epoch": epoch, "rank": rank,
                       "seed": 0, "cfg_partition": run.get("partition"), "cfg_device": run.get("device", "cpu")}
                row.update({f"cfg_opt_{k}": v for k, v in run.get("opt", {}).items()})
                for col, value in run.get("metrics", {}).items():
                    v = value[epoch] if isinstance(value, list) else value
                    summed = not (col.startswith(("time_", "x_")) or col in ("loss", "train_acc", "val_acc", "test_acc"))
                    row[col] = v / ranks if summed else v
                rows.append(row)
    return pd.DataFrame(rows)


RANK_NAME = re.compile(r"gnnflow-rank(\d+)$")


def rank_processes(launcher_pid: int) -> list:
    """The ranks a local launcher started (each names itself ``gnnflow-rank<N>``), in rank
    order; the ranks fork from the launcher's fork server, so they are its grandchildren."""
    import psutil

    found = []
    for p in psutil.Process(launcher_pid).children(recursive=True):
        try:
            m = RANK_NAME.match(p.name())
        except psutil.NoSuchProcess:
            continue
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found, key=lambda t: t[0])]


def forkserver_pid() -> int | None:
    """This interpreter's multiprocessing fork server (it starts ranks until the interpreter exits)."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def launcher_shm(launcher_pid: int) -> list:
    """The ``/dev/shm`` entries of a launcher's runs, sorted (each is named after its run's tag,
    ``gnnflow-<launcher pid>-...``: other runs on the host hold theirs beside)."""
    from pathlib import Path

    from gnnflow.runtime.processes import SHM_ROOT

    return sorted(Path(SHM_ROOT).glob(f"gnnflow-{launcher_pid}-*"))


def running_checkpoint(run_dir) -> dict | None:
    """A running run's newest checkpoint, or None while there is none or it cannot be read now
    (``last.pt`` there but not its digest yet, and no good ``prev.pt`` beside it, or a file
    replaced between two looks)."""
    from gnnflow.errors import StoreError
    from gnnflow.strategies.checkpoint import load_checkpoint

    try:
        return load_checkpoint(run_dir)
    except (StoreError, OSError):
        return None


def own_processes() -> list:
    """This interpreter's live descendants but multiprocessing's resource tracker and fork
    server (they serve this interpreter until it exits)."""
    import psutil

    server = forkserver_pid()
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE
            and "multiprocessing.resource_tracker" not in " ".join(p.cmdline()) and p.pid != server]


@pytest.fixture
def no_leftovers():
    """``check(runs)``: wait (up to 30 s) until no process started by this test is alive and
    ``/dev/shm`` holds no entry of the named DistDGL runs; fail naming what is left."""
    import time

    from gnnflow.strategies.distdgl_janitor import shm_entries

    def check(runs: list[str], timeout: float = 30.0) -> None:
        assert runs and all(runs), f"no DistDGL run tokens to check: {runs!r}"
        deadline = time.monotonic() + timeout
        while True:
            procs = own_processes()
            shm = [p.name for run in runs for p in shm_entries(run)]
            if not procs and not shm:
                return
            if time.monotonic() > deadline:
                left = [" ".join(p.cmdline())[:100] for p in procs]
                raise AssertionError(f"left behind: processes {left}, /dev/shm {shm[:10]}")
            time.sleep(0.5)

    return check


# ------------------------------------------------------------------------------ tests measuring peaks
# `make test` runs the suite in two pytest-xdist workers.  A test marked ``quiet`` measures a
# process's peak memory, which depends on what else runs: a pipeline holds its most batches only
# when its sampler gets ahead of training.  Its call (the test function; its fixtures, e.g. a
# graph it generates, are made beside other tests) runs alone: it takes this lock exclusively
# (after the other worker's current test ends), every test takes it shared for its whole run.
# The turnstile keeps new shared holders out while an exclusive one waits.  Without xdist there
# is one worker, no lock.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield
        return
    folder = item.config._tmp_path_factory.getbasetemp().parent  # shared by the run's workers
    with open(folder / f"quiet-{run}.turn", "a") as turn, open(folder / f"quiet-{run}.lock", "a") as lock:
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_SH)
        fcntl.flock(turn, fcntl.LOCK_UN)
        item.stash[_QUIET_FILES] = (turn, lock)
        try:
            yield
        finally:
            del item.stash[_QUIET_FILES]
            fcntl.flock(lock, fcntl.LOCK_UN)


_QUIET_FILES = pytest.StashKey[tuple]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A ``quiet`` test's call: its shared hold let go first (two quiet tests, each holding it
    while waiting for the turnstile the other holds, would wait forever), then the turnstile and
    the lock exclusively; shared again for its teardown."""
    import fcntl

    files = item.stash.get(_QUIET_FILES, None)
    if files is None or item.get_closest_marker("quiet") is None:
        yield
        return
    turn, lock = files
    fcntl.flock(lock, fcntl.LOCK_UN)
    fcntl.flock(turn, fcntl.LOCK_EX)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_SH)  # a conversion: held shared from here
        fcntl.flock(turn, fcntl.LOCK_UN)


def pytest_collection_modifyitems(config, items):
    """Files with long tests first (those with a ``slurm`` test, then those with a ``slow`` one),
    each file's tests in their order: the workers hand out files in this order (`make test` passes
    ``--no-loadscope-reorder``; by default pytest-xdist re-sorts files by their number of tests), and
    a long file handed out last would keep one worker busy while the other has nothing left."""
    rank: dict = {}
    for item in items:
        weight = 0 if item.get_closest_marker("slurm") else 1 if item.get_closest_marker("slow") else 2
        rank[item.path] = min(rank.get(item.path, 2), weight)
    items.sort(key=lambda item: rank[item.path])
