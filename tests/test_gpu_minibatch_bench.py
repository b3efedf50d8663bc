"""``gnnflow bench gpu-minibatch --device cpu`` on a tiny graph: the four configurations run (the
real ``single`` strategy with host sampling, device sampling, device sampling + device cache, and
forward+backward alone), the ratios carry their operands, and what cannot run says so."""

from __future__ import annotations

import json

from gnnflow.bench.ratios import check_ratios

TINY = ["--device", "cpu", "--nodes", "1500", "--avg-degree", "8", "--feature-dim", "8", "--classes", "4",
        "--train-frac", "0.3", "--hidden", "16", "--fanouts", "5,5", "--batch-size", "128", "--cache-mib", "0.02"]


def test_bench_gpu_minibatch_runs_on_the_cpu(capsys, tmp_path):
    from gnnflow.cli import main

    assert main(["bench", "gpu-minibatch", *TINY, "--work", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "gpu-minibatch" and not check_ratios(out)
    names = [r["name"] for r in out["ratios"]]
    assert names[:3] == ["(c)/(a): device sampling + device cache / host",
                         "(c)/(d): device sampling + device cache / forward+backward alone",
                         "(b)/(a): device sampling / host"]
    assert out["ratio_name"] == names[0]
    rows = out["configs"]
    assert set(rows) == {"a", "b", "c", "d"}
    # the same batches in every configuration: the device sampler draws what the host one does
    edges = {k: rows[k]["counters"]["sampled_edges"] for k in "abc"}
    assert len(set(edges.values())) == 1 and edges["a"] > 0
    c = rows["c"]["counters"]
    assert c["device_cache_hits"] > 0 and c["device_cache_hits"] + c["device_cache_misses"] == \
        rows["a"]["counters"]["features_loaded"]
    assert out["eval_s"] > 0 and "CPU run: these are not GPU figures" in out["notes"]
    if out["pyg"] is None:  # PyG's NeighborLoader needs pyg-lib or torch-sparse
        assert any("PyG NeighborLoader row left out" in n for n in out["notes"])
