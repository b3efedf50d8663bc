"""Communication topology: devices, physical hops that contend, and device-to-device links.

DGCL §5.1 models a *link* as the connection between two computing devices; a
link may be one physical connection (an NVLink) or several (PCIe-QPI-PCIe), and
the physical hops are shared by every link that crosses them, which is how the
cost model accounts for contention (Table 3: concurrent GPUs on QPI share its
bandwidth).

A topology file (YAML or JSON) describes the physical graph::

    name: dgx1-v100
    devices: [gpu0, gpu1, ...]          # the ranks, in rank order
    nodes:                              # non-computing nodes: switches, CPUs, NICs
      pcie0: {kind: switch}
      cpu0: {kind: cpu}                 # kind cpu = host memory (the swap baseline)
      bus: {kind: switch, bandwidth: 20} # optional: a node with a bandwidth is itself a
                                        # shared hop crossed by every route through it
    link_types: {NV1: 24.22}            # optional; Table 1 speeds are built in
    connections:                        # physical, full duplex, GB/s per direction
      - [gpu0, gpu1, NV1]               # type name or a number
      - {ends: [gpu0, pcie0], type: PCIe}
    links:                              # optional explicit routes (else derived)
      - {src: gpu0, dst: gpu5, route: [gpu0, pcie0, cpu0, cpu1, pcie2, gpu5]}

Every direction of a connection is its own hop.  Unless given explicitly, the
link between two devices is their direct connection if they have one, else the
fewest-hops route through non-device nodes only (devices never forward in
hardware; forwarding through a device is a planning decision, §5.1).
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.errors import GnnflowError

#: DGCL Table 1: measured speed (GB/s) of common links.
LINK_TYPES: dict[str, float] = {
    "NV2": 48.35,
    "NV1": 24.22,
    "PCIe": 11.13,
    "QPI": 9.56,
    "IB": 6.37,
    "Ethernet": 3.12,
    # Not in Table 1: nominal per-direction speeds for the DGX-A100 preset.
    "NV3x12": 300.0,  # A100: 12 NVLink-3 links to the NVSwitch fabric, 25 GB/s each
    "PCIe4": 31.5,
    "HDR-IB": 25.0,
}

PRESET_DIR = Path(__file__).with_name("topologies")


class TopologyError(GnnflowError):
    """A topology file is malformed (unknown device, negative bandwidth, disconnected...)."""


@dataclass
class Topology:
    """A topology compiled for planning.

    ``hop_names[h]`` / ``hop_bw[h]`` (GB/s) are the physical hops; ``links`` maps an
    ordered device pair ``(i, j)`` to the hop ids its route crosses.
    """

    name: str
    devices: list[str]
    hop_names: list[str]
    hop_bw: np.ndarray
    links: dict[tuple[int, int], list[int]]
    routes: dict[tuple[int, int], list[str]]
    host_of: dict[int, str] = field(default_factory=dict)  # device -> nearest cpu node (its host memory)
    to_host: dict[tuple[int, str], list[int]] = field(default_factory=dict)  # (device, cpu) -> hops
    from_host: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (cpu, device) -> hops
    source: str = "<memory>"
    spec: dict[str, Any] = field(default_factory=dict)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def num_hops(self) -> int:
        return len(self.hop_names)

    def link_bandwidth(self, i: int, j: int) -> float:
        """Bandwidth of link i->j when alone: the slowest hop it crosses (GB/s)."""
        return float(self.hop_bw[self.links[(i, j)]].min())

    def restrict(self, ranks: int) -> Topology:
        """The topology among the first ``ranks`` devices (same hops and routes)."""
        if ranks > self.num_devices:
            raise TopologyError(
                f"{self.source}: topology {self.name!r} has {self.num_devices} devices, {ranks} ranks requested"
            )
        if ranks == self.num_devices:
            return self
        links = {k: v for k, v in self.links.items() if k[0] < ranks and k[1] < ranks}
        routes = {k: v for k, v in self.routes.items() if k[0] < ranks and k[1] < ranks}
        topo = Topology(self.name, self.devices[:ranks], self.hop_names, self.hop_bw, links, routes,
                        {d: h for d, h in self.host_of.items() if d < ranks},
                        {k: h for k, h in self.to_host.items() if k[0] < ranks},
                        {k: h for k, h in self.from_host.items() if k[1] < ranks}, self.source, self.spec)
        _check_connected(topo)
        return topo

    def to_dict(self) -> dict[str, Any]:
        return dict(self.spec)

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly summary: devices, hops, and each link's route and bandwidth."""
        return {
            "name": self.name,
            "source": self.source,
            "devices": self.devices,
            "hops": {n: float(b) for n, b in zip(self.hop_names, self.hop_bw, strict=True)},
            "links": [
                {"src": self.devices[i], "dst": self.devices[j], "route": self.routes[(i, j)],
                 "bandwidth_gbps": self.link_bandwidth(i, j)}
                for (i, j) in sorted(self.links)
            ],
        }


