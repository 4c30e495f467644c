"""The embedded synthetic market: a deterministic, US-like daily OHLCV panel.

`synthetic_panel()` lets the package run with no download. It is bit-identical
for a given seed on any machine: all randomness is drawn up front from
`np.random.default_rng(seed)`, the return and price paths use only IEEE-exact
arithmetic (+, -, *, /, sqrt; no BLAS, no transcendental functions), prices
are rounded to 6 significant digits with an exact table of powers of ten, and
volumes (the one place that needs `log`/`exp`, and nothing else depends on
them) are rounded to whole shares. (The random draws themselves are numpy's:
identical wherever the numpy version is the same.)

The model
---------
Daily return of stock i on day t (simple return, close to close)::

    r[t,i] = mu_i + beta_i * m[t] + gamma_i * s[t, sector_i] + e[t,i] + p[t,i]

* `m`: the market factor, GJR-GARCH(1,1) volatility (clustering, and more
  volatility after down days), Student-t(6) shocks, +0.04% daily drift;
  scaled so its realised daily volatility is 1.05% whatever the seed. Betas
  in [0.7, 1.3].
* `s`: 5-8 sector factors (7 for 46 stocks; labels in `Panel.sectors`), GARCH
  volatility, ~0.6% daily, Gaussian shocks; loadings in [0.7, 1.2].
* `e`: idiosyncratic noise, its own GARCH per stock and Student-t(4) shocks
  (fat tails), also scaled by the market's volatility regime (idiosyncratic
  volatility rises in crises too). Its size is set so each stock's total
  annual volatility is drawn in [20%, 40%].
* `p`: the PLANTED PREDICTABILITY (weak but real, so honest alphas can score
  above zero). With u[t] = r[t] - mean_i r[t] (yesterday's return relative
  to the market) and z[t] the cross-sectionally standardised volume shock
  (log volume minus its own 10-day-halflife moving average)::

      p[t,i] = -REVERSAL_1D * u[t-1,i]
               -REVERSAL_5D * (u[t-1,i] + ... + u[t-5,i])
               +VOLUME_SHOCK * sigma_idio[t,i] * z[t-1,i]

  i.e. short-horizon reversal (1-day and 5-day) and a high-volume return
  premium. Expected daily cross-sectional information coefficients: about
  0.03 for -returns(1 day), 0.04 for -returns(5 days) and 0.02 for the
  volume shock; together they explain roughly 0.3% of the cross-sectional
  variance of daily returns. That is weak on purpose: the real us46 panel
  shows none of these effects (ICs ~0.00 +- 0.005), so a signal of "a few
  percent of variance" (IC ~0.15) would make the synthetic market absurdly
  easy (long-short Sharpe > 10). At these strengths the IC t-statistics
  over the full 3304 sessions are ~8 (1-day reversal, volume shock) and
  ~12 (5-day reversal), i.e. ~2.3-3.5 over a single year.

Calibration (seed 0 vs the real us46 panel, 2012-06-29..2025-08-20):
autocorrelation of |r| at lag 1 0.15 (real 0.23), mean excess kurtosis 9.5
(11.6), mean pairwise correlation 0.35 (0.37), corr(|r|, log volume) 0.43
(0.45), corr(|r|, log volume change) 0.36 (0.32), median annual volatility
28% (28%), equal-weight market daily volatility 1.10% (1.19%), overnight share
of variance 0.40 (0.39), mean (high - low) / close 2.2% (2.2%).

Prices: the first close is drawn in [20, 500]; closes compound the returns.
The open carries ~39% of the day's variance as an overnight gap (Brownian
bridge split, as in the real data); high and low extend beyond max/min(open,
close) by the exact Brownian-bridge excursion of the intraday move. Volume is
log-normal around a per-stock level in [1e5, 5e7] shares, with a persistent
component, and rises with the day's |return| / volatility and with the
volatility regime.
"""

from __future__ import annotations

import warnings

import numpy as np

from alpha_gym.market.calendar import TRADING_DAYS
from alpha_gym.market.panel import Panel

__all__ = ["SyntheticDataNotice", "synthetic_panel", "SECTOR_NAMES",
           "REVERSAL_1D", "REVERSAL_5D", "VOLUME_SHOCK"]

