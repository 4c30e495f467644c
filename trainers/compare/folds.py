"""`alpha-gym compare --fold K|all`: the comparison run on walk-forward folds (`alpha_gym.market.folds`).

For each fold, every arm runs as the plain comparison runs it, on a context whose market ends with the fold's
search window: the verifier, the archive, the seeds, the training briefs' rewards and the probe answers' train
scores are all built on the search window (`fold_context`). The runs' own report (OUT/fold-K/comparison.md, the
kept files in RESULTS/fold-K/) shows the probe answers on the fold's purge, the sessions just after the search
window, whose lookback is the search window's end: no choice of a run reads it. A trained rung's checkpoint and
best-of-N's sample per brief are chosen on the fold's validation window among those the train CPCV admits
(`arms.runs._validation_scorer`); the test window is read only after every arm of the fold has run:
`walk_forward.score_fold` scores what each run found (its pool: the archive its verifier admitted and its shipped
answers; its book) under the search window's validity, chooses on the validation window, and reads the test
window last. One sealed row per (arm, calls, seed, fold) goes to RESULTS/walk-forward/ARM.jsonl, and the
walk-forward table (`trainers.compare.walk_forward`: per arm each fold's test score, the mean over folds with a
95% interval, the unselected pool) is written into OUT/comparison.md, OUT/walk-forward.md and
RESULTS/walk-forward.md; a plain comparison with the same --results shows it too.

The windows are the scale's pseudo-holdout long (test and validation; the purge 252 sessions), so fold 5's test
window is the plain comparison's pseudo-holdout. `--fold all` runs folds 1..5 oldest first; a fold whose rows are
all kept for the arms and seeds asked is not run again, and a fold stopped part-way resumes from its run folders.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from alpha_gym.evaluation.kept import read_object, read_rows
from alpha_gym.jsonable import json_dumps
from trainers.compare.arms import RunContext
from trainers.compare.runner import CompareError

#: Where a fold's run folders and kept files go, under --out and --results.
FOLD_FOLDER = "fold-{}"


def fold_plan(scale):
    """The walk-forward plan of a comparison scale: test and validation windows of its pseudo-holdout's length, and
    a search window at least as long as the lookback the purge's scoring reads from it."""
    from alpha_gym.market.folds import LOOKBACK_HISTORY, FoldPlan
    return FoldPlan(test=scale.pseudo_holdout, validation=scale.pseudo_holdout, min_search=LOOKBACK_HISTORY)


def found_nothing(panels, label: str) -> dict:
    """A `score_fold` result for a run whose pool is empty (no answer parsed, nothing admitted): every choice
    empty, no score on any window; kept, so the table shows the fold as one without a score for the arm."""
    from alpha_gym.evaluation.walk_forward import SELECTIONS
    empty = {"n": 0, "train_cpcv": None, "validation": None, "validation_valid": 0, "test": None, "test_valid": 0,
             "formulas": []}
    return {"label": label, "fold": panels.fold.to_dict(),
            "selections": {k: {"about": about, **empty} for k, about in SELECTIONS}, "rows": []}


def folds_of(fold_text: str, full, scale) -> tuple:
    """The folds a --fold value names ("1".."5" or "all") on the market `full` at a comparison scale (FoldError,
    naming the first that the data cannot hold, before anything runs)."""
    from alpha_gym.market.folds import chosen_folds
    return chosen_folds(fold_text, full.dates, fold_plan(scale))


def fold_context(context: RunContext, full, panels) -> RunContext:
    """The comparison's context on one fold: its market the fold's search window (the verifier is built there),
    its pseudo-holdout the purge after it, its folders OUT/fold-K and RESULTS/fold-K (nothing built is shared)."""
    from alpha_gym.stress.registry import resolve
    fold = panels.fold
    purge = full.window(fold.purge.start, fold.purge.end)
    name = FOLD_FOLDER.format(fold.number)
    # R3's world model: "auto" names the one registered for this search window, never one fitted on later sessions
    config = context.verifier_config
    config = config.with_(stress_checkpoint=resolve(config.stress_checkpoint, panels.search))
    return replace(context, train=panels.search, holdout=purge, verifier_config=config, out=context.out / name,
                   results=context.results / name, step0_formulas=None, brief_ids=None, fold_panels=panels, _built={})


def arm_pool(context: RunContext, name: str, seed: int):
    """(pool, book) of one finished run on a fold, for `score_fold`: an evolution-engine run's archive with its
    train rewards (`evolve_arm.run_pool`); for a trained rung or best-of-N, the formulas its archive admitted and
    its shipped probe answers (their train CPCV kept beside them; no reward: `score_fold` ranks them by train
    CPCV), and its own book (NAME.book.json)."""
    from alpha_gym.evaluation.walk_forward import PoolEntry
    from trainers.run_book import read_admitted
    run_dir = context.run_dir(seed, name)
    if (run_dir / "state.json").exists():
        from alpha_gym.search.evolve_arm import run_pool
        return run_pool(run_dir)
    kept = context.results / f"seed-{seed}"
    pool = [PoolEntry(r["formula"], None, r.get("train_cpcv")) for r in read_admitted(kept / f"{name}.archive.jsonl")]
    answers = kept / f"{name}.jsonl"
    if answers.exists():
        pool += [PoolEntry(r["formula"], None, r.get("train_cpcv")) for r in read_rows(answers)
                 if isinstance(r.get("formula"), str)]
    book_file = kept / f"{name}.book.json"
    book = read_object(book_file).get("members") if book_file.exists() else None
    return pool, (None if book is None else tuple(book))


