"""Walk-forward folds (alpha_gym/market/folds.py): each window's dates as stated, windows that never overlap, a
purge that keeps the search window out of every scored window's lookback, and a clear refusal of a bad fold."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from alpha_gym.market import synthetic_panel
from alpha_gym.market.folds import (ALL_FOLDS, LOOKBACK_HISTORY, Fold, FoldError, FoldPlan, chosen_folds, cut_fold,
                                    fold_number, make_fold, walk_forward_folds)

#: The fold table alpha_gym/market/folds.py's docstring states for the real train file (search, purge,
#: validation, test: first and last session each).
REAL_TABLE = {
    1: ("2012-06-29", "2018-08-13", "2018-08-14", "2019-08-14", "2019-08-15", "2020-08-13", "2020-08-14", "2021-08-13"),
    2: ("2012-06-29", "2019-08-14", "2019-08-15", "2020-08-13", "2020-08-14", "2021-08-13", "2021-08-16", "2022-08-15"),
    3: ("2012-06-29", "2020-08-13", "2020-08-14", "2021-08-13", "2021-08-16", "2022-08-15", "2022-08-16", "2023-08-16"),
    4: ("2012-06-29", "2021-08-13", "2021-08-16", "2022-08-15", "2022-08-16", "2023-08-16", "2023-08-17", "2024-08-16"),
    5: ("2012-06-29", "2022-08-15", "2022-08-16", "2023-08-16", "2023-08-17", "2024-08-16", "2024-08-19", "2025-08-20"),
}
WINDOWS = ("search", "purge", "validation", "test")


def _dates(fold: Fold) -> tuple[str, ...]:
    return tuple(x for w in WINDOWS for x in (getattr(fold, w).start, getattr(fold, w).end))


@pytest.fixture(scope="module")
def panel():
    """A synthetic market long enough for five folds of 60-session test windows (and a little one for less)."""
    return synthetic_panel(n_stocks=8, n_days=1000, seed=5)


SMALL = FoldPlan(test=60, validation=60)


@pytest.mark.real_data
def test_the_real_folds_are_the_stated_table_and_the_last_test_is_the_pseudo_holdout(real_us46):
    folds = walk_forward_folds(real_us46.dates)
    assert {f.number: _dates(f) for f in folds} == REAL_TABLE
    assert all(f.test.sessions == f.validation.sessions == f.purge.sessions == 252 for f in folds)
    # the comparison's pseudo-holdout (trainers/compare/ladder.py: the last 252 sessions, cut off before training)
    from trainers.compare.ladder import SCALES
    last = folds[-1]
    cut = real_us46.n_days - SCALES["cpu"].pseudo_holdout
    assert (last.test.first, last.test.stop) == (cut, real_us46.n_days)
    assert last.test.start == str(real_us46.dates[cut]) == "2024-08-19"
    assert last.test.end == "2025-08-20"        # the train file's last session: the sealed year is never reached
    # the test windows start in August of 2020..2024, as the issue names them
    assert [f.test.start[:7] for f in folds] == [f"{y}-08" for y in range(2020, 2025)]


@pytest.mark.parametrize("plan", [FoldPlan(test=60, validation=60), FoldPlan(n_folds=3, test=100, validation=40,
                                                                             purge=300),
                                  FoldPlan(n_folds=1, test=30, validation=200, purge=252, history=100)])
def test_windows_are_consecutive_never_overlap_and_hold_their_stated_lengths(panel, plan):
    folds = walk_forward_folds(panel.dates, plan)
    assert [f.number for f in folds] == list(range(1, plan.n_folds + 1))
    for f in folds:
        w = [getattr(f, name) for name in WINDOWS]
        assert w[0].first == 0                                                # search: from the data's first session
        assert all(a.stop == b.first for a, b in zip(w, w[1:]))              # consecutive: no gap, no overlap
        assert all(a.end < b.start for a, b in zip(w, w[1:]))
        assert (f.purge.sessions, f.validation.sessions, f.test.sessions) == (plan.purge, plan.validation, plan.test)
        assert f.search.sessions >= plan.min_search
        for x in w:
            assert (x.start, x.end) == (str(panel.dates[x.first]), str(panel.dates[x.stop - 1]))
    assert folds[-1].test.stop == panel.n_days
    # successive test windows are contiguous: fold k's validation window is fold k-1's test window
    assert all(a.test.stop == b.test.first for a, b in zip(folds, folds[1:]))
    if plan.validation == plan.test:
        assert all(a.test == b.validation for a, b in zip(folds, folds[1:]))


def test_the_cut_panels_hold_the_stated_sessions_and_no_lookback_reads_the_search_window(panel):
    for f in walk_forward_folds(panel.dates, SMALL):
        cut = cut_fold(panel, f)
        assert cut.search.dates[-1] == np.datetime64(f.search.end) and cut.search.n_days == f.search.sessions
        for name in ("validation", "test"):
            window, history = getattr(cut, name), getattr(cut, f"{name}_history")
            stated = getattr(f, name)
            assert (str(window.dates[0]), str(window.dates[-1]), window.n_days) == (stated.start, stated.end,
                                                                                     stated.sessions)
            assert history.n_days == LOOKBACK_HISTORY and history.dates[-1] < window.dates[0]
            # the purge: every history session lies after the search window's last one
            assert history.dates[0] > cut.search.dates[-1]
            assert np.array_equal(history.data["close"], panel.data["close"][stated.first - LOOKBACK_HISTORY:
                                                                                stated.first])
        assert np.datetime64(cut.validation_history.dates[0]) == np.datetime64(f.purge.start)
        # each cut is a panel of copies: nothing past its last session is in it
        assert cut.search.n_days + f.purge.sessions + f.validation.sessions + f.test.sessions <= panel.n_days


def test_the_history_is_the_longest_lookback_a_formula_may_have_and_the_holdouts_context():
    from alpha_gym.language import DEFAULT_LIMITS
    from alpha_gym.scoring.holdout_config import HoldoutConfig
    assert LOOKBACK_HISTORY == DEFAULT_LIMITS.max_lookback == HoldoutConfig().context == FoldPlan().purge


def test_folds_are_immutable_rows():
    f = make_fold(synthetic_panel(n_stocks=5, n_days=900, seed=1).dates, 1, FoldPlan(n_folds=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.number = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.test.first = 0
    assert f.to_dict()["test"] == {"start": f.test.start, "end": f.test.end, "sessions": 252, "first": f.test.first}


#: Spellings of a fold that are not 1..5: out of range, not an integer, another script's digits, padded.
BAD_FOLDS = ["0", "6", "-1", "+1", "1.0", "1e0", "one", "", " ", " 1", "1 ", "1_0", "0x1", "٣", "²", "３", "1,2",
             "all ", "ALL", "All", "None", "nan", "inf", "10000000000000000000000", "١", "1\n", "\t2", "5.", "-0"]


@pytest.mark.parametrize("text", BAD_FOLDS)
def test_a_bad_fold_number_is_refused_in_one_line_naming_the_range(text, panel):
    with pytest.raises(FoldError) as e:
        chosen_folds(text, panel.dates, SMALL)
    assert "1..5" in str(e.value) and "\n" not in str(e.value)


def test_the_generic_integer_flag_would_take_spellings_the_fold_parser_refuses():
    """The before count: `ranges.flag(ints(1, 5))`, what a numeric flag uses, reads some of these as folds."""
    import argparse
    from alpha_gym.ranges import flag, ints
    parse = flag(ints(1, 5))
    taken = []
    for text in BAD_FOLDS:
        try:
            parse(text)
            taken.append(text)
        except argparse.ArgumentTypeError:
            pass
    assert set(taken) == {"+1", " 1", "1 ", "٣", "３", "١", "1\n", "\t2"}, taken


@pytest.mark.parametrize("text,numbers", [("1", [1]), ("5", [5]), ("03", [3]), (ALL_FOLDS, [1, 2, 3, 4, 5])])
def test_good_fold_values(text, numbers, panel):
    assert [f.number for f in chosen_folds(text, panel.dates, SMALL)] == numbers
    assert fold_number(numbers[0], 5) == numbers[0]


def test_a_fold_whose_windows_do_not_fit_the_data_is_refused_naming_what_it_needs():
    dates = synthetic_panel(n_stocks=5, n_days=800, seed=0).dates
    plan = FoldPlan(test=120, validation=120)          # the comparison's smoke sizes on its 800-session market
    assert [make_fold(dates, k, plan).search.sessions for k in (4, 5)] == [188, 308]
    for k in (1, 2, 3):
        with pytest.raises(FoldError, match=rf"fold {k} does not fit the data: .* need \d+ sessions; the data has 800"):
            make_fold(dates, k, plan)
    with pytest.raises(FoldError, match="fold 1 does not fit"):
        walk_forward_folds(dates, plan)
    with pytest.raises(FoldError, match="fold 3 does not fit"):
        chosen_folds("3", dates, plan)


@pytest.mark.parametrize("changes,match", [({"n_folds": 0}, "n_folds"), ({"test": -1}, "test"),
                                           ({"purge": 100}, "purge 100 < history 252"), ({"validation": 1.5}, "valid"),
                                           ({"history": True}, "history")])
def test_a_bad_plan_is_refused(changes, match):
    with pytest.raises(FoldError, match=match):
        FoldPlan(**changes)


def test_a_fold_is_refused_on_a_panel_it_was_not_made_from(panel):
    f = make_fold(panel.dates, 5, SMALL)
    with pytest.raises(FoldError, match="other dates"):
        cut_fold(panel.head(900), f)
    with pytest.raises(FoldError, match="other dates"):
        cut_fold(synthetic_panel(n_stocks=8, n_days=1000, seed=5, start="2013-01-02"), f)
    with pytest.raises(FoldError, match="history 300 is longer"):
        cut_fold(panel, f, history=300)
