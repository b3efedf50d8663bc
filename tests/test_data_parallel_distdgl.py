"""Acceptance 4 of issue 5 (part): ``--strategy distdgl`` (DGL 1.1.3 DistDGL) runs here on our partitions."""

from __future__ import annotations

import time

import psutil
import pytest

#: an environment variable the test sets before its run: the ranks take the launcher's
#: environment and the servers their rank's, so it tells this test's servers from others'
MARK = "GNNFLOW_TEST_SERVERS_OF"


def _dgl_servers(mark: str) -> list[psutil.Process]:
    """The live DistDGL server processes whose environment holds ``MARK=mark`` (other runs on
    the host, another test's or a user's, may have servers of their own)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "gnnflow.strategies.distdgl" in cmd and cmd.endswith("server"):
            try:
                if p.environ().get(MARK) == mark:
                    out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return out


@pytest.mark.slow
def test_distdgl_trains_on_the_partition_book_and_cleans_up(tmp_path, monkeypatch):
    from gnnflow.config import TrainConfig
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.driver import run_training

    mark = str(tmp_path)
    monkeypatch.setenv(MARK, mark)
    store = prepare_synthetic(tmp_path / "graph", num_nodes=4096)
    book = partition_graph(store.path, "metis", 2, tmp_path / "book", seed=0)
    records = run_training(TrainConfig(graph=str(store.path), strategy="distdgl", partition=str(book.path),
                                       workers=2, epochs=4, batch_size=256, out=str(tmp_path / "run")))
    last = [r for r in records if r.epoch == 3]
    assert len(last) == 2
    assert all(r.counters["iterations"] > 0 and r.counters["sampled_edges"] > 0 for r in last)
    assert last[0].test_acc > 0.5  # learned something (8 classes)
    assert (book.path.parent / f"{book.path.name}.dgl" / "gnnflow.json").exists()
    time.sleep(2)
    assert not _dgl_servers(mark)


@pytest.mark.slow
def test_distdgl_sampler_processes_and_shared_memory_die_with_rank0(tmp_path, no_leftovers):
    """SIGKILL to rank 0 mid-training: its servers, both trainers' DGL sampler processes and the
    run's /dev/shm segments (which the killed servers cannot unlink) are all gone shortly after."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys

    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph

    store = prepare_synthetic(tmp_path / "graph", num_nodes=4096)
    book = partition_graph(store.path, "metis", 2, tmp_path / "book", seed=0)
    cli = subprocess.Popen([sys.executable, "-m", "gnnflow.cli", "train", "--strategy", "distdgl", "--graph",
                            str(store.path), "--partition", str(book.path), "--workers", "2", "--epochs", "1000",
                            "--batch-size", "128", "--opt", "num_samplers=1", "--out", str(tmp_path / "run")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        me = psutil.Process(cli.pid)
        deadline = time.monotonic() + 240
        run = rank0 = None
        while time.monotonic() < deadline and cli.poll() is None:
            procs = me.children(recursive=True)
            cmds = {p.pid: " ".join(p.cmdline()) for p in procs if p.is_running()}
            janitor = [c for c in cmds.values() if "distdgl_janitor" in c]
            samplers = [pid for pid, c in cmds.items() if "spawn_main" in c and
                        psutil.Process(pid).parent().pid != cli.pid]
            servers = [p for p in procs if cmds.get(p.pid, "").endswith("distdgl server")]
            if janitor and len(samplers) >= 2 and servers:  # a DGL sampler process per rank
                run, rank0 = janitor[0].split()[3], servers[0].parent()
                break
            time.sleep(1)
        assert run is not None, "DistDGL with sampler processes did not start"
        from gnnflow.strategies.distdgl_janitor import shm_entries

        deadline = time.monotonic() + 120
        while not shm_entries(run) and time.monotonic() < deadline:
            time.sleep(1)
        assert shm_entries(run), "the servers did not create their shared memory"
        tree = me.children(recursive=True)
        os.kill(rank0.pid, signal.SIGKILL)
        assert cli.wait(120) != 0
        gone, alive = psutil.wait_procs(tree, timeout=40)
        assert not alive, [" ".join(p.cmdline())[:80] for p in alive]
    finally:  # a failing check must not leave the run going
        for p in [me, *me.children(recursive=True)] if cli.poll() is None else []:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    no_leftovers([run])


@pytest.mark.slow
def test_distdgl_layerwise_evaluation_equals_the_whole_graph_forward(tmp_path):
    """The peer's evaluation (layer-wise: one-hop full-neighbourhood batches, hidden outputs in
    DistTensors, the last layer on the splits only) gives the losses and accuracies of DGLModel
    run on the whole graph with the same weights.  ``lr 0`` keeps the seeded initial weights, so
    the reference builds the same model here; 3 layers put two DistTensors in the chain."""
    import dgl
    import numpy as np
    import torch

    from gnnflow.config import TrainConfig
    from gnnflow.data.store import open_store
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.nn.peer import dgl_model_from_config
    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.common import seed_everything
    from gnnflow.strategies.driver import run_training
    from gnnflow.strategies.metrics import split_metrics, split_sums

    store = prepare_synthetic(tmp_path / "graph", num_nodes=3000)
    book = partition_graph(store.path, "metis", 2, tmp_path / "book", seed=0)
    cfg = TrainConfig(graph=str(store.path), strategy="distdgl", partition=str(book.path), workers=2,
                      epochs=1, batch_size=512, lr=0.0, num_layers=3, fanouts=[5, 5, 5], hidden=16,
                      out=str(tmp_path / "run"))
    records = run_training(cfg)
    got = [r for r in records if r.rank == 0][-1]

    s = open_store(store.path)
    n = s.num_nodes
    dst = np.repeat(np.arange(n), np.diff(s.indptr))
    g = dgl.graph((torch.from_numpy(np.array(s.indices, dtype=np.int64)), torch.from_numpy(dst)), num_nodes=n)
    seed_everything(cfg.seed)
    torch.manual_seed(cfg.seed)
    net = dgl_model_from_config(cfg, s.feature_dim, s.num_classes).eval()
    with torch.no_grad():
        logits = net([g] * 3, torch.from_numpy(np.array(s.features, dtype=np.float32)))
    labels = torch.from_numpy(np.array(s.labels, dtype=np.int64))
    want = split_metrics(split_sums({k: (logits[idx], labels[idx]) for k in ("train", "val", "test")
                                     for idx in [torch.from_numpy(np.array(s.split(k), dtype=np.int64))]}))
    for k in ("train", "val", "test"):
        assert getattr(got, f"{k}_loss") == pytest.approx(want[f"{k}_loss"], rel=1e-5), k
        assert getattr(got, f"{k}_acc") == pytest.approx(want[f"{k}_acc"], abs=1.5 / len(s.split(k))), k


@pytest.mark.slow
def test_distdgl_seeded_sampling_repeats_a_run(tmp_path):
    """Patch 3 (``seeded_sampling``, default on): DGL's draws are a function of each sampling
    request, not of the order requests reach a server, so two runs of the peer (2 trainers,
    each with its sampler process, both sampling from both servers) write the same records,
    losses and accuracies included.  Without the patch two such runs differ (docs/cluster.md)."""
    from gnnflow.config import TrainConfig
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.distdgl import request_seed
    from gnnflow.strategies.driver import run_training
    from tests.conftest import unmeasured_records

    store = prepare_synthetic(tmp_path / "graph", num_nodes=4096)
    book = partition_graph(store.path, "metis", 2, tmp_path / "book", seed=0)
    runs = []
    for k in range(2):
        run_training(TrainConfig(graph=str(store.path), strategy="distdgl", partition=str(book.path), workers=2,
                                 epochs=2, batch_size=256, fanouts=[5, 5], out=str(tmp_path / str(k) / "cmp")))
        runs.append(unmeasured_records(tmp_path / str(k) / "cmp"))
    assert len(runs[0]) == 4 and all(r["sampled_edges"] > 0 for r in runs[0])
    assert runs[0] == runs[1]
    # the seed is the request's, whoever serves it: same ids -> same seed, any change -> another
    assert request_seed(0, [3, 1, 2], 5) == request_seed(0, [3, 1, 2], 5)
    assert len({request_seed(0, [3, 1, 2], 5), request_seed(0, [1, 2, 3], 5), request_seed(1, [3, 1, 2], 5),
                request_seed(0, [3, 1, 2], 10)}) == 4


_TO_BLOCK_ORDER = """
import sys
import dgl, numpy as np, torch
from dgl.dataloading import neighbor_sampler
from gnnflow.strategies.distdgl import _patch_seeded_sampling
if sys.argv[1] == "patched":
    _patch_seeded_sampling(0)
rng = np.random.default_rng(0)
g = dgl.graph((torch.from_numpy(rng.integers(0, 200000, 400000)), torch.from_numpy(rng.integers(0, 20000, 400000))),
              num_nodes=200000)
seeds = torch.unique(g.edges()[1])
dgl.utils.set_num_threads(2)
orders = {neighbor_sampler.to_block(g, seeds).srcdata[dgl.NID].numpy().tobytes() for _ in range(6)}
print(len(orders), dgl.utils.get_num_threads())
"""


def test_distdgl_blocks_number_sources_the_same_way_every_time():
    """Patch 3 also builds the peer's blocks with one thread: with two, DGL's to_block numbers
    the source vertices in an order that changes from call to call (it was why srun-started runs
    of the peer differed from local ones: that order is the next hop's request)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, DGLBACKEND="pytorch")
    got = {}
    for mode in ("plain", "patched"):
        done = subprocess.run([sys.executable, "-c", _TO_BLOCK_ORDER, mode], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        got[mode] = done.stdout.split()
    assert got["patched"] == ["1", "2"]  # one order; the process's thread count is left as it was
    print(f"DGL's own to_block with 2 threads: {got['plain'][0]} orders in 6 calls")  # 6 when measured
