"""Advantages: hand-computed GRPO/GDPO, the validity projection, the advantage floor, telemetry."""

from __future__ import annotations

import math

import pytest
import torch

from trainers.advantages import (advantage_floor, compute_advantages, enforce_validity, gdpo_advantages,
                                 grpo_advantages, nonzero_share)

EPS = 1e-4
PRIORITIES = [3.0, 1.0, 0.4, 0.4, 1.0, 0.5, 0.2, 0.4, 0.2, 0.3, 0.2, 1.0]  # cpcv ... format


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


# ---------------------------------------------------------------- GRPO

def test_grpo_one_group_by_hand():
    # mean 3, deviations (-2, -1, 0, 3), sample variance (4 + 1 + 0 + 9) / 3
    std = math.sqrt(14 / 3)
    expected = _t([-2 / (std + EPS), -1 / (std + EPS), 0.0, 3 / (std + EPS)])
    torch.testing.assert_close(grpo_advantages(_t([1, 2, 3, 6])), expected, rtol=0, atol=1e-12)


def test_grpo_groups_are_independent_and_constant_group_is_zero():
    adv = grpo_advantages(_t([[0, 2], [5, 5], [1, 4]]))
    # group (0, 2): mean 1, sample std sqrt(2); group (5, 5): exactly zero; group (1, 4): std sqrt(4.5)
    s2, s45 = math.sqrt(2), math.sqrt(4.5)
    expected = _t([[-1 / (s2 + EPS), 1 / (s2 + EPS)], [0, 0], [-1.5 / (s45 + EPS), 1.5 / (s45 + EPS)]])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-12)
    assert torch.equal(adv[1], torch.zeros(2, dtype=torch.float64))


def test_grpo_constant_group_exactly_zero_even_with_rounding():
    assert torch.equal(grpo_advantages(torch.full((12,), 0.1)), torch.zeros(12))


def test_grpo_scale_none_and_batch():
    r = _t([[0, 2], [1, 4]])
    torch.testing.assert_close(grpo_advantages(r, scale=False), _t([[-1, 1], [-1.5, 1.5]]))
    std_all = torch.tensor([0.0, 2, 1, 4], dtype=torch.float64).std().item()
    torch.testing.assert_close(grpo_advantages(r, scale="batch"),
                               _t([[-1, 1], [-1.5, 1.5]]) / (std_all + EPS))
    with pytest.raises(ValueError):
        grpo_advantages(r, scale="token")


# ---------------------------------------------------------------- GDPO

def test_gdpo_by_hand_constant_channel_contributes_zero():
    channels = _t([[[0, 10], [1, 10], [2, 10]]])  # (1, 3, 2): channel 1 constant
    expected = _t([[-3 / (1 + EPS), 0.0, 3 / (1 + EPS)]])  # channel 0: mean 1, std 1; priority 3
    torch.testing.assert_close(gdpo_advantages(channels, [3.0, 1.0]), expected, rtol=0, atol=1e-12)


def test_gdpo_wide_channel_does_not_drown_core():
    # core channel (0, 0, 3): mean 1, sample std sqrt(3); cost channel (-100, 100, 0) * ... spread 100x wider
    channels = _t([[[0, 100], [0, 300], [3, 200]]])
    s3 = math.sqrt(3)
    expected = _t([[3 * -1 / (s3 + EPS) + -100 / (100 + EPS),
                    3 * -1 / (s3 + EPS) + 100 / (100 + EPS),
                    3 * 2 / (s3 + EPS) + 0.0]])
    adv = gdpo_advantages(channels, [3.0, 1.0])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-12)
    assert adv[0, 2] > 0 > adv[0, 1]  # the best core answer wins although the cost channel is 100x wider
    # plain GRPO on the weighted sum lets the wide channel decide instead
    grpo = grpo_advantages((channels * _t([3.0, 1.0])).sum(-1))
    assert grpo[0, 1] > grpo[0, 2]


