"""Walk-forward folds: a search window, a purged validation window after it, and a test year after that.

Every fold is cut from the data given (the train file: nothing after its last session exists here), counted in
sessions from the data's end, so the last fold's test window is exactly the comparison's pseudo-holdout (the
last `test` sessions, `--pseudo-holdout`: 252 by default). With `n` folds, numbered 1..n oldest first, fold k:

    test        the (n - k + 1)-th last block of `test` sessions (fold n: the last `test` sessions)
    validation  the `validation` sessions just before its test window
    purge       the `purge` sessions just before its validation window: no run reads them, and scoring reads
                them only as the validation window's lookback history. `purge` >= `history` (252, the longest
                lookback a formula may have: `Limits.max_lookback`, the holdout's `HoldoutConfig.context`), so
                no validation day's signal reads a search-window session
    search      every session before the purge, from the data's first (at least `min_search` of them)

A window scored later is scored as the holdout is (`alpha_gym.evaluation.holdout`): its formulas read the
`history` sessions before it as lookback. The validation window's history lies inside the purge; the test
window's is the validation window (and, were `validation` shorter than `history`, the purge): never the search
window. Test windows of successive folds are contiguous, so fold k's validation window is fold k-1's test window.

On the real train file (us_daily_train.csv.gz, 3,304 sessions 2012-06-29..2025-08-20) with the defaults
(5 folds; test, validation and purge 252 sessions each):

    fold  search (sessions)              purge                    validation               test
    1     2012-06-29..2018-08-13 (1,540)   2018-08-14..2019-08-14   2019-08-15..2020-08-13   2020-08-14..2021-08-13
    2     2012-06-29..2019-08-14 (1,792)   2019-08-15..2020-08-13   2020-08-14..2021-08-13   2021-08-16..2022-08-15
    3     2012-06-29..2020-08-13 (2,044)   2020-08-14..2021-08-13   2021-08-16..2022-08-15   2022-08-16..2023-08-16
    4     2012-06-29..2021-08-13 (2,296)   2021-08-16..2022-08-15   2022-08-16..2023-08-16   2023-08-17..2024-08-16
    5     2012-06-29..2022-08-15 (2,548)   2022-08-16..2023-08-16   2023-08-17..2024-08-16   2024-08-19..2025-08-20

(`walk_forward_folds(panel.dates)`; tests/test_folds.py checks this table against the file.) A `Fold` is a row
of dates and session positions, immutable; `cut_fold(panel, fold)` cuts a panel into the fold's windows, each a
panel of copies holding nothing past its own last session (`Panel.window`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.market.panel import Panel

#: The longest lookback a formula may read, in sessions (`alpha_gym.language.Limits.max_lookback`, the holdout's
#: `HoldoutConfig.context`; tests/test_folds.py checks the three agree): the lookback history a scored window
#: gets, and so the shortest purge that keeps the search window out of the validation window's signals.
LOOKBACK_HISTORY = 252
#: What `--fold all` names: every fold of the plan.
ALL_FOLDS = "all"


class FoldError(InputError):
    """A fold that cannot be cut: a number out of range or not an integer, or windows the data cannot hold."""


@dataclass(frozen=True)
class FoldPlan:
    """The sizes of the walk-forward folds, in sessions (the module docstring says how they are laid out)."""

    n_folds: int = 5
    test: int = 252
    validation: int = 252
    purge: int = LOOKBACK_HISTORY
    history: int = LOOKBACK_HISTORY      # lookback sessions a scored window reads before its first session
    min_search: int = 120                # the shortest search window (the pseudo-holdout cut's own floor)

    def __post_init__(self):
        for name in ("n_folds", "test", "validation", "purge", "history", "min_search"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise FoldError(f"fold plan: {name} = {value!r}: must be an integer >= 1")
        if self.purge < self.history:
            raise FoldError(f"fold plan: purge {self.purge} < history {self.history}: the validation window's "
                            "lookback would read search-window sessions")

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("n_folds", "test", "validation", "purge", "history", "min_search")}


@dataclass(frozen=True)
class Window:
    """Sessions first .. stop - 1 of the data (positions), from `start` to `end` (dates, inclusive)."""

    first: int
    stop: int
    start: str
    end: str

    @property
    def sessions(self) -> int:
        return self.stop - self.first

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "sessions": self.sessions, "first": self.first}


@dataclass(frozen=True)
class Fold:
    """One walk-forward fold: its number (1..n, oldest first) and its four consecutive windows."""

    number: int
    n_folds: int
    search: Window
    purge: Window
    validation: Window
    test: Window

    def to_dict(self) -> dict[str, Any]:
        return {"fold": self.number, "n_folds": self.n_folds,
                **{w: getattr(self, w).to_dict() for w in ("search", "purge", "validation", "test")}}

    def line(self) -> str:
        """One line naming the windows' dates (for progress and reports)."""
        return (f"fold {self.number}/{self.n_folds}: search {self.search.start}..{self.search.end}, purge "
                f"{self.purge.sessions} sessions, validation {self.validation.start}..{self.validation.end}, test "
                f"{self.test.start}..{self.test.end}")


