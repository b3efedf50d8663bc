"""``bench layers`` and ``bench fullbatch`` run where DGL does not import (the GPU issue, (d)).

A GPU machine may have no DGL (its 1.1.3 wheel is CPU-only); both benchmarks used to import it
before timing anything.  Here a subprocess makes ``dgl`` unimportable (``sys.modules["dgl"] =
None``) and runs both on a tiny graph: DGL's rows are dropped with a note, PyG's remain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
NO_DGL = "import sys; sys.modules['dgl'] = None; from gnnflow.cli import main; sys.exit(main(sys.argv[1:]))"


def _bench_without_dgl(*argv: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SRC), DGLBACKEND="pytorch", OUTDATED_IGNORE="1")
    proc = subprocess.run([sys.executable, "-c", NO_DGL, "bench", *argv, "--json"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_bench_layers_without_dgl_keeps_the_pyg_rows():
    pytest.importorskip("torch_geometric")
    out = _bench_without_dgl("layers", "--nodes", "1500", "--batch-size", "32", "--fanouts", "4,4",
                             "--repeats", "1", "--in-dim", "8", "--out-dim", "8", "--layers", "sage,gcn-both")
    names = [r["name"] for r in out["ratios"]]
    assert names == ["sage: ours / PyG", "gcn-both: ours / PyG"]
    assert not out["peers"]["dgl"] and any("DGL does not import" in n for n in out["notes"])
    assert "DGL does not import" in out["summary"]


@pytest.mark.slow
def test_bench_fullbatch_without_dgl_keeps_the_pyg_rows(tmp_path):
    pytest.importorskip("torch_geometric")
    out = _bench_without_dgl("fullbatch", "--nodes", "400", "--feature-dim", "8", "--hidden", "8",
                             "--epochs", "1", "--repeats", "1", "--skip-ranks", "--work", str(tmp_path))
    assert [r["name"] for r in out["ratios"]] == ["full-graph GCN epoch: ours / PyG"]
    assert "dgl_epoch_s" not in out and any("DGL does not import" in n for n in out["notes"])
