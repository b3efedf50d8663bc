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

from collections.abc import Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnnflow.comm.collectives import all_reduce
from gnnflow.runtime.devices import HOST

SPLITS = ("train", "val", "test")
METRICS = tuple(f"{s}_{m}" for m in ("acc", "loss") for s in SPLITS)


def split_sums(per_split: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``[len(SPLITS), 3]`` float64: correct predictions, summed cross-entropy and labelled vertices
    of each split's ``(logits, labels)`` (a split not given counts zero)."""
    sums = torch.zeros(len(SPLITS), 3, dtype=torch.float64)
    for i, split in enumerate(SPLITS):
        if split not in per_split:
            continue
        logits, labels = per_split[split]
        labels = torch.as_tensor(labels, device=logits.device).long()
        mask = labels >= 0
        if not bool(mask.any()):
            continue
        logits, labels = logits[mask].float(), labels[mask]
        sums[i, 0] = float((logits.argmax(dim=-1) == labels).sum())
        sums[i, 1] = float(F.cross_entropy(logits, labels, reduction="sum").double())
        sums[i, 2] = float(labels.numel())
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
