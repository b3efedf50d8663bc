"""Issue 19.5 / acceptance 6: the memory preflight of ``gnnflow train``.

Before any rank starts, ``gnnflow train`` estimates every process's peak memory
from small metadata (gnnflow.strategies.memory), logs it with what is
available, and refuses with one line when the run will not fit; ``--force``
runs anyway.  The estimate is compared with the measured peak (VmHWM, the
records' ``mem_peak_rss_mib``) of a real multi-rank run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import synthetic_graph_book

from gnnflow.config import TrainConfig
from gnnflow.strategies.base import strategy_class
from gnnflow.strategies.memory import (
    AVAILABLE_ENV,
    BASE,
    MIB,
    GraphSizes,
    estimate,
    sampled_layers,
)

SAGE3 = ["--model", "sage", "--hidden", "256", "--layers", "3", "--fanouts", "15,10,5"]


#: variables a rank run in this process (in-process launches, DistDGL's client set-up) may have
#: left in the test process's environment; a user's shell has none of them
_RUN_SCOPED = ("GNNFLOW_", "DGL_DIST", "DGL_ROLE", "DGL_NUM_", "DGL_GROUP", "MASTER_", "GLOO_", "OMP_NUM_THREADS",
               "PYTHONWARNINGS")


def _train(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``gnnflow train`` as a user starts it: a fresh process and an environment without the
    run-scoped variables earlier tests' in-process ranks may have set."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_RUN_SCOPED)}
    return subprocess.run([sys.executable, "-m", "gnnflow.cli", "train", *args], capture_output=True,
                          text=True, timeout=timeout, env={**clean, **(env or {})})


def fake_graph(tmp: Path, num_nodes: int, avg_degree: float, parts: int, feature_dim: int = 100,
               train_frac: float = 0.01) -> tuple[str, str]:
    """A graph store and a METIS-like book of ``parts`` parts made of meta.json files only (no
    arrays): the preflight reads nothing else, so a 10M-vertex graph costs nothing here."""
    from gnnflow.data.meta import read_store_meta, store_fingerprint

    m = int(num_nodes * avg_degree)
    meta = {"format": "gnnflow-graph-store", "version": 1, "name": "fake10m", "num_nodes": num_nodes,
            "num_edges": m, "num_classes": 47, "feature_dim": feature_dim, "directed": False,
            "num_train": int(train_frac * num_nodes), "checksums": {"indptr.npy": "0" * 64}}
    graph, book = tmp / "graph", tmp / "book"
    graph.mkdir()
    book.mkdir()
    (graph / "meta.json").write_text(json.dumps(meta))
    inner = num_nodes // parts
    bmeta = {"format": "gnnflow-partition-book", "version": 1, "num_parts": parts, "method": "metis",
             "num_nodes": num_nodes, "num_edges": m, "graph": str(graph), "idx_bits": 32,
             "graph_fingerprint": store_fingerprint(read_store_meta(graph)),
             "quality": {"part_sizes": [inner] * parts, "edges_per_part": [m // parts] * parts,
                         "halo_per_part": [min(num_nodes - inner, 3 * inner)] * parts, "edge_cut_pct": 40.0}}
    (book / "meta.json").write_text(json.dumps(bmeta))
    return str(graph), str(book)


def test_refuses_16_ranks_of_the_10m_graph_fast_before_any_rank_and_leaves_no_run_dir(tmp_path):
    """Acceptance 6, on a node of 24 GiB (the knob stands for this machine or a cluster node)."""
    graph, book = fake_graph(tmp_path, 10_000_000, 25.0, 16)
    out = tmp_path / "run"
    t0 = time.perf_counter()
    proc = _train("--strategy", "data", "--graph", graph, "--partition", book, "--workers", "16", *SAGE3,
                  "--batch-size", "4000", "--epochs", "1", "--out", str(out),
                  env={AVAILABLE_ENV: str(24 * 1024)})
    took = time.perf_counter() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = errors[0]
    assert "memory:" in line and "16 rank(s)" in line and "24576 MiB is available" in line, line
    need = int(line.split("needs about ")[1].split(" MiB")[0])
    assert need > 24 * 1024
    assert "started" not in proc.stderr  # no rank was launched
    assert "memory estimate: data, 16 rank(s)" in proc.stderr  # the estimate line came first
    assert not out.exists()
    assert took < 10, f"refusal took {took:.1f} s"


def test_refusal_uses_this_hosts_memory_without_the_knob(tmp_path):
    """No override: MemAvailable (or the cgroup's room) is what the run is measured against."""
    from gnnflow.strategies.memory import available_memory

    avail, source = available_memory()
    graph, book = fake_graph(tmp_path, 10_000_000, 25.0, 16)
    cfg = TrainConfig(graph=graph, partition=book, strategy="data", workers=16, model="sage", hidden=256,
                      num_layers=3, fanouts=[15, 10, 5], batch_size=4000, epochs=1)
    if strategy_class(cfg.strategy).estimate_memory(cfg).total <= avail:
        pytest.skip(f"this host has {avail / MIB:.0f} MiB available ({source}): the 10M graph fits")
    env = {k: v for k, v in os.environ.items() if k != AVAILABLE_ENV}
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "gnnflow.cli", "train", "--strategy", "data", "--graph", graph,
                           "--partition", book, "--workers", "16", *SAGE3, "--batch-size", "4000",
                           "--out", str(out)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1 and "memory:" in proc.stderr and source.split()[0] in proc.stderr, proc.stderr
    assert not out.exists()


def test_force_runs_what_the_preflight_refuses(tiny_store, tmp_path):
    graph = str(tiny_store.path)
    args = ["--strategy", "single", "--graph", graph, "--epochs", "1", "--hidden", "8"]
    env = {AVAILABLE_ENV: "1"}
    refused = _train(*args, "--out", str(tmp_path / "a"), env=env)
    assert refused.returncode == 1 and "memory: single with 1 rank(s)" in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "a").exists()
    forced = _train(*args, "--out", str(tmp_path / "b"), "--force", env=env)
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert "--force: running anyway" in forced.stderr
    assert (tmp_path / "b" / "records.jsonl").exists()


