"""Homogenization (DistDGLv2 §4.1.1): id spaces, maps both ways, round trips (acceptance 5)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datagen import hetero_equal

from gnnflow.cli import main as cli
from gnnflow.data.hetero import TypeMap, to_homogeneous_id, to_type_id, validate_hetero
from gnnflow.data.hetero_synthetic import generate_synthetic_hetero, prepare_synthetic_hetero
from gnnflow.data.homogenize import heterogenize, homogenize
from gnnflow.data.store import open_store
from gnnflow.data.typed_dir import read_typed_dir, write_typed_dir
from gnnflow.errors import GnnflowError, StoreError

SMALL = dict(num_papers=300, num_authors=400, num_institutions=20, num_fields=30, num_classes=4)


@pytest.fixture
def hetero_store(tmp_path):
    return prepare_synthetic_hetero(tmp_path / "h", **SMALL)


def test_contiguous_ids_and_type_metadata(hetero_store):
    s = hetero_store
    tm = validate_hetero(s)
    counts = [400, 30, 20, 300]  # author, field_of_study, institution, paper (sorted)
    assert s.meta.node_types == ["author", "field_of_study", "institution", "paper"]
    assert s.meta.node_type_offsets == np.concatenate([[0], np.cumsum(counts)]).tolist()
    nt = np.asarray(s.extra["node_type"])
    assert nt.dtype == np.int32 and np.all(np.diff(nt) >= 0)
    # Edge ids: contiguous per type; CSR slots carry type and id; endpoints match the triple.
    et, eid = np.asarray(s.extra["edge_type"]), np.asarray(s.extra["edge_id"])
    assert et.dtype == np.int32 and et.shape == (s.num_edges,)
    assert np.array_equal(tm.to_type_eid(eid)[0], et)
    assert len(s.meta.edge_types or []) == 8 and s.meta.reverse_edge_types
    # Per-type features at their own dims, a common-dim features.npy, labels on papers only.
    assert s.extra["features_paper"].shape == (300, 64)
    assert s.extra["features_author"].shape == (400, 32)
    assert s.extra["features_field_of_study"].shape == (30, 16)
    assert "features_institution" not in s.extra
    assert s.features.shape == (750, 64)
    assert np.array_equal(s.features[450:], s.extra["features_paper"])
    inst = s.features[430:450]
    assert np.abs(inst).sum() > 0  # institutions filled from their authors
    assert np.all(s.labels[:450] == -1) and np.all(s.labels[450:] >= 0)
    tr = np.asarray(s.train_idx)
    assert np.all(nt[tr] == 3)


def test_round_trip_synthetic_hetero(hetero_store):
    original = generate_synthetic_hetero(**SMALL)
    assert hetero_equal(heterogenize(hetero_store), original) == []
    # Reverse edge types are the original edges turned around.
    back = heterogenize(hetero_store, include_reverse=True)
    s, d = back.edges[("paper", "rev_writes", "author")]
    assert np.array_equal(s, original.edges[("author", "writes", "paper")][1])
    assert np.array_equal(d, original.edges[("author", "writes", "paper")][0])


def test_round_trip_without_reverse_edges(tmp_path):
    s = prepare_synthetic_hetero(tmp_path / "h", reverse_edges=False, feature_fill="zero", **SMALL)
    assert s.meta.directed and not s.meta.reverse_edge_types
    assert hetero_equal(heterogenize(s), generate_synthetic_hetero(**SMALL)) == []
    assert np.all(s.features[430:450] == 0)  # institutions: zero fill


def test_id_maps_both_ways(hetero_store):
    tm = TypeMap.from_store(hetero_store)
    rng = np.random.default_rng(0)
    hids = rng.integers(0, hetero_store.num_nodes, 500)
    types, local = tm.to_type_id(hids)
    back = np.empty_like(hids)
    for t in range(len(tm.node_types)):
        back[types == t] = tm.to_homogeneous_id(t, local[types == t])
    assert np.array_equal(back, hids)
    assert np.array_equal(to_homogeneous_id(hetero_store, "paper", [0, 299]), [450, 749])
    t, l_ = to_type_id(hetero_store.meta, [449, 450])
    assert t.tolist() == [2, 3] and l_.tolist() == [19, 0]
    heids = np.arange(hetero_store.num_edges)
    et, le = tm.to_type_eid(heids)
    assert np.array_equal(np.concatenate([tm.to_homogeneous_eid(r, le[et == r])
                                          for r in range(len(tm.edge_types))]), heids)
    assert tm.etype_id("writes") == tm.etype_id(("author", "writes", "paper"))
    with pytest.raises(GnnflowError, match="out of range"):
        tm.to_homogeneous_id("paper", [300])
    with pytest.raises(GnnflowError, match="unknown vertex type"):
        tm.to_homogeneous_id("venue", [0])


def test_validate_detects_tampering(hetero_store):
    et = np.array(hetero_store.extra["edge_type"])
    et[0] = (et[0] + 1) % 8
    np.save(hetero_store.path / "edge_type.npy", et)
    with pytest.raises(StoreError, match="edge_type.npy"):
        validate_hetero(open_store(hetero_store.path))


def test_typed_dir_round_trip_via_cli(tmp_path, capsys):
    hg = generate_synthetic_hetero(**SMALL)
    write_typed_dir(hg, tmp_path / "typed")
    assert hetero_equal(read_typed_dir(tmp_path / "typed"), hg) == []
    assert cli(["homogenize", str(tmp_path / "typed"), "--out", str(tmp_path / "store")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["statistics"]["nodes_per_type"]["paper"] == 300
    assert cli(["homogenize", "--to-typed", str(tmp_path / "store"),
                "--out", str(tmp_path / "typed2")]) == 0
    assert hetero_equal(read_typed_dir(tmp_path / "typed2"), hg) == []


def test_bad_typed_dir(tmp_path, capsys):
    hg = generate_synthetic_hetero(**SMALL)
    write_typed_dir(hg, tmp_path / "typed")
    f = tmp_path / "typed" / "edges" / "paper___cites___paper.npy"
    e = np.load(f)
    e[1, 0] = 300
    np.save(f, e)
    out = tmp_path / "store"
    assert cli(["homogenize", str(tmp_path / "typed"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "paper___cites___paper: destination id 300 out of range [0, 300)" in err
    assert err.count("\n") == 1 and not out.exists()


def test_homogenize_is_trainable_shape():
    """Homogeneous GNN view: one feature row per vertex, labels -1 off-target."""
    d = homogenize(generate_synthetic_hetero(**SMALL))
    n = d["indptr"].shape[0] - 1
    assert d["features"].shape == (n, 64) and d["labels"].shape == (n,)
    assert d["extra_arrays"]["edge_id"].shape == d["indices"].shape


def test_matches_dgl_to_homogeneous():
    """Peer check: the same id spaces as DGL 1.1.3's ``dgl.to_homogeneous``."""
    dgl = pytest.importorskip("dgl")
    import torch

    hg = generate_synthetic_hetero(**SMALL)
    g = dgl.heterograph({e: (torch.from_numpy(s), torch.from_numpy(d))
                         for e, (s, d) in hg.edges.items()}, num_nodes_dict=hg.num_nodes)
    h = dgl.to_homogeneous(g)
    ref_src, ref_dst = (t.numpy() for t in h.edges(order="eid"))
    d = homogenize(hg, reverse_edges=False)
    n, m = d["indptr"].shape[0] - 1, d["indices"].shape[0]
    src, dst = np.empty(m, np.int64), np.empty(m, np.int64)
    eid = d["extra_arrays"]["edge_id"]
    src[eid] = d["indices"]
    dst[eid] = np.repeat(np.arange(n), np.diff(d["indptr"]))
    assert np.array_equal(src, ref_src) and np.array_equal(dst, ref_dst)
    assert np.array_equal(d["extra_arrays"]["node_type"], h.ndata[dgl.NTYPE].numpy())
    et = np.empty(m, np.int32)
    et[eid] = d["extra_arrays"]["edge_type"]
    assert np.array_equal(et, h.edata[dgl.ETYPE].numpy())


