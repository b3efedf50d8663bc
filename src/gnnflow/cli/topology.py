"""``gnnflow topology list | show NAME | probe --workers P --out FILE`` (DGCL §3, §5.1).

``probe`` measures this machine's ranks: the bandwidth of every ordered pair
alone (one message at a time, the speeds of DGCL Table 1) and the aggregate
bandwidth when every rank sends to every other at once (the contention of
Table 3).  It writes a topology in which each rank reaches a shared ``host``
node over its own port (its median pairwise speed) and the host node itself is
a hop with the aggregate bandwidth, so concurrent transfers contend as they
did in the measurement.  The raw pairwise matrix is kept under ``measured``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from gnnflow.comm.probe import probe_topology
from gnnflow.comm.topology import load_topology, preset_names, write_topology


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("list", help="list the preset topologies")
    show = sub.add_parser("show", help="print a preset or topology file: devices, hops, link routes")
    show.add_argument("name", help="preset name or YAML/JSON file")
    show.add_argument("--json", action="store_true")
    probe = sub.add_parser("probe", help="measure pairwise bandwidth between local ranks; write a topology")
    probe.add_argument("--workers", type=int, required=True, help="number of local ranks")
    probe.add_argument("--out", required=True, help="topology file to write (.yaml or .json)")
    probe.add_argument("--message-mb", type=float, default=16.0, help="message size (MB)")
    probe.add_argument("--repeats", type=int, default=5, help="repetitions per measurement (median)")
    probe.add_argument("--device", default="cpu", help="cpu or cuda")


def main(args: argparse.Namespace) -> int:
    if args.action == "list":
        for name in preset_names():
            t = load_topology(name)
            print(f"{name:20s} {t.num_devices:3d} devices  {t.num_hops:4d} hops  {len(t.links):4d} links")
        return 0
    if args.action == "show":
        t = load_topology(args.name)
        d = t.describe()
        if args.json:
            print(json.dumps(d, indent=2))
            return 0
        print(f"{d['name']} ({d['source']}): {len(d['devices'])} devices, {len(d['hops'])} hops")
        for lk in d["links"]:
            print(f"  {lk['src']:>10s} -> {lk['dst']:<10s} {lk['bandwidth_gbps']:8.2f} GB/s  via "
                  + " ".join(lk["route"]))
        return 0
    spec = probe_topology(args.workers, int(args.message_mb * (1 << 20)), args.repeats, args.device)
    write_topology(spec, args.out)
    m = spec["measured"]
    print(f"wrote {args.out}: {args.workers} ranks, pairwise median "
          f"{np.median([x for i, r in enumerate(m['pairwise_gbps']) for j, x in enumerate(r) if i != j]):.3f} GB/s, "
          f"aggregate {m['aggregate_gbps']:.3f} GB/s")
    return 0
