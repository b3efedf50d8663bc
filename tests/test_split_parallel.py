"""Split-parallel training equals single-process training on the same mini-batch (issue 6, acceptance 1-2)."""

from __future__ import annotations

import pytest

from gnnflow.strategies.verify.split import verify


@pytest.mark.parametrize("model,workers", [("sage", 2), ("gat", 2),
                                           pytest.param("sage", 4, marks=pytest.mark.slow),
                                           pytest.param("gat", 4, marks=pytest.mark.slow)])
def test_split_equals_single_process(model, workers):
    r = verify(workers, model=model, seed=1)
    assert r["passed"], r["max_abs_diff"]
    for key in ("loss", "logits", "grads"):
        assert r["max_abs_diff"][key] <= 1e-5
    # the split group loads every input vertex of the mini-batch exactly once ...
    assert r["features_loaded"] == r["unique_input_vertices"]
    # ... while data-parallel micro-batches over the same targets load some twice
    assert r["dp_features_loaded"] > r["features_loaded"]


def test_skipping_the_backward_shuffle_breaks_gradients():
    r = verify(2, model="sage", seed=1, backward_shuffle=False)
    # forward is unchanged, gradients of the layers below the top are not
    assert r["max_abs_diff"]["logits"] <= 1e-5
    assert r["max_abs_diff"]["grads"] > 1e-3
    assert not r["passed"]


@pytest.mark.parametrize("workers,group,fanouts", [
    (2, 2, [10, 10]),
    (2, 2, [15, 10, 5]),
    pytest.param(4, 4, [10, 10], marks=pytest.mark.slow),
    pytest.param(4, 4, [15, 10, 5], marks=pytest.mark.slow),
    pytest.param(4, 2, [10, 10], marks=pytest.mark.slow),
    pytest.param(4, 2, [15, 10, 5], marks=pytest.mark.slow),
])
def test_split_samples_exactly_what_single_process_samples(workers, group, fanouts):
    r = verify(workers, model="sage", seed=2, fanouts=fanouts, split_group_size=group)
    assert r["sample_equal"], "the splits' edges differ from the single-process sample"
    assert r["passed"], r["max_abs_diff"]


def test_check_fails_when_one_rank_samples_from_another_stream():
    r = verify(2, model="sage", seed=2, fanouts=[10, 10], perturb_sampler=True)
    assert not r["sample_equal"] and not r["passed"]
