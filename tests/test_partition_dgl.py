"""DGL interop: the book written in DGL's layout loads with dgl.distributed.load_partition."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gnnflow.partition.api import partition_graph
from gnnflow.partition.dgl_interop import write_dgl_partitions


@pytest.mark.parametrize("method,kw,parts", [("metis", {}, 2), ("two-level", {"levels": "2x2"}, 4)])
def test_dgl_load_partition_same_parts(tiny_store, tmp_path, method, kw, parts):
    import dgl

    book = partition_graph(tiny_store, method, parts, tmp_path / "book", **kw)
    cfg = write_dgl_partitions(book, tiny_store, tmp_path / "dgl", "tiny")
    assert cfg.name == "tiny.json"
    orig = np.load(tmp_path / "dgl" / "orig_nids.npy")
    machines = 2
    for i in range(machines):
        g, node_feats, _edge_feats, gpb, name, ntypes, _etypes = dgl.distributed.load_partition(str(cfg), i)
        assert name == "tiny" and gpb.num_partitions() == machines
        inner = g.ndata["inner_node"].bool().numpy()
        dgl_ids = g.ndata[dgl.NID].numpy()[inner]
        ours = orig[dgl_ids]
        if book.levels:
            expect = np.flatnonzero(np.asarray(book.node_machine) == i)
        else:
            expect = book.load_part(i).inner_ids
        np.testing.assert_array_equal(np.sort(ours), expect)
        # features follow the vertices
        feats = node_feats["_N/feat"].numpy()
        np.testing.assert_array_equal(feats, tiny_store.features[ours])
        np.testing.assert_array_equal(node_feats["_N/train_mask"].numpy().astype(bool),
                                      np.isin(ours, tiny_store.train_idx))
        if book.levels:
            trainer = node_feats["_N/trainer_id"].numpy()
            np.testing.assert_array_equal(trainer, np.asarray(book.node_part)[ours])


# ---- the part-by-part writer against DGL's own ------------------------------------------

def _dgl_layout(root, writer: str, loops: bool) -> dict:
    """One writer's output read back: JSON, orig_nids and per part (graph, node data, edge data)."""
    from dgl.data.utils import load_graphs, load_tensors

    out = root.parent / f"{root.name}-{writer}-{int(loops)}"
    cfg = write_dgl_partitions(root / "book", root / "graph", out, "g", self_loops=loops, writer=writer)
    conf = json.loads(cfg.read_text())
    parts = [(load_graphs(str(out / f"part{p}" / "graph.dgl"))[0][0],
              load_tensors(str(out / f"part{p}" / "node_feat.dgl")),
              load_tensors(str(out / f"part{p}" / "edge_feat.dgl"))) for p in range(conf["num_parts"])]
    return {"json": conf, "orig_nids": np.load(out / "orig_nids.npy"), "parts": parts}


def _edges(g) -> np.ndarray:
    """(src DGL id, dst DGL id, inner_edge) of every edge, as sorted rows."""
    src, dst = (t.numpy() for t in g.edges())
    nid = g.ndata["_ID"].numpy()
    rows = np.stack([nid[src], nid[dst], g.edata["inner_edge"].numpy().astype(np.int64)], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def _edge_ids_consistent(parts, edge_map) -> None:
    """Every edge of every part carries the DGL id its destination's part gives it: inner edges
    fill their part's edge_map range, and each id names one (src, dst) everywhere."""
    by_id = {}
    for p, (g, _n, _e) in enumerate(parts):
        inner = g.edata["inner_edge"].numpy().astype(bool)
        eid = g.edata["_ID"].numpy()
        np.testing.assert_array_equal(np.sort(eid[inner]), np.arange(*edge_map[p]))
        src, dst = (g.ndata["_ID"].numpy()[t.numpy()] for t in g.edges())
        for e, s, d in zip(eid, src, dst, strict=True):
            assert by_id.setdefault(int(e), (int(s), int(d))) == (int(s), int(d))


@pytest.fixture(scope="module")
def synthetic_books(tmp_path_factory):
    from gnnflow.data.synthetic import prepare_synthetic

    tmp = tmp_path_factory.mktemp("dglwriter")
    store = prepare_synthetic(tmp / "graph", num_nodes=1500)
    directed = _directed_store(tmp / "directed")
    roots = {}
    for name, graph in (("undirected", store.path), ("directed", directed.path)):
        for k in (2, 3):
            root = tmp / f"{name}{k}"
            root.mkdir()
            (root / "graph").symlink_to(graph)
            partition_graph(graph, "metis", k, root / "book")
            roots[name, k] = root
    return roots


def _directed_store(path):
    """A random graph with 60% of each undirected pair's directions kept: out-neighbours that
    are not in-neighbours, the halo vertices DGL adds after the in-neighbours."""
    from conftest import random_store_arrays

    from gnnflow.data.store import write_store

    arrays = random_store_arrays(num_nodes=600, avg_degree=8)
    indptr, indices = arrays.pop("indptr"), arrays.pop("indices")
    keep = np.random.default_rng(1).random(indices.shape[0]) < 0.6
    dst = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))[keep]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=indptr.shape[0] - 1))])
    return write_store(path, name="directed", source="test", directed=True, indptr=indptr,
                       indices=indices[keep], **arrays)


