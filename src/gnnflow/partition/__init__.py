"""Partitioning: graph store -> partition book (DistDGLv2 §4.1, GSplit §4, MG-GCN §5.2, DGCL §3).

``from gnnflow.partition import PartitionBook, Part, partition_graph``; methods
random, metis (multi-constraint), edge, node, presample, permute-1d, two-level,
parmetis (see ``docs/partitioning.md``).
"""

from gnnflow.partition.api import METHODS, partition_graph
from gnnflow.partition.book import Part, PartitionBook

__all__ = ["METHODS", "Part", "PartitionBook", "partition_graph"]
