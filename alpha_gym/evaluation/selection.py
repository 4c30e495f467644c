"""Selection: which checkpoint to ship, and which formulas to put in a book.

Checkpoint selection uses the TRAIN window only. `select_checkpoint` takes
records that hold nothing but a step and the train-window CPCV of each probe
answer, so a holdout number cannot reach the choice even by accident; the
holdout is joined afterwards, for reporting (`checkpoint_table`). A run on a walk-forward fold has a window
the search never saw before its test year: `select_checkpoint_on_validation` lets the train CPCV only admit
checkpoints (a positive mean, as the archive admits formulas) and chooses among them by the mean validation
score; the test year is no input of either.

Book selection compares two selectors over candidates with train-window
daily net P&L:

- `select_top_k`: the k candidates with the highest CPCV (or reward).
- `select_correlation_capped`: sort by CPCV, descending; skip a candidate
  trading under 2% of the book a day; skip one whose daily P&L has
  |Pearson correlation| >= 0.5 with any member already chosen; keep the rest.

Each result reports the members' median CPCV, the Sharpe and max drawdown of
their equal-weight book (the plain average of the members' daily net P&L),
the mean absolute pairwise P&L correlation, and the effective number of bets:

    C = members' P&L correlation matrix, lambda = its eigenvalues,
    p_k = lambda_k / sum(lambda),  effective bets = 1 / sum(p_k^2)

(n identical members -> 1, n uncorrelated members -> n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from alpha_gym.book import metrics
from alpha_gym.jsonable import finite_or_none, json_dumps
from alpha_gym.scoring.book_gain import Candidate  # a formula offered to a book; scoring's book gain reads it too

CHECKPOINTS_FORMAT = "alpha-gym/checkpoints/v1"
BOOKS_FORMAT = "alpha-gym/books/v1"


# ------------------------------------------------------------------------------ checkpoints
@dataclass(frozen=True)
class TrainRecord:
    """A checkpoint's train-window result on the probe prompts: one CPCV per answer, None for an invalid answer."""

    step: int
    probe_train_cpcv: tuple[float | None, ...]

    @property
    def valid_values(self) -> list[float]:
        return [float(v) for v in self.probe_train_cpcv if v is not None and math.isfinite(float(v))]

    @property
    def mean_train_cpcv(self) -> float | None:
        """Mean train CPCV over the valid answers (None when no answer is valid)."""
        vals = self.valid_values
        return float(np.mean(vals)) if vals else None


@dataclass(frozen=True)
class CheckpointChoice:
    step: int
    mean_train_cpcv: float | None
    means: dict[int, float | None]   # every checkpoint's mean train CPCV
    rule: str = "train"              # "validation": chosen on a fold's validation window among admitted ones
    validation_means: dict[int, float | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"step": self.step, "mean_train_cpcv": finite_or_none(self.mean_train_cpcv),
               "means": {str(k): finite_or_none(v) for k, v in self.means.items()}}
        if self.rule != "train":     # a plain run's choice is written as before
            out["rule"] = self.rule
            out["validation_means"] = {str(k): finite_or_none(v) for k, v in (self.validation_means or {}).items()}
        return out


def _train_records(records) -> list[TrainRecord]:
    if isinstance(records, Mapping):
        return [TrainRecord(int(k), tuple(v)) for k, v in records.items()]
    out = []
    for r in records:
        if not isinstance(r, TrainRecord):
            raise TypeError("select_checkpoint takes TrainRecord objects (step + train CPCV only) or a "
                            f"{{step: [train CPCV per probe answer]}} mapping, not {type(r).__name__}")
        out.append(r)
    return out


def select_checkpoint(records: Sequence[TrainRecord] | Mapping[int, Sequence[float | None]]) -> CheckpointChoice:
    """The checkpoint with the highest mean TRAIN-window CPCV over its valid probe answers.

    Ties go to the earliest step; a checkpoint without a valid answer ranks last.
    Holdout results are not an input: the choice is made before the holdout is read.
    """
    recs = _train_records(records)
    if not recs:
        raise ValueError("no checkpoints to select from")
    steps = [r.step for r in recs]
    if len(set(steps)) != len(steps):
        raise ValueError("checkpoint steps must be unique")
    means = {r.step: r.mean_train_cpcv for r in recs}
    best = min(recs, key=lambda r: (-(r.mean_train_cpcv if r.mean_train_cpcv is not None else -math.inf), r.step))
    return CheckpointChoice(step=best.step, mean_train_cpcv=best.mean_train_cpcv,
                            means=dict(sorted(means.items())))


