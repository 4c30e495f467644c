"""Whether a run's selection overfits: the probability of backtest overfitting, the deflated Sharpe ratio, the
effective number of trials, and how train scores rank later ones. Small pure functions on numbers; reading a
run's archive and scoring its formulas is `alpha_gym.commands.overfitting`'s, the formulas behind each number
and how to read them are in docs/overfitting.md.

Probability of backtest overfitting (PBO) by combinatorially symmetric cross-validation (CSCV), Bailey,
Borwein, Lopez de Prado and Zhu (2015), "The probability of backtest overfitting", J. Computational Finance
20(4), 2017:

    M = (T days x N candidates) daily P&L, cut into S contiguous blocks of days (S even, 16 by default)
    for each of the C(S, S/2) ways to pick S/2 blocks as in-sample (IS), the other S/2 out of sample (OOS):
        n*     = the candidate with the highest IS Sharpe
        w      = rank of n*'s OOS Sharpe among the N OOS Sharpes (1 = worst, N = best) / (N + 1)
        logit  = ln(w / (1 - w))
    PBO = share of the splits whose logit <= 0     (n* at or below the OOS median)

PBO near 0.5: picking the best in-sample says nothing about out of sample; near 0: the IS best stays above
the OOS median. C(16, 8) = 12,870 splits.

Deflated Sharpe ratio (DSR), Bailey and Lopez de Prado (2014), "The deflated Sharpe ratio: correcting for
selection bias, backtest overfitting and non-normality", J. Portfolio Management 40(5):

    E[max of N zero-edge Sharpes] ~ sigma * ((1 - g) * Z^-1(1 - 1/N) + g * Z^-1(1 - 1/(N e)))
                                    (g = Euler-Mascheroni 0.5772, Z^-1 the standard normal quantile)
    DSR = Z((SR - SR0) * sqrt(T - 1) / sqrt(1 - skew * SR + (kurtosis - 1) / 4 * SR^2)),  SR0 = E[max]

SR is per period (daily, not annualised), skew and kurtosis (not excess: 3 for a normal) of the selected
candidate's daily returns. sigma is the standard deviation of a zero-edge trial's Sharpe estimate,
sqrt(1 / (T - 1)) by default: the question is whether the best beat the luckiest of N trials that had no
edge. (The paper's empirical sigma, the spread of the trials' own Sharpes, is not available from an archive
that keeps only admitted formulas: their spread is truncated by the admission.) At N = 1,600 the expected
best is 3.39 standard errors.

Effective trials: average-linkage hierarchical clustering of the candidates on the distance 1 - |corr| of
their daily P&L, cut at 1 - 0.5 (the |corr| 0.5 cap of the project's correlation-capped book): the number of
clusters. Chosen over the eigenvalue count (1 / sum of squared eigenvalue shares, `selection.effective_bets`)
because that count saturates at about 1 / rho^2 when every candidate shares a factor of correlation rho
(the market), however many distinct trials there were, and falls below N for independent series when N is
not small against T (Marchenko-Pastur spread); clustering counts near-copies as one trial and leaves the
rest apart. Lopez de Prado (2019), "A data science solution to the multiple-testing crisis in financial
research", J. Financial Data Science 1(1), estimates the trials the same way, by clustering their returns.

Rank correlation and the top-k gap: Spearman's correlation of train scores with validation (or test)
scores, and the mean train, validation and test score of the k best by train score (Spearman 1904).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.market.calendar import TRADING_DAYS

EULER_GAMMA = 0.5772156649015329
#: CSCV blocks by default (the paper's example uses 16: C(16, 8) = 12,870 splits).
CSCV_BLOCKS = 16
#: More blocks than this is a typo: C(20, 10) = 184,756 splits already.
MAX_CSCV_BLOCKS = 20
#: The |corr| at and above which two candidates' P&L count as one trial (the book's cap, seed section 8).
TRIAL_CORR = 0.5
#: A standard deviation under this is a constant series: its Sharpe is 0 (as `book.metrics.sharpe` has it).
FLAT_STD = 1e-12
#: (splits x candidates) cells a CSCV chunk holds at once: 8 MB of float64 per matrix.
CHUNK_CELLS = 1 << 20


class OverfittingError(InputError):
    """Numbers the overfitting statistics cannot be computed from (the message says which and why)."""


# ------------------------------------------------------------------------------ inputs
def pnl_matrix(pnl) -> np.ndarray:
    """`pnl` as a finite (days x candidates) float64 matrix, or OverfittingError naming what is wrong."""
    try:
        m = np.asarray(pnl, dtype=np.float64)
    except (TypeError, ValueError):
        raise OverfittingError("the P&L is not a matrix of numbers (days x candidates)") from None
    if m.ndim != 2:
        raise OverfittingError(f"the P&L must be a (days x candidates) matrix, got {m.ndim} dimension(s)")
    bad = np.argwhere(~np.isfinite(m))
    if bad.size:
        day, cand = bad[0]
        raise OverfittingError(f"the P&L holds {len(bad)} non-finite value(s), the first on day {day} of "
                               f"candidate {cand}")
    return m


# ------------------------------------------------------------------------------ CSCV / PBO
def block_edges(n_days: int, n_blocks: int) -> np.ndarray:
    """The S + 1 edges of S contiguous blocks of near-equal length (the cut `scoring.cpcv.splits` makes)."""
    return np.linspace(0, n_days, n_blocks + 1).round().astype(np.int64)


def cscv_splits(n_blocks: int) -> np.ndarray:
    """The (C(S, S/2) x S/2) in-sample blocks of every split, in lexicographic order; the out-of-sample blocks
    of split i are the in-sample blocks of split C - 1 - i (the complement reverses lexicographic order)."""
    return np.array(list(combinations(range(n_blocks), n_blocks // 2)), dtype=np.int64)


def block_moments(pnl: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per block: its days (S,), and per block and candidate the sum and the sum of squares (S x N) of the P&L
    minus the candidate's whole-window mean, and that mean (N,). Shifting by the mean keeps the variance
    sum - sum^2 / n exact to rounding when the mean is large against the spread."""
    centre = pnl.mean(axis=0)
    x = pnl - centre
    counts = np.diff(edges).astype(np.float64)
    return counts, np.add.reduceat(x, edges[:-1], axis=0), np.add.reduceat(x * x, edges[:-1], axis=0), centre


