"""A formula's score on a fold's validation window, for whoever wants to stop early or choose without the test year.

The validation score is the holdout score (`alpha_gym.evaluation.holdout`: realistic costs, CPCV, the turnover
penalty, clip) on the fold's validation window, read with that window's lookback history, which lies inside the
purge (`alpha_gym.market.folds`). One validity, as everywhere a later window is scored: a formula the search
window's verifier refused has no validation score. It is a reading beside the reward, never a part of it.
"""

from __future__ import annotations

from typing import Any

from alpha_gym.evaluation.holdout import HoldoutEvaluator, check_disjoint
from alpha_gym.jsonable import finite_or_none
from alpha_gym.market.folds import FoldPanels
from alpha_gym.scoring.holdout_config import HoldoutConfig

#: What a refused answer's validation reading says (its training reason follows).
REFUSED_ON_SEARCH = "refused on the search window"


class ValidationScorer:
    """Scores answers on `panels.validation` under the rules of `verifier` (a verifier on `panels.search`).

    The window's arrays are built once, on the first answer, so an env that never asks costs nothing."""

    def __init__(self, panels: FoldPanels, verifier):
        check_disjoint(verifier.panel, panels.validation)
        self.panels = panels
        self.config = HoldoutConfig.from_verifier(verifier.config)
        self._evaluator: HoldoutEvaluator | None = None

    @property
    def evaluator(self) -> HoldoutEvaluator:
        if self._evaluator is None:
            self._evaluator = HoldoutEvaluator(self.panels.validation_history, self.panels.validation,
                                               config=self.config)
        return self._evaluator

    def reading(self, formula: str | None, valid_on_search: bool, search_reason: str = "") -> dict[str, Any]:
        """{'valid', 'reason', 'score', 'cpcv', 'turnover', 'window'}: the validation reading of one formula."""
        window = {"start": self.panels.fold.validation.start, "end": self.panels.fold.validation.end,
                  "fold": self.panels.fold.number}
        if not valid_on_search or formula is None:
            return {"valid": False, "reason": f"{REFUSED_ON_SEARCH}: {search_reason}", "score": None, "cpcv": None,
                    "turnover": None, "window": window}
        r = self.evaluator.score(formula)   # no cache kept across answers: an env may score millions
        return {"valid": r.valid, "reason": r.reason, "score": finite_or_none(r.score), "cpcv": finite_or_none(r.cpcv),
                "turnover": finite_or_none(r.turnover), "window": window}
