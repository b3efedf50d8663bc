"""Atomic outputs, provenance, progress bars: what every stage writes with."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import mmap
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
log = logging.getLogger("gnnflow")
LOG_LEVEL_ENV = "GNNFLOW_LOG_LEVEL"


def configure_logging(level: int | None = None) -> None:
    """Log lines ``HH:MM:SS name LEVEL message`` on stderr at ``level`` (default: the level the
    launching process chose, passed to its ranks in ``GNNFLOW_LOG_LEVEL``, else INFO)."""
    if level is None:
        level = int(os.environ.get(LOG_LEVEL_ENV, logging.INFO))
    os.environ[LOG_LEVEL_ENV] = str(level)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")


@contextlib.contextmanager
def temp_dir_beside(out: str | os.PathLike[str], tag: str) -> Iterator[Path]:
    """A new directory ``.<name>.<tag>-*`` beside ``out`` (the same file system, so its files
    move by rename); on an exception it is removed, a full disk named (:func:`raise_if_disk_full`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{tag}-", dir=out.parent))
    try:
        yield tmp
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise_if_disk_full(exc, out)
        raise


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str], overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to ``out``; rename it to ``out`` on success.

    On any exception the temporary directory is removed and ``out`` is left as it
    was, so a failed stage never leaves partial output behind.
    """
    out = Path(out)
    with temp_dir_beside(out, "tmp") as tmp:
        yield tmp
    if out.exists():
        if not overwrite:
            shutil.rmtree(tmp, ignore_errors=True)
            from gnnflow.errors import GnnflowError

            raise GnnflowError(f"{out} already exists; remove it or pass --overwrite")
        shutil.rmtree(out)
    os.replace(tmp, out)


@contextlib.contextmanager
def temp_file_beside(out: str | os.PathLike[str], tag: str, suffix: str = "",
                     mode: int | None = None) -> Iterator[Path]:
    """A new file ``.<name>.<tag>-*<suffix>`` beside ``out`` (``mode``: its permissions, less the
    umask; mkstemp's 0600 otherwise); on an exception it is removed, a full disk named."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.{tag}-", suffix=suffix, dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    if mode is not None:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, mode & ~umask)
    try:
        yield tmp
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        raise_if_disk_full(exc, out)
        raise


@contextlib.contextmanager
def atomic_file(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary file path next to ``out``; rename it to ``out`` on success."""
    with temp_file_beside(out, "tmp") as tmp:
        yield tmp
    os.replace(tmp, out)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full: ENOSPC (or EDQUOT, a quota), or numpy's short write
    (``N requested and M written``, an OSError without an errno)."""
    return isinstance(exc, OSError) and (exc.errno in (errno.ENOSPC, errno.EDQUOT)
                                         or " requested and " in str(exc))


def raise_if_disk_full(exc: BaseException, out: Path) -> None:
    """Turn a full disk under ``out`` into one line naming the output (nothing was left behind)."""
    if disk_full(exc):
        from gnnflow.errors import StoreError

        detail = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
        raise StoreError(f"{out}: cannot be written: the disk is full ({detail}); nothing was left behind; "
                         f"free space on {out.parent} or write elsewhere") from None


def proc_memory(field: str = "VmHWM", pid: int | str = "self") -> int:
    """A memory field of ``/proc/<pid>/status`` in bytes (``VmHWM``: the peak resident set;
    ``VmRSS``: the resident set now).  0 where /proc is missing (not Linux) or the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def save_tensors(obj: Any, out: str | os.PathLike[str]) -> None:
    """``torch.save(obj)`` to ``out`` atomically.  Serialised in memory first, then written
    with plain file writes, so a full or read-only disk raises ``OSError`` naming the file
    (torch's zip writer reports it as an unrelated ``RuntimeError``)."""
    import io as _io

    import torch

    buf = _io.BytesIO()
    torch.save(obj, buf)
    with atomic_file(out) as tmp:
        tmp.write_bytes(buf.getbuffer())


def provenance(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What produced an output: command line, versions, host, time."""
    import numpy

    info: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
    }
    try:
        from gnnflow import __version__

        info["gnnflow"] = __version__
    except Exception:  # pragma: no cover
        pass
    if "torch" in sys.modules:
        info["torch"] = sys.modules["torch"].__version__
    if extra:
        info.update(extra)
    return info


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def progress(iterable: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
    """A tqdm bar on a terminal; plain log lines (about every 10%) otherwise."""
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    if total is not None and total < 2:
        return iterable  # nothing worth reporting
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, leave=False)
    return _plain_progress(iterable, desc, total)


def ticking(iterable: Iterable[T], desc: str, total: int, every_s: float | None = None) -> Iterator[T]:
    """``iterable`` with a log line at most every ``every_s`` seconds (``GNNFLOW_PROGRESS_S``,
    default 30): ``desc: i/total, t s, about r s left``.  Quiet when the loop is shorter than
    that, so short runs print nothing extra; for the long loops of a rank (an epoch's batches,
    a layer of evaluation) on a large graph, which would otherwise print nothing for minutes."""
    if every_s is None:
        every_s = float(os.environ.get("GNNFLOW_PROGRESS_S", "30"))
    t0 = last = time.perf_counter()
    for i, item in enumerate(iterable, 1):
        yield item
        now = time.perf_counter()
        if now - last >= every_s and i < total:
            last = now
            log.info("%s: %d/%d, %.0f s, about %.0f s left", desc, i, total, now - t0, (now - t0) * (total - i) / i)


def _plain_progress(iterable: Iterable[T], desc: str, total: int | None) -> Iterator[T]:
    step = max(1, (total or 0) // 10) if total else None
    t0 = last = time.perf_counter()
    i = 0
    for i, item in enumerate(iterable, 1):
        yield item
        if step and i % step == 0:
            log.info("%s: %d/%d (%.1fs)", desc, i, total, time.perf_counter() - t0)
        elif not step and time.perf_counter() - last >= 10:  # unknown length: every 10 s
            last = time.perf_counter()
            log.info("%s: %d so far (%.1fs)", desc, i, last - t0)
    log.info("%s: done, %d items in %.1fs", desc, i, time.perf_counter() - t0)


def release_pages(*arrays: Any) -> None:
    """Drop the resident pages of memory-mapped arrays (they stay in the page cache).

    Streaming a large store part by part would otherwise keep every touched page
    of it in this process's resident set.
    """
    for arr in arrays:
        m = getattr(arr, "_mmap", None)
        if m is None:
            base = getattr(arr, "base", None)  # a view of a memmap
            m = getattr(base, "_mmap", None) if base is not None else None
        if isinstance(m, mmap.mmap) and hasattr(m, "madvise"):
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):  # pragma: no cover - platform without it
                pass


def row_chunks(arr: Any, chunk_bytes: int = 64 << 20, desc: str | None = None) -> Iterator[tuple[int, Any]]:
    """``(start, arr[start:stop])`` blocks of about ``chunk_bytes``, dropping a memory
    map's pages after each block, so a scan of a huge array holds one block resident.
    With ``desc`` a progress bar counts the blocks."""
    n = int(arr.shape[0])
    row_bytes = max(1, int(arr.dtype.itemsize) * math.prod(int(d) for d in arr.shape[1:]))
    step = max(1, chunk_bytes // row_bytes)
    starts = range(0, n, step)
    for start in (progress(starts, desc=desc) if desc else starts):
        yield start, arr[start:start + step]
        release_pages(arr)


def as_idx(arr: np.ndarray, idx: type, chunk: int = 1 << 22) -> np.ndarray:
    """``arr`` as a contiguous ``idx`` array; a memory map of another dtype is converted
    ``chunk`` entries at a time and its pages dropped as it goes (RSS: the copy only)."""
    if isinstance(arr, np.ndarray) and arr.dtype == idx and arr.flags.c_contiguous:
        return arr
    out = np.empty(arr.shape[0], dtype=idx)
    for s in range(0, arr.shape[0], chunk):
        out[s:s + chunk] = arr[s:s + chunk]
        release_pages(arr)
    return out


def reserve_space(fd: int, nbytes: int) -> None:
    """Allocate the first ``nbytes`` of the open file ``fd`` now (``posix_fallocate``): a full disk
    is then an ``OSError`` (ENOSPC) here, not a SIGBUS that kills the process when a write through
    a memory map of the file finds no free block."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a filesystem without fallocate: as before
            return
        raise
