"""The overfitting statistics (alpha_gym/evaluation/overfitting.py) on planted data: noise, a real edge, a
planted overfit; the deflated Sharpe against Monte Carlo and the literature's numbers; the effective trials of
copies and of independent series; and every bad input refused with one typed line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from alpha_gym.book.metrics import sharpe
from alpha_gym.errors import InputError
from alpha_gym.evaluation import overfitting as O
from alpha_gym.jsonable import json_dumps


def _noise(seed: int, days: int, candidates: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 0.01, (days, candidates))


# ------------------------------------------------------------------------------ PBO by CSCV
#: Pure noise: the IS best's OOS rank is uniform on every split, so PBO is 0.5 in expectation; one panel's
#: PBO spreads (its splits share days): about 0.14 sd at 50 candidates x 800 days, measured over 24 seeds.
NOISE_SEEDS = range(24)
NOISE_TOLERANCE = 0.1   # on the mean over the seeds: about 3.5 standard errors


def test_pbo_of_pure_noise_is_near_one_half():
    pbos = np.array([O.probability_of_backtest_overfitting(_noise(s, 800, 50)).pbo for s in NOISE_SEEDS])
    assert abs(pbos.mean() - 0.5) <= NOISE_TOLERANCE, pbos
    assert ((pbos > 0.1) & (pbos < 0.9)).all(), pbos   # no seed looks like a real edge or a planted overfit


@pytest.mark.parametrize("seed", range(6))
def test_pbo_of_a_planted_edge_is_near_zero(seed):
    x = _noise(seed, 2000, 100)
    x[:, 37] += 0.003                     # a daily drift of 0.3 sd: annual Sharpe about 4.8, in every block
    edges = O.block_edges(len(x), O.CSCV_BLOCKS)
    assert all(x[a:b, 37].mean() > 0 for a, b in zip(edges[:-1], edges[1:]))
    result = O.probability_of_backtest_overfitting(x)
    assert result.n_splits == math.comb(16, 8) == 12_870
    assert result.pbo <= 0.01
    assert (result.picks == 37).mean() >= 0.99
    assert result.oos_loss_share <= 0.01


def test_pbo_of_a_planted_overfit_is_near_one():
    """Each candidate earns in one half of the blocks and loses in the other: the IS best is the one whose good
    half the IS blocks hit most, so out of sample it sits in its bad half: at the bottom."""
    rng = np.random.default_rng(0)
    days, n = 1600, 60
    edges = O.block_edges(days, 16)
    x = rng.normal(0.0, 0.01, (days, n))
    for j in range(n):
        good = set(rng.choice(16, 8, replace=False).tolist())
        for b in range(16):
            x[edges[b]:edges[b + 1], j] += 0.004 if b in good else -0.004
    assert O.probability_of_backtest_overfitting(x).pbo >= 0.9


def test_each_split_sharpe_is_the_sharpe_of_its_days():
    x = np.random.default_rng(1).normal(0.0005, 0.01, (333, 7))
    edges = O.block_edges(len(x), 16)
    counts, sums, squares, centre = O.block_moments(x, edges)
    splits = O.cscv_splits(16)
    for i in (0, 1, 4000, len(splits) - 1):
        days = np.concatenate([np.arange(edges[b], edges[b + 1]) for b in splits[i]])
        got = O.blocks_sharpe(splits[i:i + 1], counts, sums, squares, centre)[0] * math.sqrt(252)
        assert np.allclose(got, [sharpe(x[days, j]) for j in range(7)], rtol=1e-10, atol=1e-12)
        complement = splits[len(splits) - 1 - i]
        assert sorted(set(splits[i]) | set(complement)) == list(range(16))


def test_a_large_mean_does_not_break_the_variance():
    """A P&L far from 0 against its spread (1e6 + noise of 1e-3): the shifted sums keep its Sharpe."""
    x = 1e6 + np.random.default_rng(2).normal(0.0, 1e-3, (320, 3))
    edges = O.block_edges(320, 16)
    got = O.blocks_sharpe(O.cscv_splits(16)[:1], *O.block_moments(x, edges))[0] * math.sqrt(252)
    days = np.concatenate([np.arange(edges[b], edges[b + 1]) for b in O.cscv_splits(16)[0]])
    assert np.allclose(got, [sharpe(x[days, j]) for j in range(3)], rtol=1e-6)


def test_pbo_is_deterministic_and_does_not_depend_on_the_chunks(monkeypatch):
    x = _noise(3, 500, 30)
    first = O.probability_of_backtest_overfitting(x)
    monkeypatch.setattr(O, "CHUNK_CELLS", 97)     # 3 splits a chunk instead of all of them
    second = O.probability_of_backtest_overfitting(x)
    assert first.pbo == second.pbo
    assert np.array_equal(first.logits, second.logits) and np.array_equal(first.picks, second.picks)


def test_ties_share_their_rank_and_copies_do_not_break_pbo():
    """Five identical candidates: every OOS rank ties at the middle, logit 0, counted as overfit (<= 0)."""
    x = np.repeat(_noise(4, 400, 1), 5, axis=1)
    result = O.probability_of_backtest_overfitting(x)
    assert np.allclose(result.logits, 0.0) and result.pbo == 1.0
    assert (result.picks == 0).all()         # the first of tied IS bests


def test_a_flat_candidate_has_sharpe_zero():
    x = _noise(5, 400, 3)
    x[:, 1] = 0.0
    result = O.probability_of_backtest_overfitting(x)
    assert np.isfinite(result.logits).all()


# ------------------------------------------------------------------------------ deflated Sharpe
def test_the_literature_number_expected_best_of_1600_is_about_3_4_standard_errors():
    assert O.expected_max_sharpe(1600) == pytest.approx(3.39, abs=0.01)
    assert O.expected_max_sharpe(1) == 0.0
    assert O.expected_max_sharpe(1600, 0.5) == pytest.approx(0.5 * O.expected_max_sharpe(1600))


@pytest.mark.parametrize("n, tolerance", [(10, 0.04), (100, 0.015), (1000, 0.01), (1600, 0.01)])
def test_expected_max_matches_monte_carlo(n, tolerance):
    rng = np.random.default_rng(n)
    draws = np.concatenate([rng.standard_normal((250, n)).max(axis=1) for _ in range(16)])   # 4,000 maxima
    assert O.expected_max_sharpe(n) == pytest.approx(draws.mean(), rel=tolerance)


def test_expected_max_sharpe_of_zero_edge_series_matches_monte_carlo():
    """The best Sharpe of 100 zero-edge return series of 250 days: sigma = sqrt(1 / (T - 1)) per day."""
    rng = np.random.default_rng(7)
    days, n = 250, 100
    best = []
    for _ in range(20):
        r = rng.normal(0.0, 0.01, (100, days, n))       # 100 repetitions a batch
        best.append((r.mean(axis=1) / r.std(axis=1, ddof=1)).max(axis=1))
    assert O.expected_max_sharpe(n, math.sqrt(1 / (days - 1))) == pytest.approx(np.concatenate(best).mean(),
                                                                                 rel=0.02)


@pytest.mark.parametrize("seed", range(6))
def test_the_best_of_n_noise_trials_is_not_significant_once_deflated(seed):
    x = _noise(seed, 1000, 200)
    best = int(np.argmax(x.mean(axis=0) / x.std(axis=0, ddof=1)))
    assert O.deflated_sharpe_ratio(x[:, best], 200).dsr < 0.95
    assert O.deflated_sharpe_ratio(x[:, best], 1).dsr > 0.95     # undeflated, the same series looks real


@pytest.mark.parametrize("seed", range(6))
def test_a_strong_planted_edge_stays_significant_once_deflated(seed):
    edge = np.random.default_rng(seed).normal(0.003, 0.01, 1000)    # annual Sharpe about 4.8
    result = O.deflated_sharpe_ratio(edge, 10_000)
    assert result.dsr > 0.99 and result.sharpe > result.benchmark


def test_probabilistic_sharpe_ratio_by_hand():
    assert O.probabilistic_sharpe_ratio(0.1, 0.1, 500) == pytest.approx(0.5)
    # SR 0.1 against 0 over 101 periods, skew -1, kurtosis 6: z = 0.1 * 10 / sqrt(1 + 0.1 + 1.25 * 0.01)
    from scipy.stats import norm
    assert O.probabilistic_sharpe_ratio(0.1, 0.0, 101, -1.0, 6.0) == pytest.approx(
        norm.cdf(1.0 / math.sqrt(1.1125)))


def test_return_moments_of_a_known_series():
    r = np.array([0.01, -0.02, 0.03, 0.0, 0.05])
    sr, skew, kurt, n = O.return_moments(r)
    d = r - r.mean()
    assert sr == pytest.approx(r.mean() / r.std(ddof=1)) and n == 5
    assert skew == pytest.approx((d ** 3).mean() / (d ** 2).mean() ** 1.5)
    assert kurt == pytest.approx((d ** 4).mean() / (d ** 2).mean() ** 2)
    normal = np.random.default_rng(0).normal(size=200_000)
    _, s, k, _ = O.return_moments(normal)
    assert abs(s) < 0.03 and k == pytest.approx(3.0, abs=0.05)


def test_more_trials_deflate_more():
    r = np.random.default_rng(8).normal(0.001, 0.01, 1500)
    dsrs = [O.deflated_sharpe_ratio(r, n).dsr for n in (1, 10, 100, 1000, 10_000)]
    assert dsrs == sorted(dsrs, reverse=True) and dsrs[0] > dsrs[-1]


# ------------------------------------------------------------------------------ effective trials
def test_copies_of_one_series_are_one_trial():
    base = _noise(0, 1000, 1)
    copies = np.hstack([base, 2 * base, -base, base + 0.001, np.repeat(base, 26, axis=1)])
    assert O.effective_trials(copies).n_trials == 1


def test_independent_series_are_as_many_trials():
    assert O.effective_trials(_noise(1, 2000, 40)).n_trials == 40


def test_groups_of_near_copies_are_one_trial_each():
    rng = np.random.default_rng(2)
    groups = rng.normal(size=(2000, 3))
    x = np.repeat(groups, 10, axis=1) + 0.1 * rng.normal(size=(2000, 30))
    trials = O.effective_trials(x)
    assert trials.n_trials == 3
    assert len(set(trials.labels[:10])) == 1 and len(set(trials.labels)) == 3


def test_the_cut_is_the_books_correlation_cap():
    """Two series of correlation 0.6 are one trial at the 0.5 cap and two at a cap of 0.7."""
    rng = np.random.default_rng(3)
    a, e = rng.normal(size=(2, 20_000))
    b = 0.6 * a + 0.8 * e
    x = np.stack([a, b], axis=1)
    assert O.effective_trials(x).n_trials == 1
    assert O.effective_trials(x, min_corr=0.7).n_trials == 2


def test_effective_trials_do_not_depend_on_the_chunks(monkeypatch):
    x = np.repeat(_noise(4, 300, 12), 2, axis=1) + 0.001 * _noise(5, 300, 24)
    first = O.effective_trials(x)
    monkeypatch.setattr(O, "CHUNK_CELLS", 50)
    second = O.effective_trials(x)
    assert first.n_trials == second.n_trials == 12 and np.array_equal(first.labels, second.labels)


# ------------------------------------------------------------------------------ train against later scores
def test_rank_correlation_is_spearmans():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 10, 200).astype(float)         # ties on both sides
    b = a + rng.integers(0, 6, 200)
    assert O.rank_correlation(a, b) == pytest.approx(spearmanr(a, b).statistic)
    assert O.rank_correlation(a, np.exp(a)) == pytest.approx(1.0)
    assert O.rank_correlation(a, -a) == pytest.approx(-1.0)


def test_rank_correlation_reads_only_the_pairs_both_scored():
    a = np.array([1.0, 2.0, 3.0, 4.0, np.nan, 6.0])
    b = np.array([1.0, 2.0, np.nan, 4.0, 0.0, 7.0])
    assert O.rank_correlation(a, b) == pytest.approx(1.0)
    assert O.rank_correlation([1.0, 2.0], [2.0, 1.0]) is None
    assert O.rank_correlation([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) is None


def test_top_k_gap_picks_by_train_and_averages_each_window():
    train = np.arange(50, dtype=float)                    # the top 20: 30..49
    validation = np.where(train >= 30, 1.0, 5.0)
    test = np.where(train >= 40, np.nan, -2.0)            # the top 10 not scored on the test
    gap = O.top_k_gap(train, validation, test, k=20)
    assert gap["train"] == pytest.approx(np.arange(30, 50).mean())
    assert gap["validation"] == 1.0 and gap["n_validation"] == 20
    assert gap["test"] == -2.0 and gap["n_test"] == 10
    assert sorted(gap["index"]) == list(range(30, 50))
    assert O.top_k_gap(train, k=20)["validation"] is None


# ------------------------------------------------------------------------------ one report
def test_the_summary_of_a_planted_archive():
    x = _noise(9, 1200, 40)
    x[:, 5] += 0.003
    cpcv = x.mean(axis=0) / x.std(axis=0)
    names = [f"f{j}" for j in range(40)]
    s = O.overfitting_summary(x, cpcv, names, verifier_calls=5000, validation=cpcv + 1, test=-cpcv)
    assert s["best"]["formula"] == "f5" and s["pbo"]["pbo"] <= 0.01
    assert s["effective_trials"]["n_trials"] == 40
    assert s["deflated_sharpe"]["calls"]["dsr"] <= s["deflated_sharpe"]["effective"]["dsr"]
    assert s["rank_correlation"] == {"validation": pytest.approx(1.0), "test": pytest.approx(-1.0)}
    assert s["top"]["formulas"][0] == "f5"
    assert json.loads(json_dumps(s)) == json.loads(json_dumps(s))   # JSON-safe


# ------------------------------------------------------------------------------ bad input: one typed line
def _bad_pnl_cases():
    good = _noise(0, 64, 4)
    cases = []
    for value in (np.nan, np.inf, -np.inf):
        for at in ((0, 0), (63, 3), (17, 2)):
            x = good.copy()
            x[at] = value
            cases.append((f"{value}@{at}", x))
    cases += [("1-D", good[:, 0]), ("3-D", good[None]), ("scalar", 1.0), ("empty", np.zeros((0, 0))),
              ("strings", [["a", "b"], ["c", "d"]]), ("ragged", [[1.0, 2.0], [3.0]]), ("None", None),
              ("one candidate", good[:, :1]), ("few days", good[:20])]
    return cases


BAD_BLOCKS = [0, 1, 3, 15, 22, 100, -2, 2.0, 16.0, True, "16", None]


@pytest.mark.parametrize("name, pnl", _bad_pnl_cases(), ids=[c[0] for c in _bad_pnl_cases()])
def test_bad_pnl_is_one_typed_line(name, pnl):
    with pytest.raises(InputError) as err:
        O.probability_of_backtest_overfitting(pnl)
    assert isinstance(err.value, O.OverfittingError) and "\n" not in str(err.value)


@pytest.mark.parametrize("blocks", BAD_BLOCKS, ids=[repr(b) for b in BAD_BLOCKS])
def test_bad_block_counts_are_refused(blocks):
    with pytest.raises(O.OverfittingError, match="even integer"):
        O.probability_of_backtest_overfitting(_noise(0, 400, 4), blocks)


BAD_TRIALS = [0, 0.5, -3, math.nan, math.inf, "10", None]


@pytest.mark.parametrize("n", BAD_TRIALS, ids=[repr(n) for n in BAD_TRIALS])
def test_bad_trial_counts_are_refused(n):
    with pytest.raises(O.OverfittingError):
        O.expected_max_sharpe(n)


@pytest.mark.parametrize("returns", [[0.1, 0.2], [0.01] * 50, [0.1, np.nan, 0.2, 0.3], []],
                         ids=["two", "constant", "nan", "empty"])
def test_returns_without_a_sharpe_are_refused(returns):
    with pytest.raises(O.OverfittingError):
        O.deflated_sharpe_ratio(returns, 10)


def test_moments_that_give_no_variance_are_refused():
    with pytest.raises(O.OverfittingError, match="non-positive variance"):
        O.probabilistic_sharpe_ratio(0.5, 0.0, 100, skew=5.0, kurtosis=3.0)


@pytest.mark.parametrize("cut", [0.0, -0.5, 1.5, math.nan])
def test_bad_correlation_cuts_are_refused(cut):
    with pytest.raises(O.OverfittingError):
        O.effective_trials(_noise(0, 100, 3), cut)


def test_mismatched_scores_are_refused():
    x = _noise(0, 100, 5)
    with pytest.raises(O.OverfittingError, match="5 candidates"):
        O.overfitting_summary(x, [1.0, 2.0])
    with pytest.raises(O.OverfittingError, match="different lengths"):
        O.rank_correlation([1, 2, 3], [1, 2])
    with pytest.raises(O.OverfittingError, match="no candidate"):
        O.overfitting_summary(x, [np.nan] * 5)
    with pytest.raises(O.OverfittingError, match="top k"):
        O.top_k_gap([1.0, 2.0], k=0)
