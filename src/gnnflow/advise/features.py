"""The work terms of one GNN layer's forward and backward, shared by the calibration (which fits
their per-unit costs on this machine) and the cost model (which multiplies them out).

A layer with ``n_dst`` destinations, ``n_src`` sources, ``edges`` edges and widths
``d_in -> d_out`` (``d_out`` all heads of a GAT layer) does, forward and backward together:

* ``gemm``: dense multiply-adds ``rows x d_in x d_out``, where ``rows`` is what the layer projects
  (GraphSAGE: the destinations' self map plus the neighbour map, over the sources when it projects
  first (``d_in > d_out``, as DGL does) else over the aggregated destinations; GCN: likewise
  without the self map; GAT: every source);
* ``agg``: the sparse aggregation, ``edges x`` the aggregated width (``d_out`` when the layer
  projects first or is GAT, else ``d_in``);
* ``edges``: per-edge work independent of width (index gathers, GAT's attention per head);
* ``rows``: element-wise work over the layer's input and output rows (activation, dropout,
  bias, copies): ``n_src d_in + n_dst d_out``;
* ``layer``: 1, the layer's fixed cost (operator dispatch, autograd bookkeeping).

Backward repeats each term with about the same shape, so one coefficient per term covers both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TERMS = ("layer", "gemm", "agg", "edges", "rows")


def layer_terms(model: str, n_dst: float, n_src: float, edges: float, d_in: int, d_out: int,
                heads: int = 1) -> np.ndarray:
    """The :data:`TERMS` of one layer (see the module docstring)."""
    first = d_in > d_out
    if model == "gat":
        rows, width, per_edge = n_src, d_out, edges * heads
    elif model == "gcn":
        rows, width, per_edge = (n_src if first else n_dst), (d_out if first else d_in), edges
    elif model == "mlp":
        rows, width, per_edge = n_dst, 0, 0.0
    else:  # sage (mean or gcn aggregator)
        rows, width, per_edge = n_dst + (n_src if first else n_dst), (d_out if first else d_in), edges
    return np.array([1.0, rows * d_in * d_out, edges * width, per_edge, n_src * d_in + n_dst * d_out])


def model_terms(cfg: Any, layers: list[tuple[float, float, float]], in_dim: int, classes: int) -> np.ndarray:
    """The :data:`TERMS` of a whole model summed over its layers; ``layers``: per layer
    ``(n_dst, n_src, edges)``, input layer first."""
    from gnnflow.strategies.memory import layer_dims

    dims = layer_dims(cfg, max(1, in_dim), classes)
    total = np.zeros(len(TERMS))
    last = len(dims) - 1
    for i, ((d_in, d_out), (n_dst, n_src, edges)) in enumerate(zip(dims, layers, strict=True)):
        heads = (cfg.heads if i < last else cfg.out_heads) if cfg.model == "gat" else 1
        if cfg.model == "gat" and i == last:
            d_out = d_out * max(1, cfg.out_heads)
        total += layer_terms(cfg.model, n_dst, n_src, edges, d_in, d_out, heads)
    return total


def param_count(cfg: Any, in_dim: int, classes: int) -> int:
    """Weights of the model (what the all-reduce sends and Adam updates)."""
    from gnnflow.strategies.memory import model_bytes

    return model_bytes(cfg, max(1, in_dim), classes) // 16
