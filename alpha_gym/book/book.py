"""From a formula's values to a daily dollar-neutral long-short book and its P&L.

    value at close(t) -> rank across stocks -> subtract the mean -> divide by sum |w|
    -> filled at open(t+1) -> earns open(t+1) -> open(t+2)

Day t of every series below is the day the decision is made (the close of t).
Its return is only known at open(t+2), so the last two sessions of a panel
carry no P&L. A stock whose value is NaN gets zero weight; a day with fewer
than `min_valid` valid stocks is flat.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from alpha_gym.book import metrics
from alpha_gym.book.blocks import row_blocks
from alpha_gym.language.operators import KERNELS


def _weight_rows(signal: np.ndarray, min_valid: int, ranked: bool, out: np.ndarray) -> np.ndarray:
    """`weights_from_signal` of a block of rows, written into `out`; returns which rows trade."""
    ranks = signal if ranked else KERNELS["rank"](signal)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = ranks.sum(axis=1, keepdims=True)
        if np.isfinite(total).all():  # the common block, no NaN: the same arithmetic without the masks
            n_valid = np.full((len(ranks), 1), ranks.shape[1])
            centred = ranks - total / n_valid
        else:
            valid = ~np.isnan(ranks)
            n_valid = valid.sum(axis=1, keepdims=True)
            filled = np.where(valid, ranks, 0.0)
            centred = np.where(valid, filled - filled.sum(axis=1, keepdims=True) / n_valid, 0.0)
        np.abs(centred, out=out)
        gross = out.sum(axis=1, keepdims=True)
        np.divide(centred, gross, out=out)
        trades = ((gross > 1e-12) & (n_valid >= min_valid))[:, 0]
        out[~trades] = 0.0
    return trades


def weights_from_signal(signal: np.ndarray, min_valid: int = 5, ranked: bool = False,
                        n_rows: int | None = None) -> np.ndarray:
    """Dollar-neutral weights with gross exposure 1 (0.5 long, 0.5 short) on every traded day.

        w_{t,i} = (rank_{t,i} - mean_t(rank)) / sum_i |rank_{t,i} - mean_t(rank)|

    Days with fewer than `min_valid` valid stocks, or where every valid stock
    ties, are flat (all weights 0). `ranked=True` says the signal is already the
    output of `rank` (a formula whose root is rank): ranking is idempotent bit for
    bit (same order, same ties, same arithmetic), so the second rank is skipped.
    `n_rows`: only the first rows (each row depends on its own day only).
    Computed in cache-sized blocks of rows.
    """
    signal = np.asarray(signal, dtype=np.float64)
    n = signal.shape[0] if n_rows is None else n_rows
    out = np.empty((n,) + signal.shape[1:])
    for r0, r1 in row_blocks(n, signal.shape[1]):
        _weight_rows(signal[r0:r1], min_valid, ranked, out[r0:r1])
    return out


def open_to_open_returns(open_: np.ndarray) -> np.ndarray:
    """r_{t,i} = open_{t+2,i} / open_{t+1,i} - 1: what a position decided at close(t) earns. NaN for the last 2 days."""
    out = np.full_like(open_, np.nan, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[:-2] = open_[2:] / open_[1:-1] - 1.0
    out[~np.isfinite(out)] = np.nan
    return out


def gross_pnl(weights: np.ndarray, returns: np.ndarray) -> np.ndarray:
    """gross_t = sum_i w_{t,i} r_{t,i}, a missing return earning nothing: the book's P&L before costs."""
    return np.where(np.isnan(returns), 0.0, weights * returns).sum(axis=1)


def daily_turnover(weights: np.ndarray) -> np.ndarray:
    """turnover_t = sum_i |w_{t,i} - w_{t-1,i}| (w_{-1} = 0): the share of the book traded on day t."""
    prev = np.vstack([np.zeros((1, weights.shape[1])), weights[:-1]])
    return np.abs(weights - prev).sum(axis=1)


