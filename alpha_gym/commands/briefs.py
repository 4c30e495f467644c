"""The `briefs` commands: generate, split and filter design briefs.

`register(subparsers)` adds, to an `argparse` sub-parser collection:

    briefs generate --n 500 --seed 0 --out FILE
    briefs split --briefs FILE [--n-probe 50] [--seed 0] --train-out FILE --probe-out FILE
    briefs filter [--model M] [--tries 8] [--briefs FILE] --out FILE [--upper U] [--limit N] \
                  [--max-new-tokens 128] [--seed 0] [--data PATH ...]   (needs the train extra)

Each sub-command sets `func(args) -> int` (exit status), like the main CLI's.
"""

from __future__ import annotations

from pathlib import Path

from alpha_gym.commands.flags import add_data_args, add_settings_args, panel_from_args, settings_from_args
from alpha_gym.jsonable import json_dumps


def cmd_briefs_generate(args) -> int:
    from alpha_gym.tasks.generator import generate_briefs, save_briefs
    briefs = generate_briefs(args.n, args.seed)
    path = save_briefs(briefs, args.out)
    print(f"wrote {len(briefs)} briefs ({len({b.family for b in briefs})} mechanism families) to {path}")
    return 0


def cmd_briefs_split(args) -> int:
    from alpha_gym.tasks.generator import load_briefs, save_briefs, split_briefs
    split = split_briefs(load_briefs(args.briefs), args.n_probe, args.seed)
    save_briefs(split.train, args.train_out)
    save_briefs(split.probe, args.probe_out)
    info = split.to_dict()
    print(f"train: {info['n_train']} briefs -> {args.train_out}\nprobe: {info['n_probe']} briefs "
          f"(families {', '.join(info['probe_families'])}) -> {args.probe_out}"
          + (f"\nunused: {info['n_unused']} briefs of the probe families" if info["n_unused"] else ""))
    return 0


def cmd_briefs_filter(args) -> int:
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.generator import load_briefs, save_briefs
    from alpha_gym.tasks.sets import brief_set
    from trainers.difficulty import filter_briefs, pass_rates
    from trainers.models import load_base
    briefs = load_briefs(args.briefs) if args.briefs else list(brief_set("train"))
    if args.limit:
        briefs = briefs[: args.limit]
    verifier = Verifier(panel_from_args(args), settings_from_args(args).verifier)
    model, tokenizer = load_base(args.model)
    rates = pass_rates(model, tokenizer, verifier, briefs, tries=args.tries, max_new_tokens=args.max_new_tokens,
                       seed=args.seed)
    kept = filter_briefs(briefs, rates, args.upper)
    save_briefs(kept, args.out)
    rates_path = Path(args.out).with_suffix(".pass_rates.jsonl")
    rates_path.write_text("".join(json_dumps(r.to_dict()) + "\n" for r in rates))
    never = sum(r.solved == 0 for r in rates)
    always = sum(r.solved == r.tries for r in rates)
    print(f"kept {len(kept)}/{len(briefs)} briefs -> {args.out} (never solved {never}, always solved {always}); "
          f"pass rates -> {rates_path}")
    return 0


def register(subparsers) -> None:
    """Add `briefs` (generate, split, filter) to an argparse sub-parser collection."""
    p = subparsers.add_parser("briefs", help="generate or split design briefs")
    bsub = p.add_subparsers(dest="briefs_command", required=True)
    g = bsub.add_parser("generate", help="write N seeded six-part briefs as JSONL")
    g.add_argument("--n", type=int, default=500)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", required=True, help="output JSONL file")
    g.set_defaults(func=cmd_briefs_generate)
    s = bsub.add_parser("split", help="hold out whole mechanism families as probe briefs")
    s.add_argument("--briefs", required=True, help="briefs JSONL file")
    s.add_argument("--n-probe", type=int, default=50)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--train-out", required=True)
    s.add_argument("--probe-out", required=True)
    s.set_defaults(func=cmd_briefs_split)
    f = bsub.add_parser("filter", help="keep briefs a model solves in some but not all tries (needs the train extra)")
    f.add_argument("--model", help="a packaged model (smollm2-135m-instruct, gemma3-270m), model folder or hub id "
                                   "(default: SmolLM2-135M-Instruct)")
    f.add_argument("--tries", type=int, default=8)
    f.add_argument("--briefs", help="briefs JSONL (default: the training split of the seeded briefs)")
    f.add_argument("--out", required=True, help="kept briefs JSONL; pass rates go beside it")
    f.add_argument("--upper", type=float, default=None, help="also drop briefs solved more often than this (e.g. 0.75)")
    f.add_argument("--limit", type=int, default=0, help="only the first N briefs")
    f.add_argument("--max-new-tokens", type=int, default=128)
    f.add_argument("--seed", type=int, default=0)
    add_data_args(f)
    add_settings_args(f)
    f.set_defaults(func=cmd_briefs_filter)
