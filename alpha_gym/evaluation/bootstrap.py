"""Percentile-bootstrap intervals: the one place the package resamples to put an interval on a mean.

Two shapes of data, one percentile rule (the 2.5% and 97.5% percentiles of the resampled statistic,
Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, ch. 13):

* `mean_interval`: a flat list of values (a baseline's formulas, a holdout report's answers),
  resampled with replacement;
* `table_interval` / `paired_difference`: a (seeds x briefs) table of per-answer scores, NaN where the
  answer was invalid, headline `valid_mean`; seeds are resampled, then briefs, and two tables resampled
  with the same draw give a paired difference (a trainer comparison's rungs).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def percentile_interval(stats: np.ndarray) -> tuple[float, float]:
    """(2.5%, 97.5%) percentiles of resampled statistics: the 95% percentile interval."""
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def mean_interval(values: Sequence[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of the mean of the finite `values` (None for fewer than 2)."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    if len(x) < 2:
        return None
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return percentile_interval(means)


def valid_mean(table: np.ndarray) -> float:
    """Mean of the finite cells (NaN when there is none)."""
    x = np.asarray(table, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def _draws(n_seeds: int, n_briefs: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row (seed) and column (brief) indices of `n_boot` resamples, seeds drawn first."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_seeds, (n_boot, n_seeds)), rng.integers(0, n_briefs, (n_boot, n_briefs))


def _resampled_means(table: np.ndarray, seeds_idx: np.ndarray, briefs_idx: np.ndarray) -> np.ndarray:
    x = np.asarray(table, dtype=np.float64)
    out = np.empty(len(seeds_idx))
    for b, (si, bi) in enumerate(zip(seeds_idx, briefs_idx)):
        out[b] = valid_mean(x[np.ix_(si, bi)])
    return out


def table_interval(table: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of `valid_mean(table)` resampling seeds (rows) and briefs (columns).

    (NaN, NaN) when no resample has a valid cell.
    """
    x = np.atleast_2d(np.asarray(table, dtype=np.float64))
    s, b = _draws(x.shape[0], x.shape[1], n_boot, seed)
    means = _resampled_means(x, s, b)
    means = means[np.isfinite(means)]
    if not means.size:
        return float("nan"), float("nan")
    return percentile_interval(means)


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
    lo, hi = percentile_interval(diffs)
    return {"diff": point, "lo": lo, "hi": hi, "outside_noise": bool(lo > 0 or hi < 0)}
