"""Formulas that seed the novelty archive: the 101 Formulaic Alphas (Kakushadze 2016), in the paper's spelling.

SEED_FORMULAS is derived from `alpha_gym.alpha101`: every paper alpha that parses within the
verifier's default limits and needs no data a panel may lack (no IndNeutralize, no market cap):
82 of the 101. `Verifier.archive` evaluates them on its panel and keeps those that trade.
"""

from __future__ import annotations

from alpha_gym.alpha101 import ALPHAS
from alpha_gym.language.errors import FormulaError
from alpha_gym.language.parser import DEFAULT_LIMITS, parse


def _seeds() -> tuple[str, ...]:
    out = []
    for alpha in ALPHAS:
        if not alpha.industry_free:
            continue
        try:
            parse(alpha.formula, DEFAULT_LIMITS)
        except FormulaError:
            continue
        out.append(alpha.formula)
    return tuple(out)


#: The paper's industry-free alphas, in the paper's order (number n is `SEED_NUMBERS[i]`).
SEED_FORMULAS: tuple[str, ...] = _seeds()
#: The paper's numbers of SEED_FORMULAS.
SEED_NUMBERS: tuple[int, ...] = tuple(a.n for a in ALPHAS if a.formula in set(SEED_FORMULAS))
