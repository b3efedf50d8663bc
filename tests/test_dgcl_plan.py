"""Topology validation, communication relation, cost model and planners (DGCL §4.1, §5)."""

from __future__ import annotations

import numpy as np
import pytest

from gnnflow.comm.plan import (
    comm_relation,
    model_swap,
    plan_p2p,
    plan_spst,
    stage_cost,
)
from gnnflow.comm.topology import (
    TopologyError,
    compile_topology,
    load_topology,
    preset_names,
)
from gnnflow.errors import GnnflowError
from gnnflow.partition.metrics import replication_factor
from tests.conftest import random_store_arrays


def _write(tmp_path, text: str):
    f = tmp_path / "topo.yaml"
    f.write_text(text)
    return f


def test_unknown_device_is_a_clear_error(tmp_path) -> None:
    f = _write(tmp_path, "devices: [g0, g1]\nconnections:\n  - [g0, g9, NV1]\n")
    with pytest.raises(TopologyError, match=r"topo\.yaml.*g0-g9.*unknown device or node 'g9'"):
        load_topology(f)


def test_disconnected_topology_is_a_clear_error(tmp_path) -> None:
    f = _write(tmp_path, "devices: [g0, g1, g2]\nconnections:\n  - [g0, g1, NV1]\n")
    with pytest.raises(TopologyError, match=r"topo\.yaml.*disconnected.*g2"):
        load_topology(f)


def test_negative_bandwidth_is_a_clear_error(tmp_path) -> None:
    f = _write(tmp_path, "devices: [g0, g1]\nconnections:\n  - {ends: [g0, g1], bandwidth: -3}\n")
    with pytest.raises(TopologyError, match=r"topo\.yaml.*g0-g1.*must be positive"):
        load_topology(f)


def test_other_bad_inputs(tmp_path) -> None:
    with pytest.raises(GnnflowError, match="no such topology"):
        load_topology(tmp_path / "missing.yaml")
    with pytest.raises(TopologyError, match="unknown link type 'NV9'"):
        compile_topology({"devices": ["a", "b"], "connections": [["a", "b", "NV9"]]}, "x.yaml")
    with pytest.raises(TopologyError, match="duplicate"):
        compile_topology({"devices": ["a", "a"], "connections": []}, "x.yaml")
    f = _write(tmp_path, "devices: [a, b\n")
    with pytest.raises(TopologyError, match="cannot parse"):
        load_topology(f)


def test_presets_load() -> None:
    assert set(preset_names()) >= {"dgx1-v100", "dgx-a100", "pcie-8gpu", "dgx1-v100-x2-ib"}
    dgx = load_topology("dgx1-v100")
    assert dgx.num_devices == 8 and len(dgx.links) == 56
    # hybrid cube-mesh: every GPU has 6 NVLinks (NV1 = 1, NV2 = 2)
    for i in range(8):
        nv = [dgx.link_bandwidth(i, j) for j in range(8) if j != i and len(dgx.links[(i, j)]) == 1]
        assert round(sum(nv) / 24.22) == 6
    # GPU0 -> GPU5 has no NVLink: PCIe, QPI, PCIe (Fig. 3) at the QPI speed of Table 1
    assert dgx.routes[(0, 5)] == ["gpu0", "pcie0", "cpu0", "cpu1", "pcie2", "gpu5"]
    assert dgx.link_bandwidth(0, 5) == pytest.approx(9.56)
    two = load_topology("dgx1-v100-x2-ib")
    assert two.num_devices == 16 and two.link_bandwidth(3, 12) == pytest.approx(6.37)


def test_qpi_contention_matches_table3() -> None:
    """Concurrent cross-socket transfers share QPI: per-GPU bandwidth 1/n (Table 3: 9.50, 5.12, 3.34)."""
    dgx = load_topology("dgx1-v100")
    for n, pairs in enumerate([[(0, 5)], [(0, 5), (1, 6)], [(0, 5), (1, 6), (2, 7)]], start=1):
        loads = np.zeros((1, dgx.num_hops))
        for a, b in pairs:
            loads[0, dgx.links[(a, b)]] += 1e6  # 1e6 vertices of 1 byte = 1 MB each
        t, _ = stage_cost(loads, dgx.hop_bw, 1.0)
        assert 1e6 / t / 1e9 == pytest.approx(9.56 / n)


def _relation(parts: int = 4, seed: int = 0):
    g = random_store_arrays(num_nodes=300, avg_degree=6, seed=seed)
    node_part = np.random.default_rng(seed).integers(0, parts, 300).astype(np.int32)
    return g, node_part, comm_relation(g["indptr"], g["indices"], node_part, parts)


def test_relation_matches_halos() -> None:
    g, node_part, rel = _relation()
    indptr, indices = g["indptr"], g["indices"]
    for j in range(4):
        inner = np.flatnonzero(node_part == j)
        nbrs = np.concatenate([indices[indptr[v]:indptr[v + 1]] for v in inner])
        halo = np.unique(nbrs[node_part[nbrs] != j])
        assert np.array_equal(rel.halo_ids(j), halo)
        for i in range(4):
            assert np.array_equal(rel.pair_vertices(i, j), halo[node_part[halo] == i] if i != j else [])
    counts = rel.pair_counts()
    assert counts.trace() == 0 and counts.sum() == sum(rel.halo_ids(j).shape[0] for j in range(4))


