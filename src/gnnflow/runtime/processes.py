"""Process lifetime: nothing a run starts or creates outlives it.

* :func:`die_with_parent` — a rank (or a rank's sampler process) asks Linux to
  kill it when its parent exits (``PR_SET_PDEATHSIG``), so a launcher killed
  with SIGKILL leaves no orphaned ranks training on.
* :func:`tune_allocator` — large buffers (a batch's widest activations; 32 MiB
  and more) are given back to the system when freed, so a rank's resident memory
  follows what it holds rather than what glibc's arenas kept (measured: 2.2 GB ->
  1.7 GB peak per rank for data-parallel training on a products-sized graph, with
  the threshold then at 256 KiB).
* :func:`huge_page_tunables` — ... and those fresh mappings are backed by
  transparent huge pages (glibc's ``glibc.malloc.hugetlb=1`` tunable, set in
  the environment of every process gnnflow starts, read by glibc at process
  start): a fault per 2 MiB instead of per 4 KiB.  On the products-shaped
  benchmark this took a data-parallel epoch from 96.9 s to 68.0 s (4 ranks on 2
  cores; docs/runtime.md).  ``GNNFLOW_HUGEPAGES=0`` leaves the environment alone.
* :func:`run_shm_dir` — shared-memory files (``/dev/shm``) are made under a
  name that starts with the run's tag (``GNNFLOW_RUN_TAG``, set by the launcher
  before it starts the ranks), so :func:`remove_run_shm` can remove every one of
  them when the run ends, however it ends: a rank killed by a signal cannot
  clean up after itself, its launcher can.
* :func:`sweep_stale_shm` — and a launcher killed outright (SIGKILL) cannot either: the tag
  holds the launcher's pid, so the next run on the host removes this user's entries of runs
  whose launcher is no longer alive, and says what it removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator, Mapping

from gnnflow.errors import ConfigError

TAG_ENV = "GNNFLOW_RUN_TAG"
SHM_ROOT = "/dev/shm"


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Have Linux send ``sig`` to this process when its parent exits; exit now if it already has."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(sig))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def set_process_name(name: str) -> None:
    """Name this process ``name`` (its first 15 bytes) in ``ps``, ``top`` and ``/proc/PID/comm``."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


#: allocations from this size on are served by mmap and unmapped when freed (glibc M_MMAP_THRESHOLD)
MMAP_THRESHOLD = 32 << 20
MMAP_THRESHOLD_ENV = "GNNFLOW_MMAP_THRESHOLD"
#: the trim threshold :func:`tune_allocator` sets, in mmap thresholds (glibc M_TRIM_THRESHOLD)
TRIM_FACTOR = 2


