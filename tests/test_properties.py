"""Property tests: causality of every formula, and no string a model can write crashes the verifier."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alpha_gym import Verifier
from alpha_gym.scoring.config import CHANNELS, weighted_sum
from alpha_gym.book import weights_from_signal
from alpha_gym.language import parse
from alpha_gym.language.evaluate import evaluate
from alpha_gym.language.sample import random_formula
from alpha_gym.market import Panel


# ---------------------------------------------------------------- causality
def _perturbed(panel: Panel, t: int, rng, mode: str) -> Panel:
    data = {}
    for name, arr in panel.data.items():
        a = arr.copy()
        if mode == "nan":
            a[t + 1:] = np.nan
        elif mode == "huge":
            a[t + 1:] = 1e12
        else:
            a[t + 1:] *= rng.uniform(0.5, 2.0, size=a[t + 1:].shape)
        data[name] = a
    return Panel(data, panel.dates, panel.tickers)


def test_random_formulas_never_look_ahead(small_synthetic):
    """For many random formulas, changing any data after day t never changes a value at or before t."""
    rng = np.random.default_rng(2024)
    panel = small_synthetic
    checked = 0
    for i in range(150):
        formula = random_formula(rng, depth=int(rng.integers(2, 6)))
        node = parse(formula)
        base = evaluate(node, panel)
        t = int(rng.integers(50, panel.n_days - 5))
        mode = ("scale", "nan", "huge")[i % 3]
        other = evaluate(node, _perturbed(panel, t, rng, mode))
        # bit-identical up to and including day t (NaN in the same places)
        np.testing.assert_array_equal(base[: t + 1], other[: t + 1], err_msg=f"{formula} looks ahead ({mode})")
        wa, wb = weights_from_signal(base), weights_from_signal(other)
        np.testing.assert_array_equal(wa[: t + 1], wb[: t + 1])
        checked += 1
    assert checked == 150


@pytest.mark.parametrize("field", ["open", "high", "low", "close", "volume", "returns", "vwap"])
def test_fields_are_causal(small_synthetic, field):
    rng = np.random.default_rng(0)
    t = 200
    a = small_synthetic.field(field)
    b = _perturbed(small_synthetic, t, rng, "scale").field(field)
    np.testing.assert_array_equal(a[: t + 1], b[: t + 1])


# ---------------------------------------------------------------- fuzzing
FRAGMENTS = ["rank(", "ts_mean(", "ts_corr(", "delay(", "scale(", "log(", "close", "volume", "vwap", "returns",
             ")", ",", "+", "-", "*", "/", "?", ":", "<", "&&", "||", "0", "253", "1e9", "1e308", "1e999", "-1",
             ".5", "nan", "inf", "ünï", "\u202e", "\x00", " ", "\n", "adv20", "adv0", "(((", ")))", "^", "=="]


@st.composite
def model_like_answers(draw):
    kind = draw(st.integers(0, 5))
    if kind == 0:
        body = draw(st.text(max_size=80))
    elif kind == 1:
        body = "".join(draw(st.lists(st.sampled_from(FRAGMENTS), max_size=40)))
    elif kind == 2:  # deep nesting
        n = draw(st.integers(10, 400))
        body = draw(st.sampled_from(["abs(", "rank(", "-(", "("])) * n + "close" + ")" * n
    elif kind == 3:  # windows and numbers at and past the edges
        w = draw(st.sampled_from(["0", "-1", "253", "1e9", "2.5", "nan", "1e999", "252", "1", "0.5", "-0"]))
        op = draw(st.sampled_from(["ts_mean", "delay", "ts_rank", "ts_product", "ts_argmax", "ts_kurt"]))
        body = f"{op}(close * {draw(st.floats(allow_nan=False, allow_infinity=False))}, {w})"
    elif kind == 4:  # a real random formula
        seed = draw(st.integers(0, 2**32 - 1))
        body = random_formula(np.random.default_rng(seed), depth=draw(st.integers(1, 6)))
    else:  # long chains
        n = draw(st.integers(100, 300))
        body = " + ".join(["close"] * n)
    wrap = draw(st.integers(0, 3))
    if wrap == 0:
        return body
    if wrap == 1:
        return f"<alpha>{body}</alpha>"
    if wrap == 2:
        return f"<think>{draw(st.text(max_size=20))}</think><alpha>{body}</alpha>"
    return f"<alpha>{body}</alpha><alpha>{body}</alpha>"


@pytest.fixture(scope="module")
def fuzz_verifier(small_synthetic):
    return Verifier(small_synthetic)


@settings(max_examples=10_000, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(answer=model_like_answers())
def test_no_answer_crashes_the_verifier(fuzz_verifier, answer):
    s = fuzz_verifier.score(answer)
    assert isinstance(s.reason, str) and s.reason
    assert math.isfinite(s.reward)
    assert all(math.isfinite(v) for v in s.channels.values()), s.channels
    assert len(s.channels) == len(CHANNELS)
    if not s.valid:
        cfg = fuzz_verifier.config
        assert s.reward in [weighted_sum({**dict.fromkeys(s.channels, 0.0), "cpcv": cfg.invalid_cpcv(kind)},
                                         cfg.priorities) for kind in ("missing_tag", "unparseable", "invalid_book")]
    assert s.reward == weighted_sum(s.channels, fuzz_verifier.config.priorities)  # the contract, for any string
