"""``gnnflow bench partition``: our METIS pipeline vs ``dgl.distributed.partition_graph``.

The pipelines start from the same graph store on disk and end with every
part's structure and feature shard written:

* ours, plain METIS (the headline, like for like with DGL's):
  ``partition_graph(store, "metis", P, constraints=vertices,train,edges,
  coarsen="none")``: multi-constraint METIS through libmetis on the whole
  graph (DistDGLv2 §4.1.3), writing the book;
* DGL: load the store into a DGLGraph, ``partition_graph(part_method="metis",
  balance_ntypes=train_mask, balance_edges=True)`` (DGL's own balance of
  vertices, training vertices and edges; METIS on the whole graph too),
  writing DGL's layout;
* ours, coarsened (a second row, a different algorithm): the same call with
  ``coarsen="lp"``: METIS partitions the graph coarsened by label propagation
  and the result is refined on the way back (what ``--coarsen auto`` does from
  2^21 adjacency entries, to bound memory); its edge cut is the price.

Each run is a fresh subprocess (the three alternate, in a rotating order,
``--repeat`` times) whose peak RSS is read from ``VmHWM`` in
``/proc/self/status``, the high-water mark of its own address space.  (Not
``ru_maxrss``: Python starts subprocesses with vfork, and Linux carries the
high-water mark of the address space replaced at exec -- the parent's, which
generated the graph -- into the child's ``ru_maxrss``.)  Medians are reported.  RSS counts the pages of the
memory-mapped store that a pipeline touches, so "peak RSS vs CSR+features size"
is the honest whole-process figure; the RSS above the interpreter's baseline
(after imports) is reported too.

Every partition's edge cut is reported (quality is part of the comparison).
One more fresh process runs plain METIS (``--coarsen none``) alone on the whole
graph's ``idx_t`` arrays: its peak RSS, and the RSS METIS adds above its
inputs, show what the coarsening saves.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gnnflow.bench.ratios import headline, operand, ratio
from gnnflow.io import proc_memory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", default=None, help="graph store (default: generate a synthetic one)")
    parser.add_argument("--nodes", type=int, default=200_000, help="vertices of the generated synthetic graph")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each pipeline (alternating)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")


def _rss_mib() -> float:
    """Peak RSS of this process's address space (``VmHWM``), MiB."""
    return proc_memory("VmHWM") / 2**20 or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


#: our pipelines: worker name -> ``coarsen`` mode of ``partition_graph(method="metis")``
OURS = {"ours": "none", "ours-lp": "lp"}
WORKERS = (*OURS, "dgl", "metis-alone")


def worker(which: str, graph: str, parts: int, out: str, seed: int) -> dict[str, Any]:
    """One pipeline run inside this (fresh) process."""
    import numpy as np

    if which == "dgl":
        import dgl  # noqa: F401  (import cost is not part of the pipeline)
        import torch  # noqa: F401
    from gnnflow.data.store import open_store

    base = _current_rss_mib()
    t0 = time.perf_counter()
    store = open_store(graph, validate=False)
    if which == "metis-alone":
        return _metis_alone(store, parts, seed, base)
    if which in OURS:
        from gnnflow.partition.api import partition_graph

        partition_graph(store, "metis", parts, out, seed=seed, constraints=["vertices", "train", "edges"],
                        coarsen=OURS[which])
    else:
        import contextlib
        import io

        from dgl.distributed import partition_graph as dgl_partition_graph

        from gnnflow.partition.dgl_interop import store_to_dgl

        g = store_to_dgl(store)
        with contextlib.redirect_stdout(io.StringIO()):
            orig_nids, _ = dgl_partition_graph(g, "bench", parts, out, part_method="metis",
                                               balance_ntypes=g.ndata["train_mask"], balance_edges=True,
                                               return_mapping=True)
    wall = time.perf_counter() - t0
    result = {"wall_s": wall, "peak_rss_mib": _rss_mib(), "baseline_rss_mib": base}
    # quality, after the peak was read: ours from meta.json, DGL's from its node map
    if which in OURS:
        from gnnflow.partition.meta import read_book_meta

        meta = read_book_meta(out)
        result.update(edge_cut_pct=(meta.quality or {})["edge_cut_pct"], coarsen=meta.extra.get("coarsen"))
    else:
        from gnnflow.partition.metrics import edge_cut

        ranges = json.loads((Path(out) / "bench.json").read_text())["node_map"]
        bounds = np.asarray([r[1] for r in next(iter(ranges.values()))])
        node_part = np.empty(store.num_nodes, dtype=np.int32)
        node_part[np.asarray(orig_nids)] = np.searchsorted(bounds, np.arange(store.num_nodes), side="right")
        result["edge_cut_pct"] = 100.0 * edge_cut(store.indptr, store.indices, node_part) / store.num_edges
    return result


def _metis_alone(store: Any, parts: int, seed: int, base: float) -> dict[str, Any]:
    """Only ``METIS_PartGraphKway`` on the inputs ``partition_graph(method="metis")`` builds."""
    from gnnflow.io import as_idx
    from gnnflow.partition.constraints import constraint_weights
    from gnnflow.partition.metis import load_libmetis, metis_graph, part_graph_kway

    _, idx = load_libmetis()
    vw = constraint_weights(store, ["vertices", "train", "edges"], dtype=idx)
    indptr, indices = metis_graph(store)
    xadj, adjncy = as_idx(indptr, idx), as_idx(indices, idx)
    del indptr, indices
    inputs = _current_rss_mib()
    t0 = time.perf_counter()
    part_graph_kway(xadj, adjncy, parts, vwgt=vw, seed=seed)
    return {"wall_s": time.perf_counter() - t0, "peak_rss_mib": _rss_mib(), "baseline_rss_mib": base,
            "inputs_rss_mib": inputs}


