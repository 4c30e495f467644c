"""`alpha-gym train`: RL on the verifier with a named recipe.

    alpha-gym train --recipe cispo_repo_r --steps 600 --out runs/cispo_repo_r \
        --data ../shared/data/us_equities/us_daily_train.csv.gz --universe ../shared/data/us_equities/universe_us46.txt

`register(subparsers)` adds the command to an argparse sub-parser set; `cmd_train(args)` runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainers.config import RECIPES


def register(subparsers) -> argparse.ArgumentParser:
    """Add `train` to `subparsers` (the object `ArgumentParser.add_subparsers()` returns)."""
    p = subparsers.add_parser("train", help="RL-train a policy on the verifier with a named recipe",
                              description=__doc__.splitlines()[0])
    p.add_argument("--recipe", required=True, choices=sorted(RECIPES), help="settings of the run (trainers.config)")
    p.add_argument("--model", help="a local model folder or a Hub id (default: the built-in SmolLM2-135M-Instruct)")
    p.add_argument("--steps", type=int, default=100, help="total optimizer steps (rollout batches), default 100")
    p.add_argument("--out", default=None, help="run folder (default runs/<recipe>)")
    p.add_argument("--data", help="CSV/CSV.gz/Parquet in the long format (default: the embedded synthetic market)")
    p.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    p.add_argument("--start", help="first session of the training window (YYYY-MM-DD)")
    p.add_argument("--end", help="last session of the training window (YYYY-MM-DD)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--prompts-per-step", type=int, help="override the recipe's prompts_per_step")
    p.add_argument("--num-generations", type=int, help="override the recipe's num_generations")
    p.add_argument("--max-completion-length", type=int, help="override the recipe's max_completion_length")
    p.add_argument("--save-steps", type=int, help="override the recipe's save_steps")
    p.add_argument("--seed", type=int, help="override the recipe's seed")
    p.add_argument("--steps-per-generation", type=int, help="override the recipe's optimizer steps per rollout batch")
    p.add_argument("--briefs", default="train",
                   help="'train' (default: the 450 training briefs), 'probe', 'fixed' (8 hand-written) or a briefs "
                        "JSONL file (alpha-gym briefs generate/split/filter)")
    p.add_argument("--advantage-floor", type=_floor, metavar="X|none",
                   help="override the recipe's advantage floor (ladder recipes: 0; 'none' switches it off)")
    p.add_argument("--format-reward", choices=("on", "off"), default="off",
                   help="R12: +0.05 for a <think> block (default off, as in the reference run)")
    p.add_argument("--stress-checkpoint", metavar="DIR", help="a fitted world model for R3 (alpha-gym stress fit)")
    p.add_argument("--threads", type=int, help="torch CPU threads (1 is often faster on a busy shared machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)
    return p


def _floor(text: str):
    """--advantage-floor: a number, or 'none' for off."""
    if text.strip().lower() == "none":
        return "none"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None


def config_from_args(args):
    """The recipe with the command line's overrides applied (validated: bad values raise ValueError)."""
    overrides = {k: getattr(args, k) for k in ("prompts_per_step", "num_generations", "max_completion_length",
                                                "save_steps", "seed", "steps_per_generation")
                 if getattr(args, k, None) is not None}
    floor = getattr(args, "advantage_floor", None)
    if floor is not None:
        overrides["advantage_floor"] = None if floor == "none" else floor
    return RECIPES[args.recipe].with_(**overrides)


def verifier_config_from_args(args):
    """The verifier's settings the command line can change: R12 and the R3 world model."""
    from alpha_gym.scoring.config import VerifierConfig
    return VerifierConfig(format_enabled=getattr(args, "format_reward", "off") == "on",
                          stress_checkpoint=getattr(args, "stress_checkpoint", None))


def briefs_from_args(value: str):
    """--briefs: a named set or a JSONL file."""
    from alpha_gym.env import brief_set
    if value in ("train", "probe", "fixed"):
        return list(brief_set(value))
    from alpha_gym.tasks.generator import load_briefs
    if not Path(value).is_file():
        raise ValueError(f"--briefs: {value!r} is neither 'train', 'probe', 'fixed' nor a briefs JSONL file")
    return load_briefs(value)


def _universe(value):
    if value is None:
        return None
    return value if Path(value).exists() else [t.strip() for t in value.split(",") if t.strip()]


def cmd_train(args) -> int:
    from alpha_gym.env import resolve_panel
    from alpha_gym.scoring.verifier import Verifier
    from trainers.loop import train
    try:
        config = config_from_args(args)
        verifier_config = verifier_config_from_args(args)
        briefs = briefs_from_args(args.briefs)
    except ValueError as err:
        print(f"alpha-gym train: error: {err}", file=sys.stderr)
        return 2
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    panel = resolve_panel(data=args.data, universe=_universe(args.universe), train_start=args.start,
                          train_end=args.end)
    out = args.out or str(Path("runs") / args.recipe)
    summary = train(config, Verifier(panel, verifier_config), briefs, out, model=args.model, steps=args.steps,
                    resume=args.resume,
                    progress=not args.no_progress)
    summary.pop("policy", None)
    print(json.dumps(summary, indent=2))
    return 0


def main(argv=None) -> int:
    """Stand-alone entry: python -m trainers.cli train --recipe ..."""
    parser = argparse.ArgumentParser(prog="alpha-gym")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
