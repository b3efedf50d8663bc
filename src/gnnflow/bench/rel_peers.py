"""DGL 1.1's and PyG 2.8's relational layers on our typed blocks, holding our weights.

Each peer runs in the form its library's users run it, called like ours
(``layer(graph, x_src) -> [num_dst, ...]``), so outputs can be checked equal and
forward+backward timed on the same input:

* RGCN, DGL: ``RelGraphConv`` on the block as one homogeneous DGL block with
  ``etypes`` and the per-relation mean as the edge norm ``1 / |N_r(i)|``; the edges
  are ordered by relation over the whole block so that DGL takes its faster
  ``presorted`` path (``segment_mm``) instead of a per-edge ``gather_mm``.
* RGCN, PyG: ``RGCNConv`` (a masked propagation per relation) and
  ``FastRGCNConv`` (a transform per edge, which gathers an ``[in, out]`` weight per
  edge: left out where that exceeds :data:`FAST_RGCN_BYTES`), ``aggr="mean"``, on
  ``((x_src, x_dst), edge_index, edge_type)``; the faster is reported.
* R-GAT, DGL: ``HeteroGraphConv({relation: GATConv}, aggregate="sum")`` on the block
  as a typed DGL block (each vertex type numbered on its own, its destinations
  first), the MLPerf R-GAT layer.
* R-GAT, PyG: ``HeteroConv({relation: GATConv}, aggr="sum")`` on ``x_dict`` (each
  type's sources) and ``edge_index_dict``: PyG's hetero mini-batch form, every source
  row gets an output and the destinations' are kept.

A typed peer's wrapper splits ``x_src`` by vertex type and puts the per-type outputs
back in block order: two gathers, part of the peer's time (a user of DGL or PyG would
hold per-type tensors already; the gathers cost ``O(num_src in)``, a small share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from gnnflow.nn.ops import relation_block
from gnnflow.sampling.block import Block

#: our relational layer kinds, and the forms each peer runs them in
PYG_FORMS = {"rgcn": ("RGCNConv", "FastRGCNConv"), "rgat": ("HeteroConv",)}
#: FastRGCNConv gathers a weight matrix per edge (``[E, in, out]``, kept for backward): left out
#: where that would take more than this many bytes
FAST_RGCN_BYTES = 1 << 30


def pyg_forms(kind: str, num_edges: int, in_dim: int, out_dim: int) -> tuple[list[str], list[str]]:
    """``(forms run, forms left out)`` of PyG's layer of ``kind`` on a block of ``num_edges`` edges."""
    forms = list(PYG_FORMS[kind])
    if kind == "rgcn" and 4 * num_edges * in_dim * out_dim > FAST_RGCN_BYTES:
        return [f for f in forms if f != "FastRGCNConv"], ["FastRGCNConv"]
    return forms, []


