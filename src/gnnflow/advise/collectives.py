"""Collectives between local ranks and the cores they get, for the calibration (:mod:`gnnflow.advise.calibrate`).

P processes are started as a run starts its ranks (:func:`gnnflow.runtime.launch.run_ranks`, one
torch thread each where the cores are shared) and measure, on gloo:

* ``allreduce_latency`` / ``allreduce_byte``: a float tensor's sum over the ranks as the gradients
  take it (:func:`gnnflow.comm.collectives.all_reduce_sum`: one all-to-all up to 8 MiB times the
  ranks, gloo's all-reduce above), fitted as latency plus seconds per byte of the tensor (4 B,
  64 KiB, 1 MiB, 4 MiB; medians of repeats);
* ``latency`` / ``byte``: :func:`gnnflow.comm.collectives.alltoallv` of int64 ids, latency plus
  seconds per byte a rank sends (8 B to 1 MiB per peer); ``latency_cpu``: the calling
  thread's CPU seconds of the smallest; ``byte_cpu``: the process's CPU seconds per byte (the
  copies and gloo's I/O thread; the rest of the wall time is waiting);
* ``broadcast_latency`` / ``broadcast_byte``: a float tensor's broadcast from rank 0 (4 B to
  4 MiB), latency plus seconds per byte of the tensor (MG-GCN's row blocks);
* ``cores``: the ranks run the same CPU-bound loop at once; each one's share is its CPU time over
  its wall time, and ``cores`` their sum: how many cores' worth P busy ranks get on this host now
  (2 for 4 ranks on a quiet 2-core host; less while other jobs run);
* ``rank_sample``, ``rank_load``, ``rank_forward_backward``: one thread's CPU seconds of fixed
  pieces of an iteration (:func:`gnnflow.advise.shapes.rank_probe`) while the P ranks run them at
  once, over the same in the calibrating process (at least 1): what a rank's process adds to every
  CPU second the microbenchmarks measure.  A rank fixes glibc's mmap threshold
  (:func:`gnnflow.runtime.processes.tune_allocator`), so its large buffers are mapped afresh, page
  faults and all, every time; and P busy ranks share the caches and memory (about 2 for the
  forward/backward here, of which the allocator is most).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from gnnflow.advise.shapes import PROBED_STAGES, rank_probe


def _fit(sizes: list[float], times: list[float]) -> tuple[float, float]:
    """(latency, seconds per byte) of ``t = latency + size x per_byte`` (least squares, >= 0)."""
    x = np.array([[1.0, s] for s in sizes])
    coef, *_ = np.linalg.lstsq(x, np.array(times), rcond=None)
    lat = max(float(coef[0]), float(min(times)) * 0.5)
    return lat, max(float(coef[1]), 0.0)


def _median_time(fn: Any, repeats: int, cpu: list[float] | None = None,
                 process: list[float] | None = None) -> float:
    """Median wall seconds of ``fn`` (a collective) after a barrier; ``cpu`` gets the median CPU
    seconds of this thread in it, ``process`` those of the process (gloo's I/O thread too)."""
    import torch.distributed as dist

    fn()
    out, used, whole = [], [], []
    for _ in range(repeats):
        dist.barrier()
        t, c, pc = time.perf_counter(), time.thread_time(), time.process_time()
        fn()
        out.append(time.perf_counter() - t)
        used.append(time.thread_time() - c)
        whole.append(time.process_time() - pc)
    if process is not None:
        process.append(float(np.median(whole)))
    if cpu is not None:
        cpu.append(float(np.median(used)))
    return float(np.median(out))


def _spin(seconds_hint: float = 0.4) -> tuple[float, float]:
    """A fixed CPU-bound loop: (wall seconds, this thread's CPU seconds)."""
    a = np.random.default_rng(0).standard_normal(200_000)
    w, c = time.perf_counter(), time.thread_time()
    for _ in range(max(1, int(seconds_hint / 0.012))):
        np.sort(a)
    return time.perf_counter() - w, time.thread_time() - c


def collectives_rank(ctx: Any, repeats: int) -> dict[str, float]:
    """One rank's part of :func:`calibrate_collectives` (module-level: the spawner imports it)."""
    import torch.distributed as dist

    from gnnflow.comm.collectives import (
        all_gather,
        all_reduce,
        all_reduce_sum,
        alltoallv,
        broadcast,
    )
    from gnnflow.runtime.devices import HOST

    p = ctx.world_size
    sizes, times = [], []
    for n in (1, 16384, 262144, 1048576):  # the gradients' sum (all_reduce_gradients' path for each size)
        t = torch.zeros(n)
        times.append(_median_time(lambda t=t: all_reduce_sum(t, HOST), repeats))
        sizes.append(4.0 * n)
    ar_lat, ar_byte = _fit(sizes, times)
    sizes, times = [], []
    for n in (1, 16384, 262144, 1048576):  # MG-GCN's row blocks: a float tensor from one rank to all
        t = torch.zeros(n)
        times.append(_median_time(lambda t=t: broadcast(t, 0, HOST), repeats))
        sizes.append(4.0 * n)
    bc_lat, bc_byte = _fit(sizes, times)
    sizes, times, cpu, whole = [], [], [], []
    for n in (1, 1024, 16384, 131072):
        parts = [torch.zeros(n, dtype=torch.int64) for _ in range(p)]
        times.append(_median_time(lambda parts=parts, n=n: alltoallv(parts, None, [n] * p, kind=HOST), repeats, cpu,
                                  whole))
        sizes.append(8.0 * n * (p - 1))
    lat, per_byte = _fit(sizes, times)
    byte_cpu = min(per_byte, _fit(sizes, whole)[1])  # the process's CPU per byte (copies, gloo's I/O)
    dist.barrier()
    spin_wall, spin_cpu = _spin()
    shares = [torch.zeros(1) for _ in range(p)]
    all_gather(shares, torch.tensor([spin_cpu / max(spin_wall, 1e-9)]), HOST)
    dist.barrier()
    busy = torch.tensor([rank_probe()[k] for k in PROBED_STAGES])  # every rank at once, as a rank
    all_reduce(busy, HOST)
    figures = torch.tensor([ar_lat, ar_byte, lat, per_byte, cpu[0], bc_lat, bc_byte, byte_cpu])
    all_reduce(figures, HOST, op=dist.ReduceOp.MAX)
    return {"allreduce_latency": float(figures[0]), "allreduce_byte": float(figures[1]),
            "latency": float(figures[2]), "byte": float(figures[3]), "latency_cpu": float(figures[4]),
            "broadcast_latency": float(figures[5]), "broadcast_byte": float(figures[6]), "byte_cpu": float(figures[7]),
            "cores": float(sum(float(s) for s in shares)), **{f"busy_{k}": float(v) / p for k, v in zip(PROBED_STAGES, busy, strict=True)}}


def calibrate_collectives(workers: int, repeats: int = 15, timeout_s: float = 300.0) -> dict[str, float]:
    """The figures of ``workers`` local ranks (see the module docstring); one rank: the host
    share of one busy process."""
    if workers <= 1:
        return {"allreduce_latency": 0.0, "allreduce_byte": 0.0, "latency": 0.0, "byte": 0.0, "latency_cpu": 0.0,
                "cores": host_cores(1)}
    from gnnflow.runtime.launch import run_ranks

    out = run_ranks(collectives_rank, workers, repeats, timeout_s=timeout_s, threads_per_rank=rank_threads(workers))[0]
    # clamped in this process, as host_cores (4 ranks on this 2-core host summed to 2.93 in run P's
    # calibration, and every 4-rank strategy factor fitted under it came out 1.3-1.7 times run O's)
    out["cores"] = busy_cores(workers, out["cores"])
    alone = rank_probe()  # this process: the allocator and the host as the calibration's other figures
    for k in PROBED_STAGES:
        out[f"rank_{k}"] = float(max(1.0, out.pop(f"busy_{k}") / max(alone[k], 1e-9)))
    return out


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where unknown)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def rank_threads(workers: int) -> int:
    """Torch threads per rank: the usable cores shared out, at least one."""
    return max(1, usable_cores() // max(1, workers))


SPIN = (
    "import time, numpy as np\n"
    "a = np.random.default_rng(0).standard_normal(200000)\n"
    "w, c = time.perf_counter(), time.process_time()\n"
    "for _ in range({n}): np.sort(a)\n"
    "print(time.perf_counter() - w, time.process_time() - c)\n"
)


def host_cores(workers: int, loops: int = 40) -> float:
    """How many cores' worth of CPU ``workers`` busy processes get on this host now: they run the
    same loop at once (fresh interpreters, no torch) and their CPU / wall shares are added up, at
    most the processes and the usable cores (processes that start or end apart each get more of a
    core than they would together: 4 on this 2-core host added up to 2.0-3.4)."""
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(n=loops)], stdout=subprocess.PIPE, text=True)
             for _ in range(max(1, workers))]
    total = 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        wall, cpu = (float(x) for x in out.split())
        total += cpu / max(wall, 1e-9)
    return busy_cores(workers, total)


def busy_cores(workers: int, total: float) -> float:
    """``workers`` busy processes' summed CPU / wall shares as the cores they get: at most the
    processes and the usable cores (processes that start or end apart each get more of a core
    than they would together)."""
    return float(min(max(1, workers), usable_cores(), total))
