"""Removes what a DistDGL peer run leaves in shared memory when one of its ranks dies.

DGL's servers name their shared-memory segments after the graph; a server
killed with its rank (``PR_SET_PDEATHSIG``) cannot unlink them, and the next
run of the same name would map stale segments.  Every rank of
``--strategy distdgl`` starts this process (a small interpreter: no torch)
for its machine (``<run>m<rank>``: its server's and its own segments) with a
pipe on stdin.  Once the pipe closes, because the rank finished or died, it
waits for the server to end, then removes every ``/dev/shm`` entry whose name
contains the token (not followed by a digit: machine 1 is not machine 10) and
the rank's temporary directory.

    python -m gnnflow.strategies.distdgl_janitor TOKEN RUN_DIR SERVER_PID...
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

SHM = Path("/dev/shm")


def shm_entries(token: str, shm: Path = SHM) -> list[Path]:
    """The shared-memory files of ``token`` (a run, or one machine of it: ``<run>m<r>``; every
    segment name of the run contains its machine's token)."""
    pattern = re.compile(re.escape(token) + r"(?!\d)")
    try:
        return [p for p in shm.iterdir() if pattern.search(p.name)]
    except FileNotFoundError:  # pragma: no cover - no /dev/shm
        return []


def start_janitor(run: str, run_dir: Path, server_pids: list[int]) -> subprocess.Popen:
    """Start the janitor of ``run``; close its stdin (``communicate()``) when the run is over."""
    return subprocess.Popen([sys.executable, "-m", "gnnflow.strategies.distdgl_janitor", run, str(run_dir),
                             *map(str, server_pids)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            start_new_session=True)


def main(run: str, run_dir: str, *pids: str) -> None:
    import psutil

    sys.stdin.buffer.read()  # EOF: rank 0 is done with the run, or dead
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(int(pid)))
    psutil.wait_procs(procs, timeout=30)
    for path in shm_entries(run):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
