"""DGL interop: the book written in DGL's layout loads with dgl.distributed.load_partition."""

from __future__ import annotations

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