def _kept_keys(folder: Path, folds) -> set:
    """(arm, calls, seed, fold) of the rows kept in RESULTS/walk-forward; CompareError where a kept row of one of
    `folds` was made on other windows (another data file or scale)."""
    from trainers.compare.walk_forward import read_fold_rows
    if not folder.exists():
        return set()
    windows = {f.number: {w: [getattr(f, w).start, getattr(f, w).end] for w in ("search", "validation", "test")}
               for f in folds}
    keys = set()
    for r in read_fold_rows(folder):
        fold = int(r["fold"])
        if fold in windows and r["windows"] != windows[fold]:
            raise CompareError(f"{folder} keeps {r['arm']} rows of fold {fold} on other windows (test "
                               f"{r['windows']['test'][0]}..{r['windows']['test'][1]}, not "
                               f"{windows[fold]['test'][0]}..{windows[fold]['test'][1]}): another data file or "
                               "scale; pass another --results")
        keys.add((r["arm"], int(r["calls"]), int(r["seed"]), fold))
    return keys


def _check_kept_data(context: RunContext, fold_results: Path) -> None:
    """Refuse to add a fold's runs to RESULTS/fold-K made from another data file or universe (the rows of the
    same dates but other prices would be mixed; the windows check cannot see that)."""
    stamp = fold_results / "settings.json"
    if not stamp.exists():
        return
    before = read_object(stamp)
    for key in ("data", "universe"):
        if key in before and before[key] != getattr(context, key):
            raise CompareError(f"{fold_results} was made from {key} {before[key]!r}, not {getattr(context, key)!r}: "
                               "the fold's rows would mix two markets; pass another --results")


def score_runs(context: RunContext, panels, arms, seeds, kept: set, folder: Path) -> list[dict]:
    """Each finished run of the fold scored on its validation and test windows (`score_fold`), its summary printed,
    its walk-forward.json written into the run folder and its row kept; runs already kept are left as they are."""
    from alpha_gym.evaluation.walk_forward import WalkForwardError, score_fold, summary_lines, write_walk_forward
    from trainers.compare.walk_forward import fold_row, write_fold_rows
    rows = []
    for seed in seeds:
        for arm in arms:
            if (arm.name, context.budget, seed, panels.fold.number) in kept:
                continue
            t0 = time.perf_counter()
            pool, book = arm_pool(context, arm.name, seed)
            try:
                scored = score_fold(pool, context.verifier(), panels, book=book, label=arm.name)
            except WalkForwardError as err:   # a run that found nothing has no choice to score: kept as such
                print(f"fold {panels.fold.number}, {arm.name}, seed {seed}: {err}: no choice to score", flush=True)
                scored = found_nothing(panels, arm.name)
            write_walk_forward(context.run_dir(seed, arm.name), scored)
            row = fold_row(arm.name, context.budget, seed, scored, time.perf_counter() - t0)
            write_fold_rows(folder, arm.name, [row])
            rows.append(row)
            print("\n".join([f"{arm.name}, seed {seed}:"] + summary_lines(scored)[1:]), flush=True)
    return rows


def run_folds(context: RunContext, arms, seeds, fold_text: str, full, table=None) -> tuple[str, Path | None]:
    """Run `arms` for `seeds` on the folds `fold_text` names ("1".."5" or "all") of the market `full`, score
    each run on its fold (`score_runs`) and write the walk-forward table. Returns (the page's text, the last
    fold's report page, None where every fold was kept already)."""
    from alpha_gym.market.folds import cut_fold
    from trainers.compare.run import run_comparison
    from trainers.compare.walk_forward import FOLDER, write_walk_forward_table
    plan = fold_plan(context.scale)
    folds = folds_of(fold_text, full, context.scale)
    runs_arms = [a for a in arms if a.kind != "eval"]
    folder = context.results / FOLDER
    kept = _kept_keys(folder, folds)
    page = None
    for fold in folds:
        wanted = {(a.name, context.budget, s, fold.number) for a in runs_arms for s in seeds}
        if wanted <= kept:
            print(f"=== {fold.line()}: every run kept in {folder}, not run again", flush=True)
            continue
        print(f"=== {fold.line()}", flush=True)
        panels = cut_fold(full, fold, plan.history)
        on_fold = fold_context(context, full, panels)
        _check_kept_data(on_fold, on_fold.results)
        _text, page = run_comparison(on_fold, runs_arms, seeds, table=table)
        score_runs(on_fold, panels, runs_arms, seeds, kept, folder)
    context.out.mkdir(parents=True, exist_ok=True)
    lines = write_walk_forward_table(folder, {context.out, context.results}) if folder.exists() else []
    head = [f"# Walk-forward comparison ({context.scale_name} scale, {context.budget:,} verifier calls a run)", "",
            "Each fold's own comparison (its probe answers, scored on the fold's purge): "
            + ", ".join(f"fold-{f.number}/comparison.md" for f in folds) + "."]
    text = "\n".join(head + (lines or ["", f"no walk-forward rows kept in {folder}"])) + "\n"
    (context.out / "comparison.md").write_text(text, encoding="utf-8")
    (context.out / "folds.json").write_text(json_dumps([f.to_dict() for f in folds], indent=1) + "\n",
                                            encoding="utf-8")
    return text, page