def mmap_threshold() -> int | None:
    """The threshold :func:`tune_allocator` sets: ``GNNFLOW_MMAP_THRESHOLD`` (bytes, ``K``/``M``
    suffixes, at most glibc's 32 MiB; ``glibc``: none, glibc's own dynamic threshold), by default
    :data:`MMAP_THRESHOLD`."""
    text = os.environ.get(MMAP_THRESHOLD_ENV, "").strip()
    if not text:
        return MMAP_THRESHOLD
    if text.lower() == "glibc":
        return None
    scale = {"k": 1 << 10, "m": 1 << 20}.get(text[-1].lower(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        value = -1
    if not 0 < value <= 32 << 20:
        raise ConfigError(f"{MMAP_THRESHOLD_ENV}={text!r}: give bytes up to 32M (e.g. 256K, 4M) or 'glibc'")
    return value


def tune_allocator() -> None:
    """Serve allocations of :func:`mmap_threshold` bytes and more with mmap in this process.

    glibc raises its mmap threshold dynamically (up to 32 MiB) after freeing mapped
    blocks; from then on multi-MiB arrays come from the heap and per-thread arenas, where
    a pipeline's sampling, loading and training threads fragment them and freed batches
    stay resident.  A fixed threshold (``mallopt(M_MMAP_THRESHOLD)``, which also stops
    the dynamic adjustment) returns every large buffer when it is freed, at the cost of
    fresh page faults when the next one is made.  At 256 KiB a data-parallel rank on the
    default graph spent 0.23-0.25 s of forward/backward CPU an epoch, at 4 MiB 0.15 s (glibc's
    own: 0.14 s), and a 300k-vertex rank peaked 3 % higher (docs/runtime.md).  Since the
    batches' input rows and exchange buffers are pooled (:mod:`gnnflow.runtime.buffers`), the
    default is 32 MiB (:data:`MMAP_THRESHOLD`, glibc's largest): only the widest activations of
    a products-shaped batch (tens to a hundred MiB) are still mapped afresh.

    A fixed threshold leaves glibc's trim threshold at its 128 KiB, so a heap or arena gives
    back its free top whenever that much is free, and the next chunk of a few hundred KiB to a
    few MiB (a scratch buffer of a chunked loop: a fetch's local rows, the fused ReLU-dropout)
    grows it again onto fresh pages, zeroed by the kernel.  The trim threshold is set to
    :data:`TRIM_FACTOR` times the mmap threshold (``MALLOC_TRIM_THRESHOLD_`` in the environment
    takes precedence): each arena keeps at most that much free memory.  Products-shaped
    data-parallel, 4 ranks, with the input-row pool (docs/runtime.md): 4 MiB and glibc's trim
    threshold 50.4-52.2 s an epoch; 4 MiB, trim 8 MiB 44.4-50.5 s; 32 MiB, trim 64 MiB 41.6 s.
    """
    threshold = mmap_threshold()
    if threshold is None:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, threshold)  # M_MMAP_THRESHOLD
        if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
            libc.mallopt(-1, TRIM_FACTOR * threshold)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


HUGEPAGES_ENV = "GNNFLOW_HUGEPAGES"  # "0": do not add the tunable
TUNABLES_ENV = "GLIBC_TUNABLES"
HUGEPAGES_TUNABLE = "glibc.malloc.hugetlb=1"


def huge_page_tunables(env: Mapping[str, str]) -> str | None:
    """The ``GLIBC_TUNABLES`` value that adds glibc's transparent-huge-page tunable to ``env``'s,
    or None when ``env`` has one already (any ``glibc.malloc.hugetlb``) or ``GNNFLOW_HUGEPAGES=0``."""
    current = env.get(TUNABLES_ENV, "")
    if env.get(HUGEPAGES_ENV, "1") == "0" or "glibc.malloc.hugetlb=" in current:
        return None
    return ":".join(filter(None, [current, HUGEPAGES_TUNABLE]))


@contextlib.contextmanager
def environ_set(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block (nothing when ``value`` is None), then the
    variable as it was: what processes started inside inherit, and nothing else sees."""
    if value is None:
        yield
        return
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def new_run_tag() -> str:
    """A fresh tag for a run's shared-memory names (set it as ``GNNFLOW_RUN_TAG``)."""
    return f"gnnflow-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def run_tag() -> str:
    """This run's tag: the launcher's (inherited), or one made for this process (and its children)."""
    tag = os.environ.get(TAG_ENV)
    if not tag:
        tag = os.environ[TAG_ENV] = new_run_tag()
    return tag


def run_shm_dir(kind: str) -> str:
    """A new directory for shared-memory files of ``kind`` in ``/dev/shm`` (a temporary
    directory where there is none), named after the run's tag."""
    base = SHM_ROOT if os.path.isdir(SHM_ROOT) else None
    return tempfile.mkdtemp(prefix=f"{run_tag()}-{kind}-", dir=base)


def remove_run_shm(tag: str) -> list[str]:
    """Remove every ``/dev/shm`` entry of the run tagged ``tag``; return what was removed."""
    if not tag.startswith("gnnflow-"):
        raise ValueError(f"not a gnnflow run tag: {tag!r}")
    removed = []
    for path in glob.glob(os.path.join(SHM_ROOT, glob.escape(tag) + "-*")):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                continue
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_stale_shm(root: str = SHM_ROOT) -> list[str]:
    """Remove this user's entries of gnnflow runs in ``root`` (``/dev/shm``) whose launcher (the
    pid in the run's tag, :func:`new_run_tag`) is no longer alive; return what was removed."""
    removed: list[str] = []
    for path in glob.glob(os.path.join(root, "gnnflow-*-*")):
        parts = os.path.basename(path).split("-")
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        try:
            if os.lstat(path).st_uid != os.getuid() or _alive(int(parts[1])):
                continue
        except OSError:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
        removed.append(path)
    return removed
