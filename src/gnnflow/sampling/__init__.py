"""Layer-wise neighbour sampling and blocks (GSplit §5, DistDGLv2 §3.2).

``from gnnflow.sampling import Block, NeighborSampler, TypedNeighborSampler, csr_sample_neighbors``.
"""

from gnnflow.sampling.block import Block, as_long_tensor
from gnnflow.sampling.draws import DrawKey
from gnnflow.sampling.neighbor import (
    NeighborSampler,
    csr_sample_neighbors,
    full_blocks,
    ragged_arange,
    sample_edge_positions,
)
from gnnflow.sampling.typed import TypedNeighborSampler, relation_fanouts, sort_rows_by_type

__all__ = [
    "Block",
    "DrawKey",
    "NeighborSampler",
    "TypedNeighborSampler",
    "as_long_tensor",
    "csr_sample_neighbors",
    "full_blocks",
    "ragged_arange",
    "relation_fanouts",
    "sample_edge_positions",
    "sort_rows_by_type",
]