def test_gdpo_shapes_and_checks():
    g = torch.Generator().manual_seed(0)
    ch = torch.randn(4, 12, 12, generator=g)
    assert gdpo_advantages(ch, PRIORITIES).shape == (4, 12)
    assert gdpo_advantages(ch[0], PRIORITIES).shape == (12,)
    torch.testing.assert_close(gdpo_advantages(ch, PRIORITIES).sum(1), torch.zeros(4), atol=1e-5, rtol=0)
    with pytest.raises(ValueError):
        gdpo_advantages(ch, [1.0, 2.0])
    bad = ch.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError):
        gdpo_advantages(bad, PRIORITIES)


def test_gdpo_batch_normalize_matches_trl_normalize_then_sum_formula():
    g = torch.Generator().manual_seed(1)
    ch = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    w = _t([2.0, 0.5])
    # TRL 1.16 normalize_then_sum, written out: group z-score per channel, weighted sum, batch z-score
    z = (ch - ch.mean(1, keepdim=True)) / (ch.std(1, keepdim=True) + EPS)
    s = (z * w).sum(-1)
    expected = (s - s.mean()) / (s.std() + EPS)
    torch.testing.assert_close(gdpo_advantages(ch, w, batch_normalize=True), expected)


# ---------------------------------------------------------------- validity projection

def test_enforce_validity_by_hand():
    adv = _t([1.0, 0.5, -0.5, -1.0])
    valid = torch.tensor([False, True, True, True])
    # invalid +1 -> 0; surplus = 0 + 0.5 - 0.5 - 1 = -1 is spread over the 3 valid answers: +1/3 each
    expected = _t([0.0, 0.5 + 1 / 3, -0.5 + 1 / 3, -1.0 + 1 / 3])
    torch.testing.assert_close(enforce_validity(adv, valid), expected, rtol=0, atol=1e-12)


def test_enforce_validity_invalid_negative_untouched_and_all_valid_unchanged():
    adv = _t([[2.0, -1.5, -0.5], [1.0, -1.0, 0.0]])
    valid = torch.tensor([[True, False, True], [True, True, True]])
    out = enforce_validity(adv, valid)
    assert torch.equal(out, adv)  # nothing to fix: invalid is already negative, sums are already 0


