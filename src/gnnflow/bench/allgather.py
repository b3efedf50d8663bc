"""``gnnflow bench allgather``: DGCL planners, modeled and measured (DGCL §7, Fig. 10, Tables 6 and 8).

Modes (``--mode``):

``fit`` (default)
    Probe this machine's ranks (``gnnflow topology probe``) unless ``--topology``
    names a probed file, partition a synthetic graph with METIS, plan it with
    ``p2p`` and ``spst`` against the probed topology, then vary the
    communication volume by sending only a random fraction of the vertices
    (as Fig. 10 does) and time one ``graph_allgather`` per (planner, volume)
    on the local ranks, alternating configurations and repeating (medians).
    Reports the least-squares line measured = a * modeled + b and its R².
    Headline ratio: R².
``planners``
    On a preset topology (default ``dgx1-v100``, 8 parts), METIS partitions of
    the default synthetic graph and of graphs of other densities: modeled
    time of every planner (Fig. 7 / Table 6 in model form).  Then, since the
    cost model is what SPST itself optimises, the same graphs are partitioned
    for ``--workers`` local ranks, planned with ``p2p`` and ``spst`` against
    this machine's probed topology, and one full ``graph_allgather`` of each
    plan is timed on those ranks (alternating, ``--repeats`` times, medians):
    measured exchange time per planner next to its modeled cost.  Headline
    ratio: mean of SPST / p2p modeled on the preset; measured SPST / p2p per
    graph is recorded beside it.
``planning-time``
    SPST planning time and modeled cost on a ``--nodes`` (default 1M) vertex
    graph, 8 parts of ``dgx1-v100``: the per-vertex planner (granularity 1,
    the paper's Algorithm 1) and our grouped one (at most 4096 units of
    interchangeable vertices) on the same relation, alternating
    ``--plan-repeats`` times.  Headline ratio: grouped / per-vertex planning
    time; the modeled cost of both plans is the quality check.  The paper's
    Table 8 (Com-Orkut, 3.07M vertices, 8 GPUs: 43.5 s) is shown as context,
    never divided by: it was planned per vertex on another machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.bench.ratios import context, headline, operand, ratio
from gnnflow.comm.collectives import all_reduce
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.devices import HOST

#: context only (never a ratio's operand): DGCL Table 8, SPST planning seconds with 8 GPUs
PAPER_TABLE8_S = {"Reddit": (0.23e6, 4.19), "Com-Orkut": (3.07e6, 43.5), "Web-Google": (0.87e6, 3.42),
                  "Wiki-Talk": (2.39e6, 1.45)}  # vertices, seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=("fit", "planners", "planning-time"), default="fit")
    parser.add_argument("--graph", help="graph store (default: a generated synthetic graph)")
    parser.add_argument("--workers", type=int, default=4, help="fit, planners (measured): local ranks")
    parser.add_argument("--topology", help="fit: probed topology file (default: probe now); "
                                           "planners: preset (default dgx1-v100)")
    parser.add_argument("--feature-dim", type=int, default=None,
                        help="embedding width (default: 512 for fit, so volume dominates per-call overhead; 128 otherwise)")
    parser.add_argument("--volumes", type=int, default=10, help="fit: communication volumes per planner")
    parser.add_argument("--repeats", type=int, default=7,
                        help="fit, planners (measured): timed repetitions (median and min)")
    parser.add_argument("--plan-repeats", type=int, default=3, help="planning-time: runs of each planner")
    parser.add_argument("--nodes", type=int, default=None,
                        help="vertices of the generated graphs (default: 1M for planning-time, the default "
                             "synthetic graph's 32,768 otherwise)")
    parser.add_argument("--avg-degree", type=float, default=12.0, help="planning-time: mean degree")
    parser.add_argument("--densities", default="4,12,24,48", help="planners: mean degrees of the graphs")
    parser.add_argument("--parts", type=int, default=8, help="planners / planning-time: parts")
    parser.add_argument("--partdir", help="planning-time: partition book of --graph (skips METIS)")
    parser.add_argument("--seed", type=int, default=0)


def _metis(store: Any, parts: int, seed: int) -> np.ndarray:
    from gnnflow.partition.metis import metis_partition

    return np.asarray(metis_partition(store, parts, seed).node_part)


def _size(args: argparse.Namespace) -> dict[str, Any]:
    return {"num_nodes": args.nodes} if args.nodes else {}


def _synthetic(tmp: str, name: str, **kw: Any) -> Any:
    from gnnflow.data.synthetic import prepare_synthetic

    return prepare_synthetic(Path(tmp) / name, **kw)


# --------------------------------------------------------------------------- fit


def _time_rank(ctx: RankContext, configs: list[list[Any]], dim: int, repeats: int) -> list[list[list[float]]]:
    """Per config: wall time of each timed call (slowest rank) and CPU time summed over ranks."""
    from gnnflow.comm.allgather import graph_allgather

    gen = torch.Generator().manual_seed(ctx.rank)
    times: list[list[list[float]]] = [[[], []] for _ in configs]
    for k in range(repeats + 1):  # the first round warms up
        for c, tables in enumerate(configs):
            table = tables[ctx.rank]
            x = torch.randn(table.inner_ids.shape[0], dim, generator=gen)
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            graph_allgather(x, table)
            wall = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            cpu = torch.tensor([time.process_time() - c0], dtype=torch.float64)
            all_reduce(wall, HOST, op=dist.ReduceOp.MAX)  # the allgather ends with its slowest rank
            all_reduce(cpu, HOST)  # CPU seconds of all ranks (gloo threads included)
            if k:
                times[c][0].append(float(wall))
                times[c][1].append(float(cpu))
    return times


def fit_line(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Least squares ``y = a x + b``; R² and the largest relative divergence from the line."""
    a, b = np.polyfit(x, y, 1)
    pred = a * x + b
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return {"slope": float(a), "intercept_s": float(b), "r2": 1.0 - ss_res / ss_tot if ss_tot else 1.0,
            "max_rel_divergence": float(np.max(np.abs(y - pred) / np.maximum(pred, 1e-12)))}


