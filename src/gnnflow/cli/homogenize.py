"""``gnnflow homogenize``: a heterogeneous graph into one homogeneous id space (DistDGLv2 §4.1.1).

``gnnflow homogenize IN --out STORE`` reads a typed graph and writes a
homogenized graph store.  ``IN`` is one of

* OGB's heterogeneous raw layout (a folder with ``raw/triplet-type-list.csv.gz``,
  as ogbn-mag ships);
* gnnflow's typed-directory layout (``graph.json``, ``nodes/<type>/...``,
  ``edges/<src>___<rel>___<dst>.npy``; docs/data.md);
* a graph store: a typed one (``gnnflow prepare ogbn-mag`` or
  ``synthetic-hetero`` already homogenize) is read back to per-type ids and
  homogenized again with this command's options; a plain homogeneous store
  becomes a one-type store with the type arrays added (same CSR).

``gnnflow homogenize --to-typed STORE --out DIR`` goes back: it writes a
homogenized store's per-type ids, features, labels and splits in the
typed-directory layout, so a round trip can be checked with ``diff``-like tools.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.csr import csr_to_coo
from gnnflow.data.hetero import HeteroGraph
from gnnflow.data.homogenize import heterogenize, write_hetero_store
from gnnflow.data.store import open_store
from gnnflow.data.typed_dir import read_typed_dir, write_typed_dir
from gnnflow.errors import GnnflowError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path,
                        help="typed graph directory or OGB heterogeneous dataset root "
                             "(with --to-typed: a homogenized graph store)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    parser.add_argument("--to-typed", action="store_true",
                        help="write a homogenized store back in the typed-directory layout")
    parser.add_argument("--name", default=None, help="dataset name recorded in meta.json")
    parser.add_argument("--ogb-name", default="ogbn-mag",
                        help="OGB dataset whose table row (classes, split) applies to an OGB root")
    parser.add_argument("--no-reverse-edges", dest="reverse_edges", action="store_false",
                        help="do not add a reverse edge type per relation")
    parser.add_argument("--feature-fill", choices=("neighbor-mean", "zero"),
                        default="neighbor-mean",
                        help="how types without features of the common dim fill features.npy")
    parser.add_argument("--seed", type=int, default=0, help="seed of random projections")


def _from_store(path: Path) -> tuple[HeteroGraph, str, dict[str, Any]]:
    store = open_store(path)
    keep = {k: store.meta.extra[k] for k in ("random_features", "random_labels", "generator", "ogb")
            if k in store.meta.extra}
    source = store.meta.source or "store"
    if "node_type" in store.extra:
        return heterogenize(store), source, keep
    src, dst = csr_to_coo(np.asarray(store.indptr), np.asarray(store.indices))
    hg = HeteroGraph(
        name=store.name, num_nodes={"_N": store.num_nodes}, edges={("_N", "_E", "_N"): (src, dst)},
        features={} if store.features is None else {"_N": np.asarray(store.features)},
        labels={"_N": np.asarray(store.labels)},
        splits={s: {"_N": np.asarray(store.split(s))} for s in ("train", "val", "test")},
        num_classes=store.num_classes, target_node_type="_N",
    )
    return hg, source, {**keep, "directed": store.meta.directed}


def main(args: argparse.Namespace) -> int:
    if args.to_typed:
        store = open_store(args.input)
        hg = heterogenize(store)
        write_typed_dir(hg, args.out, overwrite=args.overwrite)
        print(json.dumps({"out": str(args.out), "num_nodes": hg.num_nodes,
                          "edge_types": ["___".join(e) for e in hg.edge_types]}, indent=2))
        return 0
    from gnnflow.data.arrays import scratch_dir

    with scratch_dir(args.out, "convert") as work:
        return _homogenize(args, work)


def _homogenize(args: argparse.Namespace, work: Path) -> int:
    inp: Path = args.input
    if (inp / "raw" / "triplet-type-list.csv.gz").exists():
        from gnnflow.data.ogb import read_ogb_hetero

        hg = read_ogb_hetero(inp, args.ogb_name, work)
        source, meta = "ogb", {}
    elif (inp / "meta.json").exists():
        hg, source, meta = _from_store(inp)
    elif (inp / "graph.json").exists():
        hg = read_typed_dir(inp)
        source, meta = "typed-dir", {}
    else:
        raise GnnflowError(f"{inp}: not a graph store (meta.json), a typed graph directory "
                           "(graph.json) or an OGB heterogeneous root "
                           "(raw/triplet-type-list.csv.gz); see docs/data.md")
    if args.name:
        hg.name = args.name
    # A one-type graph keeps its edges (and directedness) as they are.
    one_type = len(hg.num_nodes) == 1
    store = write_hetero_store(hg, args.out, overwrite=args.overwrite,
                               reverse_edges=args.reverse_edges and not one_type,
                               feature_fill=args.feature_fill, seed=args.seed, source=source,
                               meta=meta)
    from gnnflow.data.stats import summary

    print(json.dumps(summary(store), indent=2, sort_keys=True))
    return 0
