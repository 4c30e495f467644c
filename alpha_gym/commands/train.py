"""`alpha-gym train`: RL on the verifier with a named recipe.

    alpha-gym train --recipe cispo_repo_r --steps 600 --out runs/cispo_repo_r \
        --data ../shared/data/us_equities/us_daily_train.csv.gz --universe ../shared/data/us_equities/universe_us46.txt

`register(subparsers)` adds the command to an argparse sub-parser set; `cmd_train(args)` runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alpha_gym.commands.flags import (add_data_args, add_settings_args, add_task_arg, panel_from_args,
                                      settings_from_args, task_overrides)
from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from trainers.config import DEFAULT_RECIPE, RECIPES, register_train_table


def register(subparsers) -> argparse.ArgumentParser:
    """Add `train` to `subparsers` (the object `ArgumentParser.add_subparsers()` returns); registers [train]."""
    register_train_table()  # the settings file's [train] table: `config show` lists it, --config checks it
    p = subparsers.add_parser("train", help="RL-train a policy on the verifier with a named recipe",
                              description=__doc__.splitlines()[0])
    p.add_argument("--recipe", choices=sorted(RECIPES),
                   help=f"settings of the run (trainers.config; default: the settings' train.recipe, "
                        f"{DEFAULT_RECIPE})")
    p.add_argument("--model", help="a packaged model (smollm2-135m-instruct, gemma3-270m), a local model folder "
                                   "or a Hub id (default: the built-in SmolLM2-135M-Instruct)")
    p.add_argument("--steps", type=int, default=100, help="total optimizer steps (rollout batches), default 100")
    p.add_argument("--out", default=None, help="run folder (default runs/<recipe>)")
    add_data_args(p)
    add_settings_args(p)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--prompts-per-step", type=int, help="override the recipe's prompts_per_step")
    p.add_argument("--num-generations", type=int, help="override the recipe's num_generations")
    p.add_argument("--max-completion-length", type=int, help="override the recipe's max_completion_length")
    p.add_argument("--save-steps", type=int, help="override the recipe's save_steps")
    p.add_argument("--seed", type=int, help="override the recipe's seed")
    p.add_argument("--steps-per-generation", type=int, help="override the recipe's optimizer steps per rollout batch")
    p.add_argument("--briefs", default="train",
                   help="'train' (default: the 450 training briefs), 'probe' (50 of two families training never "
                        "shows), 'probe_seen' (50 unseen briefs of the training families), 'fixed' (8 hand-written) "
                        "or a briefs JSONL file (alpha-gym briefs generate/split/filter)")
    add_task_arg(p)
    p.add_argument("--advantage-floor", type=_floor, metavar="X|none",
                   help="override the recipe's advantage floor (ladder recipes: 0; 'none' switches it off)")
    p.add_argument("--format-reward", choices=("on", "off"),
                   help="R12: +0.05 for a <think> block (default: verifier.format_enabled, off as in the reference)")
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


def _flag_overrides(args) -> dict:
    """What the command's own flags say, as settings tables (applied after --config and --set)."""
    train = {k: getattr(args, k) for k in ("prompts_per_step", "num_generations", "max_completion_length",
                                           "save_steps", "seed", "steps_per_generation")
             if getattr(args, k, None) is not None}
    if getattr(args, "recipe", None) is not None:
        train["recipe"] = args.recipe
    floor = getattr(args, "advantage_floor", None)
    if floor is not None:
        train["advantage_floor"] = None if floor == "none" else floor
    train.update(task_overrides(args).get("train", {}))
    verifier = {}
    if getattr(args, "format_reward", None) is not None:
        verifier["format_enabled"] = args.format_reward == "on"
    if getattr(args, "stress_checkpoint", None) is not None:
        verifier["stress_checkpoint"] = args.stress_checkpoint
    return {"train": train, "verifier": verifier}


def settings_from_train_args(args):
    """The effective settings of a `train` command (ConfigError names a bad value)."""
    register_train_table()
    return settings_from_args(args, _flag_overrides(args))


def config_from_args(args):
    """The run's TrainConfig: the recipe, then --config/--set, then the flags."""
    return settings_from_train_args(args)["train"].config


def verifier_config_from_args(args):
    """The run's VerifierConfig: the defaults, then --config/--set, then --format-reward/--stress-checkpoint."""
    return settings_from_train_args(args).verifier


