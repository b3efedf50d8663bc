"""``gnnflow info DIR``: print a graph store's meta and statistics as JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gnnflow.data.stats import summary
from gnnflow.data.store import open_store, verify_checksums
from gnnflow.errors import StoreError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", type=Path, help="graph store directory")
    parser.add_argument("--verify-checksums", action="store_true",
                        help="recompute the sha256 of every array and compare with meta.json")


def main(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    info = summary(store)
    if args.verify_checksums:
        bad = verify_checksums(store)
        if bad:
            raise StoreError(f"{store.path}: checksum mismatch in {', '.join(bad)}; "
                             "the store was modified or damaged, re-run `gnnflow prepare`")
        info["checksums_ok"] = True
    print(json.dumps(info, indent=2, sort_keys=True))
    return 0