#: Planted predictability (see the module docstring).
REVERSAL_1D = 0.015
REVERSAL_5D = 0.015
VOLUME_SHOCK = 0.025

SECTOR_NAMES = ("Technology", "Financials", "Health Care", "Consumer", "Industrials",
                "Energy", "Utilities", "Materials")

# Market factor: GJR-GARCH(1,1), Student-t(6) shocks.
_MKT_VOL, _MKT_DRIFT = 0.0105, 0.0004
_MKT_ALPHA, _MKT_LEVERAGE, _MKT_BETA = 0.05, 0.07, 0.90
_MKT_DF = 6.0
# Sector factors: GARCH(1,1), Gaussian shocks.
_SEC_VOL, _SEC_ALPHA, _SEC_BETA = 0.006, 0.05, 0.92
# Idiosyncratic: GARCH(1,1), Student-t(4) shocks.
_IDIO_ALPHA, _IDIO_BETA, _IDIO_DF = 0.08, 0.89, 4.0
_SHOCK_CAP = 25.0           # cap on a squared standardised shock feeding a GARCH update
# Overnight share of daily variance and the volume process.
_OVERNIGHT_SHARE = 0.39
_VOL_FAST_AR, _VOL_SLOW_AR = 0.55, 0.985
_VOL_ABS_RETURN, _VOL_REGIME = 0.25, 0.6
_VOL_FAST_NOISE, _VOL_SLOW_NOISE = 0.30, 0.035
_VOL_EWM_WEIGHT = 1.0 - 0.5 ** (1.0 / 10.0)   # halflife 10 days

_NOTICE_SHOWN = False


class SyntheticDataNotice(UserWarning):
    """Emitted once per process when the embedded synthetic market is used."""


def _notice() -> None:
    global _NOTICE_SHOWN
    if not _NOTICE_SHOWN:
        _NOTICE_SHOWN = True
        warnings.warn("alpha-gym: using the embedded SYNTHETIC market (a simulated factor model with weak "
                      "planted signals), not real prices; load real data with alpha_gym.market.load_panel",
                      SyntheticDataNotice, stacklevel=3)


# Exact decimal powers of ten (parsed, so identical everywhere) for 6-significant-digit rounding.
_POW10 = np.array([float(f"1e{k}") for k in range(-12, 19)])
_POW10_EXP = np.arange(-12, 19)


def _round_sig(x: np.ndarray, digits: int = 6) -> np.ndarray:
    """Round positive values to `digits` significant digits (deterministic: comparisons and IEEE arithmetic)."""
    e = _POW10_EXP[np.clip(np.searchsorted(_POW10, x, side="right") - 1, 0, len(_POW10) - 1)]
    k = digits - 1 - e                       # decimals to keep
    up = k >= 0
    scale = _POW10[np.clip(np.abs(k) + 12, 0, len(_POW10) - 1)]
    out = np.where(up, np.rint(x * scale) / scale, np.rint(x / scale) * scale)
    return out


def _t_unit(rng: np.random.Generator, df: float, size) -> np.ndarray:
    """Student-t shocks scaled to unit variance."""
    return rng.standard_t(df, size=size) / np.sqrt(df / (df - 2.0))


def _garch(z: np.ndarray, var_bar: float, alpha: float, beta: float, leverage: float) -> np.ndarray:
    """Conditional variances (T x k) of a GJR-GARCH(1,1) driven by unit shocks `z`; shocks are capped."""
    T, k = z.shape
    omega = var_bar * (1.0 - alpha - 0.5 * leverage - beta)
    out = np.empty((T, k))
    var = np.full(k, var_bar)
    for t in range(T):
        if t:
            prev = z[t - 1]
            a = alpha + leverage * (prev < 0)
            var = omega + a * np.minimum(prev * prev, _SHOCK_CAP) * var + beta * var
        out[t] = var
    return out


