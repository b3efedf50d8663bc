"""A CSR over destinations built on disk from a stream of edge chunks.

Converting a raw edge list whose edges do not fit in memory (ogbn-papers100M has
1.6 billion, com-Friendster 1.8 billion) cannot sort one key per edge in RAM as
:func:`gnnflow.data.csr.build_csr` does.  :class:`ExternalCSRBuilder` does the
same work out of core, with memory bounded by one bucket, not by the edge count:

1. ``add(src, dst)`` per chunk: one int64 key ``dst * N + src`` per edge (and
   the reverse when symmetrizing), appended to the bucket file of its
   destination range (``K`` contiguous ranges of about equal expected size);
2. ``finish()``: bucket by bucket, in destination order, sort the keys (stable,
   so edges with equal keys keep the order they were added in), drop duplicates
   and self-loops when asked, count the row lengths and append the neighbour
   ids straight to ``indices.npy``; a bucket larger than the budget is split
   again by a narrower destination range first.

Because buckets are destination ranges processed in order, the result is the
global sort that ``build_csr`` computes, byte for byte.  Optionally each edge
carries an id (the homogeneous edge id of a typed graph), written aligned with
``indices`` as ``edge_id`` (what :func:`gnnflow.data.homogenize.homogenize` keeps).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from gnnflow.data.csr import MAX_NODES, edge_keys
from gnnflow.errors import GnnflowError
from gnnflow.io import progress

#: Keys per bucket that ``finish`` sorts in memory at once (8 bytes each, plus the sort's
#: and the ids' copies: about 64 bytes per key with edge ids, 32 without).
BUCKET_KEYS = 1 << 24
MAX_BUCKETS = 256  # files kept open while adding (twice that with edge ids)


class NpyAppender:
    """A 1-D ``.npy`` file written by appending blocks; the header's length is fixed
    up in place when closed (it is padded to a fixed size, so nothing moves)."""

    HEADER_BYTES = 128

    def __init__(self, path: str | os.PathLike[str], dtype: Any) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.count = 0
        self._fh: BinaryIO = open(self.path, "wb")  # noqa: SIM115  (closed in close())
        self._fh.write(self._header(0))

    def _header(self, n: int) -> bytes:
        text = (f"{{'descr': {np.lib.format.dtype_to_descr(self.dtype)!r}, 'fortran_order': False, "
                f"'shape': ({n},), }}")
        text = text.ljust(self.HEADER_BYTES - 11) + "\n"  # magic 6 + version 2 + length 2
        return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1")

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        self._fh.write(block.data)
        self.count += block.shape[0]

    def close(self) -> Path:
        self._fh.seek(0)
        self._fh.write(self._header(self.count))
        self._fh.close()
        return self.path


class ExternalCSRBuilder:
    """Accumulate edge chunks on disk and write ``indptr``/``indices`` (see module doc).

    ``expected_edges`` (the raw edge count, if known) sizes the buckets; a bad guess
    only costs an extra split pass over the buckets that came out too big.
    """

    def __init__(self, num_nodes: int, workdir: str | os.PathLike[str], *, symmetrize: bool,
                 dedup: bool = True, drop_self_loops: bool = True, edge_ids: bool = False,
                 expected_edges: int | None = None, bucket_keys: int | None = None,
                 what: str = "edge list") -> None:
        if num_nodes > MAX_NODES:
            raise GnnflowError(f"{num_nodes} vertices is more than gnnflow supports ({MAX_NODES})")
        if edge_ids and (symmetrize or dedup or drop_self_loops):
            raise ValueError("edge ids are kept only for a graph stored as given")
        self.n = int(num_nodes)
        self.symmetrize, self.dedup, self.drop_self_loops = symmetrize, dedup, drop_self_loops
        self.with_ids = edge_ids
        self.bucket_keys = int(bucket_keys or BUCKET_KEYS)
        self.what = what
        keys = (expected_edges or self.bucket_keys) * (2 if symmetrize else 1)
        k = int(min(MAX_BUCKETS, max(1, -(-keys // self.bucket_keys)), max(1, self.n)))
        self.width = max(1, -(-self.n // k))  # destinations per bucket
        self.num_buckets = max(1, -(-self.n // self.width))
        self.dir = Path(tempfile.mkdtemp(prefix="csr-buckets-", dir=workdir))
        self._keys = [open(_file(self.dir / f"b{i}", "keys"), "wb") for i in range(self.num_buckets)]  # noqa: SIM115
        self._ids = ([open(_file(self.dir / f"b{i}", "ids"), "wb") for i in range(self.num_buckets)]  # noqa: SIM115
                     if edge_ids else [])
        self.raw_edges = 0

    def add(self, src: np.ndarray, dst: np.ndarray, ids: np.ndarray | None = None) -> None:
        """A chunk of edges ``src[i] -> dst[i]`` (vertex ids in [0, N), checked)."""
        from gnnflow.data.csr import check_edge_ids

        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        check_edge_ids(src, dst, self.n, self.what)
        if self.with_ids:
            if ids is None or len(ids) != len(src):
                raise ValueError("add(): one edge id per edge expected")
            ids = np.asarray(ids, dtype=np.int64)
        self.raw_edges += src.shape[0]
        keys = edge_keys(src, dst, self.n, self.symmetrize)
        del src, dst
        bucket = (keys // self.n // self.width).astype(np.int16 if self.num_buckets < 2**15 else np.int64)
        order = np.argsort(bucket, kind="stable")  # radix sort; keeps the order within a bucket
        bounds = np.searchsorted(bucket[order], np.arange(self.num_buckets + 1))
        keys = keys[order]
        if self.with_ids:
            ids = ids[order]  # type: ignore[index]
        for b in np.flatnonzero(np.diff(bounds)):
            lo, hi = bounds[b], bounds[b + 1]
            self._keys[b].write(keys[lo:hi].data)
            if self.with_ids:
                self._ids[b].write(ids[lo:hi].data)  # type: ignore[index]

    def finish(self, indptr_path: str | os.PathLike[str], indices_path: str | os.PathLike[str],
               edge_id_path: str | os.PathLike[str] | None = None) -> int:
        """Write the CSR (and ``edge_id``) as ``.npy`` files; return the stored edge count.
        The bucket files are removed."""
        for fh in (*self._keys, *self._ids):
            fh.close()
        try:
            counts = np.zeros(self.n, dtype=np.int64)
            indices = NpyAppender(indices_path, np.int64)
            eids = NpyAppender(edge_id_path, np.int64) if self.with_ids and edge_id_path else None
            try:
                buckets = range(self.num_buckets)
                for b in progress(buckets, desc="building CSR buckets", total=self.num_buckets):
                    lo = b * self.width
                    self._process(self.dir / f"b{b}", lo, min(self.n, lo + self.width), counts,
                                  indices, eids)
            finally:
                indices.close()
                if eids is not None:
                    eids.close()
            indptr = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            np.save(indptr_path, indptr)
            return indices.count
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _process(self, stem: Path, lo: int, hi: int, counts: np.ndarray, indices: NpyAppender,
                 eids: NpyAppender | None) -> None:
        keys_file = _file(stem, "keys")
        if keys_file.stat().st_size // 8 > self.bucket_keys and hi - lo > 1:
            self._split(stem, lo, hi, counts, indices, eids)
            return
        keys = np.fromfile(keys_file, dtype=np.int64)
        keys_file.unlink()
        ids = None
        if self.with_ids:
            ids = np.fromfile(_file(stem, "ids"), dtype=np.int64)
            _file(stem, "ids").unlink()
            order = np.argsort(keys, kind="stable")  # equal keys stay in edge-id order
            keys, ids = keys[order], ids[order]
            del order
        else:
            keys.sort()
        if keys.size and (self.dedup or self.drop_self_loops):
            keep = np.ones(keys.shape[0], dtype=bool)
            if self.dedup:
                np.not_equal(keys[1:], keys[:-1], out=keep[1:])
            if self.drop_self_loops:
                keep &= (keys // self.n) != (keys % self.n)
            if not keep.all():
                keys = keys[keep]
                ids = ids[keep] if ids is not None else None
        counts[lo:hi] = np.bincount(keys // self.n - lo, minlength=hi - lo)
        indices.append(keys % self.n)
        if eids is not None and ids is not None:
            eids.append(ids)

    def _split(self, stem: Path, lo: int, hi: int, counts: np.ndarray, indices: NpyAppender,
               eids: NpyAppender | None, parts: int = 16) -> None:
        """Re-bucket one oversized bucket by ``parts`` narrower destination ranges."""
        import contextlib

        width = max(1, -(-(hi - lo) // parts))
        parts = -(-(hi - lo) // width)
        subs = [Path(f"{stem}.{i}") for i in range(parts)]
        exts = ("keys", "ids") if self.with_ids else ("keys",)
        with contextlib.ExitStack() as stack:
            outs = {e: [stack.enter_context(open(_file(s, e), "wb")) for s in subs] for e in exts}
            ins = {e: stack.enter_context(open(_file(stem, e), "rb")) for e in exts}
            while True:
                keys = np.fromfile(ins["keys"], dtype=np.int64, count=self.bucket_keys)
                if keys.size == 0:
                    break
                cols = {"keys": keys}
                if self.with_ids:
                    cols["ids"] = np.fromfile(ins["ids"], dtype=np.int64, count=keys.size)
                sub = ((keys // self.n - lo) // width).astype(np.int16)
                order = np.argsort(sub, kind="stable")
                bounds = np.searchsorted(sub[order], np.arange(parts + 1))
                for e, col in cols.items():
                    col = col[order]
                    for i in np.flatnonzero(np.diff(bounds)):
                        outs[e][i].write(col[bounds[i]:bounds[i + 1]].data)
        for e in exts:
            _file(stem, e).unlink()
        for i, s in enumerate(subs):
            sub_lo = lo + i * width
            self._process(s, sub_lo, min(hi, sub_lo + width), counts, indices, eids)


def _file(stem: Path, ext: str) -> Path:
    return Path(f"{stem}.{ext}")
