"""Typed, versioned ``meta.json`` of a partition book: :class:`BookMeta`, the one reader
(:func:`read_book_meta`) and the one writer (:func:`write_book_meta`).

The same rules as a graph store's (:mod:`gnnflow.data.meta`): ``format``
``gnnflow-partition-book`` and ``version`` 1, typed keys checked once as the file is read
(a problem is one StoreError line naming the file), and what a method records of its own
(``backend``, ``coarsen``, ``row_bounds``, ``tile_nnz``, ...) kept in ``extra``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gnnflow.data.meta import MetaFile, read_meta_file, write_meta_file


@dataclass(kw_only=True)
class BookMeta(MetaFile):
    """``meta.json`` of a partition book (:mod:`gnnflow.partition.book`)."""

    FORMAT: ClassVar[str] = "gnnflow-partition-book"
    VERSION: ClassVar[int] = 1
    KIND: ClassVar[str] = "partition book"
    MAKE: ClassVar[str] = "gnnflow partition"

    method: str
    num_parts: int
    num_nodes: int
    num_edges: int | None = None
    params: dict[str, Any] | None = None
    seed: int | None = None
    #: the graph store it was made from, relative to the book (older books: absolute)
    graph: str | None = None
    graph_name: str | None = None
    graph_fingerprint: str | None = None  # the store's fingerprint (gnnflow.data.meta)
    num_classes: int | None = None
    feature_dim: int | None = None
    levels: list[int] | None = None  # two-level: machines x workers per machine
    #: edge cut, balance and per-part sizes (gnnflow.partition.metrics.quality)
    quality: dict[str, Any] | None = None
    idx_bits: int | None = None  # width of the parts' local indices
    halo_hops: int | None = None
    #: a typed book (a homogenized store): vertex types, relation count, featured types with their
    #: widths, and per part its inner vertices per type (:class:`gnnflow.partition.book.TypedLayout`)
    typed: dict[str, Any] | None = None
    constraints: list[str] | None = None
    checksums: dict[str, str] | None = None
    validated: bool | None = None
    provenance: dict[str, Any] | None = None
    timings: dict[str, float] | None = None
    # a copy made by `gnnflow stage`
    staged_parts: list[int] | None = None
    staged_from: str | None = None
    staged_whole_graph: bool | None = None
    note: str | None = None


def read_book_meta(path: str | os.PathLike[str]) -> BookMeta:
    """``meta.json`` of the partition book at ``path`` (nothing else is read)."""
    return read_meta_file(BookMeta, path)


def write_book_meta(directory: str | os.PathLike[str], meta: BookMeta) -> Path:
    """Write ``meta`` as ``directory/meta.json``, atomically (see
    :func:`gnnflow.data.meta.write_meta_file`)."""
    return write_meta_file(directory, meta)
