"""``gnnflow bench data-parallel``: our data-parallel epoch vs DGL 1.1.3 DistDGL on the same partitions.

Both systems train the same model (same hyperparameters: hidden, layers,
fanouts, local batch size, optimizer, learning rate) for ``--epochs`` epochs
with P trainer ranks on the same partition book (DistDGL reads it through
:func:`gnnflow.partition.dgl_interop.write_dgl_partitions`), alternating
ours / DistDGL ``--repeats`` times in the same benchmark run.  The epoch time
of a run is the median over its epochs after the first (warm-up) of the
slowest rank; the headline ratio is the median of ours over the median of
DistDGL's (issue 5 goal <= 1.0).  Test accuracy after the last epoch is
reported for both, as a check that both trained.

Each rank gets ``--threads`` torch threads (default 1; DGL's servers run with
``OMP_NUM_THREADS=1``), so P ranks fit the machine's cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", help="graph store (default: the default synthetic graph, generated)")
    parser.add_argument("--partition", help="partition book with --workers parts (default: METIS, generated)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="sage")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-pipeline", action="store_true", help="our side without the async pipeline")
    parser.add_argument("--seed", type=int, default=0)


def train_and_time(ctx: Any, strategy: str, cfg_dict: dict[str, Any], threads: int) -> dict[str, Any]:
    """Prepare ``strategy`` on this rank, run every epoch timing each, evaluate once."""
    from gnnflow.config import TrainConfig
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.base import strategy_class

    torch.set_num_threads(threads)
    cfg = TrainConfig.from_dict(dict(cfg_dict, strategy=strategy))
    s = strategy_class(strategy)(cfg, ctx)
    t = time.perf_counter()
    s.prepare()
    prepare_s = time.perf_counter() - t
    epochs, breakdown = [], []
    for e in range(cfg.epochs):
        rec = Recorder()
        t = time.perf_counter()
        s.run_epoch(e, rec)
        epochs.append(time.perf_counter() - t)
        breakdown.append(dict(rec.times))
    accs = s.evaluate()
    close = getattr(s, "close", None)
    if close is not None:
        close()
    return {"epoch_s": epochs, "prepare_s": prepare_s, "acc": accs, "times": breakdown}


def _run_system(strategy: str, cfg_dict: dict[str, Any], args: Any) -> dict[str, Any]:
    from gnnflow.distributed.launch import run_ranks

    res = run_ranks(train_and_time, args.workers, strategy, cfg_dict, args.threads, timeout_s=900,
                    threads_per_rank=args.threads)
    per_epoch = [max(r["epoch_s"][e] for r in res) for e in range(len(res[0]["epoch_s"]))]
    timed = per_epoch[1:] or per_epoch
    return {"epoch_s": statistics.median(timed), "epochs": per_epoch, "test_acc": res[0]["acc"]["test_acc"],
            "prepare_s": max(r["prepare_s"] for r in res), "rank0_times": res[0]["times"][-1]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.data.synthetic import prepare_synthetic
    from gnnflow.partition.api import partition_graph

    fanouts = [int(f) for f in str(args.fanouts).split(",")]
    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-dp-") as tmp:
        graph = args.graph or str(prepare_synthetic(Path(tmp) / "graph").path)
        book = args.partition or str(partition_graph(graph, "metis", args.workers, Path(tmp) / "book",
                                                     seed=args.seed).path)
        cfg = dict(graph=graph, partition=book, model=args.model, hidden=args.hidden, num_layers=len(fanouts),
                   fanouts=fanouts, batch_size=args.batch_size, epochs=args.epochs, seed=args.seed,
                   workers=args.workers, options={"pipeline": not args.no_pipeline})
        ours, peer = [], []
        for _ in range(args.repeats):
            ours.append(_run_system("data", cfg, args))
            peer.append(_run_system("distdgl", cfg, args))
    o = statistics.median(r["epoch_s"] for r in ours)
    d = statistics.median(r["epoch_s"] for r in peer)
    ratio = o / d
    summary = (f"data-parallel epoch time ours/DistDGL = {ratio:.3f} (goal <= 1.0); median epoch s: ours "
               f"{o:.3f}, DistDGL {d:.3f}; test acc ours {ours[-1]['test_acc']:.4f}, DistDGL "
               f"{peer[-1]['test_acc']:.4f}; workers={args.workers}, model={args.model}, hidden={args.hidden}, "
               f"fanouts={args.fanouts}, batch={args.batch_size}, pipeline={not args.no_pipeline}")
    return {"ratio": ratio, "ratio_name": "ours_epoch_s / distdgl_epoch_s", "summary": summary,
            "ours": ours, "distdgl": peer, "ours_epoch_s": o, "distdgl_epoch_s": d, "workers": args.workers}
