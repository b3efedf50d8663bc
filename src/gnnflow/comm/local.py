"""All-to-all between ranks of one host over Unix sockets, beside gloo's loopback TCP.

Every host-side exchange of a mini-batch (the sampler's requests and replies, the feature
store's ids and rows, the gradients' sum) is an ``all_to_all_single``.  On one host gloo carries
each over loopback TCP through its I/O thread: about 0.2-0.3 ms of wall time and 0.2 ms of CPU
per exchange of a few kilobytes between 2 ranks (measured here), seven exchanges a batch, some
15 % of a data-parallel rank's CPU on the default graph.  A pair of connected Unix stream
sockets moves the same bytes in 10-14 us of wall time and 7 us of CPU, from the calling thread,
straight out of the send tensor and into the receive tensor.

A :class:`LocalMesh` is one socket per peer of a process group, made the first time the group
runs an all-to-all of host tensors (:func:`gnnflow.comm.collectives.all_to_all_single`), and
only where every rank of the group runs on this kernel in this network namespace (the same
boot id and ``/proc/self/ns/net``): ranks on other hosts, or in simulated hosts' namespaces,
keep gloo for every collective.  ``GNNFLOW_LOCAL_TRANSPORT=0`` keeps gloo everywhere.

Setup (collective on the group): every rank listens on an abstract Unix socket (no file; seen
only in its network namespace) named after its pid and a counter, the ranks learn each other's
names, pids and a random token through one gloo all-gather, every rank connects to the ranks
above it and accepts the ones below it (a connection counts only after it sends its rank and
the token), and the listener closes.  A group's exchanges run on one thread at a time (the
pipeline gives each stage its own group), in the same order on every rank, so each socket
carries one exchange at a time; every message is framed by its byte length, which the receiver
checks against the size it expects.  An exchange sends and receives with non-blocking sockets
under ``poll``, so large messages in both directions never block each other; a peer that
exits closes its sockets and the exchange fails naming it, one that stops is waited for
``GNNFLOW_DIST_TIMEOUT`` seconds, as gloo waits.  An asynchronous all-to-all completes before
it returns (the exchange is short next to what it would overlap).
"""

from __future__ import annotations

import itertools
import math
import os
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from gnnflow.errors import DistributedError

ENV = "GNNFLOW_LOCAL_TRANSPORT"
_HEADER = struct.Struct("<q")
_names = itertools.count()


def enabled() -> bool:
    """Whether same-host all-to-alls may leave gloo (``GNNFLOW_LOCAL_TRANSPORT``, default on)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def host_key() -> tuple[int, int]:
    """(boot id, network namespace inode): equal for processes that can reach each other's
    abstract Unix sockets."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = int(f.read().strip().replace("-", "")[:15], 16)
        netns = os.stat("/proc/self/ns/net").st_ino
    except (OSError, ValueError):
        return (-1, -1)
    return boot, int(netns)


