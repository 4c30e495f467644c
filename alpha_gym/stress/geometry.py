"""OMD-style geometry of a correlation matrix, the R3 formula and the stylised facts (numpy only).

The world model's auxiliary head predicts, for the NEXT window, ten numbers
that describe the shape of the stocks' correlation matrix C (N x N) with
eigenvalues lambda_1 >= ... >= lambda_N >= 0 (trace(C) = N for a correlation
matrix):

=====================  =========================================================
``mean_corr``          average off-diagonal entry of C (how much stocks co-move)
``market_share``       lambda_1 / trace(C) (weight of the single market mode)
``effective_fraction`` (sum lambda)^2 / sum lambda^2 / N: the participation
                       ratio, i.e. the effective number of factors, as a
                       fraction of N (1 for the identity, 1/N for one factor
                       that explains everything); it collapses in crises
``residual_fraction``  the same without the market mode:
                       (sum_{i>=2} lambda_i)^2 / sum_{i>=2} lambda_i^2 / (N - 1)
``projector_drift``    rotation of the top-3 eigenvector subspace from the
                       previous window to this one:
                       ||P_prev - P||_F^2 / (2 k) = 1 - ||U_prev^T U||_F^2 / k,
                       0 = same subspace, 1 = orthogonal subspaces
``top1_share`` ..      lambda_i / trace(C) for i = 1..5 (the leading spectrum;
``top5_share``         top1_share equals market_share by definition and is kept
                       so the head predicts the full top-5 profile)
=====================  =========================================================

Nothing here imports torch, so the targets, the R3 value and the gates'
statistics are testable and usable without the optional ``stress`` extra.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from alpha_gym.threads import blas_threads

TARGET_NAMES: tuple[str, ...] = ("mean_corr", "market_share", "effective_fraction", "residual_fraction",
                                 "projector_drift", "top1_share", "top2_share", "top3_share", "top4_share",
                                 "top5_share")
N_TARGETS = len(TARGET_NAMES)
DRIFT_RANK = 3
N_TOP = 5


def correlation_matrix(returns: np.ndarray) -> np.ndarray:
    """Pearson correlation of the columns of a (days x stocks) array.

    Non-finite cells count as 0 (after de-meaning); a constant column is
    uncorrelated with everything (its row and column are 0, its diagonal 1).
    """
    x = np.array(returns, dtype=np.float64)
    x[~np.isfinite(x)] = np.nan
    mean = np.nanmean(x, axis=0) if x.size else np.zeros(x.shape[1])
    mean = np.where(np.isfinite(mean), mean, 0.0)
    x = np.where(np.isnan(x), 0.0, x - mean)
    sd = np.sqrt((x * x).sum(axis=0))
    ok = sd > 1e-12
    z = np.where(ok, x / np.where(ok, sd, 1.0), 0.0)
    c = z.T @ z
    c = 0.5 * (c + c.T)
    np.fill_diagonal(c, 1.0)
    return c


def spectrum(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (descending, clipped at 0) and matching eigenvectors (columns) of a symmetric matrix."""
    c = np.asarray(c, dtype=np.float64)
    vals, vecs = np.linalg.eigh(0.5 * (c + c.T))
    order = np.argsort(vals)[::-1]
    return np.clip(vals[order], 0.0, None), vecs[:, order]


