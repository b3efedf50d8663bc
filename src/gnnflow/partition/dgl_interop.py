"""Write a gnnflow partition book in the layout ``dgl.distributed.load_partition`` reads.

The DistDGL baseline must train on the SAME partitions as gnnflow's strategies.
DGL 1.1.3's layout (``<graph_name>.json``, ``part<i>/graph.dgl``,
``node_feat.dgl``, ``edge_feat.dgl``, vertices relabelled so each part's inner
vertices are a contiguous id range) is produced by DGL's own writer,
``dgl.distributed.partition_graph``, with its node-assignment step
(``metis_partition_assignment``) replaced for the duration of the call by the
book's ``node_part``.  Everything after the assignment (halo construction,
reshuffling, feature splitting, JSON) is DGL's code, so the output is exactly
what DGL would have written for that assignment.

A two-level book (DistDGLv2 §4.1.2) becomes DGL parts = machines with
``num_trainers_per_machine = W`` and the worker id as DGL's ``trainer_id``.

``orig_nids.npy`` in the output maps DGL's reshuffled ids back to gnnflow ids
(``orig_nids[dgl_id] = gnnflow_id``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.io import atomic_dir

NODE_DATA = ("feat", "label", "train_mask", "val_mask", "test_mask")


def store_to_dgl(store: Any) -> Any:
    """The graph store as a DGLGraph (edges src -> dst) with feat/label/*_mask node data."""
    import dgl
    import torch

    from gnnflow.partition.metrics import edge_dst

    indptr = np.asarray(store.indptr)
    g = dgl.graph((torch.from_numpy(np.array(store.indices, dtype=np.int64)),
                   torch.from_numpy(edge_dst(indptr))), num_nodes=store.num_nodes)
    if store.features is not None:
        g.ndata["feat"] = torch.from_numpy(np.array(store.features))
    g.ndata["label"] = torch.from_numpy(np.array(store.labels, dtype=np.int64))
    for split in ("train", "val", "test"):
        mask = torch.zeros(store.num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(np.array(store.split(split), dtype=np.int64))] = True
        g.ndata[f"{split}_mask"] = mask
    return g


@contextlib.contextmanager
def _assignment(node_part: np.ndarray) -> Any:
    import torch
    from dgl.distributed import partition as dgl_partition

    original = dgl_partition.metis_partition_assignment

    def given(sim_g: Any, k: int, *args: Any, **kwargs: Any) -> Any:
        assert k == int(node_part.max()) + 1, (k, int(node_part.max()) + 1)
        return torch.from_numpy(node_part.astype(np.int64))

    dgl_partition.metis_partition_assignment = given
    try:
        yield
    finally:
        dgl_partition.metis_partition_assignment = original


def write_dgl_partitions(book: Any, store: Any, out_dir: str | os.PathLike[str], graph_name: str,
                         overwrite: bool = False, quiet: bool = True, self_loops: bool = False) -> Path:
    """Write ``book``'s partitions in DGL 1.1.3's layout; return the path of ``<graph_name>.json``.
    ``self_loops``: of A + I (each vertex's own loop, in its own partition)."""
    from dgl.distributed import partition_graph

    from gnnflow.partition.api import open_graph
    from gnnflow.partition.book import PartitionBook

    if not isinstance(book, PartitionBook):
        book = PartitionBook.open(book)
    store = open_graph(store)
    node_part = np.asarray(book.node_part, dtype=np.int64)
    levels = book.levels
    trainers = int(levels[1]) if levels else 1
    num_parts = book.num_parts // trainers
    g = store_to_dgl(store)
    if self_loops:
        import dgl

        g = dgl.add_self_loop(g)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        sink = io.StringIO()
        with _assignment(node_part), contextlib.redirect_stdout(sink):
            orig_nids, _orig_eids = partition_graph(
                g, graph_name, num_parts, str(tmp), num_hops=int(book.meta.get("halo_hops", 1)),
                part_method="metis", return_mapping=True, num_trainers_per_machine=trainers)
        if not quiet:
            print(sink.getvalue(), end="")
        np.save(tmp / "orig_nids.npy", np.asarray(orig_nids, dtype=np.int64))
        cfg_file = tmp / f"{graph_name}.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["gnnflow"] = {"book": str(book.path.resolve()), "method": book.method,
                          "num_worker_parts": book.num_parts, "trainers_per_machine": trainers}
        cfg_file.write_text(json.dumps(cfg, indent=4, sort_keys=True))
    return out_dir / f"{graph_name}.json"
