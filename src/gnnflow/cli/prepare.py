"""``gnnflow prepare SOURCE --out DIR``: download, convert or generate a graph store.

Sources (docs/data.md describes each):

* ``synthetic``          power-law community graph with a homophily knob
* ``synthetic-hetero``   small ogbn-mag-shaped typed graph, homogenized (DistDGLv2 §4.1.1)
* ``ogb NAME`` or ``ogbn-arxiv|ogbn-products|ogbn-papers100M|ogbn-mag``
* ``planetoid NAME`` or ``cora|citeseer|pubmed``  from the original ``ind.<name>.*`` files
* ``snap NAME|--file F`` SNAP edge lists with random features and labels
* ``import DIR``         bring your own graph (layout in docs/data.md)
* ``npz FILE``           an attributed graph in Shchur et al.'s ``.npz`` layout (Amazon, Coauthor,
                         CitationFull)
* ``magnn NAME``         MAGNN's heterogeneous DBLP or IMDB (PyG's raw files), homogenized

Sources without a split of their own (``npz``; ``import`` without split files) draw one with
``--split random|per-class`` (:mod:`gnnflow.data.splits`).

Every source writes through :func:`gnnflow.data.store.write_store`, which is
atomic: a failing run leaves no output directory behind.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gnnflow.data.store import NORMALIZATIONS
from gnnflow.data.synthetic import DEFAULTS
from gnnflow.errors import GnnflowError

_OGB_ALIASES = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-mag")
_PLANETOID_ALIASES = ("cora", "citeseer", "pubmed")


def _family(sub: Any, family: str, aliases: Sequence[str], what: str, dataset_help: str,
            alias_help: str) -> list[argparse.ArgumentParser]:
    """The parser of a source ``family`` (which takes the dataset's name) and one per alias of
    it (the dataset fixed by the command's name)."""
    parsers = [sub.add_parser(family, help=what)]
    parsers[0].add_argument("dataset", help=dataset_help)
    return parsers + [sub.add_parser(name, help=alias_help.format(name=name)) for name in aliases]


def _common(p: argparse.ArgumentParser, seed: bool = True) -> None:
    p.add_argument("--out", required=True, type=Path, help="graph store directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument("--name", default=None, help="dataset name recorded in meta.json")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--normalize-features", choices=NORMALIZATIONS, default="none",
                   help="row: divide each feature row by its sum, all-zero rows stay zero (Kipf & "
                        "Welling; PyG NormalizeFeatures); needs non-negative features. Recorded "
                        "in meta.json as feature_normalization (default none)")


def _raw_dir(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--raw-dir", type=Path, default=None,
                   help=f"directory holding the {what} files already on disk "
                        "(downloaded there when missing and online)")


def _directed(p: argparse.ArgumentParser) -> None:
    p.add_argument("--directed", action="store_true",
                   help="keep edges one-way as given (default: store both directions)")


def _split(p: argparse.ArgumentParser, method: str, when: str) -> None:
    """The split a source draws ``when`` it has none (:class:`gnnflow.data.splits.SplitSpec`)."""
    from gnnflow.data.splits import SPLIT_METHODS

    p.add_argument("--split", choices=SPLIT_METHODS, default=method,
                   help=f"{when}: random (--train-frac, --val-frac of the labelled vertices) or per-class "
                        f"(--train-per-class and --val-per-class vertices of each class, the rest test); "
                        f"drawn with --seed (default {method})")
    p.add_argument("--train-frac", type=float, default=0.6, help="--split random: training share (default 0.6)")
    p.add_argument("--val-frac", type=float, default=0.2, help="--split random: validation share (default 0.2)")
    p.add_argument("--train-per-class", type=int, default=20, metavar="K",
                   help="--split per-class: training vertices per class (default 20, Shchur et al.)")
    p.add_argument("--val-per-class", type=int, default=30, metavar="M",
                   help="--split per-class: validation vertices per class (default 30)")


def _split_spec(args: argparse.Namespace) -> Any:
    from gnnflow.data.splits import SplitSpec

    return SplitSpec(method=args.split, train_frac=args.train_frac, val_frac=args.val_frac,
                     train_per_class=args.train_per_class, val_per_class=args.val_per_class, seed=args.seed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)

    p = sub.add_parser("synthetic", help="power-law community graph with a homophily knob")
    _common(p)
    p.add_argument("--nodes", "--num-nodes", dest="nodes", type=int, default=DEFAULTS["num_nodes"])
    p.add_argument("--avg-degree", type=float, default=DEFAULTS["avg_degree"],
                   help="mean degree; the store holds nodes*avg_degree directed edges")
    p.add_argument("--feature-dim", type=int, default=DEFAULTS["feature_dim"])
    p.add_argument("--classes", "--num-classes", dest="classes", type=int,
                   default=DEFAULTS["num_classes"])
    p.add_argument("--homophily", type=float, default=DEFAULTS["homophily"],
                   help="probability that an edge stays inside its class")
    p.add_argument("--feature-signal", type=float, default=DEFAULTS["feature_signal"],
                   help="class-centroid separation in units of feature noise")
    p.add_argument("--train-frac", type=float, default=DEFAULTS["train_frac"])
    p.add_argument("--val-frac", type=float, default=DEFAULTS["val_frac"])
    p.add_argument("--power-law-exponent", type=float, default=DEFAULTS["power_law_exponent"])
    p.add_argument("--train-classes", type=int, default=None, metavar="K",
                   help="draw the training split only from classes 0..K-1 (K communities), like "
                        "ogbn-papers100M's labelled region; default: uniform over all vertices")

    p = sub.add_parser("synthetic-hetero", help="ogbn-mag-shaped typed graph (small, or a size preset)")
    _common(p)
    from gnnflow.data.hetero_synthetic import HETERO_DEFAULTS, PRESETS

    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="sizes shaped like a public graph: ogbn-mag (1.94M vertices, 21.1M edges, 128-d paper "
                        "features, the other types featureless, 349 classes) or igbh-small (3.1M vertices, "
                        "1024-d features on every type); the flags below override it (default: a small graph)")
    for flag, key, typ in (("--papers", "num_papers", int), ("--authors", "num_authors", int),
                           ("--institutions", "num_institutions", int), ("--fields", "num_fields", int),
                           ("--classes", "num_classes", int), ("--paper-dim", "paper_dim", int),
                           ("--author-dim", "author_dim", int), ("--field-dim", "field_dim", int),
                           ("--institution-dim", "institution_dim", int),
                           ("--cites-per-paper", "cites_per_paper", float),
                           ("--authors-per-paper", "authors_per_paper", float),
                           ("--fields-per-paper", "fields_per_paper", int),
                           ("--affiliation-frac", "affiliation_frac", float)):
        aliases = ["--num-" + flag[2:]] if key.startswith("num_") else []
        p.add_argument(flag, *aliases, dest=key, type=typ, default=None,
                       help=f"default {HETERO_DEFAULTS[key]} (0 dims: featureless)" if key.endswith("_dim")
                       else f"default {HETERO_DEFAULTS[key]}")
    _hetero_options(p)

    for p in _family(sub, "ogb", _OGB_ALIASES, "an OGB node-property dataset by name",
                     "e.g. ogbn-arxiv, ogbn-products, ogbn-papers100M, ogbn-mag", "OGB {name}"):
        _common(p)
        _raw_dir(p, "OGB dataset (the folder with raw/ and split/)")
        _directed(p)
        _hetero_options(p)

    for p in _family(sub, "planetoid", _PLANETOID_ALIASES, "Cora/CiteSeer/PubMed from ind.<name>.* files",
                     "cora, citeseer or pubmed", "Planetoid {name} (public split)"):
        _common(p, seed=False)
        p.add_argument("--raw-dir", type=Path, required=True,
                       help="directory holding ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}")

    p = sub.add_parser("snap", help="SNAP edge list with random features and labels")
    p.add_argument("dataset", nargs="?", default=None,
                   help="a named SNAP graph (com-Orkut, com-Friendster, web-Google, wiki-Talk, ...)")
    p.add_argument("--file", type=Path, default=None, help="a local edge list (.txt or .txt.gz)")
    _common(p)
    _raw_dir(p, "SNAP edge list")
    _directed(p)
    p.add_argument("--feature-dim", type=int, default=128)
    p.add_argument("--classes", "--num-classes", dest="classes", type=int, default=16)
    p.add_argument("--train-frac", type=float, default=0.65)
    p.add_argument("--val-frac", type=float, default=0.10)

    p = sub.add_parser("import", help="bring your own graph (layout in docs/data.md)")
    p.add_argument("directory", type=Path, help="input directory")
    _common(p)
    _directed(p)
    _split(p, "random", "when the directory has no split files")

    p = sub.add_parser("npz", help="attributed graph in Shchur et al.'s .npz layout (Amazon, Coauthor, "
                                   "CitationFull)")
    p.add_argument("file", type=Path, help="the .npz file")
    _common(p)
    _directed(p)
    p.add_argument("--binarize-features", action="store_true",
                   help="set every positive attribute to 1, as PyG's read_npz does")
    _split(p, "per-class", "the file has no split")

    p = sub.add_parser("magnn", help="MAGNN's heterogeneous DBLP or IMDB from PyG's raw files, homogenized "
                                     "(docs/hetero.md)")
    p.add_argument("dataset", help="dblp or imdb")
    _common(p)
    p.add_argument("--raw-dir", type=Path, required=True,
                   help="directory holding node_types.npy, adjM.npz, features_<t>.npz|npy, labels.npy and "
                        "train_val_test_idx.npz")
    _hetero_options(p)


def _hetero_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-reverse-edges", dest="reverse_edges", action="store_false",
                   help="heterogeneous graphs: do not add a reverse edge type per relation")
    p.add_argument("--feature-fill", choices=("neighbor-mean", "zero"), default="neighbor-mean",
                   help="heterogeneous graphs: how vertex types without features of the common "
                        "dim get a row in features.npy")