def participation_fraction(eigenvalues: np.ndarray) -> float:
    """(sum lambda)^2 / sum lambda^2 / n over the given eigenvalues (1.0 for an empty or all-zero set)."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    sq = float((lam * lam).sum())
    if lam.size == 0 or sq <= 0.0:
        return 1.0
    return float(lam.sum() ** 2 / sq / lam.size)


def projector_drift(c_prev: np.ndarray, c_next: np.ndarray, k: int = DRIFT_RANK) -> float:
    """Rotation of the top-k eigenvector subspace: ||P_prev - P_next||_F^2 / (2k), in [0, 1]."""
    k = min(k, np.asarray(c_next).shape[0])
    _, u_prev = spectrum(c_prev)
    _, u_next = spectrum(c_next)
    overlap = u_prev[:, :k].T @ u_next[:, :k]
    return float(np.clip(1.0 - (overlap * overlap).sum() / k, 0.0, 1.0))


def _targets(c: np.ndarray, lam: np.ndarray, vecs: np.ndarray, prev_vecs: np.ndarray | None) -> np.ndarray:
    n = c.shape[0]
    trace = float(np.trace(c))
    trace = trace if trace > 0 else float(n)
    off = (c.sum() - np.trace(c)) / (n * (n - 1)) if n > 1 else 0.0
    shares = np.zeros(N_TOP)
    m = min(N_TOP, n)
    shares[:m] = lam[:m] / trace
    out = np.empty(N_TARGETS)
    out[0] = off
    out[1] = lam[0] / trace
    out[2] = participation_fraction(lam)
    out[3] = participation_fraction(lam[1:]) if n > 1 else 1.0
    if prev_vecs is None:
        out[4] = 0.0
    else:
        k = min(DRIFT_RANK, n)
        overlap = prev_vecs[:, :k].T @ vecs[:, :k]
        out[4] = float(np.clip(1.0 - (overlap * overlap).sum() / k, 0.0, 1.0))
    out[5:] = shares
    return out


def geometry_targets(c: np.ndarray, c_prev: np.ndarray | None = None) -> np.ndarray:
    """The ten targets of TARGET_NAMES for correlation matrix `c` (drift measured from `c_prev`; 0 without it)."""
    c = np.asarray(c, dtype=np.float64)
    with blas_threads(1):
        lam, vecs = spectrum(c)
        prev_vecs = spectrum(c_prev)[1] if c_prev is not None else None
        return _targets(c, lam, vecs, prev_vecs)


def window_targets(returns: np.ndarray, starts: Sequence[int], window: int) -> np.ndarray:
    """Targets of the windows [s, s + window) of a (days x stocks) return array, drift from [s - window, s).

    The drift of a window that has no full previous window is 0.
    """
    out = np.empty((len(starts), N_TARGETS))
    cache: dict[int, tuple] = {}

    def decomposed(s):
        if s not in cache:
            c = correlation_matrix(returns[s:s + window])
            cache[s] = (c,) + spectrum(c)
        return cache[s]

    with blas_threads(1):
        for j, s in enumerate(starts):
            prev = decomposed(s - window)[2] if s - window >= 0 else None
            c, lam, vecs = decomposed(s)
            out[j] = _targets(c, lam, vecs, prev)
            cache.pop(s - 2 * window, None)
    return out


# --------------------------------------------------------------------------- R3
def r3_value(base_score: float, scenario_scores: Sequence[float], weight: float = 0.4
             ) -> tuple[float, float, np.ndarray]:
    """R3 = -min(1, weight * log(1 + mean drop)); drop = max(0, base - scenario) per world (weight: 0.4,
    `VerifierConfig.stress_weight`).

    Returns (value, mean drop, drops). The value lies in [-1, 0]: 0 when no
    world lowers the score, -1 once the mean drop reaches e^2.5 - 1 ~ 11.2.
    """
    scores = np.asarray(scenario_scores, dtype=np.float64)
    if scores.size == 0:
        return 0.0, 0.0, scores
    drops = np.maximum(0.0, float(base_score) - scores)
    drops = np.where(np.isfinite(drops), drops, 0.0)
    mean_drop = float(drops.mean())
    value = -min(1.0, weight * math.log1p(mean_drop))
    return float(value) + 0.0, mean_drop, drops


# --------------------------------------------------------------------------- stylised facts
def _log_returns(close: np.ndarray) -> np.ndarray:
    c = np.asarray(close, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(c[1:] / c[:-1])
    return np.where(np.isfinite(r), r, 0.0)


def stylised_facts(close: np.ndarray, corr_window: int = 60) -> dict[str, float]:
    """Volatility clustering, cross-sectional correlation level and tail weight of daily log returns.

    ``abs_acf1``: mean over stocks of the lag-1 autocorrelation of |r|;
    ``mean_corr``: the typical level of co-movement: the mean off-diagonal
    correlation of daily returns in consecutive windows of `corr_window`
    sessions, averaged over the windows (a whole-span correlation would be
    dominated by the few crisis months);
    ``excess_kurtosis``: mean over stocks of the excess kurtosis of r.
    """
    r = _log_returns(close)
    a = np.abs(r) - np.abs(r).mean(axis=0)
    num = (a[1:] * a[:-1]).sum(axis=0)
    den = (a * a).sum(axis=0)
    acf = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    z = r - r.mean(axis=0)
    var = (z * z).mean(axis=0)
    kurt = np.where(var > 0, (z ** 4).mean(axis=0) / np.where(var > 0, var * var, 1.0) - 3.0, 0.0)
    n = r.shape[1]
    levels = []
    for s in range(0, max(1, len(r) - corr_window + 1), corr_window):
        c = correlation_matrix(r[s:s + corr_window])
        levels.append((c.sum() - n) / (n * (n - 1)) if n > 1 else 0.0)
    mean_corr = float(np.mean(levels))
    return {"abs_acf1": float(acf.mean()), "mean_corr": float(mean_corr), "excess_kurtosis": float(kurt.mean())}


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties half; NaN if a class is empty."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    pos, neg = s[y], s[~y]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (pos.size * neg.size))


def auc_bootstrap(scores: Sequence[float], labels: Sequence[bool], n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """`auc` of `n_boot` resamples of the items (with replacement; resamples that miss a class dropped).

    Each resample's AUC is the Mann-Whitney statistic from average ranks, (R+ - n+(n+ + 1)/2) / (n+ n-),
    which equals `auc` (ties half). The resamples depend only on the number of items and `seed`, so two
    scores of the same items get paired resamples (the interval of a difference of AUCs).
    Reference: Efron & Tibshirani (1993), *An Introduction to the Bootstrap*, ch. 13.
    """
    from scipy.stats import rankdata
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    idx = np.random.default_rng(seed).integers(0, s.size, size=(n_boot, s.size))
    ys = y[idx]
    n_pos = ys.sum(axis=1)
    n_neg = s.size - n_pos
    ranks = rankdata(s[idx], axis=1)  # average ranks: ties count half
    with np.errstate(invalid="ignore", divide="ignore"):
        aucs = ((ranks * ys).sum(axis=1) - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
    return aucs[(n_pos > 0) & (n_neg > 0)]


def percentile_interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap samples; NaNs when there are none."""
    if samples.size == 0:
        return float("nan"), float("nan")
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return float(lo), float(hi)


def auc_interval(scores: Sequence[float], labels: Sequence[bool], n_boot: int = 2000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of `auc` (see `auc_bootstrap`); NaNs if a class is empty."""
    y = np.asarray(labels, dtype=bool)
    if not y.any() or y.all():
        return float("nan"), float("nan")
    return percentile_interval(auc_bootstrap(scores, y, n_boot, seed), level)
