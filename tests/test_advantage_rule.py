"""The one advantage rule (`alpha_gym.scoring.advantage_rule`): numpy, shared by our loop, TRL and the verl guard."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_gym.scoring.advantage_rule import project_advantages


def test_by_hand():
    # group 1: 0.3 may not win -> 0; the sum 0.4 is shared by the 2 that may: 0.5-0.2, -0.1-0.2
    # group 2: nobody may win -> all zeros
    adv = np.array([[0.5, 0.3, -0.1], [0.2, -0.4, 0.2]])
    may_win = np.array([[True, False, True], [False, False, False]])
    np.testing.assert_allclose(project_advantages(adv, may_win), [[0.3, 0.0, -0.3], [0.0, 0.0, 0.0]],
                               rtol=0, atol=1e-15)
    assert adv[0, 1] == 0.3  # the input is not edited


@pytest.mark.parametrize("seed", range(5))
def test_properties_on_random_groups(seed):
    rng = np.random.default_rng(seed)
    adv = rng.normal(size=(7, 9))
    may_win = rng.random((7, 9)) < 0.6
    may_win[3] = False
    out = project_advantages(adv, may_win)
    assert (out[~may_win] <= 0).all()                                   # rule 1
    np.testing.assert_allclose(out.sum(axis=1), 0.0, atol=1e-12)        # rule 2
    assert (out[3] == 0).all()                                          # no admissible answer: no signal
    some = may_win.any(axis=1)[:, None] & ~may_win  # in a group with an admissible answer: only clamped
    np.testing.assert_array_equal(out[some], np.minimum(adv[some], 0))
    # a flat batch with group labels in shuffled order is the same rule, group by group
    order = rng.permutation(adv.size)
    labels = np.repeat(np.arange(7), 9)[order]
    flat = project_advantages(adv.reshape(-1)[order], may_win.reshape(-1)[order], labels)
    np.testing.assert_allclose(flat, out.reshape(-1)[order], rtol=0, atol=1e-12)  # summed in another order


def test_dtype_shape_and_bad_labels():
    out = project_advantages(np.array([1.0, -1.0, 0.5], dtype=np.float32), [True, True, False])
    assert out.dtype == np.float32 and out.shape == (3,)
    with pytest.raises(ValueError, match="2 group labels for 3 advantages"):
        project_advantages(np.zeros(3), [True] * 3, ["a", "b"])


def test_the_trainers_projection_is_this_rule():
    torch = pytest.importorskip("torch", reason="the trainers need torch; the rule itself is numpy")
    from trainers.advantages import enforce_validity
    rng = np.random.default_rng(7)
    adv, valid = rng.normal(size=(4, 6)), rng.random((4, 6)) < 0.5
    got = enforce_validity(torch.as_tensor(adv), torch.as_tensor(valid))
    assert got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), project_advantages(adv, valid))
