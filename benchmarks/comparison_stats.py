"""Statistics of a trainer comparison: bootstrap intervals over briefs and seeds, paired rung differences,
and the diversity of the shipped answers. Pure functions over plain arrays; no model, no files.

A rung's result is a (seeds x briefs) table of per-answer pseudo-holdout scores, NaN where the answer
was invalid. Its headline is the mean over the valid cells. The bootstrap resamples seeds, then
briefs, with replacement (the same draw for every rung, so differences between rungs are paired),
and reports the 2.5% and 97.5% percentiles of the resampled statistic (Efron & Tibshirani 1993, ch. 13).
"""

from __future__ import annotations

import numpy as np


def valid_mean(table: np.ndarray) -> float:
    """Mean of the finite cells (NaN when there is none)."""
    x = np.asarray(table, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def _draws(n_seeds: int, n_briefs: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_seeds, (n_boot, n_seeds)), rng.integers(0, n_briefs, (n_boot, n_briefs))


def _resampled_means(table: np.ndarray, seeds_idx: np.ndarray, briefs_idx: np.ndarray) -> np.ndarray:
    x = np.asarray(table, dtype=np.float64)
    out = np.empty(len(seeds_idx))
    for b, (si, bi) in enumerate(zip(seeds_idx, briefs_idx)):
        out[b] = valid_mean(x[np.ix_(si, bi)])
    return out


def bootstrap_interval(table: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of `valid_mean(table)` resampling seeds (rows) and briefs (columns)."""
    x = np.atleast_2d(np.asarray(table, dtype=np.float64))
    s, b = _draws(x.shape[0], x.shape[1], n_boot, seed)
    means = _resampled_means(x, s, b)
    means = means[np.isfinite(means)]
    if not means.size:
        return float("nan"), float("nan")
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def paired_difference(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0) -> dict:
    """valid_mean(a) - valid_mean(b) with a 95% interval from the same seed and brief draws for both.

    `a` and `b` are (seeds x briefs) tables over the same seeds and briefs. `outside_noise` is True when
    the interval excludes 0.
    """
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape:
        raise ValueError(f"paired tables differ in shape: {a.shape} vs {b.shape}")
    s, br = _draws(a.shape[0], a.shape[1], n_boot, seed)
    diffs = _resampled_means(a, s, br) - _resampled_means(b, s, br)
    diffs = diffs[np.isfinite(diffs)]
    point = valid_mean(a) - valid_mean(b)
    if not diffs.size:
        return {"diff": point, "lo": float("nan"), "hi": float("nan"), "outside_noise": False}
    lo, hi = (float(v) for v in np.percentile(diffs, [2.5, 97.5]))
    return {"diff": point, "lo": lo, "hi": hi, "outside_noise": bool(lo > 0 or hi < 0)}


def mean_pairwise_corr(pnls: np.ndarray) -> float:
    """Mean |correlation| over the pairs of daily P&L series (rows); NaN with fewer than two series.

    A constant series correlates 0 with everything (it carries no bet).
    """
    x = np.atleast_2d(np.asarray(pnls, dtype=np.float64))
    if x.shape[0] < 2:
        return float("nan")
    z = x - x.mean(axis=1, keepdims=True)
    sd = np.sqrt((z * z).mean(axis=1))
    z = np.divide(z, sd[:, None], out=np.zeros_like(z), where=sd[:, None] > 1e-15)
    c = np.abs(z @ z.T) / x.shape[1]
    iu = np.triu_indices(x.shape[0], k=1)
    return float(c[iu].mean())
