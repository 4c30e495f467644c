"""A training run's own book: the formulas its novelty archive admitted, and the book chosen from them.

The run keeps `RUN_DIR/archive.jsonl`, one line per learned entry the verifier's archive admitted (the
Alpha101 seeds are not written), appended after each step:

    {"step": 12, "formula": "rank(...)", "form": "<bucketed canonical form>", "train_cpcv": 0.41,
     "turnover": 0.23, "added": 1764750000000000000}

`step` is the step whose answers it came from; `train_cpcv` the CPCV the archive holds for it (train
window); `turnover` its mean daily turnover; `added` the archive's admission stamp, which, with `form`,
names the entry. Learned entries already in the archive when the file began (a verifier that arrived with
them, or a run resumed from a checkpoint written before this file existed) are written once with step and
turnover null, and `build_run_book` leaves them out unless asked. The file is resumable:
`truncate_admitted(path, start)` drops the lines of steps after the checkpoint, and the steps that run
again write their entries again, so no entry appears twice.

`build_run_book` chooses the run's book from that file on the train window with the correlation-capped
selector (`alpha_gym.evaluation.selection.select_correlation_capped`, seed section 8: greedy by CPCV,
|corr| < 0.5 with every member, turnover >= 2% a day).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from alpha_gym.evaluation.selection import BookSelection, Candidate, select_correlation_capped
from alpha_gym.jsonable import finite_or_none, json_dumps
from alpha_gym.language import FormulaError

ARCHIVE_LOG = "archive.jsonl"


class RunBookError(ValueError):
    """An archive.jsonl line that is not what `append_admitted` writes."""


def read_admitted(path) -> list[dict[str, Any]]:
    """The lines of an archive.jsonl ([] when the file is absent)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise RunBookError(f"{path}:{n} is not JSON ({err.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("formula"), str):
            raise RunBookError(f"{path}:{n} is not an archive entry (no formula)")
        rows.append(row)
    return rows


def append_admitted(path, archive, step: int, groups: Iterable = ()) -> int:
    """Append the archive's learned entries that the file does not hold yet; returns how many were written.

    Call it after the step's `Verifier.update_archive` calls. `archive`: the verifier's `Archive`;
    `groups`: the step's `GroupScore`s, where each new entry's turnover is found (an entry that is not
    among them was admitted before the file began: step and turnover are written null).
    """
    path = Path(path)
    seen = {(row.get("form"), row.get("added")) for row in read_admitted(path)}
    turnover = {ev.text: float(ev.turnover) for g in groups for ev in g.evaluated if ev is not None}
    lines = []
    for i in range(len(archive)):
        if archive.seed[i] or (archive.forms[i], archive.added[i]) in seen:
            continue
        text = archive.texts[i]
        known = text in turnover
        lines.append({"step": int(step) if known else None, "formula": text, "form": archive.forms[i],
                      "train_cpcv": finite_or_none(float(archive.cpcv[i])),
                      "turnover": turnover.get(text), "added": int(archive.added[i])})
    if lines:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(json_dumps(row) + "\n" for row in lines))
    return len(lines)


def truncate_admitted(path, last_step: int) -> None:
    """Keep the lines of steps <= last_step (a resume from that checkpoint; 0: a fresh run keeps none).

    A line with step null (admitted before the file began) counts as step 0.
    """
    path = Path(path)
    if not path.exists():
        return
    keep = [row for row in read_admitted(path) if (row.get("step") or 0) <= last_step and last_step > 0]
    path.write_text("".join(json_dumps(row) + "\n" for row in keep), encoding="utf-8")


@dataclass(frozen=True, eq=False)
class RunBook:
    """A run's own book: how many formulas its archive admitted and the correlation-capped book of them.

    members / effective_bets: the book's formulas (best train CPCV first) and its effective number of
    bets (`selection.effective_bets`); unscored: formulas of the file that no longer evaluate here.
    """

    n_admitted: int
    selection: BookSelection
    unscored: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[str, ...]:
        return self.selection.members

    @property
    def n_members(self) -> int:
        return self.selection.n

    @property
    def effective_bets(self) -> float:
        return self.selection.effective_bets

    def to_dict(self) -> dict[str, Any]:
        return {"n_admitted": self.n_admitted, "n_members": self.n_members,
                "effective_bets": finite_or_none(self.effective_bets), "members": list(self.members),
                "unscored": list(self.unscored), "selection": self.selection.to_dict()}


def build_run_book(source, verifier, max_corr: float = 0.5, min_turnover: float = 0.02,
                   include_unattributed: bool = False) -> RunBook:
    """The run's book from its archive.jsonl, chosen on the verifier's panel (the TRAIN window).

    source: a run folder (its archive.jsonl is read) or the file itself. Each distinct formula is traded
    again with `verifier.evaluate` (its train CPCV, turnover and daily net P&L), then
    `select_correlation_capped(candidates, max_corr, min_turnover)` picks the book: by CPCV, descending,
    skipping turnover under `min_turnover` a day and |corr| >= `max_corr` with a member already chosen
    (seed section 8). For the comparison table: `book.n_members`, `book.effective_bets` and `book.members`
    (formulas to score on the pseudo-holdout). An empty or absent file gives an empty book.
    Lines with step null (in the archive before the file recorded them: a verifier that arrived with learned
    entries, or a run resumed from before this file existed) count only with `include_unattributed`.
    """
    path = Path(source)
    if path.is_dir():
        path = path / ARCHIVE_LOG
    rows = [row for row in read_admitted(path) if include_unattributed or row.get("step") is not None]
    formulas = list(dict.fromkeys(row["formula"] for row in rows))  # distinct, in file order
    candidates, unscored = scored_candidates(formulas, verifier)
    return RunBook(n_admitted=len(formulas), selection=select_correlation_capped(candidates, max_corr, min_turnover),
                   unscored=tuple(unscored))


#: What `verifier.evaluate` raises for a formula that does not evaluate here (e.g. admitted under other limits).
NOT_EVALUATED = (FormulaError, FloatingPointError, ValueError)


def scored_candidates(formulas: Iterable[str], verifier, progress=None, errors=NOT_EVALUATED,
                      on_error=None) -> tuple[list[Candidate], list[str]]:
    """Each formula traded again with `verifier.evaluate` (its train CPCV, turnover and daily net P&L on the
    verifier's panel), and the formulas that raised one of `errors` there (`on_error(formula, err)` hears of
    each). `progress(done)`: called after each formula (a long archive's scoring says how far it is)."""
    candidates, unscored = [], []
    for done, formula in enumerate(formulas, 1):
        try:
            ev = verifier.evaluate(formula)
        except errors as err:
            unscored.append(formula)
            if on_error is not None:
                on_error(formula, err)
        else:
            candidates.append(Candidate.from_evaluated(ev))
        if progress is not None:
            progress(done)
    return candidates, unscored