def run_fit(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.comm.plan import comm_relation, plan_p2p, plan_spst
    from gnnflow.comm.probe import probe_topology
    from gnnflow.comm.topology import compile_topology, load_topology
    from gnnflow.data.store import open_store
    from gnnflow.runtime.launch import run_ranks

    p = args.workers
    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-allgather-") as tmp:
        if args.topology:
            topo = load_topology(args.topology)
        else:
            topo = compile_topology(probe_topology(p, 16 << 20, 3), "probe")
        topo = topo.restrict(p)
        store = open_store(args.graph) if args.graph else _synthetic(tmp, "graph", seed=args.seed, **_size(args))
        node_part = _metis(store, p, args.seed)
        rel = comm_relation(store.indptr, store.indices, node_part, p)
        plans = {"p2p": plan_p2p(rel, topo, args.seed), "spst": plan_spst(rel, topo, args.seed)}
        rng = np.random.default_rng(args.seed)
        score = rng.random(store.num_nodes)
        fractions = np.linspace(1.0 / args.volumes, 1.0, args.volumes)
        configs, rows = [], []
        for name, plan in plans.items():
            for f in fractions:
                sub = plan.subset(score < f)
                configs.append(sub.tables())
                rows.append({"planner": name, "fraction": float(f), "modeled_s": sub.cost(args.feature_dim),
                             "volume": sub.volume()})
        times = run_ranks(_time_rank, p, configs, args.feature_dim, args.repeats, timeout_s=600)[0]
    for row, (ts, cs) in zip(rows, times, strict=True):
        row["measured_s"] = float(np.median(ts))
        row["measured_min_s"] = float(np.min(ts))
        row["cpu_s"] = float(np.median(cs))
        row["runs_s"], row["cpu_runs_s"] = ts, cs
    x = np.array([r["modeled_s"] for r in rows])
    y = np.array([r["measured_s"] for r in rows])
    fit = fit_line(x, y)
    # on a shared machine other load only adds time: the minimum estimates the uncontended time
    fit_min = fit_line(x, np.array([r["measured_min_s"] for r in rows]))
    # CPU seconds of all ranks: what the transfers cost, whatever else the shared cores run
    fit_cpu = fit_line(x, np.array([r["cpu_s"] for r in rows]))
    per = {name: fit_line(x[[r["planner"] == name for r in rows]], y[[r["planner"] == name for r in rows]])
           for name in plans}
    full = {r["planner"]: r for r in rows if r["fraction"] == fractions[-1]}
    meas_ratio = full["spst"]["measured_s"] / full["p2p"]["measured_s"]
    model_ratio = full["spst"]["modeled_s"] / full["p2p"]["modeled_s"]
    what = f"graph_allgather at full volume, {p} local ranks, dim {args.feature_dim}"
    ratios = [ratio("full volume SPST / p2p: measured allgather time",
                    operand(full["spst"]["measured_s"], "s", f"SPST plan's {what}, median of {args.repeats}"),
                    operand(full["p2p"]["measured_s"], "s", f"p2p plan's {what}, median of {args.repeats}")),
              ratio("full volume SPST / p2p: modeled allgather time",
                    operand(full["spst"]["modeled_s"], "s", f"SPST plan's modeled {what}", "modelled"),
                    operand(full["p2p"]["modeled_s"], "s", f"p2p plan's modeled {what}", "modelled"))]
    r2_name = "R^2 of measured vs modeled allgather time"
    result = {
        "statistics": {r2_name: {"value": fit["r2"], "computed_from": f"{len(rows)} (modeled, measured) points "
                                 "of this run (least squares)"}},
        "summary": (f"allgather fit over {len(rows)} points ({p} ranks, {args.volumes} volumes x 2 planners, "
                    f"dim {args.feature_dim}): R^2 = {fit['r2']:.4f} (p2p {per['p2p']['r2']:.4f}, "
                    f"spst {per['spst']['r2']:.4f}); slope {fit['slope']:.3f}, intercept "
                    f"{fit['intercept_s'] * 1e3:.2f} ms; R^2 of the per-point minimum {fit_min['r2']:.4f}; R^2 of "
                    f"CPU time {fit_cpu['r2']:.4f}; "
                    f"full volume spst/p2p measured {meas_ratio:.3f} "
                    f"({full['spst']['measured_s'] * 1e3:.1f} vs {full['p2p']['measured_s'] * 1e3:.1f} ms), "
                    f"modeled {model_ratio:.3f}"),
        "fit": fit, "fit_min": fit_min, "fit_cpu": fit_cpu, "fit_per_planner": per, "points": rows, "workers": p,
        "topology": topo.describe(), "stages": {n: pl.num_stages for n, pl in plans.items()},
        "spst_over_p2p_measured": meas_ratio, "spst_over_p2p_modeled": model_ratio,
        "ratios": ratios, "ratio": fit["r2"], "ratio_name": r2_name,
    }
    return result


# --------------------------------------------------------------------------- planners


def run_planners(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.comm.report import plan_report
    from gnnflow.comm.topology import load_topology
    from gnnflow.data.store import open_store

    topo = load_topology(args.topology or "dgx1-v100")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-planners-") as tmp:
        graphs: list[tuple[str, Any]] = []
        if args.graph:
            graphs.append((Path(args.graph).name, open_store(args.graph)))
        for d in (float(x) for x in args.densities.split(",")):
            name = "synthetic-default" if d == 12.0 else f"synthetic-deg{d:g}"
            graphs.append((name, _synthetic(tmp, name, avg_degree=d, seed=args.seed, **_size(args))))
        for name, store in graphs:
            node_part = _metis(store, args.parts, args.seed)
            rep = plan_report(store.indptr, store.indices, node_part, args.parts, topo, 2, args.feature_dim,
                              args.seed)
            pl = rep["planners"]
            rows.append({"graph": name, "nodes": store.num_nodes, "edges": store.num_edges,
                         "avg_degree": store.num_edges / store.num_nodes, "halo_total": rep["halo_total"],
                         "p2p_ms": pl["p2p"]["modeled_ms"], "spst_ms": pl["spst"]["modeled_ms"],
                         "swap_ms": pl["swap"]["modeled_ms"], "spst_over_p2p": rep["spst_over_p2p"],
                         "spst_stages": pl["spst"]["stages"], "spst_relayed": pl["spst"]["relayed"],
                         "replication_factor_2hop": pl["replication"]["replication_factor"],
                         "spst_planning_s": pl["spst"]["planning_s"]})
        measured, local_topo = _measure_planners(graphs, args)
    for row in rows:
        row["measured"] = measured[row["graph"]]
    mean = float(np.mean([r["spst_over_p2p"] for r in rows]))

    def modelled(planner: str) -> dict[str, Any]:
        return operand(float(np.mean([r[f"{planner}_ms"] / r["p2p_ms"] for r in rows])), "x p2p",
                       f"mean over the graphs of {planner}'s modeled allgather time / p2p's on {topo.name}, "
                       f"{args.parts} parts", "modelled")

    ratios = [ratio(f"SPST / p2p modeled allgather time ({topo.name}, mean over graphs)", modelled("spst"),
                    modelled("p2p"))]
    for r in rows:
        m = r["measured"]
        ratios.append(ratio(f"{r['graph']}: SPST / p2p measured allgather time ({args.workers} local ranks)",
                            operand(m["spst_ms"], "ms", f"graph_allgather of the SPST plan, {args.workers} local "
                                    f"ranks, dim {args.feature_dim}, median of {args.repeats}"),
                            operand(m["p2p_ms"], "ms", f"graph_allgather of the p2p plan, {args.workers} local "
                                    f"ranks, dim {args.feature_dim}, median of {args.repeats}")))
    table = "; ".join(f"{r['graph']} p2p {r['p2p_ms']:.4f} ms spst {r['spst_ms']:.4f} ms "
                      f"({r['spst_over_p2p']:.3f}), measured on {args.workers} ranks p2p "
                      f"{r['measured']['p2p_ms']:.2f} ms spst {r['measured']['spst_ms']:.2f} ms "
                      f"({r['measured']['spst_ms'] / r['measured']['p2p_ms']:.3f}; modeled "
                      f"{r['measured']['spst_modeled_ms'] / r['measured']['p2p_modeled_ms']:.3f})" for r in rows)
    result = {"summary": f"{topo.name}, {args.parts} parts, dim {args.feature_dim}: mean spst/p2p modeled "
                         f"{mean:.3f}; {table}",
              "rows": rows, "topology": topo.name, "measured_topology": local_topo, "workers": args.workers}
    return headline(result, ratios)


def _measure_planners(graphs: list[tuple[str, Any]], args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """Per graph: p2p and SPST planned for ``--workers`` local ranks against this machine's probed
    topology, and one full ``graph_allgather`` of each timed on those ranks (median over repeats)."""
    from gnnflow.comm.plan import comm_relation, plan_p2p, plan_spst
    from gnnflow.comm.probe import probe_topology
    from gnnflow.comm.topology import compile_topology
    from gnnflow.runtime.launch import run_ranks

    p = args.workers
    topo = compile_topology(probe_topology(p, 16 << 20, 3), "probe").restrict(p)
    configs, keys, plans = [], [], {}
    for name, store in graphs:
        rel = comm_relation(store.indptr, store.indices, _metis(store, p, args.seed), p)
        for planner, plan in (("p2p", plan_p2p(rel, topo, args.seed)), ("spst", plan_spst(rel, topo, args.seed))):
            configs.append(plan.tables())
            keys.append((name, planner))
            plans[(name, planner)] = plan
    times = run_ranks(_time_rank, p, configs, args.feature_dim, args.repeats, timeout_s=600)[0]
    out: dict[str, Any] = {name: {} for name, _ in graphs}
    for (name, planner), (ts, cs) in zip(keys, times, strict=True):
        out[name][f"{planner}_ms"] = 1e3 * float(np.median(ts))
        out[name][f"{planner}_cpu_ms"] = 1e3 * float(np.median(cs))
        out[name][f"{planner}_modeled_ms"] = 1e3 * plans[(name, planner)].cost(args.feature_dim)
    return out, topo.describe()


# --------------------------------------------------------------------------- planning time


def run_planning_time(args: argparse.Namespace) -> dict[str, Any]:
    from gnnflow.comm.plan import comm_relation, plan_p2p, plan_spst
    from gnnflow.comm.topology import load_topology
    from gnnflow.data.store import open_store
    from gnnflow.partition.book import PartitionBook

    topo = load_topology(args.topology or "dgx1-v100").restrict(args.parts)
    with tempfile.TemporaryDirectory(prefix="gnnflow-bench-plantime-") as tmp:
        t0 = time.perf_counter()
        if args.graph:
            store = open_store(args.graph)
        else:
            store = _synthetic(tmp, "graph", num_nodes=args.nodes or 1_000_000, avg_degree=args.avg_degree,
                               feature_dim=4, seed=args.seed)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if args.partdir:
            node_part = np.asarray(PartitionBook.open(args.partdir).node_part)
        else:
            node_part = _metis(store, args.parts, args.seed)
        metis_s = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        rel = comm_relation(store.indptr, store.indices, node_part, args.parts)
        rel_s, rel_c = time.perf_counter() - t0, time.process_time() - c0
        planners = {"per_vertex": 1, "grouped": None}  # granularity: 1 = the paper's Algorithm 1
        wall: dict[str, list[float]] = {k: [] for k in planners}
        cpu: dict[str, list[float]] = {k: [] for k in planners}
        plans: dict[str, Any] = {}
        for r in range(args.plan_repeats):
            for name in (list(planners) if r % 2 == 0 else list(planners)[::-1]):
                plans[name] = plan_spst(rel, topo, args.seed, granularity=planners[name])
                wall[name].append(plans[name].planning_time_s)
                cpu[name].append(plans[name].info["cpu_s"])
        p2p = plan_p2p(rel, topo, args.seed)
        nodes, avg_degree = store.num_nodes, store.num_edges / store.num_nodes
    med = {k: float(np.median(v)) for k, v in wall.items()}
    med_cpu = {k: float(np.median(v)) for k, v in cpu.items()}
    cost = {k: plans[k].cost(args.feature_dim) for k in planners}
    cost["p2p"] = p2p.cost(args.feature_dim)
    remote = int(rel.vertices.shape[0])
    label = {"per_vertex": "SPST per vertex (granularity 1, Algorithm 1)",
             "grouped": f"SPST grouped ({plans['grouped'].info['units']} units of <= "
                        f"{plans['grouped'].info['granularity']} vertices)"}
    setting = f"{nodes} vertices ({remote} remote), {args.parts} parts of {topo.name}"

    def plan_time(k: str) -> dict[str, Any]:
        return operand(med[k], "s", f"{label[k]} planning time on {setting}, median of {args.plan_repeats}")

    def plan_cost(k: str) -> dict[str, Any]:
        return operand(cost[k] * 1e3, "ms", f"modeled allgather time of the {label.get(k, 'p2p')} plan, dim "
                       f"{args.feature_dim}", "modelled")

    ratios = [ratio("SPST planning time: grouped / per vertex", plan_time("grouped"), plan_time("per_vertex")),
              ratio("SPST modeled allgather time: grouped / per vertex", plan_cost("grouped"),
                    plan_cost("per_vertex"), "~ 1.0"),
              ratio("modeled allgather time: per-vertex SPST / p2p", plan_cost("per_vertex"), plan_cost("p2p"))]
    v_paper, s_paper = PAPER_TABLE8_S["Com-Orkut"]
    result = {
        "summary": (f"SPST planning on {setting}: per vertex {med['per_vertex']:.3f} s (CPU "
                    f"{med_cpu['per_vertex']:.3f} s), grouped {med['grouped']:.3f} s (CPU {med_cpu['grouped']:.3f} s): "
                    f"grouped/per-vertex {ratios[0]['value']:.4f}; modeled allgather per vertex "
                    f"{cost['per_vertex'] * 1e3:.4f} ms, grouped {cost['grouped'] * 1e3:.4f} ms "
                    f"({ratios[1]['value']:.4f}), p2p {cost['p2p'] * 1e3:.4f} ms; relation {rel_s:.3f} s. "
                    f"Context, not compared: DGCL Table 8 plans Com-Orkut ({v_paper:.3g} vertices) in "
                    f"{s_paper} s on its machine"),
        "per_vertex_s": med["per_vertex"], "grouped_s": med["grouped"], "per_vertex_cpu_s": med_cpu["per_vertex"],
        "grouped_cpu_s": med_cpu["grouped"], "runs_s": wall, "cpu_runs_s": cpu,
        "modeled_ms": {k: v * 1e3 for k, v in cost.items()}, "relation_s": rel_s, "relation_cpu_s": rel_c,
        "p2p_s": p2p.planning_time_s, "generate_s": gen_s, "metis_s": metis_s,
        "units": {k: plans[k].info["units"] for k in planners},
        "granularity": {k: plans[k].info["granularity"] for k in planners},
        "remote_vertices": remote, "nodes": nodes, "avg_degree": avg_degree,
        "context": {"dgcl_table8_spst_s": {name: context(sec, "s", f"DGCL Table 8, {name} ({v:.3g} vertices), 8 "
                                                     "GPUs, its machine") for name, (v, sec) in PAPER_TABLE8_S.items()}},
    }
    return headline(result, ratios)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.feature_dim is None:
        args.feature_dim = 512 if args.mode == "fit" else 128
    return {"fit": run_fit, "planners": run_planners, "planning-time": run_planning_time}[args.mode](args)
