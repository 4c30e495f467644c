"""From a formula's values to a daily dollar-neutral long-short book and its P&L.

    value at close(t) -> rank across stocks -> subtract the mean -> divide by sum |w|
    -> filled at open(t+1) -> earns open(t+1) -> open(t+2)

Day t of every series below is the day the decision is made (the close of t).
Its return is only known at open(t+2), so the last two sessions of a panel
carry no P&L. A stock whose value is NaN gets zero weight; a day with fewer
than `min_valid` valid stocks is flat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alpha_gym.language.ops import KERNELS


def weights_from_signal(signal: np.ndarray, min_valid: int = 5) -> np.ndarray:
    """Dollar-neutral weights with gross exposure 1 (0.5 long, 0.5 short) on every traded day.

        w_{t,i} = (rank_{t,i} - mean_t(rank)) / sum_i |rank_{t,i} - mean_t(rank)|

    Days with fewer than `min_valid` valid stocks, or where every valid stock
    ties, are flat (all weights 0).
    """
    ranks = KERNELS["rank"](np.asarray(signal, dtype=np.float64))
    valid = ~np.isnan(ranks)
    n_valid = valid.sum(axis=1, keepdims=True)
    filled = np.where(valid, ranks, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        centred = np.where(valid, filled - filled.sum(axis=1, keepdims=True) / n_valid, 0.0)
        gross = np.abs(centred).sum(axis=1, keepdims=True)
        w = np.where((gross > 1e-12) & (n_valid >= min_valid), centred / gross, 0.0)
    return w


def open_to_open_returns(open_: np.ndarray) -> np.ndarray:
    """r_{t,i} = open_{t+2,i} / open_{t+1,i} - 1: what a position decided at close(t) earns. NaN for the last 2 days."""
    out = np.full_like(open_, np.nan, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[:-2] = open_[2:] / open_[1:-1] - 1.0
    out[~np.isfinite(out)] = np.nan
    return out


def daily_turnover(weights: np.ndarray) -> np.ndarray:
    """turnover_t = sum_i |w_{t,i} - w_{t-1,i}| (w_{-1} = 0): the share of the book traded on day t."""
    prev = np.vstack([np.zeros((1, weights.shape[1])), weights[:-1]])
    return np.abs(weights - prev).sum(axis=1)


@dataclass(frozen=True, eq=False)
class Book:
    """A book's weights and daily series over the decision days that have a realised return.

    weights: (n, N); gross, cost, net, turnover: (n,); returns: the (n, N)
    open-to-open returns the weights earn; n = panel days - 2.
    """

    weights: np.ndarray
    returns: np.ndarray
    gross: np.ndarray
    turnover: np.ndarray
    cost: np.ndarray
    dates: np.ndarray

    @property
    def net(self) -> np.ndarray:
        return self.gross - self.cost


def build_book(signal: np.ndarray, open_: np.ndarray, dates: np.ndarray, cost_fn, min_valid: int = 5,
               returns: np.ndarray | None = None) -> Book:
    """Weights, gross P&L, turnover and costs for a signal. `cost_fn(weights, turnover) -> (n,)`.

    `returns` may be passed to reuse `open_to_open_returns(open_)` across formulas.
    """
    w = weights_from_signal(signal, min_valid)[:-2]
    r = open_to_open_returns(open_)[:-2] if returns is None else returns
    gross = np.where(np.isnan(r), 0.0, w * r).sum(axis=1)
    turnover = daily_turnover(w)
    cost = cost_fn(w, turnover)
    return Book(weights=w, returns=r, gross=gross, turnover=turnover, cost=cost, dates=dates[:-2])
