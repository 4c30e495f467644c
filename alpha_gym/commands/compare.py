r"""Trainer comparison: the reference's ladder over several seeds, one probe and one selection rule.

    alpha-gym compare --scale smoke --out runs/compare-smoke                         # minutes, CI-sized
    alpha-gym compare --scale cpu --model runs/sft/model \
        --results benchmarks/results/compare-cpu                                    # ~80 min a seed on 2 cores
    alpha-gym compare --scale cpu --report-only --results benchmarks/results/compare-cpu --update-results
    alpha-gym compare --scale cpu --report-only --results benchmarks/results/compare-cpu --out runs/cmp \
        --eval runs/eval-NAME                                                       # no torch needed
    alpha-gym compare --scale gpu --model Qwen/Qwen2.5-32B-Instruct                  # reference settings
    alpha-gym compare --scale cpu --fold all --rungs evolve,search,random --data DATA --universe U \
        --out runs/walk-forward                                                     # each arm on each fold

With `--fold K` (1..5, oldest first) or `--fold all`, every arm runs on a walk-forward fold's search window only
(OUT/fold-K, RESULTS/fold-K; the probe answers' pseudo-holdout there is the purge after the search window, which
no choice reads); afterwards what each run found is scored on the fold's validation and test windows under the
search window's validity, one row per arm, seed and fold in RESULTS/walk-forward/, and OUT/comparison.md shows
the walk-forward table: per arm each fold's test score, the mean over folds with a 95% interval, and the
unselected pool. `all` runs folds 1..5 in turn; a fold already kept is not run again.

Seeds (`--seeds`, cpu default 42,43,44) run one after another, each rung in OUT/seed-S/RUNG; a stopped
run resumes from its checkpoints, and seeds run in different sessions add up: the table is built from
the answers kept under --results, whichever session wrote them.

What it runs (`--rungs` picks among them; its help lists every name): the rungs of the ladder, DAPO; CISPO;
CISPO + REPO-R; the same on the filtered prompts; DoRA instead of LoRA; CISPO + REPO-R trained against the
diversity gate (verifier self_corr_gate 0.7); CISPO with the collapse refill trained against the brief and book
rewards. The controls, each spending a rung's verifier calls (steps x prompts_per_step x num_generations) with
no weight updated: `best_of_n` (the start model's best of k samples per probe brief), `search` (model-free
evolutionary search), `evolve` (evolution from a program database with the tree mutator, `alpha-gym evolve`),
`random` (random formulas, no search) and `evolve_model` (evolve with the frozen start model as its mutator);
every rung is paired against each. And the rung `evolve_rl`: evolve_model's mutator trained on its own rewards,
paired with evolve_model. For each rung: train, checkpoint every `eval_every` steps; at step 0 and
every checkpoint answer the probe briefs greedily; score the answers on the TRAIN window (the selection
rule: best mean train CPCV of the valid probe answers) and, afterwards, on a pseudo-holdout (the last
252 sessions of the train window, cut off before training: the sealed real holdout is never read).

`--eval DIR` (repeatable) adds a folder written by `alpha-gym eval` as a row: a model behind an
endpoint on the same probe briefs, pseudo-holdout and baselines, its samples in place of seeds. With
--report-only and no step-0.jsonl under --results, the table holds the eval rows alone.

--report-only trains nothing and loads no model (it runs without torch). It reads --results and writes
the table, report.json, seeds.png and the page into --out only: kept results (benchmarks/results/...)
are rewritten only with --update-results. Every kept row and file carries a content hash; an edited,
torn or damaged one is refused (alpha_gym/evaluation/kept.py says how to seal an intentional edit).

Writes into --out: `comparison.md` (the table), `comparison.json` (every step's log and every
checkpoint's numbers), `curves.png` (training curves), `holdout_per_checkpoint.png`, `seeds.png` (each
seed's shipped score per rung, and train CPCV against pseudo-holdout per run), `calls.md` and `calls.png`
(the arms that keep a curve, the evolve arms and search, along their verifier calls: best train reward and
the run's own book at 1,600, 4,800 and 10,000 calls where the runs got there), and one run
folder per seed and rung with `log.jsonl`, checkpoints and `holdout-step-N.json` files for
`alpha-gym report`. Into --results (small text files meant to be committed): `step-0.jsonl` and
`seed-S/RUNG.jsonl`, the probe answers of the start model and of each shipped checkpoint (brief id,
raw answer, formula, train-window CPCV); `seed-S/RUNG.json`, that run's numbers; `seed-S/RUNG.archive.jsonl`
and `RUNG.book.json`, the formulas its archive admitted and the correlation-capped book chosen from them
on the train window (the run's own book); `settings.json`; `comparison.md`, `report.json`, `seeds.png`,
`calls.md` and `calls.png` (training runs, or --update-results). Re-score any of them on another window with
`alpha-gym holdout-formulas --formulas seed-42/cispo.jsonl ...`.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from alpha_gym.commands.flags import add_settings_args, add_task_arg, fold_arg, settings_from_args, task_overrides
from alpha_gym.ranges import flag, ints
from trainers.compare.arms import ARMS, arm_names
from trainers.compare.ladder import SCALES, full_panel, panels
from trainers.compare.runner import CompareError
from trainers.config import register_train_table


def register(subparsers) -> argparse.ArgumentParser:
    """Add `compare` to `subparsers` (the object `ArgumentParser.add_subparsers()` returns); registers [train]."""
    register_train_table()
    p = subparsers.add_parser("compare", help="the trainer comparison: the recipe ladder over seeds, with "
                                              "intervals against model-free baselines",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_compare_args(p)
    p.set_defaults(func=cmd_compare)
    return p


#: The sane limits of the comparison's counts: seeds a comparison runs, steps a rung trains (the gpu scale: 600).
MAX_SEEDS, MAX_STEPS, MAX_SEED = 100, 100_000, 2**32 - 1


def seeds_flag(text: str) -> list[int]:
    """--seeds: distinct integers in [0, 2**32 - 1], separated by commas (an argparse `type`)."""
    parts = [t.strip() for t in text.split(",")]
    if not any(parts):
        raise argparse.ArgumentTypeError("no seeds given: name one or more, e.g. 42,43,44")
    if len(parts) > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"{len(parts)} seeds: at most {MAX_SEEDS}")
    seeds = []
    for t in parts:
        if not t.isascii() or not t.isdigit() or int(t) > MAX_SEED:  # isdigit alone takes "٤٢" and "²"
            raise argparse.ArgumentTypeError(f"{t[:40]!r} is not a seed: an integer in [0, {MAX_SEED}]")
        if int(t) in seeds:
            raise argparse.ArgumentTypeError(f"seed {int(t)} is named twice")
        seeds.append(int(t))
    return seeds


def control_names() -> list[str]:
    """The arms that train nothing, in table order (the help names them from the table, so it cannot go stale)."""
    return [a.name for a in ARMS if a.kind == "control"]


def add_compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", choices=sorted(SCALES), default="smoke")
    p.add_argument("--model", help="starting policy: a packaged model (smollm2-135m-instruct, gemma3-270m), a model "
                                   "folder (e.g. the SFT warm start) or hub id; default: SmolLM2-135M-Instruct")
    p.add_argument("--data", help="market data (default: the synthetic market)")
    p.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    p.add_argument("--mutator-model", metavar="MODEL",
                   help="the model the evolve_model and evolve_rl arms mutate with (e.g. the improve-task warm start: "
                        "`alpha-gym sft-data --task improve` then `alpha-gym sft`); default: --model. The probe "
                        "formulas that seed every evolve arm stay --model's, so the evolve arms start alike")
    p.add_argument("--out", default="runs/compare", help="output folder (checkpoints, logs, probe answers)")
    p.add_argument("--results", help="folder for the kept answers and the table (small text files to commit); "
                                     "default: OUT/results")
    p.add_argument("--rungs", help="comma-separated subset of: " + ", ".join(arm_names()) +
                   " (controls, no training and the same verifier calls: " + ", ".join(control_names()) + ")")
    p.add_argument("--seeds", type=seeds_flag,
                   help=f"comma-separated training seeds, at most {MAX_SEEDS} (default: the scale's, cpu: 42,43,44)")
    p.add_argument("--steps", type=flag(ints(1, MAX_STEPS)), help="override the scale's steps per rung")
    p.add_argument("--report-only", action="store_true",
                   help="no training, no model, no torch: the table from the answers already under --results (any "
                        "seeds, any session), written into --out")
    p.add_argument("--update-results", action="store_true",
                   help="with --report-only: also rewrite the table, report.json and seeds.png kept in --results")
    p.add_argument("--eval", action="append", default=[], metavar="DIR",
                   help="also a row for the answers of an `alpha-gym eval --out DIR` folder (repeatable)")
    p.add_argument("--stress-checkpoint", metavar="DIR|auto|none",
                   help="R3's world model for every rung (default: the settings', 'auto': the model `alpha-gym "
                        "stress fit` registered for the train panel)")
    p.add_argument("--fold", type=fold_arg(allow_all=True), metavar="K|all",
                   help="a walk-forward fold, 1..5 (oldest first), or all: every arm runs on the fold's search window "
                        "only, and what it found is then scored on the fold's validation window and test year "
                        "(RESULTS/walk-forward/, the comparison's walk-forward table); all: folds 1..5, each fold "
                        "already kept skipped")
    add_task_arg(p)
    add_settings_args(p)


def _check_fold_flags(args) -> None:
    """--fold runs arms: refused beside the flags that run none or score a folder made on another window."""
    if args.fold is None:
        return
    for name, given in (("--report-only", args.report_only), ("--update-results", args.update_results),
                        ("--eval", bool(args.eval))):
        if given:
            raise CompareError(f"--fold runs every arm on a fold's search window; {name} cannot go with it (the "
                               "walk-forward table is rebuilt from RESULTS/walk-forward by any run): leave one out")


def compare_settings(args):
    """The comparison's settings: the defaults, --config, each --set, then --stress-checkpoint and --task."""
    flags = {} if args.stress_checkpoint is None else {"verifier": {"stress_checkpoint": args.stress_checkpoint}}
    return settings_from_args(args, {**flags, **task_overrides(args)})


