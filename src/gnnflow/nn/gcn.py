"""GCN layer (Kipf & Welling) with symmetric or row normalisation (MG-GCN §2)."""

from __future__ import annotations

import torch
from torch import nn

from gnnflow.errors import ConfigError
from gnnflow.nn.ops import spmm_sum
from gnnflow.sampling.block import Block

NORMS = ("both", "right")


class GCNConv(nn.Module):
    r"""``h_i' = c_i \sum_{j -> i} c_j h_j W + b``.

    ``norm="both"``: ``c_j = deg_out(j)^{-1/2}``, ``c_i = deg_in(i)^{-1/2}``
    (Kipf & Welling's ``D^{-1/2} A D^{-1/2}``, as DGL's ``GraphConv(norm="both")``);
    ``norm="right"``: ``c_j = 1``, ``c_i = 1/deg_in(i)`` (the row-normalised
    ``D^{-1} A`` MG-GCN trains with, §2).  Degrees are the block's own
    (out-degree of each source within the block, in-degree of each destination),
    clamped to at least 1, unless the block carries ``src_deg``/``dst_deg``
    (whole-graph degrees), which then take their place.  Self-loops, if wanted,
    are part of the graph the caller samples from.  Parameters ``weight``
    ``[in, out]`` and ``bias`` ``[out]`` match DGL's layout; the projection runs
    first when it shrinks the features, as in DGL.
    """

    #: forward's output is a new tensor no autograd node reads (a scaled or biased sum): the
    #: model's activation and dropout may overwrite it (:class:`gnnflow.nn.dropout.Dropout`)
    fresh_output = True

    def __init__(self, in_dim: int, out_dim: int, norm: str = "both", bias: bool = True) -> None:
        super().__init__()
        if norm not in NORMS:
            raise ConfigError(f"GCN norm: unknown {norm!r}; choose one of {', '.join(NORMS)}")
        self.in_dim, self.out_dim, self.norm = in_dim, out_dim, norm
        self.weight = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    @property
    def projects_first(self) -> bool:
        """Whether the projection runs before the aggregation (it shrinks the features)."""
        return self.in_dim > self.out_dim

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """Rows projected by the weight: what ``forward(..., projected=True)`` takes."""
        return h @ self.weight

    def forward(self, block: Block, h_src: torch.Tensor, projected: bool = False,
                h_dst: torch.Tensor | None = None) -> torch.Tensor:
        """``projected``: ``h_src`` is already ``h_src @ weight`` (a caller that projects rows
        before fetching them, :meth:`GNN.project`; only where :attr:`projects_first`).
        ``h_dst`` is not read (a GCN layer reads no destination's own row)."""
        if projected and not self.projects_first:
            raise ValueError(f"GCNConv {self.in_dim}->{self.out_dim}: aggregates before projecting; "
                             "pass unprojected rows")
        src_scale = None
        if self.norm == "both":
            src_deg = block.src_deg if block.src_deg is not None else block.out_degrees()
            src_scale = src_deg.to(h_src.dtype).clamp(min=1).pow(-0.5).unsqueeze(1)
        if self.projects_first:
            # diag(c) H W == diag(c) (H W): scaling the narrow product keeps no wide scaled copy
            z = h_src if projected else self.project(h_src)
            out = spmm_sum(block, z if src_scale is None else z * src_scale)
        else:
            out = spmm_sum(block, h_src if src_scale is None else h_src * src_scale) @ self.weight
        dst_deg = (block.dst_deg if block.dst_deg is not None else block.in_degrees()).to(out.dtype).clamp(min=1)
        out = out * (dst_deg.pow(-0.5) if self.norm == "both" else 1.0 / dst_deg).unsqueeze(1)
        if self.bias is not None:
            out = out + self.bias
        return out