def _mean_reading(values) -> float | None:
    """Mean of the finite readings (None, NaN, inf, non-numbers: an answer without one); None when none is."""
    vals = [float(v) for v in values if type(v) in (int, float) and math.isfinite(float(v))]
    return float(np.mean(vals)) if vals else None


def select_checkpoint_on_validation(records, validation: Mapping[int, Sequence[float | None]]) -> CheckpointChoice:
    """On a walk-forward fold: the checkpoint with the highest mean VALIDATION score over its valid probe answers,
    among those the train window admits (mean train CPCV > 0). Ties go to the earliest step.

    validation: step -> the validation score of each probe answer (None for an answer invalid there; one validity:
    an answer the search window refused has none). Where no admitted checkpoint has a validation reading the
    choice is `select_checkpoint`'s (rule "train"). The test window is not an input."""
    recs = _train_records(records)
    train_choice = select_checkpoint(recs)
    if not isinstance(validation, Mapping):
        raise TypeError(f"validation must be a {{step: [validation score per probe answer]}} mapping, not "
                        f"{type(validation).__name__}")
    steps = {r.step for r in recs}
    unknown = sorted(str(k) for k in validation if k not in steps)
    if unknown:
        raise ValueError(f"validation readings for steps without a train record: {', '.join(unknown[:5])}")
    val_means = {r.step: _mean_reading(validation.get(r.step, ())) for r in sorted(recs, key=lambda r: r.step)}
    admitted = [r for r in recs if r.mean_train_cpcv is not None and r.mean_train_cpcv > 0
                and val_means[r.step] is not None]
    if not admitted:
        return replace(train_choice, rule="validation: none admitted, chosen on train", validation_means=val_means)
    best = min(admitted, key=lambda r: (-val_means[r.step], r.step))
    return CheckpointChoice(step=best.step, mean_train_cpcv=best.mean_train_cpcv, means=train_choice.means,
                            rule="validation", validation_means=val_means)


@dataclass(frozen=True)
class SampleChoice:
    """One brief's answer among its samples: the chosen sample, the one the train reward alone picks, and why."""

    index: int
    train_index: int
    rule: str       # "validation", or "validation: none admitted, chosen on train"
    validation: float | None   # the chosen sample's validation score (None on the train fallback without one)


def select_sample_on_validation(rewards: Sequence[float], train_cpcv: Sequence[float | None],
                                validation: Sequence[float | None]) -> SampleChoice:
    """On a walk-forward fold, one brief's sample to ship: the train window admits (a valid sample with a positive
    train CPCV, as the archive admits formulas and `select_checkpoint_on_validation` admits checkpoints), the
    validation score chooses among the admitted (ties: the earlier sample). Where no admitted sample has a
    validation reading, the train pick: the highest reward, the first of equal ones. The test window is not an
    input."""
    if not (len(rewards) == len(train_cpcv) == len(validation)) or not rewards:
        raise ValueError(f"one reward, train CPCV and validation reading per sample: got {len(rewards)}, "
                         f"{len(train_cpcv)}, {len(validation)}")
    train_index = int(np.argmax(np.asarray(rewards, dtype=np.float64)))
    scores = [_mean_reading([v]) for v in validation]
    admitted = [i for i, c in enumerate(train_cpcv)
                if _mean_reading([c]) is not None and c > 0 and scores[i] is not None]
    if not admitted:
        return SampleChoice(train_index, train_index, "validation: none admitted, chosen on train", scores[train_index])
    best = min(admitted, key=lambda i: (-scores[i], i))
    return SampleChoice(best, train_index, "validation", scores[best])


def holdout_fields(report) -> dict[str, Any]:
    """The per-checkpoint holdout columns of the reference's table, from a HoldoutReport or its dict."""
    d = report.to_dict() if hasattr(report, "to_dict") else report
    s, b = d["summary"], d["book"]
    return {"holdout_score": s.get("mean_score"), "n_valid": s.get("n_valid"), "n_answers": s.get("n_answers"),
            "n_families": s.get("n_families"), "book_return": b.get("total_return"),
            "book_sharpe": b.get("sharpe"), "book_beta": b.get("beta")}


