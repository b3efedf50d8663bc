"""Rows of a feature table, read and placed: :func:`take_rows` (``table[pos]`` from a memory map,
an array or a tensor, the one read every strategy's load stage and fill makes) and
:func:`scatter_rows` (``out[dest] = rows``), each by whichever of numpy and torch is faster for
the thread count and the tensors."""

from __future__ import annotations

import numpy as np
import torch

from gnnflow.errors import ConfigError

Rows = np.ndarray | torch.Tensor


def numpy_copies(*tensors: torch.Tensor) -> bool:
    """Whether rows are copied between these tensors by numpy: where torch computes with one
    thread (numpy's single-threaded gathers and scatters are the faster ones there; torch's use
    the threads otherwise) and numpy can view every tensor (contiguous float32 on the CPU, no
    grad)."""
    return torch.get_num_threads() == 1 and all(
        t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() and not t.requires_grad
        for t in tensors)


def take_rows(table: Rows, pos: np.ndarray, out: torch.Tensor | None = None) -> torch.Tensor:
    """``table[pos]`` as a contiguous float tensor (one gather; works on memory maps), written
    into ``out`` when given: every strategy's read of feature rows goes through here.  A CPU
    tensor is gathered by numpy's ``take`` where torch computes with one thread (1.4-5x faster
    here than ``index_select`` on rows of 32 float32), else by ``index_select``, which uses the
    threads.  Numpy's ``take`` with ``mode="clip"`` copies whole rows; fancy indexing
    (``table[pos]``) and ``take`` with ``out`` in its default mode go element by element or
    through a buffer: 78-85 ns a row of 100-128 float32 in batches of 32,768 here, against 30-36.

    A memory-mapped shard's pages stay resident once touched (and the kernel maps up to 16
    cached neighbours of each faulting page, so random gathers soon map the whole shard):
    a rank's resident set includes its feature shard, which is the shard it was given.
    """
    if isinstance(table, torch.Tensor) and table.device.type != "cpu":  # a table on the compute device
        rows = table[torch.from_numpy(pos).to(table.device)].cpu()
        return rows if out is None else out.copy_(rows)
    if isinstance(table, torch.Tensor) and not numpy_copies(table):
        return torch.index_select(table, 0, torch.from_numpy(pos), out=out) if out is not None \
            else table[torch.from_numpy(pos)]
    if isinstance(table, torch.Tensor):
        table = table.numpy()
    if out is None:
        out = torch.empty((pos.shape[0], *table.shape[1:]), dtype=torch.float32)
    if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= table.shape[0]):
        raise ConfigError(f"feature rows: row {int(pos.min())}..{int(pos.max())} outside the "
                          f"{table.shape[0]} rows of the table (a rank's: the partition book and "
                          "node_part disagree)")
    if table.dtype == np.float32:  # "clip" (the positions are checked): no buffered copy of the rows
        np.take(table, pos, axis=0, out=out.numpy(), mode="clip")
    else:
        out.numpy()[:] = np.take(table, pos, axis=0)
    return out


def scatter_rows(out: torch.Tensor, dest: np.ndarray, rows: torch.Tensor) -> None:
    """``out[dest] = rows`` (``dest``: distinct row positions).  A run of consecutive positions
    (e.g. the halo rows of one owner) is one slice copy.  Otherwise, where torch computes with one
    thread on the CPU (a rank of a busy or small host), each row is copied as one opaque numpy
    element (a void dtype of the row's bytes): 1.6-2.4x faster here than ``index_copy_``'s
    per-element indexing on rows of 32-256 float32 (20,000 rows); with more threads, or tensors
    numpy cannot view (:func:`numpy_copies`), ``index_copy_``."""
    dest = np.asarray(dest, dtype=np.int64)
    n = dest.shape[0]
    if n and int(dest[-1]) - int(dest[0]) == n - 1 and bool((np.diff(dest) == 1).all()):
        out[int(dest[0]):int(dest[0]) + n] = rows
        return
    width = out[0].numel() * out.element_size() if out.shape[0] else 0
    if not width or not numpy_copies(out, rows):
        out.index_copy_(0, torch.from_numpy(dest), rows)
        return
    row = np.dtype((np.void, width))
    out.numpy().reshape(out.shape[0], -1).view(row).reshape(-1)[dest] = \
        rows.numpy().reshape(rows.shape[0], -1).view(row).reshape(-1)