def _n_sectors(n_stocks: int) -> int:
    return min(n_stocks, max(5, min(8, n_stocks // 6)))


def synthetic_panel(n_stocks: int = 46, n_days: int = 3304, seed: int = 0, start="2012-06-29") -> Panel:
    """A deterministic synthetic US-like market of `n_stocks` x `n_days` weekday sessions.

    Tickers are `SYN000`...; `Panel.sectors` holds each stock's sector; the
    source is `synthetic(seed=...)`. See the module docstring for the model and
    the planted signals. The first call in a process warns once with a
    `SyntheticDataNotice`.
    """
    n_stocks, n_days, seed = int(n_stocks), int(n_days), int(seed)
    if n_stocks < 1 or n_days < 2:
        raise ValueError(f"synthetic_panel needs n_stocks >= 1 and n_days >= 2, got {n_stocks}, {n_days}")
    _notice()
    rng = np.random.default_rng(seed)
    n, T = n_stocks, n_days

    # ---- cross-section: sectors, loadings, volatilities, levels (drawn in a fixed order)
    n_sec = _n_sectors(n)
    sector = rng.permutation(np.arange(n) % n_sec)
    beta = rng.uniform(0.7, 1.3, n)
    gamma = rng.uniform(0.7, 1.2, n)
    total_vol = rng.uniform(0.20, 0.40, n) / np.sqrt(TRADING_DAYS)
    drift = rng.normal(0.0, 0.0001, n)
    sq = rng.uniform(np.sqrt(20.0), np.sqrt(500.0), n)
    first_close = sq * sq
    vol_level = np.log(1e5) + rng.uniform(0.0, 1.0, n) * (np.log(5e7) - np.log(1e5))
    idio_var = np.maximum(total_vol ** 2 - (beta * _MKT_VOL) ** 2 - (gamma * _SEC_VOL) ** 2,
                          0.25 * total_vol ** 2)

    # ---- shocks, all drawn up front
    z_mkt = _t_unit(rng, _MKT_DF, T)
    z_sec = rng.standard_normal((T, n_sec))
    z_idio = _t_unit(rng, _IDIO_DF, (T, n))
    z_gap = rng.standard_normal((T, n))
    e_high = rng.standard_exponential((T, n))
    e_low = rng.standard_exponential((T, n))
    z_vol_fast = rng.standard_normal((T, n))
    z_vol_slow = rng.standard_normal((T, n))

    # ---- market and sector factors first (they do not depend on the stocks), then
    # rescaled so their realised volatility is on target whatever the seed
    mkt_var = _garch(z_mkt[:, None], _MKT_VOL ** 2, _MKT_ALPHA, _MKT_BETA, _MKT_LEVERAGE)[:, 0]
    sec_var = _garch(z_sec, _SEC_VOL ** 2, _SEC_ALPHA, _SEC_BETA, 0.0)
    mkt_scale = _MKT_VOL / np.sqrt((mkt_var * z_mkt * z_mkt).mean())
    sec_scale = _SEC_VOL / np.sqrt((sec_var * z_sec * z_sec).mean(axis=0))
    mkt_var = mkt_var * (mkt_scale * mkt_scale)
    sec_var = sec_var * (sec_scale * sec_scale)
    f_mkt_all = _MKT_DRIFT + np.sqrt(mkt_var) * z_mkt
    f_sec_all = np.sqrt(sec_var) * z_sec
    # idiosyncratic volatility also rises with the market's volatility regime
    regime = np.sqrt(mkt_var) / _MKT_VOL

    # ---- the daily recursion over stocks (vectors; only IEEE-exact operations)
    w_idio = idio_var * (1.0 - _IDIO_ALPHA - _IDIO_BETA)
    idio_var_t = idio_var.copy()
    idio_shock2 = np.ones(n)
    returns = np.empty((T, n))
    sigma = np.empty((T, n))            # conditional total daily volatility
    log_volume = np.empty((T, n))
    past_u = np.zeros((5, n))           # u[t-1], ..., u[t-5] (ring buffer)
    vol_z = np.zeros(n)                 # yesterday's standardised volume shock
    vol_fast, vol_slow = np.zeros(n), z_vol_slow[0] * (_VOL_SLOW_NOISE / np.sqrt(1 - _VOL_SLOW_AR ** 2))
    vol_ewm = None
    base_sigma = np.sqrt((beta * _MKT_VOL) ** 2 + (gamma * _SEC_VOL) ** 2 + idio_var)
    abs_mean = 0.8                      # ~E|shock| for a unit-variance fat-tailed shock

    for t in range(T):
        if t:
            idio_var_t = w_idio + _IDIO_ALPHA * idio_shock2 * idio_var_t + _IDIO_BETA * idio_var_t
        idio_sd = np.sqrt(idio_var_t) * regime[t]
        e = idio_sd * z_idio[t]
        planted = (-REVERSAL_1D * past_u[0] - REVERSAL_5D * past_u.sum(axis=0)
                   + VOLUME_SHOCK * idio_sd * vol_z)
        r = drift + beta * f_mkt_all[t] + gamma * f_sec_all[t, sector] + e + planted
        r = np.clip(r, -0.6, 1.5)
        returns[t] = r
        sd = np.sqrt(beta * beta * mkt_var[t] + gamma * gamma * sec_var[t, sector] + idio_sd * idio_sd)
        sigma[t] = sd

        # volume: persistent log-normal, up with |return|/vol and with the volatility regime
        vol_fast = _VOL_FAST_AR * vol_fast + _VOL_ABS_RETURN * (np.abs(r - drift) / sd - abs_mean) \
            + _VOL_FAST_NOISE * z_vol_fast[t]
        if t:
            vol_slow = _VOL_SLOW_AR * vol_slow + _VOL_SLOW_NOISE * z_vol_slow[t]
        # log volume relative to the stock's level (the level, which needs `log`, is added at the
        # end so that returns never depend on a transcendental function)
        lv = vol_fast + vol_slow + _VOL_REGIME * (sd / base_sigma - 1.0)
        log_volume[t] = lv

        # state for tomorrow
        u = r - r.mean()
        past_u[1:] = past_u[:-1]
        past_u[0] = u
        if vol_ewm is None:
            vol_ewm = lv.copy()
            vol_z = np.zeros(n)
        else:
            shock = lv - vol_ewm
            centred = shock - shock.mean()
            spread = np.sqrt((centred * centred).mean())
            vol_z = centred / spread if spread > 0 else np.zeros(n)
            vol_ewm = vol_ewm + _VOL_EWM_WEIGHT * (lv - vol_ewm)
        idio_shock2 = np.minimum(z_idio[t] * z_idio[t], _SHOCK_CAP)

    # ---- prices: compounded closes, overnight gap, Brownian-bridge high/low
    growth = 1.0 + returns
    growth[0] = 1.0
    close = first_close * np.cumprod(growth, axis=0)
    prev_close = np.empty_like(close)
    prev_close[1:] = close[:-1]
    prev_close[0] = close[0] / (1.0 + returns[0])
    theta = _OVERNIGHT_SHARE
    gap = theta * returns + np.sqrt(theta * (1.0 - theta)) * sigma * z_gap
    gap = np.clip(gap, -0.5, 1.0)
    open_ = prev_close * (1.0 + gap)
    intraday = close / open_ - 1.0
    s2 = (1.0 - theta) * sigma * sigma          # intraday variance
    up = 0.5 * (intraday + np.sqrt(intraday * intraday + 2.0 * s2 * e_high))
    down = 0.5 * (-intraday + np.sqrt(intraday * intraday + 2.0 * s2 * e_low))
    high = np.maximum(open_ * (1.0 + up), np.maximum(open_, close))
    low = np.minimum(open_ * (1.0 - np.minimum(down, 0.9)), np.minimum(open_, close))
    low = np.maximum(low, 0.5 * np.minimum(open_, close))

    close, open_, high, low = (_round_sig(a) for a in (close, open_, high, low))
    volume = np.maximum(np.rint(np.exp(vol_level + log_volume)), 1.0)

    dates = np.busday_offset(np.datetime64(start, "D"), np.arange(T), roll="forward")
    width = max(3, len(str(n - 1)))
    tickers = tuple(f"SYN{i:0{width}d}" for i in range(n))
    sectors = tuple(SECTOR_NAMES[k] for k in sector)
    return Panel({"open": open_, "high": high, "low": low, "close": close, "volume": volume},
                 dates, tickers, source=f"synthetic(seed={seed})", sectors=sectors)
