"""What an answer adds to a correlation-capped book (issue 39, item 2): the rule, its properties, its speed path."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_gym.evaluation.book_gain import BookGain, book_gain
from alpha_gym.evaluation.selection import Candidate, select_correlation_capped
from alpha_gym.scoring import cpcv

DAYS = 2000


def _cpcv(pnl) -> float:
    test, _ = cpcv.slice_sharpes(np.asarray(pnl, dtype=np.float64))
    return cpcv.cpcv_score(test)


def _cand(name: str, pnl: np.ndarray, turnover: float = 0.1) -> Candidate:
    return Candidate(name, _cpcv(pnl), turnover, pnl)


def _stream(rng, drift: float = 4e-4) -> np.ndarray:
    return drift + 0.01 * rng.standard_normal(DAYS)


def _naive(candidates, answer, metric="cpcv"):
    """The rule read literally: run the selector without and with the answer, score both books."""
    def value(sel):
        if not sel.n:
            return 0.0
        return _cpcv(sel.returns) if metric == "cpcv" else sel.sharpe
    before = select_correlation_capped(list(candidates))
    after = select_correlation_capped(list(candidates) + [answer])
    return after.members, value(after) - value(before)


@pytest.fixture(scope="module")
def book():
    rng = np.random.default_rng(0)
    return [_cand(f"m{k}", _stream(rng, 3e-4 + 1e-4 * k)) for k in range(3)]


def test_a_copy_of_a_member_adds_exactly_zero(book):
    rule = BookGain(book)
    for name in ("a_copy", "m1", "z_copy"):            # it sorts before, level with and after the member
        g = rule.gain(Candidate(name, book[1].cpcv, book[1].turnover, book[1].pnl.copy()))
        assert g.gain == 0.0 and len(g.members) == 3


def test_an_uncorrelated_positive_answer_adds_more_than_zero(book):
    rng = np.random.default_rng(1)
    answer = _cand("new", _stream(rng, 5e-4))
    g = BookGain(book).gain(answer)
    assert g.admitted and g.gain > 0 and g.joined == ("new",) and g.left == ()
    assert max(abs(np.corrcoef(answer.pnl, m.pnl)[0, 1]) for m in book) < 0.1


def test_a_better_near_copy_replaces_the_member_and_adds_the_difference(book):
    rng = np.random.default_rng(2)
    member = book[0]
    near = _cand("near", member.pnl + 4e-4 + 0.004 * rng.standard_normal(DAYS))
    assert np.corrcoef(near.pnl, member.pnl)[0, 1] > 0.5 and near.cpcv > member.cpcv
    alone = book_gain([member], near)                   # a one-member book: the difference of the two answers
    assert alone.left == ("m0",) and alone.joined == ("near",)
    assert alone.gain == pytest.approx(near.cpcv - member.cpcv, abs=1e-12)
    g = BookGain(book).gain(near)                       # in a bigger book: the two books' difference
    swapped = [near if m is member else m for m in book]
    expected = (_cpcv(select_correlation_capped(swapped).returns) - _cpcv(select_correlation_capped(book).returns))
    assert g.left == ("m0",) and g.gain == pytest.approx(expected, abs=1e-12) and g.gain > 0


def test_a_worse_near_copy_or_a_slow_answer_is_refused_and_adds_zero(book):
    rng = np.random.default_rng(3)
    worse = _cand("worse", book[2].pnl - 3e-4 + 0.004 * rng.standard_normal(DAYS))
    slow = _cand("slow", _stream(rng, 8e-4), turnover=0.01)
    for answer in (worse, slow):
        g = BookGain(book).gain(answer)
        assert not g.admitted and g.gain == 0.0 and g.left == ()


def test_an_entering_answer_can_let_in_a_candidate_its_member_had_refused():
    rng = np.random.default_rng(4)
    base, other = rng.standard_normal(DAYS), rng.standard_normal(DAYS)
    a = _cand("a", 5e-4 + 0.01 * (base + 0.9 * other) / 1.35)
    b = _cand("b", 3e-4 + 0.01 * other)                  # refused: correlated with a
    x = _cand("x", 9e-4 + 0.01 * base)                   # correlated with a, not with b
    assert x.cpcv > a.cpcv > b.cpcv
    rule = BookGain([a, b])
    assert rule.member_names == ("a",)
    g = rule.gain(x)
    assert g.members == ("x", "b") and g.left == ("a",) and g.joined == ("x", "b")
    members, gain = _naive([a, b], x)
    assert g.members == members and g.gain == pytest.approx(gain, abs=1e-12)


def test_an_empty_book_gains_the_answers_own_cpcv_as_the_verifier_scores_it(small_synthetic):
    from alpha_gym.scoring.verifier import Verifier
    v = Verifier(small_synthetic)
    ev = v.evaluate("rank(ts_std(volume, 20) / ts_mean(volume, 20))")
    g = BookGain([], cpcv_config=v.config.cpcv).gain(Candidate.from_evaluated(ev))
    assert g.admitted and g.before == 0.0 and g.gain == pytest.approx(ev.cpcv, abs=1e-12)
    twin = Candidate.from_evaluated(v.evaluate("rank(ts_std(volume, 20) / ts_mean(volume, 20))"))
    assert BookGain([Candidate.from_evaluated(ev)]).gain(twin).gain == 0.0


@pytest.mark.parametrize("metric", ["cpcv", "sharpe"])
def test_the_fast_path_is_the_rule_read_literally_and_deterministic(metric):
    rng = np.random.default_rng(5)
    factors = rng.standard_normal((6, DAYS))
    def mixed(name):       # candidates sharing factors: a web of correlations above and below the cap
        w = rng.standard_normal(6) * (rng.random(6) < 0.4)
        return _cand(name, rng.uniform(-2e-4, 8e-4) + 0.01 * (w @ factors + rng.standard_normal(DAYS)) / 2,
                     turnover=float(rng.choice([0.01, 0.05, 0.2])))
    pool = [mixed(f"c{k:02d}") for k in range(30)]
    answers = [mixed(f"a{k:02d}") for k in range(25)]
    rule = BookGain(pool, metric=metric)
    shuffled = BookGain([pool[i] for i in rng.permutation(len(pool))], metric=metric)
    for answer, g, again in zip(answers, rule.gains(answers), shuffled.gains(answers)):
        members, gain = _naive(pool, answer, metric)
        assert g.members == members and g.gain == pytest.approx(gain, abs=1e-12)
        assert (g.gain, g.members) == (again.gain, again.members)                 # bit-identical, any input order
    assert sum(g.admitted for g in rule.gains(answers)) >= 3 and any(g.left for g in rule.gains(answers))


def test_bad_input_is_named():
    rng = np.random.default_rng(6)
    with pytest.raises(ValueError, match="metric"):
        BookGain([], metric="return")
    with pytest.raises(ValueError, match="differ in length"):
        BookGain([_cand("a", _stream(rng)), Candidate("b", 0.1, 0.1, np.zeros(DAYS - 1))])
    with pytest.raises(ValueError, match="1999 days"):
        BookGain([_cand("a", _stream(rng))]).gain(Candidate("b", 0.1, 0.1, np.zeros(DAYS - 1)))