def test_enforce_validity_all_invalid_group_is_all_zero():
    adv = _t([[1.0, -1.0, 0.5, -0.5], [3.0, -1.0, -1.0, -1.0]])
    valid = torch.tensor([[False] * 4, [True, False, False, False]])
    out = enforce_validity(adv, valid)
    assert torch.equal(out[0], torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(out[1], adv[1])


def test_enforce_validity_does_not_edit_input():
    adv = _t([1.0, -1.0])
    enforce_validity(adv, torch.tensor([False, True]))
    assert torch.equal(adv, _t([1.0, -1.0]))


@pytest.mark.parametrize("seed", range(200))
def test_projection_properties_random_groups(seed):
    # float64: |A| reaches ~20 here, and a float32 sum of 12 such values carries ~1e-6 rounding by itself
    g = torch.Generator().manual_seed(seed)
    P, G, f64 = 6, 12, torch.float64
    adv = gdpo_advantages(torch.randn(P, G, 12, generator=g, dtype=f64) * torch.rand(12, generator=g, dtype=f64) * 10,
                          PRIORITIES)
    valid = torch.rand(P, G, generator=g) < torch.rand(P, 1, generator=g)  # some groups all valid / all invalid
    valid[0] = False
    valid[1] = True
    core = torch.randn(P, G, generator=g, dtype=f64)
    floor = float(torch.randn(1, generator=g))
    for out, may_win in [(enforce_validity(adv, valid), valid),
                         (advantage_floor(adv, core, floor, valid=valid), valid & (core > floor)),
                         (compute_advantages(torch.randn(P, G, 12, generator=g, dtype=f64), PRIORITIES, valid, core,
                                             floor=floor), valid & (core > floor))]:
        assert (out[~may_win] <= 0).all()                       # rule 1, exact (no tolerance)
        torch.testing.assert_close(out.sum(1), torch.zeros(P, dtype=f64), atol=1e-6, rtol=0)   # rule 2
        silent = ~may_win.any(1)
        assert (out[silent] == 0).all()                         # no admissible answer -> all zero
    torch.testing.assert_close(enforce_validity(adv, valid)[1], adv[1])  # all-valid group untouched


# ---------------------------------------------------------------- advantage floor

def test_floor_at_zero_zeroes_group_where_every_core_is_below_zero():
    adv = _t([[1.5, 0.5, -0.5, -1.5], [1.5, 0.5, -0.5, -1.5]])
    core = _t([[-0.3, -0.1, -2.0, -5.0], [0.4, -0.1, -2.0, -5.0]])
    out = advantage_floor(adv, core, 0.0)
    assert torch.equal(out[0], torch.zeros(4, dtype=torch.float64))
    # second group: only answer 0 clears the floor; answer 1's +0.5 is clamped to 0, the group sum
    # (1.5 + 0 - 0.5 - 1.5 = -0.5) is removed from answer 0 alone: 1.5 + 0.5 = 2.0
    torch.testing.assert_close(out[1], _t([2.0, 0.0, -0.5, -1.5]), rtol=0, atol=1e-12)
    assert nonzero_share(out) == 3 / 8


def test_floor_none_is_a_true_noop():
    adv = _t([[1.5, 0.5, -0.5, -1.5]])
    core = _t([[-1.0, -1.0, -1.0, -1.0]])
    out = advantage_floor(adv, core, None)
    assert out is adv and torch.equal(out, adv)


def test_floor_valid_keeps_invalid_nonpositive():
    adv = _t([-1.0, 2.0, -1.0])
    core = _t([5.0, -1.0, 0.5])      # answer 0 clears the floor but is invalid
    valid = torch.tensor([False, True, True])
    out = advantage_floor(adv, core, 0.0, valid=valid)
    # answer 1 (core -1) is clamped to 0; surplus -2 goes to answer 2 only -> +1
    torch.testing.assert_close(out, _t([-1.0, 0.0, 1.0]))


def test_guard_off_does_not_fall_back_to_a_zero_floor():
    # Part 3 section 7: every core score below 0; with floor=None the signal must survive
    g = torch.Generator().manual_seed(7)
    channels = torch.randn(4, 12, 12, generator=g)
    core = -1.0 - torch.rand(4, 12, generator=g)
    valid = torch.ones(4, 12, dtype=torch.bool)
    assert nonzero_share(compute_advantages(channels, PRIORITIES, valid, core, floor=None)) == 1.0
    assert nonzero_share(compute_advantages(channels, PRIORITIES, valid, core, floor=0.0)) == 0.0
    assert nonzero_share(compute_advantages(channels, PRIORITIES, valid, core, floor=-1e9)) == 1.0


# ---------------------------------------------------------------- telemetry and entry point

def test_nonzero_share():
    assert nonzero_share(_t([0.0, 1e-9, 0.5, -0.2])) == 0.5
    assert nonzero_share(_t([0.0, 1e-9, 0.5, -0.2]), atol=1e-10) == 0.75
    assert nonzero_share(torch.zeros(0)) == 0.0


def test_compute_advantages_modes():
    g = torch.Generator().manual_seed(3)
    channels = torch.randn(2, 12, 12, generator=g, dtype=torch.float64)
    valid = torch.ones(2, 12, dtype=torch.bool)
    core = channels[..., 0]
    w = _t(PRIORITIES)
    torch.testing.assert_close(compute_advantages(channels, PRIORITIES, valid, core, mode="grpo"),
                               grpo_advantages((channels * w).sum(-1)))
    torch.testing.assert_close(compute_advantages(channels, PRIORITIES, valid, core, mode="gdpo"),
                               gdpo_advantages(channels, PRIORITIES))
    with pytest.raises(ValueError):
        compute_advantages(channels, PRIORITIES, valid, core, mode="ppo")