@dataclass(frozen=True, eq=False)
class ForwardReturns:
    """The (n, N) returns the books of one panel earn, with what every book computes of them alone:
    the returns with a missing one as 0 (it earns nothing) and their centred form for the daily IC.
    Built once per panel (`ForwardReturns.of`) and shared by its books; the numbers are unchanged."""

    returns: np.ndarray
    earned: np.ndarray
    centred: metrics.CentredReturns

    @classmethod
    def of(cls, returns: np.ndarray) -> "ForwardReturns":
        r = np.asarray(returns, dtype=np.float64)
        return cls(r, np.where(np.isnan(r), 0.0, r), metrics.CentredReturns.of(r))


@dataclass(frozen=True, eq=False)
class Book:
    """A book's weights and daily series over the decision days that have a realised return.

    weights: (n, N); gross, cost, net, turnover: (n,); returns: the (n, N)
    open-to-open returns the weights earn; n = panel days - 2.
    """

    weights: np.ndarray | None
    returns: np.ndarray
    gross: np.ndarray
    turnover: np.ndarray
    cost: np.ndarray
    dates: np.ndarray
    traded: np.ndarray | None = None  # (n,) bool: the book holds a position that day
    daily_ic: np.ndarray | None = None  # (n,) cross-sectional IC of each day, and whether it counts
    ic_counts: np.ndarray | None = None

    @property
    def net(self) -> np.ndarray:
        return self.gross - self.cost

    @property
    def traded_days(self) -> int:
        """Decision days with a position."""
        traded = self.traded if self.traded is not None else np.abs(self.weights).sum(axis=1) > 0
        return int(traded.sum())

    def information_coefficient(self) -> float:
        """`metrics.information_coefficient(weights, returns)`, from the daily values `build_book` computed."""
        if self.daily_ic is None:
            return metrics.information_coefficient(self.weights, self.returns)
        return metrics.mean_ic(self.daily_ic, self.ic_counts)

    def light(self) -> "Book":
        """This book without its (days x stocks) weights, for keeping many books at once (a scored group)."""
        return replace(self, weights=None)


def build_book(signal: np.ndarray, open_: np.ndarray, dates: np.ndarray, cost_fn, min_valid: int = 5,
               returns: "np.ndarray | ForwardReturns | None" = None, ranked: bool = False) -> Book:
    """Weights, gross P&L, turnover and costs for a signal. `cost_fn(weights, turnover) -> (n,)`.

    `returns` may be passed to reuse `open_to_open_returns(open_)` across formulas (as the array,
    or as `ForwardReturns.of(it)` to reuse what every book computes of it too);
    `ranked`: the signal is already a `rank` output (see `weights_from_signal`).
    Weights, P&L and turnover are computed together on cache-sized blocks of rows
    (the same numbers as `weights_from_signal` and `daily_turnover` on the whole array).
    """
    signal = np.asarray(signal, dtype=np.float64)
    if not isinstance(returns, ForwardReturns):
        returns = ForwardReturns.of(open_to_open_returns(open_)[:-2] if returns is None else returns)
    r = returns.returns
    n, n_stocks = signal.shape[0] - 2, signal.shape[1]
    w = np.empty((n, n_stocks))
    gross, turnover, traded = np.empty(n), np.empty(n), np.empty(n, dtype=bool)
    daily_ic, ic_counts = np.empty(n), np.empty(n, dtype=bool)
    zero_row = np.zeros((1, n_stocks))
    for r0, r1 in row_blocks(n, n_stocks):  # every temporary of a block stays in cache
        wb, rb = w[r0:r1], r[r0:r1]
        traded[r0:r1] = _weight_rows(signal[r0:r1], min_valid, ranked, wb)  # (a traded row has a non-zero weight)
        gross[r0:r1] = (wb * returns.earned[r0:r1]).sum(axis=1)  # = gross_pnl(wb, rb)
        change = wb - (w[r0 - 1:r1 - 1] if r0 else np.vstack([zero_row, w[:r1 - 1]]))
        turnover[r0:r1] = np.abs(change, out=change).sum(axis=1)
        daily_ic[r0:r1], ic_counts[r0:r1] = metrics.daily_ic(wb, rb, returns.centred.rows(r0, r1))
    cost = cost_fn(w, turnover)
    return Book(weights=w, returns=r, gross=gross, turnover=turnover, cost=cost, dates=dates[:-2], traded=traded,
                daily_ic=daily_ic, ic_counts=ic_counts)
