"""``gnnflow stage BOOK --part K[,K2] --to DIR [--whole-graph] [--dgl plain|loops|both] [--overwrite]``.

Copies what the ranks of parts K, K2 need (their shard directories and the
book's and graph store's small metadata, :mod:`gnnflow.partition.stage`) into a
host-local ``DIR``; then train on that host with ``--graph DIR/graph
--partition DIR/book``.  See docs/cluster.md.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("book", help="partition book directory (next to its graph store)")
    parser.add_argument("--part", required=True, help="parts to stage, e.g. 2 or 2,3 (those of this host's ranks)")
    parser.add_argument("--to", required=True, dest="out", help="host-local directory to create")
    parser.add_argument("--whole-graph", action="store_true",
                        help="copy the whole graph store too (p3, dgcl replication, data replicate_structure)")
    parser.add_argument("--dgl", choices=("plain", "loops", "both"),
                        help="also the DistDGL peer's layout of these parts (--strategy distdgl): of A (plain), "
                             "of A + I (loops: GCN) or both; written next to the book first if missing")
    parser.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")


def main(args: argparse.Namespace) -> int:
    from gnnflow.partition.meta import read_book_meta
    from gnnflow.partition.stage import parse_parts, stage_book

    parts = parse_parts(args.part, read_book_meta(args.book).num_parts)
    info = stage_book(args.book, parts, args.out, whole_graph=args.whole_graph, overwrite=args.overwrite,
                      dgl=args.dgl)
    print(f"staged parts {','.join(map(str, parts))} ({info['files']} files, {info['bytes'] / 2**20:.1f} MiB) "
          f"-> train with --graph {info['graph']} --partition {info['partition']}")
    return 0
