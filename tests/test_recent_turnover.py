"""The recent turnover floor (`VerifierConfig.min_recent_turnover`): a book that has stopped trading in the last
CPCV block of its window is invalid, however much it traded before. The 2% floor is a mean over the whole window,
so without this rule a book that traded in its first years and is flat since passed it (walk-forward fold 5 on
us46: all 20 of the search control's best by train reward were such books, and none traded on the validation or
test window)."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_gym.market import Panel, synthetic_panel
from alpha_gym.scoring import cpcv
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Evaluated, Verifier

OFF = VerifierConfig(min_recent_turnover=0.0)


def frozen_after(panel: Panel, first: int) -> Panel:
    """The panel with every price field held at its value of session `first - 1` from `first` on: a market where
    nothing moves, so a price-driven book goes flat there (volume keeps moving)."""
    data = {k: v.copy() for k, v in panel.data.items()}
    for k in ("open", "high", "low", "close", "vwap"):
        if k in data:
            data[k][first:] = data[k][first - 1]
    return Panel(data, panel.dates, panel.tickers, source="frozen")


@pytest.mark.parametrize("n, n_blocks", [(1, 6), (5, 6), (6, 6), (7, 6), (600, 6), (601, 6), (1000, 4)])
def test_the_last_block_is_cpcvs_last_block(n, n_blocks):
    x = np.arange(n, dtype=np.float64)
    last = cpcv.splits(max(n, 2 * n_blocks), cpcv.CPCVConfig(n_blocks=n_blocks))  # edges as CPCV cuts them
    edges = np.linspace(0, n, n_blocks + 1).round().astype(int)
    expected = x[edges[-2]:].mean() if edges[-2] < n else x[-1:].mean()
    assert cpcv.last_block_mean(x, n_blocks) == expected
    if n >= 2 * n_blocks:
        assert set(range(edges[-2], n)) <= {int(i) for s in last for i in s.test}
    assert np.isnan(cpcv.last_block_mean(np.array([]), n_blocks))


#: Price-driven books of several shapes: each goes flat where prices stop moving.
PRICE_BOOKS = ["rank(-ts_delta(close, 5))", "rank(close / ts_mean(close, 10))", "-rank(ts_std(returns, 5))",
               "rank(ts_corr(close, open, 10))", "rank(high - low)", "ts_rank(close, 5)",
               "rank(ts_decay_linear(returns, 8))", "-rank(returns)"]


@pytest.mark.parametrize("formula", PRICE_BOOKS)
def test_a_book_flat_in_its_last_block_is_invalid_and_was_valid_without_the_rule(formula):
    base = synthetic_panel(n_stocks=20, n_days=600, seed=5)
    frozen = frozen_after(base, 480)                       # the last block (days 498..597 of 598) is flat
    before = Verifier(frozen, OFF).score_formula(formula)
    after = Verifier(frozen).score_formula(formula)
    assert before.valid, before.reason                    # the whole-window 2% floor let it through
    assert before.diagnostics["turnover"] >= 0.02
    assert not after.valid and "stopped trading" in after.reason
    assert after.diagnostics["recent_turnover"] < 0.01
    assert after.channels["cpcv"] == VerifierConfig().invalid_cpcv("invalid_book")   # an invalid book's penalty
    # the unfrozen market: the same formula keeps its verdict and its book's score bit for bit (channels that
    # read the seed archive may move: an Alpha101 seed book the rule refuses leaves it)
    plain_on, plain_off = Verifier(base).score_formula(formula), Verifier(base, OFF).score_formula(formula)
    assert plain_on.valid == plain_off.valid and plain_on.channels["cpcv"] == plain_off.channels["cpcv"]


def test_the_rule_reads_after_the_whole_window_floor_and_before_the_price_level():
    frozen = frozen_after(synthetic_panel(n_stocks=20, n_days=600, seed=5), 12)    # flat nearly everywhere
    s = Verifier(frozen).score_formula("rank(-ts_delta(close, 5))")
    assert not s.valid and "is below the 2% floor" in s.reason     # the older rule's reason wins


def test_the_setting_is_range_checked():
    with pytest.raises(Exception, match="min_recent_turnover"):
        VerifierConfig(min_recent_turnover=1.5)
    with pytest.raises(Exception, match="min_recent_turnover"):
        VerifierConfig(min_recent_turnover=-0.1)


THRESHOLDS = (20, 30, 40, 50, 60, 80, 100, 150, 200, 300)
SIGNALS = ("rank(-ts_delta(close, 5))", "rank(volume / adv20)", "-rank(ts_std(returns, 10))")


@pytest.mark.real_data
def test_books_that_stop_trading_on_us46_are_refused(real_us46):
    """A generated family on us46: trade a real signal while a stock's yearly mean price is under K, else hold it
    level with every other (prices rose over 2012-2022, so many stop). Before the rule, some were valid with a
    dead last block; after it, none."""
    panel = real_us46.window(None, "2022-08-15")                            # fold 5's search window end
    on, off = Verifier(panel), Verifier(panel, OFF)
    dead_before, admitted_dead = 0, 0
    for k in THRESHOLDS:
        for signal in SIGNALS:
            f = f"(ts_mean(close, 252) < {k}) ? {signal} : 0.5"
            b = off.admit(f)
            if isinstance(b, Evaluated) and b.recent_turnover < 0.01:
                dead_before += 1
            a = on.admit(f)
            if isinstance(a, Evaluated) and a.recent_turnover < 0.01:
                admitted_dead += 1
    assert dead_before > 0          # the family holds books the whole-window floor admitted
    assert admitted_dead == 0


@pytest.mark.real_data
def test_the_alpha101s_on_us46_keep_their_verdicts_but_the_ones_that_stopped_trading(real_us46):
    from alpha_gym.alpha101 import formulas
    on, off = Verifier(real_us46), Verifier(real_us46, OFF)
    changed = []
    for k, f in formulas().items():
        a, b = on.admit(f), off.admit(f)
        if isinstance(a, Evaluated) != isinstance(b, Evaluated):
            changed.append(k)
            assert isinstance(b, Evaluated) and b.recent_turnover < 0.01
    assert len(changed) <= 1        # Alpha#7: it has not traded over the last sixth of 2012-2025 on us46
