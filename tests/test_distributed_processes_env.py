"""gnnflow.runtime.processes: the huge-page tunable the launcher and the CLI add, and the
environment change that lasts only while processes are started."""

from __future__ import annotations

import os

import pytest

from gnnflow.runtime.processes import (
    HUGEPAGES_TUNABLE,
    TUNABLES_ENV,
    environ_set,
    huge_page_tunables,
)


def test_huge_page_tunables_are_added_once_and_can_be_turned_off():
    assert huge_page_tunables({}) == HUGEPAGES_TUNABLE
    assert huge_page_tunables({TUNABLES_ENV: "glibc.malloc.arena_max=2"}) == \
        f"glibc.malloc.arena_max=2:{HUGEPAGES_TUNABLE}"
    assert huge_page_tunables({TUNABLES_ENV: "glibc.malloc.hugetlb=0"}) is None  # the user's own setting
    assert huge_page_tunables({"GNNFLOW_HUGEPAGES": "0"}) is None


def test_environ_set_restores_the_variable_as_it_was(monkeypatch):
    monkeypatch.delenv("GNNFLOW_TEST_VAR", raising=False)
    with environ_set("GNNFLOW_TEST_VAR", "a"):
        assert os.environ["GNNFLOW_TEST_VAR"] == "a"
    assert "GNNFLOW_TEST_VAR" not in os.environ
    monkeypatch.setenv("GNNFLOW_TEST_VAR", "before")
    with environ_set("GNNFLOW_TEST_VAR", "b"):
        assert os.environ["GNNFLOW_TEST_VAR"] == "b"
    assert os.environ["GNNFLOW_TEST_VAR"] == "before"
    with environ_set("GNNFLOW_TEST_VAR", None):  # None: leave it alone
        assert os.environ["GNNFLOW_TEST_VAR"] == "before"


def test_mmap_threshold_setting(monkeypatch):
    from gnnflow.errors import ConfigError
    from gnnflow.runtime.processes import MMAP_THRESHOLD, MMAP_THRESHOLD_ENV, mmap_threshold

    monkeypatch.delenv(MMAP_THRESHOLD_ENV, raising=False)
    assert mmap_threshold() == MMAP_THRESHOLD == 32 << 20
    for text, want in (("4M", 4 << 20), ("512k", 512 << 10), ("100000", 100000), ("glibc", None)):
        monkeypatch.setenv(MMAP_THRESHOLD_ENV, text)
        assert mmap_threshold() == want, text
    for bad in ("64M", "0", "-1K", "lots"):
        monkeypatch.setenv(MMAP_THRESHOLD_ENV, bad)
        with pytest.raises(ConfigError, match=MMAP_THRESHOLD_ENV):
            mmap_threshold()


#: a child's preamble: glibc's malloc, free and mallinfo2 through ctypes, the rank's allocator set
_MALLOC = """
import ctypes
from gnnflow.runtime.processes import tune_allocator
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = Info
tune_allocator()
"""

_REUSE = _MALLOC + """
libc.free(libc.malloc(8 << 20))  # glibc's own threshold rises to 8 MiB when a mapped block is freed
before = libc.mallinfo2().hblks
block = libc.malloc(8 << 20)
print(libc.mallinfo2().hblks - before)  # mapped for this block
"""


@pytest.mark.parametrize("setting,mapped", [("8M", 1), ("glibc", 0)])
def test_a_fixed_threshold_maps_every_large_block_afresh(setting, mapped):
    """With the threshold fixed (here at 8 MiB) a freed 8 MiB block is mapped again the next
    time; with glibc's dynamic threshold the next one comes from the heap."""
    import subprocess
    import sys

    env = dict(os.environ, GNNFLOW_MMAP_THRESHOLD=setting)
    done = subprocess.run([sys.executable, "-c", _REUSE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == mapped


_TRIM = _MALLOC + """
block = libc.malloc(3 << 20)  # below the mmap threshold: from the heap's top
libc.free(block)
print(libc.mallinfo2().keepcost)  # the free memory at the heap's top, kept for the next chunk
"""


@pytest.mark.parametrize("trim,kept", [(None, True), ("131072", False)])
def test_the_heap_keeps_a_freed_scratch_buffer_for_the_next_one(trim, kept):
    """tune_allocator raises glibc's trim threshold with the mmap threshold: a freed 3 MiB chunk
    stays in the heap (glibc's 128 KiB, given in the environment here, gives it back)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_TRIM_THRESHOLD_", "GNNFLOW_MMAP_THRESHOLD")}
    if trim is not None:
        env["MALLOC_TRIM_THRESHOLD_"] = trim
    done = subprocess.run([sys.executable, "-c", _TRIM], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (int(done.stdout) >= 3 << 20) == kept, done.stdout
