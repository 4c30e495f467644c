"""Performance statistics of daily return series: small pure functions, empyrical-style.

Conventions: daily simple returns, 252 sessions a year, sample std (ddof=1)
for Sharpe. A series with fewer than two points or zero variance has Sharpe 0.
"""

from __future__ import annotations

import numpy as np

from alpha_gym.book.blocks import row_blocks

TRADING_DAYS = 252


def sharpe(returns: np.ndarray, periods: int = TRADING_DAYS) -> float:
    """Annualised Sharpe ratio: mean / std * sqrt(periods), risk-free rate 0.

    Reference: Sharpe (1994), "The Sharpe Ratio"; empyrical.sharpe_ratio.
    """
    r = np.asarray(returns, dtype=np.float64)
    if r.size < 2:
        return 0.0
    sd = r.std(ddof=1)
    if not np.isfinite(sd) or sd < 1e-12:
        return 0.0
    return float(r.mean() / sd * np.sqrt(periods))


def total_return(returns: np.ndarray) -> float:
    """Compounded return: prod(1 + r) - 1. Reference: empyrical.cum_returns_final."""
    return float(np.prod(1.0 + np.asarray(returns, dtype=np.float64)) - 1.0)


def annual_return(returns: np.ndarray, periods: int = TRADING_DAYS) -> float:
    """Compound annual growth rate. Reference: empyrical.annual_return."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size == 0:
        return 0.0
    growth = np.prod(1.0 + r)
    return float(growth ** (periods / r.size) - 1.0) if growth > 0 else -1.0


def max_drawdown(returns: np.ndarray) -> float:
    """Largest peak-to-trough fall of compounded wealth, as a negative fraction. Reference: empyrical.max_drawdown."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size == 0:
        return 0.0
    wealth = np.concatenate([[1.0], np.cumprod(1.0 + r)])
    peak = np.maximum.accumulate(wealth)
    return float((wealth / peak - 1.0).min())


def beta_and_correlation(returns: np.ndarray, market: np.ndarray) -> tuple[float, float]:
    """OLS slope of returns on market returns, and their Pearson correlation. Reference: empyrical.beta."""
    r = np.asarray(returns, dtype=np.float64)
    m = np.asarray(market, dtype=np.float64)
    ok = np.isfinite(r) & np.isfinite(m)
    r, m = r[ok], m[ok]
    if r.size < 2:
        return 0.0, 0.0
    rc, mc = r - r.mean(), m - m.mean()
    var_m = float(mc @ mc)
    var_r = float(rc @ rc)
    if var_m < 1e-18:
        return 0.0, 0.0
    cov = float(rc @ mc)
    corr = cov / np.sqrt(var_m * var_r) if var_r > 1e-18 else 0.0
    return cov / var_m, float(corr)


def information_coefficient(weights: np.ndarray, returns: np.ndarray) -> float:
    """Mean over days of the cross-sectional Pearson correlation of the weights set at close(t)
    with the returns they earn (open(t+1) -> open(t+2)). Flat days and days with
    fewer than 3 priced stocks are skipped.

    Reference: Grinold & Kahn (2000), Active Portfolio Management, ch. 6.
    """
    w = np.asarray(weights, dtype=np.float64)
    r = np.asarray(returns, dtype=np.float64)
    daily = np.empty(w.shape[0])
    use = np.empty(w.shape[0], dtype=bool)
    for r0, r1 in row_blocks(*w.shape):  # cache-sized blocks; every day's numbers are its own
        daily[r0:r1], use[r0:r1] = daily_ic(w[r0:r1], r[r0:r1])
    return mean_ic(daily, use)


def mean_ic(daily: np.ndarray, use: np.ndarray) -> float:
    """The mean of the daily ICs that count (0 when none does)."""
    return float(daily[use].mean()) if use.any() else 0.0


def daily_ic(w: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cross-sectional correlation of weights and returns per row, and whether the row counts."""
    finite = np.isfinite(r)
    ok = finite & (w != 0)
    n = ok.sum(axis=1)
    wz = w if finite.all() else np.where(ok, w, 0.0)  # outside `ok` w is already 0 where r is finite
    rz = np.where(ok, r, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        wm = wz.sum(axis=1) / n
        rm = rz.sum(axis=1) / n
        wc = np.where(ok, w - wm[:, None], 0.0)
        rc = np.where(ok, r - rm[:, None], 0.0)
        num = (wc * rc).sum(axis=1)
        den = np.sqrt((wc * wc).sum(axis=1) * (rc * rc).sum(axis=1))
        daily = num / den
    return daily, (n >= 3) & np.isfinite(daily) & (den > 1e-18)


def equal_weight_market(returns: np.ndarray) -> np.ndarray:
    """The equal-weight market of the same stocks: the mean return across stocks each day."""
    r = np.asarray(returns, dtype=np.float64)
    ok = np.isfinite(r)
    n = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(ok, r, 0.0).sum(axis=1) / n
    return np.where(n > 0, out, 0.0)
