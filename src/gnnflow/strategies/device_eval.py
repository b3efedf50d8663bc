"""Where layer-wise evaluation keeps its rows and how large its chunks are, per device.

Evaluation (exact full-neighbourhood inference, layer by layer over chunks of destinations:
:func:`gnnflow.strategies.common.full_inference`, and over the parts:
:func:`gnnflow.strategies.minibatch.inference.layerwise_inference`) runs each chunk on the rank's
device.  On a GPU the host would otherwise gather every chunk's source rows and copy them over;
here a layer's table (the features, then each hidden layer's outputs) stays on the device when it
fits a share of the device's free memory (:func:`fits_on_device`), so a chunk's rows are gathered
there, and a chunk's source rows take at most :func:`chunk_bytes` of device memory.  On the CPU
nothing changes: tables stay in host memory (or scratch files) and chunks are sized as before.

``GNNFLOW_INFERENCE_DEVICE_CHUNK_BYTES`` (default 512 MiB) and
``GNNFLOW_INFERENCE_DEVICE_SHARE`` (default 0.5: the share of free device memory the tables may
take) override the GPU's limits; ``GNNFLOW_INFERENCE_CHUNK_BYTES`` the CPU's chunk (64 MiB).
"""

from __future__ import annotations

import os

import torch

from gnnflow.sampling import Block

#: destinations per chunk at most on the CPU (DGL's examples' batch of inference)
CPU_CHUNK_ROWS = 65536


def _env(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def chunk_bytes(device: torch.device) -> int:
    """Bytes a chunk's source rows take at most: 64 MiB on the CPU, 512 MiB on a GPU."""
    if device.type == "cuda":
        return int(_env("GNNFLOW_INFERENCE_DEVICE_CHUNK_BYTES", 512 << 20))
    return int(_env("GNNFLOW_INFERENCE_CHUNK_BYTES", 64 << 20))


def chunk_rows(num_rows: int, num_edges: int, dim: int, device: torch.device) -> int:
    """Destinations per chunk so that a chunk's source rows (about the mean in-degree per
    destination, ``dim`` floats each) take about :func:`chunk_bytes`; at most
    :data:`CPU_CHUNK_ROWS` on the CPU."""
    per_row = max(1.0, num_edges / max(1, num_rows)) * max(1, dim) * 4
    rows = max(1, int(chunk_bytes(device) // per_row))
    return rows if device.type == "cuda" else min(CPU_CHUNK_ROWS, rows)


def fits_on_device(nbytes: int, device: torch.device) -> bool:
    """Whether a table of ``nbytes`` stays on ``device``: a GPU keeps it when it fits the share of
    its free memory (tables placed already are not free); the CPU never (its tables follow the
    host's own rules)."""
    if device.type != "cuda":
        return False
    free, _ = torch.cuda.mem_get_info(device)
    return nbytes <= _env("GNNFLOW_INFERENCE_DEVICE_SHARE", 0.5) * free


def empty_block(device: torch.device) -> Block:
    """A block with no vertices (with degrees, for GCN; edge and vertex types, for the relational
    layers): a layer on it tells its output width without computing anything, on every rank, even
    one that owns no vertex."""
    return Block.empty(device)
