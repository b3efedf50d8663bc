"""OGB node-property datasets (ogbn-arxiv, -products, -papers100M, -mag) to graph stores.

Reads OGB's own raw layout with the ``ogb`` package's readers
(:mod:`ogb.io.read_graph_raw`) and its dataset table (``ogb/nodeproppred/master.csv``),
without building DGL or PyG graph objects::

    <root>/raw/edge.csv.gz, num-node-list.csv.gz, num-edge-list.csv.gz,
               node-feat.csv.gz, node-label.csv.gz, node_year.csv.gz     (csv datasets)
    <root>/raw/data.npz, node-label.npz                                  (binary: papers100M)
    <root>/raw/num-node-dict.csv.gz, triplet-type-list.csv.gz,
               relations/<src>___<rel>___<dst>/{edge,num-edge-list}.csv.gz,
               node-feat/<type>/node-feat.csv.gz, node-label/<type>/node-label.csv.gz,
               nodetype-has-label.csv.gz                                 (heterogeneous: mag)
    <root>/split/<split>/{train,valid,test}.csv.gz                       (hetero: split/<split>/<type>/...)

``--raw-dir`` may name ``<root>`` itself or a folder holding ``<root>`` under
OGB's directory name (``ogbn_arxiv``) or the zip's (``arxiv``).  Homogeneous
datasets are symmetrized by default (GNN training in the papers uses the
undirected graph); ogbn-mag is homogenized (DistDGLv2 §4.1.1) with reverse
edge types.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from gnnflow.data.arrays import scratch_dir
from gnnflow.data.download import default_cache_dir, download, extract_zip
from gnnflow.data.hetero import HeteroGraph
from gnnflow.data.homogenize import write_hetero_store
from gnnflow.data.safe_load import load_torch_arrays
from gnnflow.data.store import GraphStore, write_store
from gnnflow.errors import ConfigError, DownloadError, GnnflowError
from gnnflow.io import log


def ogb_table() -> dict[str, dict[str, str]]:
    """OGB's node-property dataset table (``ogb/nodeproppred/master.csv``), by name.

    Read with :mod:`csv` from the installed package's directory without importing
    ``ogb.nodeproppred`` (which imports torch and DGL), so that a bad name or an
    offline download fails in well under a second.
    """
    import csv
    import importlib.util

    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise GnnflowError("the ogb package is not installed; pip install ogb==1.3.6")
    f = Path(next(iter(spec.submodule_search_locations))) / "nodeproppred" / "master.csv"
    with open(f, newline="") as fh:
        rows = list(csv.reader(fh))
    names = rows[0][1:]
    return {name: {row[0]: row[i + 1] for row in rows[1:]} for i, name in enumerate(names)}


def ogb_info(name: str) -> dict[str, str]:
    """The table row of ``name``; ConfigError for unknown or unsupported datasets."""
    table = ogb_table()
    supported = [n for n, row in table.items() if row["task type"] == "multiclass classification"]
    if name not in table:
        raise ConfigError(f"unknown OGB dataset {name!r}; known node-property datasets: "
                          f"{', '.join(supported)}")
    if name not in supported:
        raise ConfigError(f"OGB dataset {name!r} is {table[name]['task type']}; gnnflow trains "
                          f"single-label node classification ({', '.join(supported)})")
    return table[name]


def _root_candidates(name: str, info: dict[str, str], raw_dir: Path | None) -> list[Path]:
    base = raw_dir if raw_dir is not None else default_cache_dir() / "ogb"
    dir_name = "_".join(name.split("-"))
    return [base, base / dir_name, base / info["download_name"]]


def _marker(info: dict[str, str]) -> str:
    hetero, binary = info["is hetero"] == "True", info["binary"] == "True"
    if hetero:
        return "raw/edge_index_dict.npz" if binary else "raw/triplet-type-list.csv.gz"
    return "raw/data.npz" if binary else "raw/edge.csv.gz"


def find_raw_root(name: str, raw_dir: Path | None = None, *, url: str | None = None) -> Path:
    """Locate the dataset root (holding ``raw/``); download it when absent.

    Offline, fails within seconds with a DownloadError saying where to put the files.
    """
    info = ogb_info(name)
    marker = _marker(info)
    candidates = _root_candidates(name, info, raw_dir)
    for root in candidates:
        if (root / marker).exists():
            return root
    if raw_dir is not None and raw_dir.exists() and any(raw_dir.iterdir()):
        raise GnnflowError(f"{raw_dir}: no OGB {name} files found (looked for "
                           f"{' or '.join(str(c / marker) for c in candidates)})")
    url = url or info["url"]
    base = candidates[0]
    hint = (f"download {info['url']} elsewhere, unzip it and pass --raw-dir DIR so that "
            f"DIR/{marker} or DIR/{'_'.join(name.split('-'))}/{marker} exists")
    zip_path = download(url, base / f"{info['download_name']}.zip", hint=hint)
    extract_zip(zip_path, base)
    zip_path.unlink()
    for root in candidates:
        if (root / marker).exists():
            return root
    raise DownloadError(f"{zip_path} did not contain {info['download_name']}/{marker}; {hint}")


def _require(root: Path, rel: str, name: str) -> None:
    if not (root / rel).exists():
        raise GnnflowError(f"{root / rel}: missing; the OGB {name} files under {root} are "
                           "incomplete (re-download or re-extract the zip)")


@contextlib.contextmanager
def _ogb_errors(root: Path, name: str):  # type: ignore[no-untyped-def]
    """ogb's readers print to stdout and raise bare errors: send prints to stderr and
    turn errors into one GnnflowError naming the directory."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except GnnflowError:
        raise
    except Exception as exc:  # pandas/numpy/zip errors of malformed raw files
        raise GnnflowError(f"{root}: cannot convert OGB {name} raw files "
                           f"({type(exc).__name__}: {exc})") from None


