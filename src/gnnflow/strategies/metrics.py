"""Evaluation metrics every strategy reports the same way: accuracy and loss per split.

A strategy's ``evaluate()`` hands the logits and labels of each split's vertices
(all of them, or this rank's, chunk by chunk) to :func:`split_sums`; the sums
(correct predictions, cross-entropy, labelled vertices) add over chunks and
ranks, and :func:`split_metrics` turns the global sums into

* ``{split}_acc`` — OGB's node-classification accuracy
  (``ogb.nodeproppred.Evaluator``: the fraction of labelled vertices whose
  arg-max prediction equals the label), and
* ``{split}_loss`` — the mean softmax cross-entropy over the split's labelled
  vertices (the training loss's definition, without dropout),

for ``split`` in train, val, test; NaN where a split has no labelled vertex.
Vertices with a negative label are unlabelled and count nowhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnnflow.comm.collectives import all_reduce
from gnnflow.runtime.devices import HOST

SPLITS = ("train", "val", "test")
METRICS = tuple(f"{s}_{m}" for m in ("acc", "loss") for s in SPLITS)


#: bytes of logits the metrics read at a time: a chunk's masked copy, its log-softmax and its
#: arg-max stay a few times this, where whole splits would cost a few times the logits (ogbn-mag's
#: 349 classes over a rank's training vertices: hundreds of MiB at the end of an evaluation)
CHUNK_BYTES = 16 << 20


def _chunk_sums(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, float, float]:
    """Correct predictions, summed cross-entropy and labelled vertices of rows ``logits``."""
    labels = torch.as_tensor(labels, device=logits.device).long()
    mask = labels >= 0
    if not bool(mask.any()):
        return 0.0, 0.0, 0.0
    logits, labels = logits[mask].float(), labels[mask]
    return (float((logits.argmax(dim=-1) == labels).sum()),
            float(F.cross_entropy(logits, labels, reduction="sum").double()), float(labels.numel()))


def _chunk_rows(logits: torch.Tensor) -> int:
    return max(1, CHUNK_BYTES // (4 * max(1, math.prod(logits.shape[1:]))))


def split_sums(per_split: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``[len(SPLITS), 3]`` float64: correct predictions, summed cross-entropy and labelled vertices
    of each split's ``(logits, labels)`` (a split not given counts zero), read
    :data:`CHUNK_BYTES` of logits at a time."""
    sums = torch.zeros(len(SPLITS), 3, dtype=torch.float64)
    for split, (logits, labels) in per_split.items():
        sums += split_sums_at(logits, torch.as_tensor(labels), {split: torch.arange(int(logits.shape[0]))})
    return sums


def split_sums_at(logits: torch.Tensor, labels: torch.Tensor, positions: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """:func:`split_sums` of ``(logits[positions[s]], labels[positions[s]])`` for each split ``s``
    given, without copying a whole split's rows (a chunk of positions at a time)."""
    sums = torch.zeros(len(SPLITS), 3, dtype=torch.float64)
    step = _chunk_rows(logits)
    for i, split in enumerate(SPLITS):
        if split in positions:
            pos = positions[split]
            for a in range(0, int(pos.shape[0]), step):
                rows = pos[a:a + step]
                sums[i] += torch.tensor(_chunk_sums(logits[rows], labels[rows]), dtype=torch.float64)
    return sums


def reduce_sums(sums: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``sums`` added over the ranks of ``group`` (the tensor itself outside a process group)."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size(group) == 1:
        return sums
    t = sums.detach().cpu().clone()  # bookkeeping: over the host (gloo under cpu:gloo,cuda:nccl)
    all_reduce(t, HOST, group=group)
    return t


def split_metrics(sums: torch.Tensor) -> dict[str, float]:
    """``{"train_acc", "val_acc", "test_acc", "train_loss", "val_loss", "test_loss"}`` of global sums."""
    out: dict[str, float] = {}
    for i, split in enumerate(SPLITS):
        n = float(sums[i, 2])
        out[f"{split}_acc"] = float(sums[i, 0]) / n if n else float("nan")
        out[f"{split}_loss"] = float(sums[i, 1]) / n if n else float("nan")
    return dict(sorted(out.items(), key=lambda kv: METRICS.index(kv[0])))


def evaluate_logits(per_split: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
                    group: dist.ProcessGroup | None = None) -> dict[str, float]:
    """:func:`split_metrics` of this rank's ``per_split`` logits and labels, summed over ``group``.
    Collective when called inside a process group: every rank of ``group`` calls it."""
    return split_metrics(reduce_sums(split_sums(per_split), group))
