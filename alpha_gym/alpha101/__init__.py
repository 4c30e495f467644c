"""The 101 Formulaic Alphas (Kakushadze 2016, Appendix A), as data, in the paper's own spelling.

The formula language reads the paper's text directly: its names are aliases of the DSL
operators (`correlation` = `ts_corr`, `Ts_Rank` = `ts_rank`, `IndNeutralize` =
`ind_neutralize`, ...), `min(x, 5)` is the paper's `ts_min(x, 5)`, windows are floored.
See `docs/operators.md` for every convention.

    >>> from alpha_gym.alpha101 import formula, formulas, parse_alpha
    >>> formula(101)
    '((close - open) / ((high - low) + .001))'
    >>> len(formulas())            # the 82 that need neither industry labels nor market cap
    82

`industry`: the alpha calls `IndNeutralize` and needs `Panel.sectors` (every IndClass level is
read as that one sector map). `cap`: the alpha reads market cap (`cap`). On a panel without
that data, evaluation raises `DataUnavailableError` (a `FormulaError`): an invalid answer
with a reason, never a crash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from alpha_gym.language.nodes import Node
from alpha_gym.language.parser import DEFAULT_LIMITS, Limits, parse

__all__ = ["ALPHAS", "PAPER_LIMITS", "PaperAlpha", "formula", "formulas", "parse_alpha"]

#: Limits for the paper set only (answers keep `DEFAULT_LIMITS`). Under this language's
#: accounting all 101 alphas fit the default limits (deepest: #29 at 16 levels; longest
#: nested lookback: #48 at 251 sessions); this is headroom for the paper's set and for
#: rewritten variants, never applied to model answers.
PAPER_LIMITS = Limits(max_window=DEFAULT_LIMITS.max_window, max_lookback=504, max_tokens=512,
                      max_depth=24, max_chars=DEFAULT_LIMITS.max_chars, max_brackets=DEFAULT_LIMITS.max_brackets)


@dataclass(frozen=True)
class PaperAlpha:
    """One alpha of the paper: its number, its text as printed, and the data it needs."""

    n: int
    formula: str
    industry: bool                      # uses IndNeutralize (needs Panel.sectors)
    industry_levels: tuple[str, ...]    # IndClass levels the text names
    cap: bool                           # reads market cap

    @property
    def industry_free(self) -> bool:
        """Computable from OHLCV alone (no sector labels, no market cap)."""
        return not (self.industry or self.cap)


@lru_cache(maxsize=1)
def _load() -> tuple[PaperAlpha, ...]:
    raw = json.loads(resources.files("alpha_gym.alpha101").joinpath("alpha101.json").read_text())
    alphas = tuple(PaperAlpha(int(a["n"]), a["formula"], bool(a["industry"]), tuple(a["industry_levels"]),
                              bool(a["cap"])) for a in raw["alphas"])
    if [a.n for a in alphas] != list(range(1, 102)):
        raise ValueError("alpha101.json must list alphas 1..101 in order")
    return alphas


ALPHAS: tuple[PaperAlpha, ...] = _load()


def formula(n: int) -> str:
    """The text of Alpha#n as printed in the paper (1 <= n <= 101)."""
    if not 1 <= int(n) <= len(ALPHAS):
        raise KeyError(f"there is no Alpha#{n}; the paper has 1..{len(ALPHAS)}")
    return ALPHAS[int(n) - 1].formula


def formulas(industry_free: bool = True) -> dict[int, str]:
    """Alpha number -> text. `industry_free=True` keeps the 82 that need no sector labels and
    no market cap; `False` gives all 101."""
    return {a.n: a.formula for a in ALPHAS if a.industry_free or not industry_free}


@lru_cache(maxsize=None)
def parse_alpha(n: int, limits: Limits = PAPER_LIMITS) -> Node:
    """Alpha#n parsed (with `PAPER_LIMITS` unless told otherwise)."""
    return parse(formula(n), limits)
