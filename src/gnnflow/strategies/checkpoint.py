"""Checkpoints of a run directory, written so that they cannot lie.

::

    RUNDIR/ckpt/last.pt        the latest checkpoint (end of an epoch, or inside one)
    RUNDIR/ckpt/prev.pt        the one before it (kept to fall back on)
    RUNDIR/ckpt/best.pt        the checkpoint of the best-validation epoch
    RUNDIR/model.pt, model-best.pt   rank 0's model weights

Every file is written atomically together with ``<file>.sha256``, the digest of the bytes
written (:func:`save_verified`).  Reading a checkpoint (:func:`load_checkpoint`) recomputes the
digest first: ``torch.load`` does not check a zip's CRCs, so damaged bytes inside a tensor would
load, and a resumed run would train on from garbage.  A damaged ``last.pt`` (or one without its
digest: written when the process died between the two files) falls back to ``prev.pt``, saying
so; when no good checkpoint is left, one line names the file.

A checkpoint holds ``epoch`` (the last epoch finished), ``world_size``, every rank's
``Strategy.state_dict()`` and global RNG states, and, when it was written inside an epoch
(``--checkpoint-every-s``), ``batch``: the mini-batches of epoch ``epoch + 1`` already trained,
with what that epoch had recorded so far (``partial``), so that a resumed run continues at the
next mini-batch and writes the records an uninterrupted run writes.
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gnnflow.errors import StoreError
from gnnflow.io import atomic_file
from gnnflow.runtime.context import RankContext

log = logging.getLogger("gnnflow.train")

CKPT = Path("ckpt") / "last.pt"
PREV_CKPT = Path("ckpt") / "prev.pt"
BEST_CKPT = Path("ckpt") / "best.pt"
MODEL = Path("model.pt")
BEST_MODEL = Path("model-best.pt")


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def save_verified(obj: Any, path: str | os.PathLike[str], keep_previous: Path | None = None) -> None:
    """``torch.save(obj)`` to ``path`` atomically, then its sha256 beside it.  With
    ``keep_previous``, the file already at ``path`` (and its digest) becomes that one first.
    Serialised in memory, then written with plain file writes, so a full or read-only disk
    raises ``OSError`` naming the file (torch's zip writer reports it as an unrelated error).

    A process killed at any step leaves at least one of ``path`` and ``keep_previous`` whole
    (its digest matches): ``keep_previous`` becomes a copy of ``path`` while ``path`` stays in
    place (hard links, so no bytes are copied), and only then is ``path`` replaced.  A file
    whose new bytes are in place before its digest has no digest in between ("the write did
    not finish"), never an old digest that no longer matches."""
    path = Path(path)
    buf = _io.BytesIO()
    torch.save(obj, buf)
    data = buf.getbuffer()
    if keep_previous is not None and path.exists():
        digest_path(keep_previous).unlink(missing_ok=True)
        _replace_with_link(path, keep_previous)
        if digest_path(path).exists():
            _replace_with_link(digest_path(path), digest_path(keep_previous))
    digest_path(path).unlink(missing_ok=True)
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)
    with atomic_file(digest_path(path)) as tmp:
        tmp.write_text(hashlib.sha256(data).hexdigest() + "\n")


def _replace_with_link(src: Path, dst: Path) -> None:
    """Make ``dst`` the same file as ``src`` in one rename (a hard link; a copy where the file
    system has none), ``src`` left in place."""
    with atomic_file(dst) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


def damage(path: Path) -> str | None:
    """Why ``path`` cannot be trusted (missing, no digest, digest differs), or None."""
    if not path.exists():
        return "missing"
    if not digest_path(path).exists():
        return f"no digest ({digest_path(path).name} missing: the write did not finish)"
    want = digest_path(path).read_text().strip()
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    if h.hexdigest() != want:
        return "its bytes do not match its digest (damaged after it was written)"
    return None


def load_verified(path: str | os.PathLike[str]) -> Any:
    """A file :func:`save_verified` wrote, its digest checked (``weights_only`` load)."""
    path = Path(path)
    problem = damage(path)
    if problem is not None:
        raise StoreError(f"{path}: cannot be trusted: {problem}")
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The run's newest good checkpoint: ``ckpt/last.pt``, or ``ckpt/prev.pt`` when ``last.pt`` is
    damaged (said in the log); one line naming the file when neither can be trusted."""
    run_dir = Path(run_dir)
    last, prev = run_dir / CKPT, run_dir / PREV_CKPT
    problem = damage(last)
    if problem is None:
        return torch.load(last, map_location="cpu", weights_only=True)
    if damage(prev) is None:
        ckpt = torch.load(prev, map_location="cpu", weights_only=True)
        log.warning("%s: %s; resuming from %s (epoch %d) instead", last, problem, prev, int(ckpt["epoch"]))
        return ckpt
    raise StoreError(f"{last}: cannot be trusted: {problem}, and there is no good {prev.name} beside it; "
                     "start the run again without --resume")


def has_checkpoint(run_dir: str | os.PathLike[str]) -> bool:
    run_dir = Path(run_dir)
    return (run_dir / CKPT).exists() or (run_dir / PREV_CKPT).exists()


def save_checkpoint(run_dir: Path, epoch: int, states: list[dict[str, Any]], name: Path = CKPT,
                    position: dict[str, Any] | None = None) -> None:
    """Every rank's state and RNG states after ``epoch`` (``position``: inside the next epoch)."""
    ckpt: dict[str, Any] = {
        "epoch": epoch,
        "world_size": len(states),
        "ranks": [s["state"] for s in states],
        "rng": [s["rng"] for s in states],
    }
    if position is not None:
        ckpt.update(position)
    save_verified(ckpt, run_dir / name, keep_previous=run_dir / PREV_CKPT if name == CKPT else None)


def checkpoint_share(run_dir: Path, ctx: RankContext) -> dict[str, Any] | None:
    """This rank's share of the run's checkpoint: ``{"epoch", "state", "rng"}`` and, for one
    written inside an epoch, ``"batch"`` and ``"partial"``; None when there is none.

    Rank 0 reads the checkpoint (its host holds the run directory) and hands each rank its share,
    so the other ranks need no copy of it, e.g. on hosts without a shared filesystem.  Collective;
    a checkpoint that cannot be trusted or of another world size fails every rank alike.
    """
    shares: list[Any] | None = None
    if ctx.rank == 0:
        shares = [None] * ctx.world_size
        if has_checkpoint(run_dir):
            # a problem is every rank's share: all fail alike, none waits for a share never sent
            try:
                ckpt = load_checkpoint(run_dir)
            except StoreError as e:
                shares = [str(e)] * ctx.world_size
            except Exception as e:
                shares = [f"{run_dir / CKPT}: cannot be read: {e}"] * ctx.world_size
            else:
                if int(ckpt["world_size"]) != ctx.world_size:
                    shares = [f"{run_dir / CKPT}: written by {ckpt['world_size']} ranks, resuming with "
                              f"{ctx.world_size}; resume with the same --workers"] * ctx.world_size
                else:
                    shares = [{"epoch": int(ckpt["epoch"]), "state": ckpt["ranks"][r], "rng": ckpt["rng"][r],
                               "batch": ckpt.get("batch"),
                               "partial": (ckpt.get("partial") or [None] * ctx.world_size)[r]}
                              for r in range(ctx.world_size)]
    if ctx.is_distributed:
        got: list[Any] = [None]
        dist.scatter_object_list(got, shares, src=0)
        share = got[0]
    else:
        assert shares is not None
        share = shares[0]
    if isinstance(share, str):
        raise StoreError(share)
    return share


def global_rng_state() -> dict[str, Any]:
    """torch's, numpy's and Python's global generators (and CUDA's), storable with weights_only."""
    state = {
        "torch": torch.get_rng_state(),
        "numpy": json.dumps(np.random.get_state(legacy=False), default=_np_json),
        "python": json.dumps(random.getstate()),
    }
    if torch.cuda.is_available():  # dropout on the GPU draws from the CUDA generators
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _np_json(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    raise TypeError(type(obj).__name__)


def set_global_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))
    np.random.set_state(json.loads(state["numpy"]))
    py = json.loads(state["python"])
    random.setstate((py[0], tuple(py[1]), py[2]))
