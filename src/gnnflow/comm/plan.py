"""Communication planning for halo exchange (DGCL §4.1, §5, §6.1–6.2).

* :func:`comm_relation` — the communication relation of a partition (§4.1): for
  each vertex some other part needs, its owner ``s_u`` and destination set
  ``D_u`` (a bitmask); ``V_ij`` for every ordered pair follows from it.
* Planners produce a :class:`Plan`, one rooted tree per group of vertices:
  ``p2p`` (direct link per pair; a pair without a link relays along the
  fewest-hop device path) and ``spst`` (Algorithm 1 with the incremental link
  cost of Algorithm 2).  ``swap`` (through host memory, NeuGraph) and
  ``replication`` (K-hop halos, no communication) are modeled by
  :func:`model_swap` and the K-hop replication factor
  (:func:`gnnflow.partition.metrics.replication_factor`).
* :func:`stage_cost` is the staged cost model of §5.1: per stage, a hop's time is
  its aggregate load over its bandwidth, a link's time the max over its hops,
  a stage's time the max over links; the total is the sum of stages.
* :meth:`Plan.tables` turns a plan into per-rank executable stage tables
  ``(peer, stage, send ids, recv ids)`` with relays and the backward sub-stage
  labels of §6.2 (:mod:`gnnflow.comm.allgather` runs them).

Vertex classes (a deviation for speed, see docs/dgcl.md): vertices with the same
``(s_u, D_u)`` are interchangeable for Algorithm 1, so the planner routes them
in *units* of at most ``granularity`` vertices of one class, in a random
interleaving of all classes, updating the link costs after every unit exactly
as Algorithm 1 does after every vertex.  ``granularity=1`` is the paper's
per-vertex algorithm.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gnnflow.comm.topology import Topology
from gnnflow.errors import ConfigError

PLANNERS = ("p2p", "spst", "swap", "replication")
#: default number of SPST units (work is ~ units x |D_u| small Dijkstras, independent of |V|)
DEFAULT_UNITS = 4096


@dataclass
class CommRelation:
    """Which vertex embeddings each part must send to which other parts (DGCL §4.1)."""

    num_parts: int
    node_part: np.ndarray  # int32 [N]
    vertices: np.ndarray  # int64 ids needed by at least one other part, sorted
    owner: np.ndarray  # int64 owner part of each
    dest_mask: np.ndarray  # uint64 [V, words(P)]: bit j % 64 of word j // 64 set: part j needs it

    def needs(self, j: int) -> np.ndarray:
        """Which of :attr:`vertices` part ``j`` needs (a boolean mask)."""
        return (self.dest_mask[:, j >> 6] >> np.uint64(j & 63)) & np.uint64(1) == 1

    @property
    def num_nodes(self) -> int:
        return int(self.node_part.shape[0])

    def pair_counts(self) -> np.ndarray:
        """``[P, P]``: ``|V_ij|``, the number of embeddings part i sends to part j."""
        p = self.num_parts
        out = np.zeros((p, p), dtype=np.int64)
        for j in range(p):
            has = self.needs(j)
            out[:, j] = np.bincount(self.owner[has], minlength=p)
        return out

    def pair_vertices(self, i: int, j: int) -> np.ndarray:
        """``V_ij`` (sorted global ids)."""
        sel = (self.owner == i) & self.needs(j)
        return self.vertices[sel]

    def halo_ids(self, j: int) -> np.ndarray:
        """Vertices part j receives (its 1-hop in-neighbours owned elsewhere), sorted."""
        return self.vertices[self.needs(j)]

    def inner_ids(self, j: int) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.node_part) == j).astype(np.int64)

    def classes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(class_owner, class_mask, class_of_vertex)``: vertices grouped by ``(s_u, D_u)``
        (``class_mask``: ``[C, words(P)]`` like :attr:`dest_mask`)."""
        p = self.num_parts
        if p <= 56:  # owner and mask fit one int64 key
            key = self.owner * (np.int64(1) << np.int64(p)) + self.dest_mask[:, 0].astype(np.int64)
            if p * (1 << p) <= 1 << 24:  # small key space: counting, no sort
                counts = np.bincount(key, minlength=1)
                uniq = np.flatnonzero(counts).astype(np.int64)
                lookup = np.zeros(counts.shape[0], dtype=np.int64)
                lookup[uniq] = np.arange(uniq.shape[0])
                inverse = lookup[key]
            else:
                uniq, inverse = np.unique(key, return_inverse=True)
            cls_owner = uniq >> np.int64(p)
            cls_mask = (uniq & ((np.int64(1) << np.int64(p)) - 1)).astype(np.uint64)[:, None]
            return cls_owner, cls_mask, inverse.astype(np.int64).reshape(-1)
        rows = np.column_stack([self.owner.astype(np.uint64), self.dest_mask])
        uniq_rows, inverse = np.unique(rows, axis=0, return_inverse=True)
        return uniq_rows[:, 0].astype(np.int64), uniq_rows[:, 1:], inverse.astype(np.int64).reshape(-1)


