"""``gnnflow check DIR``: the full scan of a graph store or a partition book.

Stores and books are validated when written and opened cheaply (headers, sizes,
checksums of small files); this command repeats the whole validation on demand:
every checksum, id ranges, monotone ``indptr``, labels, finite features, splits
(stores); part membership, halos, local CSRs and splits (books), and whether a
book still matches the graph it was partitioned from.  Prints ``OK`` or one line
per problem; exit status 1 when a problem is found.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gnnflow.errors import StoreError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                        help="graph store or partition book directory")
    parser.add_argument("--graph", type=Path, default=None,
                        help="books: compare with this graph store (default: the one recorded "
                             "in the book's meta.json, when it exists)")


def check_dir(path: Path, graph: Path | None = None) -> tuple[str, list[str]]:
    """``(kind, problems)`` for a store or book directory."""
    from gnnflow.data.check import check_store
    from gnnflow.data.meta import MetaFormatError, read_store_meta
    from gnnflow.partition.book import book_graph_path, check_book_matches_graph, scan_book
    from gnnflow.partition.meta import BookMeta, read_book_meta

    if not path.is_dir():
        return "?", [f"{path}: no such directory"]
    try:
        read_store_meta(path)
    except MetaFormatError as exc:  # a book, or neither
        if exc.found != BookMeta.FORMAT:
            return "?", [f"{path / 'meta.json'}: format {exc.found!r} is neither a graph store nor "
                         "a partition book"]
    except StoreError as exc:  # missing, not JSON, another version, a bad key
        return "?", [str(exc)]
    else:
        return "graph store", check_store(path)
    try:
        meta = read_book_meta(path)
        problems = scan_book(path)
    except StoreError as exc:
        return "partition book", [str(exc)]
    target = graph or book_graph_path(path, meta)
    if graph is not None or (target.name and (target / "meta.json").exists()):
        try:
            check_book_matches_graph(path, target)
        except StoreError as exc:
            problems.append(str(exc))
    return "partition book", problems


def main(args: argparse.Namespace) -> int:
    failed = False
    for d in args.dirs:
        kind, problems = check_dir(d, args.graph)
        if problems:
            failed = True
            for line in problems:
                print(line)
        else:
            print(f"{d}: OK ({kind})")
    return 1 if failed else 0