def _dates(dates) -> np.ndarray:
    d = np.asarray(dates, dtype="datetime64[D]")
    if d.ndim != 1 or len(d) == 0:
        raise FoldError("folds need a non-empty list of session dates")
    if len(d) > 1 and not np.all(d[1:] > d[:-1]):
        raise FoldError("folds need strictly increasing session dates")
    return d


def _window(dates: np.ndarray, first: int, stop: int) -> Window:
    return Window(int(first), int(stop), str(dates[first]), str(dates[stop - 1]))


def fold_number(text, n_folds: int) -> int:
    """A fold number as a person writes it ("3"): ASCII digits naming 1..n_folds, else FoldError saying which
    numbers exist (int() alone would take " 3", "3_0" or another script's digits)."""
    s = text if isinstance(text, str) else str(text)
    if type(text) is int or (isinstance(text, str) and s.isascii() and s.isdigit()):
        k = int(s)
        if 1 <= k <= n_folds:
            return k
        raise FoldError(f"fold {s[:20]}: out of range: the folds are numbered 1..{n_folds} (oldest first)")
    raise FoldError(f"fold {s[:40]!r}: not a fold number: an integer 1..{n_folds} (oldest first)")


def make_fold(dates, number: int, plan: FoldPlan = FoldPlan()) -> Fold:
    """Fold `number` (1..plan.n_folds) of the data with these session dates; FoldError when it does not fit."""
    d = _dates(dates)
    if type(number) is not int or not 1 <= number <= plan.n_folds:
        raise FoldError(f"fold {number!r}: out of range: the folds are numbered 1..{plan.n_folds} (oldest first)")
    n = len(d)
    test_first = n - plan.test * (plan.n_folds - number + 1)
    validation_first = test_first - plan.validation
    purge_first = validation_first - plan.purge
    if purge_first < plan.min_search:
        need = n - purge_first + plan.min_search
        raise FoldError(f"fold {number} does not fit the data: its windows (test {plan.test}, validation "
                        f"{plan.validation}, purge {plan.purge}, search at least {plan.min_search} sessions, and the "
                        f"{plan.n_folds - number} later test windows) need {need} sessions; the data has {n} "
                        f"({d[0]}..{d[-1]})")
    return Fold(number, plan.n_folds, search=_window(d, 0, purge_first), purge=_window(d, purge_first, validation_first),
                validation=_window(d, validation_first, test_first),
                test=_window(d, test_first, test_first + plan.test))


def walk_forward_folds(dates, plan: FoldPlan = FoldPlan()) -> tuple[Fold, ...]:
    """Every fold of the plan, oldest first (FoldError naming the first that does not fit the data)."""
    return tuple(make_fold(dates, k, plan) for k in range(1, plan.n_folds + 1))


def chosen_folds(text, dates, plan: FoldPlan = FoldPlan()) -> tuple[Fold, ...]:
    """The folds a `--fold` value names: one number, or `all` (every fold)."""
    if isinstance(text, str) and text == ALL_FOLDS:
        return walk_forward_folds(dates, plan)
    return (make_fold(dates, fold_number(text, plan.n_folds), plan),)


@dataclass(frozen=True, eq=False)
class FoldPanels:
    """A panel cut into a fold's windows: the search panel, and each scored window with its lookback history
    (the `history` sessions before it, which `alpha_gym.evaluation.holdout` reads as the training tail)."""

    fold: Fold
    search: Panel
    validation_history: Panel
    validation: Panel
    test_history: Panel
    test: Panel


def _cut(panel: Panel, first: int, stop: int) -> Panel:
    return panel.window(panel.dates[first], panel.dates[stop - 1])


def cut_fold(panel: Panel, fold: Fold, history: int = LOOKBACK_HISTORY) -> FoldPanels:
    """The fold's windows of `panel` (copies). FoldError when the fold was not made from this panel's dates, or
    when a window's history would reach into the search window (history longer than the purge)."""
    d = np.asarray(panel.dates, dtype="datetime64[D]")
    windows = (fold.search, fold.purge, fold.validation, fold.test)
    if fold.test.stop > len(d) or any(str(d[w.first]) != w.start or str(d[w.stop - 1]) != w.end for w in windows):
        raise FoldError(f"fold {fold.number} was made from other dates than this panel's ({d[0]}..{d[-1]}, "
                        f"{len(d)} sessions): make it from panel.dates")
    if history > fold.purge.sessions:
        raise FoldError(f"history {history} is longer than fold {fold.number}'s purge ({fold.purge.sessions} "
                        "sessions): the validation window's lookback would read the search window")
    v, t = fold.validation, fold.test
    return FoldPanels(fold, search=_cut(panel, fold.search.first, fold.search.stop),
                      validation_history=_cut(panel, v.first - history, v.first),
                      validation=_cut(panel, v.first, v.stop),
                      test_history=_cut(panel, t.first - history, t.first), test=_cut(panel, t.first, t.stop))


def fold_panels(panel: Panel, text, sessions: int, n_folds: int = FoldPlan.n_folds) -> FoldPanels:
    """The panels of the fold `text` names ("1".."5") with test and validation windows of `sessions` each (a
    command's `--pseudo-holdout`, so its last fold's test window is the pseudo-holdout it would cut)."""
    plan = FoldPlan(n_folds=n_folds, test=sessions, validation=sessions)
    return cut_fold(panel, make_fold(panel.dates, fold_number(text, plan.n_folds), plan), plan.history)
