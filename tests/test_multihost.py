"""Issue 20: runs across hosts, on simulated hosts (tests/simhosts.py) of 2 ranks each.

Each host is a network namespace with its own address, hostname, /dev/shm and
data directory; the directory holding the whole graph and partition book and
the other host's directory are hidden from it.  A host gets its parts with
``gnnflow stage`` and runs ``gnnflow train``/``verify`` with ``--nnodes 2
--node-rank K --master simhost0:PORT`` (gnnflow's own launcher on each host).

* verify for data, split, fullbatch and dgcl passes across hosts (the tolerances
  of one host: verify's own);
* the records of a 2-host x 2-rank run equal those of a 1-host x 4-rank run on
  the same book, up to measured columns, each host holding only its staged parts;
* while the 2-host run trains, every listener in each host's namespace is on
  that host's test address (none on loopback-only ports of another run, none on
  all interfaces);
* SIGKILL of a rank on the second host fails the run on both hosts within 60 s,
  naming the rank and its host, and leaves no process on either host.

Skipped without root or network namespaces.  Commands as in docs/cluster.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RANK_NAME, synthetic_graph_book, unmeasured_records
from simhosts import SimulatedHosts, available

_WHY = available()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")

NODES, LOCAL = 2, 2
WORKERS = NODES * LOCAL
EPOCHS = 2

STRATEGY_ARGS = {
    "data": [],
    "split": [],
    "p3": [],
    "hec": [],
    "fullbatch": ["--model", "gcn"],
    "dgcl": ["--model", "gcn"],
    "distdgl": [],
}
#: strategies that read the whole graph store at training time (staged with --whole-graph)
WHOLE_GRAPH = {"p3"}


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.graph, self.book = synthetic_graph_book(root / "shared", 2048, "metis", WORKERS)
        self.hosts = SimulatedHosts(NODES, root / "hosts", hidden=[root / "shared"])
        self.port = 29400
        self.staged: dict[tuple[int, bool], Path] = {}
        self.references: dict[tuple[str, ...], Path] = {}

    def data(self, k: int, whole_graph: bool = False, dgl: bool = False) -> Path:
        """Host ``k``'s staged copy of its parts (made on first use, by `gnnflow stage`; ``dgl``:
        with the DistDGL peer's layout of its parts, ``--dgl plain``)."""
        key = (k, whole_graph, dgl)
        if key not in self.staged:
            out = self.hosts.dirs[k] / ("whole" if whole_graph else "data-dgl" if dgl else "data")
            parts = ",".join(str(k * LOCAL + i) for i in range(LOCAL))
            cmd = [sys.executable, "-m", "gnnflow.cli", "stage", self.book, "--part", parts, "--to", str(out)]
            cmd += (["--whole-graph"] if whole_graph else []) + (["--dgl", "plain"] if dgl else [])
            done = subprocess.run(cmd, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            self.staged[key] = out
        return self.staged[key]

    def start(self, make_args, env: dict[str, str] | None = None) -> list[subprocess.Popen]:
        """``gnnflow <make_args(k)> --nnodes 2 --node-rank k --master simhost0:PORT`` on each host."""
        self.port += 1
        procs = []
        for k in range(NODES):
            tmp = self.hosts.dirs[k] / "tmp"
            tmp.mkdir(exist_ok=True)
            cmd = [sys.executable, "-m", "gnnflow.cli", *make_args(k), "--nnodes", str(NODES), "--node-rank", str(k),
                   "--master", f"{self.hosts.names[0]}:{self.port}"]
            full_env = {**os.environ, "TMPDIR": str(tmp), **(env or {})}
            procs.append(self.hosts.popen(k, cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        return procs

    def one_host(self, strategy: str, *extra: str) -> Path:
        """The run directory of ``strategy`` on 1 host x 4 ranks from the whole book (made on
        first use; the reference of the 2-host runs)."""
        key = (strategy, *extra)
        if key not in self.references:
            out = self.root / "one-host" / "-".join(key).replace("=", "_") / "cmp"
            done = subprocess.run([sys.executable, "-m", "gnnflow.cli", *_train_args(self, strategy, out, None, *extra)],
                                  capture_output=True, text=True, timeout=400)
            assert done.returncode == 0, done.stderr[-3000:]
            self.references[key] = out
        return self.references[key]

    def close(self) -> None:
        self.hosts.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("hosts"))
    try:
        yield c
    finally:
        c.close()


def _finish(procs: list[subprocess.Popen], timeout_s: float) -> list[tuple[int, str, str]]:
    deadline = time.monotonic() + timeout_s
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            e += "\n[killed: timed out]"
        out.append((p.returncode, o, e))
    return out


def _train_args(cluster: Cluster, strategy: str, out: Path | None, k: int | None, *extra: str) -> list[str]:
    """``train`` arguments: on host ``k`` from its staged copy, or (k None) from the whole book."""
    if k is None:
        graph, book = cluster.graph, cluster.book
    else:
        d = cluster.data(k, whole_graph=strategy in WHOLE_GRAPH, dgl=strategy == "distdgl")
        graph, book = str(d / "graph"), str(d / "book")
    args = ["train", "--strategy", strategy, "--graph", graph, "--partition", book, "--workers", str(WORKERS),
            "--epochs", str(EPOCHS), "--batch-size", "256", "--seed", "0", "--run-id", "cmp",
            *STRATEGY_ARGS[strategy], *extra]
    return args + (["--out", str(out)] if out is not None else [])


# ------------------------------------------------------------------------------------------ verify
@pytest.mark.parametrize("strategy,extra", [
    ("data", []),
    ("split", []),
    ("fullbatch", []),
    # swap: through each host's shared memory, the hosts' leaders passing rows between them
    pytest.param("dgcl", ["--planner", "spst,p2p,swap,replication"], marks=pytest.mark.slow),
])
def test_verify_across_two_hosts(cluster, strategy, extra):
    t0 = time.monotonic()
    procs = cluster.start(lambda k: ["verify", "--strategy", strategy, "--workers", str(WORKERS), "--json", *extra])
    done = _finish(procs, 400)
    results = []
    for k, (rc, out, err) in enumerate(done):
        assert rc == 0, f"host {k}: rc {rc}\n{out[-1500:]}\n{err[-3000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["passed"] for r in results), results
    # both hosts compared the same gathered outputs with the same reference
    assert results[0]["max_abs_diff"] == results[1]["max_abs_diff"]
    print(f"verify {strategy} on 2 hosts x 2 ranks: {time.monotonic() - t0:.1f}s, "
          f"max abs diff {results[0]['max_abs_diff']}")


# ------------------------------------------------------------------------------------------ records
@pytest.mark.parametrize("strategy,extra", [
    ("dgcl", []),
    # the swap baseline: each host's own /dev/shm buffers, rows passed between the hosts' leaders
    ("dgcl", ["--opt", "planner=swap"]),
    pytest.param("data", [], marks=pytest.mark.slow),
    pytest.param("split", [], marks=pytest.mark.slow),
    pytest.param("p3", [], marks=pytest.mark.slow),
    pytest.param("hec", [], marks=pytest.mark.slow),
    pytest.param("fullbatch", [], marks=pytest.mark.slow),
])
def test_two_hosts_records_equal_one_host(cluster, strategy, extra, tmp_path):
    """2 hosts x 2 ranks from staged parts == 1 host x 4 ranks on the whole book (up to measured columns)."""
    t0 = time.monotonic()
    one = cluster.one_host(strategy, *extra)
    t1 = time.monotonic()
    run_dirs = [cluster.hosts.dirs[k] / f"runs-{strategy}{'-'.join(['', *extra])}" / "cmp" for k in range(NODES)]
    done = _finish(cluster.start(lambda k: _train_args(cluster, strategy, run_dirs[k], k, *extra)), 400)
    for k, (rc, _, err) in enumerate(done):
        assert rc == 0, f"host {k}: rc {rc}\n{err[-3000:]}"
    assert not (run_dirs[1] / "records.jsonl").exists(), "only host 0 (rank 0) writes the run directory"
    two = unmeasured_records(run_dirs[0])
    assert len(two) == EPOCHS * WORKERS
    assert two == unmeasured_records(one)
    print(f"{strategy}: 1 host x 4 ranks {t1 - t0:.1f}s, 2 hosts x 2 ranks {time.monotonic() - t1:.1f}s")


@pytest.mark.slow
def test_distdgl_peer_across_two_hosts(cluster, tmp_path):
    """The DistDGL peer on 2 hosts x 2 ranks, each host holding only its staged parts and their
    DGL layout: every rank serves its part on its host's address, the run ends rc 0, and its
    records equal a 1-host x 4-rank run's (the peer's seeded sampling requests, patch 3 of
    gnnflow.strategies.distdgl: DGL's draws depend on the request, not on where it is served)."""
    one = cluster.one_host("distdgl")
    run_dirs = [cluster.hosts.dirs[k] / "runs-distdgl" / "cmp" for k in range(NODES)]
    procs = cluster.start(lambda k: _train_args(cluster, "distdgl", run_dirs[k], k))
    listening: list[list[tuple[str, str]]] = [[], []]
    deadline = time.monotonic() + 300
    while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
        now = [_ss(cluster, k) for k in range(NODES)]
        if sum(map(len, now)) > sum(map(len, listening)):  # the most listeners seen (servers up)
            listening = now
        time.sleep(0.5)
    done = _finish(procs, 300)
    for k, (rc, _, err) in enumerate(done):
        assert rc == 0, f"host {k}: rc {rc}\n{err[-3000:]}"
    for k in range(NODES):  # DGL's servers (and gloo) listen on the host's test address only
        assert listening[k] and {a for a, _ in listening[k]} == {cluster.hosts.addresses[k]}, (k, listening[k])
    assert not any(_alive(cluster, k) for k in range(NODES))
    two, ref_rows = unmeasured_records(run_dirs[0]), unmeasured_records(one)
    assert len(two) == len(ref_rows) == EPOCHS * WORKERS
    assert two == ref_rows
    assert not (cluster.hosts.dirs[1] / "data-dgl" / "book.dgl" / "part0").exists()  # host 1: its parts only


def test_a_host_reads_only_its_staged_parts(cluster):
    """Host 1 sees neither the whole book nor host 0's parts: its copy refuses part 0 by name."""
    d = cluster.data(1)
    code = ("import sys; from gnnflow.partition.book import PartitionBook; b = PartitionBook(sys.argv[1]); "
            "b.load_part(2); b.load_part(0)")
    done = cluster.hosts.run(1, [sys.executable, "-c", code, str(d / "book")], capture_output=True, text=True)
    assert done.returncode != 0 and "part 0 is not staged here" in done.stderr, done.stderr[-1500:]
    seen = cluster.hosts.run(1, ["ls", "-A", str(cluster.root / "shared"), str(cluster.hosts.dirs[0])],
                             capture_output=True, text=True)
    # both directories are there but empty (a tmpfs covers each on this host)
    assert seen.returncode == 0 and sorted(seen.stdout.split()) == sorted(
        [f"{cluster.root / 'shared'}:", f"{cluster.hosts.dirs[0]}:"]), seen.stdout


# ------------------------------------------------------------------------------------------ listeners
def _ss(cluster: Cluster, k: int) -> list[tuple[str, str]]:
    """(local address, process) of every TCP listener in host ``k``'s namespace."""
    done = cluster.hosts.run(k, ["ss", "-Hltnp"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = []
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            out.append((fields[3].rpartition(":")[0], " ".join(fields[5:])))
    return out


def test_listeners_only_on_the_hosts_test_addresses(cluster, tmp_path):
    run_dir = cluster.hosts.dirs[0] / "runs-listen" / "cmp"
    procs = cluster.start(lambda k: _train_args(cluster, "data", run_dir if k == 0 else None, k, "--epochs", "400",
                                                "--eval-every", "1000", "--samplers", "process"))
    try:
        deadline = time.monotonic() + 300
        # an epoch's records: every rank trained (its gloo pairs and its samplers' store were up)
        while not (run_dir / "records.jsonl").exists():
            assert all(p.poll() is None for p in procs), _finish(procs, 5)
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.3)
        listening: list[set[tuple[str, str]]] = [set() for _ in range(NODES)]
        for _ in range(3):  # the union of a few looks, in case one falls between a listener's calls
            for k in range(NODES):
                listening[k] |= set(_ss(cluster, k))
            time.sleep(0.5)
        assert all(listening), listening
        for k in range(NODES):
            addresses = {a for a, _ in listening[k]}
            assert addresses == {cluster.hosts.addresses[k]}, (k, listening[k])
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        _finish(procs, 60)
    assert all(not _alive(cluster, k) for k in range(NODES))


def _alive(cluster: Cluster, k: int) -> list[int]:
    return [pid for pid in cluster.hosts.pids(k) if _running(pid)]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ------------------------------------------------------------------------------------------ faults
def test_sigkill_of_a_rank_on_the_second_host_fails_the_run(cluster, tmp_path):
    run_dir = cluster.hosts.dirs[0] / "runs-kill" / "cmp"
    procs = cluster.start(lambda k: _train_args(cluster, "data", run_dir if k == 0 else None, k, "--epochs", "400",
                                                "--eval-every", "1000"))
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "records.jsonl").exists():  # every rank trains
            assert all(p.poll() is None for p in procs), _finish(procs, 5)
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.3)
        victim = _rank_pid(cluster, 1, rank=3)
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        done = _finish(procs, 60)
        elapsed = time.monotonic() - t0
    finally:
        _finish(procs, 5)
    assert elapsed < 60, elapsed
    for k, (rc, _, err) in enumerate(done):
        assert rc == 1, (k, rc, err[-2000:])
        line = [x for x in err.splitlines() if "error:" in x]
        assert line and "rank 3 died (killed by signal SIGKILL) on host simhost1" in line[-1], (k, err[-2000:])
    left = time.monotonic() + 30
    while any(_alive(cluster, k) for k in range(NODES)) and time.monotonic() < left:
        time.sleep(0.3)
    assert not any(_alive(cluster, k) for k in range(NODES)), [_alive(cluster, k) for k in range(NODES)]
    print(f"SIGKILL of rank 3 on simhost1: both hosts failed within {elapsed:.1f}s")


def _rank_pid(cluster: Cluster, k: int, rank: int) -> int:
    """pid of global ``rank`` on host ``k`` (each rank names itself ``gnnflow-rank<N>``)."""
    import psutil

    ranks = {}
    for pid in cluster.hosts.pids(k):
        try:
            if m := RANK_NAME.match(psutil.Process(pid).name()):
                ranks[int(m.group(1))] = pid
        except psutil.NoSuchProcess:
            continue
    assert len(ranks) == LOCAL, ranks
    return ranks[rank]


def test_resume_across_hosts_needs_the_run_directory_on_rank_0s_host_only(cluster, tmp_path):
    """A 2-host run stopped after epoch 0's checkpoint and resumed with --resume equals an
    uninterrupted 1-host run: rank 0 reads the checkpoint and hands each rank its state, so the
    second host never has the run directory."""
    one = cluster.one_host("data")  # the same run as the data case of the records test
    run_dirs = [cluster.hosts.dirs[k] / "runs-resume" / "cmp" for k in range(NODES)]
    for extra in (["--opt", "stop_after_epoch=0"], ["--resume"]):
        done = _finish(cluster.start(lambda k, extra=extra: _train_args(cluster, "data", run_dirs[k], k, *extra)),
                       400)
        for k, (rc, _, err) in enumerate(done):
            assert rc == 0, f"host {k} ({extra}): rc {rc}\n{err[-3000:]}"
        assert not run_dirs[1].exists(), "only host 0 (rank 0) has the run directory"
    assert "resuming" in done[0][2]
    assert unmeasured_records(run_dirs[0]) == unmeasured_records(one)