def _err(source: str, msg: str) -> TopologyError:
    return TopologyError(f"{source}: {msg}")


def _bandwidth(value: Any, types: dict[str, float], source: str, where: str) -> float:
    if isinstance(value, str):
        if value not in types:
            raise _err(source, f"{where}: unknown link type {value!r}; known: {', '.join(sorted(types))} "
                               "(or give a number in GB/s)")
        bw = types[value]
    else:
        try:
            bw = float(value)
        except (TypeError, ValueError):
            raise _err(source, f"{where}: bandwidth {value!r} is not a number or link type") from None
    if not np.isfinite(bw) or bw <= 0:
        raise _err(source, f"{where}: bandwidth must be positive, got {bw}")
    return bw


def compile_topology(spec: dict[str, Any], source: str = "<memory>") -> Topology:
    """Validate a topology spec (the parsed file) and derive links and hops."""
    if not isinstance(spec, dict):
        raise _err(source, "top level must be a mapping with 'devices' and 'connections'")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices):
        raise _err(source, "'devices' must be a non-empty list of names")
    if len(set(devices)) != len(devices):
        raise _err(source, "'devices' has duplicate names")
    raw_nodes = spec.get("nodes") or {}
    if isinstance(raw_nodes, list):
        raw_nodes = {n: {} for n in raw_nodes}
    if not isinstance(raw_nodes, dict):
        raise _err(source, "'nodes' must be a mapping name -> {kind, bandwidth}")
    types = dict(LINK_TYPES)
    for k, v in (spec.get("link_types") or {}).items():
        types[str(k)] = _bandwidth(v, LINK_TYPES, source, f"link_types.{k}")
    names = set(devices)
    for n in raw_nodes:
        if n in names:
            raise _err(source, f"node {n!r} is also a device")
    names |= set(raw_nodes)
    dev_index = {d: i for i, d in enumerate(devices)}

    hop_names: list[str] = []
    hop_bw: list[float] = []
    hop_id: dict[tuple[str, str], int] = {}
    adj: dict[str, list[str]] = {n: [] for n in names}
    conns = spec.get("connections") or []
    if not isinstance(conns, list):
        raise _err(source, "'connections' must be a list")
    for k, c in enumerate(conns):
        if isinstance(c, dict):
            ends, bw_spec = c.get("ends"), c.get("bandwidth", c.get("type"))
        elif isinstance(c, list | tuple) and len(c) == 3:
            ends, bw_spec = list(c[:2]), c[2]
        else:
            raise _err(source, f"connections[{k}]: expected [a, b, type] or {{ends: [a, b], type: T}}")
        if not isinstance(ends, list | tuple) or len(ends) != 2:
            raise _err(source, f"connections[{k}]: 'ends' must name two endpoints")
        a, b = (str(e) for e in ends)
        where = f"connection {a}-{b}"
        for e in (a, b):
            if e not in names:
                raise _err(source, f"{where}: unknown device or node {e!r}; declare it under 'devices' or 'nodes'")
        if a == b:
            raise _err(source, f"{where}: connects an endpoint to itself")
        if (a, b) in hop_id:
            raise _err(source, f"{where}: declared twice")
        bw = _bandwidth(bw_spec, types, source, where)
        for x, y in ((a, b), (b, a)):
            hop_id[(x, y)] = len(hop_names)
            hop_names.append(f"{x}->{y}")
            hop_bw.append(bw)
        adj[a].append(b)
        adj[b].append(a)
    node_hop: dict[str, int] = {}
    for n, attrs in raw_nodes.items():
        attrs = attrs or {}
        if "bandwidth" in attrs:
            node_hop[n] = len(hop_names)
            hop_names.append(f"{n}")
            hop_bw.append(_bandwidth(attrs["bandwidth"], types, source, f"node {n}"))

    def hops_of(route: list[str]) -> list[int]:
        hs = [hop_id[(route[t], route[t + 1])] for t in range(len(route) - 1)]
        hs += [node_hop[n] for n in route[1:-1] if n in node_hop]
        return hs

    links: dict[tuple[int, int], list[int]] = {}
    routes: dict[tuple[int, int], list[str]] = {}
    for k, lk in enumerate(spec.get("links") or []):
        if not isinstance(lk, dict) or "route" not in lk:
            raise _err(source, f"links[{k}]: expected {{src, dst, route: [...]}}")
        route = [str(x) for x in lk["route"]]
        src, dst = str(lk.get("src", route[0])), str(lk.get("dst", route[-1]))
        where = f"link {src}->{dst}"
        for e in (src, dst):
            if e not in dev_index:
                raise _err(source, f"{where}: unknown device {e!r}")
        if route[0] != src or route[-1] != dst:
            raise _err(source, f"{where}: route must start at {src} and end at {dst}")
        for t in range(len(route) - 1):
            if (route[t], route[t + 1]) not in hop_id:
                raise _err(source, f"{where}: no connection {route[t]}-{route[t + 1]} for its route")
        links[(dev_index[src], dev_index[dst])] = hops_of(route)
        routes[(dev_index[src], dev_index[dst])] = route
    for i, a in enumerate(devices):
        paths = _bfs_routes(a, adj, set(devices))
        for j, b in enumerate(devices):
            if i != j and (i, j) not in links and b in paths:
                links[(i, j)] = hops_of(paths[b])
                routes[(i, j)] = paths[b]
    cpus = [n for n, attrs in raw_nodes.items() if (attrs or {}).get("kind") == "cpu"]
    host_of: dict[int, str] = {}
    to_host: dict[tuple[int, str], list[int]] = {}
    from_host: dict[tuple[str, int], list[int]] = {}
    for i, a in enumerate(devices):
        paths = _bfs_routes(a, adj, set(devices))
        reach = [c for c in cpus if c in paths]
        for c in reach:
            to_host[(i, c)] = hops_of(paths[c])
            from_host[(c, i)] = hops_of(paths[c][::-1])
        if reach:
            host_of[i] = min(reach, key=lambda c: (len(paths[c]), cpus.index(c)))
    topo = Topology(str(spec.get("name", Path(source).stem)), list(devices), hop_names,
                    np.asarray(hop_bw, dtype=np.float64), links, routes, host_of, to_host, from_host,
                    source, spec)
    _check_connected(topo)
    return topo


