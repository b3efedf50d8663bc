"""Planned halo exchange: full-batch GNN training with DGCL's graph_allgather (DGCL §4, §6.3).

Each rank owns one part of a partition book and runs the *unchanged*
single-process layers (:mod:`gnnflow.nn`) on its local graph ``G_d(V_d^l ∪ V_d^r,
E_d)`` (§4.1): destinations are its inner vertices, sources its inner and halo
vertices.  Before every layer, :func:`gnnflow.distributed.allgather.graph_allgather`
fetches the halo rows of the layer input according to a communication plan
(Listing 1); its backward returns the halo gradients to their owners.  Loss,
gradient all-reduce, step and evaluation come from
:class:`~gnnflow.strategies.fullbatch_base.FullBatchBase`.

Options (``--opt key=value``):

``planner``   ``spst`` (default, Algorithm 1), ``p2p``, ``swap`` (through host
              shared memory) or ``replication`` (each rank computes its
              ``L``-hop in-neighbourhood itself; no communication, §3)
``topology``  preset name or topology file (default: a uniform full mesh, for
              which SPST reduces to load-balanced direct sends)
``norm``      GCN normalisation ``both`` (default) or ``right``
``project``   ``true`` (default): a GCN layer that narrows the rows (``d_in >
              d_out``, e.g. the output layer) projects its owner's rows before
              the exchange, so the halo rows fetched are ``d_out`` wide, not
              ``d_in`` (``diag(c) Â H W = diag(c) Â (H W)``, the order DGL's
              GraphConv computes in).  A deviation from DGCL §4.2, which
              fetches every layer's input: the same mathematics with
              ``d_out / d_in`` of the bytes and of the ``[inner | halo]``
              activations (products-shaped, 4 ranks: 256 -> 47 columns in the
              output layer).  ``false`` fetches layer inputs as the paper does.

The plan is made once on rank 0 from ``node_part`` and every part's halo ids,
which the ranks send it (offline planning, §4.1; no rank reads the graph's
CSR), and scattered; each rank counts the whole-graph degrees of its vertices
from the parts (:func:`gnnflow.distributed.comm.part_degrees`) and fetches its
halo's through the plan, so the GCN normalisation is the whole graph's.  Only
the ``replication`` baseline reads the whole graph store (each rank builds its
L-hop neighbourhood from it).

Checkpoints: a plan is a pure function of the partition book, the graph, the
topology, the planner and the seed (SPST and p2p shuffle their units with a
generator seeded by ``cfg.seed``; nothing depends on timing), so a resumed run
re-plans instead of storing the tables.  The state dict carries the plan's
digest (:func:`plan_digest`), and resuming with a plan that differs (another
book, topology or planner) is a one-line error: a different route sums halo
gradients in another order, so the run would not continue bit-exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.config import TrainConfig, option_bool
from gnnflow.distributed.allgather import AllgatherStats, close_swap, graph_allgather, swap_tables
from gnnflow.distributed.comm import part_degrees
from gnnflow.distributed.plan import comm_relation_from_halos, make_plan
from gnnflow.distributed.topology import load_topology, uniform_topology
from gnnflow.errors import ConfigError
from gnnflow.results.schema import Recorder
from gnnflow.sampling import Block
from gnnflow.strategies.base import RankContext
from gnnflow.strategies.common import graph_degrees, model_graph, seed_everything
from gnnflow.strategies.fullbatch_base import (
    FullBatchBase,
    compare_to_reference,
    full_graph_reference,
    gcn_model_name,
    rank_outputs,
    verify_graph,
)

PLANNERS = ("spst", "p2p", "swap", "replication")
# where a plan's table names things of this run only (its shared-memory folder)
# where a swap table's rows live and how hosts pass them: not the mathematics, so a checkpoint
# resumes on another placement of ranks on hosts
_UNPLANNED_FIELDS = ("shm_dir", "leaders", "host", "emb_send", "emb_recv", "grad_send", "grad_recv")


def plan_digest(*parts: Any) -> str:
    """sha256 of what a rank runs on: plan tables and blocks (nested dataclasses, lists,
    numpy arrays, tensors, numbers); derived caches and run-local paths are left out."""
    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
        if isinstance(x, np.ndarray):
            h.update(f"{x.dtype}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                if f.compare and f.name not in _UNPLANNED_FIELDS:
                    h.update(f.name.encode())
                    feed(getattr(x, f.name))
        elif isinstance(x, list | tuple):
            h.update(b"[")
            for y in x:
                feed(y)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    feed(list(parts))
    return h.hexdigest()


def _plan_tables(cfg: TrainConfig, part: Any, node_part: np.ndarray, rank: int, world_size: int,
                 planner: str, hosts: list[str] | None = None) -> tuple[Any, float]:
    """This rank's plan table and the planning time.  Collective: rank 0 gathers every part's
    halo ids (no rank reads the graph's CSR), plans (offline planning, §4.1) and scatters."""
    halos: list[Any] = [part.halo_ids]
    if world_size > 1:
        halos = [None] * world_size if rank == 0 else None  # type: ignore[assignment]
        dist.gather_object(part.halo_ids, halos, dst=0)
    payloads: list[Any] = [None] * world_size
    if rank == 0:
        t0 = time.perf_counter()
        rel = comm_relation_from_halos(halos, node_part, world_size)
        if planner == "swap":
            tables: list[Any] = swap_tables(rel, hosts)
        else:
            topo_name = cfg.options.get("topology")
            topo = load_topology(topo_name) if topo_name else uniform_topology(world_size)
            if topo.num_devices > world_size:
                topo = topo.restrict(world_size)
            tables = make_plan(planner, rel, topo, cfg.seed).tables()
        plan_s = time.perf_counter() - t0
        payloads = [(tables[r], plan_s) for r in range(world_size)]
    if world_size == 1:
        return payloads[0]
    got: list[Any] = [None]
    dist.scatter_object_list(got, payloads if rank == 0 else None, src=0)
    return got[0]


def _rank_hosts() -> list[str]:
    """Every rank's host name (rank order): the swap baseline exchanges through each host's shared
    memory, its leaders between hosts.  Collective."""
    import socket

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [socket.gethostname()]
    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    return [str(h) for h in hosts]


def _local_degrees(part: Any, node_part: np.ndarray, table: Any, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Whole-graph in-degrees of the inner vertices and out-degrees of the local (inner, then
    halo) vertices, counted from the parts; the halo's come from their owners through the plan
    itself.  Collective."""
    in_deg, out_inner = part_degrees(part, node_part)
    with torch.no_grad():
        local = graph_allgather(torch.from_numpy(out_inner.astype(np.float32)).unsqueeze(1), table,
                                AllgatherStats(world_size))
    return in_deg.astype(np.float32), local[:, 0].numpy().copy()


class PlannedHalo(FullBatchBase):
    """``--strategy dgcl``: full-batch training with planned graph_allgather per layer."""

    name = "dgcl"

    def __init__(self, cfg: TrainConfig, ctx: RankContext) -> None:
        super().__init__(cfg, ctx)
        self.planner = str(cfg.options.get("planner", "spst"))
        if self.planner not in PLANNERS:
            raise ConfigError(f"--opt planner={self.planner}: choose one of {', '.join(PLANNERS)}")
        self.norm = str(cfg.options.get("norm", "both"))
        self.project = option_bool(cfg.options.get("project", True), "project")
        self.stats = AllgatherStats(ctx.world_size)
        self.table: Any = None
        self.blocks: list[Block] = []
        self.features: torch.Tensor | None = None
        self.inner_ids: np.ndarray | None = None
        self.plan_s = 0.0
        self.digest = ""

    # ----- data ---------------------------------------------------------------------------------
    def prepare(self) -> None:
        from gnnflow.nn import build_model_from_config
        from gnnflow.partition.book import PartitionBook

        if not self.cfg.partition:
            raise ConfigError("--strategy dgcl needs --partition (a partition book with one part per worker)")
        book = PartitionBook.open(self.cfg.partition)
        rank, p = self.ctx.rank, self.ctx.world_size
        if book.num_parts != p:
            raise ConfigError(f"{self.cfg.partition} has {book.num_parts} parts; --workers must equal it (got {p})")
        part = book.load_part(rank)
        if self.cfg.adds_self_loops:  # the model's graph is A + I, as in every strategy
            part = part.with_self_loops()
        dev = self.ctx.device
        self.inner_ids = part.inner_ids
        if self.planner == "replication":
            self._prepare_replication(book)
        else:
            hosts = _rank_hosts() if self.planner == "swap" else None
            self.table, self.plan_s = _plan_tables(self.cfg, part, book.node_part, rank, p, self.planner, hosts)
            if not (np.array_equal(self.table.inner_ids, part.inner_ids)
                    and np.array_equal(self.table.halo_ids, part.halo_ids)):
                raise ConfigError(f"{book.path}/part{rank}: inner/halo ids differ from the plan's; "
                                  "re-run `gnnflow partition` (1-hop halos are required)")
            in_deg, out_deg = _local_degrees(part, book.node_part, self.table, p)
            block = Block(dst_ids=torch.from_numpy(part.inner_ids), src_ids=torch.from_numpy(part.local_to_global),
                          indptr=torch.from_numpy(np.asarray(part.indptr, dtype=np.int64)),
                          indices=torch.from_numpy(np.asarray(part.indices, dtype=np.int64)),
                          src_deg=torch.from_numpy(out_deg), dst_deg=torch.from_numpy(in_deg))
            self.blocks = [block.to(dev)] * self.cfg.num_layers
            feats = part.features
            if feats is None:
                raise ConfigError(f"{book.path}/part{rank}: no features.npy; partition with features")
            self.features = torch.from_numpy(np.array(feats, dtype=np.float32)).to(dev)
        lookup = part.global_to_local
        self.set_local_data(torch.from_numpy(np.asarray(part.labels)),
                            *(torch.from_numpy(lookup(getattr(part, f"{k}_idx"))) for k in ("train", "val", "test")))
        num_classes = int(book.meta.get("num_classes") or 0) or self._num_classes(book)
        seed_everything(self.cfg.seed)
        assert self.features is not None
        self.model = build_model_from_config(self.cfg, self.features.shape[1], num_classes,
                                             model=gcn_model_name(self.cfg.model, self.norm)).to(dev)
        self.optimizer = self.build_optimizer()
        self.digest = plan_digest(self.planner, self.table, self.blocks)

    def state_dict(self) -> dict[str, Any]:
        """Model and optimizer, and the digest of the plan this rank ran (see module docstring)."""
        return {**super().state_dict(), "plan_digest": self.digest}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("plan_digest") != self.digest:
            raise ConfigError(f"{self.cfg.partition}: rank {self.ctx.rank}'s communication plan differs from the "
                              "checkpointed run's (another partition book, topology or planner); resume with "
                              "the inputs and options of the checkpointed run")
        super().load_state_dict(state)

    @staticmethod
    def _num_classes(book: Any) -> int:
        from gnnflow.data.store import open_store

        return int(open_store(book.graph_path).num_classes)

    def _prepare_replication(self, book: Any) -> None:
        """Replication baseline (§3): this rank's L-hop in-neighbourhood, computed locally."""
        from gnnflow.data.store import open_store
        from gnnflow.sampling import NeighborSampler

        store = open_store(book.graph_path)
        graph = model_graph(store, self.cfg)
        in_deg, out_deg = graph_degrees(graph.indptr, graph.indices)
        sampler = NeighborSampler(graph.indptr, graph.indices, [-1] * self.cfg.num_layers, seed=self.cfg.seed)
        blocks = sampler.sample_blocks(torch.from_numpy(self.inner_ids))
        for b in blocks:
            b.src_deg, b.dst_deg = out_deg[b.src_ids], in_deg[b.dst_ids]
        self.blocks = [b.to(self.ctx.device) for b in blocks]
        src = blocks[0].src_ids.numpy()
        self.features = torch.from_numpy(np.array(store.features[src], dtype=np.float32)).to(self.ctx.device)
        self.replicated_vertices = int(src.shape[0])

    # ----- the model on the local graph -----------------------------------------------------------
    def forward_local(self, training: bool) -> torch.Tensor:
        assert self.model is not None and self.features is not None
        if self.planner == "replication":
            return self.model(self.blocks, self.features)  # type: ignore[operator]
        h = self.features
        for i, block in enumerate(self.blocks):
            first = self.project and self.model.projects_first(i)  # type: ignore[operator]
            if first:  # a narrowing GCN layer: project the inner rows, fetch the narrow halo rows
                h = self.model.project(i, h)  # type: ignore[operator]
            h = graph_allgather(h, self.table, self.stats)  # [inner | halo] rows of the layer input
            h = self.model.layer_step(i, block, h, projected=first)  # type: ignore[operator]
        return h

    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        self.stats = AllgatherStats(self.ctx.world_size)
        loss = super().run_epoch(epoch, rec)
        rec.add_time("comm", sum(self.stats.forward_stage_s) + sum(self.stats.backward_stage_s))
        rec.count("bytes_sent", self.stats.comm.total_sent)
        rec.count("bytes_received", self.stats.comm.total_received)
        rec.extra["allgather_calls"] = float(self.stats.calls)
        rec.extra["plan_s"] = self.plan_s
        if self.table is not None:
            rec.extra["table_bytes"] = float(self.table.nbytes())
            rec.extra["relay_rows"] = float(getattr(self.table, "relay_ids", np.zeros(0)).shape[0])
        return loss

    def close(self) -> None:
        if self.planner == "swap" and self.table is not None:
            close_swap(self.table)


# ------------------------------------------------------------------------------------------------
# verification against single-process full-batch training
# ------------------------------------------------------------------------------------------------


def _verify_rank(ctx: RankContext, cfg_dict: dict[str, Any], state: dict[str, torch.Tensor]) -> dict[str, Any]:
    s = PlannedHalo(TrainConfig.from_dict(cfg_dict), ctx)
    s.prepare()
    out = {**rank_outputs(s, state), "ids": s.inner_ids,
           "relay_rows": int(getattr(s.table, "relay_ids", np.zeros(0)).shape[0]) if s.table is not None else 0}
    s.close()
    return out


def verify(workers: int, model: str = "gcn", seed: int = 0, **kw: Any) -> dict[str, Any]:
    """Logits, loss and weight gradients of ``--strategy dgcl`` vs single-process full-batch training.

    ``kw``: ``planner`` (one name or a list; default all four), ``topology`` (preset or
    file; default ``dgx1-v100`` restricted to ``workers`` when ``workers <= 8``),
    ``graph`` (store path; default a small synthetic graph), ``num_layers`` (2),
    ``hidden`` (16), ``norm`` ("both"), ``project`` (True: narrowing GCN layers fetch projected
    rows), ``tol`` (1e-5 absolute), ``timeout_s``.
    """
    import tempfile

    from gnnflow.distributed.launch import run_ranks
    from gnnflow.partition.api import partition_graph

    planners = kw.pop("planner", list(PLANNERS))
    planners = [planners] if isinstance(planners, str) else list(planners)
    for pl in planners:
        if pl not in PLANNERS:
            raise ConfigError(f"verify dgcl: unknown planner {pl!r}; choose among {', '.join(PLANNERS)}")
    topology = kw.pop("topology", "dgx1-v100" if workers <= 8 else None)
    tol = float(kw.pop("tol", 1e-5))
    graph = kw.pop("graph", None)
    num_layers = int(kw.pop("num_layers", 2))
    hidden = int(kw.pop("hidden", 16))
    norm = str(kw.pop("norm", "both"))
    self_loops = kw.pop("self_loops", None)
    project = bool(kw.pop("project", True))
    timeout_s = float(kw.pop("timeout_s", 120))
    if kw:
        raise ConfigError(f"verify dgcl: unknown option(s) {sorted(kw)}")
    with tempfile.TemporaryDirectory(prefix="gnnflow-verify-dgcl-") as tmp:
        graph = verify_graph(graph, tmp, seed)
        book = partition_graph(graph, "metis", workers, f"{tmp}/parts", seed=seed)
        loops = TrainConfig(graph=str(graph), model=model, self_loops=self_loops).adds_self_loops
        ref = full_graph_reference(graph, model, hidden, num_layers, norm=norm, self_loops=loops, seed=seed)
        per: dict[str, Any] = {}
        for pl in planners:
            options = {"planner": pl, "norm": norm, "project": str(project).lower()}
            if topology:
                options["topology"] = topology
            cfg = TrainConfig(graph=str(graph), strategy="dgcl", partition=str(book.path), model=model,
                              hidden=hidden, num_layers=num_layers, fanouts=[-1] * num_layers, dropout=0.0,
                              seed=seed, workers=workers, self_loops=self_loops, options=options)
            results = run_ranks(_verify_rank, workers, cfg.to_dict(), ref["state"], timeout_s=timeout_s)
            per[pl] = {**compare_to_reference(results, ref, tol, relative=False),
                       "relay_rows": sum(r["relay_rows"] for r in results)}
    worst = {k: max(per[pl]["max_abs_diff"][k] for pl in per) for k in ("logits", "loss", "grads")}
    worst_rel = {k: max(per[pl]["max_rel_diff"][k] for pl in per) for k in ("logits", "loss", "grads")}
    return {"passed": all(v["passed"] for v in per.values()), "max_abs_diff": worst, "max_rel_diff": worst_rel,
            "planners": per, "workers": workers, "model": model, "topology": topology, "tolerance": tol,
            "loss": ref["loss"]}
