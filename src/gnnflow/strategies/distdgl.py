"""The peer baseline: DGL 1.1.3's own DistDGL on the SAME partitions (DistDGLv2 §3.3).

``--strategy distdgl`` trains with DGL's distributed stack: ``DistGraphServer``
processes hold the partitions (graph structure + KVStore features), each
trainer opens a ``DistGraph``, draws its targets with ``node_split``, samples
with ``DistNodeDataLoader`` + ``NeighborSampler`` (remote neighbourhoods via
RPC to the owning server) and trains DGL's own layers (``SAGEConv`` /
``GraphConv`` / ``GATConv``) under PyTorch ``DistributedDataParallel``.  The
partition book is converted with
:func:`gnnflow.partition.dgl_interop.write_dgl_partitions` (DGL's layout of the
book's node assignment, written part by part from the book's shards, or by DGL's
own writer for two-level books), so both systems run on identical partitions.
On a typed book ``--model rgcn`` trains DGL's distributed RGCN instead
(:mod:`gnnflow.strategies.distdgl_rgcn`: DGL's heterogeneous layout of the book,
per-relation sampling, ``RelGraphConv``, ``DistEmbedding`` rows for featureless
types); ``rgat`` is refused.

Launch (what DGL's ``tools/launch.py`` does): the gnnflow launcher starts the P
trainer ranks (on one host, or on several: ``--nnodes``, torchrun, srun);
rank 0 writes the DGL layout next to the book if it is not there (a staged
host gets it with ``gnnflow stage --dgl``); every rank r then serves its own
part: it picks a port on the run's address (loopback on one host, the host's
address across hosts), the ranks gather an ``ip_config`` with one line per
partition ("machine") ``<address of rank r> <port>``, and rank r starts the
server of partition r with ``DGL_ROLE=server``, ``DGL_SERVER_ID=r``,
``DGL_NUM_SERVER=1``, ``DGL_NUM_CLIENT=P * (1 + S)``, ``DGL_CONF_PATH``,
``DGL_IP_CONFIG``, ``DGL_GRAPH_FORMAT=csc``; trainers run with
``DGL_DIST_MODE=distributed``, ``DGL_ROLE=client``, ``DGL_NUM_SAMPLER=S``.
A server dies with its rank (``PR_SET_PDEATHSIG``), so a failed run leaves no
process behind; on success DGL's ``exit_client`` (rank 0's client) shuts them
all down.

Sampler processes (option ``num_samplers``, default 1): as ``launch.py
--num_samplers S`` does, each trainer runs with ``DGL_NUM_SAMPLER=S`` and
every server expects ``P * (1 + S)`` clients.  ``dgl.distributed.initialize``
then spawns DGL's own pool of S sampler processes per trainer; each connects
to the servers as a client of its trainer's machine, and
``DistNodeDataLoader`` hands them the batches' seeds and prefetches
``4 * S`` batches ahead (DGL's default queue size).  With ``num_samplers=0``
the trainer samples inline, as DGL does without ``--num_samplers``.  The
sampler processes get the same one-host patches (below) and die with their
trainer (``PR_SET_PDEATHSIG``); on success DGL's ``exit_client`` joins them.
Trainers get ``OMP_NUM_THREADS`` = their torch threads, as ``launch.py`` sets
it; their sampler processes inherit it (without it each would run torch with
as many threads as the machine has cores).

DGL limitation and the two patches that work around it.  DGL assumes one
machine (IP address) per partition: "We cannot run multiple servers and
clients on the same machine" (DGL's own tests).  On one host,

1. every client would take machine id 0 (``get_local_machine_id`` matches the
   first ip_config line with a local address), so trainer r is told its
   machine is r (``rpc_client.get_local_machine_id`` patched);
2. the servers' KVStore shared-memory segments are named only by the data
   name (``node~_N~feat-kvdata-``) and would collide, so every server/trainer
   (and sampler) process of partition r suffixes those names with
   ``-<run>m<r>`` (``kvstore.empty_shared_mem`` wrapped), and each partition
   gets its own copy of the partition config with its own graph name
   (``<run>m<r>``), so the graph structure and partition book segments are
   distinct too.  ``<run>`` is drawn per run (``gf`` + 8 hex digits), so two
   runs on one host, e.g. two users' benchmarks, never share a segment.

A third patch is not about hosts: DGL draws neighbours with one random engine
per process, consumed in the order requests arrive, and a server serves all
trainers' requests as they come, so two runs of the same configuration sample
differently (two 1-host runs of the default config: loss 3.1724 vs 3.1489
after one epoch).  With the option ``seeded_sampling`` (default true) every
process of the run wraps ``graph_services._sample_neighbors`` (the one function
that samples, for a server's requests and for the local partition alike) so
that it first seeds DGL's engine with a hash of the run's seed, the fanout
and the request's seed vertices (:func:`request_seed`) and samples with one
OpenMP thread (DGL gives each thread its own engine and a share of the rows,
so otherwise the draws would depend on the process's thread count, which
differs between a 1-host run and ranks started by srun).  It also builds the
sampler's blocks (``to_block`` of ``dgl.dataloading.neighbor_sampler``) with one
thread: with more, DGL numbers a block's source vertices through a concurrent
hash map in an order that changes from call to call, and that order is the next
hop's request, so its seed.  The draws are then a
function of the request, not of arrival order, threads or timing: the peer's
records repeat, and a 2-host run's or an srun-started run's equal a 1-host
run's.  This is our deviation from DGL, which leaves its streams unseeded; it
costs one hash of the request's ids and an engine reseed per request, and one
thread for block building (``seeded_sampling=false`` restores DGL's
behaviour).

Shared memory is removed by DGL's servers when they shut down; when a rank
dies instead, its :mod:`gnnflow.strategies.distdgl_janitor` removes its
machine's ``/dev/shm`` entries once its server is gone.

Everything else — sampling, KVStore pulls, partition policy, DDP — is DGL's
code.  With those patches each trainer reads its local partition through
shared memory and remote ones through RPC, as on a real cluster (across
hosts: over the network; tests/test_multihost.py).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnnflow.comm.collectives import all_gather
from gnnflow.config import is_layer_class
from gnnflow.errors import ConfigError, DistributedError
from gnnflow.io import ticking
from gnnflow.options import StrategyOptions, option
from gnnflow.partition.dgl_interop import dgl_layout, ensure_dgl_layout
from gnnflow.results.schema import Recorder
from gnnflow.runtime.context import RankContext
from gnnflow.runtime.devices import HOST
from gnnflow.runtime.watchdog import note_progress
from gnnflow.strategies.base import Strategy, check_loss
from gnnflow.strategies.distdgl_janitor import start_janitor
from gnnflow.strategies.distdgl_rgcn import timed_batches
from gnnflow.strategies.memory import (
    BASE_DGL,
    DGL_EVAL_BATCH,
    DGL_EVAL_EDGE_BYTES,
    RunSizes,
    sampled_layers,
)

SPLITS = ("train", "val", "test")
#: DGL sampler processes per trainer (``launch.py --num_samplers``); 0 samples in the trainer
DEFAULT_SAMPLERS = 1
_RUN_ENV = "GNNFLOW_DGL_RUN"  # "<run>:<machine>": names a process's shared memory and its machine
_TRAINER_ENV = "GNNFLOW_DGL_TRAINER_PID"  # the parent of a DGL sampler process
_SEED_ENV = "GNNFLOW_DGL_SEED"  # the run's seed of patch 3 (seeded sampling requests); unset: DGL's streams


# ---------------------------------------------------------------------------- DGL on one host
def _patch_dgl_for_one_host(run: str, machine: int) -> None:
    """The two one-host patches described in the module docstring (idempotent per process)."""
    from dgl.distributed import kvstore, rpc_client

    suffix = f"-{run}m{machine}"
    if getattr(kvstore, "_gnnflow_suffix", None) is None:
        original = kvstore.empty_shared_mem

        def empty_shared_mem(name: str, *args: Any, **kwargs: Any) -> Any:
            return original(name + kvstore._gnnflow_suffix, *args, **kwargs)

        kvstore.empty_shared_mem = empty_shared_mem
    kvstore._gnnflow_suffix = suffix
    rpc_client.get_local_machine_id = lambda _namebook: machine


def request_seed(base: int, nodes: Any, fan_out: Any) -> int:
    """The seed of DGL's random engine for one neighbour-sampling request: a hash of the run's
    seed, the fanout and the request's seed vertices (global ids, in request order)."""
    ids = np.ascontiguousarray(np.asarray(nodes), dtype=np.int64)
    digest = hashlib.blake2b(f"{int(base)}|{fan_out!r}|".encode() + ids.tobytes(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


@contextlib.contextmanager
def one_dgl_thread() -> Any:
    """DGL's OpenMP pool at one thread inside the block (restored after)."""
    import dgl

    threads = dgl.utils.get_num_threads()
    if threads != 1:
        dgl.utils.set_num_threads(1)
    try:
        yield
    finally:
        if threads != 1:
            dgl.utils.set_num_threads(threads)


def _patch_seeded_sampling(base: int) -> None:
    """Patch 3 (module docstring): every neighbour-sampling request, served by a server or
    sampled from the local partition, first seeds DGL's random engine with
    :func:`request_seed`, and blocks are built with one thread (idempotent per process)."""
    import dgl
    from dgl.dataloading import neighbor_sampler
    from dgl.distributed import graph_services

    if getattr(graph_services, "_gnnflow_seeded", False):
        return
    original = graph_services._sample_neighbors
    original_etype = graph_services._sample_etype_neighbors
    original_to_block = neighbor_sampler.to_block

    def _sample_neighbors(local_g: Any, partition_book: Any, seed_nodes: Any, fan_out: Any, *args: Any) -> Any:
        # one OpenMP thread: DGL splits rows among its threads, each drawing from its own engine,
        # so the draws would depend on how many threads the sampling process runs
        with one_dgl_thread():
            dgl.random.seed(request_seed(base, seed_nodes, fan_out))
            return original(local_g, partition_book, seed_nodes, fan_out, *args)

    def _sample_etype_neighbors(local_g: Any, partition_book: Any, seed_nodes: Any, etype_offset: Any,
                                fan_out: Any, *args: Any, **kwargs: Any) -> Any:
        # the typed graph's sampler (a count per relation): seeded the same way
        fan = fan_out.tolist() if hasattr(fan_out, "tolist") else fan_out
        with one_dgl_thread():
            dgl.random.seed(request_seed(base, seed_nodes, fan))
            return original_etype(local_g, partition_book, seed_nodes, etype_offset, fan_out, *args, **kwargs)

    def to_block(*args: Any, **kwargs: Any) -> Any:
        # with several threads DGL's to_block numbers a block's sources through a concurrent
        # hash map, in an order that changes from call to call; that order is the next hop's
        # request order, and so its seed
        with one_dgl_thread():
            return original_to_block(*args, **kwargs)

    graph_services._sample_neighbors = _sample_neighbors
    graph_services._sample_etype_neighbors = _sample_etype_neighbors
    neighbor_sampler.to_block = to_block
    graph_services._gnnflow_seeded = True


def _patch_from_env() -> None:
    run, machine = os.environ[_RUN_ENV].rsplit(":", 1)
    _patch_dgl_for_one_host(run, int(machine))
    if os.environ.get(_SEED_ENV):
        _patch_seeded_sampling(int(os.environ[_SEED_ENV]))


def _sampler_process(rpc_config: Any, mp_contexts: Any) -> None:
    """Body of one of DGL's sampler processes (``dist_context.init_process``), patched first.

    DGL's ``CustomPool`` spawns it inside ``dgl.distributed.initialize``; it inherits
    the trainer's environment, which names its run and machine.
    """
    from dgl.distributed import dist_context

    _set_pdeathsig()  # never outlive the trainer ...
    if os.getppid() != int(os.environ[_TRAINER_ENV]):  # ... which may have died while this one started
        os._exit(1)
    _patch_from_env()
    dist_context.init_process(rpc_config, mp_contexts)


def machine_configs(layout: Path, num_parts: int, run: str, run_dir: Path) -> list[Path]:
    """In ``run_dir``, one partition config per DGL machine (= part = trainer) naming the graph
    ``<run>m<r>``, with absolute paths into ``layout`` (a host holds only its own parts' files:
    a client reads only the config's maps, a server loads only its own part)."""
    conf = layout / "gnnflow.json"
    if not conf.exists():
        raise ConfigError(f"{layout}: no DistDGL layout of this book on this host; stage it with the parts "
                          "(`gnnflow stage BOOK --part K --to DIR --dgl`, docs/cluster.md)")
    cfg = json.loads(conf.read_text())
    if int(cfg["num_parts"]) != num_parts:
        raise ConfigError(f"{conf}: {cfg['num_parts']} DGL partitions for {num_parts} trainers; "
                          "--strategy distdgl needs a one-level book with as many parts as --workers")
    for p in range(num_parts):
        cfg[f"part-{p}"] = {k: str(layout / v) for k, v in cfg[f"part-{p}"].items()}
    confs = []
    for r in range(num_parts):
        path = run_dir / f"{run}m{r}.json"
        path.write_text(json.dumps(dict(cfg, graph_name=f"{run}m{r}"), indent=2, sort_keys=True))
        confs.append(path)
    return confs


def _set_pdeathsig() -> None:  # runs in the server child before exec
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def start_servers(confs: dict[int, Path], ip_config: Path, run: str, num_trainers: int,
                  samplers: int) -> list[subprocess.Popen]:
    """One ``DistGraphServer`` process for each partition of ``confs`` (part -> its machine's
    config), killed if this process dies.  Every trainer and every sampler process is a client
    (``launch.py``'s count)."""
    procs = []
    num_clients = num_trainers * (1 + samplers)
    for i, conf in confs.items():
        env = dict(os.environ, DGL_ROLE="server", DGL_SERVER_ID=str(i), DGL_NUM_SERVER="1",
                   DGL_NUM_CLIENT=str(num_clients), DGL_CONF_PATH=str(conf), DGL_IP_CONFIG=str(ip_config),
                   DGL_GRAPH_FORMAT="csc", DGL_DIST_MODE="distributed", DGL_NUM_SAMPLER=str(samplers),
                   OMP_NUM_THREADS="1", DGLBACKEND="pytorch", **{_RUN_ENV: f"{run}:{i}"})
        procs.append(subprocess.Popen([sys.executable, "-m", "gnnflow.strategies.distdgl", "server"], env=env,
                                      preexec_fn=_set_pdeathsig, stdout=subprocess.DEVNULL))
    return procs


def _server_main() -> None:
    """Body of a server process (environment as DGL's launch.py sets it)."""
    from dgl.distributed import DistGraphServer

    _patch_from_env()
    serv = DistGraphServer(int(os.environ["DGL_SERVER_ID"]), os.environ["DGL_IP_CONFIG"],
                           int(os.environ["DGL_NUM_SERVER"]), int(os.environ["DGL_NUM_CLIENT"]),
                           os.environ["DGL_CONF_PATH"], graph_format=os.environ["DGL_GRAPH_FORMAT"].split(","))
    serv.start()


# ---------------------------------------------------------------------------- the strategy
@dataclass(frozen=True)
class DistDGLOptions(StrategyOptions):
    """The DistDGL peer's options."""

    num_samplers: int = option(DEFAULT_SAMPLERS, "DGL sampler processes per trainer", minimum=0)
    seeded_sampling: bool = option(True, "seed every sampling request from the run's seed and the request "
                                   "(patch 3: the peer's runs repeat); false: DGL as it ships")


class DistDGLBaseline(Strategy):
    """DGL's DistDGL (DistGraph, DistNodeDataLoader, DDP) on the partition book's partitions."""

    name = "distdgl"
    distributed = True
    relational = True  # --model rgcn (gnnflow.strategies.distdgl_rgcn); check_config refuses the rest
    Options = DistDGLOptions
    # torch's DistributedDataParallel imports torch._dynamo in its constructor (1.8-2.3 CPU s)
    rank_imports = ("torch._dynamo",)

    @classmethod
    def memory_terms(cls, run: RunSizes, r: int) -> tuple[dict[str, int], dict[str, int]]:
        """A trainer importing DGL, DGL's prefetch queue and the trained batch, and DGL's layer-wise
        evaluation: one-hop full-neighbourhood blocks of ``DGL_EVAL_BATCH`` seeds, the pulled rows,
        and the trainer's part of the two hidden DistTensors in use (the layer read and the layer
        written; the server holds them too).  Helpers: one DGL server per part holding its
        partition (inner and halo structure in int64, features, shared memory) and the sampler
        processes."""
        part, n, m = run.parts[r], run.sizes.num_nodes, run.sizes.num_edges
        terms = {"baseline": BASE_DGL, "model": run.model, "batch": int(run.batch_rows * 2 + run.acts)}
        one = sampled_layers(DGL_EVAL_BATCH, [-1], n, m)
        hidden = [d for _, d in run.dims[:-1]]
        width = max([run.f_dim] + hidden)
        tables = 4 * (n / len(run.parts)) * sum(sorted(hidden)[-2:])
        terms["evaluation"] = max(0, int(DGL_EVAL_EDGE_BYTES * DGL_EVAL_BATCH * m / max(1, n)
                                         + 8 * one[0] * width + tables - terms["batch"]))
        server = BASE_DGL + int(8 * 3 * (part.edges + part.halo) + 4 * part.inner * run.f_dim
                                + 16 * (part.inner + part.halo) + tables)
        helper = {"server": server}
        samplers = run.cfg.options.num_samplers
        if samplers > 0:
            helper["sampler"] = samplers * (BASE_DGL + int(4 * 8 * sum(run.levels) * 4))
        return terms, helper

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        if is_layer_class(cfg.model):
            raise ConfigError(f"model {cfg.model}: the DistDGL peer builds DGL's own layers (gnnflow.nn.peer: "
                              "sage, gcn, gat); a layer class trains under single, data, split, p3 or hec")
        if cfg.graph_degrees:
            raise ConfigError("gcn_degrees=graph: DGL's GraphConv normalises a sampled block by its own "
                              "degrees; run the DistDGL peer with --gcn-degrees block")
        if cfg.model == "rgat":
            raise ConfigError("model rgat: the DistDGL peer trains DGL's RGCN (RelGraphConv) on a typed book, not "
                              "R-GAT; run rgat under --strategy single, data or hec (docs/hetero.md)")
        if cfg.relational and cfg.model != "rgcn":
            raise ConfigError(f"per-relation fanouts with model {cfg.model}: the DistDGL peer samples per relation "
                              "only for --model rgcn")

    @classmethod
    def model_name(cls, cfg: Any) -> str:
        raise ConfigError("strategy distdgl trains DGL's own layers (gnnflow.nn.peer), not a gnnflow model; "
                          "predict from a run of another strategy")

    def __init__(self, cfg: Any, ctx: RankContext) -> None:
        super().__init__(cfg, ctx)
        self.servers: list[subprocess.Popen] = []
        self.janitor: subprocess.Popen | None = None
        self.run: str | None = None  # this run's token in shared-memory names
        self.rel: Any = None  # --model rgcn: the relational side (gnnflow.strategies.distdgl_rgcn)

    def prepare(self) -> None:
        import dgl
        import dgl.distributed as dgld

        from gnnflow.comm.collectives import world
        from gnnflow.nn.peer import dgl_model_from_config
        from gnnflow.runtime.group import free_port
        from gnnflow.runtime.network import run_address
        from gnnflow.strategies.common import make_optimizer, seed_everything

        cfg = self.cfg
        samplers = self.options.num_samplers
        rank, size = world()
        if not cfg.partition:
            raise ConfigError("--strategy distdgl needs --partition (a partition book with --workers parts)")
        if size < 2 and not dist.is_initialized():
            raise ConfigError("--strategy distdgl runs with --workers >= 2 (DGL's servers + trainers)")
        shared: list[Any] = [secrets.token_hex(4)]  # this run's name in shared memory
        dist.broadcast_object_list(shared, 0)
        run = self.run = f"gf{shared[0]}"
        typed = cfg.model == "rgcn"  # DGL's heterogeneous layout and distributed RGCN
        if typed:
            from gnnflow.partition.book import PartitionBook

            if not PartitionBook.open(cfg.partition).meta.typed:
                raise ConfigError(f"{cfg.partition}: --model rgcn on the DistDGL peer needs a typed book (a "
                                  "partition of a homogenized heterogeneous store, e.g. `gnnflow prepare "
                                  "synthetic-hetero`)")
        if rank == 0:  # converted once, where the whole book is (a staged host has it already)
            from gnnflow.partition.book import PartitionBook

            ensure_dgl_layout(cfg.partition, str(PartitionBook.open(cfg.partition).graph_path),
                              self_loops=cfg.adds_self_loops, typed=typed)
        dist.barrier()
        # every rank serves its own part from its host (DGL machine r = trainer r), on the run's
        # address (loopback on one host): ip_config line r is rank r's address and server port
        run_dir = Path(tempfile.mkdtemp(prefix=f"gnnflow-dgl-{run}m{rank}-"))
        confs = machine_configs(dgl_layout(cfg.partition, cfg.adds_self_loops, typed), size, run, run_dir)
        address = run_address()
        lines: list[Any] = [None] * size
        dist.all_gather_object(lines, f"{address} {free_port(address)}")
        ip_config = run_dir / "ip_config.txt"
        ip_config.write_text("".join(f"{line}\n" for line in lines))
        if self.options.seeded_sampling:  # patch 3, in servers and samplers too
            os.environ[_SEED_ENV] = str(cfg.seed)
        else:
            os.environ.pop(_SEED_ENV, None)
        self.servers = start_servers({rank: confs[rank]}, ip_config, run, size, samplers)
        # removes this machine's shared memory once its server is gone (e.g. with this rank)
        self.janitor = start_janitor(f"{run}m{rank}", run_dir, [p.pid for p in self.servers])
        atexit.register(self._stop_servers)  # runs after DGL's exit_client (registered later)
        os.environ.update(DGL_DIST_MODE="distributed", DGL_ROLE="client", DGL_NUM_SAMPLER=str(samplers),
                          DGL_NUM_SERVER="1", DGL_NUM_CLIENT=str(size * (1 + samplers)), DGL_GROUP_ID="0",
                          DGL_IP_CONFIG=str(ip_config), DGL_CONF_PATH=str(confs[rank]))
        os.environ.update({_RUN_ENV: f"{run}:{rank}", _TRAINER_ENV: str(os.getpid())})  # for DGL's samplers
        # launch.py gives trainers (and so their sampler processes) OMP_NUM_THREADS = cores / trainers
        os.environ["OMP_NUM_THREADS"] = str(torch.get_num_threads())
        _patch_from_env()
        from dgl.distributed import dist_context

        dist_context.init_process = _sampler_process  # DGL's pool spawns its samplers with this
        # DGL prints connection progress to stdout; keep stdout clean for `--json` consumers
        with contextlib.redirect_stdout(sys.stderr):
            dgld.initialize(str(ip_config))
        atexit.unregister(dgld.exit_client)
        atexit.register(self._exit_dgl)  # LIFO: runs before _stop_servers
        self._dgl_active = True
        self.g = dgld.DistGraph(f"{run}m{rank}", part_config=str(confs[rank]))
        if typed:
            from gnnflow.strategies.distdgl_rgcn import RelationalPeer

            label_types = json.loads(confs[rank].read_text())["gnnflow"]["label_types"]
            self.rel = RelationalPeer(cfg, self.g, label_types, rank, size)
            # a checkpoint holds the dense model and optimizer (the DistEmbedding rows stay on the servers)
            self.net, self.model, self.optimizer = self.rel.module, self.rel.model, self.rel.optimizer
            self.trainer_batch = self.rel.trainer_batch
            self._check_equal_batches()
            return
        pb = self.g.get_partition_book()
        self.split_nids = {s: dgld.node_split(self.g.ndata[f"{s}_mask"], pb, force_even=True) for s in SPLITS}
        feat_dim = int(self.g.ndata["feat"].shape[1])
        num_classes = self._num_classes()
        sampler = dgl.dataloading.NeighborSampler(list(cfg.fanouts))
        # DGL's batch_size is per trainer; ours (cfg.batch_size) is the global mini-batch
        self.trainer_batch = -(-cfg.batch_size // size)
        self.loader = dgl.dataloading.DistNodeDataLoader(
            self.g, self.split_nids["train"], sampler, batch_size=self.trainer_batch, shuffle=True, drop_last=False)
        seed_everything(cfg.seed)
        torch.manual_seed(cfg.seed)
        net = dgl_model_from_config(cfg, feat_dim, num_classes)
        self.net = net
        self.model = torch.nn.parallel.DistributedDataParallel(net)
        self.optimizer = make_optimizer(net, cfg)
        self._check_equal_batches()

    def _num_classes(self) -> int:
        from gnnflow.partition.book import PartitionBook

        return int(PartitionBook.open(self.cfg.partition).meta.num_classes)

    def _check_equal_batches(self) -> None:
        n = torch.tensor([self.rel.num_batches() if self.rel is not None
                          else -(-len(self.split_nids["train"]) // self.trainer_batch)])
        allc = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
        all_gather(allc, n, HOST)
        if len({int(c) for c in allc}) != 1:  # DDP would hang; node_split(force_even) prevents this
            raise DistributedError(f"DistDGL trainers got unequal batch counts {[int(c) for c in allc]}")

    def run_epoch(self, epoch: int, rec: Recorder) -> float:
        from dgl.distributed import dist_context

        pool, workers = dist_context.get_sampler_pool()
        rec.extra["dgl_sampler_processes"] = float(workers if pool is not None else 0)
        if self.rel is not None:
            return float(self.rel.run_epoch(epoch, rec))
        self.model.train()
        losses = []
        for input_nodes, seeds, blocks in timed_batches(self.loader, rec):
            with rec.timer("load"):
                x = self.g.ndata["feat"][input_nodes]
                y = self.g.ndata["label"][seeds].long()
            rec.count("sampled_edges", sum(b.num_edges() for b in blocks))
            rec.count("features_loaded", int(input_nodes.shape[0]))
            with rec.timer("forward_backward"):
                self.optimizer.zero_grad()
                loss = F.cross_entropy(self.model(blocks, x), y)
                loss.backward()  # DDP all-reduces the gradients inside backward
            with rec.timer("step"):
                self.optimizer.step()
            rec.count("iterations")
            losses.append(float(loss.detach()))
            check_loss(losses[-1], epoch, len(losses) - 1, self.ctx.rank)  # the peer checkpoints per epoch only
        return float(np.mean(losses)) if losses else float("nan")

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """DistDGL's layer-wise inference (the ``inference`` of DGL's distributed GraphSAGE example):
        one layer at a time over every vertex, each trainer its ``node_split`` share in batches of
        one-hop full neighbourhoods, a hidden layer's outputs in a DistTensor on the servers; the
        last layer runs on each split's vertices only.  A trainer holds one batch, never the
        multi-hop neighbourhood of a batch (on a products-sized graph that is the whole graph).
        Collective: every trainer calls it."""
        import dgl
        import dgl.distributed as dgld

        from gnnflow.strategies.metrics import reduce_sums, split_metrics, split_sums

        if self.rel is not None:
            return self.rel.evaluate()
        self.model.eval()
        g, net = self.g, self.net
        one_hop = dgl.dataloading.MultiLayerFullNeighborSampler(1)

        def batches(nids: torch.Tensor) -> Any:
            return dgl.dataloading.DistNodeDataLoader(g, nids, one_hop, batch_size=DGL_EVAL_BATCH,
                                                      shuffle=False, drop_last=False)

        x, last = g.ndata["feat"], len(net.layers) - 1
        if last:
            every = torch.ones(g.num_nodes(), dtype=torch.bool)
            mine = dgld.node_split(every, g.get_partition_book(), force_even=True)
        for i in range(last):
            y = dgld.DistTensor((g.num_nodes(), net.out_widths[i]), torch.float32)  # anonymous: freed with y
            loader = batches(mine)
            if self.ctx.rank == 0:
                loader = ticking(loader, f"distdgl evaluation, layer {i + 1}/{last + 1}: batch",
                                 -(-len(mine) // DGL_EVAL_BATCH))
            for input_nodes, seeds, blocks in loader:
                y[seeds] = net.layer(i, blocks[0], x[input_nodes])
                note_progress()  # DGL's pulls are no collective of ours: the watchdog sees this
            g.barrier()  # every trainer's rows are in y
            x = y  # the previous layer's DistTensor is deleted here (collectively)
        sums = split_sums({})
        for split in SPLITS:
            for input_nodes, seeds, blocks in batches(self.split_nids[split]):
                logits = net.layer(last, blocks[0], x[input_nodes])
                sums += split_sums({split: (logits, g.ndata["label"][seeds])})
                note_progress()
        return split_metrics(reduce_sums(sums))

    def close(self) -> None:
        """Leave DGL's distributed module (rank 0's client shuts the servers down), reap servers."""
        self._exit_dgl()
        self._stop_servers()

    def _exit_dgl(self) -> None:
        import dgl.distributed as dgld

        if getattr(self, "_dgl_active", False):
            self._dgl_active = False
            self.g = None
            self.loader = None
            self.rel = None
            with contextlib.redirect_stdout(sys.stderr):
                dgld.exit_client()

    def _stop_servers(self) -> None:
        deadline = time.monotonic() + 10
        for p in self.servers:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(2)
        self.servers = []
        if self.janitor is not None:  # servers gone: it removes the run's shared memory and files
            self.janitor.communicate(timeout=60)
            self.janitor = None


if __name__ == "__main__" and sys.argv[1:] == ["server"]:
    _server_main()