def _scale(args, settings):
    """The scale with --steps and the settings' [train] keys (every rung's recipe gets them)."""
    given_train = dict(settings.given.get("train", {}))
    if "recipe" in given_train:
        raise CompareError("each rung has its own recipe; give [train] keys without train.recipe")
    scale = SCALES[args.scale] if args.steps is None else replace(SCALES[args.scale], steps=args.steps)
    return replace(scale, train={**scale.train, **given_train})


def cmd_compare(args) -> int:
    from alpha_gym.stress.registry import resolve
    from alpha_gym.tasks.sets import brief_set
    from trainers.compare.arms import ARMS, RunContext, eval_arm
    from trainers.compare.run import run_comparison
    # torch-bound modules (trainers.models, the best-of-N control, the loop) load only where a model is trained or
    # answers: --report-only runs without torch
    register_train_table()
    _check_fold_flags(args)
    settings = compare_settings(args)
    scale = _scale(args, settings)
    out = Path(args.out)
    results = Path(args.results) if args.results else out / "results"
    for flag_name, folder in (("--out", out), ("--results", results)):
        if folder.exists() and not folder.is_dir():
            raise CompareError(f"{flag_name} {folder} is a file, not a folder")
    known = arm_names()
    names = known if args.rungs is None else [n.strip() for n in args.rungs.split(",")]
    unknown = sorted(set(names) - set(known) - {""})
    if unknown or "" in names:
        what = f"unknown rungs {', '.join(unknown)}" if unknown else "an empty rung name"
        raise CompareError(f"--rungs {args.rungs[:80]!r}: {what}; the ladder has {', '.join(known)}")
    if args.mutator_model is not None and args.report_only:
        raise CompareError("--mutator-model is the model the evolve_model and evolve_rl arms mutate with; "
                           "--report-only runs no arm, so it would be ignored: leave it out")
    if args.mutator_model is not None:
        if not {"evolve_model", "evolve_rl"} & set(names):
            raise CompareError("--mutator-model is the model of the evolve_model and evolve_rl arms; --rungs "
                               f"{args.rungs!r} runs neither")
        if "," in args.mutator_model or "=" in args.mutator_model:
            raise CompareError(f"--mutator-model {args.mutator_model!r}: a mutator spec cannot name a path holding "
                               "',' or '=' (move or link the folder)")
        from trainers.models import model_not_found
        problem = model_not_found(args.mutator_model)
        if problem:  # now, not once step 0 and the arms before it have run
            raise CompareError(f"--mutator-model: {problem}")
    full = full_panel(args.scale, args.data, args.universe)
    train, holdout = panels(args.scale, full=full)
    if args.fold is not None:   # a fold the data cannot hold is named before the start model is read
        from trainers.compare.folds import folds_of
        folds_of(args.fold, full, scale)
    # R3's model made explicit ("auto": the one registered for the train panel, else none), so the stamp and
    # every rung name the model they use, and a model registered later cannot change a resumed comparison; on a
    # fold, "auto" is made explicit for each fold's search window (`folds.fold_context`): a model registered for
    # the whole train panel was fitted on the fold's validation and test windows
    stress = settings.verifier.stress_checkpoint
    verifier_config = settings.verifier.with_(stress_checkpoint=stress if args.fold else resolve(stress, train))
    # the start model by content, not only by path: a folder rebuilt with other weights is another experiment
    identity = None
    if not args.report_only:
        from trainers.models import model_identity
        identity = model_identity(args.model)
    context = RunContext(scale_name=args.scale, scale=scale, model=args.model, data=args.data,
                         universe=args.universe, verifier_config=verifier_config, train=train, holdout=holdout,
                         probe=tuple(list(brief_set("probe"))[: scale.probe]), out=out, results=results,
                         identity=identity, report_only=args.report_only, update_results=args.update_results,
                         mutator_model=args.mutator_model)
    arms = [a for a in ARMS if a.name in set(names)] + [eval_arm(d) for d in args.eval]
    if args.fold is not None:
        from trainers.compare.folds import run_folds
        text, page = run_folds(context, arms, args.seeds or list(scale.seeds), args.fold, full, table=ARMS)
        print(text)
        if page is not None:
            print(f"report page of the last fold run: {page}")
        return 0
    # the table shows every arm kept in --results, not only those this run ran; only --report-only --rungs
    # narrows it
    text, page = run_comparison(context, arms, args.seeds or list(scale.seeds),
                                table=None if (args.report_only and args.rungs) else ARMS)
    print(text)
    print(f"report page: {page}")
    return 0
