"""Block layers and models in plain torch (CPU and CUDA): GraphSAGE, GCN, GAT, MLP, RGCN, R-GAT.

Each layer is ``layer(block, h_src) -> h_dst`` and knows nothing about where
its block came from (sampled, full graph, a split, a partition), so every
strategy reuses it unchanged (GSplit §5).
"""

from gnnflow.nn.gat import GATConv
from gnnflow.nn.gcn import GCNConv
from gnnflow.nn.model import GNN, MODEL_NAMES, DstLinear, build_model, build_model_from_config
from gnnflow.nn.ops import edge_softmax, spmm_mean, spmm_sum
from gnnflow.nn.rgat import RGATConv
from gnnflow.nn.rgcn import RGCNConv
from gnnflow.nn.sage import SAGEConv
from gnnflow.nn.typed_input import GraphSchema, TypedInput, TypedRows

__all__ = [
    "GATConv",
    "GCNConv",
    "GNN",
    "MODEL_NAMES",
    "DstLinear",
    "GraphSchema",
    "RGATConv",
    "RGCNConv",
    "SAGEConv",
    "TypedInput",
    "TypedRows",
    "build_model",
    "build_model_from_config",
    "edge_softmax",
    "spmm_mean",
    "spmm_sum",
]
