"""The benchmarks ``gnnflow bench`` runs, and the machine a result was measured on.

Each benchmark module defines ``add_arguments(parser)`` and ``run(args) -> dict``.  The dict holds
``ratios`` (every ratio with its two operands, :mod:`gnnflow.bench.ratios`), ``ratio`` and
``ratio_name`` (the headline), ``summary`` (one line) and the raw figures.
"""

from __future__ import annotations

import os
import platform
from typing import Any

# name -> (module, help)
BENCHES: dict[str, tuple[str, str]] = {
    "sampler": ("gnnflow.bench.sampler", "our layer-wise sampler vs DGL NeighborSampler (edges/s)"),
    "layers": ("gnnflow.bench.layers", "our SAGE/GCN/GAT/RGCN/R-GAT layers vs DGL's and PyG's (forward+backward time)"),
    "partition": ("gnnflow.bench.partition", "our plain (and coarsened) METIS pipeline vs dgl.distributed.partition_graph"),
    "pipeline": ("gnnflow.bench.pipeline", "epoch time with vs without the async mini-batch pipeline"),
    "data-parallel": ("gnnflow.bench.data_parallel", "our data-parallel epoch vs DGL DistDGL (sampler processes on and off), same partitions"),
    "split": ("gnnflow.bench.split", "split-parallel vs data-parallel, p3, DistDGL: time, edges, features, bytes"),
    "fullbatch": ("gnnflow.bench.fullbatch", "our full-batch GCN vs DGL GraphConv and PyG GCNConv; overlap and permutation effects"),
    "hec": ("gnnflow.bench.hec", "HEC vs data-parallel remote fetching (and DistDGL): remote bytes and time"),
    "recipes": ("gnnflow.bench.recipes", "standard GCN/SAGE/GAT recipes vs DGL 1.1.3's examples: test accuracy at "
                "the best-validation epoch over seeds"),
    "hetero-accuracy": ("gnnflow.bench.hetero_accuracy", "RGCN and R-GAT vs DGL 1.1.3's RelGraphConv and GATConv per "
                        "relation on a heterogeneous store: test accuracy at the best-validation epoch over seeds"),
    "allgather": ("gnnflow.bench.allgather", "graph_allgather planners: modeled vs measured time; per-vertex vs grouped SPST planning"),
    "scale": ("gnnflow.bench.scale", "time and peak RSS of prepare, partition and one epoch of every strategy as the "
              "graph grows (1M, products-shaped, 10M), predicted vs measured peak, growth exponents"),
    "advise": ("gnnflow.bench.advise", "the advice's predicted epoch times vs measured ones over a grid of graphs x "
               "rank counts x strategies: relative errors per strategy, Kendall's tau per configuration"),
    "gpu-minibatch": ("gnnflow.bench.gpu_minibatch", "one device's mini-batch epoch: host sampling and features vs "
                      "device sampling (+ device feature cache) vs forward+backward alone; evaluation on the device"),
    "all": ("gnnflow.bench.suite", "run the suite (config/bench.yaml) and write one table with the machine "
            "(docs/benchmarks.md)"),
}


def machine() -> dict[str, Any]:
    import torch

    info = {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    from importlib import metadata

    for name, dist in (("dgl", "dgl"), ("torch_geometric", "torch-geometric")):  # the peers' versions
        try:
            info[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[name] = None
    try:
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:  # pragma: no cover
        pass
    return info


def suite_entry_schema() -> dict[str, Any]:
    """JSON schema of one benchmark entry: of a suite file (``config/bench.yaml``) and of a
    workflow config's ``benchmarks`` list alike."""
    return {"type": "object", "additionalProperties": False, "required": ["name", "bench"],
            "properties": {"name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
                           "bench": {"enum": [b for b in BENCHES if b != "all"]},
                           "args": {"type": "object", "description": "the benchmark's options (--key value)"}}}