def test_cost_model_by_hand() -> None:
    """§5.1 on a line a-b-c: relaying x via b takes two stages; the direct a->b load adds up."""
    topo = compile_topology({"devices": ["a", "b", "c"],
                             "connections": [["a", "b", 2.0], ["b", "c", 4.0]]}, "line")
    loads = np.zeros((2, topo.num_hops))
    loads[0, topo.links[(0, 1)]] += 10  # stage 1: a->b carries 10 vertices
    loads[1, topo.links[(1, 2)]] += 6  # stage 2: b->c carries 6
    total, per_stage = stage_cost(loads, topo.hop_bw, 1e9)  # 1 GB per vertex
    assert per_stage.tolist() == pytest.approx([5.0, 1.5]) and total == pytest.approx(6.5)


def test_spst_beats_p2p_and_balances() -> None:
    _, _, rel = _relation(parts=8, seed=3)
    dgx = load_topology("dgx1-v100")
    p2p, spst = plan_p2p(rel, dgx), plan_spst(rel, dgx, granularity=1)
    assert p2p.num_stages == 1  # every DGX-1 pair has a direct link
    assert spst.cost() < 0.5 * p2p.cost()
    # every destination gets every vertex it needs exactly once
    for plan in (p2p, spst):
        got = {}
        for verts, tree in zip(plan.unit_vertices, plan.unit_trees, strict=True):
            for (_, b, _) in tree:
                for v in verts.tolist():
                    got.setdefault(b, []).append(v)
        for j in range(8):
            need = set(rel.halo_ids(j).tolist())
            assert need <= set(got[j]) and len(got[j]) == len(set(got[j]))
    # classes: coarser units change the cost little
    coarse = plan_spst(rel, dgx, granularity=16)
    assert coarse.cost() <= 1.25 * spst.cost()


def test_swap_and_replication_models() -> None:
    g, node_part, rel = _relation(parts=8, seed=4)
    dgx = load_topology("dgx1-v100")
    sw = model_swap(rel, dgx)
    assert sw["written"] == 300 and sw["read"] == rel.pair_counts().sum() and sw["modeled_s"] > 0
    r1 = replication_factor(g["indptr"], g["indices"], node_part, 8, 1)
    r2 = replication_factor(g["indptr"], g["indices"], node_part, 8, 2)
    assert r1 == pytest.approx(1 + rel.pair_counts().sum() / 300) and r2 >= r1


def test_planner_rejects_mismatched_sizes() -> None:
    _, _, rel = _relation(parts=4)
    with pytest.raises(GnnflowError, match="4 parts but topology"):
        plan_spst(rel, load_topology("dgx1-v100"))


def test_tables_relays_and_substages() -> None:
    """Every rank ends with exactly its halo; a backward sub-stage never adds twice into one row (§6.2)."""
    _, _, rel = _relation(parts=8, seed=5)
    dgx = load_topology("dgx1-v100")
    tables = plan_spst(rel, dgx, granularity=1).tables()
    for t in tables:
        assert np.array_equal(t.halo_ids, rel.halo_ids(t.rank))
        assert np.intersect1d(t.relay_ids, np.r_[t.inner_ids, t.halo_ids]).size == 0
        got = np.concatenate([tr.recv_ids for st in t.stages for tr in st])
        assert np.array_equal(np.sort(got), np.union1d(t.halo_ids, t.relay_ids))  # each row arrives once
        for st in t.stages:
            labels = np.concatenate([tr.send_sub for tr in st]) if st else np.zeros(0)
            assert labels.size == 0 or labels.max() < 7  # at most |D| - 1 sub-stages
            for lvl in np.unique(labels):
                rows = np.concatenate([tr.send_ids[tr.send_sub == lvl] for tr in st])
                assert np.unique(rows).size == rows.size
    # both ends of a transfer agree on ids and labels
    for t in tables:
        for k, st in enumerate(t.stages):
            for tr in st:
                peer = next(x for x in tables[tr.peer].stages[k] if x.peer == t.rank)
                assert np.array_equal(tr.send_ids, peer.recv_ids) and np.array_equal(tr.send_sub, peer.recv_sub)


@pytest.mark.parametrize("parts", [5, 63, 70, 130])
def test_more_than_62_parts(parts) -> None:
    """Destination masks span several 64-bit words past 64 parts: the relation from the CSR
    and from the halo lists agree with the brute-force halos, and a p2p and an SPST plan on a
    full mesh deliver every rank exactly its halo (the 62-part cap is gone)."""
    from gnnflow.comm.plan import comm_relation_from_halos
    from gnnflow.comm.topology import uniform_topology

    g = random_store_arrays(num_nodes=800, avg_degree=6, seed=3)
    indptr, indices = g["indptr"], g["indices"]
    node_part = np.random.default_rng(3).integers(0, parts, 800).astype(np.int32)
    rel = comm_relation(indptr, indices, node_part, parts)
    halos = []
    for j in range(parts):
        inner = np.flatnonzero(node_part == j)
        nbrs = np.concatenate([indices[indptr[v]:indptr[v + 1]] for v in inner] + [np.zeros(0, np.int64)])
        halos.append(np.unique(nbrs[node_part[nbrs] != j]).astype(np.int64))
        assert np.array_equal(rel.halo_ids(j), halos[-1])
    from_halos = comm_relation_from_halos(halos, node_part, parts)
    assert np.array_equal(from_halos.vertices, rel.vertices) and np.array_equal(from_halos.dest_mask, rel.dest_mask)
    assert rel.pair_counts().sum() == sum(h.shape[0] for h in halos)
    topo = uniform_topology(parts)
    for plan in (plan_p2p(rel, topo), plan_spst(rel, topo, granularity=64)):
        for t in plan.tables():
            assert np.array_equal(t.halo_ids, halos[t.rank])
            got = np.concatenate([tr.recv_ids for st in t.stages for tr in st] + [np.zeros(0, np.int64)])
            assert np.array_equal(np.sort(got), np.union1d(t.halo_ids, t.relay_ids))
