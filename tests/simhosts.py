"""Simulated hosts for multi-host tests: Linux network namespaces joined by a bridge.

``SimulatedHosts(n, root)`` makes ``n`` hosts, each a network namespace with

* its own address on a private test subnet (``198.18.<net>.<k+1>/24``, the
  benchmarking range, on a bridge in a namespace of its own: no traffic reaches
  the machine's interfaces or anything beyond them) and loopback;
* its own hostname (``simhost<k>``, a UTS namespace per process) and an
  ``/etc/hosts`` naming every simulated host (``ip netns exec`` binds
  ``/etc/netns/<ns>/hosts``);
* its own data directory ``root/host<k>``; the other hosts' directories and
  any ``hidden`` path (e.g. the directory holding the whole graph) are covered by
  an empty tmpfs in the host's mount namespace, so a process on one host cannot
  read another host's files;
* its own ``/dev/shm`` (an empty tmpfs in its mount namespace), as a real host
  has: shared memory made on one host is not there on another.

:meth:`SimulatedHosts.popen` starts a command on a host.  Everything is removed
by :meth:`SimulatedHosts.close` (namespaces, links, files under /etc/netns), also
when a test fails.  Needs root and iproute2; :func:`available` says why not.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any


def available() -> str | None:
    """None when simulated hosts can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"simulated hosts need `{tool}` (iproute2 / util-linux)"
    probe = f"gfprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class SimulatedHosts:
    def __init__(self, n: int, root: Path, hidden: list[Path] | None = None, net: int | None = None) -> None:
        self.n = n
        self.root = Path(root)
        self.tag = uuid.uuid4().hex[:6]
        self.net = net if net is not None else 100 + os.getpid() % 100
        self.switch = f"gf{self.tag}sw"
        self.namespaces = [f"gf{self.tag}h{k}" for k in range(n)]
        self.names = [f"simhost{k}" for k in range(n)]
        self.addresses = [f"198.18.{self.net}.{k + 1}" for k in range(n)]
        self.hidden = [Path(p) for p in (hidden or [])]
        self.dirs = [self.root / f"host{k}" for k in range(n)]
        self._made: list[str] = []
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for a, h in zip(self.addresses, self.names,
                                                                                    strict=True))
        for k, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            self._made.append(ns)
            a, b = f"gf{self.tag}a{k}", f"gf{self.tag}b{k}"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", ns)
            _ip("link", "set", b, "netns", self.switch)
            _ip("-n", ns, "link", "set", a, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.addresses[k]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "set", b, "master", "br0")
            _ip("-n", self.switch, "link", "set", b, "up")
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            self.dirs[k].mkdir(parents=True, exist_ok=True)

    def _covered(self, k: int) -> list[Path]:
        return [d for j, d in enumerate(self.dirs) if j != k] + self.hidden

    def command(self, k: int, cmd: list[str]) -> list[str]:
        """``cmd`` as run on host ``k`` (its namespace, hostname and view of the files)."""
        covers = " && ".join(f"mount -t tmpfs -o size=1m,mode=0755 gfhidden {shlex.quote(str(p))}"
                             for p in self._covered(k) if p.exists())
        covers = " && ".join(filter(None, [covers, "mount -t tmpfs -o size=2g,mode=1777 gfshm /dev/shm"]))
        script = f"hostname {self.names[k]}" + f" && {covers}" + ' && exec "$@"'
        return ["ip", "netns", "exec", self.namespaces[k], "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", script, "sh", *cmd]

    def popen(self, k: int, cmd: list[str], **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(self.command(k, cmd), **kw)

    def run(self, k: int, cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(k, cmd), **kw)

    def pids(self, k: int) -> list[int]:
        """Processes running in host ``k``'s network namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.namespaces[k]], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def close(self) -> None:
        for k, ns in enumerate(self.namespaces):
            if ns not in self._made:
                continue
            for pid in self.pids(k):  # nothing may outlive its host
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self._made.clear()

    def __enter__(self) -> SimulatedHosts:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
