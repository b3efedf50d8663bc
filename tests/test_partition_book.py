"""Partition book layout and the random method."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gnnflow.errors import ConfigError, StoreError
from gnnflow.partition import local_ids as local_ids_module
from gnnflow.partition.api import partition_graph
from gnnflow.partition.book import PartitionBook
from gnnflow.partition.local_ids import LocalIds


def test_random_book_roundtrip(tiny_store, tmp_path):
    book = partition_graph(tiny_store, "random", 3, tmp_path / "p", seed=1, halo_hops=2)
    assert book.num_parts == 3 and book.method == "random"
    node_part = np.asarray(book.node_part)
    assert node_part.dtype == np.int32 and node_part.shape == (200,)
    assert np.bincount(node_part).tolist() in ([67, 67, 66],)
    meta = json.loads((tmp_path / "p" / "meta.json").read_text())
    assert {"partition_s", "write_s"} <= set(meta["timings"]) and "edge_cut_pct" in meta["quality"]
    s = tiny_store
    seen = []
    for i in range(3):
        part = book.load_part(i)
        seen.append(part.inner_ids)
        assert np.all(np.diff(part.inner_ids) > 0) and np.all(node_part[part.inner_ids] == i)
        assert np.all(node_part[part.halo_ids] != i)
        # local CSR reproduces the global in-neighbour lists of inner vertices
        for r, v in enumerate(part.inner_ids[:20]):
            glob = part.local_to_global[part.indices[part.indptr[r]:part.indptr[r + 1]]]
            assert glob.tolist() == s.indices[s.indptr[v]:s.indptr[v + 1]].tolist()
        assert isinstance(part.features, np.memmap)
        np.testing.assert_array_equal(part.features, s.features[part.inner_ids])
        np.testing.assert_array_equal(part.labels, s.labels[part.inner_ids])
        np.testing.assert_array_equal(part.train_idx, np.intersect1d(s.train_idx, part.inner_ids))
        # id maps
        lid = part.global_to_local(part.local_to_global)
        np.testing.assert_array_equal(lid, np.arange(part.num_local))
        absent = np.setdiff1d(np.arange(200), part.local_to_global)
        assert np.all(part.global_to_local(absent) == -1)
        hop2 = part.khop_halo(2)
        assert np.intersect1d(hop2, part.local_to_global).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(200))


def test_bad_parts_no_output(tiny_store, tmp_path):
    for p in (0, -1, 201):
        with pytest.raises(ConfigError, match="--parts"):
            partition_graph(tiny_store, "random", p, tmp_path / "x")
    with pytest.raises(ConfigError, match="unknown partition method"):
        partition_graph(tiny_store, "nope", 2, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".x")]


def test_bad_graph_dir(tmp_path):
    (tmp_path / "g").mkdir()
    with pytest.raises(StoreError, match="meta.json"):
        partition_graph(tmp_path / "g", "random", 2, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(StoreError):
        PartitionBook.open(tmp_path / "g")


def test_write_rows_in_chunks_from_memmap(tmp_path):
    from gnnflow.partition.book import _write_rows

    src = np.lib.format.open_memmap(tmp_path / "src.npy", mode="w+", dtype=np.float32, shape=(1000, 3))
    src[:] = np.arange(3000, dtype=np.float32).reshape(1000, 3)
    src.flush()
    src = np.load(tmp_path / "src.npy", mmap_mode="r")
    rows = np.sort(np.random.default_rng(0).choice(1000, 300, replace=False))
    _write_rows(tmp_path / "out.npy", src, rows, chunk_bytes=64 * 3 * 4)  # 64 rows: 5 chunks, the last partial
    out = np.load(tmp_path / "out.npy", mmap_mode="r")
    assert out.dtype == np.float32 and out.shape == (300, 3)
    np.testing.assert_array_equal(out, src[rows])


def test_constraint_weights_at_idx_width_match_int64(tiny_store):
    from gnnflow.io import as_idx
    from gnnflow.partition.constraints import constraint_weights

    names = ["vertices", "train", "edges"]
    w64 = constraint_weights(tiny_store, names)
    w32 = constraint_weights(tiny_store, names, dtype=np.int32)
    assert w32.dtype == np.int32 and w32.shape == (200, 3)
    np.testing.assert_array_equal(w32, w64)
    assert w64[:, 0].sum() == 200 and w64[:, 1].sum() == len(tiny_store.train_idx)
    assert w64[:, 2].sum() == tiny_store.num_edges
    # the memory-mapped int64 CSR converted chunk by chunk equals a plain cast
    ix = as_idx(tiny_store.indices, np.int32, chunk=7)
    assert ix.dtype == np.int32
    np.testing.assert_array_equal(ix, np.asarray(tiny_store.indices))


@pytest.mark.parametrize("dense", [True, False])
def test_local_ids_map_and_searchsorted_agree_with_a_dictionary(dense, monkeypatch):
    if not dense:
        monkeypatch.setattr(local_ids_module, "DENSE_IDS_PER_LOCAL", 0)
    rng = np.random.default_rng(0)
    ids = rng.choice(5000, size=1500, replace=False)
    inner, halo = np.sort(ids[:1000]), np.sort(ids[1000:])
    lookup = LocalIds(inner, halo)
    assert (lookup.dense is not None) == dense
    local = {int(g): i for i, g in enumerate(np.concatenate([inner, halo]))}
    span = int(ids.max()) + 1
    for query in (rng.integers(0, span, 3000),  # inside the span: present and absent ids
                  np.array([-5, span, span + 100, int(inner[0]), int(halo[-1])]),  # outside it too
                  np.zeros(0, dtype=np.int64)):
        got = lookup(query)
        assert got.dtype == np.int64 and got.shape == query.shape
        assert got.tolist() == [local.get(int(q), -1) for q in query]