def _bfs_routes(start: str, adj: dict[str, list[str]], devices: set[str]) -> dict[str, list[str]]:
    """Fewest-hop routes from ``start``; only non-device nodes may be crossed."""
    prev: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        x = queue.popleft()
        if x != start and x in devices:
            continue  # a device ends a route; it does not forward in hardware
        for y in adj[x]:
            if y not in prev:
                prev[y] = x
                queue.append(y)
    out = {}
    for y in prev:
        if y == start:
            continue
        path = [y]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])  # type: ignore[arg-type]
        out[y] = path[::-1]
    return out


def _check_connected(topo: Topology) -> None:
    """Every device must reach every other, possibly by forwarding through devices."""
    n = topo.num_devices
    seen = {0}
    stack = [0]
    while stack:
        i = stack.pop()
        for j in range(n):
            if (i, j) in topo.links and j not in seen:
                seen.add(j)
                stack.append(j)
    if len(seen) != n:
        missing = [topo.devices[j] for j in range(n) if j not in seen]
        raise _err(topo.source, f"topology {topo.name!r} is disconnected: {', '.join(missing)} "
                                f"cannot be reached from {topo.devices[0]}; add a connection")


def uniform_topology(num_devices: int, bandwidth: float = 10.0) -> Topology:
    """A full mesh of equal direct links (no shared hops): the default when none is given."""
    devices = [f"dev{i}" for i in range(num_devices)]
    conns = [[devices[i], devices[j], bandwidth] for i in range(num_devices) for j in range(i + 1, num_devices)]
    return compile_topology({"name": f"uniform-{num_devices}", "devices": devices, "connections": conns},
                            "<uniform>")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def read_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise TopologyError(f"{path}: no such topology file; presets: {', '.join(preset_names())}")
    text = path.read_text()
    try:
        if path.suffix == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text)
    except (json.JSONDecodeError, Exception) as exc:
        if isinstance(exc, TopologyError):
            raise
        raise TopologyError(f"{path}: cannot parse topology ({exc})") from None


def load_topology(name_or_path: str | os.PathLike[str]) -> Topology:
    """A preset name (``gnnflow topology list``) or a YAML/JSON topology file."""
    s = str(name_or_path)
    preset = PRESET_DIR / f"{s}.yaml"
    path = preset if (os.sep not in s and preset.exists()) else Path(s)
    return compile_topology(read_spec(path), str(path))


def write_topology(spec: dict[str, Any], out: str | os.PathLike[str]) -> None:
    """Write a spec as YAML (or JSON for ``.json``) atomically, after validating it."""
    from gnnflow.io import atomic_file

    compile_topology(spec, str(out))
    with atomic_file(out) as tmp:
        if str(out).endswith(".json"):
            tmp.write_text(json.dumps(spec, indent=2) + "\n")
        else:
            import yaml

            tmp.write_text(yaml.safe_dump(spec, sort_keys=False, default_flow_style=None))
