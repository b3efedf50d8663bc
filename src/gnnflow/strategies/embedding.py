"""Learnable embeddings of featureless vertex types, and their sparse optimizer (DistDGLv2 §4.1.4, §4.2.1).

ogbn-mag's authors, institutions and fields of study have no features; a relational
model learns a row per vertex of those types instead (Schlichtkrull et al.'s RGCN
embeds featureless entities).  At ogbn-mag's size the table (1.2M rows) is larger
than the model, so it is not a parameter of the model: like DGL's ``DistEmbedding``
it is partitioned like the features, each row owned by the process that owns its
vertex, and

* a batch reads the rows of its input vertices (remote rows through the feature
  store's row exchange) as a leaf tensor, *synchronously*, right before the forward
  pass: "If a model has learnable embedding table on vertices, we read the learnable
  embeddings synchronously" (DistDGLv2 §4.2.1), so the asynchronous pipeline never
  hands a batch rows older than the last update;
* after backward the gradients of the rows go back to their owners through the
  same exchange, reversed (:meth:`RowExchange.push_back`), and each owner sums what
  it received per row (the rows a batch reached from several ranks' targets) and
  updates exactly those rows with :class:`SparseAdam` (DGL's ``SparseAdam``: Adam's
  moments per row, each row's own step count for the bias correction); no other row,
  and no other rank's row, changes.

Single-process training uses the same table and optimizer with every row local
(:class:`LocalRows`), so one process and P ranks compute the same updates.  DGL
averages the gradients a row receives from several trainers; here they are summed,
which is the gradient of the global batch's loss (each rank's loss is its share of
the global mean), so P ranks equal one process on the union batch.

Rows start from a keyed uniform draw, a pure function of (seed, vertex id) with the
bound of Xavier's uniform init on the type's ``[n_t, dim]`` table, so the table is
the same however it is partitioned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from gnnflow.nn.adam import FusedAdam
from gnnflow.nn.typed_input import TypedRows
from gnnflow.sampling.draws import DrawKey, uniforms

#: the draw key's epoch of the initial rows (training draws use epochs >= 0)
INIT_EPOCH = -1


def initial_rows(ids: np.ndarray, dim: int, bounds: np.ndarray, seed: int) -> torch.Tensor:
    """``[len(ids), dim]`` float32 rows uniform in ``(-bounds[i], bounds[i])``, row ``i`` a pure
    function of ``(seed, ids[i])``."""
    hashes = DrawKey(int(seed), INIT_EPOCH).row_hashes(0, np.asarray(ids, dtype=np.int64))
    out = np.empty((hashes.shape[0], dim), dtype=np.float32)
    for j in range(dim):
        out[:, j] = uniforms(hashes, j)
    out *= 2.0
    out -= 1.0
    out *= np.asarray(bounds, dtype=np.float32)[:, None]
    return torch.from_numpy(out)


class SparseAdam:
    """Adam on the rows a batch touched only (DGL 1.1's ``dgl.optim.SparseAdam``).

    Every row keeps its own first and second moments and step count; :meth:`update` advances
    the rows it is given and leaves every other row as it was (no decay of untouched
    moments, unlike dense Adam on a dense gradient full of zeros)."""

    def __init__(self, num_rows: int, dim: int, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.lr, self.betas, self.eps = float(lr), betas, float(eps)
        self.mean = torch.zeros(num_rows, dim)
        self.square = torch.zeros(num_rows, dim)
        self.steps = torch.zeros(num_rows, dtype=torch.int64)

    def update(self, weight: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """One Adam step of ``weight[rows]`` (``rows`` distinct) with gradient ``grad``."""
        if rows.numel() == 0:
            return
        b1, b2 = self.betas
        self.steps[rows] += 1
        t = self.steps[rows].to(torch.float64)
        m = self.mean[rows].mul_(b1).add_(grad, alpha=1.0 - b1)
        v = self.square[rows].mul_(b2).addcmul_(grad, grad, value=1.0 - b2)
        self.mean[rows], self.square[rows] = m, v
        m_hat = m / (1.0 - b1 ** t).to(m.dtype)[:, None]
        v_hat = v / (1.0 - b2 ** t).to(v.dtype)[:, None]
        weight[rows] -= self.lr * m_hat / (v_hat.sqrt() + self.eps)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "square": self.square, "steps": self.steps}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for key in ("mean", "square", "steps"):
            have = getattr(self, key)
            if tuple(state[key].shape) != tuple(have.shape):
                raise ValueError(f"sparse optimizer state {key}: shape {tuple(state[key].shape)}, "
                                 f"this process owns {tuple(have.shape)}")
            have.copy_(state[key])


class RowExchange(Protocol):
    """Where a batch's embedding rows come from and where their gradients go back to."""

    def fetch(self, ids: np.ndarray) -> torch.Tensor:
        """Rows of global ``ids`` (owned here or elsewhere); collective where rows are remote."""

    def push_back(self, grad: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
        """The gradients of the last fetch's rows to their owners: returns the rows of the local
        table they belong to and the gradients received for them (one entry per row fetched by
        any rank from this one; a row may come several times).  Collective."""


class LocalRows:
    """Every row local: a process that owns all the rows it reads (single-process training;
    HEC, whose batches read their own solid vertices only)."""

    def __init__(self, owned: np.ndarray, weight: torch.Tensor) -> None:
        self.owned, self.weight = owned, weight
        self._last = np.zeros(0, dtype=np.int64)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.owned, ids)
        if ids.size and ((pos >= self.owned.shape[0]).any()
                         or (self.owned[np.minimum(pos, self.owned.shape[0] - 1)] != ids).any()):
            raise ValueError("embeddings: a row asked for is not one this process owns")
        return pos.astype(np.int64)

    def fetch(self, ids: np.ndarray) -> torch.Tensor:
        self._last = self.positions(ids)
        return self.weight[torch.from_numpy(self._last)]

    def push_back(self, grad: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
        return self._last, grad


class NodeEmbeddings:
    """The embedding rows of featureless vertices this process owns, and their optimizer.

    ``owned``: sorted global ids of the rows (featureless vertices only); ``offsets``: the
    homogenized graph's vertex type ranges; ``featureless``: the featureless types;
    ``num_nodes[t]``: type ``t``'s vertex count (its Xavier bound).  :meth:`attach` gives a
    batch's :class:`TypedRows` their embedding rows; :meth:`step` applies the gradients.
    ``exchange`` (default :class:`LocalRows`) fetches rows and returns gradients.
    """

    def __init__(self, owned: np.ndarray, dim: int, offsets: Sequence[int] | np.ndarray,
                 featureless: Sequence[int], num_nodes: Sequence[int], seed: int, lr: float) -> None:
        self.owned = np.asarray(owned, dtype=np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.featureless = tuple(int(t) for t in featureless)
        self.dim = int(dim)
        types = self.type_of(self.owned)
        if self.owned.size and not np.isin(types, self.featureless).all():
            raise ValueError("embeddings: owned rows must be vertices of featureless types")
        bound = np.sqrt(6.0 / (np.asarray(num_nodes, dtype=np.float64) + dim))  # Xavier uniform per type table
        self.weight = initial_rows(self.owned, self.dim, bound[types], seed)
        self.optimizer = SparseAdam(self.owned.shape[0], self.dim, lr)
        self.exchange: RowExchange = LocalRows(self.owned, self.weight)
        self._pending: tuple[torch.Tensor, int] | None = None
        #: rows updated by the last step (this process's own rows) and over the run
        self.last_updated = 0
        self.updated_total = 0

    def type_of(self, ids: np.ndarray) -> np.ndarray:
        return (np.searchsorted(self.offsets, ids, side="right") - 1).astype(np.int64)

    def _featureless_ids(self, rows: TypedRows) -> tuple[np.ndarray, list[torch.Tensor]]:
        """Global ids of ``rows``' featureless vertices, type by type, and their positions."""
        types = rows.types.cpu()
        ids = rows.ids.cpu()
        positions = [torch.nonzero(types == t).squeeze(1) for t in self.featureless]
        glob = [ids[pos].numpy() + self.offsets[t] for t, pos in zip(self.featureless, positions, strict=True)]
        return (np.concatenate(glob) if glob else np.zeros(0, dtype=np.int64)), positions

    def attach(self, rows: TypedRows, learn: bool = True, exchange: RowExchange | None = None) -> TypedRows:
        """``rows`` with the embedding rows of their featureless vertices in ``features``.

        ``learn``: the rows form a leaf tensor whose gradient :meth:`step` applies (a batch in
        training; once per batch, on every process alike where the exchange is collective);
        else plain rows (evaluation).  ``exchange``: another source of the rows than
        :attr:`exchange` (evaluation reads its own rows locally)."""
        glob, positions = self._featureless_ids(rows)
        emb = (exchange or self.exchange).fetch(glob)
        if learn:
            emb = emb.detach().requires_grad_(True)
            self._pending = (emb, int(glob.shape[0]))
        out = dict(rows.features)
        at = 0
        for t, pos in zip(self.featureless, positions, strict=True):
            out[t] = emb[at:at + pos.shape[0]].to(rows.types.device)
            at += pos.shape[0]
        return TypedRows(rows.types, rows.ids, out)

    def step(self) -> int:
        """Send the last attached rows' gradients to their owners and update, on this process, the
        rows it owns that any process's batch touched (summed per row).  Returns the rows updated.
        Collective where the exchange is; a batch without featureless rows takes part too."""
        if self._pending is None:
            grad = torch.zeros(0, self.dim)
        else:
            leaf, n = self._pending
            grad = leaf.grad if leaf.grad is not None else torch.zeros(n, self.dim)
        self._pending = None
        pos, got = self.exchange.push_back(grad.detach().to("cpu", torch.float32))
        rows, inverse = torch.unique(torch.from_numpy(np.asarray(pos, dtype=np.int64)), return_inverse=True)
        summed = torch.zeros(rows.shape[0], self.dim).index_add_(0, inverse, got)
        with torch.no_grad():
            self.optimizer.update(self.weight, rows, summed)
        self.last_updated = int(rows.shape[0])
        self.updated_total += self.last_updated
        return self.last_updated

    def nbytes(self) -> int:
        """Bytes of the table and its optimizer state."""
        return int(self.weight.numel() * 4 * 3 + self.optimizer.steps.numel() * 8)

    def state_dict(self) -> dict[str, Any]:
        return {"owned": torch.from_numpy(self.owned), "weight": self.weight, **self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not np.array_equal(np.asarray(state["owned"]), self.owned):
            raise ValueError("embeddings: the checkpoint's rows are not the rows this process owns "
                             "(another partition book?)")
        self.weight.copy_(state["weight"])
        self.optimizer.load_state_dict({k: state[k] for k in ("mean", "square", "steps")})


class JointOptimizer:
    """The model's dense optimizer and the embeddings' sparse one, stepped together: what a
    strategy's training step calls ``optimizer`` (``zero_grad``, ``step``; the state dict is the
    dense one's, the embeddings keep theirs under their own key)."""

    def __init__(self, dense: FusedAdam, embeddings: NodeEmbeddings) -> None:
        self.dense, self.embeddings = dense, embeddings

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.dense.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.dense.step()
        self.embeddings.step()

    def state_dict(self) -> dict[str, Any]:
        return self.dense.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dense.load_state_dict(state)
