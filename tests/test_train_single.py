"""Single-process training: accuracy against an MLP, exact resume, CLI, evaluation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnflow.cli import main as cli_main
from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError, StoreError
from gnnflow.nn import build_model
from gnnflow.results.schema import is_measurement
from gnnflow.sampling import Block
from gnnflow.strategies.checkpoint import load_checkpoint
from gnnflow.strategies.common import evaluate_full, full_inference
from gnnflow.strategies.driver import run_training


@pytest.fixture(scope="module")
def synthetic_default(tmp_path_factory):
    from gnnflow.data.synthetic import prepare_synthetic

    return str(prepare_synthetic(tmp_path_factory.mktemp("syn") / "default").path)


def _train(graph: str, model: str, epochs: int, **kw) -> float:
    cfg = TrainConfig(graph=graph, model=model, epochs=epochs, eval_every=epochs, **kw)
    return run_training(cfg)[-1].test_acc


def test_minibatch_sage_beats_mlp(synthetic_default, one_thread):
    kw = dict(num_layers=2, fanouts=[5, 5], batch_size=1024, lr=0.01, hidden=64, seed=0)
    sage = _train(synthetic_default, "sage", 2, **kw)
    mlp = _train(synthetic_default, "mlp", 2, **kw)
    print(f"mini-batch: sage {sage:.4f} mlp {mlp:.4f}")
    assert sage - mlp >= 0.15


def test_fullbatch_gcn_beats_mlp(synthetic_default, one_thread):
    kw = dict(num_layers=2, fanouts=[-1, -1], lr=0.02, hidden=64, seed=0, options={"full_batch": True})
    gcn = _train(synthetic_default, "gcn", 15, **kw)
    mlp = _train(synthetic_default, "mlp", 15, **kw)
    print(f"full-batch: gcn {gcn:.4f} mlp {mlp:.4f}")
    assert gcn - mlp >= 0.15


def _records(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not is_measurement(k)} for r in rows]


def _same(a: list[dict], b: list[dict]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        for k in x:
            if isinstance(x[k], float) and math.isnan(x[k]):
                if not math.isnan(y[k]):
                    return False
            elif x[k] != y[k] and k != "run_id":
                return False
    return True


@pytest.mark.parametrize("full_batch", [False, True])
def test_resume_equals_uninterrupted(tiny_store, tmp_path, full_batch, one_thread):
    base = ["train", "--strategy", "single", "--graph", str(tiny_store.path), "--model", "sage",
            "--fanouts", "4,3", "--batch-size", "32", "--epochs", "4", "--dropout", "0.5", "--seed", "3",
            "--opt", f"full_batch={str(full_batch).lower()}"]
    whole, parted = tmp_path / "whole", tmp_path / "parted"
    assert cli_main([*base, "--out", str(whole)]) == 0
    # "kill" after epoch 1 (right after its checkpoint), then resume
    assert cli_main([*base, "--out", str(parted), "--opt", "stop_after_epoch=1"]) == 0
    assert len(_records(parted)) == 2
    assert json.loads((parted / "run.json").read_text())["status"] == "stopped"
    assert cli_main([*base, "--out", str(parted), "--resume"]) == 0
    assert _same(_records(whole), _records(parted))
    assert [r["epoch"] for r in _records(parted)] == [0, 1, 2, 3]
    a, b = load_checkpoint(whole), load_checkpoint(parted)
    assert a["epoch"] == b["epoch"] == 3
    for k, v in a["ranks"][0]["model"].items():
        assert torch.equal(v, b["ranks"][0]["model"][k]), k
    final = torch.load(parted / "model.pt", weights_only=True)
    assert all(torch.equal(final[k], v) for k, v in a["ranks"][0]["model"].items())
    assert json.loads((parted / "run.json").read_text())["status"] == "done"


def test_resume_drops_records_after_checkpoint(tiny_store, tmp_path, one_thread):
    out = tmp_path / "run"
    cfg = dict(graph=str(tiny_store.path), fanouts=[3, 3], batch_size=64, epochs=3, out=str(out))
    run_training(TrainConfig(**cfg, options={"stop_after_epoch": 0}))
    # a crash after writing epoch 1's records but before its checkpoint leaves an extra row
    line = (out / "records.jsonl").read_text().splitlines()[0]
    row = json.loads(line)
    row["epoch"] = 1
    with open(out / "records.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")
    run_training(TrainConfig(**cfg, resume=True))
    assert [r["epoch"] for r in _records(out)] == [0, 1, 2]


def test_existing_run_needs_resume(tiny_store, tmp_path, one_thread):
    out = tmp_path / "run"
    cfg = dict(graph=str(tiny_store.path), fanouts=[3, 3], batch_size=64, epochs=1, out=str(out))
    run_training(TrainConfig(**cfg))
    with pytest.raises(ConfigError, match="--resume"):
        run_training(TrainConfig(**cfg))


def test_cli_yaml_overridden_by_flags(tiny_store, tmp_path, one_thread):
    from gnnflow.cli.train import add_arguments, config_from_args

    yml = tmp_path / "c.yaml"
    yml.write_text(f"graph: {tiny_store.path}\nmodel: gcn\nhidden: 8\nfanouts: 5,5\noptions:\n  full_batch: false\n")
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = config_from_args(p.parse_args(["--config", str(yml), "--hidden", "16", "--opt", "full_batch=true",
                                         "--opt", "k=0.5"]))
    assert (cfg.model, cfg.hidden, cfg.fanouts, cfg.num_layers) == ("gcn", 16, [5, 5], 2)
    assert cfg.options == {"full_batch": True, "k": 0.5}
    with pytest.raises(ConfigError):
        config_from_args(p.parse_args(["--config", str(tmp_path / "missing.yaml")]))


@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_chunked_inference_equals_whole_graph(tiny_store, model):
    torch.manual_seed(0)
    net = build_model(model, tiny_store.feature_dim, 8, tiny_store.num_classes, 2, dropout=0.5, heads=2)
    x = torch.from_numpy(np.array(tiny_store.features))
    whole = Block.full_graph(tiny_store.indptr, tiny_store.indices)
    net.eval()
    with torch.no_grad():
        ref = net([whole, whole], x)
    net.train()
    got = full_inference(net, tiny_store.indptr, tiny_store.indices, tiny_store.features, chunk_size=37)
    assert torch.allclose(got, ref, atol=1e-5)
    assert net.training
    accs = evaluate_full(net, tiny_store)
    assert set(accs) == {f"{s}_{m}" for s in ("train", "val", "test") for m in ("acc", "loss")}


@pytest.mark.parametrize("model", ["sage", "gat"])
def test_inference_with_tables_on_the_device_equals_host_tables(tiny_store, model, monkeypatch):
    """The device path of full inference (features and hidden tables kept where the chunks run,
    what a GPU with room does), taken on the CPU: the same logits as host tables."""
    from gnnflow.strategies import device_eval

    torch.manual_seed(0)
    net = build_model(model, tiny_store.feature_dim, 8, tiny_store.num_classes, 2, dropout=0.5, heads=2)
    args = (net, tiny_store.indptr, tiny_store.indices, tiny_store.features)
    host = full_inference(*args, chunk_size=37)
    monkeypatch.setattr(device_eval, "fits_on_device", lambda nbytes, device: True)
    assert torch.equal(full_inference(*args, chunk_size=37), host)


def _kill_after_a_checkpoint(args: list[str], out: Path, epochs: int) -> int | None:
    """Start ``gnnflow train`` (``args`` with ``--epochs epochs``) in a subprocess, SIGKILL it once
    a checkpoint of epoch 1 or later exists, and return the checkpoint's epoch; None when the run
    got to its last epoch before the kill (a busy host kept the watcher off the CPU)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "gnnflow.cli", *args, "--epochs", str(epochs), "--out", str(out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900  # a busy host may take long to start it: wait, never kill early
        reached = False
        while not reached and time.monotonic() < deadline and proc.poll() is None:
            try:  # the run replaces last.pt as it goes: a look may fall between the two files
                reached = load_checkpoint(out)["epoch"] >= 1
            except (OSError, RuntimeError, StoreError):  # not there yet, or being replaced
                pass
            time.sleep(0.02)
        if proc.poll() is None:
            assert reached, "no checkpoint of epoch 1 within 900 s"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        else:
            assert proc.returncode == 0, f"the run failed on its own (exit {proc.returncode})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    epoch = load_checkpoint(out)["epoch"]
    return epoch if epoch < epochs - 1 else None


def test_sigkill_then_resume_equals_uninterrupted(tiny_store, tmp_path, one_thread):
    """SIGKILL ``gnnflow train`` after a checkpoint, then ``--resume``: records and weights equal an
    uninterrupted run's.  A run the kill reached too late (its last epoch done: a busy host) is
    made again with four times the epochs, so the test waits for the CPU instead of failing."""
    args = ["train", "--strategy", "single", "--graph", str(tiny_store.path), "--fanouts", "4,3",
            "--batch-size", "16", "--dropout", "0.5", "--seed", "5"]
    for epochs in (12, 48, 192):
        killed = tmp_path / f"killed{epochs}"
        epoch_at_kill = _kill_after_a_checkpoint(args, killed, epochs)
        if epoch_at_kill is not None:
            break
    assert epoch_at_kill is not None, "every run ended before the kill reached it"
    args += ["--epochs", str(epochs)]
    assert cli_main([*args, "--out", str(killed), "--resume"]) == 0
    whole = tmp_path / "whole"
    assert cli_main([*args, "--out", str(whole)]) == 0
    assert _same(_records(whole), _records(killed))
    a, b = load_checkpoint(whole), load_checkpoint(killed)
    for k, v in a["ranks"][0]["model"].items():
        assert torch.equal(v, b["ranks"][0]["model"][k]), k


def test_option_shortcut_flags_map_to_options():
    import argparse

    from gnnflow.cli import train as cli_train

    parser = argparse.ArgumentParser()
    cli_train.add_arguments(parser)
    args = parser.parse_args(["--graph", "g", "--no-pipeline", "--replicate-structure",
                              "--split-group-size", "2", "--no-overlap", "--planner", "spst",
                              "--opt", "cs=0"])
    assert cli_train.config_from_args(args).options == {
        "cs": 0, "pipeline": False, "replicate_structure": True, "split_group_size": 2,
        "overlap": False, "planner": "spst"}
