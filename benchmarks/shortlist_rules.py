"""Which shortlist the validation window should choose a fold's book from: the kept walk-forward pools scored again
under several shortlist rules (no search runs again).

    python benchmarks/shortlist_rules.py --runs /work/runs/wf-1600 --seeds 0
    python benchmarks/shortlist_rules.py --runs /work/runs/wf-10000 --budget 10000 --folds 1 --arms evolve
    python benchmarks/shortlist_rules.py --table-only

A fold's "book chosen on validation" (`walk_forward.choose_on_validation`: greedy by validation score, |corr| of
daily P&L < 0.5 on the validation window, turnover >= 2%) is chosen from a SHORTLIST the train reward admits. The
rules compared, each up to 100 formulas of the run's pool (`walk_forward.ranked_by_reward` order: train reward, then
train CPCV, then text):

    top          today's rule: the 100 best by train reward
    diverse-0.5  greedy by train reward, a formula admitted only when valid on the search window and |corr| of its
    diverse-0.7  search-window daily P&L with every one admitted is below 0.5 (0.7)
    forms        the best by train reward of each distinct form (the formula with every number replaced by #)
    RULE+pos     (top, diverse-0.5, diverse-0.7) the same shortlist, the book admitting only candidates whose
                 validation score is above 0: a book-rule variant beside the shortlist rules

Then the validation window chooses the book from each shortlist exactly as today, and the test window is read
after. Each row (one run: arm, seed, fold) holds, per rule and beside the train-chosen book and the unselected pool
(`walk_forward.pool_sample`): n members, effective bets (`selection.effective_bets` of the members' validation-window
daily net P&L, members valid there), the validation score and the test score (the mean score of the members valid
there). Rows go to --results/rows.jsonl (a run already there is not scored again) and the table to
--results/shortlist-rules.md: per arm and rule the mean over folds (each fold the mean over its seeds) with a 95%
t-interval over folds.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "us_equities"
RESULTS = ROOT / "benchmarks" / "results" / "shortlist-rules"
ROWS = "rows.jsonl"
TABLE = "shortlist-rules.md"
ARMS = ("evolve", "search", "random")
SIZE = 100
SHORTLISTS = ("top", "diverse-0.5", "diverse-0.7", "forms")
#: Each shortlist with the book chosen as today, and with the book admitting only members whose validation score is
#: above 0 (RULE + POSITIVE): greedy by validation score alone takes every uncorrelated candidate, losers included.
POSITIVE = "+pos"
RULES = (*SHORTLISTS, *(f"{r}{POSITIVE}" for r in ("top", "diverse-0.5", "diverse-0.7")))
#: The columns of the table beside the rules: what the run chose on train, and its pool unselected.
OTHERS = ("book_train", "pool")
NUMBER = re.compile(r"(?<![A-Za-z_])\d+(\.\d+)?")


def form_of(formula: str) -> str:
    """The formula with every number replaced by # (its spacing normalised): spellings that differ in constants only
    share a form."""
    return NUMBER.sub("#", " ".join(formula.split()))


def diverse_shortlist(by_train, verdict, size: int, max_corr: float) -> list[str]:
    """Greedy by train reward: a formula valid on the search window whose daily P&L there has |corr| < max_corr with
    every one admitted so far, up to `size` (verdict: formula -> its `train_verdict`, cached by the caller)."""
    from alpha_gym.evaluation.selection import _unit
    listed, zs = [], []
    for f in by_train:
        if len(listed) >= size:
            break
        v = verdict(f)
        if not v.valid or v.net is None:
            continue
        z = _unit(v.net)
        if zs and max(abs(float(z @ m)) for m in zs) >= max_corr:
            continue
        listed.append(f)
        zs.append(z)
    return listed


def shortlists(by_train, verdict, size: int = SIZE) -> dict[str, list[str]]:
    """Each rule's shortlist (the module docstring)."""
    forms: dict[str, str] = {}
    for f in by_train:
        if len(forms) >= size:
            break
        forms.setdefault(form_of(f), f)
    return {"top": by_train[:size], "diverse-0.5": diverse_shortlist(by_train, verdict, size, 0.5),
            "diverse-0.7": diverse_shortlist(by_train, verdict, size, 0.7), "forms": list(forms.values())}


