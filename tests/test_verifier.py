"""The verifier end to end: validity rules, determinism, the holdout guard, real-data checks."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from alpha_gym import Verifier, VerifierConfig
from alpha_gym.scoring.config import weighted_sum
from alpha_gym.market import Panel

NOTHING = "scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))"
ALPHA_101 = "((close - open) / ((high - low) + .001))"


@pytest.fixture(scope="module")
def verifier(small_synthetic):
    return Verifier(small_synthetic)


def test_rewards_of_invalid_answers(verifier):
    cfg = verifier.config
    bound = cfg.valid_reward_bound()
    s = verifier.score("rank(close)")
    assert not s.valid and s.reward == pytest.approx(bound - 1.0) and "no <alpha>" in s.reason
    s = verifier.score("<alpha>rank(close -)</alpha>")
    assert not s.valid and s.reward == pytest.approx(bound - 0.8) and "column" in s.reason
    s = verifier.score("<alpha>ts_mean(delay(close, 200), 100)</alpha>")
    assert not s.valid and s.reward == pytest.approx(bound - 0.8) and "lookback" in s.reason
    assert s.channels["cpcv"] * cfg.priorities["cpcv"] == pytest.approx(s.reward)  # the penalty lives in R1
    assert all(v == 0.0 for k, v in s.channels.items() if k != "cpcv")


def test_reference_invalid_rewards_stay_selectable(small_synthetic):
    v = Verifier(small_synthetic, VerifierConfig.reference())
    for answer, r1 in (("rank(close)", -1.0), ("<alpha>rank(close -)</alpha>", -0.8),
                       ("<alpha>" + NOTHING + "</alpha>", -0.6)):
        s = v.score(answer)
        assert not s.valid and s.channels["cpcv"] == r1 and s.reward == 3.0 * r1  # R1 x its priority


def test_self_cancelling_formula_is_invalid(verifier):
    s = verifier.score_formula(NOTHING)
    assert not s.valid
    assert s.diagnostics["turnover"] == 0.0
    assert "turnover" in s.reason and s.reward == pytest.approx(verifier.config.valid_reward_bound() - 0.6)


def test_valid_score_has_the_documented_fields(verifier):
    s = verifier.score("<alpha>rank(-ts_delta(close, 5))</alpha>")
    assert s.valid and s.reason == "ok"
    assert len(s.diagnostics["cpcv_slices"]) == 15
    for key in ("turnover", "ic", "sharpe"):
        assert np.isfinite(s.diagnostics[key])
    assert s.reward == weighted_sum(s.channels, VerifierConfig().priorities)
    assert set(s.channels) == set(VerifierConfig().priorities) and len(s.channels) == 14
    assert json.loads(json.dumps(s.to_dict()))["valid"] is True


def test_slow_static_tilt_is_invalid(verifier):
    s = verifier.score_formula("rank(ts_mean(close, 250))")
    assert s.diagnostics["turnover"] < 0.02 and not s.valid


def test_score_is_deterministic_within_a_process(verifier):
    a = verifier.score_formula("rank(ts_corr(close, volume, 10))")
    b = verifier.score_formula("rank(ts_corr(close, volume, 10))")
    assert a.to_dict() == b.to_dict()


SCRIPT = """
import json, sys
from alpha_gym import Verifier, synthetic_panel
v = Verifier(synthetic_panel(n_stocks=12, n_days=400, seed=3))
out = [v.score_formula(f).to_dict() for f in sys.argv[1:]]
print(json.dumps(out))
"""


def test_determinism_across_processes():
    formulas = ["rank(-ts_delta(close, 5))", "ts_corr(rank(volume), rank(vwap), 10) * -1", ALPHA_101]
    runs = [subprocess.run([sys.executable, "-c", SCRIPT, *formulas], capture_output=True, text=True, check=True)
            for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout  # bit-identical: JSON floats print every bit (repr)
    assert json.loads(runs[0].stdout)[0]["valid"]


def test_holdout_guard_poisoned_future_leaves_training_scores_unchanged(small_synthetic):
    cut = small_synthetic.dates[299]
    train = small_synthetic.window(end=cut)
    poisoned = {k: v.copy() for k, v in small_synthetic.data.items()}
    for k in poisoned:
        poisoned[k][300::2] = np.nan
        poisoned[k][301::2] = 1e12
    full_poisoned = Panel(poisoned, small_synthetic.dates, small_synthetic.tickers)
    cut_poisoned = full_poisoned.window(end=cut)
    assert cut_poisoned.n_days == 300 and cut_poisoned.dates[-1] == cut
    v_clean, v_poisoned = Verifier(train), Verifier(cut_poisoned)
    for f in ["rank(-ts_delta(close, 5))", ALPHA_101, "ts_rank(volume, 20) - rank(ts_std(returns, 10))"]:
        assert v_clean.score_formula(f).to_dict() == v_poisoned.score_formula(f).to_dict()


def test_verifier_rejects_tiny_panels(small_synthetic):
    from alpha_gym.market import DataError
    with pytest.raises(DataError, match="sessions"):
        Verifier(small_synthetic.head(20))


def test_config_validation():
    from alpha_gym.scoring.config import ConfigError
    with pytest.raises(ConfigError, match="unknown channels"):
        VerifierConfig(priorities={"sharpe": 1.0})
    with pytest.raises(ConfigError):
        VerifierConfig().with_(nonsense=1)


# ------------------------------------------------------------------ real data
@pytest.mark.real_data
def test_alpha_101_is_valid_on_real_us46(real_us46):
    s = Verifier(real_us46).score_formula(ALPHA_101)
    assert s.valid, s.reason
    assert 0.02 <= s.diagnostics["turnover"] <= 2.0
    assert len(s.diagnostics["cpcv_slices"]) == 15


@pytest.mark.real_data
def test_nothing_formula_is_invalid_on_real_us46(real_us46):
    s = Verifier(real_us46).score_formula(NOTHING)
    assert not s.valid and s.diagnostics["turnover"] == 0.0
