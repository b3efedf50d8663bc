"""Learnable rows of featureless vertex types and their sparse optimizer (DGL's DistEmbedding and
SparseAdam): partition-invariant initial rows, Adam per row on the rows a batch touched only."""

from __future__ import annotations

import numpy as np
import torch

from gnnflow.nn import TypedRows
from gnnflow.strategies.embedding import NodeEmbeddings, SparseAdam, initial_rows


def test_initial_rows_are_a_function_of_seed_and_vertex():
    ids = np.arange(100, 160)
    whole = initial_rows(ids, 8, np.full(60, 0.5), seed=3)
    some = initial_rows(ids[[5, 17, 40]], 8, np.full(3, 0.5), seed=3)
    assert torch.equal(whole[[5, 17, 40]], some)  # however the rows are split among owners
    assert whole.abs().max() < 0.5 and whole.std() > 0.2
    assert not torch.equal(whole, initial_rows(ids, 8, np.full(60, 0.5), seed=4))


def test_sparse_adam_is_adam_per_row_and_leaves_other_rows_alone():
    torch.manual_seed(0)
    dense = torch.randn(6, 4)
    mine = dense.clone()
    ref = torch.nn.Parameter(dense.clone())
    adam = torch.optim.Adam([ref], lr=0.01)
    sparse = SparseAdam(6, 4, lr=0.01)
    for _ in range(3):  # every row touched: dense Adam exactly
        g = torch.randn(6, 4)
        ref.grad = g.clone()
        adam.step()
        sparse.update(mine, torch.arange(6), g)
    assert torch.allclose(mine, ref.detach(), atol=1e-6)
    before, state = mine.clone(), {k: v.clone() for k, v in sparse.state_dict().items()}
    sparse.update(mine, torch.tensor([1, 4]), torch.randn(2, 4))
    untouched = [0, 2, 3, 5]
    assert torch.equal(mine[untouched], before[untouched]) and not torch.equal(mine[[1, 4]], before[[1, 4]])
    assert torch.equal(sparse.steps, torch.tensor([3, 4, 3, 3, 4, 3]))
    assert torch.equal(sparse.mean[untouched], state["mean"][untouched])


def test_attach_and_step_update_the_rows_a_batch_touched():
    """Vertices 0..9 of type 0 (featureless) and 10..19 of type 1 (featured); a batch reading
    featureless vertices 2, 7 (and a featured one) updates rows 2 and 7 only."""
    emb = NodeEmbeddings(np.arange(10), 4, offsets=[0, 10, 20], featureless=[0], num_nodes=[10, 10],
                         seed=0, lr=0.1)
    rows = TypedRows(types=torch.tensor([1, 0, 0]), ids=torch.tensor([3, 7, 2]),
                     features={1: torch.ones(1, 5)})
    before = emb.weight.clone()
    x = emb.attach(rows)
    assert torch.equal(x.features[0].detach(), before[[7, 2]])
    x.features[0].sum().backward()
    assert emb.step() == 2 and emb.updated_total == 2
    changed = (emb.weight != before).any(1).nonzero().squeeze(1).tolist()
    assert changed == [2, 7]
    state = emb.state_dict()
    other = NodeEmbeddings(np.arange(10), 4, [0, 10, 20], [0], [10, 10], seed=1, lr=0.1)
    other.load_state_dict(state)
    assert torch.equal(other.weight, emb.weight) and torch.equal(other.optimizer.steps, emb.optimizer.steps)
