"""Downloads that fail fast and say where to put the files instead.

Before a download starts, :func:`check_reachable` opens a TCP connection to the
host in a helper thread with a hard deadline (DNS lookups have no timeout of
their own), so an offline machine gets a :class:`DownloadError` in seconds,
not minutes.  The message names the URL and the directory where the files can
be placed by hand (``--raw-dir``).
"""

from __future__ import annotations

import os
import socket
import threading
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import urlparse

from gnnflow.errors import DownloadError
from gnnflow.io import atomic_file, log, progress

#: Total seconds allowed to find out that a host is unreachable.
REACH_TIMEOUT_S = 6.0


def default_cache_dir() -> Path:
    """Where downloads go without ``--raw-dir``: ``$GNNFLOW_DATA_DIR`` or ``~/.cache/gnnflow``."""
    return Path(os.environ.get("GNNFLOW_DATA_DIR", Path.home() / ".cache" / "gnnflow"))


def check_reachable(url: str, timeout: float = REACH_TIMEOUT_S) -> str | None:
    """Return None if ``url``'s host accepts a TCP connection within ``timeout`` s, else why not."""
    parts = urlparse(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    result: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except OSError as exc:
            result.append(f"{type(exc).__name__}: {exc}")

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        return f"no answer from {host}:{port} within {timeout:.0f} s"
    return result[0]


def download(url: str, dest: Path, *, hint: str, timeout: float = REACH_TIMEOUT_S) -> Path:
    """Download ``url`` to the file ``dest`` (atomically) with a progress bar.

    ``hint`` completes the error message: where to place the files by hand.
    """
    why = check_reachable(url, timeout)
    if why is not None:
        raise DownloadError(f"cannot download {url} ({why}); {hint}")
    log.info("downloading %s -> %s", url, dest)
    try:
        with urllib.request.urlopen(url, timeout=30) as resp, atomic_file(dest) as tmp:
            size = int(resp.headers.get("Content-Length") or 0)
            chunk = 1 << 20
            n_chunks = (size + chunk - 1) // chunk if size else None
            with open(tmp, "wb") as fh:
                blocks = iter(lambda: resp.read(chunk), b"")
                for block in progress(blocks, desc=f"download {dest.name}", total=n_chunks):
                    fh.write(block)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise DownloadError(f"download of {url} failed ({exc}); {hint}") from None
    return dest


def extract_zip(path: Path, into: Path) -> None:
    """Extract a zip archive; a damaged archive raises DownloadError naming it."""
    try:
        with zipfile.ZipFile(path) as zf:
            zf.extractall(into)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DownloadError(f"{path}: cannot extract ({exc}); delete it and download again") from None