def reading(members, validation, test) -> dict:
    """n, effective bets on the validation window, the validation and the test score of a selection."""
    from alpha_gym.evaluation.selection import effective_bets
    from alpha_gym.evaluation.walk_forward import _stats
    from alpha_gym.jsonable import finite_or_none
    nets = [np.asarray(validation[f].net, dtype=np.float64) for f in members if validation[f].valid]
    v, n_v = _stats(members, validation)
    t, n_t = _stats(members, test)
    return {"n": len(members), "bets": finite_or_none(effective_bets(np.stack(nets))) if nets else None,
            "validation": v, "validation_valid": n_v, "test": t, "test_valid": n_t}


def score_run(folder: Path, verifier, panels, arm: str, seed: int, calls: int) -> dict:
    """One run's row: every rule's shortlist, the book validation chooses from it, and the readings."""
    from alpha_gym.evaluation.holdout import train_verdict
    from alpha_gym.evaluation.walk_forward import ranked_by_reward, window_results, choose_on_validation, pool_sample
    from alpha_gym.scoring.holdout_config import HoldoutConfig
    from alpha_gym.search.evolve_arm import run_pool
    t0 = time.perf_counter()
    pool, book = run_pool(folder)
    by_train = [e.formula for e in ranked_by_reward(pool)]
    cache: dict = {}

    def verdict(f):
        if f not in cache:
            cache[f] = train_verdict(verifier, f)
        return cache[f]
    lists = shortlists(by_train, verdict)
    drawn = pool_sample([e.formula for e in pool])
    for rule in RULES:
        lists.setdefault(rule, lists[rule.removesuffix(POSITIVE)])
    formulas = list(dict.fromkeys([f for rule in SHORTLISTS for f in lists[rule]] + list(book) + drawn))
    ok = [verdict(f).valid for f in formulas]
    config = HoldoutConfig.from_verifier(verifier.config)
    validation = window_results(formulas, ok, panels.validation_history, panels.validation, verifier, config)
    def candidates(rule):
        if not rule.endswith(POSITIVE):
            return lists[rule]
        return [f for f in lists[rule] if validation[f].valid and validation[f].score > 0]
    books = {rule: choose_on_validation(candidates(rule), validation, 0.5, 0.02)["book_validation"] for rule in RULES}
    test = window_results(formulas, ok, panels.test_history, panels.test, verifier, config)    # every choice is made
    out = {rule: {**reading(books[rule], validation, test), "shortlist": len(lists[rule]),
                  "shortlist_valid": sum(verdict(f).valid for f in lists[rule]), "formulas": list(books[rule])}
           for rule in RULES}
    out["book_train"] = {**reading(book, validation, test), "formulas": list(book)}
    out["pool"] = reading(drawn, validation, test)
    return {"arm": arm, "calls": calls, "seed": seed, "fold": panels.fold.number, "pool_size": len(by_train),
            "train_verdicts": len(cache), "seconds": round(time.perf_counter() - t0, 1), "selections": out}


def t_interval(values) -> tuple[float | None, float | None]:
    """The mean and the half-width of its 95% t-interval (None with fewer than 2 values)."""
    from scipy import stats
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if not len(x):
        return None, None
    if len(x) < 2:
        return float(x.mean()), None
    return float(x.mean()), float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


def _cell(mean, half, digits=2, sign="+") -> str:
    if mean is None:
        return "-"
    return f"{mean:{sign}.{digits}f}" + ("" if half is None else f" ± {half:.{digits}f}")


def _per_fold(rows: list[dict], folds: list[int], value) -> list[float | None]:
    """Per fold, the mean over its seeds of value(row's selections), rows whose value is None left out."""
    out = []
    for k in folds:
        vals = [v for v in (value(r["selections"]) for r in rows if r["fold"] == k) if v is not None]
        out.append(float(np.mean(vals)) if vals else None)
    return out


def _runs_by_arm(rows: list[dict]):
    """(calls, arm, its rows, their folds) for each budget and arm that has rows, in the tables' order."""
    for calls in sorted({r["calls"] for r in rows}):
        for arm in ARMS:
            mine = [r for r in rows if r["calls"] == calls and r["arm"] == arm]
            if mine:
                yield calls, arm, mine, sorted({r["fold"] for r in mine})


