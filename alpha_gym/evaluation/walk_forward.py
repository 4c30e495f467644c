"""A run's choices on a walk-forward fold: chosen on the search window or on the validation window, scored on
the test window (`alpha_gym.market.folds` cuts the windows).

A run on a fold sees its search window only (its verifier, archive and seeds are built on it). Afterwards,
`score_fold` takes what the run found, its pool (formulas with their train reward and train CPCV: the run's
archive, which only admits valid answers with a positive train CPCV), and scores it:

    one validity     each formula's verdict on the search window (`holdout.train_verdict`: every rule of a
                     training score) decides its validity on the validation and test windows too; a formula
                     refused there never scores anywhere (`evaluate_holdout`'s `train_valid`)
    window score     the holdout score (`alpha_gym.evaluation.holdout`: realistic costs, CPCV of 6 blocks, the
                     turnover penalty, clip at 5), each window with its own 252 sessions of lookback history,
                     which for the validation window lie inside the purge
    by train         what the run itself reports: its best (the highest train reward), its top 20, and its
                     correlation-capped book (greedy by train CPCV, |corr| of daily P&L < 0.5 on the search
                     window, turnover >= 2%: `selection.select_correlation_capped`, the run's book.json)
    by validation    the train reward only admits: the SHORTLIST (100) formulas of the pool with the highest train
                     reward are the candidates; the best, the top 20 and the correlation-capped book are then
                     chosen by the validation score (the book greedy by validation score, correlations on the
                     validation window's daily P&L). `choose_on_validation` sees the validation results alone:
                     the test window cannot reach a choice
    pool             POOL_SAMPLE (100) formulas of the pool drawn at random (seed 0), no selection beyond the
                     archive's admission: what the run's formulas score on average (for a random-formula run,
                     the unselected random pool)
    test             every choice is then scored on the test window; a selection's score on a window is the mean
                     score of its members valid there (the comparison's book column), with the count
    effective bets   each selection's `selection.effective_bets` (1 / sum of squared eigenvalue shares of its
                     members' P&L correlations) on the search, validation and test windows, over its members valid
                     there (None where none is)
    PBO              the probability of backtest overfitting of the run's selection (`overfitting`, CSCV over
                     PBO_BLOCKS blocks): the candidates are the pool's formulas valid on the search window (a
                     uniform draw of PBO_CAP where the pool holds more), their daily net P&L there as the
                     verifier trades it (its costs); picking the best in sample says nothing out of sample at 0.5
    reference        REFERENCE, the one-idea baseline (`baselines.MOTIFS`' volume level), scored like a choice:
                     under its search-window verdict, on the validation and test windows

The test window is read once, after every choice is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.evaluation.baselines import MOTIFS
from alpha_gym.evaluation.holdout import FormulaHoldout, TrainVerdict, check_disjoint, evaluate_holdout, train_verdict
from alpha_gym.evaluation.overfitting import CSCV_BLOCKS, OverfittingError, probability_of_backtest_overfitting
from alpha_gym.evaluation.selection import Candidate, effective_bets, select_correlation_capped
from alpha_gym.jsonable import finite_or_none, json_dumps
from alpha_gym.market.folds import FoldPanels
from alpha_gym.scoring.holdout_config import HoldoutConfig

WALK_FORWARD_FORMAT = "alpha-gym/walk-forward/v1"
SUMMARY_FILE = "walk-forward.json"
ROWS_FILE = "walk-forward.jsonl"
#: Candidates the train reward admits for the choices made on the validation window.
SHORTLIST = 100
#: Formulas of the pool scored unselected (a uniform draw, seed 0).
POOL_SAMPLE = 100
TOP = 20
#: CSCV blocks of the run's PBO, and the most pool formulas it reads (a uniform draw, seed 0, beyond): a 10,000-call
#: archive of a few thousand formulas costs about 0.1 s a formula to trade again on the search window.
PBO_BLOCKS = CSCV_BLOCKS
PBO_CAP = 2000
#: What the PBO's candidates trade: said in each result, so a row read later names it.
PBO_PNL = "daily net P&L on the search window (the verifier's costs), each pool formula valid there"
#: The one-idea baseline every book has to beat on a fold's test window.
REFERENCE = MOTIFS[0].formulas[0]
#: The selections, in the order reports show them: (key, what it is).
SELECTIONS = (
    ("best_train", "best by train reward"),
    ("top_train", f"top {TOP} by train reward"),
    ("book_train", "book chosen on train"),
    ("best_validation", "best by validation"),
    ("top_validation", f"top {TOP} by validation"),
    ("book_validation", "book chosen on validation"),
    ("pool", f"pool ({POOL_SAMPLE} drawn, unselected)"),
)


class WalkForwardError(InputError):
    """A pool that cannot be scored on a fold (empty, or on another window than the fold's search window)."""


@dataclass(frozen=True)
class PoolEntry:
    """A formula the run found: its train reward (what the run climbed) and train-window CPCV."""

    formula: str
    reward: float | None
    train_cpcv: float | None


@dataclass(frozen=True)
class Choices:
    """Each selection's formulas (`SELECTIONS` keys), in the order chosen."""

    members: dict[str, tuple[str, ...]]
    book_rule: dict[str, float] = field(default_factory=dict)


def ranked_by_reward(pool: Sequence[PoolEntry]) -> list[PoolEntry]:
    """Distinct formulas, best train reward first (then train CPCV, then text: a stable order)."""
    seen: dict[str, PoolEntry] = {}
    for e in pool:
        seen.setdefault(e.formula, e)

    def key(e: PoolEntry):
        r = e.reward if e.reward is not None and np.isfinite(e.reward) else -np.inf
        c = e.train_cpcv if e.train_cpcv is not None and np.isfinite(e.train_cpcv) else -np.inf
        return (-r, -c, e.formula)
    return sorted(seen.values(), key=key)


def pool_sample(pool: Sequence[str], n: int = POOL_SAMPLE, seed: int = 0) -> list[str]:
    """Up to n distinct formulas of the pool drawn uniformly (in pool order): no selection by any score."""
    distinct = list(dict.fromkeys(pool))
    if len(distinct) <= n:
        return distinct
    keep = np.sort(np.random.default_rng(seed).choice(len(distinct), size=n, replace=False))
    return [distinct[i] for i in keep]


def choose_on_validation(candidates: Sequence[str], validation: dict[str, FormulaHoldout], max_corr: float,
                         min_turnover: float) -> dict[str, tuple[str, ...]]:
    """The best, the top and the correlation-capped book of `candidates` by their validation results (only
    the candidates valid on the validation window; ties by formula text)."""
    valid = [validation[f] for f in candidates if validation[f].valid]
    ranked = sorted(valid, key=lambda r: (-r.score, r.formula))
    book = select_correlation_capped(
        [Candidate(name=r.formula, cpcv=float(r.score), turnover=float(r.turnover), pnl=np.asarray(r.net))
         for r in valid], max_corr, min_turnover)
    return {"best_validation": tuple(r.formula for r in ranked[:1]),
            "top_validation": tuple(r.formula for r in ranked[:TOP]), "book_validation": tuple(book.members)}


def train_book(pool: Sequence[PoolEntry], verifier, max_corr: float, min_turnover: float) -> tuple[str, ...]:
    """The correlation-capped book of the pool on the search window (greedy by train CPCV), as a run's book.json
    is chosen: for a run that kept none (the search control)."""
    candidates = []
    for e in ranked_by_reward(pool):
        tr = train_verdict(verifier, e.formula)
        if tr.valid:
            candidates.append(Candidate(name=e.formula, cpcv=float(tr.cpcv), turnover=float(tr.turnover),
                                        pnl=np.asarray(tr.net)))
    return tuple(select_correlation_capped(candidates, max_corr, min_turnover).members)


def window_results(formulas: list[str], verdicts: list[bool], history, window, verifier,
                   config) -> dict[str, FormulaHoldout]:
    """Each formula's holdout result on `window` (lookback from `history`) under its search-window verdict; the
    verifier must not have seen the window. Shared by `score_fold` and the shipped choice (`shipped.py`)."""
    check_disjoint(verifier.panel, window)     # the verifier saw the search window only
    report = evaluate_holdout(formulas, history, window, config=config, train_valid=verdicts, alpha_tests=False)
    return {f: a for f, a in zip(formulas, report.answers)}


def _stats(members: Sequence[str], results: dict[str, FormulaHoldout]) -> tuple[float | None, int]:
    scores = [results[f].score for f in members if results[f].valid]
    return (float(np.mean(scores)) if scores else None), len(scores)


def members_bets(nets: Sequence[np.ndarray | None]) -> float | None:
    """`selection.effective_bets` of the members' daily P&L that exist (None where none does: no member valid)."""
    rows = [np.asarray(n, dtype=np.float64) for n in nets if n is not None]
    return finite_or_none(effective_bets(np.stack(rows))) if rows else None


def pool_pbo(nets: dict[str, np.ndarray | None], n_pool: int, n_blocks: int = PBO_BLOCKS) -> dict[str, Any]:
    """The PBO of picking the best of `nets` (formula -> its daily net P&L on the search window, None where the
    search window refuses it), as a JSON-ready dict with its counts; `pbo` None, and `reason`, where CSCV cannot
    run (fewer than 2 valid formulas, too few days for the blocks)."""
    valid = [n for n in nets.values() if n is not None]
    out: dict[str, Any] = {"pnl": PBO_PNL, "n_blocks": n_blocks, "n_pool": int(n_pool), "n_drawn": len(nets),
                           "n_candidates": len(valid), "pbo": None}
    try:
        if len(valid) < 2:
            raise OverfittingError(f"{len(valid)} pool formula(s) valid on the search window: PBO needs 2")
        r = probability_of_backtest_overfitting(np.stack(valid, axis=1), n_blocks)
    except OverfittingError as err:
        return {**out, "reason": str(err)}
    d = r.to_dict()
    return {**out, **{k: d[k] for k in ("pbo", "n_splits", "n_days", "median_logit", "oos_loss_share",
                                         "distinct_picks")}}


def score_fold(pool: Sequence[PoolEntry], verifier, panels: FoldPanels, *, book: Sequence[str] | None = None,
               max_corr: float = 0.5, min_turnover: float = 0.02, shortlist: int = SHORTLIST,
               pool_size: int = POOL_SAMPLE, pbo_cap: int = PBO_CAP, label: str = "") -> dict[str, Any]:
    """The run's choices on the fold and their scores (the module docstring): a JSON-ready summary with `rows`
    (one per formula scored: train reward and CPCV, validation and test score).

    verifier: a `Verifier` on `panels.search` (the run's own, or a fresh one: validity and R1 do not read the
    archive). book: the run's correlation-capped book on the search window (None: chosen here, `train_book`).
    max_corr, min_turnover: the book rule, on both windows. pbo_cap: the most pool formulas the PBO reads
    (0: no PBO, its `pbo` None)."""
    if verifier.panel.fingerprint() != panels.search.fingerprint():
        raise WalkForwardError(f"the verifier was built on {verifier.panel.dates[0]}..{verifier.panel.dates[-1]}, "
                               f"not on fold {panels.fold.number}'s search window")
    if isinstance(pbo_cap, bool) or not isinstance(pbo_cap, int) or pbo_cap < 0:
        raise WalkForwardError(f"pbo_cap must be a whole number of formulas, 0 (no PBO) or more, got {pbo_cap!r}")
    ranked = ranked_by_reward(pool)
    if not ranked:
        raise WalkForwardError("the run found no formula to score (an empty pool)")
    by_train = [e.formula for e in ranked]
    if book is None:
        book = train_book(ranked, verifier, max_corr, min_turnover)
    listed = by_train[:shortlist]
    drawn = pool_sample([e.formula for e in pool], pool_size)
    chosen = {"best_train": tuple(by_train[:1]), "top_train": tuple(by_train[:TOP]), "book_train": tuple(book)}
    formulas = list(dict.fromkeys([*listed, *chosen["top_train"], *book, *drawn, REFERENCE]))
    for_pbo = pool_sample(by_train, pbo_cap) if pbo_cap else []
    verdicts: dict[str, TrainVerdict] = {f: train_verdict(verifier, f) for f in dict.fromkeys([*formulas, *for_pbo])}
    ok = [verdicts[f].valid for f in formulas]
    config = HoldoutConfig.from_verifier(verifier.config)
    validation = window_results(formulas, ok, panels.validation_history, panels.validation, verifier, config)
    chosen.update(choose_on_validation(listed, validation, max_corr, min_turnover))
    chosen["pool"] = tuple(drawn)
    # every choice is made: only now is the test window read
    test = window_results(formulas, ok, panels.test_history, panels.test, verifier, config)
    entries = {e.formula: e for e in ranked}
    selections = {}
    for key, about in SELECTIONS:
        members = chosen[key]
        v, n_v = _stats(members, validation)
        t, n_t = _stats(members, test)
        cpcvs = [verdicts[f].cpcv for f in members if verdicts[f].valid and verdicts[f].cpcv is not None]
        bets = {"search": members_bets([verdicts[f].net for f in members if verdicts[f].valid]),
                **{name: members_bets([w[f].net for f in members if w[f].valid])
                   for name, w in (("validation", validation), ("test", test))}}
        selections[key] = {"about": about, "n": len(members), "train_cpcv": float(np.mean(cpcvs)) if cpcvs else None,
                           "validation": v, "validation_valid": n_v, "test": t, "test_valid": n_t,
                           "effective_bets": bets, "formulas": list(members)}
    reference = {"formula": REFERENCE, "train_valid": verdicts[REFERENCE].valid,
                 "validation": finite_or_none(validation[REFERENCE].score), "test": finite_or_none(test[REFERENCE].score)}
    pbo = pool_pbo({f: verdicts[f].net if verdicts[f].valid else None for f in for_pbo}, len(ranked)) \
        if pbo_cap else None
    rows = [{"formula": f, "reward": entries[f].reward if f in entries else None,
             "train_cpcv": finite_or_none(verdicts[f].cpcv), "train_valid": verdicts[f].valid,
             "validation": finite_or_none(validation[f].score), "test": finite_or_none(test[f].score),
             "reason": None if test[f].valid and validation[f].valid else
             (validation[f].reason if not validation[f].valid else test[f].reason),
             "in": [k for k, _ in SELECTIONS if f in chosen[k]] + (["shortlist"] if f in listed else [])
             + (["reference"] if f == REFERENCE else [])}
            for f in formulas]
    return {"format": WALK_FORWARD_FORMAT, "label": label, "fold": panels.fold.to_dict(),
            "book_rule": {"max_corr": max_corr, "min_turnover": min_turnover},
            "shortlist": shortlist, "pool_size": len(ranked), "pool_sample": pool_size,
            "selections": selections, "pbo": pbo, "reference": reference, "rows": rows}


def write_walk_forward(out_dir, result: dict[str, Any]) -> tuple[Path, Path]:
    """OUT/walk-forward.json (everything but the rows) and OUT/walk-forward.jsonl (one row per formula scored),
    each by an atomic replace."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = {k: v for k, v in result.items() if k != "rows"}
    paths = (out / SUMMARY_FILE, out / ROWS_FILE)
    texts = (json_dumps(summary, indent=1), "".join(json_dumps(r) + "\n" for r in result["rows"]))
    for path, text in zip(paths, texts):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return paths


def _num(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The result as a few printed lines: the fold's windows, then each selection's scores."""
    f = result["fold"]
    win = {k: f"{f[k]['start']}..{f[k]['end']}" for k in ("search", "validation", "test")}
    lines = [f"walk-forward fold {f['fold']}/{f['n_folds']}: search {win['search']}, purge {f['purge']['sessions']} "
             f"sessions, validation {win['validation']}, test {win['test']}",
             f"  {'selection':<36} {'n':>4} {'train':>7} {'validation':>12} {'test':>12}"]
    for key, _about in SELECTIONS:
        s = result["selections"][key]
        lines.append(f"  {s['about']:<36} {s['n']:>4} {_num(s['train_cpcv']):>7} "
                     f"{_num(s['validation']):>7} ({s['validation_valid']:>2}) {_num(s['test']):>7} ({s['test_valid']:>2})")
    return lines
