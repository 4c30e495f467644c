"""What a run on a walk-forward fold ships: its book and its best chosen on the fold's validation window, the train
reward only admitting candidates.

The rule is `walk_forward.score_fold`'s "by validation" choice, the same functions: the SHORTLIST formulas of the
run's pool with the highest train reward (`walk_forward`'s order) are the candidates, each valid on the validation
window only where the search window's verifier admits it (one validity), scored there with the window's own
lookback (inside the purge); `choose_on_validation` then picks the best and the correlation-capped book (greedy by
validation score, correlations on the validation window's daily P&L). The test window is no input: `score_fold`
reads it after, and its "book chosen on validation" is the book shipped here.

Where no candidate is valid on the validation window, or none of them trades enough to enter a book, the run
ships what it chose on train, and says so (`fallback`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from alpha_gym.evaluation.holdout import train_verdict
from alpha_gym.evaluation.selection import Candidate, book_selection
from alpha_gym.evaluation.walk_forward import (SHORTLIST, PoolEntry, WalkForwardError, ranked_by_reward, window_results,
                                               choose_on_validation)
from alpha_gym.jsonable import finite_or_none
from alpha_gym.market.folds import FoldPanels
from alpha_gym.scoring.holdout_config import HoldoutConfig

#: What a shipped choice says it was chosen on.
ON_VALIDATION, ON_TRAIN = "validation", "train"
#: The rule, in words, as a shipped file states it.
RULE = "the train reward admits the shortlist; the validation score chooses the best and the correlation-capped book"


def choose_to_ship(pool: Sequence[PoolEntry], verifier, panels: FoldPanels, *, max_corr: float, min_turnover: float,
                   shortlist: int = SHORTLIST) -> dict[str, Any]:
    """The best and the book a fold run ships, JSON-ready:

        chosen_on      "validation", or "train" where nothing on the validation window could be chosen
        rule           the shortlist (size asked, candidates, how many valid on validation), the book rule, the window
        fallback       None, or why the train choice is shipped
        best           {formula, reward, validation}: the best by validation score (the train best on a fallback;
                       None for an empty pool)
        train_best     {formula, reward, validation}: the best by train reward, beside it (None for an empty pool)
        book           the validation book's members, their validation scores, and its statistics on the
                       validation window (`selection.book_selection`); None on a fallback (the train book ships)

    verifier: a `Verifier` on `panels.search` (validity does not read its archive: the run's or a fresh one)."""
    if verifier.panel.fingerprint() != panels.search.fingerprint():
        raise WalkForwardError(f"the verifier was built on {verifier.panel.dates[0]}..{verifier.panel.dates[-1]}, "
                               f"not on fold {panels.fold.number}'s search window")
    ranked = ranked_by_reward(pool)
    listed = [e.formula for e in ranked][:shortlist]          # score_fold's shortlist, the same order
    ok = [train_verdict(verifier, f).valid for f in listed]
    validation = window_results(listed, ok, panels.validation_history, panels.validation, verifier,
                         HoldoutConfig.from_verifier(verifier.config)) if listed else {}
    chosen = choose_on_validation(listed, validation, max_corr, min_turnover)
    rewards = {e.formula: e.reward for e in ranked}

    def reading(formula: str) -> dict[str, Any]:
        return {"formula": formula, "reward": finite_or_none(rewards[formula]),
                "validation": finite_or_none(validation[formula].score) if validation[formula].valid else None}
    n_valid = sum(validation[f].valid for f in listed)
    window = panels.fold.validation
    rule = {"about": RULE, "shortlist": shortlist, "candidates": len(listed), "valid_on_validation": n_valid,
            "max_corr": max_corr, "min_turnover": min_turnover,
            "window": {"fold": panels.fold.number, "start": window.start, "end": window.end}}
    fallback = None
    if not listed:
        fallback = "the run found no formula (an empty pool): the choice on train, empty, is shipped"
    elif not n_valid:
        fallback = (f"none of the {len(listed)} candidates is valid on the validation window: the choice on train "
                    "is shipped")
    elif not chosen["book_validation"]:
        fallback = (f"none of the {n_valid} candidates valid on the validation window trades at least "
                    f"{min_turnover:.0%} a day there: the choice on train is shipped")
    members = chosen["book_validation"]
    book = None if fallback else {
        "members": list(members), "member_validation": [finite_or_none(validation[f].score) for f in members],
        # the statistics of the chosen members' equal-weight book on the validation window, where they were chosen
        "selection": book_selection("correlation_capped_on_validation", [
            Candidate(name=f, cpcv=float(validation[f].score), turnover=float(validation[f].turnover),
                      pnl=np.asarray(validation[f].net)) for f in members]).to_dict()}
    best = listed[:1] if fallback else chosen["best_validation"]
    return {"chosen_on": ON_TRAIN if fallback else ON_VALIDATION, "rule": rule, "fallback": fallback,
            "best": reading(best[0]) if best else None, "train_best": reading(listed[0]) if listed else None,
            "book": book}
