"""gnnflow plan / gnnflow topology (DGCL §5, Table 1/3) and the allgather bench's fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gnnflow.bench.allgather import fit_line
from gnnflow.cli import main
from gnnflow.comm.topology import load_topology


@pytest.fixture
def book4(tiny_store, tmp_path):
    from gnnflow.partition.api import partition_graph

    return partition_graph(tiny_store.path, "metis", 4, tmp_path / "p4")


def test_plan_cli_json(book4, capsys) -> None:
    assert main(["plan", str(book4.path), "--topology", "dgx1-v100", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    pl = rep["planners"]
    assert set(pl) == {"p2p", "spst", "swap", "replication"}
    assert rep["parts"] == 4 and pl["spst"]["modeled_ms"] <= pl["p2p"]["modeled_ms"] + 1e-12
    assert pl["replication"]["modeled_ms"] == 0.0 and pl["replication"]["replication_factor"] > 1.0
    assert pl["p2p"]["link_volume"] == rep["halo_total"]  # p2p sends each V_ij once, directly


def test_plan_cli_text_and_errors(book4, tmp_path, capsys) -> None:
    assert main(["plan", str(book4.path), "--topology", "pcie-8gpu"]) == 0
    assert "spst / p2p modeled time" in capsys.readouterr().out
    small = tmp_path / "two.yaml"
    small.write_text("devices: [a, b]\nconnections:\n  - [a, b, 1]\n")
    assert main(["plan", str(book4.path), "--topology", str(small)]) == 1
    assert "4 parts but topology" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [a, b]\nconnections:\n  - [a, c, 1]\n")
    assert main(["plan", str(book4.path), "--topology", str(bad)]) == 1
    assert "bad.yaml" in capsys.readouterr().err


def test_topology_list_show(capsys) -> None:
    assert main(["topology", "list"]) == 0
    assert "dgx1-v100" in capsys.readouterr().out
    assert main(["topology", "show", "dgx1-v100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["links"]) == 56 and d["devices"][0] == "gpu0"


def test_topology_probe_writes_valid_file(tmp_path, capsys) -> None:
    out = tmp_path / "probed.yaml"
    assert main(["topology", "probe", "--workers", "2", "--out", str(out), "--message-mb", "0.25",
                 "--repeats", "1"]) == 0
    topo = load_topology(out)
    assert topo.devices == ["rank0", "rank1"] and topo.link_bandwidth(0, 1) > 0
    assert "host" in topo.hop_names  # the shared hop that makes concurrent transfers contend


def test_fit_line() -> None:
    x = np.linspace(1, 10, 10)
    f = fit_line(x, 3 * x + 2)
    assert f["slope"] == pytest.approx(3) and f["intercept_s"] == pytest.approx(2) and f["r2"] == pytest.approx(1)
    noisy = fit_line(x, 3 * x + 2 + np.r_[5, -5] .repeat(5))
    assert noisy["r2"] < 0.9