def mask_words(num_parts: int) -> int:
    """64-bit words of a destination mask over ``num_parts`` parts."""
    return max(1, -(-int(num_parts) // 64))


def mask_parts(row: np.ndarray, num_parts: int) -> list[int]:
    """The parts whose bits are set in one mask row (``[words]`` uint64)."""
    return [j for j in range(num_parts) if (int(row[j >> 6]) >> (j & 63)) & 1]


def comm_relation_from_halos(halos: list[np.ndarray], node_part: np.ndarray, num_parts: int) -> CommRelation:
    """The relation of :func:`comm_relation` from each part's 1-hop halo ids (``halos[p]``: the
    vertices part ``p`` needs and does not own), without the graph's CSR: what a rank can plan
    from the partition book's small metadata and the halo lists the other ranks send it."""
    p = int(num_parts)
    needed = np.concatenate([np.asarray(h, dtype=np.int64) for h in halos]) if halos else np.zeros(0, np.int64)
    needer = np.repeat(np.arange(p, dtype=np.int64), [int(np.asarray(h).shape[0]) for h in halos])
    vertices, inverse = np.unique(needed, return_inverse=True)
    mask = np.zeros((vertices.shape[0], mask_words(p)), dtype=np.uint64)
    np.bitwise_or.at(mask, (inverse.reshape(-1), needer >> 6),
                     np.left_shift(np.uint64(1), (needer & 63).astype(np.uint64)))
    node_part = np.asarray(node_part)
    return CommRelation(p, node_part, vertices, node_part[vertices].astype(np.int64), mask)


def comm_relation(indptr: np.ndarray, indices: np.ndarray, node_part: np.ndarray,
                  num_parts: int | None = None) -> CommRelation:
    """The communication relation of a partition of a CSR graph (rows = destinations).

    Part ``p`` computes its own vertices and needs every in-neighbour ``u`` it does
    not own; ``u``'s owner sends it.  The relation is the same for every layer.
    """
    node_part = np.asarray(node_part)
    n = node_part.shape[0]
    p = int(num_parts if num_parts is not None else int(node_part.max()) + 1)
    indptr = np.asarray(indptr, dtype=np.int64)
    src = np.asarray(indices, dtype=np.int64)
    # One scatter of every edge into an [N, P] flag matrix ("u is needed by part p"), packed
    # to 64-bit mask words per vertex; the owner's own bit is cleared afterwards.  Narrow part ids
    # keep the per-edge arrays small: memory bandwidth dominates here.
    narrow = node_part.astype(np.int8 if p <= 127 else np.int64, copy=False)
    key = src * p
    key += np.repeat(narrow, np.diff(indptr))
    flags = np.zeros(n * p, dtype=bool)
    flags[key] = True
    del key
    packed = np.packbits(flags.reshape(n, p), axis=1, bitorder="little")
    del flags
    words = mask_words(p)
    wide = np.zeros((n, 8 * words), dtype=np.uint8)
    wide[:, : packed.shape[1]] = packed
    del packed
    part = node_part.astype(np.int64)
    mask = wide.view("<u8").reshape(n, words)
    mask[np.arange(n), part >> 6] &= ~np.left_shift(np.uint64(1), (part & 63).astype(np.uint64))  # not its own
    vertices = np.flatnonzero(mask.any(axis=1)).astype(np.int64)
    return CommRelation(p, node_part, vertices, part[vertices], mask[vertices])


# --------------------------------------------------------------------------- cost model


def stage_cost(loads: np.ndarray, hop_bw: np.ndarray, vertex_bytes: float) -> tuple[float, np.ndarray]:
    """§5.1: total time (s) and per-stage times of hop loads ``[stages, hops]`` (vertices).

    A hop's time is its aggregate bytes over its bandwidth; a link's time is the
    max over its hops and a stage's the max over its links, i.e. over all hops
    used in the stage; stages add up.
    """
    if loads.size == 0:
        return 0.0, np.zeros(0)
    per_stage = (loads * (vertex_bytes / 1e9) / hop_bw[None, :]).max(axis=1)
    return float(per_stage.sum()), per_stage


@dataclass
class Transfer:
    """One entry of a rank's stage table: ``(peer, stage, T^s, T^r)`` (§6.1).

    ``send_sub``/``recv_sub`` label each element with its backward sub-stage (§6.2):
    within a sub-stage, no vertex of the forward sender gets gradients from two peers.
    """

    peer: int
    send_ids: np.ndarray
    recv_ids: np.ndarray
    send_sub: np.ndarray
    recv_sub: np.ndarray


@dataclass
class RankTable:
    """A rank's executable plan.  Buffer layout: ``[inner | halo | relay]`` (global ids sorted in each)."""

    rank: int
    world_size: int
    inner_ids: np.ndarray
    halo_ids: np.ndarray
    relay_ids: np.ndarray
    stages: list[list[Transfer]]
    planner: str = ""

    @property
    def num_local(self) -> int:
        return int(self.inner_ids.shape[0] + self.halo_ids.shape[0])

    @property
    def buffer_size(self) -> int:
        return self.num_local + int(self.relay_ids.shape[0])

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Buffer positions of global ``ids`` (all must be present)."""
        out = np.full(ids.shape[0], -1, dtype=np.int64)
        off = 0
        for arr in (self.inner_ids, self.halo_ids, self.relay_ids):
            if arr.shape[0]:
                pos = np.searchsorted(arr, ids)
                posc = np.minimum(pos, arr.shape[0] - 1)
                hit = (arr[posc] == ids) & (out < 0)
                out[hit] = posc[hit] + off
            off += arr.shape[0]
        if (out < 0).any():
            raise ValueError(f"rank {self.rank}: ids {ids[out < 0][:5]} are not in its buffer")
        return out

    def nbytes(self) -> int:
        """Memory of the send/receive tables (ids and sub-stage labels), DGCL Fig. 11."""
        total = 0
        for stage in self.stages:
            for t in stage:
                total += t.send_ids.nbytes + t.recv_ids.nbytes + t.send_sub.nbytes + t.recv_sub.nbytes
        return total + self.relay_ids.nbytes


def _occurrence(ids: np.ndarray) -> np.ndarray:
    """For each element, how many equal elements precede it (0, 1, ...)."""
    if ids.shape[0] == 0:
        return np.zeros(0, dtype=np.int8)
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    start = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    run = np.repeat(start, np.diff(np.r_[start, s.shape[0]]))
    occ = np.empty(ids.shape[0], dtype=np.int64)
    occ[order] = np.arange(s.shape[0]) - run
    return occ.astype(np.int8)


@dataclass
class Plan:
    """A tree plan: unit ``k`` sends vertices ``unit_vertices[k]`` along ``unit_trees[k]``.

    A tree is a list of edges ``(from device, to device, stage)`` with stage 0 the first.
    """

    planner: str
    relation: CommRelation
    topology: Topology
    unit_vertices: list[np.ndarray]
    unit_trees: list[list[tuple[int, int, int]]]
    planning_time_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_stages(self) -> int:
        return 1 + max((s for tree in self.unit_trees for (_, _, s) in tree), default=-1)

    def link_loads(self) -> dict[tuple[int, int, int], int]:
        """Vertices sent on each ``(src, dst, stage)``."""
        out: dict[tuple[int, int, int], int] = {}
        for verts, tree in zip(self.unit_vertices, self.unit_trees, strict=True):
            for e in tree:
                out[e] = out.get(e, 0) + int(verts.shape[0])
        return out

    def hop_loads(self) -> np.ndarray:
        """``[stages, hops]`` vertices crossing each physical hop in each stage."""
        loads = np.zeros((max(1, self.num_stages), self.topology.num_hops))
        for (a, b, s), n in self.link_loads().items():
            loads[s, self.topology.links[(a, b)]] += n
        return loads

    def cost(self, feature_dim: int = 128, dtype_bytes: int = 4) -> float:
        """Modeled time (s) of one graph_allgather of ``feature_dim``-wide embeddings (§5.1)."""
        return stage_cost(self.hop_loads(), self.topology.hop_bw, feature_dim * dtype_bytes)[0]

    def split_cost(self, feature_dim: int = 128, dtype_bytes: int = 4) -> dict[str, float]:
        """Modeled time (s) of the direct-link traffic alone and of the routed traffic alone.

        DGCL Table 7 measures NVLink and the other links separately "after removing the
        communication on the other links"; here direct links are device-to-device
        connections (NVLink) and routed ones cross switches/CPUs/NICs.
        """
        direct = np.zeros(self.topology.num_hops, dtype=bool)
        for (a, b), route in self.topology.routes.items():
            if len(route) == 2:
                direct[self.topology.links[(a, b)]] = True
        loads = self.hop_loads()
        bw, vb = self.topology.hop_bw, feature_dim * dtype_bytes
        return {"direct_s": stage_cost(loads * direct, bw, vb)[0], "routed_s": stage_cost(loads * ~direct, bw, vb)[0]}

    def stage_times(self, feature_dim: int = 128, dtype_bytes: int = 4) -> np.ndarray:
        return stage_cost(self.hop_loads(), self.topology.hop_bw, feature_dim * dtype_bytes)[1]

    def volume(self) -> int:
        """Vertex embeddings moved over links in total (relays count once per hop)."""
        return int(sum(self.link_loads().values()))

    def subset(self, keep: np.ndarray) -> Plan:
        """The same trees for only the vertices where ``keep[v]`` (a bool array over all vertices).

        Used to vary the communication volume without re-planning (DGCL Fig. 10).
        """
        verts = [v[keep[v]] for v in self.unit_vertices]
        return Plan(self.planner, self.relation, self.topology, verts, self.unit_trees,
                    self.planning_time_s, dict(self.info))

    def tables(self) -> list[RankTable]:
        """Per-rank stage tables: every tree edge becomes a send on one rank and a receive on the other."""
        p = self.relation.num_parts
        edges: dict[tuple[int, int, int], list[np.ndarray]] = {}
        for verts, tree in zip(self.unit_vertices, self.unit_trees, strict=True):
            if verts.shape[0] == 0:
                continue
            for e in tree:
                edges.setdefault(e, []).append(verts)
        ids = {e: np.concatenate(v) for e, v in edges.items()}
        nst = self.num_stages
        # backward sub-stage label of each element on its forward sender (§6.2)
        sub: dict[tuple[int, int, int], np.ndarray] = {}
        for r in range(p):
            for s in range(nst):
                keys = sorted(e for e in ids if e[0] == r and e[2] == s)
                if not keys:
                    continue
                occ = _occurrence(np.concatenate([ids[e] for e in keys]))
                off = 0
                for e in keys:
                    sub[e] = occ[off:off + ids[e].shape[0]]
                    off += ids[e].shape[0]
        empty = np.zeros(0, dtype=np.int64)
        empty8 = np.zeros(0, dtype=np.int8)
        out = []
        for r in range(p):
            stages: list[list[Transfer]] = []
            received = [ids[e] for e in ids if e[1] == r]
            for s in range(nst):
                peers = sorted({e[1] for e in ids if e[0] == r and e[2] == s}
                               | {e[0] for e in ids if e[1] == r and e[2] == s})
                row = []
                for q in peers:
                    se, re_ = (r, q, s), (q, r, s)
                    row.append(Transfer(q, ids.get(se, empty), ids.get(re_, empty),
                                        sub.get(se, empty8), sub.get(re_, empty8)))
                stages.append(row)
            halo = self.relation.halo_ids(r)
            got = np.unique(np.concatenate(received)) if received else empty
            relay = np.setdiff1d(got, halo, assume_unique=True)
            out.append(RankTable(r, p, self.relation.inner_ids(r), halo, relay, stages, self.planner))
        return out


# --------------------------------------------------------------------------- planners


def _class_units(rel: CommRelation, granularity: int, seed: int
                 ) -> tuple[list[np.ndarray], list[int], list[list[int]]]:
    """Split every ``(s_u, D_u)`` class into units of at most ``granularity`` vertices,
    in a seeded random interleaving (Algorithm 1 shuffles the vertices first)."""
    rng = np.random.default_rng(seed)
    cls_owner, cls_mask, cls_of = rel.classes()
    # group vertices by class (radix sort on a narrow int); which members of a class share a
    # unit does not change any cost, so members stay in id order
    narrow = cls_of.astype(np.int16) if cls_owner.shape[0] < (1 << 15) else cls_of
    order = np.argsort(narrow, kind="stable")
    counts = np.bincount(cls_of, minlength=cls_owner.shape[0])
    bounds = np.r_[0, np.cumsum(counts)]
    units_v: list[np.ndarray] = []
    units_owner: list[int] = []
    units_dest: list[list[int]] = []
    for c in range(cls_owner.shape[0]):
        k = max(1, math.ceil(counts[c] / granularity))
        members = rel.vertices[order[bounds[c]:bounds[c + 1]]]
        dests = mask_parts(cls_mask[c], rel.num_parts)
        for piece in np.array_split(members, k):
            units_v.append(piece)
            units_owner.append(int(cls_owner[c]))
            units_dest.append(dests)
    shuffle = rng.permutation(len(units_v))
    return ([units_v[i] for i in shuffle], [units_owner[i] for i in shuffle],
            [units_dest[i] for i in shuffle])


def _device_paths(topo: Topology, src: int) -> dict[int, list[int]]:
    """Fewest-link device paths from ``src`` (BFS over links, lowest index first)."""
    prev = {src: -1}
    frontier = [src]
    while frontier:
        nxt = []
        for x in frontier:
            for y in range(topo.num_devices):
                if (x, y) in topo.links and y not in prev:
                    prev[y] = x
                    nxt.append(y)
        frontier = nxt
    out = {}
    for y in prev:
        path = [y]
        while prev[path[-1]] != -1:
            path.append(prev[path[-1]])
        out[y] = path[::-1]
    return out


def plan_p2p(rel: CommRelation, topo: Topology, seed: int = 0) -> Plan:
    """Peer-to-peer (ROC, DGCL §7): each owner sends to each destination over the direct link.

    A pair without a link relays along the fewest-link path (shared prefixes are
    sent once), so the plan stays executable on any connected topology.
    """
    t0 = time.perf_counter()
    _check_sizes(rel, topo)
    units_v, owners, dests = _class_units(rel, granularity=1 << 62, seed=seed)
    paths = [_device_paths(topo, s) for s in range(topo.num_devices)]
    trees = []
    for o, ds in zip(owners, dests, strict=True):
        tree: dict[tuple[int, int], int] = {}
        for d in ds:
            path = paths[o][d]
            for k in range(len(path) - 1):
                tree.setdefault((path[k], path[k + 1]), k)
        trees.append([(a, b, s) for (a, b), s in tree.items()])
    return Plan("p2p", rel, topo, units_v, trees, time.perf_counter() - t0)


def plan_spst(rel: CommRelation, topo: Topology, seed: int = 0, granularity: int | None = None,
              units: int = DEFAULT_UNITS) -> Plan:
    """Shortest-path spanning trees (DGCL Algorithm 1 with Algorithm 2's incremental cost).

    For each unit (a group of interchangeable vertices, see module docstring) the
    tree grows from ``N_src = {s_u}``: a multi-source Dijkstra over the device
    links, where link ``e`` used at stage ``i`` weighs
    ``C(i, e) = cost(S + unit on (i, e)) - cost(S)`` (computed on demand, as §5.2
    suggests), picks the cheapest path to a not-yet-reached destination, and adds
    its devices to ``N_src`` and its links to the plan ``S``.  Ties go to the path
    with the smaller stand-alone transfer time, then fewer links.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    _check_sizes(rel, topo)
    total = int(rel.vertices.shape[0])
    if granularity is None:
        granularity = max(1, math.ceil(total / max(1, units)))
    units_v, owners, dests = _class_units(rel, granularity, seed)
    m, nh = topo.num_devices, topo.num_hops
    inv = (1.0 / topo.hop_bw).tolist()
    # per device: (peer, first hop, its 1/bw, other hops, stand-alone 1/bw of the link)
    out_links: list[list[tuple[int, int, float, tuple[int, ...], float]]] = [
        [(j, topo.links[(i, j)][0], inv[topo.links[(i, j)][0]], tuple(topo.links[(i, j)][1:]),
          max(inv[h] for h in topo.links[(i, j)]))
         for j in range(m) if (i, j) in topo.links]
        for i in range(m)
    ]
    loads = [[0.0] * nh for _ in range(m)]
    stage_t = [0.0] * m
    trees: list[list[tuple[int, int, int]]] = []
    inf = (math.inf, math.inf, 0)
    for verts, src, ds in zip(units_v, owners, dests, strict=True):
        w = float(verts.shape[0])
        depth = {src: 0}
        remaining = set(ds)
        tree: list[tuple[int, int, int]] = []
        while remaining:
            best: dict[int, tuple[float, float, int]] = {}
            parent: dict[int, int] = {}
            tdepth: dict[int, int] = {}
            heap: list[tuple[float, float, int, int]] = [(0.0, 0.0, 0, x) for x in depth]
            settled: set[int] = set()
            target = -1
            while heap:
                c, raw, nhops, x = heapq.heappop(heap)
                if x in settled:
                    continue
                settled.add(x)
                if x in remaining:
                    target = x
                    break
                d = depth[x] if x in depth else tdepth[x]
                if d >= m - 1:
                    continue
                lt, st = loads[d], stage_t[d]
                for y, h0, i0, rest, rinv in out_links[x]:
                    if y in settled or y in depth:
                        continue
                    t = (lt[h0] + w) * i0
                    for h in rest:
                        t2 = (lt[h] + w) * inv[h]
                        if t2 > t:
                            t = t2
                    cand = (c + (t - st if t > st else 0.0), raw + w * rinv, nhops + 1)
                    if cand < best.get(y, inf):
                        best[y] = cand
                        parent[y] = x
                        tdepth[y] = d + 1
                        heapq.heappush(heap, (*cand, y))
            if target < 0:  # unreachable within m-1 stages: cannot happen on a connected topology
                raise ConfigError(f"spst: device {sorted(remaining)} unreachable from {src} in {topo.source}")
            path = []
            y = target
            while y not in depth:
                path.append((parent[y], y))
                y = parent[y]
            for x, y in reversed(path):
                s = depth[x]
                lt = loads[s]
                for h in topo.links[(x, y)]:
                    lt[h] += w
                    v = lt[h] * inv[h]
                    if v > stage_t[s]:
                        stage_t[s] = v
                depth[y] = s + 1
                remaining.discard(y)
                tree.append((x, y, s))
        trees.append(tree)
    plan = Plan("spst", rel, topo, units_v, trees, time.perf_counter() - t0,
                {"granularity": granularity, "units": len(units_v), "cpu_s": time.process_time() - c0})
    return plan


def _check_sizes(rel: CommRelation, topo: Topology) -> None:
    if rel.num_parts != topo.num_devices:
        raise ConfigError(
            f"the partition has {rel.num_parts} parts but topology {topo.name!r} ({topo.source}) has "
            f"{topo.num_devices} devices; use a matching preset or `Topology.restrict`"
        )


def model_swap(rel: CommRelation, topo: Topology, feature_dim: int = 128, dtype_bytes: int = 4
               ) -> dict[str, Any]:
    """Swap baseline (NeuGraph, DGCL §7): every device dumps all its embeddings to its host
    memory (stage 1), then loads the halo embeddings it needs from the owner's host (stage 2)."""
    _check_sizes(rel, topo)
    p = rel.num_parts
    if len(topo.host_of) < p:
        return {"modeled_s": None, "note": f"topology {topo.name!r} has no cpu node reachable by every device"}
    loads = np.zeros((2, topo.num_hops))
    sizes = np.bincount(np.asarray(rel.node_part), minlength=p)
    for d in range(p):
        loads[0, topo.to_host[(d, topo.host_of[d])]] += sizes[d]
    counts = rel.pair_counts()
    for i in range(p):
        for j in range(p):
            if counts[i, j]:
                loads[1, topo.from_host[(topo.host_of[i], j)]] += counts[i, j]
    total, per_stage = stage_cost(loads, topo.hop_bw, feature_dim * dtype_bytes)
    return {"modeled_s": total, "stage_s": per_stage.tolist(), "written": int(sizes.sum()),
            "read": int(counts.sum())}


def make_plan(planner: str, rel: CommRelation, topo: Topology, seed: int = 0, **kw: Any) -> Plan:
    """An executable tree plan by name (``p2p`` or ``spst``)."""
    if planner == "p2p":
        return plan_p2p(rel, topo, seed)
    if planner == "spst":
        return plan_spst(rel, topo, seed, **kw)
    raise ConfigError(f"planner {planner!r} has no tree plan; tree planners: p2p, spst "
                      f"(swap and replication run without one)")