def _labels_1d(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if np.issubdtype(y.dtype, np.floating):
        out = np.full(y.shape, -1, dtype=np.int64)
        ok = ~np.isnan(y)
        out[ok] = y[ok].astype(np.int64)
        return out
    return y.astype(np.int64)


def _read_split(split_dir: Path) -> dict[str, np.ndarray]:
    import pandas as pd

    if (split_dir / "split_dict.pt").exists():
        f = split_dir / "split_dict.pt"
        d = load_torch_arrays(f, what="an OGB split file (a dict of index arrays)")
        if not isinstance(d, dict) or not {"train", "valid", "test"} <= set(d):
            raise GnnflowError(f"{f}: expected a dict with keys train, valid, test")
        return {k: np.asarray(d[k], dtype=np.int64).reshape(-1) for k in ("train", "valid", "test")}
    out = {}
    for k in ("train", "valid", "test"):
        f = split_dir / f"{k}.csv.gz"
        if not f.exists():
            raise GnnflowError(f"{f}: missing split file")
        out[k] = pd.read_csv(f, compression="gzip", header=None).values.T[0].astype(np.int64)
    return out


def _read_csv(path: Path) -> np.ndarray:
    """A small headerless OGB csv, whole (per-vertex or per-graph files)."""
    import pandas as pd

    return pd.read_csv(path, compression="gzip", header=None).values


def _ogb_dtype(values: np.ndarray) -> np.ndarray:
    """OGB's reader rule: integer columns to int64, others to float32."""
    return values.astype(np.int64) if "int" in str(values.dtype) else values.astype(np.float32)


#: Rows of node-feat.csv.gz parsed at a time.
_FEATURE_CHUNK_ROWS = 1 << 16


def _csv_features(path: Path, num_nodes: int, out: Path) -> Path:
    """``node-feat.csv.gz`` read in chunks into a float32 ``.npy`` (converted as OGB's reader
    and gnnflow always did: pandas' parse, OGB's dtype rule, then float32)."""
    import pandas as pd

    from gnnflow.data.arrays import NpyRowWriter
    from gnnflow.io import progress

    writer = None
    chunk_rows = _FEATURE_CHUNK_ROWS
    reader = pd.read_csv(path, compression="gzip", header=None, chunksize=chunk_rows)
    for chunk in progress(reader, desc=f"reading {path.name}", total=-(-num_nodes // chunk_rows)):
        block = _ogb_dtype(chunk.values)
        if writer is None:
            writer = NpyRowWriter(out, (num_nodes, block.shape[1]), np.float32)
        writer.write(block)
    if writer is None:
        raise GnnflowError(f"{path}: no feature rows")
    return writer.close(str(path))


def read_ogb_homogeneous(root: Path, name: str, workdir: Path,
                         symmetrize: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``write_store`` from a homogeneous OGB dataset root, streamed:
    edges (``raw/edge.csv.gz`` or ``edge_index`` of ``raw/data.npz``) are read in chunks
    into an on-disk CSR build, features in row blocks into ``workdir``; only per-vertex
    arrays (labels, years) are held whole.  Big arrays are returned as ``.npy`` paths."""
    from gnnflow.data.arrays import NpyRowWriter, iter_npz_edge_index, iter_npz_rows
    from gnnflow.data.external_csr import ExternalCSRBuilder

    info = ogb_info(name)
    binary = info["binary"] == "True"
    split_dir = root / "split" / info["split"]
    raw = root / "raw"
    log.info("reading OGB %s raw files in %s", name, root)
    features = None
    extra: dict[str, Any] = {}
    with _ogb_errors(root, name):
        if binary:
            _require(root, "raw/node-label.npz", name)
            with np.load(raw / "data.npz") as z:  # lazy: only the small members are read here
                keys = set(z.files)
                n = int(np.asarray(z["num_nodes_list"]).sum())
                m = int(np.asarray(z["num_edges_list"]).sum())
                if "node_year" in keys:
                    extra["node_year"] = _ogb_dtype(z["node_year"]).reshape(-1).astype(np.int64)
            edges = iter_npz_edge_index(raw / "data.npz")
            if "node_feat" in keys:
                rows = iter_npz_rows(raw / "data.npz", "node_feat")
                first = next(rows)
                writer = NpyRowWriter(workdir / "features.npy", (n, first.shape[1]), np.float32)
                writer.write(first)
                for block in rows:
                    writer.write(block)
                features = writer.close(f"{raw / 'data.npz'}:node_feat")
            labels = _labels_1d(np.load(raw / "node-label.npz")["node_label"])
        else:
            for rel in ("raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
                        "raw/node-label.csv.gz", "raw/edge.csv.gz"):
                _require(root, rel, name)
            n_list = _read_csv(raw / "num-node-list.csv.gz").reshape(-1)
            if n_list.shape[0] != 1:
                raise GnnflowError(f"{raw / 'num-node-list.csv.gz'}: {n_list.shape[0]} graphs; "
                                   "a node-property dataset has one")
            n = int(n_list[0])
            m = int(_read_csv(raw / "num-edge-list.csv.gz").reshape(-1).sum())
            from gnnflow.data.arrays import iter_text_edges

            edges = iter_text_edges(raw / "edge.csv.gz", total_rows=m)
            if (raw / "node-feat.csv.gz").exists():
                features = _csv_features(raw / "node-feat.csv.gz", n, workdir / "features.npy")
            extra_files = [] if info["additional node files"] == "None" else \
                info["additional node files"].split(",")
            if "node_year" in extra_files and (raw / "node_year.csv.gz").exists():
                extra["node_year"] = _ogb_dtype(_read_csv(raw / "node_year.csv.gz")).reshape(-1).astype(np.int64)
            labels = _labels_1d(_read_csv(raw / "node-label.csv.gz"))
        split = _read_split(split_dir)
        if labels.shape[0] != n:
            raise GnnflowError(f"{root}/raw: {labels.shape[0]} labels for {n} vertices")
        log.info("%s: %d vertices, %d raw edges; building the CSR on disk", name, n, m)
        builder = ExternalCSRBuilder(n, workdir, symmetrize=symmetrize, expected_edges=m,
                                     what=f"{root}/raw edges")
        for src, dst in edges:
            builder.add(src, dst)
        if builder.raw_edges != m:
            raise GnnflowError(f"{raw}: {builder.raw_edges} edges read, the raw files say {m}")
        builder.finish(workdir / "indptr.npy", workdir / "indices.npy")
    return {
        "name": name, "source": "ogb", "indptr": workdir / "indptr.npy",
        "indices": workdir / "indices.npy", "features": features,
        "labels": labels, "train_idx": split["train"], "val_idx": split["valid"],
        "test_idx": split["test"], "num_classes": int(info["num classes"]),
        "directed": not symmetrize, "extra_arrays": extra,
        "meta": {"symmetrized": symmetrize, "random_features": False,
                 "ogb": {"split": info["split"], "version": info["version"], "url": info["url"]}},
        "inputs": {"features": str(raw / ("data.npz" if binary else "node-feat.csv.gz")),
                   "labels": str(raw / ("node-label.npz" if binary else "node-label.csv.gz")),
                   "train_idx": str(split_dir)},
    }


def _relation_edges(path: Path, triplet: tuple[str, str, str], num_nodes: dict[str, int],
                    workdir: Path, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """One relation's ``edge.csv.gz`` streamed into two ``.npy`` files (per-type source
    and destination ids, ranges checked per chunk); returned memory-mapped."""
    from gnnflow.data.arrays import iter_text_edges
    from gnnflow.data.external_csr import NpyAppender

    s, r, d = triplet
    out = {side: NpyAppender(workdir / f"{tag}-{side}.npy", np.int64) for side in ("src", "dst")}
    for src, dst in iter_text_edges(path):
        for arr, t, side in ((src, s, "source"), (dst, d, "destination")):
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= num_nodes[t]):
                bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
                raise GnnflowError(f"{path}: edge type {s}___{r}___{d}: {side} id {bad} out of "
                                   f"range [0, {num_nodes[t]}) for type {t}")
        out["src"].append(src)
        out["dst"].append(dst)
    src_file, dst_file = out["src"].close(), out["dst"].close()
    return np.load(src_file, mmap_mode="r"), np.load(dst_file, mmap_mode="r")


def read_ogb_hetero(root: Path, name: str, workdir: Path) -> HeteroGraph:
    """A :class:`HeteroGraph` (per-type ids) from a heterogeneous OGB dataset root, streamed:
    each relation's edges and each type's features are read in chunks into ``.npy`` files
    in ``workdir`` and held as memory maps; labels and splits (per vertex) are read whole.
    The values are those OGB's ``read_csv_heterograph_raw`` gives."""
    import pandas as pd
    from ogb.io.read_graph_raw import read_node_label_hetero, read_nodesplitidx_split_hetero

    info = ogb_info(name)
    if info["binary"] == "True":
        raise GnnflowError(f"{name}: binary heterogeneous OGB layout is not supported")
    for rel in ("raw/num-node-dict.csv.gz", "raw/nodetype-has-label.csv.gz",
                "raw/triplet-type-list.csv.gz"):
        _require(root, rel, name)
    split_dir = root / "split" / info["split"]
    _require(root, f"split/{info['split']}/nodetype-has-split.csv.gz", name)
    raw = root / "raw"
    log.info("reading OGB %s raw files in %s", name, root)
    with _ogb_errors(root, name):
        counts = pd.read_csv(raw / "num-node-dict.csv.gz", compression="gzip")
        if len(counts) != 1:
            raise GnnflowError(f"{raw / 'num-node-dict.csv.gz'}: {len(counts)} graphs; a "
                               "node-property dataset has one")
        num_nodes = {str(t): int(counts[t].iloc[0]) for t in counts.columns}
        triplets = sorted(tuple(map(str, row)) for row in _read_csv(raw / "triplet-type-list.csv.gz"))
        edges = {}
        for i, triplet in enumerate(triplets):
            rel_dir = raw / "relations" / "___".join(triplet)
            for f in ("edge.csv.gz", "num-edge-list.csv.gz"):
                _require(root, str((rel_dir / f).relative_to(root)), name)
            src, dst = _relation_edges(rel_dir / "edge.csv.gz", triplet, num_nodes, workdir, f"rel{i}")
            want = int(_read_csv(rel_dir / "num-edge-list.csv.gz").reshape(-1).sum())
            if src.shape[0] != want:
                raise GnnflowError(f"{rel_dir / 'edge.csv.gz'}: {src.shape[0]} edges, "
                                   f"num-edge-list.csv.gz says {want}")
            edges[triplet] = (src, dst)
        features = {}
        for t, n_t in num_nodes.items():
            f = raw / "node-feat" / t / "node-feat.csv.gz"
            if f.exists():
                features[t] = np.load(_csv_features(f, n_t, workdir / f"features-{t}.npy"),
                                      mmap_mode="r")
        labels = read_node_label_hetero(str(raw))
        train, valid, test = read_nodesplitidx_split_hetero(str(split_dir))
    target = next(iter(labels)) if len(labels) == 1 else None
    hg = HeteroGraph(
        name=name, num_nodes=num_nodes, edges=edges,  # type: ignore[arg-type]
        features=features,
        labels={t: _labels_1d(y) for t, y in labels.items()},
        splits={"train": {t: np.asarray(v, np.int64) for t, v in train.items()},
                "val": {t: np.asarray(v, np.int64) for t, v in valid.items()},
                "test": {t: np.asarray(v, np.int64) for t, v in test.items()}},
        num_classes=int(info["num classes"]), target_node_type=target,
    )
    for t, y in hg.labels.items():
        if y.shape[0] != num_nodes.get(t, -1):
            raise GnnflowError(f"{root}/raw/node-label/{t}: {y.shape[0]} labels for "
                               f"{num_nodes.get(t)} vertices of type {t}")
    hg.validate(f"{root}/raw")
    return hg


def prepare_ogb(dataset: str, out: str | os.PathLike[str], *, raw_dir: Path | None = None,
                symmetrize: bool = True, reverse_edges: bool = True,
                feature_fill: str = "neighbor-mean", seed: int = 0, overwrite: bool = False,
                url: str | None = None, name: str | None = None,
                normalize_features: str = "none") -> GraphStore:
    """Find (or download) the OGB node-property ``dataset`` and write it as a graph store."""
    info = ogb_info(dataset)
    root = find_raw_root(dataset, Path(raw_dir) if raw_dir is not None else None, url=url)
    ogb_meta = {"split": info["split"], "version": info["version"], "url": info["url"]}
    if info["is hetero"] == "True":
        with scratch_dir(out, "convert") as work:
            hg = read_ogb_hetero(root, dataset, work)
            hg.name = name or dataset
            return write_hetero_store(
                hg, out, overwrite=overwrite, reverse_edges=reverse_edges,
                feature_fill=feature_fill, seed=seed, source="ogb",
                normalize_features=normalize_features,
                meta={"random_features": False, "raw_dir": str(root), "ogb": ogb_meta},
            )
    with scratch_dir(out, "convert") as work:
        data = read_ogb_homogeneous(root, dataset, work, symmetrize=symmetrize)
        data["name"] = name or dataset
        data["meta"]["raw_dir"] = str(root)
        return write_store(out, overwrite=overwrite, normalize_features=normalize_features, **data)
