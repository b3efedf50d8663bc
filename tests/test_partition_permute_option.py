"""permute-1d with and without the random permutation (MG-GCN §5.2, Fig. 7)."""

from __future__ import annotations

import numpy as np

from gnnflow.partition.api import partition_graph


def test_no_permute_gives_natural_row_blocks(tiny_store, tmp_path):
    book = partition_graph(tiny_store, "permute-1d", 4, tmp_path / "nat", permute=False)
    n = tiny_store.num_nodes
    expected = np.repeat(np.arange(4), np.diff((np.arange(5) * n) // 4))
    assert np.array_equal(np.asarray(book.node_part), expected)
    permuted = partition_graph(tiny_store, "permute-1d", 4, tmp_path / "perm", seed=1)
    assert not np.array_equal(np.asarray(permuted.node_part), expected)
    assert book.meta.params == {"permute": False}
