"""Walk-forward runs of the model-free arms: evolve, search and random on each fold's search window only, their
choices scored on the fold's validation and test windows (`alpha_gym.market.folds`, `alpha_gym.evaluation.walk_forward`).

    python benchmarks/walk_forward.py --budget 1600 --seeds 0                  # every fold, us46, one seed
    python benchmarks/walk_forward.py --budget 1600 --seeds 0 --folds 5 --arms evolve
    python benchmarks/walk_forward.py --table-only                             # the table from the kept rows
    python benchmarks/walk_forward.py --add-overfitting --out RUNS             # PBO, bets, reference into kept rows

The arms, as the comparison's controls run them, at --budget verifier calls each, groups of 8, one scoring process:
`evolve` (the tree mutator from a program database seeded with the Alpha101 set that needs no sector labels),
`search` (the same engine with the genetic-programming database, `GP_SEARCH`, seeded alike) and `random` (random
formulas from the grammar, unseeded). A run's pool is what its verifier admitted (valid, train CPCV above 0: the
run's archive), its book the one the run chose. The kept search rows were made before search ran on the
evolution engine (the mu + lambda search, generations of 2 x 8, its pool its scored formulas, its book chosen by
`walk_forward.train_book`): a rerun of this script gives other search rows.
Each run on fold K sees its search window only; the choices are
then scored with `score_fold`. Writes the run folders into --out (an evolve run resumes there; its
walk-forward.jsonl holds every formula scored), one sealed row per (calls, seed, fold) into --results/ARM.jsonl
(a row already kept is not run again) and the table, walk-forward.md, beside them; prints each fold's lines
and the table. The windows are --sessions sessions (252: fold 5's test window is the comparison's pseudo-holdout).

--add-overfitting scores the kept rows again from their run folders in --out (no search runs again): each row the
--seeds/--folds/--arms/--budget select that lacks the run's PBO gets it, its choices' effective bets and the
reference formula's scores, after the choices scored again are checked to be the kept ones (another run folder,
or a verifier that has changed since, is refused naming the row).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "us_equities"
ARMS = ("evolve", "search", "random")
GROUP = 8


def run_arm(arm: str, panels, verifier, budget: int, seed: int, out: Path, probe) -> dict:
    """One arm on one fold: the run on the search window, then its choices scored (a `score_fold` result)."""
    from alpha_gym.alpha101 import formulas as alpha101
    from alpha_gym.evaluation.walk_forward import score_fold, write_walk_forward
    if arm not in ARMS:
        raise SystemExit(f"walk_forward.py: unknown arm {arm!r}: one of {', '.join(ARMS)}")
    from alpha_gym.search.database import GP_SEARCH, DatabaseConfig
    from alpha_gym.search.evolve_arm import run_evolve, run_pool
    from trainers.compare.arms.kept import keep_evolve
    seeds = list(alpha101(industry_free=True).values()) if arm != "random" else []
    run_evolve(verifier, panels.search, panels.validation, probe, mutators=("random",) if arm == "random" else ("tree",),
               database=GP_SEARCH if arm == "search" else DatabaseConfig(), budget=budget, seed=seed, out=out,
               name=arm, group_size=GROUP, seed_formulas=seeds, workers=1, progress=None,
               holdout_history=panels.validation_history, keep=keep_evolve)
    pool, book = run_pool(out)
    scored = score_fold(pool, verifier, panels, book=book, label=arm)
    write_walk_forward(out, scored)
    return scored


#: Score differences up to this are rounding (a kept row holds each score's shortest exact repr).
SAME_SCORE = 1e-9


def _same_choices(kept: dict, again: dict) -> str | None:
    """Where the choices scored again differ from the kept row's (None: the same formulas and scores)."""
    for key, sel in kept["selections"].items():
        new = again["selections"].get(key)
        if new is None or new["formulas"] != sel["formulas"]:
            return f"{key}'s formulas"
        for window in ("validation", "test"):
            a, b = sel[window], new[window]
            if (a is None) != (b is None) or (a is not None and abs(a - b) > SAME_SCORE):
                return f"{key}'s {window} score ({a} kept, {b} now)"
    return None