def _run_once(which: str, graph: str, parts: int, seed: int, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"gnnflow-bench-partition-{which}-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "gnnflow.bench.partition", "--worker", which, "--graph", graph,
               "--parts", str(parts), "--out", str(out), "--seed", str(seed)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"bench partition ({which}) failed: {proc.stderr.strip().splitlines()[-3:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])


def graph_bytes(store: Any) -> int:
    """Bytes of the CSR (indptr + indices) and the feature matrix."""
    n = store.indptr.nbytes + store.indices.nbytes
    return int(n + (store.features.nbytes if store.features is not None else 0))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.data.store import open_store

    tmpdir = None
    graph = args.graph
    if graph is None:
        from gnnflow.data.synthetic import prepare_synthetic

        tmpdir = tempfile.mkdtemp(prefix="gnnflow-bench-partition-graph-")
        graph = str(Path(tmpdir) / f"synthetic{args.nodes}")
        prepare_synthetic(graph, num_nodes=args.nodes, seed=args.seed)
    try:
        store = open_store(graph)
        size_mib = graph_bytes(store) / 2**20
        names = [*OURS, "dgl"]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for r in range(args.repeat):
            for which in names[r % 3:] + names[:r % 3]:
                runs[which].append(_run_once(which, graph, args.parts, args.seed, args.timeout))
        alone = _run_once("metis-alone", graph, args.parts, args.seed, args.timeout)
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)

    def med(which: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[which])

    label = {"ours": "gnnflow METIS, plain (--coarsen none)", "ours-lp": "gnnflow METIS, LP-coarsened (--coarsen lp)",
             "dgl": "dgl.distributed.partition_graph(metis)"}
    size = f"{store.num_nodes} vertices, {store.num_edges} edges, {args.parts} parts"

    def op(which: str, key: str, unit: str, what: str, kind: str = "measured") -> dict[str, Any]:
        return operand(med(which, key), unit, f"{label[which]}: {what} ({size}), median of {args.repeat}", kind)

    ratios = []
    for which in OURS:
        tag = "plain METIS" if which == "ours" else "coarsened METIS"
        ratios += [ratio(f"partition time: ours ({tag}) / DGL", op(which, "wall_s", "s", "store to written parts"),
                         op("dgl", "wall_s", "s", "store to written parts"), "<= 1.0"),
                   ratio(f"peak RSS: ours ({tag}) / DGL", op(which, "peak_rss_mib", "MiB", "peak RSS (VmHWM)"),
                         op("dgl", "peak_rss_mib", "MiB", "peak RSS (VmHWM)")),
                   ratio(f"edge cut: ours ({tag}) / DGL", op(which, "edge_cut_pct", "% of edges", "edge cut",
                                                              "counted"),
                         op("dgl", "edge_cut_pct", "% of edges", "edge cut", "counted"))]
    t = {k: med(k, "wall_s") for k in runs}
    rss = {k: med(k, "peak_rss_mib") for k in runs}
    cut = {k: med(k, "edge_cut_pct") for k in runs}
    above = {k: statistics.median(r["peak_rss_mib"] - r["baseline_rss_mib"] for r in runs[k]) for k in runs}
    metis_peak, metis_own = alone["peak_rss_mib"], alone["peak_rss_mib"] - alone["inputs_rss_mib"]

    def row(k: str, name: str) -> str:
        return (f"{name} {t[k]:.2f}s, peak RSS {rss[k]:.0f} MiB = {rss[k] / size_mib:.2f}x CSR+features "
                f"({above[k]:.0f} MiB above baseline), cut {cut[k]:.2f}%")

    result = {
        "summary": (f"partition {size}: plain METIS ours/DGL time = {t['ours'] / t['dgl']:.3f}, peak RSS "
                    f"{rss['ours'] / rss['dgl']:.3f}; coarsened ours/DGL time = {t['ours-lp'] / t['dgl']:.3f}, "
                    f"peak RSS {rss['ours-lp'] / rss['dgl']:.3f}, cut {cut['ours-lp']:.2f}% vs {cut['dgl']:.2f}%. "
                    f"{row('ours', 'ours plain')}; {row('ours-lp', 'ours coarsened')}; {row('dgl', 'DGL')}; "
                    f"graph {size_mib:.0f} MiB; median of {args.repeat}. Plain METIS call alone: peak "
                    f"{metis_peak:.0f} MiB = {metis_peak / size_mib:.2f}x, of which {metis_own:.0f} MiB = "
                    f"{metis_own / size_mib:.2f}x is libmetis's working memory above its input arrays"),
        "num_nodes": store.num_nodes,
        "num_edges": store.num_edges,
        "parts": args.parts,
        "graph_csr_features_mib": size_mib,
        "wall_s": t,
        "peak_rss_mib": rss,
        "rss_above_baseline_mib": above,
        "rss_over_graph": {k: v / size_mib for k, v in rss.items()},
        "edge_cut_pct": cut,
        "ours_coarsen": {k: runs[k][0].get("coarsen") for k in OURS},
        "metis_alone_peak_rss_mib": metis_peak,
        "metis_alone_rss_over_graph": metis_peak / size_mib,
        "metis_working_mib": metis_own,
        "metis_working_over_graph": metis_own / size_mib,
        "runs": {**runs, "metis-alone": [alone]},
    }
    return headline(result, ratios)


def _worker_main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=WORKERS, required=True)
    p.add_argument("--graph", required=True)
    p.add_argument("--parts", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    os.environ.setdefault("DGLBACKEND", "pytorch")
    print(json.dumps(worker(a.worker, a.graph, a.parts, a.out, a.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