def test_a_bad_knob_is_one_line(tiny_store, tmp_path):
    proc = _train("--graph", str(tiny_store.path), "--out", str(tmp_path / "r"), env={AVAILABLE_ENV: "lots"})
    assert proc.returncode == 1 and f"{AVAILABLE_ENV}='lots'" in proc.stderr, proc.stderr[-2000:]


def test_estimate_terms_follow_the_sizes():
    """More ranks on a host need more in total and less per rank; each term grows with its size."""
    sizes = GraphSizes(num_nodes=2_449_029, num_edges=123_675_964, feature_dim=100, num_classes=47,
                       num_train=196_000)
    cfg = TrainConfig(graph="-", strategy="data", workers=4, model="sage", hidden=256, num_layers=3,
                      fanouts=[15, 10, 5], batch_size=4000)
    four = estimate(cfg, sizes, strategy_class("data"))
    cfg8 = TrainConfig.from_dict({**cfg.to_dict(), "workers": 8})
    eight = estimate(cfg8, sizes, strategy_class("data"))
    assert eight.total > four.total and eight.max_rank < four.max_rank
    assert four.ranks[0]["shard_features"] == pytest.approx(4 * 100 * 2_449_029 / 4, rel=1e-6)
    levels = sampled_layers(1000, [15, 10, 5], 2_449_029, 123_675_964)
    assert levels[-1] == 1000 and levels[-2] == pytest.approx(6000, rel=0.02)  # 1000 + 5 draws each
    assert levels[0] < 0.65 * 2_449_029  # saturates below the vertex count
    for s in ("single", "data", "split", "p3", "hec", "fullbatch", "dgcl", "distdgl"):
        c = TrainConfig.from_dict({**cfg.to_dict(), "strategy": s, "workers": 1 if s == "single" else 4})
        est = estimate(c, sizes, strategy_class(s))
        assert all(v >= 0 for t in est.ranks for v in t.values()), s
        assert est.max_rank > BASE, s
        assert "MiB per rank" in est.line()