@dataclass
class TypedBlock:
    """A block split by vertex type: ``src_pos[t]`` the block positions of type ``t``'s sources
    (its destinations first), ``num_dst[t]`` how many are destinations, and per relation ``r``
    ``edges[r] = (src, dst)`` numbered within their types."""

    num_dst_all: int
    src_pos: dict[int, torch.Tensor]
    num_dst: dict[int, int]
    edges: dict[int, tuple[torch.Tensor, torch.Tensor]]
    rel_types: list[tuple[int, int]]

    @classmethod
    def of(cls, block: Block, rel_types: list[tuple[int, int]]) -> TypedBlock:
        """``rel_types[r] = (source type, destination type)`` of relation ``r``."""
        assert block.src_types is not None and block.etypes is not None
        types = block.src_types
        local = torch.empty_like(types)
        src_pos, num_dst = {}, {}
        for t in sorted(set(types.tolist()) | {d for _, d in rel_types} | {s for s, _ in rel_types}):
            pos = torch.nonzero(types == t).squeeze(1)  # ascending: destinations (positions < num_dst) first
            local[pos] = torch.arange(pos.shape[0])
            src_pos[t], num_dst[t] = pos, int((pos < block.num_dst).sum())
        dst = block.edge_dst()
        edges = {}
        for r in range(len(rel_types)):
            sel = torch.nonzero(block.etypes == r).squeeze(1)
            edges[r] = (local[block.indices[sel]], local[dst[sel]])
        return cls(block.num_dst, src_pos, num_dst, edges, rel_types)

    def split(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {f"n{t}": x.index_select(0, pos) for t, pos in self.src_pos.items()}

    def merge(self, per_type: dict[str, torch.Tensor]) -> torch.Tensor:
        """Destination rows of every type back in block order (types without output: zero)."""
        some = next(iter(per_type.values()))
        out = some.new_zeros(self.num_dst_all, *some.shape[1:])
        for t, pos in self.src_pos.items():
            if f"n{t}" in per_type:
                out = out.index_copy(0, pos[: self.num_dst[t]], per_type[f"n{t}"][: self.num_dst[t]])
        return out

    def canonical(self, r: int) -> tuple[str, str, str]:
        s, d = self.rel_types[r]
        return f"n{s}", f"r{r}", f"n{d}"


class _Typed(torch.nn.Module):
    """A per-type peer called like ours: ``layer(typed_block, x_src) -> [num_dst, heads, out]``."""

    def __init__(self, conv: torch.nn.Module, pyg: bool, heads: int) -> None:
        super().__init__()
        self.conv, self.pyg, self.heads = conv, pyg, heads

    def forward(self, g: tuple[TypedBlock, Any], x: torch.Tensor) -> torch.Tensor:
        typed, graph = g
        out = self.conv(typed.split(x), graph) if self.pyg else self.conv(graph, typed.split(x))
        merged = typed.merge(out)
        return merged.view(merged.shape[0], self.heads, -1)


class _RelGraph(torch.nn.Module):
    """DGL's ``RelGraphConv`` called like ours on a homogeneous DGL block with relation-sorted edges."""

    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, g: tuple[Any, torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        graph, etypes, norm = g
        return self.conv(graph, x, etypes, norm, presorted=True)


class _PyGRGCN(torch.nn.Module):
    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, g: tuple[torch.Tensor, torch.Tensor, int], x: torch.Tensor) -> torch.Tensor:
        edge_index, edge_type, num_dst = g
        return self.conv((x, x[:num_dst]), edge_index, edge_type)


def dgl_graph(kind: str, block: Block, num_rels: int, rel_types: list[tuple[int, int]]) -> Any:
    """The graph DGL's layer of ``kind`` runs on (derived once per block)."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl

    if kind == "rgcn":
        etypes = torch.zeros(block.num_edges, dtype=torch.int64) if block.etypes is None else block.etypes
        norm = 1.0 / relation_block(block, num_rels).in_degrees().clamp(min=1).to(torch.float32)
        norm_e = norm[block.edge_dst() * num_rels + etypes]
        order = torch.sort(etypes, stable=True).indices  # presorted: edges grouped by relation
        graph = dgl.create_block((block.indices[order], block.edge_dst()[order]), num_src_nodes=block.num_src,
                                 num_dst_nodes=block.num_dst)
        return graph, etypes[order], norm_e[order].unsqueeze(1)
    typed = TypedBlock.of(block, rel_types)
    data = {typed.canonical(r): typed.edges[r] for r in range(num_rels)}
    graph = dgl.create_block(data, num_src_nodes={f"n{t}": p.shape[0] for t, p in typed.src_pos.items()},
                             num_dst_nodes={f"n{t}": n for t, n in typed.num_dst.items()})
    return typed, graph


def pyg_graph(kind: str, block: Block, num_rels: int, rel_types: list[tuple[int, int]]) -> Any:
    """The graph PyG's layer of ``kind`` runs on."""
    if kind == "rgcn":
        etypes = torch.zeros(block.num_edges, dtype=torch.int64) if block.etypes is None else block.etypes
        return torch.stack([block.indices, block.edge_dst()]), etypes, block.num_dst
    typed = TypedBlock.of(block, rel_types)
    return typed, {typed.canonical(r): torch.stack(typed.edges[r]) for r in range(num_rels)}


def dgl_from_ours(kind: str, ours: torch.nn.Module, rel_types: list[tuple[int, int]]) -> torch.nn.Module:
    """DGL's layer of ``kind`` holding ``ours``'s weights."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl.nn.pytorch as dglnn

    with torch.no_grad():
        if kind == "rgcn":
            conv = dglnn.RelGraphConv(ours.in_dim, ours.out_dim, ours.num_rels,
                                      regularizer="basis" if ours.num_bases else None,
                                      num_bases=ours.num_bases or None, self_loop=True)
            conv.linear_r.W.copy_(ours.weight)
            if ours.coeff is not None:
                conv.linear_r.coeff.copy_(ours.coeff)
            conv.loop_weight.copy_(ours.loop_weight)
            conv.h_bias.copy_(ours.bias)
            return _RelGraph(conv)
        mods = {}
        for r in range(ours.num_rels):
            gat = dglnn.GATConv(ours.in_dim, ours.out_dim, ours.heads, allow_zero_in_degree=True)
            gat.fc.weight.copy_(ours.weight[r].t())
            gat.attn_l.copy_(ours.attn_l[r : r + 1])
            gat.attn_r.copy_(ours.attn_r[r : r + 1])
            gat.bias.copy_(ours.bias[r])
            mods[f"r{r}"] = gat
        return _Typed(dglnn.HeteroGraphConv(mods, aggregate="sum"), pyg=False, heads=ours.heads)


def pyg_from_ours(kind: str, ours: torch.nn.Module, form: str, rel_types: list[tuple[int, int]]) -> torch.nn.Module:
    """PyG's layer of ``kind`` in ``form`` (:data:`PYG_FORMS`) holding ``ours``'s weights."""
    from torch_geometric.nn import FastRGCNConv, GATConv, HeteroConv, RGCNConv

    with torch.no_grad():
        if kind == "rgcn":
            cls = {"RGCNConv": RGCNConv, "FastRGCNConv": FastRGCNConv}[form]
            conv = cls(ours.in_dim, ours.out_dim, ours.num_rels, num_bases=ours.num_bases or None, aggr="mean")
            conv.weight.copy_(ours.weight)
            if ours.coeff is not None:
                conv.comp.copy_(ours.coeff)
            conv.root.copy_(ours.loop_weight)
            conv.bias.copy_(ours.bias)
            return _PyGRGCN(conv)
        convs = {}
        for r, (s, d) in enumerate(rel_types):
            gat = GATConv(ours.in_dim, ours.out_dim, heads=ours.heads, add_self_loops=False)
            gat.lin.weight.copy_(ours.weight[r].t())
            gat.att_src.copy_(ours.attn_l[r : r + 1])
            gat.att_dst.copy_(ours.attn_r[r : r + 1])
            gat.bias.copy_(ours.bias[r])
            convs[(f"n{s}", f"r{r}", f"n{d}")] = gat
        return _Typed(HeteroConv(convs, aggr="sum"), pyg=True, heads=ours.heads)


def layer(kind: str, in_dim: int, out_dim: int, heads: int, num_bases: int,
          rel_types: list[tuple[int, int]]) -> torch.nn.Module:
    """Our layer of ``kind`` for ``gnnflow bench layers`` (R-GAT: ``out_dim`` split among the heads;
    its biases random, so that each relation's reaching its destination type is checked too)."""
    from gnnflow.nn import RGATConv, RGCNConv

    if kind == "rgcn":
        return RGCNConv(in_dim, out_dim, len(rel_types), num_bases=num_bases)
    if kind != "rgat":
        raise ValueError(f"not a relational layer: {kind!r}")
    ours = RGATConv(in_dim, max(1, out_dim // heads), len(rel_types), heads, [d for _, d in rel_types])
    with torch.no_grad():
        assert ours.bias is not None
        ours.bias.normal_()
    return ours


def bench_block(num_papers: int, fanouts: str, batch_size: int, seed: int) -> tuple[Block, list[tuple[int, int]], str]:
    """The benchmark's typed block: the input layer of ``batch_size`` papers sampled with ``fanouts``
    (``15,10,5``: per relation) from a synthetic-hetero graph of ``num_papers`` papers, generated
    and homogenized in memory.  Returns ``(block, rel_types, description)``."""
    import numpy as np

    from gnnflow.config import parse_fanouts
    from gnnflow.data.hetero_synthetic import generate_synthetic_hetero
    from gnnflow.data.homogenize import homogenize
    from gnnflow.sampling import TypedNeighborSampler

    hg = generate_synthetic_hetero(num_papers=num_papers, num_authors=num_papers * 3 // 2,
                                   num_institutions=max(20, num_papers // 20), num_fields=max(20, num_papers // 10),
                                   num_classes=8, seed=seed)
    d = homogenize(hg)
    meta = d["meta"]
    names, offsets = meta["node_types"], meta["node_type_offsets"]
    rel_types = [(names.index(s), names.index(t)) for s, _, t in meta["edge_types"]]
    fan = parse_fanouts(fanouts)
    if any(isinstance(f, dict) for f in fan):
        raise ValueError("bench layers: --fanouts are counts per layer (applied to every relation)")
    sampler = TypedNeighborSampler(d["indptr"], d["indices"], d["extra_arrays"]["edge_type"], fan, seed=seed,
                                   node_type_offsets=offsets)
    paper = names.index("paper")
    rng = np.random.default_rng(seed + 1)
    targets = offsets[paper] + rng.choice(offsets[paper + 1] - offsets[paper], min(batch_size, num_papers),
                                          replace=False)
    block = sampler.sample_blocks(torch.from_numpy(targets))[0]
    desc = (f"synthetic-hetero papers={num_papers} ({offsets[-1]} vertices, {d['indices'].shape[0]} edges, "
            f"{len(rel_types)} relations), fanouts {fanouts} per relation")
    return block, rel_types, desc


def to_device(graph: Any, device: torch.device) -> Any:
    """A PyG graph of :func:`pyg_graph` on ``device``."""
    if device.type == "cpu":
        return graph
    if isinstance(graph[0], TypedBlock):
        typed, edges = graph
        moved = TypedBlock(typed.num_dst_all, {t: p.to(device) for t, p in typed.src_pos.items()}, typed.num_dst,
                           typed.edges, typed.rel_types)
        return moved, {k: v.to(device) for k, v in edges.items()}
    edge_index, edge_type, num_dst = graph
    return edge_index.to(device), edge_type.to(device), num_dst