def briefs_from_args(value: str):
    """--briefs: a named set or a JSONL file."""
    from alpha_gym.tasks.sets import SET_NAMES, brief_set
    if value in SET_NAMES:
        return list(brief_set(value))
    from alpha_gym.tasks.generator import load_briefs
    if not Path(value).is_file():
        raise InputError(f"--briefs: {value!r} is neither {', '.join(map(repr, SET_NAMES))} nor a briefs JSONL file")
    return load_briefs(value)


def lost_settings_record(args, out) -> Path | None:
    """On --resume with no settings given (no --config, --set or setting flag) into a run folder whose
    settings.toml was lost: the latest checkpoint's copy of it, else None."""
    from alpha_gym.settings import SETTINGS_FILE
    from trainers.checkpoints import latest_checkpoint
    given = _flag_overrides(args)
    if (not args.resume or args.config is not None or args.settings or given["train"] or given["verifier"]
            or (Path(out) / SETTINGS_FILE).is_file()):
        return None
    ckpt = latest_checkpoint(Path(out))
    return ckpt / SETTINGS_FILE if ckpt is not None and (ckpt / SETTINGS_FILE).is_file() else None


def cmd_train(args) -> int:
    from alpha_gym.scoring.verifier import Verifier
    from trainers.loop import train
    try:
        settings = settings_from_train_args(args)
        briefs = briefs_from_args(args.briefs)
    except InputError as err:
        print(f"alpha-gym train: error: {err}", file=sys.stderr)
        return 2
    out = args.out or str(Path("runs") / settings["train"].recipe)
    recorded = lost_settings_record(args, out)
    if recorded is not None:  # the run's settings.toml is gone: resume with what its checkpoint was trained with
        print(f"alpha-gym train: {out}/settings.toml is missing; resuming with {recorded}", file=sys.stderr)
        args.config = str(recorded)
        try:
            settings = settings_from_train_args(args)
        except InputError as err:
            print(f"alpha-gym train: error: {err}", file=sys.stderr)
            return 2
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    summary = train(settings["train"].config, Verifier(panel_from_args(args), settings.verifier), briefs, out,
                    model=args.model, steps=args.steps, resume=args.resume, progress=not args.no_progress)
    summary.pop("policy", None)
    print(json_dumps(summary, indent=2))
    return 0


def register_export(subparsers) -> argparse.ArgumentParser:
    """Add `export-gguf` (a model folder as a GGUF file for llama.cpp; trainers/export_gguf.py)."""
    from trainers.export_gguf import EXPORT_INSTALL
    p = subparsers.add_parser("export-gguf", help="a trained or SFT model folder as one GGUF file for llama.cpp's "
                                                  "server (llama.cpp's own converter; needs the train extra and "
                                                  f"sentencepiece: {EXPORT_INSTALL})",
                              description="A trained or SFT model folder as one GGUF file for llama.cpp's server, "
                                          "written by llama.cpp's own converter. Needs the train extra (torch, "
                                          "transformers) and sentencepiece, which the converter imports: "
                                          f"{EXPORT_INSTALL}.")
    p.add_argument("source", help="a model folder (alpha-gym sft's OUT/model, or OUT), a checkpoint-N folder of "
                                  "adapters (merged into their base) or a training run folder (its latest checkpoint)")
    p.add_argument("--out", required=True, help="the GGUF file to write (FILE.gguf)")
    p.add_argument("--outtype", choices=("f32", "f16"), default="f32",
                   help="weight precision (default f32: the weights as trained, greedy answers as in-process)")
    p.add_argument("--converter", metavar="PATH",
                   help="llama.cpp's convert_hf_to_gguf.py, a llama.cpp checkout or llama-cpp-python's sdist "
                        "(.tar.gz) (default: $ALPHA_GYM_GGUF_CONVERTER, else an sdist in the cache folder's llama.cpp/)")
    p.add_argument("--base", help="the base model of an adapter folder (default: the one its adapter_config.json "
                                  "records)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=cmd_export_gguf)
    return p


def cmd_export_gguf(args) -> int:
    from trainers.export_gguf import export_gguf
    summary = export_gguf(args.source, args.out, outtype=args.outtype, converter=args.converter, base=args.base,
                          overwrite=args.force)
    print(json_dumps(summary, indent=2))
    return 0
