"""The book, costs, metrics and CPCV on hand-built examples."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_gym.book import (RealisticCosts, TrainingCosts, build_book, daily_turnover, metrics,
                            open_to_open_returns, realistic_cost, training_cost, weights_from_signal)
from alpha_gym.scoring import cpcv


# ------------------------------------------------------------- the 3-stock book
def test_three_stock_book_by_hand():
    # Signal at close(t): stock B best, then A, then C on day 0; on day 1 the order flips.
    signal = np.array([[2.0, 3.0, 1.0],
                       [1.0, 2.0, 3.0],
                       [1.0, 2.0, 3.0],
                       [1.0, 2.0, 3.0]])
    open_ = np.array([[10.0, 20.0, 30.0],
                      [10.0, 20.0, 30.0],   # fill for day-0 decisions
                      [11.0, 19.0, 30.0],   # day-0 positions earn open(1)->open(2)
                      [11.0, 19.0, 33.0]])
    dates = np.arange(4).astype("datetime64[D]")
    w = weights_from_signal(signal, min_valid=2)
    # ranks day 0: A 0.5, B 1, C 0 -> centred 0, +0.5, -0.5 -> gross 1 -> 0, +0.5, -0.5
    np.testing.assert_allclose(w[0], [0.0, 0.5, -0.5])
    np.testing.assert_allclose(w[1], [-0.5, 0.0, 0.5])
    assert np.allclose(w.sum(axis=1), 0) and np.allclose(np.abs(w).sum(axis=1), 1)

    book = build_book(signal, open_, dates, lambda w, to: training_cost(to), min_valid=2)
    assert book.weights.shape == (2, 3)  # the last two days have no realised return
    # day 0 earns open(1)->open(2): A +10%, B -5%, C 0%  -> 0*0.1 + 0.5*(-0.05) - 0.5*0 = -0.025
    # day 1 earns open(2)->open(3): A 0%, B 0%, C +10%   -> 0.5 * 0.1 = +0.05
    np.testing.assert_allclose(book.gross, [-0.025, 0.05])
    # turnover: entering from flat costs 1.0, then |(-0.5-0)| + |0-0.5| + |0.5+0.5| = 2.0
    np.testing.assert_allclose(book.turnover, [1.0, 2.0])
    np.testing.assert_allclose(book.cost, [4e-4, 8e-4])
    np.testing.assert_allclose(book.net, book.gross - book.cost)


def test_nan_gets_zero_weight_and_too_few_valid_is_flat():
    signal = np.array([[1.0, np.nan, 3.0, 2.0], [np.nan, np.nan, 1.0, np.nan]])
    w = weights_from_signal(signal, min_valid=3)
    assert w[0, 1] == 0 and np.isclose(w[0].sum(), 0) and np.isclose(np.abs(w[0]).sum(), 1)
    assert np.all(w[1] == 0)


def test_all_ties_is_flat():
    w = weights_from_signal(np.ones((3, 5)))
    assert np.all(w == 0)


@pytest.mark.parametrize("block_rows", [16, None])
def test_book_with_shared_returns_is_bit_identical_to_the_plain_functions(block_rows, monkeypatch):
    """build_book reads the returns' side of the daily IC and the 0-filled returns from
    `ForwardReturns` (built once per panel); every series must equal, bit for bit, what the
    plain functions compute, on rows where the shortcut applies and where it does not
    (a signal NaN where the return is known, a missing return, a flat day, a tie at the mean)."""
    from alpha_gym.book.book import ForwardReturns, gross_pnl
    rng = np.random.default_rng(5)
    T, N = 400, 38  # even: no stock sits exactly at the mean rank (a zero weight) on a full day
    open_ = 50.0 * np.exp(np.cumsum(rng.normal(0, 0.02, (T, N)), axis=0))
    open_[:30, :4] = np.nan                     # stocks that list later: no return, no signal
    open_[200:210, 7] = np.nan                  # a gap in one stock's prices
    signal = rng.standard_normal((T, N))
    signal[:30, :4] = np.nan
    signal[100:140, 9] = np.nan                 # a signal missing where the return is known
    signal[150] = 1.0                           # a flat day
    signal[160, :3] = [0.0, 1.0, -1.0]          # ...
    dates = np.arange(T).astype("datetime64[D]")
    if block_rows:  # small blocks: some take the shortcut, some do not
        monkeypatch.setattr("alpha_gym.book.blocks.BLOCK_CELLS", block_rows * N)
    r = open_to_open_returns(open_)[:-2]
    cost = lambda w, to: training_cost(to)  # noqa: E731
    shared = build_book(signal, open_, dates, cost, returns=ForwardReturns.of(r))
    plain = build_book(signal, open_, dates, cost)
    w = weights_from_signal(signal, n_rows=T - 2)
    daily, counts = metrics.daily_ic(w, r)
    same = lambda a, b: np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))  # noqa: E731
    for book in (shared, plain):
        assert same(book.weights, w)
        assert same(book.gross, gross_pnl(w, r))
        assert same(book.turnover, daily_turnover(w))
        assert np.array_equal(book.traded, np.abs(w).sum(axis=1) > 0) and not book.traded[150]
        assert np.array_equal(book.ic_counts, counts)
        assert same(book.daily_ic[counts], daily[counts])
    known = metrics.CentredReturns.of(r)
    full = known.count == np.count_nonzero(np.isfinite(r) & (w != 0), axis=1)  # rows the shortcut serves
    assert full[250:].all() and full[195:215].all() and not np.isfinite(r[195:215]).all() and not full.all()
    for r0, r1 in [(0, T - 2), (250, T - 2), (195, 215)]:  # the general path, the shortcut, it with a gap
        got, use = metrics.daily_ic(w[r0:r1], r[r0:r1], known.rows(r0, r1))
        assert np.array_equal(use, counts[r0:r1]) and same(got[use], daily[r0:r1][use])


def test_open_to_open_returns_alignment():
    open_ = np.array([[1.0], [2.0], [4.0], [2.0]])
    r = open_to_open_returns(open_)
    np.testing.assert_allclose(r[:2, 0], [1.0, -0.5])
    assert np.isnan(r[2:]).all()


def test_daily_turnover_counts_entry():
    w = np.array([[0.5, -0.5], [0.5, -0.5], [-0.5, 0.5]])
    np.testing.assert_allclose(daily_turnover(w), [1.0, 0.0, 2.0])


# ----------------------------------------------------------------------- costs
def test_training_cost_is_3_5_bps_plus_fixed_impact():
    c = TrainingCosts()
    assert c.fee_bps + c.slippage_bps + c.half_spread_bps == 3.5
    assert training_cost(np.array([1.0]), TrainingCosts(impact_bps=0.0))[0] == pytest.approx(3.5e-4)
    assert training_cost(np.array([0.5]))[0] == pytest.approx(0.5 * 4e-4)


def test_realistic_cost_by_hand():
    w = np.array([[0.5, -0.5]])
    V = np.array([[1e8, 1e6]])       # dollar volume
    sigma = np.array([[0.02, 0.04]])
    c = RealisticCosts(book_size=1e6, fee_bps=2, half_spread_bps=1, impact_coef=1.0, max_participation=0.01,
                       capacity_penalty=1.0, borrow_bps_per_year=50)
    got = realistic_cost(w, V, sigma, c)[0]
    q, Q = 0.5, 5e5
    p1, p2 = Q / 1e8, Q / 1e6
    impact = q * (3e-4 + 0.02 * np.sqrt(p1)) + q * (3e-4 + 0.04 * np.sqrt(p2))
    capacity = q * max(0, p1 - 0.01) + q * max(0, p2 - 0.01)
    borrow = 50e-4 / 252 * 0.5
    assert got == pytest.approx(impact + capacity + borrow, rel=1e-12)


def test_realistic_cost_is_harsher_than_training_for_a_small_cap():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(50, 10))
    w -= w.mean(1, keepdims=True)
    w /= np.abs(w).sum(1, keepdims=True)
    to = daily_turnover(w)
    real = realistic_cost(w, np.full(w.shape, 2e7), np.full(w.shape, 0.02))
    assert real.sum() > training_cost(to).sum()


# --------------------------------------------------------------------- metrics
def test_metrics_by_hand():
    r = np.array([0.01, -0.02, 0.03, 0.0])
    assert metrics.sharpe(r) == pytest.approx(r.mean() / r.std(ddof=1) * np.sqrt(252))
    assert metrics.total_return(r) == pytest.approx(1.01 * 0.98 * 1.03 - 1)
    assert metrics.max_drawdown(r) == pytest.approx(-0.02)
    assert metrics.sharpe(np.zeros(10)) == 0.0
    m = np.array([0.01, 0.02, -0.01, 0.0])
    beta, corr = metrics.beta_and_correlation(2 * m + 0.001, m)
    assert beta == pytest.approx(2.0) and corr == pytest.approx(1.0)


def test_information_coefficient_sign():
    rng = np.random.default_rng(1)
    r = rng.normal(size=(100, 20))
    assert metrics.information_coefficient(r, r) == pytest.approx(1.0)
    assert metrics.information_coefficient(-r, r) == pytest.approx(-1.0)
    assert metrics.information_coefficient(np.zeros_like(r), r) == 0.0


# ------------------------------------------------------------------------ CPCV
def test_cpcv_has_15_slices_covering_each_block_5_times():
    sp = cpcv.splits(600)
    assert len(sp) == 15
    counts = np.zeros(600, int)
    for s in sp:
        counts[s.test] += 1
        assert len(s.test) == 200
        assert not set(s.test) & set(s.train)
    assert np.all(counts == 5)


def test_cpcv_purge_and_embargo_positions():
    sp = {s.blocks: s for s in cpcv.splits(600)}
    s = sp[(1, 3)]  # blocks of 100 days: test = 100..199 and 300..399
    train = set(s.train.tolist())
    # purge: 10 sessions before each test block; embargo: 5 sessions after each
    assert all(d not in train for d in range(90, 100))
    assert 89 in train
    assert all(d not in train for d in range(200, 205))
    assert 205 in train
    assert all(d not in train for d in range(290, 300)) and 289 in train
    assert all(d not in train for d in range(400, 405)) and 405 in train
    assert len(train) == 400 - 10 - 5 - 10 - 5


def test_cpcv_worked_examples():
    assert cpcv.cpcv_score(np.full(15, 0.8)) == pytest.approx(0.8)
    mixed = np.array([3.0] * 3 + [-0.2] * 12)
    assert mixed.mean() == pytest.approx(0.44)
    assert cpcv.cpcv_score(mixed) == pytest.approx(-0.20, abs=1e-12)


def test_slice_sharpes_match_direct_computation():
    rng = np.random.default_rng(2)
    pnl = rng.normal(0.0005, 0.01, size=900)
    test, train = cpcv.slice_sharpes(pnl)
    for s, t_sr, i_sr in zip(cpcv.splits(900), test, train):
        assert t_sr == pytest.approx(metrics.sharpe(pnl[s.test]))
        assert i_sr == pytest.approx(metrics.sharpe(pnl[s.train]))