def _bytes(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, as a writable flat view."""
    return memoryview(t.detach().reshape(-1).view(torch.uint8).numpy())


class LocalMesh:
    """One connected Unix socket per peer of a process group (see the module docstring)."""

    def __init__(self, rank: int, size: int, socks: dict[int, socket.socket], timeout_s: float) -> None:
        self.rank, self.size, self.socks, self.timeout_s = rank, size, socks, timeout_s
        # a group is used by one thread at a time (the pipeline gives each stage its own group), as
        # gloo needs for the same order on every rank; the lock only keeps a misuse from interleaving bytes
        self._lock = threading.Lock()

    def close(self) -> None:
        for s in self.socks.values():
            s.close()

    def all_to_all(self, recv: torch.Tensor, send: torch.Tensor, output_split_sizes: list[int] | None,
                   input_split_sizes: list[int] | None) -> None:
        """What gloo's all-to-all of ``send`` into ``recv`` does with these split sizes (rows
        of dimension 0; None: equal splits)."""
        if not (send.is_contiguous() and recv.is_contiguous()):
            raise DistributedError("all_to_all_single: the local transport needs contiguous tensors")
        if send.dtype != recv.dtype:
            raise DistributedError(f"all_to_all_single: send is {send.dtype}, recv {recv.dtype}")
        row_out = math.prod(send.shape[1:]) * send.element_size()
        row_in = math.prod(recv.shape[1:]) * recv.element_size()
        send_rows = self._splits(input_split_sizes, send, "input")
        recv_rows = self._splits(output_split_sizes, recv, "output")
        out, inn = _bytes(send), _bytes(recv)
        so, ro = [0], [0]
        for a, b in zip(send_rows, recv_rows, strict=True):
            so.append(so[-1] + a * row_out)
            ro.append(ro[-1] + b * row_in)
        me = self.rank
        if so[me + 1] - so[me] != ro[me + 1] - ro[me]:
            raise DistributedError(f"all_to_all_single: rank {me} sends itself {so[me + 1] - so[me]} bytes "
                                   f"but expects {ro[me + 1] - ro[me]}")
        inn[ro[me]:ro[me + 1]] = out[so[me]:so[me + 1]]
        sends = {p: [_HEADER.pack(so[p + 1] - so[p]), out[so[p]:so[p + 1]]] for p in range(self.size) if p != me}
        recvs = {p: [bytearray(_HEADER.size), 0, inn[ro[p]:ro[p + 1]], 0] for p in range(self.size) if p != me}
        with self._lock:
            self._exchange(sends, recvs)

    def _splits(self, sizes: list[int] | None, t: torch.Tensor, which: str) -> list[int]:
        """Rows per rank of ``t`` (``sizes``, or an equal split), checked as gloo checks them."""
        n = int(t.shape[0]) if t.dim() else 1
        if not sizes:
            if n % self.size:
                raise DistributedError(f"all_to_all_single: {n} rows do not split evenly over {self.size} ranks")
            return [n // self.size] * self.size
        rows = [int(x) for x in sizes]
        if len(rows) != self.size or sum(rows) != n or min(rows) < 0:
            raise DistributedError(f"all_to_all_single: {which} split sizes {rows} for {n} rows and {self.size} ranks")
        return rows

    def _exchange(self, sends: dict[int, list[Any]], recvs: dict[int, list[Any]]) -> None:
        """Send each peer its header then payload, receive each peer's header (checked) then
        payload, all at once under ``poll`` (non-blocking sockets)."""
        deadline = time.monotonic() + self.timeout_s
        while sends or recvs:
            progressed = False
            for p in list(sends):
                parts = sends[p]
                while parts:
                    try:
                        n = self.socks[p].sendmsg(parts)
                    except BlockingIOError:
                        break
                    except OSError as e:
                        raise DistributedError(f"local all-to-all: sending to rank {p} failed ({e})") from e
                    progressed = True
                    while parts and n >= len(parts[0]):  # drop what went out
                        n -= len(parts[0])
                        parts.pop(0)
                    if n:
                        parts[0] = memoryview(parts[0])[n:]
                if not parts:
                    del sends[p]
            for p in list(recvs):
                progressed = self._receive(p, recvs[p]) or progressed
                if recvs[p][0] is None and recvs[p][3] == len(recvs[p][2]):
                    del recvs[p]
            if progressed or not (sends or recvs):
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = sorted(set(sends) | set(recvs))
                raise DistributedError(f"local all-to-all: ranks {waiting} did not exchange within "
                                       f"{self.timeout_s:.0f} s (GNNFLOW_DIST_TIMEOUT)")
            poller = select.poll()
            for p in set(sends) | set(recvs):
                poller.register(self.socks[p].fileno(), (select.POLLOUT if p in sends else 0)
                                | (select.POLLIN if p in recvs else 0))
            poller.poll(min(left, 1.0) * 1000)

    def _receive(self, p: int, st: list[Any]) -> bool:
        """Progress on peer ``p``'s message (``st``: header buffer or None once read, its bytes
        read, the payload view, its bytes read); whether any byte came."""
        sock, got = self.socks[p], False
        while True:
            if st[0] is not None:
                view, at = memoryview(st[0]), st[1]
            else:
                view, at = st[2], st[3]
                if at == len(view):
                    return got
            try:
                n = sock.recv_into(view[at:])
            except BlockingIOError:
                return got
            except OSError as e:
                raise DistributedError(f"local all-to-all: receiving from rank {p} failed ({e})") from e
            if n == 0:
                raise DistributedError(f"local all-to-all: rank {p} closed its connection (its process ended)")
            got = True
            if st[0] is not None:
                st[1] += n
                if st[1] == _HEADER.size:
                    (length,) = _HEADER.unpack(bytes(st[0]))
                    if length != len(st[2]):
                        raise DistributedError(f"local all-to-all: rank {p} sent {length} bytes where "
                                               f"{len(st[2])} were expected (split sizes disagree)")
                    st[0] = None
            else:
                st[3] += n


#: seconds a connection has to name its rank and token while a mesh is made (a rank sends them
#: right after it connects; a silent connection is dropped, not waited for)
HELLO_S = 30.0


def _hello(s: socket.socket, hello: struct.Struct, timeout_s: float) -> tuple[int, int]:
    """(rank, token) a new connection sends first; (-1, -1) when it sends less in ``timeout_s``."""
    s.settimeout(timeout_s)
    data = b""
    try:
        while len(data) < hello.size:
            chunk = s.recv(hello.size - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return -1, -1
    return hello.unpack(data) if len(data) == hello.size else (-1, -1)


def connect_mesh(rank: int, size: int, gather: Callable[[torch.Tensor], torch.Tensor],
                 timeout_s: float) -> LocalMesh | None:
    """A :class:`LocalMesh` of a group's ``size`` ranks (collective), or None where they are not
    all on this host and namespace or any of them has the transport off (:func:`enabled`: every
    rank takes part in the gather either way, so ranks that disagree fall back together).
    ``gather(t)``: the group's all-gather of an int64 tensor (``[size, len(t)]``)."""
    key = host_key()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    serial = next(_names)
    token = secrets.randbits(62)
    name = f"\0gnnflow-a2a-{os.getpid()}-{serial}"
    bound = 0
    if enabled():
        try:
            listener.bind(name)
            listener.listen(max(size, 16))
            bound = 1
        except OSError:
            pass
    mine = torch.tensor([key[0], key[1], os.getpid(), serial, token, bound], dtype=torch.int64)
    table = gather(mine).tolist()
    if any(row[:2] != table[0][:2] or row[0] < 0 or not row[5] for row in table):
        listener.close()
        return None
    socks: dict[int, socket.socket] = {}
    hello = struct.Struct("<qq")
    try:
        for p in range(rank + 1, size):  # connect upwards: the peer's listen backlog holds it
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout_s)
            s.connect(f"\0gnnflow-a2a-{table[p][2]}-{table[p][3]}")
            s.sendall(hello.pack(rank, table[p][4]))
            socks[p] = s
        deadline = time.monotonic() + timeout_s
        while len(socks) < size - 1:  # accept the ranks below, each proving it is one
            listener.settimeout(max(0.001, deadline - time.monotonic()))
            s, _ = listener.accept()
            peer, their_token = _hello(s, hello, min(HELLO_S, max(0.001, deadline - time.monotonic())))
            if their_token != token or not 0 <= peer < rank or peer in socks:
                s.close()  # not a rank of this group (or silent): the next connection
                continue
            socks[peer] = s
    except OSError as e:
        for s in socks.values():
            s.close()
        raise DistributedError(f"local all-to-all: connecting the ranks of a group failed ({e})") from e
    finally:
        listener.close()
    for s in socks.values():
        s.setblocking(False)
    return LocalMesh(rank, size, socks, timeout_s)
