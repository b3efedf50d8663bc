"""Where a run listens: one address per run, never all interfaces.

Every listening socket gnnflow opens (the launcher's rendezvous store, the
sampler processes' store, gloo's connection listeners) is bound to the address
of the interface chosen for the run:

* a single-host run (gnnflow's own launcher) uses loopback, ``127.0.0.1``;
* under torchrun or srun a rank uses the local address through which it reaches
  the master (``MASTER_ADDR``), found by asking the kernel for the route (a
  connected UDP socket sends nothing), or the interface named by
  ``GNNFLOW_IFNAME`` (e.g. ``ib0``) when set.

``torch.distributed.TCPStore`` binds its server to every interface whatever
host it is given; :func:`start_store` hands it a socket already bound to the
run's address (``master_listen_fd``).  gloo binds its listeners to the address
of ``GLOO_SOCKET_IFNAME``'s interface, which :func:`pin_gloo_interface` sets
before a process group is created.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from typing import Any

import torch.distributed as dist

from gnnflow.errors import DistributedError

LOOPBACK = "127.0.0.1"
ADDR_ENV = "GNNFLOW_ADDR"  # this rank's address for the run, set by the launcher


def run_address() -> str:
    """The address this process listens on for the run (its launcher's choice; loopback by default)."""
    return os.environ.get(ADDR_ENV) or LOOPBACK


def set_run_address(address: str) -> None:
    """Choose ``address`` for this process and the processes it starts: gloo and every store
    listen there."""
    os.environ[ADDR_ENV] = address
    pin_gloo_interface(address)


def interfaces() -> dict[str, list[str]]:
    """Interface name -> its IPv4 addresses."""
    import psutil

    return {name: [a.address for a in addrs if a.family == socket.AF_INET]
            for name, addrs in psutil.net_if_addrs().items()}


def interface_of(address: str) -> str:
    """The name of the local interface that holds ``address`` (``lo`` for loopback)."""
    ip = ipaddress.ip_address(address)
    for name, addrs in interfaces().items():
        if any(ipaddress.ip_address(a) == ip for a in addrs):
            return name
    if ip.is_loopback:
        return "lo"
    raise DistributedError(f"no local interface has address {address}; set GNNFLOW_IFNAME to the "
                           "interface the ranks should talk over")


def address_of_interface(name: str) -> str:
    addrs = interfaces().get(name)
    if not addrs:
        raise DistributedError(f"GNNFLOW_IFNAME={name}: no such interface with an IPv4 address "
                               f"(have: {', '.join(sorted(interfaces()))})")
    return addrs[0]


def resolve(host: str) -> str:
    """``host`` as an IPv4 address."""
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise DistributedError(f"cannot resolve the master host {host!r} ({exc})") from None


def local_address_towards(master: str) -> str:
    """This host's address on the route to ``master`` (loopback when the master is this host)."""
    if os.environ.get("GNNFLOW_IFNAME"):
        return address_of_interface(os.environ["GNNFLOW_IFNAME"])
    ip = resolve(master)
    if ipaddress.ip_address(ip).is_loopback:
        return LOOPBACK
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((ip, 9))  # UDP connect: the kernel picks the route, nothing is sent
            return str(s.getsockname()[0])
        except OSError as exc:
            raise DistributedError(f"no route to the master {master} ({ip}): {exc}") from None


def pin_gloo_interface(address: str) -> None:
    """Make gloo (created after this call, in this process and its children) listen on ``address``'s
    interface only."""
    os.environ["GLOO_SOCKET_IFNAME"] = interface_of(address)


def listen_socket(address: str, port: int = 0) -> socket.socket:
    """A TCP socket listening on ``address:port`` (port 0: the OS picks one)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((address, port))
    except OSError as exc:
        s.close()
        raise DistributedError(f"cannot listen on {address}:{port} ({exc}); another run may hold the port "
                               "(set MASTER_PORT)") from None
    s.listen(1024)
    s.set_inheritable(False)
    return s


class BoundStore:
    """A ``TCPStore`` server listening on one address; ``.store`` is the store, ``.port`` its port.

    The store takes the listening socket over (it closes it when the store goes), so
    :meth:`close` only drops the store.
    """

    def __init__(self, address: str, world_size: int, timeout_s: float, port: int = 0) -> None:
        self.address = address
        sock = listen_socket(address, port)
        self.port = int(sock.getsockname()[1])
        try:
            self.store = dist.TCPStore(address, self.port, world_size, is_master=True, wait_for_workers=False,
                                       timeout=datetime.timedelta(seconds=timeout_s),
                                       master_listen_fd=sock.fileno())
        except BaseException:
            sock.close()
            raise
        sock.detach()  # the store owns the descriptor now

    def close(self) -> None:
        self.store = None  # type: ignore[assignment]


def start_store(address: str, world_size: int, timeout_s: float, port: int = 0) -> BoundStore:
    """Start a rendezvous store listening on ``address`` only (see :class:`BoundStore`)."""
    return BoundStore(address, world_size, timeout_s, port)


def connect_store(address: str, port: int, world_size: int, timeout_s: float) -> Any:
    """A client of the store at ``address:port``."""
    return dist.TCPStore(address, port, world_size, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s))
