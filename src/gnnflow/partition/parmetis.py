"""Distributed partitioning with ``ParMETIS_V3_PartKway`` under MPI (DistDGLv2 §4.1.1).

For graphs too large for one machine, every MPI rank reads only its slice of the
graph store: the vertices ``vtxdist[r]:vtxdist[r+1]`` (contiguous ranges) and
their rows of the CSR, which is exactly ParMETIS's distributed CSR.  The
library is called through ctypes:

* a real ``libparmetis`` is used when one is found (multi-constraint works);
* otherwise PT-Scotch's ParMETIS-compatible ``libptscotchparmetisv3`` (Debian
  ``libscotchparmetis-dev``).  It **ignores multiple constraints** (only vertex
  counts are balanced) and returns no meaningful error code, so the part array
  is filled with -1 before the call and checked after.

``SCOTCH_PTHREAD_NUMBER=1`` keeps PT-Scotch single-threaded per rank.  The
integer width (``idx_t``/``SCOTCH_Num``) is configurable (``--idx-bits``); by
default the 32-bit Debian build is used.

:func:`parmetis_partition` (the ``parmetis`` method) launches
``mpirun -np K --allow-run-as-root --oversubscribe python -m gnnflow.partition.parmetis``
(or ``srun -n K``), rank 0 gathers the parts and writes them to a file, and the
caller writes the partition book.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.errors import ConfigError, DistributedError, GnnflowError

LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
# real ParMETIS first, then PT-Scotch's compatibility layer, per integer width
CANDIDATES = {
    32: ["libparmetis.so.4", str(LIBDIR / "parmetis-int32" / "libparmetis.so"),
         str(LIBDIR / "libptscotchparmetisv3.so")],
    64: [str(LIBDIR / "parmetis-int64" / "libparmetis.so"),
         str(LIBDIR / "scotch-int64" / "libptscotchparmetisv3.so")],
}
PT_SCOTCH_NOTE = ("PT-Scotch's ParMETIS layer balances vertex counts only (multi-constraint is ignored); "
                  "install a real libparmetis for multi-constraint distributed partitioning")


def find_library(idx_bits: int = 32, library: str | None = None) -> tuple[str, bool]:
    """(path that loads, is_pt_scotch).  Raises GnnflowError naming what to install."""
    if idx_bits not in (32, 64):
        raise ConfigError(f"--idx-bits must be 32 or 64, got {idx_bits}")
    names = [library] if library else CANDIDATES[idx_bits]
    errors = []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
            continue
        if not hasattr(lib, "ParMETIS_V3_PartKway"):
            errors.append(f"{name}: has no ParMETIS_V3_PartKway")
            continue
        return name, hasattr(lib, "SCOTCH_ParMETIS_V3_PartKway")
    raise GnnflowError(
        "no ParMETIS library found (" + "; ".join(errors) + "); install libparmetis-dev or Debian's "
        "libscotchparmetis-dev (apt-get install libscotchparmetis-dev), or pass --library PATH"
    )


def _dlopen(name: str) -> ctypes.CDLL:
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


def library_env(libpath: str) -> dict[str, str]:
    """Environment for the ranks: the library's own directory first on LD_LIBRARY_PATH.

    Debian's int64 PT-Scotch build links ``libptscotch-7.0.so`` by soname, which
    would otherwise resolve to the int32 build and crash.
    """
    env = dict(os.environ, SCOTCH_PTHREAD_NUMBER="1")
    libdir = os.path.dirname(os.path.realpath(libpath)) if os.sep in libpath else ""
    if libdir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    return env


def check_mpi(launcher: str = "mpirun") -> str:
    """Path of the launcher; a clear error if it or mpi4py is missing."""
    exe = shutil.which(launcher)
    if exe is None:
        hint = "install Open MPI (apt-get install openmpi-bin)" if launcher == "mpirun" else "run inside a Slurm allocation"
        raise GnnflowError(f"`{launcher}` not found on PATH; {hint}, or pick another --launcher")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise GnnflowError("mpi4py is not installed; pip install 'gnnflow[mpi]' (or mpi4py)") from None
    return exe


def parmetis_partition(store: Any, num_parts: int, seed: int = 0, *, num_ranks: int = 2,
                       idx_bits: int = 32, library: str | None = None, launcher: str = "mpirun",
                       constraints: Any = None, imbalance: float = 1.05, timeout_s: float = 1800.0) -> Any:
    """The ``parmetis`` method: run :func:`rank_main` on ``num_ranks`` MPI ranks and gather parts."""
    from gnnflow.partition.assignment import Assignment
    from gnnflow.partition.constraints import known_constraints, parse_constraints

    names = parse_constraints(constraints or ["vertices"])

    for c in names:
        if c not in known_constraints(store):
            raise ConfigError(f"unknown balance constraint {c!r}; choose among {', '.join(known_constraints(store))}")
    if int(num_ranks) < 1:
        raise ConfigError(f"--np must be >= 1, got {num_ranks}")
    if store.meta.directed:
        raise ConfigError(f"{store.path}: parmetis needs an undirected (symmetric) store; each rank reads only "
                          "its rows, so it cannot symmetrize a directed graph")
    exe = check_mpi(launcher)
    libpath, pt_scotch = find_library(int(idx_bits), library)
    note = None
    if pt_scotch:
        note = PT_SCOTCH_NOTE + (f" (asked for {names})" if len(names) > 1 or names != ["vertices"] else "")
        print(f"gnnflow partition: note: {note}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gnnflow-parmetis-") as tmp:
        out = Path(tmp) / "node_part.npy"
        info = Path(tmp) / "info.json"
        cmd = [exe] + (["-np", str(num_ranks), "--allow-run-as-root", "--oversubscribe"] if launcher == "mpirun"
                       else ["-n", str(num_ranks)])
        cmd += [sys.executable, "-m", "gnnflow.partition.parmetis", "--graph", str(store.path),
                "--parts", str(num_parts), "--out", str(out), "--info", str(info), "--seed", str(seed),
                "--idx-bits", str(idx_bits), "--library", libpath, "--constraints", ",".join(names),
                "--imbalance", str(imbalance)]
        env = library_env(libpath)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise DistributedError(f"parmetis: `{' '.join(cmd[:3])} ...` did not finish in {timeout_s:.0f}s") from None
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise DistributedError(f"parmetis ranks failed (exit {proc.returncode}): " + " | ".join(tail))
        node_part = np.load(out)
        meta = json.loads(info.read_text())
    meta.update(library=libpath, pt_scotch=pt_scotch, num_ranks=int(num_ranks), launcher=launcher,
                idx_bits=int(idx_bits), constraints=names if not pt_scotch else ["vertices"])
    if note:
        meta["note"] = note
    return Assignment(node_part, meta=meta, constraints=["vertices", "train", "edges"])


# ---------------------------------------------------------------- rank side

def vertex_ranges(num_nodes: int, size: int) -> np.ndarray:
    """ParMETIS ``vtxdist``: rank r owns vertices ``vtxdist[r]:vtxdist[r+1]``."""
    return (np.arange(size + 1, dtype=np.int64) * num_nodes) // size


def rank_main(argv: list[str] | None = None) -> int:
    """One MPI rank: read its rows of the store, call ParMETIS_V3_PartKway, gather on rank 0."""
    p = argparse.ArgumentParser(prog="python -m gnnflow.partition.parmetis")
    p.add_argument("--graph", required=True)
    p.add_argument("--parts", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--info", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--idx-bits", type=int, default=32)
    p.add_argument("--library", required=True)
    p.add_argument("--constraints", default="vertices")
    p.add_argument("--imbalance", type=float, default=1.05)
    args = p.parse_args(argv)
    os.environ.setdefault("SCOTCH_PTHREAD_NUMBER", "1")

    from mpi4py import MPI

    from gnnflow.data.store import open_store
    from gnnflow.partition.constraints import constraint_weights

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    idx = np.int64 if args.idx_bits == 64 else np.int32
    c_idx = ctypes.c_int64 if args.idx_bits == 64 else ctypes.c_int32
    lib = _dlopen(args.library)
    pt_scotch = hasattr(lib, "SCOTCH_ParMETIS_V3_PartKway")

    store = open_store(args.graph, validate=False)  # memory-mapped: only our rows are touched
    n = store.num_nodes
    vtxdist = vertex_ranges(n, size)
    r0, r1 = int(vtxdist[rank]), int(vtxdist[rank + 1])
    e0, e1 = int(store.indptr[r0]), int(store.indptr[r1])
    xadj = np.ascontiguousarray(np.asarray(store.indptr[r0:r1 + 1]) - e0, dtype=idx)
    adjncy = np.ascontiguousarray(store.indices[e0:e1], dtype=idx)
    names = [c for c in args.constraints.split(",") if c]
    vwgt = None
    ncon = 1
    if not pt_scotch and names != ["vertices"]:
        w = constraint_weights(store, names)[r0:r1]
        vwgt = np.ascontiguousarray(w.reshape(-1), dtype=idx)
        ncon = len(names)
    wgtflag = 2 if vwgt is not None else 0
    nparts = args.parts
    tpwgts = np.full(ncon * nparts, 1.0 / nparts, dtype=np.float32)
    ubvec = np.full(ncon, args.imbalance, dtype=np.float32)
    options = np.array([1, 0, args.seed], dtype=idx)  # use options: no debug output, seed
    part = np.full(r1 - r0, -1, dtype=idx)
    edgecut = c_idx(0)
    vtx = np.ascontiguousarray(vtxdist, dtype=idx)
    comm_handle = ctypes.c_void_p(MPI._addressof(comm))

    def ptr(a: np.ndarray | None) -> ctypes.c_void_p | None:
        return None if a is None else a.ctypes.data_as(ctypes.c_void_p)

    status = lib.ParMETIS_V3_PartKway(
        ptr(vtx), ptr(xadj), ptr(adjncy), ptr(vwgt), None, ctypes.byref(c_idx(wgtflag)),
        ctypes.byref(c_idx(0)), ctypes.byref(c_idx(ncon)), ctypes.byref(c_idx(nparts)), ptr(tpwgts),
        ptr(ubvec), ptr(options), ctypes.byref(edgecut), ptr(part), comm_handle)
    bad = int(np.count_nonzero((part < 0) | (part >= nparts)))
    all_bad = comm.allreduce(bad, op=MPI.SUM)
    counts = np.array(comm.allgather(part.shape[0]))
    full = np.empty(n, dtype=idx) if rank == 0 else None
    comm.Gatherv(part, (full, counts) if rank == 0 else None, root=0)
    if rank == 0:
        if all_bad:
            print(f"parmetis: {all_bad} vertices were left unassigned or out of range by {args.library} "
                  f"(status {status}); check --idx-bits matches the library", file=sys.stderr)
            comm.Abort(3)
        np.save(args.out, full.astype(np.int32))
        Path(args.info).write_text(json.dumps({"status": int(status), "edgecut_reported": int(edgecut.value),
                                               "vtxdist": vtxdist.tolist()}))
    comm.Barrier()
    return 0


if __name__ == "__main__":
    sys.exit(rank_main())