def checkpoint_table(records, holdout: Mapping[int, Any] | None = None,
                     validation: Mapping[int, Sequence[float | None]] | None = None) -> dict[str, Any]:
    """Choose on train CPCV, then join holdout columns for every checkpoint (reported, never consulted).

    `holdout`: step -> HoldoutReport, holdout.json dict, or an already flat dict of columns.
    `validation` (a run on a walk-forward fold): step -> the validation score of each probe answer; the choice is
    then `select_checkpoint_on_validation`'s, each row has its mean validation score, and the table says which rule
    chose and which step train CPCV alone would have chosen. None: the table of a plain run, as before.
    Returns the `checkpoints.json` object: {"format", "selected_step", "rule", "rows": [...]}.
    """
    recs = _train_records(records)
    train_choice = select_checkpoint(recs)
    choice = train_choice if validation is None else select_checkpoint_on_validation(recs, validation)
    rows = []
    for r in sorted(recs, key=lambda r: r.step):
        row = {"step": r.step, "train_cpcv": finite_or_none(r.mean_train_cpcv), "n_valid_train": len(r.valid_values),
               "n_probe": len(r.probe_train_cpcv), "selected": r.step == choice.step}
        if validation is not None:
            row.update(validation_score=finite_or_none(choice.validation_means[r.step]),
                       n_valid_validation=sum(_mean_reading([v]) is not None for v in validation.get(r.step, ())),
                       train_selected=r.step == train_choice.step)
        h = (holdout or {}).get(r.step)
        if h is not None:
            flat = holdout_fields(h) if (hasattr(h, "to_dict") or "summary" in h) else dict(h)
            row.update({k: (finite_or_none(v) if isinstance(v, float) else v) for k, v in flat.items()})
        rows.append(row)
    if validation is None:
        return {"format": CHECKPOINTS_FORMAT, "selected_step": choice.step,
                "rule": "highest mean train-window CPCV over valid probe answers; ties -> earliest step; "
                        "holdout columns are reported only", "rows": rows}
    chosen = ("chosen on validation" if choice.rule == "validation" else
              "no admitted checkpoint has a validation reading, so chosen on train")
    return {"format": CHECKPOINTS_FORMAT, "selected_step": choice.step, "train_selected_step": train_choice.step,
            "chosen_by": choice.rule,
            "rule": "train admits (mean train-window CPCV over valid probe answers > 0), the highest mean validation "
                    "score over valid probe answers chooses; ties -> earliest step; none admitted -> the highest "
                    f"train CPCV; holdout columns are reported only ({chosen})", "rows": rows}


def save_checkpoints(run_dir, table: Mapping[str, Any]) -> Path:
    """Write `run_dir/checkpoints.json` (the object `checkpoint_table` returns)."""
    return _write_json(Path(run_dir) / "checkpoints.json", table)


# ------------------------------------------------------------------------------ books
def _corr_matrix(pnls: np.ndarray) -> np.ndarray:
    """Pearson correlation of rows; a constant row correlates 0 with everything but itself."""
    x = np.asarray(pnls, dtype=np.float64)
    x = x - x.mean(axis=1, keepdims=True)
    norm = np.sqrt((x * x).sum(axis=1))
    ok = norm > 1e-15
    z = np.where(ok[:, None], x / np.where(ok, norm, 1.0)[:, None], 0.0)
    c = z @ z.T
    np.fill_diagonal(c, 1.0)
    return np.clip(c, -1.0, 1.0)


def effective_bets(pnls) -> float:
    """1 / sum(p_k^2), p_k = eigenvalue shares of the P&L correlation matrix (0 for an empty book)."""
    pnls = np.atleast_2d(np.asarray(pnls, dtype=np.float64))
    if pnls.size == 0 or pnls.shape[0] == 0:
        return 0.0
    lam = np.clip(np.linalg.eigvalsh(_corr_matrix(pnls)), 0.0, None)
    p = lam / lam.sum()
    return float(1.0 / (p * p).sum())


