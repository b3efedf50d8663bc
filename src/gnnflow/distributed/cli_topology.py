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
import platform
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.distributed.comm import all_reduce, exchange_point_to_point
from gnnflow.distributed.devices import COMPUTE, HOST
from gnnflow.distributed.topology import load_topology, preset_names, write_topology
from gnnflow.errors import ConfigError
from gnnflow.strategies.base import RankContext


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


def _pair_time(rank: int, src: int, dst: int, buf: torch.Tensor, rbuf: torch.Tensor) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    exchange_point_to_point([(dst, buf)] if rank == src else [], [(src, rbuf)] if rank == dst else [], COMPUTE)
    return time.perf_counter() - t0


def _probe_rank(ctx: RankContext, nbytes: int, repeats: int) -> dict[str, Any]:
    rank, p = ctx.rank, ctx.world_size
    n = max(1, nbytes // 4)
    buf = torch.ones(n, device=ctx.device)
    rbuf = torch.empty(n, device=ctx.device)
    pair = torch.zeros(p, p, dtype=torch.float64)
    for i in range(p):
        for j in range(p):
            if i == j:
                continue
            _pair_time(rank, i, j, buf, rbuf)  # warm-up
            ts = [_pair_time(rank, i, j, buf, rbuf) for _ in range(repeats)]
            if rank == j:  # the receiver's clock sees the whole transfer
                pair[i, j] = n * 4 / float(np.median(ts)) / 1e9
    all_reduce(pair, HOST)
    rbufs = [torch.empty(n, device=ctx.device) for _ in range(p)]
    ts = []
    for k in range(repeats + 1):
        dist.barrier()
        t0 = time.perf_counter()
        exchange_point_to_point([(q, buf) for q in range(p) if q != rank],
                                [(q, rbufs[q]) for q in range(p) if q != rank], COMPUTE)
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        all_reduce(dt, HOST, op=dist.ReduceOp.MAX)
        if k:
            ts.append(float(dt))
    agg = p * (p - 1) * n * 4 / float(np.median(ts)) / 1e9
    return {"pairwise_gbps": pair.numpy().tolist(), "aggregate_gbps": agg}


def probe_topology(workers: int, message_bytes: int = 16 << 20, repeats: int = 5,
                   device: str = "cpu") -> dict[str, Any]:
    """Measure local ranks and return a topology spec (see module docstring)."""
    from gnnflow.distributed.launch import run_ranks

    if workers < 2:
        raise ConfigError(f"--workers must be at least 2 to probe links, got {workers}")
    res = run_ranks(_probe_rank, workers, int(message_bytes), int(repeats), device=device, timeout_s=300)[0]
    pair = np.asarray(res["pairwise_gbps"])
    devices = [f"rank{i}" for i in range(workers)]
    port = [float(np.median(np.r_[pair[i, np.arange(workers) != i], pair[np.arange(workers) != i, i]]))
            for i in range(workers)]
    return {
        "name": f"probed-{platform.node()}-{workers}",
        "devices": devices,
        "nodes": {"host": {"kind": "cpu", "bandwidth": round(float(res["aggregate_gbps"]), 6)}},
        "connections": [[d, "host", round(b, 6)] for d, b in zip(devices, port, strict=True)],
        "measured": {"pairwise_gbps": [[round(float(x), 6) for x in row] for row in pair],
                     "aggregate_gbps": float(res["aggregate_gbps"]), "message_bytes": int(message_bytes),
                     "repeats": int(repeats), "device": device, "host": platform.node(),
                     "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
    }


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
