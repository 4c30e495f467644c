"""Reward-hack regression suite: every row of the reference's hack log, replayed on the real us46 panel.

Each case is (hack, honest answer, hack answers, expectation). The hack answers
are scored in one group with the honest answer, as in training; the
expectation says how the hack must lose. Add a row to HACKS to extend the suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from alpha_gym import Verifier
from alpha_gym.book import metrics

pytestmark = pytest.mark.real_data

#: An honest formula of the reference's shipped model (train CPCV 0.95 there).
HONEST = "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))"


def tag(f: str) -> str:
    return f"<alpha>{f}</alpha>"


#: Other honest, mutually distinct answers that fill a group.
PEERS = ("rank(ts_std(volume / (high - low), 34))", "rank(ts_std(volume, 8) / ts_std(close, 8))")


@dataclass(frozen=True)
class Hack:
    name: str
    answers: tuple[str, ...]
    #: "beaten": every hack answer scores below the honest answer in one group;
    #: "invalid": every hack answer is invalid (and beaten);
    #: "penalised": in a group with the honest peers, each hack answer earns less than the
    #:              first of them would alone, and pays on R8 or R9.
    expectation: str


HACKS = [
    # Jul 4: all answers collapsed onto one formula.
    Hack("identical answers in a group", tuple(tag(HONEST) for _ in range(4)), "penalised"),
    # Jul 5: different code, same book.
    Hack("different code, same book", (tag(HONEST), tag(f"({HONEST}) * 2"),
                                       tag("rank(2 * (ts_max(volume / vwap, 11) / ts_mean(close, 21)))")), "penalised"),
    # Jul 6: a slow static price-level tilt with IC about 0.
    Hack("slow static price-level tilt", (tag("rank(ts_mean(close, 200))"), tag("rank(close)"),
                                          tag("rank(ts_mean(vwap, 120))")), "beaten"),
    # Jul 6 re-spelled (issue 41.2): the static price-level tilt nudged over the 2% floor by noise.
    Hack("price-level tilt nudged over the turnover floor",
         (tag("rank(close - 2 * open)"), tag("scale(vwap - 2 * open)"), tag("rank(-close) + 0.1 * rank(-returns)")),
         "invalid"),
    # Jul 7: a high-CPCV book trading under 2% a day.
    Hack("high-CPCV book trading under 2% a day", (tag("rank(ts_mean(volume, 100) / ts_mean(close, 100))"),),
         "invalid"),
    # Jul 9: one template with jittered windows.
    Hack("one template with jittered windows", tuple(tag(f"rank(ts_max(volume / vwap, {w}) / ts_mean(close, 21))")
                                                     for w in (9, 11, 12, 13)), "penalised"),
    # Jul 10: invalid answers.
    Hack("invalid answers", ("rank(close)", tag("rank(close -)"), tag("ts_mean(delay(close, 200), 100)"),
                             tag("scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))")),
         "invalid"),
]


@pytest.fixture(scope="module")
def verifier(real_us46):
    return Verifier(real_us46)


def _table(scores):
    return [(s.formula, s.valid, round(s.reward, 3)) for s in scores]


@pytest.mark.parametrize("hack", HACKS, ids=[h.name for h in HACKS])
def test_hack_does_not_win(verifier, hack):
    peers = [tag(p) for p in PEERS]
    if hack.expectation == "penalised":
        alone = verifier.score_group([*peers, hack.answers[0]]).scores[-1]
        group = verifier.score_group([*peers, *hack.answers]).scores[len(peers):]
        for s in group:
            assert s.valid and s.reward < alone.reward, (_table(group), alone.reward)
            assert s.channels["novelty_pnl"] < 0 or s.channels["novelty_syntax"] < 0, s.channels
        return
    group = verifier.score_group([tag(HONEST), *hack.answers]).scores
    assert group[0].valid, group[0].reason
    assert all(group[0].reward > s.reward for s in group[1:]), _table(group)
    if hack.expectation == "invalid":
        assert not any(s.valid for s in group[1:]), _table(group)


def test_next_open_fill_removes_the_same_close_edge(verifier, real_us46):
    """Aug 9: signal and fill on the same close is a subtle look-ahead.

    If the weights set from close(t) were credited with the move INTO close(t)
    (signal and fill on the same close, off by one), a formula that ranks by
    today's return would look like a money machine. Filled at the next open and
    earning open(t+1) -> open(t+2), as the book is, the edge is gone.
    """
    from alpha_gym.book import weights_from_signal
    from alpha_gym.language import parse
    from alpha_gym.language.evaluate import evaluate
    node = parse("rank(returns)")
    w = weights_from_signal(evaluate(node, real_us46))
    same_close = np.nan_to_num(real_us46.field("returns"))        # the return that ends at close(t)
    sr_same_close = metrics.sharpe((w * same_close).sum(axis=1))
    sr_next_open = metrics.sharpe(verifier.book(node).gross)
    assert sr_same_close > 10, sr_same_close
    assert abs(sr_next_open) < 1.5, sr_next_open
    assert not verifier.score_formula("rank(returns)").channels["cpcv"] > 1.0


def test_honest_formulas_reproduce_the_reference(verifier):
    """The reference's shipped answers, scored on the same window, land near its published train CPCV and turnover."""
    published = {  # formula: (train CPCV, turnover a day) from the reference's table
        "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))": (0.95, 0.031),
        "rank(ts_std(volume / (high - low), 34))": (0.82, 0.023),
        "rank(ts_std(volume, 8) / ts_std(close, 8))": (0.59, 0.149),
    }
    for formula, (cpcv_ref, turnover_ref) in published.items():
        s = verifier.score_formula(formula)
        assert s.valid
        assert abs(s.channels["cpcv"] - cpcv_ref) < 0.3, (formula, s.channels["cpcv"])
        assert abs(s.diagnostics["turnover"] - turnover_ref) < 0.01, (formula, s.diagnostics["turnover"])