@pytest.mark.quiet
def test_baseline_term_matches_a_rank_on_a_tiny_graph(tmp_path):
    """The constant term: on a tiny graph every other term is near zero, so a rank's measured
    peak is the baseline (interpreter, torch, gloo groups, pipeline threads)."""
    graph, book = synthetic_graph_book(tmp_path, 1024, "random", 2)
    out = tmp_path / "run"
    proc = _train("--strategy", "data", "--graph", graph, "--partition", book, "--workers", "2", "--hidden", "16",
                  "--batch-size", "128", "--epochs", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = TrainConfig.from_dict(json.loads((out / "run.json").read_text())["config"])
    est = strategy_class(cfg.strategy).estimate_memory(cfg)
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    ratios = {r["rank"]: r["mem_peak_rss_mib"] * MIB / est.rank_peak(r["rank"]) for r in rows}
    assert all(BASE / est.rank_peak(r) > 0.9 for r in ratios)  # the baseline is all there is here
    # The baseline is a property of the host as much as of the code (its libraries' builds, the
    # allocator, transparent huge pages): 200 MiB measured here for 211 predicted (313 here and
    # 390 on the CI machine while ranks imported torch._dynamo, 113 MiB of it here).  It must stay within -25 % / +40 % of the constant: a rank that does more
    # than the baseline on a tiny graph (another copy of torch's pools, a second process group)
    # fails.
    assert all(0.75 < q < 1.4 for q in ratios.values()), {
        r: f"measured {q * est.rank_peak(r) / MIB:.0f} MiB, predicted {est.rank_peak(r) / MIB:.0f}" for r, q in ratios.items()}


@pytest.fixture(scope="module")
def measured_graph(tmp_path_factory):
    """300k vertices, 100 features, 2 METIS parts: big enough that a SAGE 3x256 batch (or the
    full-batch buffers), not the torch baseline, is most of a rank's peak (at 100k vertices
    the baseline is still over half of it)."""
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph

    tmp = tmp_path_factory.mktemp("memest")
    store = prepare_synthetic(tmp / "graph", num_nodes=300_000, avg_degree=20, feature_dim=100, num_classes=16,
                              train_frac=0.04, val_frac=0.02)
    book = partition_graph(store.path, "metis", 2, tmp / "book", seed=0)
    return str(store.path), str(book.path)


@pytest.mark.quiet
@pytest.mark.parametrize("strategy", ["data", "fullbatch"])
def test_estimate_within_25_percent_of_the_measured_peak(measured_graph, strategy, tmp_path):
    graph, book = measured_graph
    model = ["--model", "gcn", "--hidden", "256", "--layers", "2"] if strategy == "fullbatch" else SAGE3
    # a pipeline holds its most batches when its sampler gets ahead of training, which a busy host
    # may not allow in an epoch of 3 batches a rank: 3 epochs give it 9 chances (2 measured
    # 892-923 MiB of the 1103 predicted, the last assertion's edge at 892)
    epochs = "1" if strategy == "fullbatch" else "3"
    out = tmp_path / "run"
    proc = _train("--strategy", strategy, "--graph", graph, "--partition", book, "--workers", "2", *model,
                  "--batch-size", "2000", "--epochs", epochs, "--eval-every", epochs, "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    cfg = TrainConfig.from_dict(run["config"])
    est = strategy_class(cfg.strategy).estimate_memory(cfg)
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * int(epochs)
    for row in rows[-2:]:  # the peak so far (VmHWM) at the end of the run
        measured = row["mem_peak_rss_mib"] * MIB
        predicted = est.rank_peak(row["rank"])
        what = (f"{strategy} rank {row['rank']}: predicted {predicted / MIB:.0f} MiB, measured "
                f"{measured / MIB:.0f} MiB ({est.terms(row['rank'])})")
        # the baseline is about a third of the peak here; the terms that scale are checked on their own
        assert BASE / measured < 0.4, what
        assert abs(predicted - measured) / measured < 0.25, what
        assert abs((predicted - BASE) - (measured - BASE)) / (measured - BASE) < 0.35, what


def test_a_host_of_several_counts_its_share_of_the_ranks(monkeypatch):
    """With ``--nnodes`` (gnnflow's launcher on each host) the preflight counts this host's ranks only."""
    from gnnflow.runtime.hosts import NODES_ENV
    from gnnflow.strategies.memory import ranks_on_this_host

    cfg = TrainConfig(graph="-", strategy="data", workers=4)
    monkeypatch.delenv(NODES_ENV, raising=False)
    for name in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    assert ranks_on_this_host(cfg) == 4
    monkeypatch.setenv(NODES_ENV, "2 1 127.0.0.1:29400")
    assert ranks_on_this_host(cfg) == 2
