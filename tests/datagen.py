"""Raw input files in each source's own format, of any size: the tests write small ones, and
the streaming-conversion measurement (docs/data.md) writes 200M-line ones.

    python -m tests.datagen snap FILE --nodes N --lines M [--seed S]
    python -m tests.datagen ogb ROOT --nodes N --edges M [--feature-dim D] [--binary]

Vertex ids: SNAP lists use sparse original ids (``3 * v + 1``, so relabelling has work
to do); half of the destinations are drawn from a skewed distribution (``N * u**3``) so
that low ids are hubs and the on-disk CSR build meets buckets bigger than the average.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import numpy as np

from gnnflow.data.hetero import HeteroGraph

CHUNK = 1 << 22


def _edges(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    skewed = rng.random(m) < 0.5
    dst[skewed] = (n * rng.random(int(skewed.sum())) ** 3).astype(np.int64)
    return src, dst


# "0000".."9999" as one little-endian uint32 each: four digits per gather
_DIGITS = np.array([list(f"{i:04d}") for i in range(10000)], dtype="S1").view(np.uint32).ravel()


def _write_rows(fh, cols: list[np.ndarray], sep: str) -> None:
    """Non-negative integer columns as text lines, formatted with numpy (pandas' writer is
    too slow for a 200M-line file): four digits per table lookup into a byte matrix,
    leading zeros masked out by each number's digit count."""
    rows = cols[0].shape[0]
    parts, masks = [], []
    for i, c in enumerate(cols):
        c = np.asarray(c, dtype=np.int64)
        groups = max(1, -(-len(str(int(c.max(initial=0)))) // 4))
        width = 4 * groups
        digits = np.empty((rows, groups), dtype=np.uint32)
        for g in range(groups):
            digits[:, g] = _DIGITS[(c // 10 ** (4 * (groups - 1 - g))) % 10000]
        ndigits = 1 + sum((c >= 10**k).astype(np.int8) for k in range(1, width))
        parts += [digits.view(np.uint8).reshape(rows, width),
                  np.full((rows, 1), ord("\n" if i == len(cols) - 1 else sep), np.uint8)]
        masks += [np.arange(width) >= width - ndigits[:, None], np.ones((rows, 1), dtype=bool)]
    fh.write(np.concatenate(parts, axis=1)[np.concatenate(masks, axis=1)].tobytes().decode("ascii"))


def write_snap_edges(path: str | Path, num_nodes: int, num_lines: int, seed: int = 0) -> Path:
    """A SNAP-style edge list (``#`` header lines, tab-separated, ``.gz`` by suffix)."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", **({"compresslevel": 1} if path.suffix == ".gz" else {})) as fh:
        fh.write(f"# Directed graph: {path.name}\n# Nodes: {num_nodes} Edges: {num_lines}\n"
                 "# FromNodeId\tToNodeId\n")
        for start in range(0, num_lines, CHUNK):
            src, dst = _edges(rng, num_nodes, min(CHUNK, num_lines - start))
            _write_rows(fh, [3 * src + 1, 3 * dst + 1], "\t")
    return path


def _csv_gz(path: Path, cols: list[np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", compresslevel=1) as fh:
        _write_rows(fh, cols, ",")


def write_ogb_raw(root: str | Path, num_nodes: int, num_edges: int, seed: int = 0,
                  feature_dim: int = 0, classes: int = 40, binary: bool = False) -> Path:
    """ogbn-arxiv's raw layout (``raw/edge.csv.gz`` ... ``split/time``), or with ``binary``
    ogbn-papers100M's (``raw/data.npz``, ``node-label.npz``)."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    feat = rng.random((num_nodes, feature_dim)).astype(np.float32) if feature_dim else None
    labels = rng.integers(0, classes, num_nodes)
    if binary:
        src, dst = _edges(rng, num_nodes, num_edges)
        arrays = {"edge_index": np.stack([src, dst]), "num_nodes_list": np.array([num_nodes]),
                  "num_edges_list": np.array([num_edges]),
                  "node_year": rng.integers(2000, 2020, (num_nodes, 1))}
        if feat is not None:
            arrays["node_feat"] = feat.astype(np.float16)
        np.savez(raw / "data.npz", **arrays)
        np.savez(raw / "node-label.npz", node_label=labels[:, None].astype(np.float64))
    else:
        with gzip.open(raw / "edge.csv.gz", "wt", compresslevel=1) as fh:
            for start in range(0, num_edges, CHUNK):
                _write_rows(fh, list(_edges(rng, num_nodes, min(CHUNK, num_edges - start))), ",")
        _csv_gz(raw / "num-node-list.csv.gz", [np.array([num_nodes])])
        _csv_gz(raw / "num-edge-list.csv.gz", [np.array([num_edges])])
        _csv_gz(raw / "node-label.csv.gz", [labels])
        _csv_gz(raw / "node_year.csv.gz", [rng.integers(2000, 2020, num_nodes)])
        if feat is not None:
            _csv_gz(raw / "node-feat.csv.gz", list(feat.T))
    perm = rng.permutation(num_nodes)
    n_tr, n_va = num_nodes * 6 // 10, num_nodes * 2 // 10
    for name, part in (("train", perm[:n_tr]), ("valid", perm[n_tr:n_tr + n_va]),
                       ("test", perm[n_tr + n_va:])):
        _csv_gz(root / "split" / "time" / f"{name}.csv.gz", [part])
    return root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.datagen")
    sub = p.add_subparsers(dest="kind", required=True)
    s = sub.add_parser("snap")
    s.add_argument("path")
    s.add_argument("--nodes", type=int, required=True)
    s.add_argument("--lines", type=int, required=True)
    s.add_argument("--seed", type=int, default=0)
    o = sub.add_parser("ogb")
    o.add_argument("root")
    o.add_argument("--nodes", type=int, required=True)
    o.add_argument("--edges", type=int, required=True)
    o.add_argument("--feature-dim", type=int, default=0)
    o.add_argument("--binary", action="store_true")
    o.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.kind == "snap":
        print(write_snap_edges(a.path, a.nodes, a.lines, a.seed))
    else:
        print(write_ogb_raw(a.root, a.nodes, a.edges, a.seed, a.feature_dim, binary=a.binary))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def hetero_equal(a: HeteroGraph, b: HeteroGraph) -> list[str]:
    """Differences between two typed graphs (empty when equal); used by round-trip checks."""
    diffs = []
    if a.num_nodes != b.num_nodes:
        diffs.append(f"num_nodes {a.num_nodes} != {b.num_nodes}")
    if set(a.edges) != set(b.edges):
        diffs.append(f"edge types {sorted(a.edges)} != {sorted(b.edges)}")
    for e in set(a.edges) & set(b.edges):
        for i, side in enumerate(("src", "dst")):
            if not np.array_equal(a.edges[e][i], b.edges[e][i]):
                diffs.append(f"{e} {side} differ")
    if set(a.features) != set(b.features):
        diffs.append(f"feature types {sorted(a.features)} != {sorted(b.features)}")
    for t in set(a.features) & set(b.features):
        if not np.array_equal(a.features[t], b.features[t]):
            diffs.append(f"features of {t} differ")
    for t in set(a.labels) | set(b.labels):
        ya, yb = a.labels.get(t), b.labels.get(t)
        if ya is None or yb is None or not np.array_equal(ya, yb):
            diffs.append(f"labels of {t} differ")
    for split in ("train", "val", "test"):
        sa, sb = a.splits.get(split, {}), b.splits.get(split, {})
        for t in set(sa) | set(sb):
            if t not in sa or t not in sb or not np.array_equal(np.sort(sa[t]), np.sort(sb[t])):
                diffs.append(f"{split} split of {t} differs")
    return diffs


def typed_sample(num_papers: int = 300, fanouts: tuple = (4, 3), targets: int = 70, seed: int = 1):
    """A homogenized synthetic-hetero graph (in memory) and typed blocks sampled from it for
    ``targets`` papers: ``(blocks, rel_types, homogenize's output)``; ``rel_types[r]`` is
    ``(source type, destination type)`` of relation ``r``."""
    import torch

    from gnnflow.data.hetero_synthetic import generate_synthetic_hetero
    from gnnflow.data.homogenize import homogenize
    from gnnflow.sampling import TypedNeighborSampler

    d = homogenize(generate_synthetic_hetero(num_papers=num_papers, num_authors=num_papers * 4 // 3,
                                             num_institutions=20, num_fields=30, num_classes=4))
    meta = d["meta"]
    names = meta["node_types"]
    rel_types = [(names.index(s), names.index(t)) for s, _, t in meta["edge_types"]]
    offsets = meta["node_type_offsets"]
    sampler = TypedNeighborSampler(d["indptr"], d["indices"], d["extra_arrays"]["edge_type"], list(fanouts),
                                   seed=seed, node_type_offsets=offsets)
    papers = torch.arange(offsets[names.index("paper")], offsets[names.index("paper")] + targets)
    return sampler.sample_blocks(papers), rel_types, d
