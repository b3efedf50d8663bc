"""The partition book: the on-disk partitioned graph that every strategy reads.

Layout (DistDGLv2 §4.1.1: each machine holds one partition's vertices, their
in-edges and the halo vertices those edges reach; DistGNN-MB §3.1 calls the owned
vertices "solid" and the others "halo")::

    PARTDIR/meta.json          method, num_parts, params, seed, graph path, levels,
                               timings, quality metrics, provenance
                               (:class:`gnnflow.partition.meta.BookMeta`)
    PARTDIR/node_part.npy      int32 [N] vertex -> part id
    PARTDIR/node_machine.npy   int32 [N] vertex -> machine (two-level only)
    PARTDIR/perm.npy           int64 [N] new position -> old vertex id (permute-1d only)
    PARTDIR/part<i>/
        inner_ids.npy          int64 global ids of the part's own vertices, sorted
        halo_ids.npy           int64 global ids of 1-hop in-neighbours not owned, sorted
        indptr.npy, indices.npy  local CSR; row r = inner vertex r; entries (int32 when
                               they fit, as books write them; int64 read too) index
                               local_to_global = concat(inner_ids, halo_ids)
        features.npy           float32 [n_inner, D] (memory-mapped on load)
        labels.npy             int64 [n_inner]
        train_idx.npy, val_idx.npy, test_idx.npy   GLOBAL ids of inner vertices per split
        halo_ids_hop<k>.npy    (k >= 2, on request) vertices first reached at hop k
      of a homogenized heterogeneous store (a typed book, DistDGLv2 §4.1.1, §4.1.4), also:
        edge_type.npy          int8/16/32 [local edges] each CSR entry's relation; a row's entries
                               stay grouped by relation in relation order, as the store's
        node_type.npy          int8/16/32 [inner + halo] the vertex type of each local vertex
        features_<ntype>.npy   float32 [inner vertices of ntype, its own dim] their features
                               (inner_ids order), one file per featured type; featureless types
                               have none (their learnable rows are the trainer's)

:meth:`PartitionBook.load_part` reads only part ``i``'s files, so a rank never
touches another part's data.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.csr import gather_rows  # also imported from here by strategies
from gnnflow.errors import StoreError
from gnnflow.io import release_pages  # noqa: F401  (re-exported: partition modules import it from here)
from gnnflow.partition.local_ids import LocalIds
from gnnflow.partition.meta import BookMeta, read_book_meta

PART_ARRAYS = ("inner_ids", "halo_ids", "indptr", "indices", "labels", "train_idx", "val_idx", "test_idx")
#: a typed book's per-part arrays (read whole: a byte or two per edge and vertex)
TYPED_ARRAYS = ("edge_type", "node_type")


def _load(path: Path, mmap: bool = False) -> np.ndarray:
    from gnnflow.data.store import _load as load_checked  # header and file size checked

    return load_checked(path.parent, path.stem, mmap, what="partition book",
                        rerun="gnnflow partition")


@dataclass
class Part:
    """One part of a partition book: solid (inner) vertices, halo, local CSR, shards."""

    part_id: int
    inner_ids: np.ndarray
    halo_ids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | None
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    path: Path | None = None
    #: a typed book: each local CSR entry's relation, each local vertex's type, and per featured
    #: type (by name) the feature rows of its inner vertices (None / empty otherwise)
    edge_types: np.ndarray | None = None
    node_types: np.ndarray | None = None
    type_features: dict[str, np.ndarray] = field(default_factory=dict)
    local_to_global: np.ndarray = field(init=False)
    _local_ids: LocalIds | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.local_to_global = np.concatenate([self.inner_ids, self.halo_ids]).astype(np.int64, copy=False)

    @property
    def num_inner(self) -> int:
        return int(self.inner_ids.shape[0])

    @property
    def num_halo(self) -> int:
        return int(self.halo_ids.shape[0])

    @property
    def num_local(self) -> int:
        return self.num_inner + self.num_halo

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def with_self_loops(self) -> Part:
        """This part with each inner vertex added to its own in-neighbours, last in its row
        (the part of A + I; the whole store's rows get the same entry at the same place)."""
        from gnnflow.data.csr import with_self_loops

        indptr, indices = with_self_loops(self.indptr, self.indices)
        return dataclasses.replace(self, indptr=indptr, indices=indices)

    def check_labels(self, num_classes: int) -> None:
        """The part's train/val/test vertices have labels in ``[0, num_classes)`` (a StoreError naming
        the first that has not, and the part's labels file)."""
        from gnnflow.data.store import check_split_labels

        ids = {s: np.asarray(getattr(self, f"{s}_idx"), dtype=np.int64) for s in ("train", "val", "test")}
        where = str(self.path / "labels.npy") if self.path is not None else f"part {self.part_id}'s labels"
        check_split_labels(self.labels, {s: self.global_to_local(v) for s, v in ids.items()}, num_classes, ids,
                           where)

    def global_to_local(self, ids: Any) -> np.ndarray:
        """Local ids of global ``ids`` (inner first, then halo); -1 where absent (:class:`LocalIds`)."""
        if self._local_ids is None:  # built on first use (two threads may both build it: the same map)
            self._local_ids = LocalIds(self.inner_ids, self.halo_ids)
        return self._local_ids(ids)

    def is_inner(self, ids: Any) -> np.ndarray:
        local = self.global_to_local(ids)
        return (local >= 0) & (local < self.num_inner)

    def khop_halo(self, k: int) -> np.ndarray:
        """Global ids of vertices first reached at in-hop ``k`` (k=1: ``halo_ids``)."""
        if k == 1:
            return self.halo_ids
        if self.path is None:
            raise StoreError(f"part {self.part_id}: K-hop halos need a part loaded from disk")
        f = self.path / f"halo_ids_hop{k}.npy"
        if not f.exists():
            raise StoreError(f"{f}: missing; re-run `gnnflow partition` with --halo-hops {k} or more")
        return _load(f)


class PartitionBook:
    """An opened partition book directory (see module docstring for the layout)."""

    def __init__(self, path: str | os.PathLike[str], verify: bool = True) -> None:
        self.path = Path(path)
        self.meta: BookMeta = read_book_meta(self.path)
        self.node_part: np.ndarray = _load(self.path / "node_part.npy", mmap=True)
        if self.node_part.ndim != 1 or self.node_part.shape[0] != self.meta.num_nodes:
            raise StoreError(f"{self.path / 'node_part.npy'}: expected {self.meta.num_nodes} entries")
        if verify:  # the top-level files (node_part, ...) when small; parts on load_part
            from gnnflow.data.store import SMALL_FILE, checksum_problems

            sums = {k: v for k, v in (self.meta.checksums or {}).items() if "/" not in k}
            bad = checksum_problems(self.path, sums, max_size=SMALL_FILE, rerun="gnnflow partition")
            if bad:
                raise StoreError(bad[0])

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> PartitionBook:
        return cls(path)

    @property
    def num_parts(self) -> int:
        return self.meta.num_parts

    @property
    def num_nodes(self) -> int:
        return self.meta.num_nodes

    @property
    def method(self) -> str:
        return self.meta.method

    @property
    def graph_path(self) -> Path:
        """The graph store the book was made from (stored relative to the book; older books
        hold an absolute path, read as it is)."""
        return book_graph_path(self.path, self.meta)

    @property
    def staged_parts(self) -> list[int] | None:
        """The parts this copy holds when it was made by ``gnnflow stage`` (None: all)."""
        return self.meta.staged_parts

    @property
    def levels(self) -> list[int] | None:
        return self.meta.levels

    @property
    def node_machine(self) -> np.ndarray | None:
        f = self.path / "node_machine.npy"
        return _load(f, mmap=True) if f.exists() else None

    @property
    def perm(self) -> np.ndarray | None:
        """permute-1d: ``perm[new] = old`` vertex id (MG-GCN §5.2)."""
        f = self.path / "perm.npy"
        return _load(f, mmap=True) if f.exists() else None

    @property
    def quality(self) -> dict[str, Any]:
        return self.meta.quality or {}

    def part_dir(self, i: int) -> Path:
        if not 0 <= i < self.num_parts:
            raise StoreError(f"{self.path}: part {i} out of range [0, {self.num_parts})")
        staged = self.staged_parts
        if staged is not None and i not in staged:
            raise StoreError(f"{self.path}: part {i} is not staged here (this copy holds parts "
                             f"{','.join(map(str, staged))}); stage it with `gnnflow stage "
                             f"{self.meta.staged_from or 'BOOK'} --part {i} --to DIR`")
        return self.path / f"part{i}"

    def load_part(self, i: int, mmap_features: bool = True, verify: bool = True) -> Part:
        """Read part ``i`` only (features memory-mapped unless ``mmap_features=False``).

        Headers and file sizes are checked, and with ``verify`` the recorded checksums
        of the part's small files (the book was validated when written)."""
        d = self.part_dir(i)
        arrays = {name: _load(d / f"{name}.npy") for name in PART_ARRAYS}
        feat_file = d / "features.npy"
        features = _load(feat_file, mmap=mmap_features) if feat_file.exists() else None
        typed = {f"{name}s": _load(d / f"{name}.npy") for name in TYPED_ARRAYS if (d / f"{name}.npy").exists()}
        type_features = {f.stem.removeprefix("features_"): _load(f, mmap=mmap_features)
                         for f in sorted(d.glob("features_*.npy"))}
        if verify:
            from gnnflow.data.store import SMALL_FILE, checksum_problems

            bad = checksum_problems(self.path, self.meta.checksums or {}, max_size=SMALL_FILE,
                                    prefix=f"part{i}/", rerun="gnnflow partition")
            if bad:
                raise StoreError(bad[0])
        n_inner = arrays["inner_ids"].shape[0]
        if arrays["indptr"].shape[0] != n_inner + 1:
            raise StoreError(f"{d / 'indptr.npy'}: {arrays['indptr'].shape[0]} entries for {n_inner} inner vertices")
        if features is not None and features.shape[0] != n_inner:
            raise StoreError(f"{feat_file}: {features.shape[0]} rows for {n_inner} inner vertices")
        return Part(part_id=i, features=features, path=d, type_features=type_features, **typed, **arrays)

    def check_part_files(self) -> None:
        """Every array file of every part this copy holds: present, its header readable and its
        size what the header says (headers only, no data): what ``gnnflow train`` checks before
        any rank starts, so that a truncated shard is one line rather than a rank's failure."""
        from gnnflow.data.store import check_npy

        for i in self.staged_parts or range(self.num_parts):
            d = self.part_dir(i)
            names = [*PART_ARRAYS, *(["features"] if (d / "features.npy").exists() else []),
                     *(n for n in TYPED_ARRAYS if (d / f"{n}.npy").exists()),
                     *(f.stem for f in sorted(d.glob("features_*.npy")))]
            for name in names:
                check_npy(d / f"{name}.npy", "partition book", "gnnflow partition")

    def part_sizes(self) -> np.ndarray:
        return np.bincount(np.asarray(self.node_part), minlength=self.num_parts)

    def __repr__(self) -> str:
        return f"PartitionBook({str(self.path)!r}, method={self.method!r}, num_parts={self.num_parts})"


def book_graph_path(book_dir: str | os.PathLike[str], meta: BookMeta) -> Path:
    """``meta.graph`` of the book at ``book_dir`` as a path: relative ones are relative to the
    book's directory (books written since issue 20), absolute ones as they are."""
    graph = Path(meta.graph or "")
    return graph if graph.is_absolute() else Path(os.path.normpath(Path(book_dir) / graph))


def khop_in_neighbourhood(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, hops: int,
                          num_nodes: int) -> list[np.ndarray]:
    """Vertices first reached at in-hop 1..hops from ``seeds`` (each sorted, excluding seeds)."""
    seen = np.zeros(num_nodes, dtype=bool)
    seen[seeds] = True
    frontier = np.asarray(seeds, dtype=np.int64)
    out = []
    for _ in range(hops):
        _, nbrs = gather_rows(indptr, indices, frontier)
        nbrs = np.unique(nbrs)
        new = nbrs[~seen[nbrs]]
        seen[new] = True
        out.append(new)
        frontier = new
    return out


def local_index_dtype(num_local: int) -> np.dtype:
    """int32 for a part's local ids when they fit (always, in practice), else int64."""
    return np.dtype(np.int32) if num_local < 2**31 else np.dtype(np.int64)


def write_parts(tmp: Path, store: Any, node_part: np.ndarray, num_parts: int,
                halo_hops: int = 1, features: bool = True) -> list[dict[str, Any]]:
    """Write ``part<i>/`` directories for ``node_part`` into ``tmp``; return per-part counts.

    ``store`` is a :class:`gnnflow.data.store.GraphStore`; a homogenized one gives a typed book
    (edge and vertex types, per-type feature shards; the module docstring).
    """
    from gnnflow.io import progress

    n = store.num_nodes
    indptr, indices = store.indptr, store.indices
    typed = typed_layout(store)
    local_map = np.full(n, -1, dtype=np.int64)
    splits = {name: np.asarray(getattr(store, name), dtype=np.int64) for name in ("train_idx", "val_idx", "test_idx")}
    split_part = {name: node_part[ids] for name, ids in splits.items()}
    order = np.argsort(node_part, kind="stable")  # vertices grouped by part, sorted inside
    bounds = np.searchsorted(node_part[order], np.arange(num_parts + 1))
    stats = []
    for i in progress(range(num_parts), desc="writing parts", total=num_parts):
        d = tmp / f"part{i}"
        d.mkdir()
        inner = np.ascontiguousarray(order[bounds[i]:bounds[i + 1]], dtype=np.int64)
        sub_indptr, nbrs = gather_rows(indptr, indices, inner)
        release_pages(indptr, indices)  # a part's rows are spread over the whole CSR
        halo = np.unique(nbrs[node_part[nbrs] != i])
        local_map[inner] = np.arange(inner.shape[0])
        local_map[halo] = np.arange(inner.shape[0], inner.shape[0] + halo.shape[0])
        local = local_map[nbrs]
        local_map[inner] = -1
        local_map[halo] = -1
        if typed is not None:
            local = _write_typed(d, store, typed, inner, halo, sub_indptr, local)
        np.save(d / "inner_ids.npy", inner)
        np.save(d / "halo_ids.npy", halo)
        np.save(d / "indptr.npy", sub_indptr)
        # local ids fit int32 (half the bytes of the structure a rank keeps in memory)
        np.save(d / "indices.npy", local.astype(local_index_dtype(inner.shape[0] + halo.shape[0]), copy=False))
        del nbrs, local
        np.save(d / "labels.npy", np.asarray(store.labels[inner], dtype=np.int64))
        for name, ids in splits.items():
            np.save(d / f"{name}.npy", np.sort(ids[split_part[name] == i]))
        if features and store.features is not None:
            _write_rows(d / "features.npy", store.features, inner)
        if halo_hops > 1:
            hops = khop_in_neighbourhood(indptr, indices, inner, halo_hops, n)
            for k, ids in enumerate(hops[1:], start=2):
                np.save(d / f"halo_ids_hop{k}.npy", ids)
        release_pages(indptr, indices, store.features, store.labels)
        stats.append({"inner": int(inner.shape[0]), "halo": int(halo.shape[0]),
                      "edges": int(sub_indptr[-1])})
        if typed is not None:
            stats[-1]["inner_per_type"] = np.diff(np.searchsorted(inner, typed.offsets)).tolist()
    return stats


@dataclass
class TypedLayout:
    """What a typed book takes from a homogenized store's meta: vertex type names and ranges, the
    relation count, and the featured types with their widths."""

    node_types: list[str]
    offsets: np.ndarray
    num_rels: int
    feature_dims: dict[str, int]

    def book_meta(self, stats: list[dict[str, Any]]) -> dict[str, Any]:
        """The book's ``typed`` record: per part, inner vertices per type (memory estimates)."""
        return {"node_types": self.node_types, "num_rels": self.num_rels, "type_features": self.feature_dims,
                "inner_per_type": [s["inner_per_type"] for s in stats]}


def typed_layout(store: Any) -> TypedLayout | None:
    """The typed layout of a homogenized store (None: an untyped store, an untyped book)."""
    meta = store.meta
    if "edge_type" not in store.extra or not meta.node_types or meta.node_type_offsets is None:
        return None
    dims = {t: int(store.extra[f"features_{t}"].shape[1]) for t in meta.node_types
            if f"features_{t}" in store.extra}
    return TypedLayout(list(meta.node_types), np.asarray(meta.node_type_offsets, dtype=np.int64),
                       len(meta.edge_types or []), dims)


def small_int_dtype(bound: int) -> np.dtype:
    """The narrowest signed integer type that holds ``0 .. bound - 1``."""
    for dt in (np.int8, np.int16, np.int32):
        if bound <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    return np.dtype(np.int64)


def _write_typed(d: Path, store: Any, typed: TypedLayout, inner: np.ndarray, halo: np.ndarray,
                 sub_indptr: np.ndarray, local: np.ndarray) -> np.ndarray:
    """A typed part's ``edge_type``, ``node_type`` and ``features_<ntype>`` files; returns the
    local indices, reordered if the store's rows were not grouped by relation (they are when
    homogenize wrote them: then the very array given)."""
    from gnnflow.sampling.typed import sort_rows_by_type

    _, etypes = gather_rows(store.indptr, store.extra["edge_type"], inner)
    local, etypes = sort_rows_by_type(sub_indptr, local, etypes)
    np.save(d / "edge_type.npy", etypes.astype(small_int_dtype(max(1, typed.num_rels)), copy=False))
    ids = np.concatenate([inner, halo])
    types = np.searchsorted(typed.offsets, ids, side="right") - 1
    np.save(d / "node_type.npy", types.astype(small_int_dtype(len(typed.node_types)), copy=False))
    for t, name in enumerate(typed.node_types):
        if name in typed.feature_dims:
            lo, hi = np.searchsorted(inner, typed.offsets[t:t + 2])
            _write_rows(d / f"features_{name}.npy", store.extra[f"features_{name}"],
                        inner[lo:hi] - typed.offsets[t])
    return local


def _write_rows(path: Path, src: np.ndarray, rows: np.ndarray, chunk_bytes: int = 4 << 20) -> None:
    """Write ``src[rows]`` as a float32 .npy file chunk by chunk (about ``chunk_bytes`` each).

    Plain writes (not a writable memory map, whose dirty pages would count in
    RSS) and the source's pages dropped after every chunk: RSS stays at one chunk
    and the source pages it spans.
    """
    chunk = max(1, chunk_bytes // max(1, int(src.shape[1]) * 4))
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
              "shape": (int(rows.shape[0]), int(src.shape[1]))}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for s in range(0, rows.shape[0], chunk):
            block = np.ascontiguousarray(src[rows[s:s + chunk]], dtype=np.float32)
            f.write(block.data)
            release_pages(src)


def _typed_problems(d: Path, part: Part, typed: dict[str, Any] | None) -> list[str]:
    """A typed part's arrays against the book's ``typed`` record (one line per problem)."""
    if typed is None:
        return []
    from gnnflow.sampling.typed import sort_rows_by_type

    num_rels, names = int(typed["num_rels"]), list(typed["node_types"])
    et, nt = part.edge_types, part.node_types
    out = []
    if et is None or et.shape != (part.num_edges,) or (et.size and (int(et.min()) < 0 or int(et.max()) >= num_rels)):
        out.append(f"{d / 'edge_type.npy'}: missing, or not a relation in [0, {num_rels}) per local edge")
    elif sort_rows_by_type(part.indptr, part.indices, et)[1] is not et:
        out.append(f"{d / 'edge_type.npy'}: a row's entries are not grouped by relation")
    if nt is None or nt.shape != (part.num_local,) or (nt.size and (int(nt.min()) < 0 or int(nt.max()) >= len(names))):
        out.append(f"{d / 'node_type.npy'}: missing, or not a vertex type in [0, {len(names)}) per local vertex")
        return out
    for name, dim in typed["type_features"].items():
        rows = part.type_features.get(name)
        want = (int((np.asarray(nt[: part.num_inner]) == names.index(name)).sum()), int(dim))
        if rows is None or tuple(rows.shape) != want:
            out.append(f"{d / f'features_{name}.npy'}: missing, or not {want[0]} rows of {want[1]} features "
                       f"(the part's inner vertices of type {name})")
    return out


def book_checksums(root: Path) -> dict[str, str]:
    """sha256 of every ``.npy`` file of a book directory, by path relative to it."""
    from gnnflow.data.store import sha256_file

    return {f.relative_to(root).as_posix(): sha256_file(f) for f in sorted(root.rglob("*.npy"))}


def scan_book(path: str | os.PathLike[str], *, checksums: bool = True,
              show_progress: bool = True) -> list[str]:
    """The full check of a partition book, one line per problem: recorded checksums,
    ``node_part`` in [0, P), every vertex inner to exactly the part ``node_part`` names,
    sorted inner/halo id lists, each part's local CSR (monotone ``indptr`` ending at its
    edge count, neighbour ids in [0, inner + halo)), labels and feature rows per inner
    vertex, split ids among the part's inner vertices.  One part in memory at a time."""
    from gnnflow.data.store import checksum_problems
    from gnnflow.io import progress, row_chunks

    book = PartitionBook(path, verify=False)  # every checksum is recomputed below
    p, n, num_parts = book.path, book.num_nodes, book.num_parts
    problems: list[str] = []
    if checksums:
        sums = book.meta.checksums
        if sums:
            problems += checksum_problems(p, sums, rerun="gnnflow partition",
                                          show_progress=show_progress)
        else:
            problems.append(f"{p / 'meta.json'}: records no checksums (book written by an older gnnflow)")
    node_part = np.asarray(book.node_part)
    if n and (int(node_part.min()) < 0 or int(node_part.max()) >= num_parts):
        return [*problems, f"{p / 'node_part.npy'}: part ids outside [0, {num_parts})"]
    seen = np.zeros(n, dtype=bool)
    parts = range(num_parts)
    for i in (progress(parts, desc="checking parts", total=num_parts) if show_progress else parts):
        d = p / f"part{i}"
        try:
            part = book.load_part(i, verify=False)  # every checksum was recomputed above
        except StoreError as exc:
            problems.append(str(exc))
            continue
        inner, halo = np.asarray(part.inner_ids), np.asarray(part.halo_ids)
        if (np.diff(inner) <= 0).any() or (inner.size and (inner[0] < 0 or inner[-1] >= n)):
            problems.append(f"{d / 'inner_ids.npy'}: not strictly increasing ids in [0, {n})")
            continue
        if (node_part[inner] != i).any() or seen[inner].any():
            problems.append(f"{d / 'inner_ids.npy'}: holds vertices that node_part.npy puts in "
                            "another part, or that another part holds too")
        seen[inner] = True
        if (np.diff(halo) <= 0).any() or (halo.size and (halo[0] < 0 or halo[-1] >= n)) \
                or (halo.size and (node_part[halo] == i).any()):
            problems.append(f"{d / 'halo_ids.npy'}: not strictly increasing ids of other parts' vertices")
        ip = np.asarray(part.indptr)
        if ip[0] != 0 or (np.diff(ip) < 0).any() or ip[-1] != part.num_edges:
            problems.append(f"{d / 'indptr.npy'}: not a monotone CSR index from 0 to {part.num_edges}")
        for start, blk in row_chunks(part.indices):
            bad = (blk < 0) | (blk >= part.num_local)
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                problems.append(f"{d / 'indices.npy'}: entry {start + j} is local id {int(blk[j])}, "
                                f"outside [0, {part.num_local})")
                break
        if part.labels.shape != (part.num_inner,):
            problems.append(f"{d / 'labels.npy'}: {part.labels.shape} for {part.num_inner} inner vertices")
        problems += _typed_problems(d, part, book.meta.typed)
        for split in ("train_idx", "val_idx", "test_idx"):
            ids = np.asarray(getattr(part, split))
            if ids.size and not part.is_inner(ids).all():
                problems.append(f"{d / (split + '.npy')}: holds vertices that are not inner to part {i}")
        release_pages(part.indices, part.features)
    if not seen.all():
        problems.append(f"{p}: {int((~seen).sum())} vertices belong to no part "
                        f"(first: {int(np.flatnonzero(~seen)[0])})")
    return problems


def check_book_matches_graph(book_path: str | os.PathLike[str],
                             graph_path: str | os.PathLike[str]) -> None:
    """Raise StoreError unless the book was partitioned from the graph store at ``graph_path``.

    Compares the store fingerprint the book recorded at partition time with the
    store's (both read from meta.json only: cheap).  A book or store written before
    fingerprints existed is compared by vertex and edge counts, with a warning.
    """
    from gnnflow.data.meta import read_store_meta, store_fingerprint
    from gnnflow.io import log

    book_meta = read_book_meta(book_path)
    graph_meta = read_store_meta(graph_path)
    src = book_graph_path(book_path, book_meta) if book_meta.graph else "?"
    want = book_meta.graph_fingerprint
    have = graph_meta.fingerprint or store_fingerprint(graph_meta)
    rerun = f"re-run `gnnflow partition {graph_path} ...` for this graph"
    if want and have:
        if want != have:
            same = Path(src).resolve() == Path(graph_path).resolve()
            origin = (f"an earlier version of {graph_path} (fingerprint {want[:16]}; it now has "
                      f"{have[:16]})" if same else
                      f"{src} (fingerprint {want[:16]}), not {graph_path} (fingerprint {have[:16]})")
            raise StoreError(f"{book_path} was partitioned from {origin}; {rerun}")
        return
    log.warning("%s: cannot prove the partition book was made from %s (%s has no fingerprint; "
                "written by an older gnnflow); comparing vertex and edge counts only",
                book_path, graph_path, "the book" if not want else "the graph store")
    for key in ("num_nodes", "num_edges"):
        counted, have_count = getattr(book_meta, key), getattr(graph_meta, key)
        if counted is not None and counted != have_count:
            raise StoreError(f"{book_path} was partitioned from {src} ({key} {counted}), "
                             f"not {graph_path} ({key} {have_count}); {rerun}")
