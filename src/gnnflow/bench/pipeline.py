"""``gnnflow bench pipeline``: epoch time with vs without the async mini-batch pipeline (DistDGLv2 §4.2.1).

One data-parallel trainer (default 1 rank on the whole graph; ``--workers P``
uses a partition book, METIS by default) runs five kinds of epoch, in the same
process, each as a block of consecutive epochs on a pipeline made for that
block (so the pipelined mode never prefetches while another is timed), blocks
repeated ``--repeats`` times (medians reported):

* ``inline``          — ``--no-pipeline``: schedule, sample, copy features, train, in turn;
* ``pipeline``        — the same stages in the sampling/worker threads, ahead of training;
* ``sampling``        — the stages alone as the pipeline runs them (batches produced and
  dropped): sampling-only time;
* ``sampling_inline`` — the stages alone, inline (for reference);
* ``compute``         — forward/backward/all-reduce/step alone on pre-made batches: compute-only time.

Headline ratio ``pipeline / inline`` (issue 5 goal <= 0.8 where sampling and
compute take comparable time); also ``pipeline / max(sampling, compute)``
(goal <= 1.15: the pipelined epoch is as long as its slower part), and the
same against ``sampling_inline``.

``--samplers process`` (default here; ``gnnflow train --samplers process``) runs
the sample and load stages in a sampler process per rank
(:mod:`gnnflow.strategies.minibatch.sampler_process`); ``--samplers thread`` in the sampling
and worker threads of DistDGLv2 §4.2.1, which share the interpreter lock with
the training thread.  On a small shared CPU, overlap needs a free core for the
stages while the training thread computes: torch runs with ``--threads``
intra-op threads (default 1).  ``--hidden`` sets the
compute cost; ``--hidden auto`` picks, from a short calibration, the hidden
size whose compute time is closest to the sampling time (the regime the
issue's 0.8 refers to).  Sampling and compute are also reported so a reader
can see which regime was measured, and so are the CPU cores the process
actually obtained while pipelined (process CPU time / wall time): on a host
whose cores are taken by other work (Linux autogroup gives each session one
share, however many threads it runs) this stays near 1 and no overlap is
possible, whatever the pipeline does.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from gnnflow.bench.ratios import headline, operand, ratio

DEFAULT_GRAPH = "synthetic default (generated into a temporary directory)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", help="graph store (default: the default synthetic graph, generated)")
    parser.add_argument("--partition", help="partition book for --workers > 1 (default: METIS, generated)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--model", default="sage")
    parser.add_argument("--hidden", default="auto", help="hidden size, or 'auto' (compute ~ sampling)")
    parser.add_argument("--fanouts", default="15,10,5", help="per-layer fanouts, input layer last "
                        "(default: DistDGLv2 §5's three-layer 15,10,5)")
    parser.add_argument("--batch-size", type=int, default=1000, help="targets per rank (default: DistDGLv2 §5's 1000)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    parser.add_argument("--samplers", choices=("process", "thread"), default="process",
                        help="where the pipeline samples: a sampler process per rank (default here) or "
                        "the sampling thread of DistDGLv2 §4.2.1 (train's default; = --opt samplers=...)")
    parser.add_argument("--seed", type=int, default=0)


def _cfg(args: Any, graph: str, hidden: int) -> dict[str, Any]:
    fanouts = [int(f) for f in str(args.fanouts).split(",")]
    return dict(graph=graph, strategy="data", partition=args.partition, model=args.model, hidden=hidden,
                # --batch-size is per rank here; TrainConfig's batch_size is the global mini-batch
                num_layers=len(fanouts), fanouts=fanouts, batch_size=args.batch_size * args.workers, epochs=10_000,
                seed=args.seed, workers=args.workers, dropout=0.0, options={"samplers": args.samplers})


def measure(ctx: Any, cfg_dict: dict[str, Any], modes: list[str], epochs: int, threads: int) -> dict[str, Any]:
    """Seconds (wall and process CPU) per epoch of each mode, measured on this rank.

    Each mode runs as one block of ``1 + epochs`` consecutive epochs (the first
    is warm-up and not timed) on a pipeline made for that block alone, so the
    pipelined mode runs across its own epoch boundaries as in training but can
    never prefetch while another mode is being timed.
    """
    from gnnflow.config import TrainConfig
    from gnnflow.results.schema import Recorder
    from gnnflow.strategies.minibatch.data_parallel import DataParallel

    torch.set_num_threads(threads)
    out: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    s = DataParallel(TrainConfig.from_dict(cfg_dict), ctx)
    s.prepare()

    def cpu_now() -> float:  # this rank's CPU time, its sampler process's included
        return time.process_time() + (s.sampler_proc.cpu_seconds() if s.sampler_proc is not None else 0.0)

    first = 0
    for m in modes:
        asynchronous = m in ("pipeline", "sampling")  # sampling_inline/inline/compute: inline stages
        pipe = s.make_pipeline(first, 1 + epochs, asynchronous=asynchronous).start()
        rec = Recorder()
        for e in range(1 + epochs):
            batches = [pipe.get() for _ in range(s.num_batches)] if m == "compute" else None
            t, c = time.perf_counter(), cpu_now()
            for j in range(s.num_batches):
                if m == "compute":
                    s.train_batch(batches[j], rec)  # type: ignore[index]
                    continue
                mb = pipe.get()
                if m in ("pipeline", "inline"):
                    s.train_batch(mb, rec)
            if e > 0:
                out[m].append(time.perf_counter() - t)
                cpu[m].append(cpu_now() - c)
        pipe.close()
        first += 1 + epochs
    s.close()
    return {"times": out, "cpu": cpu, "num_batches": s.num_batches}


def _load() -> str:
    import os

    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:  # pragma: no cover
        return "n/a"


def _default_graph(tmp: str) -> str:
    from gnnflow.data.synthetic import prepare_synthetic

    return str(prepare_synthetic(f"{tmp}/graph").path)


def _run(args: Any, graph: str, hidden: int, modes: list[str], epochs: int) -> dict[str, Any]:
    from gnnflow.runtime.launch import run_ranks

    res = run_ranks(measure, args.workers, _cfg(args, graph, hidden), modes, epochs, args.threads,
                    timeout_s=600, threads_per_rank=args.threads)
    # the slowest rank sets the epoch time
    times = {m: [max(r["times"][m][i] for r in res) for i in range(len(res[0]["times"][m]))] for m in modes}
    times["cpu"] = {m: [sum(r["cpu"][m][i] for r in res) for i in range(len(res[0]["cpu"][m]))] for m in modes}
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-pipeline-") as tmp:
        graph = args.graph or _default_graph(tmp)
        if args.workers > 1 and not args.partition:
            from gnnflow.partition.api import partition_graph

            args.partition = str(partition_graph(graph, "metis", args.workers, f"{tmp}/book", seed=args.seed).path)
        calibration = {}
        if str(args.hidden) == "auto":
            for h in (32, 128, 512):
                t = _run(args, graph, h, ["sampling", "compute"], 1)
                calibration[h] = {m: statistics.median(t[m]) for m in ("sampling", "compute")}
            hidden = min(calibration, key=lambda h: abs(calibration[h]["compute"] / calibration[h]["sampling"] - 1))
        else:
            hidden = int(args.hidden)
        modes = ["inline", "pipeline", "sampling", "sampling_inline", "compute"]
        runs = [_run(args, graph, hidden, modes, args.epochs) for _ in range(args.repeats)]
    times = {m: [x for r in runs for x in r[m]] for m in modes}
    cpu = {m: [x for r in runs for x in r["cpu"][m]] for m in modes}
    med = {m: statistics.median(v) for m, v in times.items()}
    # CPU cores this run actually obtained while pipelined: overlap needs more than one
    cores = statistics.median(c / max(w, 1e-9) for c, w in zip(cpu["pipeline"], times["pipeline"], strict=True))
    setting = (f"samplers={args.samplers}, hidden {hidden}, {args.workers} rank(s), {args.threads} thread(s)/rank, "
               f"median of {args.repeats}x{args.epochs} epochs")

    def epoch(*modes: str) -> dict[str, Any]:
        m = max(modes, key=lambda k: med[k])
        return operand(med[m], "s/epoch", f"{' / '.join(modes)} epoch ({m} is the slower), {setting}"
                       if len(modes) > 1 else f"{m} epoch, {setting}")

    # sampling-only: the stages alone as the pipeline runs them; also against the stages run inline
    ratios = [ratio("epoch time: pipeline / inline", epoch("pipeline"), epoch("inline"), "<= 0.8"),
              ratio("epoch time: pipeline / max(sampling-only, compute-only)", epoch("pipeline"),
                    epoch("sampling", "compute"), "<= 1.15"),
              ratio("epoch time: pipeline / max(sampling-only inline, compute-only)", epoch("pipeline"),
                    epoch("sampling_inline", "compute"))]
    ratio_, ratio_bound, ratio_inline_bound = (r["value"] for r in ratios)
    summary = (f"pipeline/inline epoch time = {ratio_:.3f} (goal <= 0.8); pipeline/max(sampling, compute) = "
               f"{ratio_bound:.3f} (goal <= 1.15; {ratio_inline_bound:.3f} with sampling run inline); "
               f"median epoch s: pipeline {med['pipeline']:.3f}, inline "
               f"{med['inline']:.3f}, sampling-only {med['sampling']:.3f} (inline {med['sampling_inline']:.3f}), "
               f"compute-only {med['compute']:.3f}; samplers={args.samplers}, hidden={hidden}, "
               f"workers={args.workers}, threads/rank={args.threads}; CPU cores obtained while pipelined "
               f"{cores:.2f} (host load {_load()})")
    return headline({"summary": summary,
            "ratio_vs_bound": ratio_bound, "ratio_vs_inline_sampling_bound": ratio_inline_bound,
            "median_epoch_s": med, "epoch_s": times, "cpu_s": cpu,
            "cores_obtained_pipelined": cores, "hidden": hidden,
            "calibration": {str(k): v for k, v in calibration.items()}, "workers": args.workers,
            "threads": args.threads, "samplers": args.samplers, "batch_size": args.batch_size,
            "fanouts": args.fanouts,
            "model": args.model, "repeats": args.repeats, "epochs": args.epochs}, ratios)
