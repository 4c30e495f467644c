"""Five known factor return series built from the panel itself, for the factor-neutrality channel (R4).

Each factor (except the market) is a dollar-neutral long-short book built the
same way as a formula's book (rank, centre, gross 1, next-open fill), so its
daily return is comparable with a formula's P&L:

- market: the equal-weight open-to-open return of the same stocks;
- size: long large, short small, with log 20-day dollar volume as the size proxy (no market cap here);
- momentum 12-1: return from t-252 to t-21 (Jegadeesh & Titman 1993);
- reversal 5-day: minus the return of the last 5 sessions (Lehmann 1990);
- low volatility: minus the 63-day std of daily returns (Ang et al. 2006).
"""

from __future__ import annotations

import numpy as np

from alpha_gym.book.book import weights_from_signal
from alpha_gym.book.metrics import equal_weight_market, sharpe
from alpha_gym.language.operators import KERNELS

FACTOR_NAMES = ("market", "size", "momentum_12_1", "reversal_5d", "low_volatility")


def factor_returns(panel, returns: np.ndarray, min_valid: int = 5) -> np.ndarray:
    """(n_days - 2, 5) daily factor returns aligned with a book's decision days. Warm-up days are 0."""
    close = panel.field("close")
    dollar_volume = panel.field("dollar_volume")
    with np.errstate(divide="ignore", invalid="ignore"):
        size = np.log(KERNELS["ts_mean"](dollar_volume, 20))
        momentum = KERNELS["delay"](close, 21) / KERNELS["delay"](close, 252) - 1.0
        reversal = -(close / KERNELS["delay"](close, 5) - 1.0)
        low_vol = -KERNELS["ts_std"](panel.field("returns"), 63)
    cols = [equal_weight_market(returns)]
    for signal in (size, momentum, reversal, low_vol):
        w = weights_from_signal(signal, min_valid)[:-2]
        cols.append(np.where(np.isnan(returns), 0.0, w * returns).sum(axis=1))
    return np.column_stack(cols)


def residual_sharpe(pnl: np.ndarray, factors: np.ndarray) -> float:
    """Sharpe of the P&L after removing its OLS exposure to the factors (the intercept stays in).

        pnl_t = a + sum_k b_k f_{k,t} + e_t   ->   residual_t = a + e_t
    """
    X = np.column_stack([np.ones(len(pnl)), factors])
    coef, *_ = np.linalg.lstsq(X, pnl, rcond=None)
    residual = pnl - factors @ coef[1:]
    return sharpe(residual)
