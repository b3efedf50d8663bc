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

import numpy as np

from gnnflow.comm.plan import DEFAULT_UNITS
from gnnflow.comm.report import plan_report
from gnnflow.comm.topology import load_topology
from gnnflow.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("partdir", help="partition book directory (gnnflow partition)")
    parser.add_argument("--topology", required=True, help="preset name (gnnflow topology list) or file")
    parser.add_argument("--layers", type=int, default=2, help="GNN layers (default 2)")
    parser.add_argument("--feature-dim", type=int, default=128, help="embedding width for the modeled time")
    parser.add_argument("--units", type=int, default=DEFAULT_UNITS, help="SPST units (vertex classes split)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


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
