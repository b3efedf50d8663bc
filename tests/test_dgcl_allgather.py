"""graph_allgather executes p2p / spst / swap plans exactly (DGCL §4.2, §6.1-6.2)."""

from __future__ import annotations

import numpy as np
import torch

from gnnflow.comm.allgather import AllgatherStats, close_swap, graph_allgather, rank_tables
from gnnflow.comm.plan import comm_relation
from gnnflow.comm.topology import compile_topology, load_topology
from gnnflow.runtime.launch import run_ranks
from tests.conftest import random_store_arrays


def _graph(parts: int, seed: int = 0):
    g = random_store_arrays(num_nodes=120, avg_degree=5, seed=seed)
    node_part = np.random.default_rng(seed).integers(0, parts, 120).astype(np.int32)
    return g["indptr"], g["indices"], node_part


def _values(n: int, dim: int, seed: int) -> torch.Tensor:
    # small integers: every sum is exact in float32, so results compare with torch.equal
    return torch.from_numpy(np.random.default_rng(seed).integers(-8, 9, (n, dim)).astype(np.float32))


def _check_rank(ctx, configs, num_nodes: int, dim: int) -> list[dict]:
    """Run every table set of ``configs`` in one process group (one spawn per test)."""
    return [_check_one(ctx, tables, num_nodes, dim) for tables in configs]


def _check_one(ctx, tables, num_nodes: int, dim: int) -> dict:
    table = tables[ctx.rank]
    x_all = _values(num_nodes, dim, 1)
    local = x_all[torch.from_numpy(table.inner_ids)].clone().requires_grad_(True)
    stats = AllgatherStats(ctx.world_size)
    out = graph_allgather(local, table, stats)
    ids = np.concatenate([table.inner_ids, table.halo_ids])
    fwd_ok = torch.equal(out.detach(), x_all[torch.from_numpy(ids)])
    # upstream gradient of every rank, reproducible everywhere -> expected summed gradient
    expected = torch.zeros(num_nodes, dim)
    for q, tq in enumerate(tables):
        idq = torch.from_numpy(np.concatenate([tq.inner_ids, tq.halo_ids]))
        expected.index_add_(0, idq, _values(idq.numel(), dim, 100 + q))
    out.backward(_values(out.shape[0], dim, 100 + ctx.rank))
    bwd_ok = torch.equal(local.grad, expected[torch.from_numpy(table.inner_ids)])
    if table.planner == "swap":
        close_swap(table)
    return {"planner": table.planner, "fwd": fwd_ok, "bwd": bwd_ok,
            "relay": int(getattr(table, "relay_ids", np.zeros(0)).shape[0]), "sent": stats.comm.total_sent,
            "received": stats.comm.total_received, "halo_bytes": int(table.halo_ids.shape[0]) * dim * 4}


def _run(cases: list[tuple[str, object]], parts: int, seed: int = 0,
         hosts: list[list[str] | None] | None = None) -> list[list[dict]]:
    """``cases`` = [(planner, topology)]; returns per case the per-rank results (``hosts``: per
    case, the ranks' hosts for swap)."""
    indptr, indices, node_part = _graph(parts, seed)
    rel = comm_relation(indptr, indices, node_part, parts)
    hosts = hosts or [None] * len(cases)
    configs = [rank_tables(planner, rel, topo, seed=seed, granularity=3, hosts=h)
               for (planner, topo), h in zip(cases, hosts, strict=True)]
    per_rank = run_ranks(_check_rank, parts, configs, node_part.shape[0], 4, timeout_s=60)
    return [[per_rank[r][c] for r in range(parts)] for c in range(len(cases))]


def _assert_exact(results: list[list[dict]]) -> None:
    for res in results:
        assert all(r["fwd"] for r in res), res
        assert all(r["bwd"] for r in res), res
        assert sum(r["sent"] for r in res) > 0
        if res[0]["planner"] == "swap":
            # through host memory: every halo row once forward, its gradient once back
            halo = sum(r["halo_bytes"] for r in res)
            assert sum(r["sent"] for r in res) == sum(r["received"] for r in res) == 2 * halo


def test_allgather_exact_2_ranks() -> None:
    topo = load_topology("dgx1-v100").restrict(2)
    _assert_exact(_run([("p2p", topo), ("spst", topo), ("swap", topo)], 2))


def _relay_topology():
    # three devices in a line: 0 and 2 have no link, so everything between them relays via 1
    return compile_topology({"name": "line3", "devices": ["a", "b", "c"],
                             "connections": [["a", "b", 10], ["b", "c", 10]]}, "line3")


def test_allgather_relays_through_third_rank() -> None:
    res = _run([("p2p", _relay_topology()), ("spst", _relay_topology())], 3, seed=1)
    _assert_exact(res)
    assert all(case[1]["relay"] > 0 for case in res)  # rank 1 forwards vertices it does not need itself


def test_allgather_exact_4_ranks_and_slow_link() -> None:
    dgx = load_topology("dgx1-v100").restrict(4)
    slow = compile_topology({
        "name": "slow-pair", "devices": ["a", "b", "c", "d"],
        "connections": [["a", "b", 50], ["a", "c", 50], ["b", "c", 50], ["b", "d", 50],
                        ["c", "d", 50], ["a", "d", 0.05]]}, "slow-pair")
    res = _run([("p2p", dgx), ("spst", dgx), ("swap", dgx), ("spst", slow)], 4, seed=2)
    _assert_exact(res)
    assert res[3][1]["relay"] + res[3][2]["relay"] > 0  # SPST routes around the slow a-d link


def test_swap_across_hosts_passes_rows_between_host_buffers() -> None:
    """Swap with ranks on several hosts: each host has its own buffers and its leader passes the
    rows other hosts read (forward) and their gradients (backward).  Here the "hosts" share this
    machine but not their buffers (one directory per leader), so a row that no leader passed would
    read as zero; contiguous and interleaved rank-to-host assignments, 2 and 3 hosts."""
    topo = load_topology("dgx1-v100").restrict(4)
    layouts = [["h0", "h0", "h1", "h1"], ["a", "b", "a", "b"], ["x", "y", "y", "z"]]
    res = _run([("swap", topo)] * len(layouts), 4, seed=3, hosts=layouts)
    _assert_exact(res)
