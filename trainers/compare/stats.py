"""Statistics of a trainer comparison: intervals over briefs and seeds, paired rung differences, and the
diversity of the shipped answers. Pure functions over plain arrays; no model, no files.

A rung's result is a (seeds x briefs) table of per-answer pseudo-holdout scores, NaN where the answer
was invalid; its headline is the mean over the valid cells. The intervals are the package's bootstrap
(`alpha_gym.evaluation.bootstrap`, re-exported here) and a P&L is standardised as the verifier's
novelty archive does it (`alpha_gym.scoring.archive.standardise`).
"""

from __future__ import annotations

import numpy as np

from alpha_gym.evaluation.bootstrap import paired_difference, table_interval, valid_mean
from alpha_gym.scoring.archive import standardise

__all__ = ["mean_pairwise_corr", "paired_difference", "table_interval", "valid_mean"]


def mean_pairwise_corr(pnls: np.ndarray) -> float:
    """Mean |correlation| over the pairs of daily P&L series (rows); NaN with fewer than two series.

    A constant series correlates 0 with everything (it carries no bet).
    """
    x = np.atleast_2d(np.asarray(pnls, dtype=np.float64))
    if x.shape[0] < 2:
        return float("nan")
    z = np.array([standardise(row) for row in x])
    c = np.abs(z @ z.T) / x.shape[1]
    iu = np.triu_indices(x.shape[0], k=1)
    return float(c[iu].mean())