def table(rows: list[dict]) -> list[str]:
    """Per (calls, arm) and selection: means over folds (each fold the mean over its seeds), 95% t over folds."""
    lines = ["| calls | arm | selection | folds x seeds | n | effective bets (validation) | validation | test |",
             "|---:|---|---|---:|---:|---:|---:|---:|"]
    for calls, arm, mine, folds in _runs_by_arm(rows):
        seeds = len({r["seed"] for r in mine})
        for key in (*RULES, *OTHERS):
            cells = []
            for what in ("n", "bets", "validation", "test"):
                mean, half = t_interval(_per_fold(mine, folds, lambda s: s[key][what] if key in s else None))
                cells.append(_cell(mean, half, 1, "") if what in ("n", "bets") else _cell(mean, half))
            name = {"book_train": "book chosen on train", "pool": "pool (100 drawn)"}.get(key, f"shortlist {key}")
            lines.append(f"| {calls} | {arm} | {name} | {len(folds)} x {seeds} | " + " | ".join(cells) + " |")
    return lines


def paired_table(rows: list[dict]) -> list[str]:
    """Each rule's book minus today's (top) on the same run, test score and effective bets: mean over folds (each
    fold the mean over its seeds), 95% t over folds."""
    lines = ["| calls | arm | shortlist | test minus top | effective bets minus top |", "|---:|---|---|---:|---:|"]
    for calls, arm, mine, folds in _runs_by_arm(rows):
        for key in RULES[1:]:
            cells = []
            for what in ("test", "bets"):
                def minus_top(s, what=what, key=key):
                    both = key in s and s[key][what] is not None and s["top"][what] is not None
                    return s[key][what] - s["top"][what] if both else None
                cells.append(_cell(*t_interval(_per_fold(mine, folds, minus_top))))
            lines.append(f"| {calls} | {arm} | {key} | " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    from alpha_gym.jsonable import json_dumps
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DATA / "us_daily_train.csv.gz"))
    p.add_argument("--universe", default=str(DATA / "universe_us46.txt"))
    p.add_argument("--runs", default="/work/runs/wf-1600", help="the run folders: RUNS/fold-K/seed-S/ARM-CALLS")
    p.add_argument("--budget", type=int, default=1600)
    p.add_argument("--seeds", default="0")
    p.add_argument("--folds", default="1,2,3,4,5")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args(argv)
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    rows_path = results / ROWS
    import json
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()] \
        if rows_path.exists() else []
    if not args.table_only:
        from alpha_gym.market import load_panel
        from alpha_gym.market.folds import FoldPlan, cut_fold, make_fold
        from alpha_gym.scoring.verifier import Verifier
        panel = load_panel(args.data, universe=args.universe or None)
        plan = FoldPlan(test=252, validation=252)
        done = {(r["arm"], r["calls"], r["seed"], r["fold"]) for r in rows}
        for k in (int(x) for x in args.folds.split(",")):
            panels = cut_fold(panel, make_fold(panel.dates, k, plan), plan.history)
            verifier = None
            for seed in (int(s) for s in args.seeds.split(",")):
                for arm in args.arms.split(","):
                    folder = Path(args.runs) / f"fold-{k}" / f"seed-{seed}" / f"{arm}-{args.budget}"
                    if (arm, args.budget, seed, k) in done or not folder.is_dir():
                        continue
                    if verifier is None:
                        verifier = Verifier(panels.search)
                    row = score_run(folder, verifier, panels, arm, seed, args.budget)
                    rows.append(row)
                    with rows_path.open("a", encoding="utf-8") as fh:
                        fh.write(json_dumps(row) + "\n")
                    s = row["selections"]
                    print(f"{arm} seed {seed} fold {k}: " + ", ".join(
                        f"{r} n={s[r]['n']} bets={s[r]['bets'] and round(s[r]['bets'], 1)} test={s[r]['test'] and round(s[r]['test'], 2)}"
                        for r in (*RULES, "book_train")) + f" ({row['seconds']} s, {row['train_verdicts']} verdicts)",
                        flush=True)
    lines = table(rows) + ["", "Paired with today's rule (the same run):", ""] + paired_table(rows)
    (results / TABLE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
