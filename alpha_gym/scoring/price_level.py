"""The price-level floor: a book whose every day is the ranking of the stocks' price level is not a signal.

    price_level = mean over traded days t of |spearman_t(signal_t, close_t)|

where spearman_t is the cross-sectional rank correlation of the formula's values with the close on
decision day t (each ranked over the stocks where it is defined, correlated over those where both are).
Ranking by the price level (`rank(-close)`, `rank(1 / vwap)`, `rank(ts_mean(close, 5))`) holds one book for
years: it trades about 1.75% a day on us46, under the 2% turnover floor
(`VerifierConfig.min_turnover_invalid`), and is invalid. A bit of intraday noise lifts it over that floor
without changing the book: `rank(close - 2 * open)` is `rank(-close)` plus the day's move, trades 3.4% a day
and scored +3.23 on us46, above every formula the reference published; its daily P&L correlates +0.998 with
`rank(-close)`'s and its daily rank correlation with the close is -0.999 (issue 41.2;
`benchmarks/price_level_tilt.py`). The premium of that static low-price tilt comes from how us46 was chosen
(today's large caps, followed back to 2012), and the reference's hack log closed it on Jul 6-7 ("slow price-level
tilts"). The floor closes the class, not the spelling: any formula whose cross-section is, day after
day, the price ranking or its reverse, whatever noise, wrapper (`rank`, `scale`, `power`, a sign) or monotone
transform of the price it is written with.

Why the close: every price field (open, high, low, vwap, a short mean of any of them) ranks the stocks almost
as the close does (the family's spellings on vwap, high and a 5-day mean score 0.999 on us46), and a rank
correlation is unchanged by any increasing transform (`log`, powers; `1 / x` reverses it). Why the absolute
value per day: a tilt whose sign is switched by some timing rule is still a price ranking on every day.

Coarse tilts (issue "hostile inputs, round four"): a staircase of thresholds on the price,
`-(close > 35) - (close > 88) - (close > 219) - (close > 547)`, is a coarsened price ranking whose ties hold its
rank correlation with the close at 0.73-0.94 (fewer steps, lower), under the threshold, while crossings of the
thresholds lift it over the turnover floor (+3.42 on us46). On a day where the signal ties stocks, the statistic
is the correlation over the largest one those ties allow (`_tie_adjusted_corr`): 1 for any coarsening of the
price ranking, however many steps, unchanged on days without ties. A staircase whose ties are broken by a second
signal is no longer a coarsening: it is judged as any formula mixing a price level with another signal (the
reference's published formulas are of that kind).

The threshold (`VerifierConfig.max_price_level_corr`, 0.96) sits in the middle of the gap between the two
classes as measured on us46, us100 and all 496 stocks: the family (`rank(close - k * open)`, `rank(-close)`
plus a small noise term, ...) is at 0.98-1.00, the reference's published formulas, which divide volume by a
price level, at 0.94 or less, README's other examples, the motifs and the 82 Alpha101s at 0.76 or less
(BENCHMARKS.md, "A static price-level tilt"). Read from the book's weights, which are the formula's centred
ranks, so the cost is two products and two row sums of the (days x stocks) weights: 0.4 ms against a 10 ms
core score on us46.
"""

from __future__ import annotations

import numpy as np

from alpha_gym.language.operators import KERNELS


#: The smallest best correlation a day's ties are credited with (`_tie_adjusted_corr`): every coarsening of the
#: price ranking that trades over the turnover floor on us46 has a best of 0.73 or more (one threshold near the
#: median price; more steps, higher); a day of one big tie group and a few stocks apart is far below it.
MIN_TIE_BEST = 0.6


