"""Combinatorial purged cross-validation (CPCV) of a daily P&L series.

The window is cut into 6 contiguous blocks; each pair of blocks is one test
slice (C(6, 2) = 15). A formula has nothing to fit, so each slice is an
independent exam of the same rule; the in-sample complement of a slice (the
other four blocks, minus 10 sessions purged before and 5 embargoed after each
test block) is what the stability channel compares against.

    score = mean(SR_1..SR_15) - 0.5 * std(SR_1..SR_15)    (population std)

Reference: M. Lopez de Prado (2018), Advances in Financial Machine Learning, ch. 12.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np

from alpha_gym.book.metrics import sharpe
from alpha_gym.ranges import SettingError, check_fields, closed, ints

#: More slices than this is a typo, not a test plan: C(20, 10) is 184,756 slices, each a copy of the days.
MAX_SLICES = 1000


@dataclass(frozen=True)
class CPCVConfig:
    n_blocks: int = 6
    n_test_blocks: int = 2
    purge: int = 10      # training sessions dropped just before each test block
    embargo: int = 5     # training sessions dropped just after each test block
    std_penalty: float = 0.5

    def __post_init__(self):
        check_fields(self, CPCV_RANGES)
        # each slice needs a test block and an in-sample block, and their count stays small
        if self.n_test_blocks >= self.n_blocks:
            raise SettingError("CPCVConfig", "n_test_blocks", self.n_test_blocks,
                               f"an integer in [1, n_blocks - 1] = [1, {self.n_blocks - 1}]")
        if math.comb(self.n_blocks, self.n_test_blocks) > MAX_SLICES:
            raise SettingError("CPCVConfig", "n_test_blocks", self.n_test_blocks,
                               f"such that C(n_blocks, n_test_blocks) <= {MAX_SLICES} slices, got "
                               f"C({self.n_blocks}, {self.n_test_blocks}) = "
                               f"{math.comb(self.n_blocks, self.n_test_blocks)}")


CPCV_RANGES = {
    "n_blocks": ints(2, 64),
    "n_test_blocks": ints(1, 63),     # and below n_blocks (checked in __post_init__)
    "purge": ints(0, 10_000),
    "embargo": ints(0, 10_000),
    "std_penalty": closed(0.0, 1e3),
}


@dataclass(frozen=True, eq=False)
class Split:
    """One CPCV slice: the test blocks, and the indices of its test and in-sample days."""

    blocks: tuple[int, ...]
    test: np.ndarray
    train: np.ndarray


@lru_cache(maxsize=32)
def splits(n_days: int, config: CPCVConfig = CPCVConfig()) -> tuple[Split, ...]:
    """All C(n_blocks, n_test_blocks) slices of a series of `n_days` days."""
    if n_days < config.n_blocks * 2:
        raise ValueError(f"CPCV needs at least {config.n_blocks * 2} days, got {n_days}")
    edges = np.linspace(0, n_days, config.n_blocks + 1).round().astype(int)
    blocks = [np.arange(edges[b], edges[b + 1]) for b in range(config.n_blocks)]
    out = []
    for chosen in combinations(range(config.n_blocks), config.n_test_blocks):
        test = np.concatenate([blocks[b] for b in chosen])
        keep = np.ones(n_days, dtype=bool)
        keep[test] = False
        for b in chosen:
            start, stop = edges[b], edges[b + 1]
            keep[max(0, start - config.purge):start] = False
            keep[stop:min(n_days, stop + config.embargo)] = False
        train = np.flatnonzero(keep)
        test.setflags(write=False)
        train.setflags(write=False)
        out.append(Split(tuple(chosen), test, train))
    return tuple(out)


def _sharpes(pnl: np.ndarray, index_sets) -> np.ndarray:
    """The annualised Sharpe (`metrics.sharpe`) of the P&L on each set of days."""
    return np.array([sharpe(pnl[idx]) for idx in index_sets], dtype=np.float64)


def slice_sharpes(pnl: np.ndarray, config: CPCVConfig = CPCVConfig()) -> tuple[np.ndarray, np.ndarray]:
    """Annualised Sharpe of each slice's test days and of its in-sample complement: two (15,) arrays."""
    pnl = np.asarray(pnl, dtype=np.float64)
    sp = splits(len(pnl), config)
    return _sharpes(pnl, [s.test for s in sp]), _sharpes(pnl, [s.train for s in sp])


def last_block_mean(series: np.ndarray, n_blocks: int = 6) -> float:
    """The mean of a daily series over the last of the `n_blocks` CPCV blocks (`splits`' edges): the most recent
    part of the window, where the recent turnover floor reads a book's turnover. nan for an empty series."""
    x = np.asarray(series, dtype=np.float64)
    if len(x) == 0:
        return float("nan")
    first = int(np.linspace(0, len(x), n_blocks + 1).round().astype(int)[-2])
    return float(x[first:].mean()) if first < len(x) else float(x[-1:].mean())


def cpcv_score(sharpes: np.ndarray, std_penalty: float = 0.5) -> float:
    """mean - std_penalty * std (ddof=0) of the slice Sharpes.

    Sharpe 0.8 on every slice scores 0.8; 3.0 on three slices and -0.2 on
    twelve averages 0.44 but scores -0.20.
    """
    s = np.asarray(sharpes, dtype=np.float64)
    return float(s.mean() - std_penalty * s.std(ddof=0))