def add_overfitting(rows: list[dict], runs: Path, panel, plan):
    """Each of `rows` with its run's PBO, effective bets and reference scores (`score_fold` on its run folder
    again), one at a time (a row is kept as soon as it is measured)."""
    from alpha_gym.evaluation.walk_forward import score_fold
    from alpha_gym.market.folds import chosen_folds, cut_fold
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.search.evolve_arm import run_pool
    from trainers.compare.walk_forward import fold_row
    verifiers = {}
    for r in sorted(rows, key=lambda r: (r["fold"], r["seed"], r["arm"])):
        folder = runs / f"fold-{r['fold']}" / f"seed-{r['seed']}" / f"{r['arm']}-{r['calls']}"
        name = f"{r['arm']}, seed {r['seed']}, fold {r['fold']}, {r['calls']} calls"
        if not folder.is_dir():
            raise SystemExit(f"walk_forward.py: no run folder {folder} for the kept row ({name})")
        fold = chosen_folds(str(r["fold"]), panel.dates, plan)[0]
        if [fold.search.start, fold.search.end] != r["windows"]["search"]:
            raise SystemExit(f"walk_forward.py: the kept row ({name}) searched {r['windows']['search']}, this data's "
                             f"fold {r['fold']} {fold.search.start}..{fold.search.end}: give the data it ran on")
        panels = cut_fold(panel, fold, plan.history)
        if r["fold"] not in verifiers:           # one a fold, on its search window only
            verifiers = {r["fold"]: Verifier(panels.search)}
        t0 = time.perf_counter()
        pool, book = run_pool(folder)
        scored = score_fold(pool, verifiers[r["fold"]], panels, book=book, label=r["arm"])
        differs = _same_choices(r, scored)
        if differs:
            raise SystemExit(f"walk_forward.py: {folder} scored again does not give the kept row ({name}): "
                             f"{differs} differ")
        again = fold_row(r["arm"], r["calls"], r["seed"], scored, r.get("seconds"))
        pbo = scored["pbo"]
        print(f"{name}: PBO {pbo['pbo'] if pbo['pbo'] is None else round(pbo['pbo'], 3)} over "
              f"{pbo['n_candidates']} of {pbo['n_pool']} pool formulas; own book "
              f"{again['selections']['book_train']['effective_bets']['search']} effective bets "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        yield {**r, **{k: again[k] for k in ("pbo", "reference") if k in again},
               "selections": {k: {**v, "effective_bets": again["selections"][k]["effective_bets"]}
                              for k, v in r["selections"].items()}}


def main(argv=None) -> int:
    from alpha_gym.market import load_panel
    from alpha_gym.market.folds import ALL_FOLDS, FoldPlan, chosen_folds, cut_fold
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.evaluation.walk_forward import summary_lines
    from trainers.compare.walk_forward import fold_row, read_fold_rows, write_fold_rows, write_walk_forward_table
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DATA / "us_daily_train.csv.gz"))
    p.add_argument("--universe", default=str(DATA / "universe_us46.txt"), help="a ticker file (\"\": all)")
    p.add_argument("--budget", type=int, default=1600)
    p.add_argument("--seeds", default="0", help="comma-separated")
    p.add_argument("--folds", default=ALL_FOLDS, help="comma-separated fold numbers, or all")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--sessions", type=int, default=252, help="test and validation window length")
    p.add_argument("--out", default="runs/walk-forward")
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "walk-forward"))
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--add-overfitting", action="store_true",
                   help="add each run's PBO, its choices' effective bets and the reference's scores to the kept rows "
                        "that lack them, from the run folders in --out (no search runs again)")
    args = p.parse_args(argv)
    results = Path(args.results)
    if args.add_overfitting:
        if not results.is_dir():
            p.error(f"--add-overfitting: no kept rows in {results}")
        panel = load_panel(args.data, universe=args.universe or None)
        plan = FoldPlan(test=args.sessions, validation=args.sessions)
        seeds = None if args.seeds == "all" else {int(s) for s in args.seeds.split(",")}
        folds = None if args.folds == ALL_FOLDS else {int(f) for f in args.folds.split(",")}
        arms = {a.strip() for a in args.arms.split(",")}
        wanted = lambda r: (r.get("pbo") is None and r["arm"] in arms and r["calls"] == args.budget   # noqa: E731
                            and (seeds is None or r["seed"] in seeds) and (folds is None or r["fold"] in folds))
        for row in add_overfitting([r for r in read_fold_rows(results) if wanted(r)], Path(args.out), panel, plan):
            write_fold_rows(results, row["arm"], [row])
    elif not args.table_only:
        arms = [a.strip() for a in args.arms.split(",")]
        unknown = sorted(set(arms) - set(ARMS))
        if unknown:
            p.error(f"--arms: unknown {', '.join(unknown)}: one of {', '.join(ARMS)}")
        seeds = [int(s) for s in args.seeds.split(",")]
        panel = load_panel(args.data, universe=args.universe or None)   # "": every ticker of the data
        plan = FoldPlan(test=args.sessions, validation=args.sessions)
        folds = [f for text in args.folds.split(",") for f in chosen_folds(text.strip(), panel.dates, plan)]
        probe = list(brief_set("probe"))[:2]
        kept = {(r["arm"], r["calls"], r["seed"], r["fold"]) for r in read_fold_rows(results)} \
            if results.exists() else set()
        for fold in folds:
            panels = cut_fold(panel, fold, plan.history)
            verifier = None
            for seed in seeds:
                for arm in arms:
                    if (arm, args.budget, seed, fold.number) in kept:
                        continue
                    if verifier is None:     # built once a fold, on its search window only
                        verifier = Verifier(panels.search)
                    print(f"=== {fold.line()}; {arm}, seed {seed}, {args.budget} calls", flush=True)
                    t0 = time.perf_counter()
                    out = Path(args.out) / f"fold-{fold.number}" / f"seed-{seed}" / f"{arm}-{args.budget}"
                    scored = run_arm(arm, panels, verifier, args.budget, seed, out, probe)
                    seconds = time.perf_counter() - t0
                    print("\n".join(summary_lines(scored)[1:]) + f"\n  ({seconds:.0f} s)", flush=True)
                    write_fold_rows(results, arm, [fold_row(arm, args.budget, seed, scored, seconds)])
    lines = write_walk_forward_table(results, [results]) if results.exists() else []
    print("\n".join(lines[1:]) if lines else f"no walk-forward rows in {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