@dataclass(frozen=True, eq=False)
class BookSelection:
    """The members a selector chose and how their equal-weight book behaved."""

    method: str
    members: tuple[str, ...]
    effective_bets: float
    median_cpcv: float | None
    sharpe: float
    max_drawdown: float
    total_return: float
    mean_abs_corr: float | None
    returns: np.ndarray = field(repr=False)
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.members)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "n": self.n, "members": list(self.members),
                "effective_bets": finite_or_none(self.effective_bets), "median_cpcv": finite_or_none(self.median_cpcv),
                "sharpe": finite_or_none(self.sharpe), "max_drawdown": finite_or_none(self.max_drawdown),
                "total_return": finite_or_none(self.total_return), "mean_abs_corr": finite_or_none(self.mean_abs_corr),
                "skipped": dict(self.skipped)}


def book_selection(method: str, members: Sequence[Candidate], skipped: Mapping[str, int] | None = None
                   ) -> BookSelection:
    """Statistics of the equal-weight book (average of members' daily net P&L) of `members`."""
    if not members:
        return BookSelection(method, (), 0.0, None, 0.0, 0.0, 0.0, None, np.zeros(0), dict(skipped or {}))
    lengths = {len(m.pnl) for m in members}
    if len(lengths) != 1:
        raise ValueError(f"candidates' P&L series differ in length: {sorted(lengths)}")
    pnls = np.array([np.nan_to_num(np.asarray(m.pnl, dtype=np.float64)) for m in members])
    book = pnls.mean(axis=0)
    c = _corr_matrix(pnls)
    off = np.abs(c[~np.eye(len(members), dtype=bool)])
    return BookSelection(method=method, members=tuple(m.name for m in members), effective_bets=effective_bets(pnls),
                         median_cpcv=float(np.median([m.cpcv for m in members])), sharpe=metrics.sharpe(book),
                         max_drawdown=metrics.max_drawdown(book), total_return=metrics.total_return(book),
                         mean_abs_corr=float(off.mean()) if off.size else None, returns=book,
                         skipped=dict(skipped or {}))


def _by_score(candidates: Iterable[Candidate], key: str) -> list[Candidate]:
    def score(c):
        v = c.cpcv if key == "cpcv" else c.reward
        return -math.inf if v is None or not math.isfinite(v) else float(v)
    return sorted(candidates, key=lambda c: (-score(c), c.name))


def select_top_k(candidates: Iterable[Candidate], k: int = 50, key: str = "cpcv",
                 min_turnover: float = 0.0) -> BookSelection:
    """The k candidates ranked highest by `key` ("cpcv" or "reward"; ties by name), turnover >= min_turnover."""
    if key not in ("cpcv", "reward"):
        raise ValueError("key must be 'cpcv' or 'reward'")
    ranked = _by_score(candidates, key)
    kept = [c for c in ranked if c.turnover >= min_turnover]
    return book_selection(f"top_{k}_by_{key}", kept[:k], {"turnover": len(ranked) - len(kept)})


def select_correlation_capped(candidates: Iterable[Candidate], max_corr: float = 0.5, min_turnover: float = 0.02,
                              max_members: int | None = None) -> BookSelection:
    """Greedy by CPCV (descending, ties by name): skip turnover < min_turnover and |corr| >= max_corr with a member."""
    members: list[Candidate] = []
    zs: list[np.ndarray] = []
    skipped = {"turnover": 0, "correlation": 0}
    for c in _by_score(candidates, "cpcv"):
        if max_members is not None and len(members) >= max_members:
            break
        if c.turnover < min_turnover:
            skipped["turnover"] += 1
            continue
        z = _unit(c.pnl)
        if zs and max(abs(float(z @ m)) for m in zs) >= max_corr:
            skipped["correlation"] += 1
            continue
        members.append(c)
        zs.append(z)
    return book_selection("correlation_capped", members, skipped)


def _unit(pnl) -> np.ndarray:
    """A P&L series centred and scaled to unit length (zeros when it is constant): z_a @ z_b is their Pearson
    correlation."""
    x = np.nan_to_num(np.asarray(pnl, dtype=np.float64))
    x = x - x.mean()
    norm = np.sqrt(x @ x)
    return x / norm if norm > 1e-15 else np.zeros_like(x)


