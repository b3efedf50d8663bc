"""Layer-wise neighbour sampling and blocks (GSplit §5, DistDGLv2 §3.2).

``from gnnflow.sampling import Block, NeighborSampler, csr_sample_neighbors``.
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

__all__ = [
    "Block",
    "DrawKey",
    "NeighborSampler",
    "as_long_tensor",
    "csr_sample_neighbors",
    "full_blocks",
    "ragged_arange",
    "sample_edge_positions",
]
