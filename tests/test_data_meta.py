"""Typed, versioned meta.json of graph stores and partition books (gnnflow.data.meta,
gnnflow.partition.meta): one reader and one writer each, a round trip that keeps every key, and
one clear line for a file that is not what it should be."""

from __future__ import annotations

import json

import pytest

from gnnflow.data.meta import StoreMeta, read_store_meta, store_fingerprint, write_store_meta
from gnnflow.data.synthetic import prepare_synthetic
from gnnflow.errors import StoreError
from gnnflow.partition.api import partition_graph
from gnnflow.partition.meta import BookMeta, read_book_meta, write_book_meta


@pytest.fixture(scope="module")
def graph_book(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("meta")
    store = prepare_synthetic(tmp / "g", num_nodes=300, avg_degree=4, feature_dim=4)
    book = partition_graph(store, "metis", 2, tmp / "b", seed=0)
    return store.path, book.path


def _round_trip(src, dst, read, write):
    dst.mkdir()
    meta = read(src)
    write(dst, meta)
    again = read(dst)
    return meta, again


def test_store_meta_round_trip_keeps_every_key(graph_book, tmp_path):
    g, _ = graph_book
    meta, again = _round_trip(g, tmp_path / "copy", read_store_meta, write_store_meta)
    assert isinstance(meta, StoreMeta) and again == meta
    assert (tmp_path / "copy" / "meta.json").read_text() == (g / "meta.json").read_text()
    assert meta.num_nodes == 300 and meta.feature_dim == 4 and meta.directed is False
    assert meta.extra["generator"]["num_nodes"] == 300 and meta.extra["random_features"] is False
    assert meta.fingerprint == store_fingerprint(meta)


def test_book_meta_round_trip_keeps_every_key(graph_book, tmp_path):
    _, b = graph_book
    meta, again = _round_trip(b, tmp_path / "copy", read_book_meta, write_book_meta)
    assert isinstance(meta, BookMeta) and again == meta
    assert (tmp_path / "copy" / "meta.json").read_text() == (b / "meta.json").read_text()
    assert meta.method == "metis" and meta.num_parts == 2 and meta.validated is True
    assert meta.levels is None and "levels" in json.loads((b / "meta.json").read_text())  # null kept
    assert meta.extra["backend"] and "edge_cut_pct" in (meta.quality or {})


def test_unknown_keys_go_to_extra_and_come_back(tmp_path):
    data = {"format": "gnnflow-graph-store", "version": 1, "name": "x", "num_nodes": 3, "num_edges": 2,
            "num_classes": 2, "directed": True, "target_node_type": None, "mine": {"a": [1, 2]}}
    meta = StoreMeta.from_dict(data, "here")
    assert meta.extra == {"mine": {"a": [1, 2]}} and meta.target_node_type is None
    write_store_meta(tmp_path, meta)
    assert json.loads((tmp_path / "meta.json").read_text()) == data  # null kept, absent stays absent
    assert meta.with_keys({"num_train": 1, "other": 5}).to_dict() == {**data, "num_train": 1, "other": 5}


def _store(**change):
    data = {"format": "gnnflow-graph-store", "version": 1, "name": "x", "num_nodes": 3, "num_edges": 2,
            "num_classes": 2, "directed": True}
    data.update(change)
    return {k: v for k, v in data.items() if v is not ...}


BAD = [
    ("foreign format", json.dumps(_store(format="something-else")),
     "format is 'something-else', expected 'gnnflow-graph-store'"),
    ("a book", json.dumps({"format": "gnnflow-partition-book", "version": 1}),
     "format is 'gnnflow-partition-book', expected 'gnnflow-graph-store'"),
    ("not an object", "[1, 2]", "format is None"),
    ("older version", json.dumps(_store(version=0)), "version 0 is older than this gnnflow reads (version 1)"),
    ("newer version", json.dumps(_store(version=2)), "version 2 is newer than this gnnflow reads (version 1); "
     "upgrade gnnflow"),
    ("no version", json.dumps(_store(version=...)), "version is null, expected 1"),
    ("missing key", json.dumps(_store(num_edges=...)), "missing key 'num_edges'"),
    ("wrong type", json.dumps(_store(num_nodes="3")), "num_nodes must be an integer, got \"3\""),
    ("bool for a count", json.dumps(_store(num_classes=True)), "num_classes must be an integer, got true"),
    ("wrong nested type", json.dumps(_store(node_types=["a", 1])), "node_types must be a list of strings"),
    ("invalid JSON", '{"format": "gnnflow-graph-store",', "not valid JSON"),
]


@pytest.mark.parametrize("what,text,expect", BAD, ids=[b[0] for b in BAD])
def test_a_bad_store_meta_is_one_line_naming_the_file(tmp_path, what, text, expect):
    d = tmp_path / "g"
    d.mkdir()
    (d / "meta.json").write_text(text)
    with pytest.raises(StoreError) as exc:
        read_store_meta(d)
    msg = str(exc.value)
    assert msg.startswith(f"{d / 'meta.json'}: ") and expect in msg and "\n" not in msg
    if what not in ("foreign format", "a book", "not an object", "newer version"):
        assert "re-run `gnnflow prepare`" in msg
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["g", "meta.json"]  # nothing written


def test_a_bad_book_meta_names_gnnflow_partition(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"format": "gnnflow-partition-book", "version": 1,
                                                    "method": "random", "num_parts": "2", "num_nodes": 4}))
    with pytest.raises(StoreError, match=r"meta.json: num_parts must be an integer, got \"2\"; "
                                         r"re-run `gnnflow partition`"):
        read_book_meta(tmp_path)
    with pytest.raises(StoreError, match="no such partition book directory"):
        read_book_meta(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match=r"meta.json: missing; .* is not a gnnflow graph store"):
        read_store_meta(tmp_path / "empty")


def test_a_meta_no_reader_would_accept_is_not_written(tmp_path, graph_book):
    g, b = graph_book
    bad = read_store_meta(g)
    bad.num_edges = "many"  # type: ignore[assignment]
    with pytest.raises(StoreError, match="num_edges must be an integer"):
        write_store_meta(tmp_path, bad)
    book = read_book_meta(b)
    book.staged_parts = [0, "1"]  # type: ignore[list-item]
    with pytest.raises(StoreError, match="staged_parts must be a list of integers"):
        write_book_meta(tmp_path, book)
    assert list(tmp_path.iterdir()) == []  # neither meta.json nor a temporary file


def test_writing_replaces_the_file_atomically(tmp_path, graph_book):
    g, _ = graph_book
    meta = read_store_meta(g)
    write_store_meta(tmp_path, meta)
    meta.extra["note"] = "second"
    write_store_meta(tmp_path, meta)
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]
    assert read_store_meta(tmp_path).extra["note"] == "second"
