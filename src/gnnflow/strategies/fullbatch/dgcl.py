"""Planned halo exchange: full-batch GNN training with DGCL's graph_allgather (DGCL §4, §6.3).

Each rank owns one part of a partition book and runs the *unchanged*
single-process layers (:mod:`gnnflow.nn`) on its local graph ``G_d(V_d^l ∪ V_d^r,
E_d)`` (§4.1): destinations are its inner vertices, sources its inner and halo
vertices.  Before every layer, :func:`gnnflow.comm.allgather.graph_allgather`
fetches the halo rows of the layer input according to a communication plan
(Listing 1); its backward returns the halo gradients to their owners.  Loss,
gradient all-reduce, step and evaluation come from
:class:`~gnnflow.strategies.fullbatch.base.FullBatchBase`.

Options: :class:`DGCLOptions` (``--opt key=value``).  ``project`` (default true) is a deviation
from DGCL §4.2, which fetches every layer's input: a GCN layer that narrows the rows (``d_in >
d_out``, e.g. the output layer) projects its owner's rows before the exchange, so the halo rows
fetched are ``d_out`` wide (``diag(c) Â H W = diag(c) Â (H W)``, the order DGL's GraphConv computes
in): the same mathematics with ``d_out / d_in`` of the bytes and of the ``[inner | halo]``
activations (products-shaped, 4 ranks: 256 -> 47 columns in the output layer).

The plan is made once on rank 0 from ``node_part`` and every part's halo ids,
which the ranks send it (offline planning, §4.1; no rank reads the graph's
CSR), and scattered; each rank counts the whole-graph degrees of its vertices
from the parts (:func:`gnnflow.comm.collectives.part_degrees`) and fetches its
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
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.comm.allgather import AllgatherStats, close_swap, graph_allgather, swap_tables
from gnnflow.comm.collectives import part_degrees
from gnnflow.comm.plan import PLANNERS, comm_relation_from_halos, make_plan
from gnnflow.comm.topology import load_topology, uniform_topology
from gnnflow.config import TrainConfig
from gnnflow.errors import ConfigError
from gnnflow.options import StrategyOptions, option
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext
from gnnflow.sampling import Block
from gnnflow.strategies.common import graph_degrees, model_graph, seed_everything
from gnnflow.strategies.fullbatch.base import FullBatchBase
from gnnflow.strategies.memory import DGCL_DST, DGCL_SRC, RunSizes

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
            topo_name = cfg.options.topology
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


def _local_degrees(part: Any, node_part: np.ndarray, table: Any, world_size: int,
                   device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """Whole-graph in-degrees of the inner vertices and out-degrees of the local (inner, then
    halo) vertices, counted from the parts; the halo's come from their owners through the plan
    itself.  Collective.

    The plan's exchange is the payload path: the degrees travel it from the compute ``device``
    like a layer's rows (over NCCL, or staged through the host when ranks share a GPU)."""
    in_deg, out_inner = part_degrees(part, node_part)
    with torch.no_grad():
        local = graph_allgather(torch.from_numpy(out_inner.astype(np.float32)).unsqueeze(1).to(device), table,
                                AllgatherStats(world_size))
    return in_deg.astype(np.float32), local[:, 0].cpu().numpy().copy()


@dataclass(frozen=True)
class DGCLOptions(StrategyOptions):
    """DGCL's options (§4-§6)."""

    planner: str = option("spst", "spst (Algorithm 1), p2p, swap (through host shared memory) or replication "
                          "(each rank computes its L-hop in-neighbourhood itself; no communication, §3)",
                          choices=PLANNERS, flag="--planner")
    topology: str | None = option(None, "preset name or topology file (default: a uniform full mesh, for which "
                                  "SPST reduces to load-balanced direct sends)")
    norm: str = option("both", "GCN normalisation: both or right", choices=("both", "right"))
    project: bool = option(True, "a narrowing GCN layer projects its owner's rows before the exchange "
                           "(fetches d_out-wide rows; false: layer inputs, as the paper)")


class PlannedHalo(FullBatchBase):
    """``--strategy dgcl``: full-batch training with planned graph_allgather per layer."""

    name = "dgcl"
    Options = DGCLOptions
    adjacency_copies = 2

    @classmethod
    def memory_terms(cls, run: RunSizes, r: int) -> tuple[dict[str, int], dict[str, int]]:
        """The unchanged autograd layers on ``[inner | halo]`` rows instead of shared buffers:
        per layer the gathered input (and its gradient) and the destinations' outputs, kept for
        backward (a narrowing GCN layer gathers ``d_out``-wide projected rows with ``project``);
        rank 0 plans from every part's halo ids (gathered) and ``node_part``, not the CSR."""
        terms, helper = super().memory_terms(run, r)
        part, dims = run.parts[r], run.dims
        terms["node_part"] = 4 * run.sizes.num_nodes
        del terms["buffers"]
        project = run.cfg.model == "gcn" and run.cfg.options.project
        terms["activations"] = int(4 * sum(
            DGCL_SRC * (part.inner + part.halo) * (d_out if project and d_in > d_out else d_in)
            + DGCL_DST * part.inner * d_out for d_in, d_out in dims))
        if r == 0:
            terms["plan_halos"] = int(2 * 8 * sum(q.halo for q in run.parts))
        return terms, helper

    def __init__(self, cfg: TrainConfig, ctx: RankContext) -> None:
        super().__init__(cfg, ctx)
        self.planner = self.options.planner
        self.norm = self.options.norm
        self.project = self.options.project
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
            in_deg, out_deg = _local_degrees(part, book.node_part, self.table, p, dev)
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
        num_classes = book.meta.num_classes or self._num_classes(book)
        part.check_labels(num_classes)
        seed_everything(self.cfg.seed)
        assert self.features is not None
        self.model = build_model_from_config(self.cfg, self.features.shape[1], num_classes,
                                             model=self.model_name(self.cfg)).to(dev)
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
