"""Typed partition books (DistDGLv2 §4.1.1, §4.1.4): a part of a homogenized store keeps each local
CSR entry's relation (rows grouped by relation, as the store's), the vertex types of its inner and
halo vertices, and per featured type the feature rows of its inner vertices at their own width."""

from __future__ import annotations

import numpy as np
import pytest

from gnnflow.data.csr import gather_rows
from gnnflow.data.hetero_synthetic import prepare_synthetic_hetero
from gnnflow.partition.api import partition_graph
from gnnflow.partition.book import PartitionBook, scan_book


@pytest.fixture(scope="module")
def typed_book(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("typed-book")
    store = prepare_synthetic_hetero(tmp / "h", num_papers=300, num_authors=400, num_institutions=10,
                                     num_fields=30, num_classes=4)
    return store, partition_graph(store.path, "random", 3, tmp / "book", seed=2)


def test_parts_carry_relations_types_and_per_type_features(typed_book):
    store, book = typed_book
    meta = store.meta
    offsets = np.asarray(meta.node_type_offsets)
    assert book.meta.typed["node_types"] == meta.node_types and book.meta.typed["num_rels"] == len(meta.edge_types)
    assert book.meta.typed["type_features"] == meta.type_feature_dims  # institutions: featureless
    for i in range(book.num_parts):
        part = book.load_part(i)
        _, want = gather_rows(store.indptr, store.extra["edge_type"], part.inner_ids)
        assert part.edge_types.dtype == np.int8 and np.array_equal(part.edge_types, want)
        # the local CSR is the store's rows in order, so a row's entries stay grouped by relation
        rows = np.repeat(np.arange(part.num_inner), np.diff(part.indptr))
        assert (np.lexsort((part.edge_types, rows)) == np.arange(part.num_edges)).all()
        ids = part.local_to_global
        assert np.array_equal(part.node_types, np.searchsorted(offsets, ids, side="right") - 1)
        assert sorted(part.type_features) == sorted(meta.type_feature_dims)
        for t, name in enumerate(meta.node_types):
            if name not in meta.type_feature_dims:
                continue
            mine = part.inner_ids[part.node_types[: part.num_inner] == t] - offsets[t]
            assert np.array_equal(part.type_features[name], np.asarray(store.extra[f"features_{name}"])[mine])
        assert book.meta.typed["inner_per_type"][i] == np.bincount(part.node_types[: part.num_inner],
                                                                     minlength=len(meta.node_types)).tolist()
    assert scan_book(book.path, show_progress=False) == []


def test_scan_names_a_part_whose_relations_are_out_of_order(typed_book, tmp_path):
    import shutil

    _, book = typed_book
    copy = tmp_path / "book"
    shutil.copytree(book.path, copy)
    f = copy / "part1" / "edge_type.npy"
    et = np.load(f)
    np.save(f, et[::-1].copy())  # same relations, rows no longer grouped
    problems = scan_book(copy, checksums=False, show_progress=False)
    assert any("part1/edge_type.npy" in p and "not grouped by relation" in p for p in problems), problems
    np.save(copy / "part1" / "features_paper.npy", np.zeros((1, 3), dtype=np.float32))
    problems = scan_book(copy, checksums=False, show_progress=False)
    assert any("part1/features_paper.npy" in p and "inner vertices of type paper" in p for p in problems)
    assert all("\n" not in p for p in problems)
    # an untyped reader of the same book still sees its arrays
    assert PartitionBook(copy, verify=False).load_part(0, verify=False).features is not None


def test_ogbn_mag_keeps_featureless_types_featureless(tmp_path, capsys):
    """OGB's mag layout: only papers have features; the store, its typed book and a relational
    model's schema keep authors, institutions and fields featureless (their rows are learned)."""
    from test_data_ogb import write_mag_like

    from gnnflow.cli import main as cli
    from gnnflow.config import TrainConfig
    from gnnflow.data.store import open_store
    from gnnflow.strategies.relational import TypedGraph, make_embeddings

    write_mag_like(tmp_path / "mag")
    assert cli(["prepare", "ogbn-mag", "--raw-dir", str(tmp_path / "mag"), "--out", str(tmp_path / "g")]) == 0
    capsys.readouterr()
    s = open_store(tmp_path / "g")
    assert s.meta.type_feature_dims == {"paper": 4}
    assert [k for k in s.extra if k.startswith("features_")] == ["features_paper"]
    book = partition_graph(s.path, "random", 2, tmp_path / "book", seed=0)
    for i in range(2):
        assert sorted(f.name for f in (book.path / f"part{i}").glob("features_*.npy")) == ["features_paper.npy"]
    typed = TypedGraph(s)
    assert typed.schema.feature_dims == (None, None, None, 4)  # author, field_of_study, institution, paper
    emb = make_embeddings(typed.schema, typed.offsets, np.arange(s.num_nodes),
                          TrainConfig(graph=str(s.path), model="rgcn", hidden=8))
    assert emb.owned.tolist() == list(range(20))  # every author, field and institution: a learned row