def main(args: argparse.Namespace) -> int:
    store = prepare(args)
    from gnnflow.data.stats import summary

    print(json.dumps(summary(store), indent=2, sort_keys=True))
    return 0


def prepare(args: argparse.Namespace) -> Any:
    """Dispatch on ``args.source``; return the opened store."""
    src = args.source
    if Path(args.out).exists() and not args.overwrite:
        # Fail before a long download or conversion, not after it.
        raise GnnflowError(f"{args.out} already exists; remove it or pass --overwrite")
    common = {"overwrite": args.overwrite, "name": args.name,
              "normalize_features": args.normalize_features}
    if src == "synthetic":
        from gnnflow.data.synthetic import prepare_synthetic

        return prepare_synthetic(
            args.out, num_nodes=args.nodes, avg_degree=args.avg_degree,
            feature_dim=args.feature_dim, num_classes=args.classes, homophily=args.homophily,
            train_frac=args.train_frac, seed=args.seed, val_frac=args.val_frac,
            feature_signal=args.feature_signal, power_law_exponent=args.power_law_exponent,
            train_classes=args.train_classes, **common,
        )
    if src == "synthetic-hetero":
        from gnnflow.data.hetero_synthetic import HETERO_DEFAULTS, prepare_synthetic_hetero

        sizes = {k: getattr(args, k) for k in HETERO_DEFAULTS if getattr(args, k, None) is not None}
        return prepare_synthetic_hetero(
            args.out, preset=args.preset, reverse_edges=args.reverse_edges, feature_fill=args.feature_fill,
            **{**sizes, "seed": args.seed}, **common,
        )
    if src == "ogb" or src in _OGB_ALIASES:
        from gnnflow.data.ogb import prepare_ogb

        return prepare_ogb(
            args.dataset if src == "ogb" else src, args.out, raw_dir=args.raw_dir,
            symmetrize=not args.directed, reverse_edges=args.reverse_edges,
            feature_fill=args.feature_fill, seed=args.seed, **common,
        )
    if src == "planetoid" or src in _PLANETOID_ALIASES:
        from gnnflow.data.planetoid import prepare_planetoid

        return prepare_planetoid(args.dataset if src == "planetoid" else src, args.out,
                                 raw_dir=args.raw_dir, **common)
    if src == "snap":
        from gnnflow.data.snap import prepare_snap

        return prepare_snap(
            args.out, dataset=args.dataset, file=args.file, raw_dir=args.raw_dir,
            symmetrize=not args.directed, feature_dim=args.feature_dim,
            num_classes=args.classes, train_frac=args.train_frac, val_frac=args.val_frac,
            seed=args.seed, **common,
        )
    if src == "import":
        from gnnflow.data.importer import prepare_import

        return prepare_import(args.directory, args.out, symmetrize=not args.directed,
                              split=_split_spec(args), **common)
    if src == "npz":
        from gnnflow.data.npz import prepare_npz

        return prepare_npz(args.file, args.out, symmetrize=not args.directed,
                           binarize_features=args.binarize_features, split=_split_spec(args), **common)
    if src == "magnn":
        from gnnflow.data.magnn import prepare_magnn

        return prepare_magnn(args.dataset, args.out, raw_dir=args.raw_dir, reverse_edges=args.reverse_edges,
                             feature_fill=args.feature_fill, seed=args.seed, **common)
    print(f"unknown source {src}", file=sys.stderr)  # pragma: no cover - argparse rejects it
    return 2