def test_homogenize_cli_on_stores(tmp_path, hetero_store, tiny_store, capsys):
    """The workflow's `homogenize` rule runs on a prepared store: typed or plain."""
    assert cli(["homogenize", str(hetero_store.path), "--out", str(tmp_path / "again"),
                "--no-reverse-edges"]) == 0
    again = open_store(tmp_path / "again")
    assert again.meta.directed and len(again.meta.edge_types or []) == 4
    assert hetero_equal(heterogenize(again), heterogenize(hetero_store)) == []
    assert cli(["homogenize", str(tiny_store.path), "--out", str(tmp_path / "plain")]) == 0
    plain = open_store(tmp_path / "plain")
    validate_hetero(plain)
    assert plain.meta.node_types == ["_N"] and not plain.meta.directed
    assert np.array_equal(plain.indices, tiny_store.indices)
    assert np.array_equal(plain.indptr, tiny_store.indptr)
    assert np.array_equal(plain.features, tiny_store.features)


def test_size_presets_shape_like_ogbn_mag(tmp_path, capsys):
    """``--preset ogbn-mag``: ogbn-mag's schema with paper features only (the other types
    featureless, learnable in the relational models) and 349 classes; flags override the counts."""
    from gnnflow.data.hetero_synthetic import PRESETS, preset_params

    mag = preset_params("ogbn-mag")
    assert (mag["num_papers"] + mag["num_authors"] + mag["num_institutions"] + mag["num_fields"]) == 1_939_743
    assert (mag["paper_dim"], mag["author_dim"], mag["field_dim"], mag["num_classes"]) == (128, 0, 0, 349)
    assert set(PRESETS) == {"ogbn-mag", "igbh-small"} and preset_params("igbh-small")["paper_dim"] == 1024
    assert cli(["prepare", "synthetic-hetero", "--preset", "ogbn-mag", "--papers", "2000", "--authors", "3000",
                "--institutions", "30", "--fields", "200", "--classes", "12", "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    s = open_store(tmp_path / "m")
    assert s.meta.type_feature_dims == {"paper": 128} and s.num_classes == 12
    assert sorted(k for k in s.extra if k.startswith("features_")) == ["features_paper"]
    per_type = s.meta.num_edges_per_type
    writes, cites = per_type["author___writes___paper"], per_type["paper___cites___paper"]
    assert 8.5 < writes / 2000 < 10.5 and 6 < cites / 2000 < 8  # ogbn-mag's 9.7 and 7.4 per paper
    assert per_type["author___affiliated_with___institution"] == round(0.92 * 3000)
    assert s.meta.extra["generator"]["preset"] == "ogbn-mag"
