"""``gnnflow predict RUNDIR --out FILE``: every vertex's predicted class and logits, or a layer's
outputs (``--embeddings --layer K``), of a trained run's model, as one Parquet file.

The computation and the file's columns are :mod:`gnnflow.strategies.minibatch.predict`'s; the
command prints a JSON summary (rows, columns, peak memory measured and estimated).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gnnflow.config import DEVICES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUNDIR", help="a run directory (gnnflow train --out)")
    parser.add_argument("--out", required=True, type=Path, help="Parquet file to write")
    parser.add_argument("--graph", default=None, help="graph store (default: the run's)")
    parser.add_argument("--partition", default=None, metavar="BOOK",
                        help="compute on as many ranks as BOOK has parts, each its own vertices")
    parser.add_argument("--workers", type=int, default=None, metavar="P",
                        help="ranks (the book's parts; without --partition the run's book)")
    parser.add_argument("--which", choices=("final", "best"), default="final",
                        help="final weights (model.pt) or best-validation weights (model-best.pt)")
    parser.add_argument("--embeddings", action="store_true",
                        help="write layer --layer's outputs (columns emb_*) instead of predictions")
    parser.add_argument("--layer", type=int, default=None, metavar="K",
                        help="with --embeddings: layer 1..L whose outputs to write (default L-1, the last "
                             "hidden layer)")
    parser.add_argument("--chunk-size", type=int, default=None, metavar="N",
                        help="rows per Parquet row group and destinations per inference chunk (default: "
                             "evaluation's chunks, 65536 rows per group)")
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="where the model runs")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def main(args: argparse.Namespace) -> int:
    from gnnflow.strategies.minibatch.predict import predict

    summary = predict(args.run_dir, args.out, graph=args.graph, partition=args.partition, workers=args.workers,
                      which=args.which, embeddings=args.embeddings, layer=args.layer,
                      chunk_size=args.chunk_size, device=args.device, overwrite=args.overwrite)
    print(json.dumps(summary, indent=2))
    return 0
