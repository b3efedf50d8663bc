"""``gnnflow bench partition``: our METIS pipeline vs ``dgl.distributed.partition_graph``.

Both pipelines start from the same graph store on disk and end with every
part's structure and feature shard written:

* ours: ``partition_graph(store, "metis", P, constraints=vertices,train,edges)``
  (multi-constraint METIS through libmetis, DistDGLv2 §4.1.3; on graphs from
  2^21 adjacency entries METIS partitions the label-propagation-coarsened graph
  and the result is refined, ``--coarsen auto``) writing the book;
* DGL: load the store into a DGLGraph, ``partition_graph(part_method="metis",
  balance_ntypes=train_mask, balance_edges=True)`` (DGL's own balance of
  vertices, training vertices and edges), writing DGL's layout.

Each run is a fresh subprocess whose peak RSS is read from ``VmHWM`` in
``/proc/self/status``, the high-water mark of its own address space.  (Not
``ru_maxrss``: Python starts subprocesses with vfork, and Linux carries the
high-water mark of the address space replaced at exec -- the parent's, which
generated the graph -- into the child's ``ru_maxrss``.)  The runs alternate
ours/DGL and repeat, and medians are reported.  RSS counts the pages of the
memory-mapped store that a pipeline touches, so "peak RSS vs CSR+features size"
is the honest whole-process figure; the RSS above the interpreter's baseline
(after imports) is reported too.

Both partitions' edge cuts are reported (quality is part of the comparison).
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", default=None, help="graph store (default: generate a synthetic one)")
    parser.add_argument("--nodes", type=int, default=200_000, help="vertices of the generated synthetic graph")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each pipeline (alternating)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")


def _rss_mib() -> float:
    """Peak RSS of this process's address space (``VmHWM``), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # pragma: no cover - not Linux


def _current_rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


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
    if which == "ours":
        from gnnflow.partition.api import partition_graph

        partition_graph(store, "metis", parts, out, seed=seed, constraints=["vertices", "train", "edges"])
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
    if which == "ours":
        meta = json.loads((Path(out) / "meta.json").read_text())
        result.update(edge_cut_pct=meta["quality"]["edge_cut_pct"], coarsen=meta.get("coarsen"))
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
    from gnnflow.partition.constraints import constraint_weights
    from gnnflow.partition.metis import as_idx, load_libmetis, metis_graph, part_graph_kway

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
        runs: dict[str, list[dict[str, Any]]] = {"ours": [], "dgl": []}
        for _ in range(args.repeat):
            for which in ("ours", "dgl"):
                runs[which].append(_run_once(which, graph, args.parts, args.seed, args.timeout))
        alone = _run_once("metis-alone", graph, args.parts, args.seed, args.timeout)
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)

    def med(which: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[which])

    t_ours, t_dgl = med("ours", "wall_s"), med("dgl", "wall_s")
    rss_ours, rss_dgl = med("ours", "peak_rss_mib"), med("dgl", "peak_rss_mib")
    above_ours = statistics.median(r["peak_rss_mib"] - r["baseline_rss_mib"] for r in runs["ours"])
    above_dgl = statistics.median(r["peak_rss_mib"] - r["baseline_rss_mib"] for r in runs["dgl"])
    cut_ours, cut_dgl = med("ours", "edge_cut_pct"), med("dgl", "edge_cut_pct")
    coarsen = runs["ours"][0].get("coarsen")
    ratio = t_ours / t_dgl
    metis_peak, metis_own = alone["peak_rss_mib"], alone["peak_rss_mib"] - alone["inputs_rss_mib"]
    return {
        "ratio": ratio,
        "ratio_name": "wall time ours / dgl.distributed.partition_graph (metis), median",
        "summary": (f"partition {store.num_nodes} vertices / {store.num_edges} edges into {args.parts}: "
                    f"time ours/DGL = {ratio:.3f} ({t_ours:.2f}s vs {t_dgl:.2f}s); peak RSS ours "
                    f"{rss_ours:.0f} MiB = {rss_ours / size_mib:.2f}x CSR+features ({size_mib:.0f} MiB), "
                    f"DGL {rss_dgl:.0f} MiB = {rss_dgl / size_mib:.2f}x; above baseline ours "
                    f"{above_ours:.0f} MiB, DGL {above_dgl:.0f} MiB; edge cut ours {cut_ours:.2f}% "
                    f"(coarsen {coarsen}), DGL {cut_dgl:.2f}%; median of {args.repeat}. "
                    f"Plain METIS call alone (coarsen none): peak {metis_peak:.0f} MiB = "
                    f"{metis_peak / size_mib:.2f}x, of which {metis_own:.0f} MiB = {metis_own / size_mib:.2f}x "
                    f"is libmetis's working memory above its input arrays"),
        "num_nodes": store.num_nodes,
        "num_edges": store.num_edges,
        "parts": args.parts,
        "graph_csr_features_mib": size_mib,
        "ours_wall_s": t_ours,
        "dgl_wall_s": t_dgl,
        "ours_peak_rss_mib": rss_ours,
        "dgl_peak_rss_mib": rss_dgl,
        "ours_rss_over_graph": rss_ours / size_mib,
        "dgl_rss_over_graph": rss_dgl / size_mib,
        "ours_rss_above_baseline_mib": above_ours,
        "dgl_rss_above_baseline_mib": above_dgl,
        "ours_edge_cut_pct": cut_ours,
        "dgl_edge_cut_pct": cut_dgl,
        "ours_coarsen": coarsen,
        "metis_alone_peak_rss_mib": metis_peak,
        "metis_alone_rss_over_graph": metis_peak / size_mib,
        "metis_working_mib": metis_own,
        "metis_working_over_graph": metis_own / size_mib,
        "runs": {**runs, "metis-alone": [alone]},
    }


def _worker_main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=["ours", "dgl", "metis-alone"], required=True)
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