def _centred(x: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Each row of x centred on its mean over `cells` (bool, same shape); 0 outside them."""
    kept = np.where(cells, x, 0.0)
    mean = kept.sum(axis=1, keepdims=True) / np.maximum(cells.sum(axis=1, keepdims=True), 1)
    return np.where(cells, x - mean, 0.0)


def _centred_ranks(x: np.ndarray) -> np.ndarray:
    """Each row's ranks centred on their mean over the row's non-NaN cells; NaN cells 0."""
    with np.errstate(invalid="ignore"):
        r = KERNELS["rank"](x)
    return _centred(r, ~np.isnan(r))


def _row_corr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row pair of two centred arrays (0 where either row is all 0)."""
    num = (a * b).sum(axis=1)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def close_ranks(panel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The close's (days, stocks) centred cross-sectional ranks, each row's sum of their squares, and which rows
    hold a NaN close: computed once per panel."""
    ranks = panel.memo(("price_level", "close_ranks"), lambda: _centred_ranks(panel.field("close")))
    norms = panel.memo(("price_level", "close_norms"), lambda: (ranks * ranks).sum(axis=1))
    gaps = panel.memo(("price_level", "close_gaps"), lambda: np.isnan(panel.field("close")).any(axis=1))
    return ranks, norms, gaps


def price_level_correlation(weights: np.ndarray, traded: np.ndarray, signal: np.ndarray, panel) -> float:
    """Mean over traded days of |rank correlation between the formula's values and the close| (see module doc).

    weights: the book's (n, N) weights, n <= panel days: each traded row is the signal's centred ranks
    divided by a positive number, so its correlation with the close's centred ranks is the Spearman
    correlation wherever the row has no NaN (the common case). Where the signal or the close has a NaN, each
    keeps its ranks over its own defined cells (the book's, the day's price ranking) and the two are
    correlated over the cells both define. traded: (n,) the book holds a position.
    Returns 0.0 when the book never trades. Deterministic: fixed-order numpy reductions of the book's numbers.
    """
    n = len(weights)
    if not traded.any():
        return 0.0
    ranks, norms, close_gaps = close_ranks(panel)
    num = (weights * ranks[:n]).sum(axis=1)
    den = np.sqrt((weights * weights).sum(axis=1) * norms[:n])
    corr = np.divide(num, den, out=np.zeros(n), where=den > 0)
    partial = np.flatnonzero(traded & (np.isnan(signal[:n]).any(axis=1) | close_gaps[:n]))
    if partial.size:  # each ranked over its own cells, correlated over the cells both define
        both = ~(np.isnan(signal[partial]) | np.isnan(panel.field("close")[partial]))
        corr[partial] = _row_corr(_centred(weights[partial], both), _centred(ranks[partial], both))
    # a coarsened price ranking: on a day of ties, its correlation over the best those ties allow
    full = traded.copy()
    full[partial] = False
    rows = np.flatnonzero(full)
    if rows.size:
        best = _best_of_ties(weights[rows], norms[rows])
        corr[rows] /= np.clip(best, MIN_TIE_BEST, 1.0)
    if partial.size:
        held = np.sort(np.where(np.isnan(signal[partial]), np.nan, weights[partial]), axis=1)  # NaN last, unequal
        tied = partial[(held[:, 1:] == held[:, :-1]).any(axis=1)]
        if tied.size:
            corr[tied] = _tie_adjusted_corr(weights[tied], signal[tied], ranks[tied], panel.field("close")[tied])
    return float(np.abs(corr[traded]).mean())


def _best_of_ties(weights: np.ndarray, close_norms: np.ndarray) -> np.ndarray:
    """Per day without a NaN, the best rank correlation with the close the book's ties allow (`_tie_adjusted_corr`):
    |c| / |p|, with c the signal's centred ranks read off the sorted weights (each run of equal weights is a tie
    group, at its average place) and |p|^2 the close's `close_norms`; exactly 1.0 on a day without ties."""
    out = np.ones(len(weights))
    held = np.sort(weights, axis=1)
    starts = np.ones(held.shape, dtype=bool)
    np.not_equal(held[:, 1:], held[:, :-1], out=starts[:, 1:])
    tied = np.flatnonzero(~starts[:, 1:].all(axis=1))
    if tied.size == 0:
        return out
    m, N = len(tied), weights.shape[1]
    run = np.cumsum(starts[tied].reshape(-1)) - 1
    place = np.tile(np.arange(N, dtype=float), m)
    average = np.bincount(run, weights=place) / np.bincount(run)
    c = (average[run] / (N - 1) - 0.5).reshape(m, N)   # the rank kernel's (place / (N - 1)), centred on 1/2
    out[tied] = np.sqrt((c * c).sum(axis=1)) / np.sqrt(close_norms[tied])
    return out


def _tie_adjusted_corr(weights, signal, close_ranks, close) -> np.ndarray:
    """Per day, the rank correlation of the book with the close divided by the largest one the book's ties allow.

    A signal taking k values a day (a staircase of thresholds on the price) cannot correlate 1 with the close: with
    c its centred ranks and p the close's, the best any assignment of its tie groups to stocks reaches is |c| / |p|
    (each group on a contiguous block of the price ranking, by the rearrangement inequality), reached by every
    coarsening of the price ranking. Dividing by it gives 1 for those, whatever their number of steps, and leaves
    a day without ties as it was (|c| = |p|). Over the cells both define, each ranked over its own cells.
    The best is floored at `MIN_TIE_BEST`: on a day where one group holds nearly every stock (one or two stocks
    apart from the rest, as Alpha#7 on us46 holds most days) the best is small, and dividing by it would turn
    where those one or two stocks sit into a verdict on the whole book.
    """
    both = ~(np.isnan(signal) | np.isnan(close))
    c = _centred(_centred_ranks(np.where(np.isnan(signal), np.nan, weights)), both)
    p = _centred(close_ranks, both)
    cc, pp = np.sqrt((c * c).sum(axis=1)), np.sqrt((p * p).sum(axis=1))
    den = cc * np.clip(cc, MIN_TIE_BEST * pp, pp)
    return np.divide((c * p).sum(axis=1), den, out=np.zeros(len(c)), where=den > 0)


def price_level_reason(level: float, threshold: float) -> str | None:
    """The invalid verdict's reason when the statistic is above the threshold (`VerifierConfig.max_price_level_corr`),
    else None. A threshold of 1 turns the floor off (a mean |correlation| is at most 1)."""
    if not level > threshold:
        return None
    return (f"a static price-level ranking: the signal's daily rank correlation with the close averages "
            f"|{level:.3f}| > {threshold:g}, on days of tied values over the best their ties allow (the book is a "
            f"price tilt, or a coarsened one, whatever moves it over the turnover floor)")
