"""REPO-R shaping, the entropy thermostat and the ADAPO controller."""

from __future__ import annotations

import math

import pytest
import torch

from trainers.repo_r import AdapoController, EntropyThermostat, shape_advantages


# ---------------------------------------------------------------- shaping

def test_shaping_by_hand_signs_and_magnitudes():
    adv = torch.tensor([2.0, -2.0, 0.0])
    logp = torch.tensor([[0.0, math.log(1e-3)]] * 3)
    out = shape_advantages(adv, logp, 0.05)
    k = 0.05 * math.log(1000)  # 0.3454
    expected = torch.tensor([[2.0, 2.0 * (1 + k)],      # good answer: confident token unchanged, rare token x1.345
                             [-2.0, -2.0 * (1 - k)],    # bad answer: rare token blamed x0.655
                             [0.0, 0.0]])
    torch.testing.assert_close(out, expected)
    assert out[0, 1] > out[0, 0] > 0 and out[1, 0] < out[1, 1] < 0  # more credit, less blame, same signs


def test_shaping_reference_numbers():
    # Part 3: at the 0.05 cap a 1-in-1,000 token gets x1.35 or x0.65
    logp = torch.full((1, 1), math.log(1e-3))
    assert shape_advantages(torch.tensor([1.0]), logp, 0.05).item() == pytest.approx(1.35, abs=0.005)
    assert shape_advantages(torch.tensor([-1.0]), logp, 0.05).item() == pytest.approx(-0.65, abs=0.005)


def test_shaping_zeta_zero_is_identity_and_token_advantages_work():
    g = torch.Generator().manual_seed(0)
    adv = torch.randn(4, 5, generator=g)
    logp = -torch.rand(4, 5, generator=g) * 5
    assert torch.equal(shape_advantages(adv, logp, 0.0), adv)
    assert torch.equal(shape_advantages(adv[:, 0], logp, 0.0), adv[:, :1].expand(4, 5))


def test_shaping_never_flips_blame_into_credit():
    # log p = -30 at zeta 0.05: 1 + zeta log p = -0.5 -> clamped to 0, the token is neither blamed nor credited
    out = shape_advantages(torch.tensor([-1.0, 1.0]), torch.tensor([[-30.0], [-30.0]]), 0.05)
    assert out[0, 0].item() == 0.0
    assert out[1, 0].item() == pytest.approx(2.5)


def test_shaping_detaches_logp():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    out = shape_advantages(torch.tensor([1.0]), logp, 0.05)
    assert not out.requires_grad


# ---------------------------------------------------------------- thermostat

CALIBRATION = [1.0, 1.25, 0.75, 1.125, 0.875]  # mean exactly 1.0 (binary-exact values)
TRACE = [0.9, 0.9, 0.9, 0.9, 0.9, 1.1, 1.1, 1.0, 0.95]
# by hand: start 0.005 -> x2 0.01 -> 0.02 -> 0.04 -> 0.08 capped 0.05 -> stays 0.05 -> /2 0.025 -> 0.0125
#          -> equal to target: unchanged 0.0125 -> below: 0.025
EXPECTED = [0.0] * 5 + [0.01, 0.02, 0.04, 0.05, 0.05, 0.025, 0.0125, 0.0125, 0.025]


def test_thermostat_scripted_trace():
    th = EntropyThermostat()
    zetas = [th.update(h) for h in CALIBRATION + TRACE]
    assert zetas == pytest.approx(EXPECTED, abs=1e-15)
    assert th.target == pytest.approx(1.0)
    assert [e["target"] for e in th.log[:4]] == [None] * 4
    assert th.log[4]["target"] == pytest.approx(1.0)
    assert [e["step"] for e in th.log] == list(range(1, 15))
    assert [e["zeta"] for e in th.log] == zetas
    assert th.log[5]["entropy"] == 0.9


def test_thermostat_clamp_and_nonnegative():
    th = EntropyThermostat(target=1.0)  # preset target: no calibration
    zetas = [th.update(0.5) for _ in range(20)]
    assert max(zetas) == 0.05 and zetas[-1] == 0.05
    assert zetas[0] == pytest.approx(0.01)
    zetas = [th.update(2.0) for _ in range(60)]
    assert all(z >= 0.0 for z in zetas) and zetas[-1] < 1e-15
    assert th.update(torch.tensor(0.5)) == pytest.approx(2 * zetas[-1])  # tensors accepted; never restarts at init


def test_thermostat_state_dict_round_trip():
    full = EntropyThermostat()
    zetas_full = [full.update(h) for h in CALIBRATION + TRACE]
    for cut in (3, 5, 6, 10):
        first = EntropyThermostat()
        for h in (CALIBRATION + TRACE)[:cut]:
            first.update(h)
        state = first.state_dict()
        first.update(0.0)  # mutating the original after saving must not touch the saved state
        resumed = EntropyThermostat()
        resumed.load_state_dict(state)
        rest = [resumed.update(h) for h in (CALIBRATION + TRACE)[cut:]]
        assert rest == zetas_full[cut:]
        assert resumed.log == full.log


# ---------------------------------------------------------------- ADAPO

def test_adapo_calibrates_then_moves_within_bounds():
    ctrl = AdapoController()
    assert [ctrl.update(h) for h in CALIBRATION] == [0.28] * 5
    assert ctrl.target == pytest.approx(1.0)
    up = [ctrl.update(0.5) for _ in range(20)]          # entropy below target: raise the upper clip
    assert up[0] == pytest.approx(0.29) and up[1] == pytest.approx(0.30)
    assert max(up) == 0.4 and up[-1] == 0.4
    down = [ctrl.update(1.5) for _ in range(40)]        # above target: lower it
    assert down[0] == pytest.approx(0.39)
    assert min(down) == 0.2 and down[-1] == 0.2
    assert ctrl.update(1.0) == 0.2                       # at target: unchanged
    assert all(0.2 <= e["epsilon_high"] <= 0.4 for e in ctrl.log)


def test_adapo_state_dict_round_trip():
    a = AdapoController(target=1.0)
    for h in (0.5, 0.5, 1.5):
        a.update(h)
    b = AdapoController()
    b.load_state_dict(a.state_dict())
    assert [b.update(h) for h in (0.5, 0.7, 2.0)] == [a.update(h) for h in (0.5, 0.7, 2.0)]
