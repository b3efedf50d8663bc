"""Where this process stands in a run: its host among several (gnnflow's launcher on each, ``--nnodes``),
or the rank an outer launcher (torchrun, srun) started.

* ``gnnflow train --nnodes N --node-rank K --master HOST:PORT`` (:func:`set_nodes`): host ``K`` runs
  ranks ``K*L .. K*L+L-1`` (``L = world_size / N``); host 0 holds the rendezvous store.
* torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``.
* srun: ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the master is the first host of
  ``SLURM_STEP_NODELIST`` (or ``SLURM_JOB_NODELIST``), the port derived from the job id unless
  ``MASTER_PORT`` is set.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

from gnnflow.errors import ConfigError

NODES_ENV = "GNNFLOW_NODES"  # "N K HOST:PORT", set by set_nodes (the train/verify flags)


@dataclass(frozen=True)
class Nodes:
    """This host's place in a multi-host run started by gnnflow's own launcher on each host."""

    nnodes: int
    node_rank: int
    master: str  # host name or address of node 0
    port: int

    def local_ranks(self, world_size: int) -> range:
        """Global ranks this host runs."""
        if world_size % self.nnodes:
            raise ConfigError(f"--workers {world_size} (all ranks) is not a multiple of --nnodes {self.nnodes}")
        local = world_size // self.nnodes
        return range(self.node_rank * local, (self.node_rank + 1) * local)


def parse_master(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--master {text!r}: expected HOST:PORT (node 0's host and a free port on it)")
    return host, int(port)


def set_nodes(nnodes: int, node_rank: int, master: str | None) -> None:
    """Make this process (and what it starts) one host of ``nnodes`` (see the module docstring)."""
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ConfigError(f"--node-rank {node_rank}: expected 0 <= node-rank < --nnodes {nnodes}")
    if master is None:
        if nnodes > 1:
            raise ConfigError("--nnodes > 1 needs --master HOST:PORT (node 0's host and a port to listen on)")
        os.environ.pop(NODES_ENV, None)
        return
    host, port = parse_master(master)
    os.environ[NODES_ENV] = f"{nnodes} {node_rank} {host}:{port}"


def nodes() -> Nodes | None:
    """This host's :class:`Nodes` when set by :func:`set_nodes`, else None."""
    text = os.environ.get(NODES_ENV)
    if not text:
        return None
    n, k, master = text.split()
    host, port = parse_master(master)
    return Nodes(int(n), int(k), host, port)


def add_node_arguments(parser: Any) -> None:
    """``--nnodes``, ``--node-rank``, ``--master``: this host's place in a run across hosts."""
    group = parser.add_argument_group("several hosts (gnnflow's launcher on each; --workers counts all ranks)")
    group.add_argument("--nnodes", type=int, default=1, help="hosts taking part (default 1)")
    group.add_argument("--node-rank", type=int, default=0, help="this host's index, 0 .. nnodes-1 (0 holds the store)")
    group.add_argument("--master", default=None, metavar="HOST:PORT",
                       help="node 0's host name or address and the port its store listens on (only there)")


def apply_node_arguments(args: Any) -> None:
    """Act on :func:`add_node_arguments`' flags (before any rank starts)."""
    if args.nnodes > 1 or args.master is not None:
        set_nodes(args.nnodes, args.node_rank, args.master)


def is_first_rank() -> bool:
    """True in the process that holds (or, with the local launcher, starts) global rank 0:
    only it writes a run's files."""
    launcher = external_launcher()
    if launcher == "torchrun":
        return int(os.environ["RANK"]) == 0
    if launcher == "srun":
        return int(os.environ["SLURM_PROCID"]) == 0
    spec = nodes()
    return spec is None or spec.node_rank == 0


def external_launcher() -> str | None:
    """'torchrun' or 'srun' when this process is one rank started by them, else None."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return "torchrun"
    if "SLURM_PROCID" in os.environ and "SLURM_NTASKS" in os.environ and "SLURM_STEP_ID" in os.environ:
        return "srun"
    return None


def slurm_master() -> tuple[str, int]:
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", "localhost")
    try:
        hosts = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10, check=True
        ).stdout.split()
        host = hosts[0] if hosts else "localhost"
    except (OSError, subprocess.SubprocessError):
        host = nodelist.split(",")[0].split("[")[0]
    port = int(os.environ.get("MASTER_PORT", 20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))
    return host, port


def slurm_task_threads() -> int | None:
    """Threads for a rank started by srun: the CPUs SLURM gave its task (``SLURM_CPUS_PER_TASK``,
    set by ``--cpus-per-task``, the cluster profile's ``cpus_per_task``); None when unset (torch's
    default then, every CPU the task may run on)."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "").strip()
    return max(1, int(value)) if value.isdigit() else None
