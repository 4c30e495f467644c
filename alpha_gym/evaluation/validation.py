"""A formula's score on a fold's validation window, for whoever wants to stop early or choose without the test year.

The validation score is the holdout score (`alpha_gym.evaluation.holdout`: realistic costs, CPCV, the turnover
penalty, clip) on the fold's validation window, read with that window's lookback history, which lies inside the
purge (`alpha_gym.market.folds`). One validity, as everywhere a later window is scored: a formula the search
window's verifier refused has no validation score. It is a reading beside the reward, never a part of it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from alpha_gym.errors import InputError
from alpha_gym.evaluation.holdout import HoldoutEvaluator, check_disjoint
from alpha_gym.jsonable import finite_or_none, json_dumps
from alpha_gym.market.folds import FoldPanels
from alpha_gym.scoring.holdout_config import HoldoutConfig
from alpha_gym.service.http_json import json_depth

#: A fold run's validation readings, one line per distinct formula (formula -> score): kept, read back on a resume.
VALIDATION_LOG = "validation.jsonl"

#: What a refused answer's validation reading says (its training reason follows).
REFUSED_ON_SEARCH = "refused on the search window"


class ValidationReadingsError(InputError):
    """A kept readings file that cannot be read at all (not a file)."""


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


def validation_readings(run_dir) -> dict[str, float | None] | None:
    """OUT/validation.jsonl of a fold run (an evolve run's best programs, a trained arm's answers) (formula -> validation score, None where invalid there); None for a run
    without one (a plain run: its curve has no validation column). A line that is not a reading is left out (cut by
    a kill: that best is scored again)."""
    path = Path(run_dir) / VALIDATION_LOG
    if not path.exists():
        return None
    out: dict[str, float | None] = {}
    for line in path.read_bytes().splitlines():
        try:
            row = json.loads(line) if json_depth(line) <= 2 else None
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("formula"), str) and "validation" in row and (
                row["validation"] is None or (type(row["validation"]) in (int, float)
                                                  and math.isfinite(row["validation"]))):
            out[row["formula"]] = row["validation"]
    return out


def kept_readings(folder, scorer: ValidationScorer, formulas: Sequence[str | None],
                  valid_on_search: Sequence[bool]) -> list[float | None]:
    """The validation score of each answer (None: refused on the search window, or invalid on the validation
    window), each distinct formula scored once and kept in folder/validation.jsonl, the file an evolve run on a fold
    keeps (`validation_readings` reads it back; folder None: kept nowhere). A formula's
    reading depends on the formula and the fold only, so a rerun reads it back; a line that is not a reading (cut
    by a kill, edited) is left out and that formula scored again."""
    if len(formulas) != len(valid_on_search):
        raise ValueError(f"{len(formulas)} formulas but {len(valid_on_search)} verdicts on the search window")
    wanted = [f if ok and isinstance(f, str) else None for f, ok in zip(formulas, valid_on_search)]
    if folder is None:           # nowhere to keep them: scored here, each distinct formula once
        scores = {f: scorer.reading(f, True)["score"] for f in dict.fromkeys(wanted) if f is not None}
        return [None if f is None else scores[f] for f in wanted]
    folder = Path(folder)
    path = folder / VALIDATION_LOG
    if path.exists() and not path.is_file():
        raise ValidationReadingsError(f"{path} is not a file: remove it, and the readings are scored again")
    scores = validation_readings(folder) or {}
    new = [f for f in dict.fromkeys(wanted) if f is not None and f not in scores]
    if new:
        folder.mkdir(parents=True, exist_ok=True)
        cut = path.exists() and not path.read_bytes().endswith(b"\n") and path.stat().st_size > 0
        with open(path, "a", encoding="utf-8") as fh:
            if cut:              # a last line cut by a kill: the new readings start on a line of their own
                fh.write("\n")
            for formula in new:
                scores[formula] = scorer.reading(formula, True)["score"]
                fh.write(json_dumps({"formula": formula, "validation": scores[formula]}) + "\n")
    return [None if f is None else scores[f] for f in wanted]
