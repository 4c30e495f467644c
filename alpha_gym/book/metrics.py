"""Performance statistics of daily return series: small pure functions, empyrical-style.

Conventions: daily simple returns, 252 sessions a year, sample std (ddof=1)
for Sharpe. A series with fewer than two points or zero variance has Sharpe 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alpha_gym.book.blocks import row_blocks
from alpha_gym.market.calendar import TRADING_DAYS


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


@dataclass(frozen=True, eq=False)
class CentredReturns:
    """What `daily_ic` computes of the returns alone on a row where every finite return has a
    non-zero weight, computed once per panel: per row, the count of finite returns, the returns
    centred on their mean (0 where not finite) and the sum of their squares."""

    finite: np.ndarray  # (n, N) bool
    count: np.ndarray   # (n,)
    centred: np.ndarray  # (n, N)
    sum_sq: np.ndarray  # (n,)

    @classmethod
    def of(cls, returns: np.ndarray) -> "CentredReturns":
        r = np.asarray(returns, dtype=np.float64)
        finite = np.isfinite(r)
        count = finite.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(finite, r, 0.0).sum(axis=1) / count
            centred = np.where(finite, r - mean[:, None], 0.0)
        return cls(finite, count, centred, (centred * centred).sum(axis=1))

    def rows(self, r0: int, r1: int) -> "CentredReturns":
        return CentredReturns(self.finite[r0:r1], self.count[r0:r1], self.centred[r0:r1], self.sum_sq[r0:r1])


def _centred_on(r: np.ndarray, ok: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The returns centred on their mean over the `ok` cells of each row (0 elsewhere), and the sum of their squares."""
    rm = np.where(ok, r, 0.0).sum(axis=1) / n
    rc = np.where(ok, r - rm[:, None], 0.0)
    return rc, (rc * rc).sum(axis=1)


def daily_ic(w: np.ndarray, r: np.ndarray, known: CentredReturns | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cross-sectional correlation of weights and returns per row, and whether the row counts.

    `known`: `CentredReturns.of(r)` (the same rows): on rows where every finite return has a
    non-zero weight (most) the returns' side is read, not recomputed (the same numbers).
    """
    finite = np.isfinite(r) if known is None else known.finite
    all_finite = finite.all()
    ok = np.not_equal(w, 0)
    if not all_finite:
        ok &= finite
    n = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        wm = (w if all_finite else np.where(ok, w, 0.0)).sum(axis=1) / n  # outside `ok` w is 0 where r is finite
        wc = w - wm[:, None]
        if not (n == w.shape[1]).all():
            wc[~ok] = 0.0
        if known is None:
            rc, rr = _centred_on(r, ok, n)
        else:  # rows where ok == finite read the returns' side; the others compute it
            rc, rr = known.centred, known.sum_sq
            other = np.flatnonzero(n != known.count)
            if other.size:
                rc, rr = rc.copy(), rr.copy()
                rc[other], rr[other] = _centred_on(r[other], ok[other], n[other])
        num = (wc * rc).sum(axis=1)
        den = np.sqrt((wc * wc).sum(axis=1) * rr)
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
