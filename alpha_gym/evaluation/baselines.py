"""Baselines a trained model must beat, scored on the same holdout window and costs as its answers.

The reference's Part 2 lesson: an untrained baseline is mandatory before declaring a trainer won.
A model that learned something writes answers whose mean holdout score lies above every baseline
here, with its interval; a model whose answers are `ts_ema(volume, d)` has to beat `rank(volume)`.

Three kinds, all needing no model:

motif      one formula per classic one-idea signal: the volume level, its 10-day average, 5-day
           reversal, 12-1 momentum, low volatility;
reference  the four step-500 answers the reference published (train CPCV 0.59..0.95);
alpha101   the 82 Alpha101s that need no industry labels or market cap, as one equal-weight book.

Each baseline is a set of formulas scored by `HoldoutEvaluator.score` (the exact holdout score);
its `score` is the mean over its valid formulas, with a bootstrap interval over formulas when there
are several (`bootstrap.mean_interval`), and its `book` is the equal-weight book of the valid ones, as
for a model's answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from alpha_gym.evaluation.bootstrap import mean_interval
from alpha_gym.jsonable import finite_or_none


@dataclass(frozen=True)
class Baseline:
    name: str
    kind: str                       # "motif", "reference" or "alpha101"
    formulas: tuple[str, ...]


MOTIFS = (
    Baseline("volume level", "motif", ("rank(volume)",)),
    Baseline("volume, 10-day EMA", "motif", ("ts_ema(volume, 10)",)),
    Baseline("5-day reversal", "motif", ("-1 * rank(ts_sum(returns, 5))",)),
    Baseline("12-1 momentum", "motif", ("rank(delay(close, 21) / delay(close, 252) - 1)",)),
    Baseline("low volatility", "motif", ("-1 * rank(ts_std(returns, 63))",)),
)

#: The reference's shipped step-500 answers with a positive train CPCV (its Part 1 table).
REFERENCE_STEP_500 = (
    "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))",
    "rank(ts_max(volume / vwap, 34) / ts_std(returns, 34))",
    "rank(ts_std(volume / (high - low), 34))",
    "rank(ts_std(volume, 8) / ts_std(close, 8))",
)


def all_baselines() -> tuple[Baseline, ...]:
    """The motifs, each reference formula on its own, and the Alpha101 book."""
    from alpha_gym.alpha101 import formulas
    reference = tuple(Baseline(f"reference step 500 #{k}", "reference", (f,))
                      for k, f in enumerate(REFERENCE_STEP_500, 1))
    return MOTIFS + reference + (Baseline("Alpha101 equal-weight book (82)", "alpha101",
                                          tuple(formulas(industry_free=True).values())),)


def score_baselines(evaluator, baselines: Sequence[Baseline] | None = None, n_boot: int = 2000) -> list[dict[str, Any]]:
    """Score every baseline with a `HoldoutEvaluator`; one JSON-safe row each, in the given order."""
    rows = []
    for b in all_baselines() if baselines is None else baselines:
        # no shared cache and only a running sum of weights: memory stays flat on 496 stocks, 82 formulas
        total = np.zeros((evaluator.panel.n_days, evaluator.panel.n_stocks))
        scores, forms, turnovers = [], set(), []
        for f in b.formulas:
            r = evaluator.score(f)
            if r.valid:
                total += r.weights
                scores.append(r.score)
                forms.add(r.form)
                turnovers.append(r.turnover)
        book, _ = evaluator.book_from_weights(total / max(1, len(scores)), len(scores))
        interval = mean_interval(scores, n_boot)
        rows.append({"name": b.name, "kind": b.kind, "formulas": list(b.formulas), "n": len(b.formulas),
                     "n_valid": len(scores), "score": finite_or_none(float(np.mean(scores))) if scores else None,
                     "lo": interval[0] if interval else None, "hi": interval[1] if interval else None,
                     "n_families": len(forms), "median_turnover": float(np.median(turnovers)) if turnovers else None,
                     "book": book.to_dict()})
    return rows


def best_baseline(rows: Sequence[dict]) -> dict | None:
    """The baseline row with the highest mean holdout score (None if none scored)."""
    scored = [r for r in rows if r.get("score") is not None]
    return max(scored, key=lambda r: r["score"]) if scored else None


def beats(lo: float | None, rows: Sequence[dict]) -> bool | None:
    """Whether an interval's lower end lies above the best baseline's score (None: nothing to compare)."""
    best = best_baseline(rows)
    if lo is None or best is None or not np.isfinite(lo):
        return None
    return bool(lo > best["score"])
