"""Staging: a host-local copy of what the ranks of some parts need (``gnnflow stage``).

``stage_book(book, parts, out)`` writes::

    OUT/book/meta.json        the book's meta, with "graph": "../graph" and
                              "staged_parts": the parts copied
    OUT/book/node_part.npy    (and node_machine.npy, perm.npy when the book has them)
    OUT/book/part<K>/         every file of each staged part (its shard)
    OUT/graph/meta.json       the graph store's meta
    OUT/graph/{train,val,test}_idx.npy   the store's split ids

so that ``gnnflow train --graph OUT/graph --partition OUT/book`` runs on a host
that holds nothing else, for the strategies whose ranks read only their shard
and small metadata (docs/cluster.md lists which).  *Small* here means: no
per-edge and no per-vertex feature data of other parts; the top-level
``node_part.npy`` is per vertex (4 bytes each) and the split files hold the
split's vertex ids (8 bytes each).  ``whole_graph=True`` copies the whole graph
store instead of its meta and splits, for strategies that read it at training
time (p3's feature columns, dgcl's replication baseline, data with
``replicate_structure``).  ``dgl="plain"|"loops"|"both"`` adds the DistDGL
peer's layout of the staged parts (``OUT/book.dgl``, ``OUT/book.dgl-loops``:
its JSON, ``orig_nids.npy`` and the parts' directories), written next to the
original book first when it is not there; a host then serves its parts with
no whole-graph file.

The copy is written next to ``OUT`` and renamed into place, so a failed stage
leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

from gnnflow.data.store import SPLITS
from gnnflow.errors import ConfigError
from gnnflow.io import atomic_dir
from gnnflow.partition.book import PartitionBook
from gnnflow.partition.meta import write_book_meta

#: top-level book files a rank may read besides its part (per vertex; copied when present)
BOOK_TOP_FILES = ("node_part.npy", "node_machine.npy", "perm.npy")


def parse_parts(text: str, num_parts: int) -> list[int]:
    """``"0,1"`` -> [0, 1], each in [0, num_parts)."""
    try:
        parts = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        raise ConfigError(f"--part {text!r}: expected part numbers like 0 or 0,1") from None
    if not parts or parts[0] < 0 or parts[-1] >= num_parts:
        raise ConfigError(f"--part {text!r}: the book has parts 0..{num_parts - 1}")
    return parts


#: ``--dgl`` choices: which DGL layouts (of A + I or not) to stage
DGL_LAYOUTS = {"plain": (False,), "loops": (True,), "both": (False, True)}


def _stage_dgl_layout(book: PartitionBook, graph: Path, parts: list[int], out_book: Path, loops: bool) -> list[Path]:
    """The DGL layout's top files and ``parts``' directories, beside the staged book."""
    from gnnflow.partition.dgl_interop import dgl_layout, ensure_dgl_layout

    layout = ensure_dgl_layout(str(book.path), str(graph), self_loops=loops)
    dest = dgl_layout(str(out_book), self_loops=loops)
    dest.mkdir()
    copied = [Path(shutil.copy2(f, dest / f.name)) for f in sorted(layout.iterdir()) if f.is_file()]
    for k in parts:
        shutil.copytree(layout / f"part{k}", dest / f"part{k}")
        copied += sorted((dest / f"part{k}").iterdir())
    return copied


def stage_book(book_path: str | os.PathLike[str], parts: list[int], out: str | os.PathLike[str],
               whole_graph: bool = False, overwrite: bool = False, dgl: str | None = None) -> dict[str, Any]:
    """Copy what the ranks of ``parts`` need into ``out`` (see the module docstring); return a
    summary (files and bytes copied).  ``dgl``: also the DistDGL peer's layout of these parts
    (``plain``: of A, ``loops``: of A + I, as GCN trains; ``both``), written next to the book
    first if it is not there."""
    book = PartitionBook(book_path)
    graph = book.graph_path
    if not (graph / "meta.json").exists():
        raise ConfigError(f"{book.path}: its graph store {graph} is not here (needed for its meta.json); "
                          "stage from a copy of the book that sits with its graph")
    for k in parts:
        book.part_dir(k)  # in range, and present in this (perhaps staged) copy
    copied: list[Path] = []
    with atomic_dir(out, overwrite=overwrite) as tmp:
        (tmp / "book").mkdir()
        for name in BOOK_TOP_FILES:
            if (book.path / name).exists():
                copied.append(Path(shutil.copy2(book.path / name, tmp / "book" / name)))
        for k in parts:
            shutil.copytree(book.part_dir(k), tmp / "book" / f"part{k}")
            copied += sorted((tmp / "book" / f"part{k}").rglob("*.npy"))
        staged = dataclasses.replace(book.meta, graph=os.path.join("..", "graph"), staged_parts=list(parts),
                                     staged_from=str(book.path.resolve()),
                                     staged_whole_graph=bool(whole_graph))
        write_book_meta(tmp / "book", staged)
        for loops in DGL_LAYOUTS[dgl] if dgl else ():
            copied += _stage_dgl_layout(book, graph, parts, tmp / "book", loops)
        if whole_graph:
            shutil.copytree(graph, tmp / "graph")
            copied += sorted((tmp / "graph").rglob("*.npy"))
        else:
            (tmp / "graph").mkdir()
            shutil.copy2(graph / "meta.json", tmp / "graph" / "meta.json")
            for name in SPLITS:
                if (graph / f"{name}.npy").exists():
                    copied.append(Path(shutil.copy2(graph / f"{name}.npy", tmp / "graph" / f"{name}.npy")))
        nbytes = sum(f.stat().st_size for f in copied)
    return {"out": str(out), "parts": parts, "files": len(copied), "bytes": nbytes, "whole_graph": whole_graph,
            "graph": str(Path(out) / "graph"), "partition": str(Path(out) / "book")}
