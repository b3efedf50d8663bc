"""Homogenization of a heterogeneous graph (DistDGLv2 §4.1.1, §4.1.4), and the way back.

:func:`homogenize` assigns every vertex type a contiguous range of homogeneous ids (types in sorted
order) and every canonical edge type a contiguous range of edge ids, writes one CSR over
destinations with ``node_type``, ``edge_type`` and ``edge_id`` aligned with it, keeps per-type
features at their own dims, and gives a homogeneous GNN one row of a common dim per vertex
(:func:`common_features`); :func:`heterogenize` reads such a store back into a
:class:`~gnnflow.data.hetero.HeteroGraph`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.hetero import REVERSE_PREFIX, EdgeType, HeteroGraph, validate_hetero
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import GnnflowError
from gnnflow.io import log


def add_reverse_edges(hg: HeteroGraph) -> list[EdgeType]:
    """Add ``(d, rev_r, s)`` for each relation ``(s, r, d)``; return the added types.

    ogbn-mag's relations are one-way (author writes paper); without reverses a
    paper never hears from its authors or fields.  DGL's ogbn-mag examples add
    the same reverse types.
    """
    added = []
    for s, r, d in sorted(hg.edges):
        if r.startswith(REVERSE_PREFIX):
            continue
        rev = (d, REVERSE_PREFIX + r, s)
        if rev not in hg.edges:
            src, dst = hg.edges[(s, r, d)]
            hg.edges[rev] = (dst, src)
            added.append(rev)
    return added


def common_features(hg: HeteroGraph, indptr: np.ndarray, indices: np.ndarray,
                    offsets: np.ndarray, fill: str, seed: int) -> tuple[np.ndarray, dict[str, str]]:
    """One feature row of a common dim per homogeneous vertex.

    The common dim is that of the target (labelled) type's features, else the
    largest per-type dim.  Per type: features of that dim are copied as is;
    features of another dim are mapped by a seeded Gaussian random projection
    (scaled by 1/sqrt(dim), which keeps norms on average); types without
    features get, with ``fill="neighbor-mean"``, the mean of their in-neighbours'
    rows (repeated so that types two hops from a featured type are filled too),
    or zeros with ``fill="zero"``.  Returns the matrix and how each type was filled.
    """
    dims = {t: x.shape[1] for t, x in hg.features.items()}
    if not dims:
        return np.zeros((int(offsets[-1]), 0), dtype=np.float32), {t: "none" for t in hg.node_types}
    target = hg.target_node_type
    dim = dims[target] if target in dims else max(dims.values())
    n = int(offsets[-1])
    out = np.zeros((n, dim), dtype=np.float32)
    have = np.zeros(n, dtype=bool)
    how: dict[str, str] = {}
    rng = np.random.default_rng(seed)
    for ti, t in enumerate(hg.node_types):
        lo, hi = int(offsets[ti]), int(offsets[ti + 1])
        if t not in hg.features:
            continue
        x = np.asarray(hg.features[t], dtype=np.float32)
        if x.shape[1] == dim:
            out[lo:hi] = x
            how[t] = "own"
        else:
            proj = rng.standard_normal((x.shape[1], dim)).astype(np.float32) / np.sqrt(x.shape[1])
            out[lo:hi] = x @ proj
            how[t] = f"random-projection from dim {x.shape[1]}"
        have[lo:hi] = True
    missing = [t for t in hg.node_types if t not in hg.features]
    if fill == "zero":
        how.update({t: "zero" for t in missing})
        return out, how
    if fill != "neighbor-mean":
        raise GnnflowError(f"feature fill {fill!r} must be 'neighbor-mean' or 'zero'")
    for _hop in range(len(hg.node_types)):
        rows = np.flatnonzero(~have)
        if rows.size == 0 or not have.any():
            break
        cnt, total = _neighbor_sums(indptr, indices, rows, have, out)
        ok = cnt > 0
        if not ok.any():
            break
        out[rows[ok]] = (total[ok] / cnt[ok, None]).astype(np.float32)
        have[rows[ok]] = True
    for ti, t in enumerate(hg.node_types):
        if t in missing:
            lo, hi = int(offsets[ti]), int(offsets[ti + 1])
            filled = int(have[lo:hi].sum())
            how[t] = f"neighbor-mean ({filled}/{hi - lo} vertices, rest zero)"
    return out, how


def _neighbor_sums(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, have: np.ndarray,
                   x: np.ndarray, block: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """Per row in ``rows``: how many in-neighbours have ``have`` set, and the sum of their
    rows of ``x`` (rows of ``x`` without ``have`` are zero), ``block`` rows at a time from
    a (memory-mapped) CSR.  float32 sums in CSR order, as a scipy product over the
    ``have`` columns would give (the zero rows add exact zeros)."""
    import scipy.sparse as sp

    from gnnflow.data.csr import gather_rows

    cnt = np.empty(rows.shape[0], dtype=np.float32)
    total = np.empty((rows.shape[0], x.shape[1]), dtype=np.float32)
    weight = have.astype(np.float32)
    for s in range(0, rows.shape[0], block):
        sub_indptr, nbrs = gather_rows(indptr, indices, rows[s:s + block])
        sub = sp.csr_matrix((np.ones(nbrs.shape[0], dtype=np.float32), nbrs, sub_indptr),
                            shape=(sub_indptr.shape[0] - 1, x.shape[0]))
        cnt[s:s + block] = sub @ weight
        total[s:s + block] = sub @ x
    return cnt, total


def _typed_csr(hg: HeteroGraph, etypes: list[EdgeType], ntypes: list[str], offsets: np.ndarray,
               eoffsets: np.ndarray, work: Path, chunk: int = 1 << 22) -> tuple[Path, Path, Path, Path]:
    """CSR over destinations of all typed edges with homogeneous ids, built on disk, nothing
    deduplicated: each row lists its edges grouped by edge type, in type order, and by source
    within a type (a stable sort by ``dst * N + src``, then by type within rows), so that
    the typed sampler finds a relation's neighbours as one slice.  Returns the paths of
    ``indptr``, ``indices``, ``edge_id`` (CSR slot -> homogeneous edge id) and
    ``edge_type`` (int32)."""
    from gnnflow.data.external_csr import ExternalCSRBuilder, NpyAppender
    from gnnflow.io import progress, release_pages

    n, m = int(offsets[-1]), int(eoffsets[-1])
    builder = ExternalCSRBuilder(n, work, symmetrize=False, dedup=False, drop_self_loops=False,
                                 edge_ids=True, expected_edges=m, what=hg.name)
    for r, (s, rel, d) in enumerate(progress(etypes, desc="typed edges")):
        s_local, d_local = hg.edges[(s, rel, d)]
        so, do, lo = offsets[ntypes.index(s)], offsets[ntypes.index(d)], int(eoffsets[r])
        for start in range(0, s_local.shape[0], chunk):
            a = np.asarray(s_local[start:start + chunk], dtype=np.int64) + so
            b = np.asarray(d_local[start:start + chunk], dtype=np.int64) + do
            builder.add(a, b, np.arange(lo + start, lo + start + a.shape[0], dtype=np.int64))
            release_pages(s_local, d_local)
    paths = [work / f"{k}.npy" for k in ("indptr", "indices", "edge_id", "edge_type")]
    builder.finish(paths[0], paths[1], paths[2])
    indptr = np.load(paths[0])
    indices, eids = np.load(paths[1], mmap_mode="r+"), np.load(paths[2], mmap_mode="r+")
    edge_type = NpyAppender(paths[3], np.int32)
    row = 0
    while row < n:  # rows of about `chunk` edges at a time, reordered in place
        stop = max(row + 1, int(np.searchsorted(indptr, indptr[row] + chunk, side="right")) - 1)
        lo, hi = int(indptr[row]), int(indptr[stop])
        types = np.searchsorted(eoffsets, eids[lo:hi], side="right") - 1
        rows = np.repeat(np.arange(stop - row), np.diff(indptr[row:stop + 1]))
        order = np.lexsort((types, rows))  # stable: the builder's order within a type
        indices[lo:hi], eids[lo:hi] = indices[lo:hi][order], eids[lo:hi][order]
        edge_type.append(types[order])
        release_pages(indices, eids)
        row = stop
    indices.flush()
    eids.flush()
    del indices, eids
    edge_type.close()
    return paths[0], paths[1], paths[2], paths[3]


def homogenize(hg: HeteroGraph, *, reverse_edges: bool = True, feature_fill: str = "neighbor-mean",
               seed: int = 0, source: str = "hetero",
               workdir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Homogenize ``hg`` (DistDGLv2 §4.1.1); return keyword arguments for ``write_store``.

    The CSR is built on disk (:class:`ExternalCSRBuilder`, memory bounded by a bucket,
    the edge arrays of ``hg`` may be memory maps), so ``indptr``, ``indices``,
    ``edge_id`` and ``edge_type`` come back as ``.npy`` paths in ``workdir``; without a
    ``workdir`` they are built in a temporary one and returned as arrays.
    """
    if workdir is None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="gnnflow-homogenize-") as tmp:
            data = homogenize(hg, reverse_edges=reverse_edges, feature_fill=feature_fill,
                              seed=seed, source=source, workdir=tmp)
            for key in ("indptr", "indices"):
                data[key] = np.load(data[key])
            data["extra_arrays"] = {k: np.load(v) if isinstance(v, Path) else v
                                    for k, v in data["extra_arrays"].items()}
            return data
    work = Path(workdir)
    hg.validate(hg.name)
    hg = HeteroGraph(hg.name, dict(hg.num_nodes), dict(hg.edges), hg.features, hg.labels,
                     hg.splits, hg.num_classes, hg.target_node_type)
    reversed_types = add_reverse_edges(hg) if reverse_edges else []
    ntypes = hg.node_types
    log.info("homogenizing %s: %d vertex types, %d edge types", hg.name, len(ntypes), len(hg.edges))
    counts = np.array([hg.num_nodes[t] for t in ntypes], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    # Original relations first (sorted), then their reverses (sorted), so the
    # original edge ids do not depend on whether reverses were added.
    etypes = sorted(e for e in hg.edges if e not in reversed_types) + sorted(reversed_types)
    ecounts = np.array([hg.edges[e][0].shape[0] for e in etypes], dtype=np.int64)
    eoffsets = np.concatenate([[0], np.cumsum(ecounts)]).astype(np.int64)
    indptr, indices, edge_id, edge_type = _typed_csr(hg, etypes, ntypes, offsets, eoffsets, work)

    node_type = np.repeat(np.arange(len(ntypes), dtype=np.int32), counts)
    labels = np.full(n, -1, dtype=np.int64)
    for t, y in hg.labels.items():
        ti = ntypes.index(t)
        labels[offsets[ti] : offsets[ti + 1]] = y
    split_ids = {}
    for split in ("train", "val", "test"):
        per_type = hg.splits.get(split, {})
        parts = [np.asarray(per_type[t], dtype=np.int64) + offsets[ntypes.index(t)]
                 for t in ntypes if t in per_type]
        split_ids[split] = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    features, fill_how = common_features(hg, np.load(indptr, mmap_mode="r"),
                                         np.load(indices, mmap_mode="r"), offsets, feature_fill, seed)
    extra: dict[str, Any] = {"node_type": node_type, "edge_type": edge_type, "edge_id": edge_id}
    for t, x in hg.features.items():
        extra[f"features_{t}"] = np.asarray(x, dtype=np.float32)
    meta = {
        "homogenized": True,
        "node_types": ntypes,
        "node_type_offsets": offsets.tolist(),
        "edge_types": [list(e) for e in etypes],
        "edge_type_offsets": eoffsets.tolist(),
        "reverse_edge_types": [list(e) for e in reversed_types],
        "num_nodes_per_type": {t: int(c) for t, c in zip(ntypes, counts, strict=True)},
        "num_edges_per_type": {"___".join(e): int(c) for e, c in zip(etypes, ecounts, strict=True)},
        "target_node_type": hg.target_node_type,
        "type_feature_dims": {t: int(hg.features[t].shape[1]) for t in ntypes if t in hg.features},
        "common_features": {"dim": int(features.shape[1]), "fill": feature_fill, "per_type": fill_how},
    }
    return {
        "name": hg.name,
        "source": source,
        "indptr": indptr,
        "indices": indices,
        "features": features if features.shape[1] else None,
        "labels": labels,
        "train_idx": split_ids["train"],
        "val_idx": split_ids["val"],
        "test_idx": split_ids["test"],
        "num_classes": hg.num_classes,
        "directed": not reverse_edges,
        "extra_arrays": extra,
        "meta": meta,
    }


def write_hetero_store(hg: HeteroGraph, out: str | os.PathLike[str], *, overwrite: bool = False,
                       reverse_edges: bool = True, feature_fill: str = "neighbor-mean",
                       seed: int = 0, source: str = "hetero",
                       meta: dict[str, Any] | None = None,
                       normalize_features: str = "none") -> GraphStore:
    """Homogenize ``hg`` and write it as a graph store (atomically)."""
    from gnnflow.data.arrays import scratch_dir

    with scratch_dir(out, "homogenize") as work:
        data = homogenize(hg, reverse_edges=reverse_edges, feature_fill=feature_fill, seed=seed,
                          source=source, workdir=work)
        data["meta"].update(meta or {})
        store = write_store(out, overwrite=overwrite, normalize_features=normalize_features, **data)
    validate_hetero(store, full=False)  # edge_id is a permutation by construction
    return store


def heterogenize(store: GraphStore, include_reverse: bool = False) -> HeteroGraph:
    """Read a homogenized store back into per-type ids (the inverse of :func:`homogenize`)."""
    tm = validate_hetero(store)
    n, m = store.num_nodes, store.num_edges
    slot_of_eid = np.empty(m, dtype=np.int64)
    slot_of_eid[np.asarray(store.extra["edge_id"])] = np.arange(m, dtype=np.int64)
    dst_of_slot = np.repeat(np.arange(n, dtype=np.int64), np.diff(store.indptr))
    reverse = {tuple(e) for e in store.meta.reverse_edge_types or []}
    edges = {}
    for r, (s, rel, d) in enumerate(tm.edge_types):
        if (s, rel, d) in reverse and not include_reverse:
            continue
        slots = slot_of_eid[tm.edge_type_offsets[r] : tm.edge_type_offsets[r + 1]]
        edges[(s, rel, d)] = (tm.to_type_id(store.indices[slots])[1],
                              tm.to_type_id(dst_of_slot[slots])[1])
    labels, features, splits = {}, {}, {}
    for ti, t in enumerate(tm.node_types):
        lo, hi = int(tm.node_type_offsets[ti]), int(tm.node_type_offsets[ti + 1])
        y = np.asarray(store.labels[lo:hi])
        if (y >= 0).any():
            labels[t] = y.copy()
        if f"features_{t}" in store.extra:
            features[t] = np.asarray(store.extra[f"features_{t}"])
    for split in ("train", "val", "test"):
        ids = np.asarray(store.split(split))
        types, local = tm.to_type_id(ids)
        splits[split] = {t: local[types == ti] for ti, t in enumerate(tm.node_types)
                         if (types == ti).any()}
    return HeteroGraph(
        name=store.name,
        num_nodes={t: tm.num_nodes_of(t) for t in tm.node_types},
        edges=edges, features=features, labels=labels, splits=splits,
        num_classes=store.num_classes, target_node_type=store.meta.target_node_type,
    )
