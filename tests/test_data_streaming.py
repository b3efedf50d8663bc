"""Streaming conversion (issue 19.4): SNAP and OGB raw files convert through the on-disk
bucketed CSR build into stores byte-identical to the former in-memory conversion, here
with chunks and buckets small enough that every path (many buckets, oversized buckets
split again, hub vertices) runs on small files."""

from __future__ import annotations

import numpy as np
import pytest

from gnnflow.data.csr import build_csr
from gnnflow.data.external_csr import ExternalCSRBuilder, NpyAppender
from gnnflow.data.store import write_store
from tests.datagen import write_ogb_raw, write_snap_edges


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 700 edges, buckets of 300 keys: dozens of buckets, some split again."""
    monkeypatch.setattr("gnnflow.data.arrays.CHUNK_ROWS", 700)
    monkeypatch.setattr("gnnflow.data.external_csr.BUCKET_KEYS", 300)


def _same_files(a, b):
    """Every .npy file of store ``a`` equals store ``b``'s, byte for byte (the sha256s)."""
    sa, sb = a.meta["checksums"], b.meta["checksums"]
    assert sorted(sa) == sorted(sb)
    assert {k: v for k, v in sa.items() if sb[k] != v} == {}


@pytest.mark.parametrize("symmetrize", [True, False])
def test_builder_equals_build_csr(tmp_path, symmetrize):
    rng = np.random.default_rng(0)
    n, m = 400, 9000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    dst[:2000] = 5  # a hub: one destination bigger than a bucket
    b = ExternalCSRBuilder(n, tmp_path, symmetrize=symmetrize, expected_edges=m // 8, bucket_keys=256)
    assert b.num_buckets >= 5  # too few for 9000+ keys: the big ones are split again
    for i in range(0, m, 1000):
        b.add(src[i:i + 1000], dst[i:i + 1000])
    count = b.finish(tmp_path / "indptr.npy", tmp_path / "indices.npy")
    indptr, indices = build_csr(src, dst, n, symmetrize=symmetrize)
    np.save(tmp_path / "ref.npy", indices)
    assert (tmp_path / "indices.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes()
    assert np.array_equal(np.load(tmp_path / "indptr.npy"), indptr) and count == indices.size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["indices.npy", "indptr.npy", "ref.npy"]


def test_builder_edge_ids_keep_stable_order(tmp_path):
    """With edge ids (typed graphs): all edges kept, equal keys in edge-id order."""
    rng = np.random.default_rng(1)
    n, m = 50, 3000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)  # many duplicates
    b = ExternalCSRBuilder(n, tmp_path, symmetrize=False, dedup=False, drop_self_loops=False,
                           edge_ids=True, expected_edges=m, bucket_keys=100)
    for i in range(0, m, 333):
        b.add(src[i:i + 333], dst[i:i + 333], np.arange(i, min(m, i + 333)))
    b.finish(tmp_path / "ip.npy", tmp_path / "ix.npy", tmp_path / "eid.npy")
    perm = np.argsort(dst * n + src, kind="stable")
    assert np.array_equal(np.load(tmp_path / "eid.npy"), perm)
    assert np.array_equal(np.load(tmp_path / "ix.npy"), src[perm])


def test_npy_appender_matches_np_save(tmp_path):
    for n in (0, 7, 1000):
        a = NpyAppender(tmp_path / "a.npy", np.int64)
        a.append(np.arange(n // 2))
        a.append(np.arange(n // 2, n))
        a.close()
        np.save(tmp_path / "b.npy", np.arange(n, dtype=np.int64))
        assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def _snap_in_memory(path, out, seed, feature_dim=4, num_classes=3, symmetrize=True):
    """The SNAP conversion as it was before streaming (whole file, np.unique, build_csr)."""
    from gnnflow.data.arrays import read_text_edges

    src, dst = read_text_edges(path)
    orig_id, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    m, n = src.shape[0], orig_id.shape[0]
    indptr, indices = build_csr(inverse[:m], inverse[m:], n, symmetrize=symmetrize)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n, dtype=np.int64)
    perm = rng.permutation(n)
    n_tr, n_va = int(round(0.65 * n)), int(round(0.10 * n))
    features = rng.standard_normal((n, feature_dim), dtype=np.float32)
    return write_store(out, name="x", source="snap", indptr=indptr, indices=indices,
                       features=features, labels=labels, train_idx=np.sort(perm[:n_tr]),
                       val_idx=np.sort(perm[n_tr:n_tr + n_va]), test_idx=np.sort(perm[n_tr + n_va:]),
                       num_classes=num_classes, directed=not symmetrize,
                       extra_arrays={"orig_id": orig_id})


@pytest.mark.parametrize("symmetrize", [True, False])
def test_snap_streaming_is_byte_identical(tmp_path, small_chunks, symmetrize):
    from gnnflow.data.snap import prepare_snap

    f = write_snap_edges(tmp_path / "edges.txt.gz", num_nodes=500, num_lines=6000, seed=2)
    s = prepare_snap(tmp_path / "g", file=f, feature_dim=4, num_classes=3, seed=5,
                     symmetrize=symmetrize)
    _same_files(s, _snap_in_memory(f, tmp_path / "ref", seed=5, symmetrize=symmetrize))
    assert s.extra["orig_id"][:3].tolist() == [1, 4, 7]  # ids 3v+1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".g")]  # scratch removed


def _ogb_in_memory(root, out, binary):
    """The OGB homogeneous conversion before streaming: ogb's readers, then build_csr."""
    import pandas as pd
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    from gnnflow.data.ogb import _labels_1d

    if binary:
        g = read_binary_graph_raw(str(root / "raw"))[0]
        labels = _labels_1d(np.load(root / "raw" / "node-label.npz")["node_label"])
    else:
        g = read_csv_graph_raw(str(root / "raw"), add_inverse_edge=False,
                               additional_node_files=["node_year"])[0]
        labels = _labels_1d(pd.read_csv(root / "raw" / "node-label.csv.gz", header=None).values)
    split = {k: pd.read_csv(root / "split" / "time" / f"{k}.csv.gz", header=None).values.T[0]
             for k in ("train", "valid", "test")}
    n = int(g["num_nodes"])
    indptr, indices = build_csr(g["edge_index"][0], g["edge_index"][1], n, symmetrize=True)
    extra = {}
    if g.get("node_year") is not None:
        extra["node_year"] = np.asarray(g["node_year"]).reshape(-1).astype(np.int64)
    return write_store(out, name="x", source="ogb", indptr=indptr, indices=indices,
                       features=np.asarray(g["node_feat"], dtype=np.float32), labels=labels,
                       train_idx=split["train"], val_idx=split["valid"], test_idx=split["test"],
                       num_classes=40, directed=False, extra_arrays=extra)


@pytest.mark.parametrize("binary", [False, True])
def test_ogb_streaming_is_byte_identical(tmp_path, small_chunks, binary, monkeypatch):
    from gnnflow.data.ogb import prepare_ogb

    monkeypatch.setattr("gnnflow.data.ogb._FEATURE_CHUNK_ROWS", 50)
    name = "ogbn-papers100M" if binary else "ogbn-arxiv"
    root = write_ogb_raw(tmp_path / "raw" / name.replace("-", "_"), num_nodes=400,
                         num_edges=5000, seed=3, feature_dim=6, binary=binary)
    if binary:  # papers100M's classes
        np.savez(root / "raw" / "node-label.npz",
                 node_label=np.random.default_rng(0).integers(0, 40, (400, 1)).astype(float))
    s = prepare_ogb(name, tmp_path / "g", raw_dir=tmp_path / "raw")
    ref = _ogb_in_memory(root, tmp_path / "ref", binary)
    if binary:
        assert s.num_classes == 172  # the table's; the reference says 40: meta only
    _same_files(s, ref)
    assert s.extra["node_year"].shape == (400,) and s.features.shape == (400, 6)
