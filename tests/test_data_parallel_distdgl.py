"""Acceptance 4 of issue 5 (part): ``--strategy distdgl`` (DGL 1.1.3 DistDGL) runs here on our partitions."""

from __future__ import annotations

import time

import psutil
import pytest


def _dgl_servers() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "gnnflow.strategies.distdgl" in cmd and cmd.endswith("server"):
            out.append(p)
    return out


@pytest.mark.slow
def test_distdgl_trains_on_the_partition_book_and_cleans_up(tmp_path):
    from gnnflow.config import TrainConfig
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph
    from gnnflow.strategies.driver import run_training

    before = {p.pid for p in _dgl_servers()}
    store = prepare_synthetic(tmp_path / "graph", num_nodes=4096)
    book = partition_graph(store.path, "metis", 2, tmp_path / "book", seed=0)
    records = run_training(TrainConfig(graph=str(store.path), strategy="distdgl", partition=str(book.path),
                                       workers=2, epochs=4, batch_size=128, out=str(tmp_path / "run")))
    last = [r for r in records if r.epoch == 3]
    assert len(last) == 2
    assert all(r.counters["iterations"] > 0 and r.counters["sampled_edges"] > 0 for r in last)
    assert last[0].test_acc > 0.5  # learned something (8 classes)
    assert (book.path.parent / f"{book.path.name}.dgl" / "gnnflow.json").exists()
    time.sleep(2)
    assert {p.pid for p in _dgl_servers()} <= before