@pytest.mark.parametrize("loops", [False, True], ids=["A", "A+I"])
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("graph", ["undirected", "directed"])
def test_shard_writer_matches_dgl_writer(synthetic_books, graph, k, loops):
    """The part-by-part writer writes DGL's layout: the same JSON, orig_nids, node data and
    per part the same vertices in the same local order (``_ID``, ``inner_node``, ``part_id``)
    and the same edges (endpoints, ``inner_edge``; edge ids are DGL's ranges per part, ordered
    row by row where DGL's unstable sort leaves them in another order inside a part)."""
    ours, dgls = (_dgl_layout(synthetic_books[graph, k], w, loops) for w in ("shards", "dgl"))
    assert ours["json"] == dgls["json"]
    np.testing.assert_array_equal(ours["orig_nids"], dgls["orig_nids"])
    for (g, nfeat, efeat), (dg, dnfeat, defeat) in zip(ours["parts"], dgls["parts"], strict=True):
        assert list(g.ndata) == list(dg.ndata) and list(g.edata) == list(dg.edata)
        for name in dg.ndata:
            assert g.ndata[name].dtype == dg.ndata[name].dtype
            np.testing.assert_array_equal(g.ndata[name].numpy(), dg.ndata[name].numpy())
        assert all(g.edata[name].dtype == dg.edata[name].dtype for name in dg.edata)
        np.testing.assert_array_equal(_edges(g), _edges(dg))
        assert g.formats() == dg.formats()
        assert list(nfeat) == list(dnfeat) and efeat == defeat == {}
        for name in dnfeat:
            assert nfeat[name].dtype == dnfeat[name].dtype
            np.testing.assert_array_equal(nfeat[name].numpy(), dnfeat[name].numpy())
    for layout in (ours, dgls):
        _edge_ids_consistent(layout["parts"], layout["json"]["edge_map"]["_N:_E:_N"])
    for g, _n, _e in ours["parts"]:  # inner edges: rows in DGL's node order
        inner = g.edata["inner_edge"].numpy().astype(bool)
        dst = g.ndata["_ID"].numpy()[g.edges()[1].numpy()][inner]
        assert (np.diff(dst[np.argsort(g.edata["_ID"].numpy()[inner])]) >= 0).all()


def test_shard_writer_dispatch(synthetic_books, tmp_path):
    """One-level books with one-hop halos take the shard writer; others DGL's, and asking
    for the shard writer there is refused."""
    from gnnflow.errors import ConfigError
    from gnnflow.partition.book import PartitionBook
    from gnnflow.partition.dgl_interop import dgl_writer_for

    root = synthetic_books["undirected", 2]
    assert dgl_writer_for(PartitionBook(root / "book"))[0] == "shards"
    two = partition_graph(root / "graph", "two-level", 4, tmp_path / "two", levels="2x2")
    assert dgl_writer_for(two)[0] == "dgl"
    with pytest.raises(ConfigError, match="does not cover"):
        write_dgl_partitions(two, root / "graph", tmp_path / "out", "g", writer="shards")