def blocks_sharpe(chosen: np.ndarray, counts: np.ndarray, sums: np.ndarray, squares: np.ndarray,
                  centre: np.ndarray) -> np.ndarray:
    """Per-period Sharpe, mean / std (ddof=1), of each candidate on the days of each row of `chosen` blocks:
    (rows x N). A flat series (std < FLAT_STD) has Sharpe 0. Sums are gathered, not multiplied by a 0/1
    matrix, so a split's numbers do not depend on how the splits are chunked."""
    n = counts[chosen].sum(axis=1)[:, None]
    s = sums[chosen].sum(axis=1)
    q = squares[chosen].sum(axis=1)
    var = np.maximum(q - s * s / n, 0.0) / (n - 1)
    sd = np.sqrt(var)
    flat = sd < FLAT_STD
    return np.where(flat, 0.0, (s / n + centre) / np.where(flat, 1.0, sd))


def relative_rank(values: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """w = rank / (N + 1) of values[i, pick[i]] within row i (1 = lowest, N = highest; ties share their
    average rank), so 0 < w < 1."""
    v = values[np.arange(len(pick)), pick][:, None]
    below = (values < v).sum(axis=1)
    equal = (values == v).sum(axis=1)               # itself included
    return (below + (equal + 1) / 2.0) / (values.shape[1] + 1)


@dataclass(frozen=True)
class PBOResult:
    """CSCV's outcome: PBO, each split's logit, and the selected candidate's IS and OOS Sharpe (annualised)."""

    pbo: float
    n_blocks: int
    n_splits: int
    n_candidates: int
    n_days: int
    logits: np.ndarray          # (splits,)
    is_sharpe: np.ndarray       # (splits,) the IS best's IS Sharpe, annualised
    oos_sharpe: np.ndarray      # (splits,) its OOS Sharpe, annualised
    picks: np.ndarray           # (splits,) its column

    @property
    def oos_loss_share(self) -> float:
        """The share of splits where the IS best lost money out of sample (the paper's probability of loss)."""
        return float((self.oos_sharpe < 0).mean())

    def to_dict(self) -> dict:
        return {"pbo": self.pbo, "n_blocks": self.n_blocks, "n_splits": self.n_splits,
                "n_candidates": self.n_candidates, "n_days": self.n_days,
                "median_logit": float(np.median(self.logits)),
                "is_sharpe_mean": float(self.is_sharpe.mean()), "oos_sharpe_mean": float(self.oos_sharpe.mean()),
                "oos_loss_share": self.oos_loss_share,
                "distinct_picks": int(len(np.unique(self.picks)))}


def probability_of_backtest_overfitting(pnl, n_blocks: int = CSCV_BLOCKS) -> PBOResult:
    """PBO by CSCV (this module's docstring): `pnl` (days x candidates) of daily returns, `n_blocks` S even.

    Deterministic: the IS best is the first column of the highest IS Sharpe; OOS ties share their average rank.
    Each split and its complement are computed together (the one's IS is the other's OOS), in chunks of about
    CHUNK_CELLS cells, from per-block sums, so the cost is about C(S, S/2) x N x S/2 additions.
    """
    m = pnl_matrix(pnl)
    n_days, n_cand = m.shape
    if (isinstance(n_blocks, bool) or not isinstance(n_blocks, (int, np.integer)) or n_blocks % 2
            or not 2 <= n_blocks <= MAX_CSCV_BLOCKS):
        raise OverfittingError(f"CSCV blocks = {n_blocks!r}: must be an even integer in [2, {MAX_CSCV_BLOCKS}]")
    if n_cand < 2:
        raise OverfittingError(f"PBO needs at least 2 candidates to choose among, got {n_cand}")
    if n_days < 2 * n_blocks:
        raise OverfittingError(f"PBO with {n_blocks} blocks needs at least {2 * n_blocks} days, got {n_days}")
    counts, sums, squares, centre = block_moments(m, block_edges(n_days, n_blocks))
    splits = cscv_splits(n_blocks)
    total = len(splits)
    logits, is_sr, oos_sr, picks = (np.empty(total), np.empty(total), np.empty(total),
                                    np.empty(total, dtype=np.int64))
    step = max(1, CHUNK_CELLS // n_cand)
    for lo in range(0, total // 2, step):
        first = np.arange(lo, min(lo + step, total // 2))
        second = total - 1 - first                   # the complements
        a = blocks_sharpe(splits[first], counts, sums, squares, centre)
        b = blocks_sharpe(splits[second], counts, sums, squares, centre)
        for rows, ins, outs in ((first, a, b), (second, b, a)):
            pick = ins.argmax(axis=1)
            w = relative_rank(outs, pick)
            logits[rows] = np.log(w / (1.0 - w))
            picks[rows] = pick
            is_sr[rows] = ins[np.arange(len(pick)), pick]
            oos_sr[rows] = outs[np.arange(len(pick)), pick]
    annual = math.sqrt(TRADING_DAYS)
    return PBOResult(pbo=float((logits <= 0).mean()), n_blocks=n_blocks, n_splits=total, n_candidates=n_cand,
                     n_days=n_days, logits=logits, is_sharpe=is_sr * annual, oos_sharpe=oos_sr * annual, picks=picks)


# ------------------------------------------------------------------------------ deflated Sharpe
def _normal_quantile(p: float) -> float:
    from scipy.stats import norm
    return float(norm.ppf(p))


def _normal_cdf(z: float) -> float:
    from scipy.stats import norm
    return float(norm.cdf(z))


def expected_max_sharpe(n_trials: float, sharpe_std: float = 1.0) -> float:
    """E[max of N independent zero-edge Sharpe estimates] ~ sigma ((1 - g) Z^-1(1 - 1/N) + g Z^-1(1 - 1/(N e))),
    g the Euler-Mascheroni constant (Bailey and Lopez de Prado 2014; Bailey, Borwein, Lopez de Prado
    and Zhu 2014, "Pseudo-mathematics and financial charlatanism", Proposition 1). One trial: 0 (the mean of
    one normal; the approximation holds for N >> 1). N may be fractional (an effective count)."""
    if not (isinstance(n_trials, (int, float, np.integer, np.floating)) and math.isfinite(n_trials)
            and n_trials >= 1):
        raise OverfittingError(f"trials = {n_trials!r}: must be a number >= 1")
    if not (math.isfinite(sharpe_std) and sharpe_std >= 0):
        raise OverfittingError(f"the Sharpe's standard deviation = {sharpe_std!r}: must be finite and >= 0")
    if n_trials == 1:
        return 0.0
    n = float(n_trials)
    return sharpe_std * ((1 - EULER_GAMMA) * _normal_quantile(1 - 1 / n)
                         + EULER_GAMMA * _normal_quantile(1 - 1 / (n * math.e)))


def return_moments(returns) -> tuple[float, float, float, int]:
    """Per-period Sharpe (mean / std, ddof=1), skewness and kurtosis (population moments m3 / m2^1.5 and
    m4 / m2^2: 0 and 3 for a normal) and the number of periods of a return series."""
    r = np.asarray(returns, dtype=np.float64).ravel()
    if r.size < 3 or not np.isfinite(r).all():
        raise OverfittingError(f"the returns need at least 3 finite values, got {r.size} "
                               f"({int((~np.isfinite(r)).sum())} non-finite)")
    sd = r.std(ddof=1)
    if sd < FLAT_STD:
        raise OverfittingError("the returns are constant: they have no Sharpe ratio to deflate")
    d = r - r.mean()
    m2 = float((d * d).mean())
    return float(r.mean() / sd), float((d ** 3).mean() / m2 ** 1.5), float((d ** 4).mean() / m2 ** 2), int(r.size)


def sharpe_z(sharpe: float, benchmark: float, n_obs: int, skew: float = 0.0, kurtosis: float = 3.0) -> float:
    """(SR - SR0) sqrt(T - 1) / sqrt(1 - skew SR + (kurtosis - 1) / 4 SR^2): the probabilistic Sharpe ratio's
    statistic before the normal CDF (per-period Sharpes), which still tells apart series whose CDF is 1."""
    if n_obs < 2:
        raise OverfittingError(f"the probabilistic Sharpe ratio needs at least 2 periods, got {n_obs}")
    spread = 1 - skew * sharpe + (kurtosis - 1) / 4 * sharpe ** 2
    if not spread > 0:
        raise OverfittingError(f"skewness {skew:.3g} and kurtosis {kurtosis:.3g} at Sharpe {sharpe:.3g} give the "
                               "Sharpe estimate a non-positive variance: the normal approximation does not hold")
    return (sharpe - benchmark) * math.sqrt(n_obs - 1) / math.sqrt(spread)


def probabilistic_sharpe_ratio(sharpe: float, benchmark: float, n_obs: int, skew: float = 0.0,
                               kurtosis: float = 3.0) -> float:
    """P(true Sharpe > benchmark) = Z(`sharpe_z`), per-period Sharpes (Bailey and Lopez de Prado 2012, "The Sharpe
    ratio efficient frontier", J. Risk 15(2))."""
    return _normal_cdf(sharpe_z(sharpe, benchmark, n_obs, skew, kurtosis))


@dataclass(frozen=True)
class DeflatedSharpe:
    """The deflated Sharpe ratio of one return series given N trials (Sharpes annualised where named so)."""

    sharpe: float               # annualised
    benchmark: float            # E[max of N zero-edge trials], annualised
    n_trials: float
    n_obs: int
    skew: float
    kurtosis: float
    dsr: float                  # P(true Sharpe > benchmark)

    def to_dict(self) -> dict:
        return {"sharpe": self.sharpe, "benchmark_sharpe": self.benchmark, "n_trials": self.n_trials,
                "n_obs": self.n_obs, "skew": self.skew, "kurtosis": self.kurtosis, "dsr": self.dsr}


def deflated_sharpe_ratio(returns, n_trials: float, sharpe_std: float | None = None) -> DeflatedSharpe:
    """DSR of `returns` (the selected candidate's daily returns) after `n_trials` trials: the probabilistic Sharpe
    ratio against SR0 = expected_max_sharpe(n_trials, sharpe_std). `sharpe_std` None: a zero-edge trial's,
    sqrt(1 / (T - 1)) (this module's docstring says why)."""
    sr, skew, kurt, n = return_moments(returns)
    sigma = math.sqrt(1.0 / (n - 1)) if sharpe_std is None else float(sharpe_std)
    sr0 = expected_max_sharpe(n_trials, sigma)
    annual = math.sqrt(TRADING_DAYS)
    return DeflatedSharpe(sharpe=sr * annual, benchmark=sr0 * annual, n_trials=float(n_trials), n_obs=n, skew=skew,
                          kurtosis=kurt, dsr=probabilistic_sharpe_ratio(sr, sr0, n, skew, kurt))


# ------------------------------------------------------------------------------ effective trials
def _condensed_distance(pnl: np.ndarray) -> np.ndarray:
    """1 - |Pearson correlation| of every pair of columns, in scipy's condensed order, built a block of rows at a
    time (the full matrix of 6,000 candidates would be 300 MB). A constant column correlates 0 with the others."""
    x = pnl - pnl.mean(axis=0)
    norm = np.sqrt((x * x).sum(axis=0))
    ok = norm > FLAT_STD
    z = np.where(ok, x / np.where(ok, norm, 1.0), 0.0).T       # (N x T) unit rows
    n = z.shape[0]
    out = np.empty(n * (n - 1) // 2)
    pos = 0
    rows = max(1, CHUNK_CELLS // max(n, 1))
    for lo in range(0, n - 1, rows):
        hi = min(lo + rows, n - 1)
        c = np.abs(z[lo:hi] @ z.T)
        for i in range(lo, hi):
            row = c[i - lo, i + 1:]
            out[pos:pos + len(row)] = 1.0 - np.minimum(row, 1.0)
            pos += len(row)
    return out


@dataclass(frozen=True)
class EffectiveTrials:
    """Clusters of the candidates' P&L: how many, the cut, and each candidate's cluster (1-based)."""

    n_trials: int
    n_candidates: int
    min_corr: float
    labels: np.ndarray

    def to_dict(self) -> dict:
        return {"n_trials": self.n_trials, "n_candidates": self.n_candidates, "min_corr": self.min_corr,
                "method": f"average-linkage clusters of 1 - |corr| of the daily P&L, cut at {1 - self.min_corr:g}"}


def effective_trials(pnl, min_corr: float = TRIAL_CORR) -> EffectiveTrials:
    """The number of distinct trials among the candidates (days x candidates P&L): average-linkage hierarchical
    clusters on 1 - |corr|, merged while the mean |corr| between two clusters is at least `min_corr`
    (N copies of one series: 1; N independent series: N)."""
    from scipy.cluster.hierarchy import fcluster, linkage
    m = pnl_matrix(pnl)
    if not 0.0 < min_corr <= 1.0:
        raise OverfittingError(f"the trials' correlation cut = {min_corr!r}: must be in (0, 1]")
    n = m.shape[1]
    if n == 0:
        raise OverfittingError("no candidates to count trials among")
    if n == 1:
        return EffectiveTrials(1, 1, min_corr, np.ones(1, dtype=np.int64))
    tree = linkage(_condensed_distance(m), method="average")
    labels = fcluster(tree, t=1.0 - min_corr, criterion="distance")
    return EffectiveTrials(int(labels.max()), n, float(min_corr), labels.astype(np.int64))


# ------------------------------------------------------------------------------ train against later scores
def _finite_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise OverfittingError(f"scores of different lengths: {a.size} and {b.size}")
    ok = np.isfinite(a) & np.isfinite(b)
    return a[ok], b[ok]


def rank_correlation(train, later) -> float | None:
    """Spearman's rank correlation of train scores with later (validation or test) scores over the candidates
    both scored (non-finite: not scored; ties share their average rank); None with fewer than 3 such pairs or
    a constant side."""
    from scipy.stats import rankdata
    a, b = _finite_pairs(train, later)
    if a.size < 3:
        return None
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return None if den == 0 else float(ra @ rb / den)


def top_k_gap(train, validation=None, test=None, k: int = 20) -> dict:
    """The k candidates with the highest train score (ties: the first), and their mean train, validation and
    test scores (each over those of the k it scored; None when it scored none or was not given)."""
    t = np.asarray(train, dtype=np.float64).ravel()
    if not (isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1):
        raise OverfittingError(f"top k = {k!r}: must be an integer >= 1")
    order = np.argsort(-np.where(np.isfinite(t), t, -np.inf), kind="stable")[:k]
    order = order[np.isfinite(t[order])]

    def mean_of(scores):
        if scores is None:
            return None, 0
        s = np.asarray(scores, dtype=np.float64).ravel()
        if s.shape != t.shape:
            raise OverfittingError(f"scores of different lengths: {t.size} train and {s.size}")
        v = s[order][np.isfinite(s[order])]
        return (float(v.mean()) if v.size else None), int(v.size)
    out = {"k": int(k), "n": int(order.size), "index": [int(i) for i in order]}
    for name, scores in (("train", t), ("validation", validation), ("test", test)):
        out[name], out[f"n_{name}"] = mean_of(scores)
    return out


# ------------------------------------------------------------------------------ one report
def overfitting_summary(pnl, train_scores: Sequence[float], names: Sequence[str] | None = None,
                        verifier_calls: int | None = None, validation=None, test=None,
                        n_blocks: int = CSCV_BLOCKS, top: int = 20, min_corr: float = TRIAL_CORR) -> dict:
    """Every statistic of this module for one set of candidates (an archive): PBO over the P&L's CSCV blocks,
    the effective trials, the deflated Sharpe of the best by train score at the effective trials and, given
    the run's verifier calls, at that many trials (the bound where no two calls were alike), and the train
    scores against `validation` and `test` scores when given (one per candidate, NaN where not scored).
    A JSON-ready dict (docs/overfitting.md reads it)."""
    m = pnl_matrix(pnl)
    train = np.asarray(train_scores, dtype=np.float64).ravel()
    if train.size != m.shape[1]:
        raise OverfittingError(f"{train.size} train scores for {m.shape[1]} candidates")
    if names is not None and len(names) != m.shape[1]:
        raise OverfittingError(f"{len(names)} names for {m.shape[1]} candidates")
    scored = np.isfinite(train)
    if not scored.any():
        raise OverfittingError("no candidate has a finite train score")
    best = int(np.argmax(np.where(scored, train, -np.inf)))
    trials = effective_trials(m, min_corr)
    deflated = {"effective": deflated_sharpe_ratio(m[:, best], trials.n_trials).to_dict()}
    if verifier_calls is not None:
        deflated["calls"] = deflated_sharpe_ratio(m[:, best], max(1, int(verifier_calls))).to_dict()
    gap = top_k_gap(train, validation, test, top)
    if names is not None:
        gap["formulas"] = [names[i] for i in gap["index"]]
    return {"n_candidates": int(m.shape[1]), "n_days": int(m.shape[0]), "verifier_calls": verifier_calls,
            "pbo": probability_of_backtest_overfitting(m, n_blocks).to_dict(),
            "effective_trials": trials.to_dict(),
            "best": {"index": best, "formula": None if names is None else names[best], "train_score": float(train[best])},
            "deflated_sharpe": deflated,
            "rank_correlation": {"validation": None if validation is None else rank_correlation(train, validation),
                                 "test": None if test is None else rank_correlation(train, test)},
            "top": gap}
