"""What an answer adds to a correlation-capped book: the rule behind R14 `book` (issue 39, item 2).

    gain(answer) = M(select(candidates + [answer])) - M(select(candidates))

select  the correlation-capped selector of seed section 8 (`selection.select_correlation_capped`): candidates
        by train CPCV, descending (ties by name); skip one trading under `min_turnover` (2%) of the book a day;
        skip one whose daily P&L has |Pearson correlation| >= `max_corr` (0.5) with a member already chosen.
        The selector is run again with the answer offered, not patched: an answer that enters can push out a
        member it resembles, and a candidate that member had refused may then enter.
M       the book metric on the train window, of the equal-weight book (the plain average of its members'
        daily net P&L, as `selection.book_selection` builds it); an empty book is worth 0:
          "cpcv"    (default) the CPCV score of the book's P&L over the verifier's slices
                    (`alpha_gym.scoring.cpcv`: 6 blocks, the 15 pairs of test blocks, mean - 0.5 x std of the
                    slice Sharpes)
          "sharpe"  the annualised Sharpe of the book's P&L over the whole window

Why CPCV of the equal-weight book: it is the yardstick R1 pays a single answer with, on the same slices, so
a book's gain and an answer's own core score are in the same units (an answer offered to an empty book gains
exactly its own CPCV); its std penalty rewards an answer that steadies the book across the slices, which a
single whole-window Sharpe does not see; and the equal weights are those of the books the project reports.

What follows from the rule: a copy of a member adds exactly 0 (it ties the member on CPCV and correlates 1
with it, so one of the two enters, at the same place, with the same P&L row); an answer the selector refuses
(too correlated with a better member, or trading too little) adds 0; an uncorrelated profitable answer that
enters adds what it diversifies; a better near-copy of a member takes the member's place and adds the
difference between the two books (with a one-member book: the difference of the two answers' CPCVs). A
negative gain is possible (an answer that enters by CPCV but drags the book's slices down) and is reported
as it is; a reward built on it may clip it.

Speed: `BookGain(candidates)` standardises the candidates' P&L once and keeps their |correlation| matrix;
each `gain(answer)` then costs one product of the answer's P&L with the candidates, a greedy walk over the
matrix, the average of the members' rows and 15 slice Sharpes (about 0.5 ms with 50 candidates of 2,000 days:
BENCHMARKS.md, "What an answer adds to the book").

Where it is paid: R14 `book` (priority 0 by default; the `book` and `brief_book` reward recipes turn it on) is
`gain` clipped like R1, with the run's learned archive entries as the candidates, each answer of a group offered
alone, and 0 for an answer whose CPCV is not above `archive_min_core` (it never joins the archive, so never the
run's book; `Verifier._book_gains`). It
lives on the scoring floor so the verifier can read it; `alpha_gym.evaluation.book_gain` re-exports it.

Sources: seed section 8 (the selector, its 0.5 and 2% thresholds, and why a correlation-capped book beats the
top 50 by CPCV); alphagen (Yu et al., KDD 2023), which rewards a new alpha by the change in its pool's combined
IC; FactorMiner and QuantaAlpha, which admit a factor only below a correlation cap with the library;
M. Lopez de Prado (2018), Advances in Financial Machine Learning, ch. 12 (CPCV).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from alpha_gym.book import metrics
from alpha_gym.scoring import cpcv as cpcv_lib
from alpha_gym.scoring.cpcv import CPCVConfig

BOOK_METRICS = ("cpcv", "sharpe")


@dataclass(frozen=True, eq=False)
class Candidate:
    """A formula offered to a book: train-window CPCV, mean daily turnover and daily net P&L (the book selectors'
    input, `alpha_gym.evaluation.selection`, which re-exports it; here so that scoring reads it too)."""

    name: str
    cpcv: float
    turnover: float
    pnl: np.ndarray = field(repr=False)
    reward: float | None = None

    @classmethod
    def from_evaluated(cls, ev, reward: float | None = None) -> "Candidate":
        """From a `Verifier.evaluate(...)` result (`alpha_gym.scoring.verifier.Evaluated`)."""
        return cls(name=ev.text, cpcv=float(ev.cpcv), turnover=float(ev.turnover), pnl=np.asarray(ev.net),
                   reward=reward)


@dataclass(frozen=True)
class Gain:
    """What offering one answer did to the book: the metric before and after, and who entered or left."""

    gain: float
    before: float
    after: float
    admitted: bool                  # the answer is a member of the book after
    members: tuple[str, ...]        # the book after, in selection order
    left: tuple[str, ...] = ()      # members before that are not members after
    joined: tuple[str, ...] = ()    # members after that were not members before (the answer included)


def _key(c: Candidate) -> tuple[float, str]:
    """The selector's order (`selection.select_correlation_capped`): CPCV descending (non-finite last), then name."""
    v = c.cpcv
    return (math.inf if v is None or not math.isfinite(v) else -float(v), c.name)


def _standardised(x: np.ndarray) -> np.ndarray:
    """Rows centred and scaled to unit length (a constant row stays 0): their dot product is the correlation."""
    x = x - x.mean(axis=-1, keepdims=True)
    norm = np.sqrt((x * x).sum(axis=-1, keepdims=True))
    return np.where(norm > 1e-15, x / np.where(norm > 1e-15, norm, 1.0), 0.0)


