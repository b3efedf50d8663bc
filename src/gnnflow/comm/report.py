"""The modeled cost of a partition's halo exchange under every DGCL planner (§5, §7): what
``gnnflow plan`` prints and ``gnnflow bench allgather`` compares with measurement.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from gnnflow.comm.plan import DEFAULT_UNITS, comm_relation, model_swap, plan_p2p, plan_spst
from gnnflow.errors import ConfigError


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
