"""Probing this machine's links (DGCL §3, §5.1): the bandwidth of every ordered pair of ranks alone
(one message at a time, the speeds of DGCL Table 1) and the aggregate bandwidth when every rank
sends to every other at once (the contention of Table 3), written as a topology
(:mod:`gnnflow.comm.topology`): each rank reaches a shared ``host`` node over its own port (its
median pairwise speed) and the host node is a hop with the aggregate bandwidth.
"""

from __future__ import annotations

import platform
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.comm.collectives import all_reduce, exchange_point_to_point
from gnnflow.errors import ConfigError
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.devices import COMPUTE, HOST


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
    from gnnflow.runtime.launch import run_ranks

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
