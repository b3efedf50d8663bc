"""Stores and books are validated when written and opened cheaply; `gnnflow check` runs
the full scan (issue 19.2); a book knows the fingerprint of the graph it came from (issue 17)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from gnnflow.cli import main as cli
from gnnflow.data.meta import read_store_meta, store_fingerprint
from gnnflow.data.store import open_store
from gnnflow.data.synthetic import prepare_synthetic
from gnnflow.errors import StoreError
from gnnflow.partition.api import partition_graph
from gnnflow.partition.book import PartitionBook, check_book_matches_graph


@pytest.fixture
def graph_book(tmp_path):
    store = prepare_synthetic(tmp_path / "g", num_nodes=600, avg_degree=6, feature_dim=4)
    book = partition_graph(store, "random", 3, tmp_path / "b", seed=0)
    return store.path, book.path


def _poke(path, index, value):
    """Overwrite one element of a .npy file in place (size and header unchanged)."""
    arr = np.load(path, mmap_mode="r+")
    arr[index] = value
    arr.flush()
    del arr


def test_written_meta_records_validation_and_fingerprint(graph_book):
    g, b = graph_book
    meta = json.loads((g / "meta.json").read_text())
    assert meta["fingerprint"] == store_fingerprint(read_store_meta(g)) and len(meta["fingerprint"]) == 64
    assert meta["validated"]["indices_range"] == [0, 599] and meta["validated"]["features_finite"]
    bmeta = json.loads((b / "meta.json").read_text())
    assert bmeta["graph_fingerprint"] == meta["fingerprint"] and bmeta["validated"]
    assert {"node_part.npy", "part0/indices.npy", "part2/features.npy"} <= set(bmeta["checksums"])


def test_check_ok(graph_book, capsys):
    g, b = graph_book
    assert cli(["check", str(g), str(b)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{g}: OK (graph store)", f"{b}: OK (partition book)"]


def test_open_is_cheap_check_is_full(graph_book, capsys, monkeypatch):
    """A corrupt entry in a big array is not scanned for on open, but `check` finds it."""
    g, _ = graph_book
    monkeypatch.setattr("gnnflow.data.store.SMALL_FILE", 0)  # indices counts as big here
    _poke(g / "indices.npy", 17, 10_000)
    _poke(g / "indptr.npy", 300, 0)
    open_store(g)  # no scan of indices or indptr
    assert cli(["check", str(g)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{g / 'indptr.npy'}: decreases at entry 300; the CSR is corrupt (re-run `gnnflow prepare`)" in out
    assert (f"{g / 'indices.npy'}: entry 17 is vertex id 10000, out of range [0, 600); the CSR is "
            "corrupt (re-run `gnnflow prepare`)") in out
    assert any(ln.startswith(f"{g / 'indices.npy'}: checksum differs") for ln in out)
    assert len(out) == 4  # + indptr's checksum


def test_check_finds_bad_features_and_labels(graph_book, capsys):
    g, _ = graph_book
    _poke(g / "features.npy", (5, 1), np.nan)
    _poke(g / "labels.npy", 9, 99)
    assert cli(["check", str(g)]) == 1
    out = capsys.readouterr().out
    assert f"{g / 'features.npy'}: row 5, column 1 is nan" in out
    assert f"{g / 'labels.npy'}: vertex 9 has label 99, outside [-1, 8)" in out


def test_small_file_checked_on_open(graph_book):
    g, _ = graph_book
    idx = np.load(g / "val_idx.npy")
    _poke(g / "val_idx.npy", 0, idx[1])
    with pytest.raises(StoreError, match="val_idx.npy: checksum differs from meta.json"):
        open_store(g)


def test_truncated_file_is_one_line_on_open(graph_book):
    g, b = graph_book
    f = g / "indices.npy"
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(StoreError) as exc:
        open_store(g)
    msg = str(exc.value)
    assert msg.startswith(f"{f}: ") and "header" in msg and "truncated" in msg and "\n" not in msg
    p = b / "part1" / "indices.npy"
    p.write_bytes(p.read_bytes()[:-8])
    with pytest.raises(StoreError, match="part1/indices.npy: .* truncated"):
        PartitionBook(b).load_part(1)


def test_check_book_finds_corrupt_part(graph_book, capsys):
    g, b = graph_book
    _poke(b / "part1" / "indices.npy", 3, 10**6)
    inner = np.load(b / "part2" / "inner_ids.npy")
    _poke(b / "node_part.npy", int(inner[0]), 0)
    assert cli(["check", str(b)]) == 1
    out = capsys.readouterr().out
    assert f"{b / 'part1' / 'indices.npy'}: entry 3 is local id 1000000" in out
    assert f"{b / 'part2' / 'inner_ids.npy'}: holds vertices that node_part.npy puts in another part" in out
    assert f"{b / 'node_part.npy'}: checksum differs" in out
    with pytest.raises(StoreError, match="node_part.npy: checksum differs"):
        PartitionBook(b)  # a small top-level file is checked on open


def test_book_matches_graph(graph_book, tmp_path, caplog):
    g, b = graph_book
    check_book_matches_graph(b, g)
    # Another graph with the same shape: caught by the fingerprint, not by counts.
    other = prepare_synthetic(tmp_path / "other", num_nodes=600, avg_degree=6, feature_dim=4, seed=1)
    with pytest.raises(StoreError) as exc:
        check_book_matches_graph(b, other.path)
    fp = json.loads((g / "meta.json").read_text())["fingerprint"]
    assert str(exc.value).startswith(f"{b} was partitioned from {g.resolve()} (fingerprint {fp[:16]}), "
                                     f"not {other.path} (fingerprint ")
    assert str(exc.value).endswith("; re-run `gnnflow partition "
                                   f"{other.path} ...` for this graph")
    # The same path prepared again with other content.
    prepare_synthetic(g, num_nodes=600, avg_degree=6, feature_dim=4, seed=2, overwrite=True)
    with pytest.raises(StoreError, match="partitioned from an earlier version of"):
        check_book_matches_graph(b, g)


def test_old_book_without_fingerprint_warns(graph_book, tmp_path, caplog):
    g, b = graph_book
    meta = json.loads((b / "meta.json").read_text())
    del meta["graph_fingerprint"]
    (b / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="gnnflow"):
        check_book_matches_graph(b, g)  # same counts: accepted
    assert "no fingerprint" in caplog.text
    small = prepare_synthetic(tmp_path / "small", num_nodes=500, avg_degree=6, feature_dim=4)
    with pytest.raises(StoreError, match="num_nodes 600.*num_nodes 500"):
        check_book_matches_graph(b, small.path)
