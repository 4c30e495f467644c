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
    p.add_argument("--threads", type=int, help="torch CPU threads (1 is often faster on a busy shared machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)
    return p


def config_from_args(args):
    """The recipe with the command line's overrides applied (validated: bad values raise ValueError)."""
    overrides = {k: getattr(args, k) for k in ("prompts_per_step", "num_generations", "max_completion_length",
                                                "save_steps", "seed") if getattr(args, k, None) is not None}
    return RECIPES[args.recipe].with_(**overrides)


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
    except ValueError as err:
        print(f"alpha-gym train: error: {err}", file=sys.stderr)
        return 2
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    panel = resolve_panel(data=args.data, universe=_universe(args.universe), train_start=args.start,
                          train_end=args.end)
    out = args.out or str(Path("runs") / args.recipe)
    summary = train(config, Verifier(panel), None, out, model=args.model, steps=args.steps, resume=args.resume,
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
