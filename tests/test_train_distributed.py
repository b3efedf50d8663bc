"""The driver with a distributed strategy: 2 ranks, records gathered on rank 0, exact resume."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import synthetic_graph_book

from gnnflow.config import TrainConfig
from gnnflow.results.schema import is_measurement
from gnnflow.strategies.checkpoint import load_checkpoint
from gnnflow.strategies.driver import run_training


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    return synthetic_graph_book(tmp_path_factory.mktemp("dist"), 2048, "random", 2)


def _rows(run_dir):
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not is_measurement(k) and k != "run_id"} for r in rows]


@pytest.mark.slow
def test_two_rank_resume_equals_uninterrupted(graph_book, tmp_path):
    graph, book = graph_book
    base = dict(graph=graph, partition=book, strategy="data", workers=2, fanouts=[4, 4], batch_size=256,
                epochs=3, dropout=0.3, seed=1)
    whole, parted = tmp_path / "whole", tmp_path / "parted"
    records = run_training(TrainConfig(**base, out=str(whole)))
    assert sorted((r.epoch, r.rank) for r in records) == [(e, r) for e in range(3) for r in range(2)]
    run_training(TrainConfig(**base, out=str(parted), options={"stop_after_epoch": 0}))
    run_training(TrainConfig(**base, out=str(parted), resume=True))
    a, b = _rows(whole), _rows(parted)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    ca, cb = load_checkpoint(whole), load_checkpoint(parted)
    assert ca["world_size"] == 2
    for rank in range(2):
        for k, v in ca["ranks"][rank]["model"].items():
            assert torch.equal(v, cb["ranks"][rank]["model"][k]), (rank, k)