class BookGain:
    """The book of `candidates` (a run's archive, or just the book's members) and the gain of answers offered to it.

    candidates: `selection.Candidate`s (name, train CPCV, turnover, train-window daily net P&L, all the same
    length). metric: "cpcv" or "sharpe" (module docstring). cpcv_config: the verifier's `config.cpcv`, so the
    book is scored on the verifier's slices. Pure and deterministic: the same inputs give bit-identical gains.
    """

    def __init__(self, candidates: Sequence[Candidate], metric: str = "cpcv", max_corr: float = 0.5,
                 min_turnover: float = 0.02, cpcv_config: CPCVConfig = CPCVConfig()):
        if metric not in BOOK_METRICS:
            raise ValueError(f"metric must be one of {BOOK_METRICS}, got {metric!r}")
        self.metric, self.max_corr, self.min_turnover, self.cpcv_config = metric, max_corr, min_turnover, cpcv_config
        self.candidates = sorted(candidates, key=_key)
        self.keys = [_key(c) for c in self.candidates]
        lengths = {len(c.pnl) for c in self.candidates}
        if len(lengths) > 1:
            raise ValueError(f"candidates' P&L series differ in length: {sorted(lengths)}")
        self.n_days = lengths.pop() if lengths else None
        self.rows = np.array([np.nan_to_num(np.asarray(c.pnl, dtype=np.float64)) for c in self.candidates]
                             ).reshape(len(self.candidates), self.n_days or 0)
        self.z = _standardised(self.rows) if len(self.candidates) else self.rows
        self.blocks = np.abs(self.z @ self.z.T) >= max_corr        # i refuses j once i is a member
        self.eligible = np.array([c.turnover >= min_turnover for c in self.candidates], dtype=bool)
        self.members = self._select(None, None, None)
        self.before = self._value([self.rows[i] for i in self.members])

    # ------------------------------------------------------------------ the rule
    def _select(self, answer_at: int | None, answer_blocks: np.ndarray | None, answer_ok: bool | None) -> list[int]:
        """The greedy selector over the candidates, with the answer (index -1) inserted before position
        `answer_at` when given: indices of the members in selection order."""
        order = list(range(len(self.candidates)))
        if answer_at is not None:
            order.insert(answer_at, -1)
        blocked = np.zeros(len(self.candidates), dtype=bool)
        answer_blocked = False
        members = []
        for i in order:
            if i == -1:
                if not answer_ok or answer_blocked:
                    continue
                blocked |= answer_blocks
            else:
                if not self.eligible[i] or blocked[i]:
                    continue
                blocked |= self.blocks[i]
                answer_blocked = answer_blocked or bool(answer_blocks is not None and answer_blocks[i])
            members.append(i)
        return members

    def _value(self, rows: list[np.ndarray]) -> float:
        """M of the equal-weight book of these P&L rows (0 for an empty book)."""
        if not rows:
            return 0.0
        book = np.array(rows).mean(axis=0)
        if self.metric == "sharpe":
            return float(metrics.sharpe(book))
        test, _ = cpcv_lib.slice_sharpes(book, self.cpcv_config)
        return cpcv_lib.cpcv_score(test, self.cpcv_config.std_penalty)

    def gain(self, answer: Candidate) -> Gain:
        """The change in the book's metric when the selector is offered `answer` beside the candidates."""
        x = np.nan_to_num(np.asarray(answer.pnl, dtype=np.float64))
        if self.n_days is not None and len(x) != self.n_days:
            raise ValueError(f"the answer's P&L has {len(x)} days; the candidates' have {self.n_days}")
        blocks = np.abs(self.z @ _standardised(x)) >= self.max_corr if len(self.candidates) else np.zeros(0, bool)
        at = bisect.bisect_right(self.keys, _key(answer))          # after equal keys, as a stable sort puts it
        members = self._select(at, blocks, answer.turnover >= self.min_turnover)
        after = self._value([x if i == -1 else self.rows[i] for i in members])
        names = tuple(answer.name if i == -1 else self.candidates[i].name for i in members)
        before = set(self.members)
        return Gain(gain=after - self.before, before=self.before, after=after, admitted=-1 in members,
                    members=names, left=tuple(self.candidates[i].name for i in self.members if i not in members),
                    joined=tuple(n for i, n in zip(members, names) if i == -1 or i not in before))

    def gains(self, answers: Sequence[Candidate]) -> list[Gain]:
        """Each answer offered alone to the same book (a group's answers are not offered together)."""
        return [self.gain(a) for a in answers]

    @property
    def member_names(self) -> tuple[str, ...]:
        return tuple(self.candidates[i].name for i in self.members)


def book_gain(candidates: Sequence[Candidate], answer: Candidate, metric: str = "cpcv", max_corr: float = 0.5,
              min_turnover: float = 0.02, cpcv_config: CPCVConfig = CPCVConfig()) -> Gain:
    """`BookGain(candidates, ...).gain(answer)` for a single answer."""
    return BookGain(candidates, metric, max_corr, min_turnover, cpcv_config).gain(answer)
