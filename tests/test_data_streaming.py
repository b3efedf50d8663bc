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
    sa, sb = a.meta.checksums, b.meta.checksums
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


@pytest.mark.parametrize(("symmetrize", "bitmap"), [(True, True), (False, True), (True, False)])
def test_snap_streaming_is_byte_identical(tmp_path, small_chunks, monkeypatch, symmetrize, bitmap):
    from gnnflow.data.snap import _IdSet, prepare_snap

    if not bitmap:  # ids past the bitmap's limit: sorted unique ids and binary search
        monkeypatch.setattr(_IdSet, "BITMAP_LIMIT", 100)
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


# sha256 of every array written by the in-memory homogenization (commit c7273e0, before the
# on-disk CSR build) for the fixtures below; the streaming conversion must write the same bytes.
# Since rows are grouped by edge type (typed sampling), ``indices``, ``edge_id`` and ``edge_type``
# are c7273e0's with every row stably sorted by edge type (checked array by array against the
# previous streaming conversion, bc7fb81; every other array is unchanged).
GOLDEN_HETERO = {
    "mag": {
        "edge_id.npy": "ebf4feb432e9b58b6a99cdcf1201e83ec51931df72d00b8309dd8be5492eb56b",
        "edge_type.npy": "c4442c1929bf0a783e55f25f3a85b9cac82c8af1b7d0521d9eb13b0022c4aa65",
        "features.npy": "9cef58572b8824729035c0fb88c4604fed19405563660127170771755d6f0866",
        "features_paper.npy": "31e9e312f40218a2bb7e824959c6ee991c5779aab39cc6333d93c65197ed408b",
        "indices.npy": "84b482858c8a9d1629613905b48a24c199e79dc9003999c899940a3aab9fa701",
        "indptr.npy": "9f9c53b31eacf12709ec05c1af6d4df05b1b1211297e97d0057faf5f285a9873",
        "labels.npy": "06a6b20d6ab9c061ec5ce189fc3b5078d727800e35c85a06f12301412b4c6cf2",
        "node_type.npy": "fdf6003d586bc6008d25e0a0b64739d1e443dfdfafe4d2b747a4d82c14b931db",
        "test_idx.npy": "500e468b9050ba993aec657d72f7952045a03b920f7de3cec7ccf29ed44a288a",
        "train_idx.npy": "7a69985ddc778b953e3a4bfdea54f749248173493218aae1693602b3e172c004",
        "val_idx.npy": "26b4c71fa89f1d0484ae6119ec9aa373fd123e15c5f948fca3e0a6b5e8672834"
    },
    "mag_noreverse_zero": {
        "edge_id.npy": "7528bd1fe5258d7c16b4a2d4db43cba63c5e300281f70b2ce520e79fb693f44f",
        "edge_type.npy": "bce4608ed475b80c56908adf08afe711923c57a86f88052ba6286d0057bb16c2",
        "features.npy": "1a7c23d4fce5c0eff8ecbbce7555bbef1608627ca39f8f0628796ec8fce55f86",
        "features_paper.npy": "31e9e312f40218a2bb7e824959c6ee991c5779aab39cc6333d93c65197ed408b",
        "indices.npy": "174a41bbde3c74855d22494f281bbc669936ca064a29a8ad3e7e0b9a0695bcec",
        "indptr.npy": "cf5a3c1ab57c02895b9bd61801e30903b0c80df8a596b67e2471cdb04629878c",
        "labels.npy": "06a6b20d6ab9c061ec5ce189fc3b5078d727800e35c85a06f12301412b4c6cf2",
        "node_type.npy": "fdf6003d586bc6008d25e0a0b64739d1e443dfdfafe4d2b747a4d82c14b931db",
        "test_idx.npy": "500e468b9050ba993aec657d72f7952045a03b920f7de3cec7ccf29ed44a288a",
        "train_idx.npy": "7a69985ddc778b953e3a4bfdea54f749248173493218aae1693602b3e172c004",
        "val_idx.npy": "26b4c71fa89f1d0484ae6119ec9aa373fd123e15c5f948fca3e0a6b5e8672834"
    },
    "synthetic_hetero": {
        "edge_id.npy": "fd5b50d94767ce535ac9826709de379c10e25ee168f6ee80a41f1e63d4120e8e",
        "edge_type.npy": "3b17c6074e428b2945f590ad027c37a98f2e551146305310b358f1787d078e94",
        "features.npy": "39212fc44f3c8a192ac52f71d45de41a9b2f5ce3f93d1d097a071785a8e3b6cf",
        "features_author.npy": "5cc922e77bd99a759a3ee2a02175fc4fc42a3f568d6f71c6e83be373aba1a2db",
        "features_field_of_study.npy": "1513cda3cb111b12377f516245356864c051af9895a4dc7a1f3dd5ae176ec317",
        "features_paper.npy": "74025cd342af09bc2c5449ae295cf8f6689bf953f4c4124fe50f84ccef69e9fc",
        "indices.npy": "09472acff4ca3d8b38a1c5f882f54c552e20dceab0d301d9c68364e61b98ee2a",
        "indptr.npy": "710dcef8a9956f43e31c705f218d94e4d63ffd4af5e32daedf2bbf60cf092f46",
        "labels.npy": "3442e9a264391dbc2afa531ef56c6bc26a71c4255796b2030875790f80754aca",
        "node_type.npy": "27571da853fa486c9dd4c493b009de5665fd1561387b3fd33fca3eb30bc2746a",
        "test_idx.npy": "146aed19ddbc551b258fe9b0857a842b4d3c59ad3f8020506b8aa4b475ec695d",
        "train_idx.npy": "fc99502e09671290028c13176aea26cad2bd2a33d9c68ae2df297c83195e164f",
        "val_idx.npy": "7036dd94b013c23c82b38e9e080fdbcb2c9319c437d0fb3b8e15e213371004fe"
    }
}


@pytest.mark.parametrize("case", sorted(GOLDEN_HETERO))
def test_hetero_streaming_is_byte_identical(tmp_path, small_chunks, case, monkeypatch):
    from gnnflow.data.hetero_synthetic import prepare_synthetic_hetero
    from gnnflow.data.ogb import prepare_ogb
    from tests.test_data_ogb import write_mag_like

    monkeypatch.setattr("gnnflow.data.ogb._FEATURE_CHUNK_ROWS", 4)
    if case == "synthetic_hetero":
        s = prepare_synthetic_hetero(tmp_path / "g")
    else:
        write_mag_like(tmp_path / "mag")
        opts = {"reverse_edges": False, "feature_fill": "zero"} if case == "mag_noreverse_zero" else {}
        s = prepare_ogb("ogbn-mag", tmp_path / "g", raw_dir=tmp_path / "mag", **opts)
    assert s.meta.checksums == GOLDEN_HETERO[case]
