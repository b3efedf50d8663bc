"""``gnnflow plan PARTDIR --topology PRESET_OR_FILE [--layers L] [--json]`` (DGCL §5, §7).

Builds the communication relation of a partition book (§4.1), plans it with
every planner and prints the modeled time of one ``graph_allgather`` (§5.1 cost
model, at ``--feature-dim``), of one epoch (``L`` forward allgathers and
``L - 1`` backward ones: input features need no gradient), the number of
stages, the embeddings moved over links, the send/receive table memory
(Fig. 11) and the planning time (Table 8).  ``replication`` has no
communication; its cost is the ``L``-hop replication factor (§3, Fig. 4).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from gnnflow.distributed.plan import DEFAULT_UNITS, comm_relation, model_swap, plan_p2p, plan_spst
from gnnflow.distributed.topology import load_topology
from gnnflow.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("partdir", help="partition book directory (gnnflow partition)")
    parser.add_argument("--topology", required=True, help="preset name (gnnflow topology list) or file")
    parser.add_argument("--layers", type=int, default=2, help="GNN layers (default 2)")
    parser.add_argument("--feature-dim", type=int, default=128, help="embedding width for the modeled time")
    parser.add_argument("--units", type=int, default=DEFAULT_UNITS, help="SPST units (vertex classes split)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def plan_report(indptr: np.ndarray, indices: np.ndarray, node_part: np.ndarray, num_parts: int,
                topology: Any, layers: int = 2, feature_dim: int = 128, seed: int = 0,
                units: int = DEFAULT_UNITS, replication: bool = True) -> dict[str, Any]:
    """Modeled cost of every planner for one partition (the body of ``gnnflow plan``)."""
    from gnnflow.partition.metrics import replication_factor

    if layers < 1:
        raise ConfigError(f"--layers must be >= 1, got {layers}")
    if topology.num_devices > num_parts:
        topology = topology.restrict(num_parts)
    t0 = time.perf_counter()
    rel = comm_relation(indptr, indices, node_part, num_parts)
    relation_s = time.perf_counter() - t0
    per_epoch = 2 * layers - 1
    out: dict[str, Any] = {"topology": topology.name, "parts": num_parts, "layers": layers,
                           "feature_dim": feature_dim, "relation_s": relation_s,
                           "remote_vertices": int(rel.vertices.shape[0]),
                           "halo_total": int(rel.pair_counts().sum()), "planners": {}}
    for name, fn in (("p2p", lambda: plan_p2p(rel, topology, seed)),
                     ("spst", lambda: plan_spst(rel, topology, seed, units=units))):
        plan = fn()
        tables = plan.tables()
        cost = plan.cost(feature_dim)
        split = plan.split_cost(feature_dim)
        out["planners"][name] = {
            "direct_link_ms": split["direct_s"] * 1e3, "routed_link_ms": split["routed_s"] * 1e3,
            "modeled_ms": cost * 1e3, "epoch_ms": cost * 1e3 * per_epoch, "stages": plan.num_stages,
            "stage_ms": (plan.stage_times(feature_dim) * 1e3).tolist(), "link_volume": plan.volume(),
            "relayed": int(sum(t.relay_ids.shape[0] for t in tables)),
            "table_bytes": int(sum(t.nbytes() for t in tables)), "planning_s": plan.planning_time_s,
            **({"units": plan.info["units"], "granularity": plan.info["granularity"]} if plan.info else {}),
        }
    sw = model_swap(rel, topology, feature_dim)
    out["planners"]["swap"] = {"modeled_ms": None if sw["modeled_s"] is None else sw["modeled_s"] * 1e3,
                               "epoch_ms": None if sw["modeled_s"] is None else sw["modeled_s"] * 1e3 * per_epoch,
                               "stages": 2, "written": sw.get("written"), "read": sw.get("read"),
                               "note": sw.get("note")}
    rep: dict[str, Any] = {"modeled_ms": 0.0, "epoch_ms": 0.0, "stages": 0}
    if replication:
        rep["replication_factor"] = replication_factor(indptr, indices, np.asarray(node_part), num_parts, layers)
    out["planners"]["replication"] = rep
    p2p = out["planners"]["p2p"]["modeled_ms"]
    out["spst_over_p2p"] = out["planners"]["spst"]["modeled_ms"] / p2p if p2p else None
    return out


def main(args: argparse.Namespace) -> int:
    from gnnflow.data.store import open_store
    from gnnflow.partition.book import PartitionBook

    book = PartitionBook.open(args.partdir)
    store = open_store(book.graph_path)
    topo = load_topology(args.topology)
    if topo.num_devices < book.num_parts:
        raise ConfigError(f"{args.partdir} has {book.num_parts} parts but topology {topo.name!r} "
                          f"({topo.source}) has only {topo.num_devices} devices")
    rep = plan_report(store.indptr, store.indices, np.asarray(book.node_part), book.num_parts, topo,
                      args.layers, args.feature_dim, args.seed, args.units)
    rep["partdir"] = str(args.partdir)
    if args.json:
        print(json.dumps(rep, indent=2, default=float))
        return 0
    print(f"{args.partdir}: {book.num_parts} parts on {rep['topology']}, {rep['layers']} layers, "
          f"feature dim {rep['feature_dim']}; {rep['halo_total']} halo embeddings per allgather "
          f"(relation built in {rep['relation_s']:.3f} s)")
    print(f"{'planner':12s} {'allgather ms':>12s} {'epoch ms':>10s} {'stages':>6s} {'planning s':>10s}  notes")
    for name, r in rep["planners"].items():
        ms = "n/a" if r["modeled_ms"] is None else f"{r['modeled_ms']:.4f}"
        ep = "n/a" if r["epoch_ms"] is None else f"{r['epoch_ms']:.4f}"
        notes = ""
        if "relayed" in r:
            notes = (f"moved {r['link_volume']}, relayed {r['relayed']}, tables {r['table_bytes'] / 1e6:.2f} MB, "
                     f"direct/routed links alone {r['direct_link_ms']:.4f}/{r['routed_link_ms']:.4f} ms")
        elif "replication_factor" in r:
            notes = f"replication factor {r['replication_factor']:.3f} ({rep['layers']}-hop)"
        elif r.get("note"):
            notes = r["note"]
        elif r.get("read") is not None:
            notes = f"writes {r['written']}, reads {r['read']}"
        plan_s = f"{r['planning_s']:.3f}" if "planning_s" in r else "-"
        print(f"{name:12s} {ms:>12s} {ep:>10s} {r['stages']:>6d} {plan_s:>10s}  {notes}")
    if rep["spst_over_p2p"] is not None:
        print(f"spst / p2p modeled time: {rep['spst_over_p2p']:.3f}")
    return 0