class GrowingCappedBook:
    """`select_correlation_capped` over a candidate set that only grows (an evolve run's admitted formulas,
    asked for its book after every group), the same members and counts, without redoing the whole selection.

    The greedy pass is the same; what it remembers between calls: each skipped candidate's blocker (the
    member it correlated with at |corr| >= max_corr). A member is chosen before every candidate it can block,
    so while the blocker is still a member the candidate is skipped again without a product. The members'
    unit P&L and the products between members are kept too, and the book's statistics when the members are
    unchanged. Memory: one member id per candidate, plus the members' series (not every candidate's).
    Candidates are held by identity: pass the same objects each call (a new object is a new candidate)."""

    def __init__(self, max_corr: float = 0.5, min_turnover: float = 0.02):
        self.max_corr, self.min_turnover = max_corr, min_turnover
        self._blocker: dict[int, int] = {}           # id(candidate) -> id(the member that blocked it)
        self._z: dict[int, np.ndarray] = {}           # id(member) -> its unit P&L
        self._products: dict[tuple[int, int], float] = {}   # (id(later member), id(earlier member)) -> z @ z
        self._held: dict[int, Candidate] = {}         # every candidate seen, so no id is reused
        self._last: tuple[tuple[int, ...], BookSelection] | None = None   # the members' ids and their book

    def select(self, candidates: Iterable[Candidate]) -> BookSelection:
        members: list[Candidate] = []
        chosen: set[int] = set()
        skipped = {"turnover": 0, "correlation": 0}
        for c in _by_score(candidates, "cpcv"):
            key = id(c)
            self._held.setdefault(key, c)
            if c.turnover < self.min_turnover:
                skipped["turnover"] += 1
                continue
            if self._blocker.get(key) in chosen:        # its blocker, chosen before it again: skipped again
                skipped["correlation"] += 1
                continue
            blocker = self._first_blocker(c, members)
            if blocker is not None:
                self._blocker[key] = blocker
                skipped["correlation"] += 1
                continue
            self._blocker.pop(key, None)
            members.append(c)
            chosen.add(key)
        # keep only what the members need: their series and the products between them
        self._z = {k: z for k, z in self._z.items() if k in chosen}
        self._products = {p: v for p, v in self._products.items() if p[0] in chosen and p[1] in chosen}
        ids = tuple(id(m) for m in members)
        if self._last is not None and self._last[0] == ids:    # the same members: the same statistics
            book = replace(self._last[1], skipped=dict(skipped))
        else:
            book = book_selection("correlation_capped", members, skipped)
        self._last = (ids, book)
        return book

    def _first_blocker(self, c: Candidate, members: Sequence[Candidate]) -> int | None:
        """The first of `members` (in their order) whose P&L correlates with c's at |corr| >= max_corr; None
        when there is none (c joins: its series and its products with the members are kept)."""
        z = self._z.get(id(c))
        products = []
        for m in members:
            pair = (id(c), id(m))
            dot = self._products.get(pair)
            if dot is None:
                if z is None:
                    z = _unit(c.pnl)
                dot = float(z @ self._z[id(m)])
            if abs(dot) >= self.max_corr:
                return id(m)
            products.append((pair, dot))
        self._z[id(c)] = z if z is not None else _unit(c.pnl)
        self._products.update(products)
        return None


def compare_selectors(candidates: Sequence[Candidate], k: int = 50, max_corr: float = 0.5,
                      min_turnover: float = 0.02) -> dict[str, BookSelection]:
    """Both selectors on the same candidates: {"correlation_capped": ..., "top_k": ...}."""
    candidates = list(candidates)
    return {"correlation_capped": select_correlation_capped(candidates, max_corr, min_turnover),
            "top_k": select_top_k(candidates, k)}


def save_books(run_dir, selections: Mapping[str, BookSelection] | Sequence[BookSelection]) -> Path:
    """Write `run_dir/books.json`: {"format": "alpha-gym/books/v1", "selections": [BookSelection.to_dict()...]}."""
    sels = list(selections.values()) if isinstance(selections, Mapping) else list(selections)
    return _write_json(Path(run_dir) / "books.json",
                       {"format": BOOKS_FORMAT, "selections": [s.to_dict() for s in sels]})


def _write_json(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json_dumps(obj, indent=1), encoding="utf-8")
    tmp.replace(path)
    return path
