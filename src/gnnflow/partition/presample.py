"""Presampling (GSplit §4): weigh vertices and edges by how often training samples them.

GSplit runs the training sampler over the training set for a fixed number of
epochs (10 suffice, §6.3) and assigns each vertex the expected number of times
it appears at each layer of a mini-batch, and each edge the expected number of
times it is sampled.  A weighted min-cut over those weights (``presample``
method) then minimises the expected cross-split edges per mini-batch while
balancing the expected load per split.

Saved as one ``.npz``:

* ``vertex_counts`` float32 [L+1, N]: expected appearances per mini-batch in the
  vertex set of layer l (row 0 = input vertices whose features are loaded, row L
  = the targets);
* ``dst_edges`` float32 [L, N]: expected sampled in-edges of v when it is a
  destination of block l (the per-split load that GSplit Fig. 5 measures);
* ``edge_counts`` float32 [M]: expected times each stored CSR edge is sampled;
* scalars ``num_batches``, ``epochs``, ``batch_size``, ``fanouts``, ``seed``.

The input row also ranks "hot" vertices for feature caches
(:func:`hot_vertices`, the sampling-frequency criterion GSplit §6.1 uses).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.errors import ConfigError, StoreError
from gnnflow.io import atomic_file, progress


@dataclass
class Presample:
    vertex_counts: np.ndarray
    dst_edges: np.ndarray
    edge_counts: np.ndarray
    num_batches: int
    epochs: int
    batch_size: int
    fanouts: list[int]
    seed: int

    @property
    def num_layers(self) -> int:
        return int(self.dst_edges.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.vertex_counts.shape[1])

    def describe(self) -> dict[str, Any]:
        """What produced these counts (recorded in a partition book's meta)."""
        return {"fanouts": self.fanouts, "batch_size": self.batch_size, "epochs": self.epochs,
                "num_batches": self.num_batches, "seed": self.seed}

    def save(self, path: str | os.PathLike[str]) -> None:
        with atomic_file(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, vertex_counts=self.vertex_counts, dst_edges=self.dst_edges,
                         edge_counts=self.edge_counts, num_batches=self.num_batches, epochs=self.epochs,
                         batch_size=self.batch_size, fanouts=np.asarray(self.fanouts), seed=self.seed)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Presample:
        path = Path(path)
        if not path.exists():
            raise StoreError(f"{path}: no such presample file (run `gnnflow presample` first)")
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls(vertex_counts=z["vertex_counts"], dst_edges=z["dst_edges"], edge_counts=z["edge_counts"],
                           num_batches=int(z["num_batches"]), epochs=int(z["epochs"]),
                           batch_size=int(z["batch_size"]), fanouts=[int(f) for f in z["fanouts"]],
                           seed=int(z["seed"]))
        except (KeyError, ValueError, OSError) as exc:
            raise StoreError(f"{path}: not a gnnflow presample file ({exc})") from None


def training_batches(train_idx: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch of target batches: the training set shuffled and cut into ``batch_size`` pieces."""
    perm = np.asarray(train_idx, dtype=np.int64)[rng.permutation(len(train_idx))]
    return [perm[i:i + batch_size] for i in range(0, perm.shape[0], batch_size)]


def edge_recording_sampler(indptr: np.ndarray, indices: np.ndarray, fanouts: list[int],
                           seed: int) -> Any:
    """The training sampler (:class:`gnnflow.sampling.NeighborSampler`, the same keyed draws)
    that also appends the CSR positions of each layer's sampled edges to its
    ``edge_positions`` list, in sampling order (output layer first).

    With the positions at hand, counting a batch's edges is a scatter over its sampled
    edges: O(sampled edges), with no search and no array as long as the edge list.
    """
    from gnnflow.sampling import NeighborSampler
    from gnnflow.sampling.neighbor import sample_edge_positions

    class EdgeRecordingSampler(NeighborSampler):
        edge_positions: list[np.ndarray]

        def sample_neighbors(self, dst: np.ndarray, fanout: int, layer: int) -> tuple[np.ndarray, np.ndarray]:
            eid, counts = sample_edge_positions(self.indptr, dst, fanout, self.key, layer, dst)
            self.edge_positions.append(eid)
            return counts, np.asarray(self.indices[eid], dtype=np.int64)

    sampler = EdgeRecordingSampler(indptr, indices, fanouts, seed=seed)
    sampler.edge_positions = []
    return sampler


def presample(store: Any, fanouts: list[int], batch_size: int, epochs: int = 10, seed: int = 0) -> Presample:
    """Run the training sampler over the training set for ``epochs`` epochs and count (GSplit §4).

    Work per batch is proportional to its sampled edges; the counts themselves are
    arrays over the whole graph (they are the output).
    """
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    if epochs < 1:
        raise ConfigError(f"--epochs must be >= 1, got {epochs}")
    train = np.asarray(store.train_idx, dtype=np.int64)
    if train.size == 0:
        raise ConfigError(f"{store.path}: the graph has no training vertices to presample from")
    n = store.num_nodes
    indptr, indices = np.asarray(store.indptr), np.asarray(store.indices)
    sampler = edge_recording_sampler(indptr, indices, fanouts, seed)
    num_layers = len(sampler.fanouts)
    vertex_counts = np.zeros((num_layers + 1, n), dtype=np.float64)
    dst_edges = np.zeros((num_layers, n), dtype=np.float64)
    edge_counts = np.zeros(indices.shape[0], dtype=np.float64)
    rng = np.random.default_rng(seed)
    num_batches = 0
    for epoch in progress(range(epochs), desc="presampling epochs", total=epochs):
        batches = training_batches(train, batch_size, rng)
        for index, targets in enumerate(progress(batches, desc="presampling batches", total=len(batches))):
            sampler.edge_positions = []
            blocks = sampler.at(epoch, index).sample_blocks(targets)
            positions = sampler.edge_positions[::-1]  # input layer first, as ``blocks``
            vertex_counts[0, blocks[0].src_ids.numpy()] += 1
            for layer, (b, eid) in enumerate(zip(blocks, positions, strict=True)):
                dst = b.dst_ids.numpy()
                vertex_counts[layer + 1, dst] += 1
                dst_edges[layer, dst] += np.diff(b.indptr.numpy())
                # distinct positions within one layer (distinct rows, distinct slots per row)
                edge_counts[eid] += 1
            num_batches += 1
    s = float(num_batches)
    return Presample(vertex_counts=(vertex_counts / s).astype(np.float32),
                     dst_edges=(dst_edges / s).astype(np.float32),
                     edge_counts=(edge_counts / s).astype(np.float32),
                     num_batches=num_batches, epochs=epochs, batch_size=batch_size,
                     fanouts=list(sampler.fanouts), seed=seed)


def hot_vertices(p: Presample | str | os.PathLike[str], k: int) -> np.ndarray:
    """The ``k`` vertices most often loaded as inputs, most frequent first (ties by id)."""
    if not isinstance(p, Presample):
        p = Presample.load(p)
    freq = p.vertex_counts[0]
    k = max(0, min(int(k), freq.shape[0]))
    order = np.lexsort((np.arange(freq.shape[0]), -freq))
    return order[:k].astype(np.int64)


def load_for_store(path: str | os.PathLike[str], store: Any) -> Presample:
    """Load a presample file and check it matches ``store``'s vertex and edge counts."""
    p = Presample.load(path)
    if p.num_nodes != store.num_nodes or p.edge_counts.shape[0] != store.num_edges:
        raise ConfigError(
            f"{path}: presampled for {p.num_nodes} vertices / {p.edge_counts.shape[0]} edges but the graph "
            f"{store.path} has {store.num_nodes} / {store.num_edges}; re-run `gnnflow presample` on it"
        )
    return p
