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
    import json

    from gnnflow.data.check import check_store
    from gnnflow.data.store import FORMAT as STORE_FORMAT
    from gnnflow.partition.book import FORMAT as BOOK_FORMAT
    from gnnflow.partition.book import check_book_matches_graph, scan_book

    meta_file = path / "meta.json"
    if not path.is_dir():
        return "?", [f"{path}: no such directory"]
    try:
        fmt = json.loads(meta_file.read_text()).get("format")
    except (OSError, ValueError, AttributeError) as exc:
        return "?", [f"{meta_file}: cannot read ({type(exc).__name__}: {exc})"]
    if fmt == STORE_FORMAT:
        return "graph store", check_store(path)
    if fmt == BOOK_FORMAT:
        try:
            problems = scan_book(path)
        except StoreError as exc:
            return "partition book", [str(exc)]
        from gnnflow.partition.book import book_graph_path

        target = graph or book_graph_path(path, json.loads(meta_file.read_text()))
        if graph is not None or (target.name and (target / "meta.json").exists()):
            try:
                check_book_matches_graph(path, target)
            except StoreError as exc:
                problems.append(str(exc))
        return "partition book", problems
    return "?", [f"{meta_file}: format {fmt!r} is neither a graph store nor a partition book"]


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
