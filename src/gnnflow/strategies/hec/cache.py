"""The Historical Embedding Cache (HEC) of DistGNN-MB §3.2.

One cache per GNN layer and rank holds *historical embeddings*: copies of
remote (halo) vertices' layer inputs that their owners pushed some iterations
ago (Algorithm 2).  The cache is a fixed table of ``capacity`` (``cs``) lines:

* **tag** — the vertex's original id ``VID_o`` (§3.1);
* **data** — its embedding (a row of ``dim`` floats, never requiring grad: the
  paper sends no gradients through historical embeddings);
* **age** — ``now - stored_at``, in training iterations, where ``stored_at`` is
  the iteration of the HECStore that wrote the line.

Semantics, pinned down where the paper leaves room (checked against a
sequential reference in ``tests/test_hec_cache.py``):

* **Life-span** ``ls``: a line with age ``> ls`` is expired.  ``search`` never
  returns an expired line (so a line stored at iteration ``k`` is usable at
  ``k .. k+ls``), and :meth:`EmbeddingCache.advance` (called once per iteration
  with the new clock) purges expired lines, freeing them.
* **HECStore** of a tag that is already resident overwrites that line and
  refreshes it (``stored_at = now``, and it becomes the youngest line).
* **OCF replacement** ("oldest cache-line first"): a new tag goes to a free
  line; when none is free the *oldest* line is replaced, oldest meaning least
  recently stored (a total order: every stored row gets the next value of a
  store counter).  Equivalently, after a store the cache holds the ``cs``
  most recently stored distinct tags among (resident lines, stored rows).
  Within one call rows are applied in order, so a duplicated tag keeps its
  last row and, if the call holds more than ``cs`` new tags, the last ``cs``
  survive.
* **HECSearch** maps tags to line numbers (``-1`` = miss); **HECLoad** gathers
  lines.  Both are vectorized (the paper's OpenMP regions become tensor ops).

Tags live in a *tag universe*: either ``range(n)`` or a sorted tensor of
allowed ids (a rank's halo ids: the only vertices its peers ever push to it).
A dense ``slot -> line`` map over the universe makes search O(1) per tag
without a hash table.

:meth:`EmbeddingCache.state_dict` holds the occupied lines with their ages and
store order, so a resumed run continues with the very cache an uninterrupted
run has (DistGNN-MB does not discuss checkpointing; a cold cache after resume
would change every later hit, drop and loss).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from gnnflow.errors import ConfigError


@dataclass
class CacheStats:
    """What one cache did since the last :meth:`reset` (DistGNN-MB §4.4 reports hit rates)."""

    searched: int = 0  # tags looked up
    hits: int = 0  # of which found a live line
    stored: int = 0  # rows written (new lines + refreshes)
    refreshed: int = 0  # of which overwrote a resident tag
    evicted: int = 0  # live lines replaced under OCF because the cache was full
    purged: int = 0  # expired lines freed (by advance() or reused by a store)
    dropped: int = 0  # rows of one store call that did not fit (more new tags than cs)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.searched if self.searched else float("nan")

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    def as_dict(self) -> dict[str, float]:
        d: dict[str, float] = {f.name: getattr(self, f.name) for f in fields(self)}
        d["hit_rate"] = self.hit_rate
        return d


class EmbeddingCache:
    """One layer's Historical Embedding Cache (DistGNN-MB §3.2, Algorithm 1).

    ``capacity`` is ``cs`` (0 disables the cache: every search misses),
    ``life_span`` is ``ls`` in iterations, ``dim`` the embedding width and
    ``tag_universe`` either the number of vertices ``n`` (tags in ``range(n)``)
    or a sorted int64 tensor of the tags that may be stored.
    """

    def __init__(
        self,
        capacity: int,
        life_span: int,
        dim: int,
        tag_universe: int | torch.Tensor,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity < 0:
            raise ValueError(f"HEC capacity (cs) must be >= 0, got {capacity}")
        if life_span < 0:
            raise ValueError(f"HEC life-span (ls) must be >= 0, got {life_span}")
        self.capacity = int(capacity)
        self.life_span = int(life_span)
        self.dim = int(dim)
        self.device = torch.device(device)
        if isinstance(tag_universe, int):
            self.universe: torch.Tensor | None = None
            universe_size = tag_universe
        else:
            self.universe = torch.as_tensor(tag_universe, dtype=torch.int64, device=self.device)
            if self.universe.numel() > 1 and not bool((self.universe[1:] > self.universe[:-1]).all()):
                raise ValueError("HEC tag_universe must be sorted and unique")
            universe_size = int(self.universe.numel())
        self.universe_size = universe_size
        cs = self.capacity
        self.data = torch.zeros((cs, self.dim), dtype=dtype, device=self.device)
        self.line_slot = torch.full((cs,), -1, dtype=torch.int64, device=self.device)  # -1 = free line
        self.stored_at = torch.zeros(cs, dtype=torch.int64, device=self.device)
        self.order = torch.zeros(cs, dtype=torch.int64, device=self.device)  # store counter value (OCF)
        self.slot_line = torch.full((universe_size,), -1, dtype=torch.int64, device=self.device)
        self.now = 0
        self._counter = 0
        self.stats = CacheStats()

    # ---- clock -------------------------------------------------------------------------------
    def advance(self, now: int) -> int:
        """Set the clock to iteration ``now`` and purge expired lines; return how many."""
        if now < self.now:
            raise ValueError(f"HEC clock cannot go back (now={self.now}, asked {now})")
        self.now = int(now)
        return self.purge()

    def purge(self) -> int:
        """Free every line whose age exceeds the life-span; return how many were freed."""
        expired = (self.line_slot >= 0) & (self.now - self.stored_at > self.life_span)
        lines = expired.nonzero().flatten()
        self._free(lines)
        self.stats.purged += int(lines.numel())
        return int(lines.numel())

    def _free(self, lines: torch.Tensor) -> None:
        if lines.numel():
            self.slot_line[self.line_slot[lines]] = -1
            self.line_slot[lines] = -1

    # ---- tags --------------------------------------------------------------------------------
    def _slots(self, tags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Universe slot of each tag and whether the tag is in the universe."""
        tags = tags.to(device=self.device, dtype=torch.int64)
        if self.universe is None:
            valid = (tags >= 0) & (tags < self.universe_size)
            return torch.where(valid, tags, torch.zeros_like(tags)), valid
        if self.universe_size == 0:
            z = torch.zeros_like(tags)
            return z, torch.zeros_like(tags, dtype=torch.bool)
        slot = torch.searchsorted(self.universe, tags).clamp_(max=self.universe_size - 1)
        return slot, self.universe[slot] == tags

    # ---- HECSearch / HECLoad / HECStore ---------------------------------------------------------
    def search(self, tags: torch.Tensor) -> torch.Tensor:
        """HECSearch: the line holding each tag, or -1 when absent or expired."""
        slot, valid = self._slots(tags)
        if self.capacity == 0 or tags.numel() == 0:
            lines = torch.full_like(slot, -1)
        else:
            lines = torch.where(valid, self.slot_line[slot], torch.full_like(slot, -1))
            live = (lines >= 0) & (self.now - self.stored_at[lines.clamp(min=0)] <= self.life_span)
            lines = torch.where(live, lines, torch.full_like(lines, -1))
        self.stats.searched += int(tags.numel())
        self.stats.hits += int((lines >= 0).sum())
        return lines

    def load(self, lines: torch.Tensor) -> torch.Tensor:
        """HECLoad: gather the embeddings of (hit) lines."""
        return self.data[lines]

    def lookup(self, tags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Search then load: ``(hit mask, embeddings of the hits in tag order)``."""
        lines = self.search(tags)
        hit = lines >= 0
        return hit, self.load(lines[hit])

    def store(self, tags: torch.Tensor, embeddings: torch.Tensor) -> None:
        """HECStore: write rows at the current clock, refreshing resident tags, OCF otherwise."""
        tags = torch.as_tensor(tags, dtype=torch.int64, device=self.device).reshape(-1)
        n = int(tags.numel())
        if embeddings.shape != (n, self.dim):
            raise ValueError(f"HEC store: embeddings shape {tuple(embeddings.shape)} != ({n}, {self.dim})")
        if n == 0:
            return
        slot, valid = self._slots(tags)
        if not bool(valid.all()):
            bad = tags[~valid][:5].tolist()
            raise ValueError(f"HEC store: tags {bad} are outside this cache's tag universe")
        base = self._counter
        self._counter += n
        if self.capacity == 0:
            self.stats.dropped += n
            return
        emb = embeddings.detach().to(device=self.device, dtype=self.data.dtype)
        # Keep the last row of each tag, in call order (sequential semantics).
        uniq, inverse = torch.unique(slot, return_inverse=True)
        last = torch.full((uniq.numel(),), -1, dtype=torch.int64, device=self.device)
        last.scatter_reduce_(0, inverse, torch.arange(n, device=self.device), reduce="amax")
        last = last.sort().values
        slot, order, emb = slot[last], base + last, emb[last]

        lines = self.slot_line[slot]
        resident = lines >= 0
        if bool(resident.any()):
            rl = lines[resident]
            self.data[rl] = emb[resident]
            self.stored_at[rl] = self.now
            self.order[rl] = order[resident]
            self.stats.refreshed += int(rl.numel())
            self.stats.stored += int(rl.numel())
        new = ~resident
        slot, order, emb = slot[new], order[new], emb[new]
        free = (self.line_slot < 0).nonzero().flatten()
        if slot.numel() > free.numel():
            # OCF: keep the `cs` youngest among resident lines and new rows.
            occupied = (self.line_slot >= 0).nonzero().flatten()
            cand = torch.cat([self.order[occupied], order])
            keep = torch.zeros(cand.numel(), dtype=torch.bool, device=self.device)
            keep[torch.topk(cand, self.capacity).indices] = True
            evict = occupied[~keep[: occupied.numel()]]
            expired = self.now - self.stored_at[evict] > self.life_span
            self.stats.purged += int(expired.sum())
            self.stats.evicted += int((~expired).sum())
            self._free(evict)
            kept_new = keep[occupied.numel() :]
            self.stats.dropped += int((~kept_new).sum())
            slot, order, emb = slot[kept_new], order[kept_new], emb[kept_new]
            free = (self.line_slot < 0).nonzero().flatten()
        target = free[: slot.numel()]
        self.data[target] = emb
        self.stored_at[target] = self.now
        self.order[target] = order
        self.line_slot[target] = slot
        self.slot_line[slot] = target
        self.stats.stored += int(target.numel())

    # ---- checkpoint ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything later searches and stores depend on: the occupied lines (line number, tag
        slot, ``stored_at``, store order, row; expired lines included) and the clock and store
        counter.  Free lines' contents are never read, so they are not kept: the state grows with
        the lines in use, not with ``cs``.  Tensors and ints only (``weights_only`` loadable)."""
        lines = (self.line_slot >= 0).nonzero().flatten()
        return {"capacity": self.capacity, "dim": self.dim, "universe_size": self.universe_size,
                "now": self.now, "counter": self._counter, "lines": lines.cpu(),
                "slots": self.line_slot[lines].cpu(), "stored_at": self.stored_at[lines].cpu(),
                "order": self.order[lines].cpu(), "data": self.data[lines].cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` exactly (same lines, so later stores pick the same free lines)."""
        for key, mine in (("capacity", self.capacity), ("dim", self.dim), ("universe_size", self.universe_size)):
            if int(state[key]) != mine:
                raise ConfigError(f"HEC checkpoint: {key} {int(state[key])} != this run's {mine}; "
                                  "resume with the options (cs) and partition of the checkpointed run")
        dev = self.device
        lines, slots = state["lines"].to(dev), state["slots"].to(dev)
        self.line_slot.fill_(-1)
        self.slot_line.fill_(-1)
        self.stored_at.zero_()
        self.order.zero_()
        self.data.zero_()
        self.line_slot[lines] = slots
        self.slot_line[slots] = lines
        self.stored_at[lines] = state["stored_at"].to(dev)
        self.order[lines] = state["order"].to(dev)
        self.data[lines] = state["data"].to(device=dev, dtype=self.data.dtype)
        self.now = int(state["now"])
        self._counter = int(state["counter"])

    # ---- inspection --------------------------------------------------------------------------
    def resident(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(tags, stored_at, embeddings)`` of every occupied line, sorted by tag (expired included)."""
        lines = (self.line_slot >= 0).nonzero().flatten()
        slot = self.line_slot[lines]
        tags = slot if self.universe is None else self.universe[slot]
        perm = torch.argsort(tags)
        lines = lines[perm]
        return tags[perm], self.stored_at[lines], self.data[lines]

    def __len__(self) -> int:
        """Number of live (unexpired) lines."""
        occ = self.line_slot >= 0
        return int((occ & (self.now - self.stored_at <= self.life_span)).sum())

    def nbytes(self) -> int:
        return int(self.data.numel() * self.data.element_size())
