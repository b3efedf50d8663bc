"""Write a gnnflow partition book in the layout ``dgl.distributed.load_partition`` reads.

The DistDGL baseline must train on the SAME partitions as gnnflow's strategies, in
DGL 1.1.3's layout: ``<graph_name>.json``, ``part<i>/graph.dgl``, ``node_feat.dgl``,
``edge_feat.dgl``, vertices relabelled so each part's inner vertices are a contiguous id
range.  ``orig_nids.npy`` maps DGL's reshuffled ids back to gnnflow ids
(``orig_nids[dgl_id] = gnnflow_id``).  Two writers, chosen by :func:`dgl_writer_for`:

* ``shards`` (one-level books of two or more parts with one-hop halos, every part present:
  the DistDGL peer's case) builds the layout part by part from the book's own shards, so
  memory is about one part (plus a few N-long id vectors), never the whole graph.  It
  writes what DGL's ``partition_graph(..., num_hops=1)`` writes for the book's
  ``node_part`` (the tests compare the two writers' outputs):

  - node ids: DGL's ``reshuffle_graph`` order, ``torch.sort(node_part)`` (not a stable
    sort: inside a part it is not gnnflow's order), recomputed here on the N-long vector;
    the JSON (node_map, edge_map, counts), ``orig_nids.npy`` and ``node_feat.dgl``
    (``_N/feat``, ``_N/label``, ``_N/*_mask`` of the inner vertices, from the graph store,
    as :func:`store_to_dgl` gives them to DGL) are DGL's;
  - part ``p``'s graph is DGL's one-hop halo subgraph (``GetSubgraphWithHalo``): its
    vertices in DGL's local order (inner, then halo sources in in-edge order, then the
    other destinations of out-edges ordered by (source, destination)), its edges the
    inner vertices' in-edges (``inner_edge`` 1) followed by the out-edges from inner
    vertices to other parts' vertices (``inner_edge`` 0, read from those parts'
    shards), ndata ``_ID``/``inner_node``/``part_id``, edata ``_ID``/``inner_edge``,
    COO only, as DGL saves it;
  - edge ids: each part's in-edges fill the part's edge_map range as in DGL, but DGL
    orders them inside the range with an unstable ``std::sort`` over the whole graph's
    edges (``_CAPI_DGLReassignEdges_Hetero`` sorts by (part, edge type) because
    ``to_homogeneous`` adds an edge type), which no per-part computation reproduces;
    here they are numbered row by row in DGL's node order, in-edge list order inside a
    row (a self loop of A + I last).  The ids differ from DGL's only by a permutation
    inside each part's range; the peer uses no edge data, and every vertex's in-edge
    list holds the same neighbours, so neighbour sampling draws from the same
    distribution (in another order for a given seed).

* ``dgl`` (everything else: two-level books, halos of other depths, one part, staged
  copies) is DGL's own writer, ``dgl.distributed.partition_graph`` on the whole graph
  with its node-assignment step (``metis_partition_assignment``) replaced for the
  duration of the call by the book's ``node_part``; memory is several times the whole
  graph.  A two-level book (DistDGLv2 §4.1.2) becomes DGL parts = machines with
  ``num_trainers_per_machine = W`` and the worker id as DGL's ``trainer_id``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
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


def dgl_writer_for(book: Any) -> tuple[str, str]:
    """``("shards", why)`` when the part-by-part writer covers ``book``, else ``("dgl", why)``."""
    if book.levels:
        return "dgl", "a two-level book (trainer ids inside machine parts)"
    if (book.meta.halo_hops or 1) != 1:
        return "dgl", f"halo_hops {book.meta.halo_hops} (the shard writer makes one-hop halos)"
    if book.num_parts < 2:
        return "dgl", "one part (DGL writes it unshuffled)"
    if book.staged_parts is not None:
        return "dgl", "a staged copy (the shard writer reads every part)"
    return "shards", f"{book.num_parts} one-level parts with one-hop halos"


def write_dgl_partitions(book: Any, store: Any, out_dir: str | os.PathLike[str], graph_name: str,
                         overwrite: bool = False, quiet: bool = True, self_loops: bool = False,
                         writer: str | None = None) -> Path:
    """Write ``book``'s partitions in DGL 1.1.3's layout; return the path of ``<graph_name>.json``.
    ``self_loops``: of A + I (each vertex's own loop, in its own partition).  ``quiet``:
    hide DGL's own writer's prints (the shard writer logs its progress).  ``writer``:
    ``"shards"`` or ``"dgl"`` (default: :func:`dgl_writer_for`'s choice; ``"dgl"`` always
    works, ``"shards"`` only where that chooses it)."""
    from gnnflow.errors import ConfigError
    from gnnflow.io import log
    from gnnflow.partition.api import open_graph
    from gnnflow.partition.book import PartitionBook

    if not isinstance(book, PartitionBook):
        book = PartitionBook.open(book)
    store = open_graph(store)
    chosen, why = dgl_writer_for(book)
    if writer not in (None, "dgl", chosen):
        raise ConfigError(f"{book.path}: the shard DGL writer does not cover {why}; use writer='dgl'")
    writer = writer or chosen
    log.info("DGL layout of %s: %s writer (%s)", book.path, writer,
             why if writer == chosen else "asked for")
    out_dir = Path(out_dir)
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        if writer == "shards":
            cfg, orig_nids = _write_from_shards(book, store, tmp, graph_name, self_loops)
        else:
            cfg, orig_nids = _write_with_dgl(book, store, tmp, graph_name, quiet, self_loops)
        np.save(tmp / "orig_nids.npy", np.asarray(orig_nids, dtype=np.int64))
        trainers = int(book.levels[1]) if book.levels else 1
        cfg["gnnflow"] = {"book": str(book.path.resolve()), "method": book.method,
                          "num_worker_parts": book.num_parts, "trainers_per_machine": trainers}
        (tmp / f"{graph_name}.json").write_text(json.dumps(cfg, indent=4, sort_keys=True))
    return out_dir / f"{graph_name}.json"


def _write_with_dgl(book: Any, store: Any, tmp: Path, graph_name: str, quiet: bool,
                    self_loops: bool) -> tuple[dict[str, Any], np.ndarray]:
    """DGL's writer on the whole graph with the book's assignment: (its JSON, orig_nids)."""
    from dgl.distributed import partition_graph

    node_part = np.asarray(book.node_part, dtype=np.int64)
    trainers = int(book.levels[1]) if book.levels else 1
    g = store_to_dgl(store)
    if self_loops:
        import dgl

        g = dgl.add_self_loop(g)
    sink = io.StringIO()
    with _assignment(node_part), contextlib.redirect_stdout(sink):
        orig_nids, _orig_eids = partition_graph(
            g, graph_name, book.num_parts // trainers, str(tmp),
            num_hops=book.meta.halo_hops or 1, part_method="metis",
            return_mapping=True, num_trainers_per_machine=trainers)
    if not quiet:
        print(sink.getvalue(), end="")
    return json.loads((tmp / f"{graph_name}.json").read_text()), np.asarray(orig_nids)


# ---- the part-by-part writer -------------------------------------------------------------

ETYPE = "_N:_E:_N"


@dataclass
class _Numbering:
    """DGL's reshuffled ids for a book: shared by every part (N-long vectors)."""

    node_part: np.ndarray   # int64 [N]
    new_nid: np.ndarray     # int64 [N] gnnflow id -> DGL id
    orig_nids: np.ndarray   # int64 [N] DGL id -> gnnflow id
    node_start: np.ndarray  # int64 [P + 1] part p's DGL node ids: node_start[p]:node_start[p+1]
    edge_start: np.ndarray  # int64 [P + 1] part p's inner DGL edge ids, likewise


def _numbering(book: Any, self_loops: bool) -> _Numbering:
    """DGL's numbering: nodes in the order ``torch.sort(node_part)`` leaves them (DGL's
    ``reshuffle_graph``; the sort is not stable, so inside a part it is not gnnflow's order);
    each part's inner edges (its vertices' in-edges) numbered row by row in that node order."""
    import torch

    node_part = np.asarray(book.node_part, dtype=np.int64)
    n = node_part.shape[0]
    orig_nids = torch.sort(torch.from_numpy(node_part))[1].numpy()
    new_nid = np.empty(n, dtype=np.int64)
    new_nid[orig_nids] = np.arange(n, dtype=np.int64)
    counts = np.bincount(node_part, minlength=book.num_parts)
    edges = np.array([_part_edge_count(book, p, self_loops) for p in range(book.num_parts)])
    return _Numbering(node_part, new_nid, orig_nids, _starts(counts), _starts(edges))


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _part_edge_count(book: Any, p: int, self_loops: bool) -> int:
    indptr = np.load(book.part_dir(p) / "indptr.npy", mmap_mode="r")
    return int(indptr[-1]) + (indptr.shape[0] - 1 if self_loops else 0)


def _write_from_shards(book: Any, store: Any, tmp: Path, graph_name: str,
                       self_loops: bool) -> tuple[dict[str, Any], np.ndarray]:
    """The DGL layout from the book's shards, one part in memory at a time: (JSON, orig_nids)."""
    import time

    from gnnflow.io import log, progress

    num = _numbering(book, self_loops)
    local_of = np.full(num.node_part.shape[0], -1, dtype=np.int64)  # scratch, reset per part
    cfg = _part_config(book, store, graph_name, num, self_loops)
    for p in progress(range(book.num_parts), desc="DGL parts", total=book.num_parts):
        t0 = time.perf_counter()
        d = tmp / f"part{p}"
        d.mkdir()
        nodes, edges = _part_graph(book, p, num, local_of, self_loops)
        _save_part_graph(d / "graph.dgl", nodes, edges, num)
        _save_node_data(d / "node_feat.dgl", store, nodes.inner_ids)
        _save_tensor_dict(d / "edge_feat.dgl", {})
        log.info("DGL part %d: %d nodes (%d inner), %d edges (%d inner), %.1fs", p,
                 nodes.ids.shape[0], nodes.inner_ids.shape[0], edges.src.shape[0],
                 int(edges.inner.sum()), time.perf_counter() - t0)
        cfg[f"part-{p}"] = {"node_feats": f"part{p}/node_feat.dgl", "edge_feats": f"part{p}/edge_feat.dgl",
                            "part_graph": f"part{p}/graph.dgl"}
    return cfg, num.orig_nids


def _part_config(book: Any, store: Any, graph_name: str, num: _Numbering,
                 self_loops: bool) -> dict[str, Any]:
    """DGL's ``<graph_name>.json`` fields (the ``part-<i>`` entries are added per part)."""
    def ranges(starts: np.ndarray) -> list[list[int]]:
        return [[int(a), int(b)] for a, b in zip(starts[:-1], starts[1:], strict=True)]

    return {"graph_name": graph_name, "num_nodes": int(store.num_nodes),
            "num_edges": int(num.edge_start[-1]), "part_method": "metis",
            "num_parts": book.num_parts, "halo_hops": 1,
            "node_map": {"_N": ranges(num.node_start)}, "edge_map": {ETYPE: ranges(num.edge_start)},
            "ntypes": {"_N": 0}, "etypes": {ETYPE: 0}}


@dataclass
class _Nodes:
    """A DGL part's vertices in local order (gnnflow ids): inner first, then halo."""

    ids: np.ndarray        # int64 [n_local]
    inner_ids: np.ndarray  # int64 [n_inner], in DGL id order


@dataclass
class _Edges:
    """A DGL part's edges in local order: local endpoints, DGL edge ids, inner flags."""

    src: np.ndarray
    dst: np.ndarray
    eid: np.ndarray
    inner: np.ndarray  # bool


def _part_graph(book: Any, p: int, num: _Numbering, local_of: np.ndarray,
                self_loops: bool) -> tuple[_Nodes, _Edges]:
    """Part ``p``'s vertices and edges as DGL's one-hop halo subgraph has them."""
    from gnnflow.data.csr import gather_rows

    part = book.load_part(p)
    if self_loops:
        part = part.with_self_loops()
    inner = num.orig_nids[num.node_start[p]:num.node_start[p + 1]]  # DGL's local order
    indptr, cols = gather_rows(part.indptr, part.indices, _dgl_rows(part.inner_ids, inner))
    srcs = part.local_to_global[cols]  # in-edges in DGL edge-id order
    del cols
    out_src, out_dst, out_eid = _out_edges(book, p, num, self_loops)
    ids = _local_nodes(inner, srcs[num.node_part[srcs] != p], out_src, out_dst, num)
    local_of[ids] = np.arange(ids.shape[0])
    try:
        src = np.concatenate([local_of[srcs], local_of[out_src]])
        dst = np.concatenate([np.repeat(np.arange(inner.shape[0], dtype=np.int64), np.diff(indptr)),
                              local_of[out_dst]])
    finally:
        local_of[ids] = -1
    n_in = srcs.shape[0]
    eid = np.concatenate([num.edge_start[p] + np.arange(n_in, dtype=np.int64), out_eid])
    flags = np.zeros(eid.shape[0], dtype=bool)
    flags[:n_in] = True
    return _Nodes(ids, inner), _Edges(src, dst, eid, flags)


def _dgl_rows(inner_ids: np.ndarray, dgl_order: np.ndarray) -> np.ndarray:
    """Rows of a part's CSR (inner vertices sorted by gnnflow id) in DGL's node order."""
    return np.searchsorted(inner_ids, dgl_order)


def _local_nodes(inner: np.ndarray, halo_srcs: np.ndarray, out_src: np.ndarray,
                 out_dst: np.ndarray, num: _Numbering) -> np.ndarray:
    """The part's vertices in DGL's local order: inner, then halo sources in in-edge order,
    then the other destinations of out-edges in DGL's out-edge order (by source, then
    destination, DGL ids)."""
    in_halo = _first_seen(halo_srcs)
    order = np.lexsort((num.new_nid[out_dst], num.new_nid[out_src]))
    out_halo = _first_seen(out_dst[order])
    out_halo = out_halo[~np.isin(out_halo, in_halo)]
    return np.concatenate([inner, in_halo, out_halo])


def _first_seen(ids: np.ndarray) -> np.ndarray:
    """Distinct ``ids`` in the order of their first occurrence."""
    uniq, first = np.unique(ids, return_index=True)
    return uniq[np.argsort(first, kind="stable")]


def _out_edges(book: Any, p: int, num: _Numbering,
               self_loops: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges from part ``p``'s vertices to other parts' vertices, read from those parts'
    shards: (source, destination gnnflow ids, DGL edge ids), in DGL edge-id order."""
    found = [_edges_from(book, q, p, num, self_loops) for q in range(book.num_parts) if q != p]
    return tuple(np.concatenate([f[k] for f in found]) for k in range(3))  # type: ignore[return-value]


def _edges_from(book: Any, q: int, p: int, num: _Numbering,
                self_loops: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Part ``q``'s in-edges whose source is a vertex of part ``p`` (the CSR is scanned
    memory-mapped, block by block), in DGL edge-id order."""
    from gnnflow.io import row_chunks
    from gnnflow.partition.book import _load

    d = book.part_dir(q)
    inner, halo = _load(d / "inner_ids.npy"), _load(d / "halo_ids.npy")
    indptr = np.asarray(_load(d / "indptr.npy"), dtype=np.int64)
    indices = _load(d / "indices.npy", mmap=True)
    from_p = num.node_part[halo] == p
    hits, cols = [], []
    for start, block in row_chunks(indices):
        h = np.asarray(block, dtype=np.int64) - inner.shape[0]
        hit = np.flatnonzero(h >= 0)
        hit = hit[from_p[h[hit]]]
        hits.append(start + hit)
        cols.append(h[hit])
    pos = np.concatenate(hits)
    row = np.searchsorted(indptr, pos, side="right") - 1
    eid = num.edge_start[q] + _dgl_row_starts(indptr, inner, num, q, self_loops)[row] + pos - indptr[row]
    order = np.argsort(eid, kind="stable")
    return halo[np.concatenate(cols)[order]], np.asarray(inner, dtype=np.int64)[row[order]], eid[order]


def _dgl_row_starts(indptr: np.ndarray, inner: np.ndarray, num: _Numbering, q: int,
                    self_loops: bool) -> np.ndarray:
    """Where each row of part ``q``'s CSR starts among the part's edges in DGL's order
    (rows in DGL's node order; with ``self_loops`` each row one longer, its loop last)."""
    lengths = np.diff(indptr) + (1 if self_loops else 0)
    rank = num.new_nid[inner] - num.node_start[q]  # row -> its place in DGL's order
    in_order = np.empty_like(lengths)
    in_order[rank] = lengths
    starts = np.concatenate([[0], np.cumsum(in_order)[:-1]]).astype(np.int64)
    return starts[rank]


def _save_part_graph(path: Path, nodes: _Nodes, edges: _Edges, num: _Numbering) -> None:
    """``graph.dgl`` as DGL writes it: COO, ndata _ID/inner_node/part_id, edata _ID/inner_edge."""
    import dgl
    import torch
    from dgl.data.utils import save_graphs

    g = dgl.graph((torch.from_numpy(edges.src), torch.from_numpy(edges.dst)),
                  num_nodes=nodes.ids.shape[0])
    g.ndata[dgl.NID] = torch.from_numpy(num.new_nid[nodes.ids])
    inner = np.zeros(nodes.ids.shape[0], dtype=np.uint8)
    inner[:nodes.inner_ids.shape[0]] = 1
    g.ndata["inner_node"] = torch.from_numpy(inner)
    g.ndata["part_id"] = torch.from_numpy(num.node_part[nodes.ids])
    g.edata[dgl.EID] = torch.from_numpy(edges.eid)
    g.edata["inner_edge"] = torch.from_numpy(edges.inner.astype(np.uint8))
    save_graphs(str(path), [g])


def _save_node_data(path: Path, store: Any, inner: np.ndarray) -> None:
    """``node_feat.dgl``: ``_N/<name>`` of the part's inner vertices in DGL id order, the
    arrays and dtypes :func:`store_to_dgl` gives DGL's writer."""
    import torch

    from gnnflow.io import release_pages

    data = {}
    if store.features is not None:
        data["_N/feat"] = torch.from_numpy(np.array(store.features[inner]))
        release_pages(store.features)
    data["_N/label"] = torch.from_numpy(np.array(store.labels[inner], dtype=np.int64))
    for split in ("train", "val", "test"):
        data[f"_N/{split}_mask"] = torch.from_numpy(np.isin(inner, np.asarray(store.split(split))))
    _save_tensor_dict(path, data)


def _save_tensor_dict(path: Path, data: dict[str, Any]) -> None:
    from dgl.data.utils import save_tensors

    save_tensors(str(path), data)


def dgl_layout(book_path: str, self_loops: bool = False, typed: bool = False) -> Path:
    """Where the DGL layout of ``book_path`` lives: next to the book (``<book>.dgl``; of A + I,
    the model's graph of GCN, ``<book>.dgl-loops``; DGL's heterogeneous layout of a typed book,
    :func:`write_dgl_typed_partitions`, ``<book>.dgl-typed``), in the original book and in a staged copy."""
    book = Path(book_path).resolve()
    if typed:
        return book.parent / f"{book.name}.dgl-typed"
    return book.parent / f"{book.name}.dgl{'-loops' if self_loops else ''}"


def ensure_dgl_layout(book_path: str, graph_path: str, self_loops: bool = False, typed: bool = False) -> Path:
    """The DGL layout of ``book_path``, written first if it is not there (needs every part's shard;
    ``typed``: DGL's heterogeneous layout, :func:`write_dgl_typed_partitions`)."""
    out = dgl_layout(book_path, self_loops, typed)
    if not (out / "gnnflow.json").exists():
        if typed:
            write_dgl_typed_partitions(Path(book_path).resolve(), graph_path, out, "gnnflow")
        else:
            write_dgl_partitions(Path(book_path).resolve(), graph_path, out, "gnnflow", self_loops=self_loops)
    return out


# ---- the heterogeneous layout of a typed book ---------------------------------------------

def store_to_dgl_hetero(store: Any) -> tuple[Any, list[str]]:
    """A homogenized heterogeneous store as a DGL heterograph (per-type ids: homogeneous id minus
    the type's offset; one canonical edge type per relation) with node data per type: ``feat``
    (featured types), and ``label`` with ``train_mask``/``val_mask``/``test_mask`` on the types
    that hold a split's vertex (the label types).  Returns ``(graph, label types)``.  DGL sorts
    vertex types by name, as a homogenized store does, so DGL's homogeneous order
    (``to_homogeneous``) is the store's."""
    import dgl
    import torch

    from gnnflow.data.hetero import TypeMap
    from gnnflow.errors import ConfigError
    from gnnflow.partition.metrics import edge_dst

    if "edge_type" not in store.extra or not store.meta.node_types:
        raise ConfigError(f"graph {store.path}: has no edge types; DGL's heterogeneous layout needs a "
                          "homogenized heterogeneous store")
    tm = TypeMap.from_store(store)
    off = tm.node_type_offsets
    indptr = np.asarray(store.indptr)
    src = np.asarray(store.indices, dtype=np.int64)
    dst = edge_dst(indptr)
    etype = np.asarray(store.extra["edge_type"], dtype=np.int64)
    data = {}
    for r, (s, rel, d) in enumerate(tm.edge_types):
        sel = etype == r
        data[(s, rel, d)] = (torch.from_numpy(src[sel] - off[tm.ntype_id(s)]),
                             torch.from_numpy(dst[sel] - off[tm.ntype_id(d)]))
    g = dgl.heterograph(data, num_nodes_dict={t: tm.num_nodes_of(t) for t in tm.node_types})
    if list(g.ntypes) != list(tm.node_types):
        raise ConfigError(f"graph {store.path}: vertex types {tm.node_types} are not in DGL's (sorted) order")
    for name in tm.node_types:
        if f"features_{name}" in store.extra:
            g.nodes[name].data["feat"] = torch.from_numpy(np.array(store.extra[f"features_{name}"],
                                                                   dtype=np.float32))
    labels = np.asarray(store.labels, dtype=np.int64)
    splits = {s: np.asarray(store.split(s), dtype=np.int64) for s in ("train", "val", "test")}
    label_types = sorted({int(t) for ids in splits.values()
                          for t in np.unique(np.searchsorted(off, ids, side="right") - 1)})
    for t in label_types:
        name, n = tm.node_types[t], tm.num_nodes_of(t)
        g.nodes[name].data["label"] = torch.from_numpy(labels[off[t]:off[t + 1]].copy())
        for s, ids in splits.items():
            mask = torch.zeros(n, dtype=torch.bool)
            mine = ids[(ids >= off[t]) & (ids < off[t + 1])] - off[t]
            mask[torch.from_numpy(mine)] = True
            g.nodes[name].data[f"{s}_mask"] = mask
    return g, [tm.node_types[t] for t in label_types]


def write_dgl_typed_partitions(book: Any, store: Any, out_dir: str | os.PathLike[str], graph_name: str,
                               overwrite: bool = False, quiet: bool = True) -> Path:
    """Write a typed book's partitions in DGL 1.1.3's heterogeneous layout (what DGL's distributed
    RGCN example, ``examples/pytorch/rgcn/experimental``, trains on): DGL's own writer,
    ``partition_graph`` on the store's heterograph (:func:`store_to_dgl_hetero`) with its
    node-assignment step replaced by the book's ``node_part`` (DGL assigns the homogeneous graph,
    whose order is the store's); the parts' graphs carry DGL's ``_TYPE`` of every vertex and edge,
    ``node_feat.dgl`` each type's data (``<type>/feat``, ``<type>/label``, ``<type>/*_mask``).
    ``orig_nids.npz`` maps DGL's per-type ids back to the store's per-type ids (a key per type).
    Memory: several times the whole graph.  Returns the path of ``<graph_name>.json``."""
    from dgl.distributed import partition_graph

    from gnnflow.io import log
    from gnnflow.partition.api import open_graph
    from gnnflow.partition.book import PartitionBook

    if not isinstance(book, PartitionBook):
        book = PartitionBook.open(book)
    store = open_graph(store)
    g, label_types = store_to_dgl_hetero(store)
    node_part = np.asarray(book.node_part, dtype=np.int64)
    trainers = int(book.levels[1]) if book.levels else 1
    log.info("DGL heterogeneous layout of %s: DGL's writer on %d vertex types, %d relations", book.path,
             len(g.ntypes), len(g.canonical_etypes))
    out_dir = Path(out_dir)
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        sink = io.StringIO()
        with _assignment(node_part), contextlib.redirect_stdout(sink):
            orig_nids, _ = partition_graph(g, graph_name, book.num_parts // trainers, str(tmp),
                                           num_hops=book.meta.halo_hops or 1, part_method="metis",
                                           return_mapping=True, num_trainers_per_machine=trainers)
        if not quiet:
            print(sink.getvalue(), end="")
        np.savez(tmp / "orig_nids.npz", **{t: np.asarray(v, dtype=np.int64) for t, v in orig_nids.items()})
        cfg = json.loads((tmp / f"{graph_name}.json").read_text())
        cfg["gnnflow"] = {"book": str(book.path.resolve()), "method": book.method,
                          "num_worker_parts": book.num_parts, "trainers_per_machine": trainers,
                          "label_types": label_types}
        (tmp / f"{graph_name}.json").write_text(json.dumps(cfg, indent=4, sort_keys=True))
    return out_dir / f"{graph_name}.json"
