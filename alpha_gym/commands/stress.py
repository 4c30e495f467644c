"""`alpha-gym stress ...`: fit, check and validate the R3 world model.

    alpha-gym stress fit --data PATH [--universe U] [--start D] [--end D] --out DIR [--size default] [--seed 0]
                                      # registers DIR for the panel: R3 then uses it by default
    alpha-gym stress check DIR            # prints the gates; exit status 0 = usable, 1 = failed a gate
    alpha-gym stress validate DIR [--apply]

`register(subparsers)` adds the group to an argparse parser (the main CLI calls it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alpha_gym.commands.flags import add_data_args, add_settings_args, settings_from_args, universe_arg
from alpha_gym.jsonable import json_dumps
from alpha_gym.stress.report import fmt, fmt_interval, format_gates


def _load(data, universe, start, end):
    from alpha_gym.market.resolve import resolve_panel
    return resolve_panel(data=data, universe=universe, train_start=start, train_end=end)


def _load_info(args) -> dict:
    return {"data": str(Path(args.data).resolve()) if args.data else None, "universe": universe_arg(args.universe),
            "start": args.start, "end": args.end}


def cmd_fit(args) -> int:
    from alpha_gym.settings import from_dict
    from alpha_gym.stress.config import StressConfig, preset
    from alpha_gym.stress.fit import fit
    info = _load_info(args)
    overrides = {"seed": args.seed}
    if args.steps is not None:
        overrides["steps"] = args.steps
    if args.threads is not None:
        overrides["threads"] = args.threads
    # --size is the base; the settings file's [stress] keys change it; the flags above come last
    given = settings_from_args(args).given.get("stress", {})
    cfg = from_dict(StressConfig, {**given, **overrides}, base=preset(args.size), where="stress")
    panel = _load(info["data"], info["universe"], info["start"], info["end"])
    print(f"alpha-gym stress fit: {panel!r}, size {args.size}, {cfg.steps} steps, seed {cfg.seed} -> {args.out}",
          file=sys.stderr)
    manifest = fit(panel, args.out, cfg, progress=not args.no_progress, data_extra={"load": info},
                   max_steps=args.max_steps, restart=args.restart)
    if manifest is None:
        print(f"stopped early; the partial fit in {args.out} resumes with the same command", file=sys.stderr)
        return 0
    print(format_gates(manifest, args.out))
    from alpha_gym.stress.registry import register
    entry = register(args.out, panel.fingerprint())
    if entry is not None:
        state = ("R3 is on for verifiers on this panel" if manifest["gates"]["passed"]
                 else "R3 stays off there until a model passes its gates")
        print(f"registered for this panel ({entry}): verifiers whose stress_checkpoint is 'auto' (the default) "
              f"use this model; {state}")
    return 0


def cmd_check(args) -> int:
    from alpha_gym.stress import checkpoint as ck
    manifest = ck.read_manifest(args.dir)
    if args.regate:
        load = _load_info(args) if args.data is not None else manifest["data"].get("load")
        if load is None:
            print("alpha-gym stress check: the manifest does not say how to reload its data; pass --data",
                  file=sys.stderr)
            return 2
        from alpha_gym.stress.fit import regate
        manifest = regate(args.dir, _load(load["data"], load["universe"], load["start"], load["end"]))
    if args.json:
        print(json_dumps({"gates": manifest["gates"], "scenarios": manifest["scenarios"],
                          "validation": manifest.get("validation")}, indent=2))
    else:
        print(format_gates(manifest, args.dir))
    return 0 if manifest["gates"]["passed"] else 1


def cmd_validate(args) -> int:
    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.evaluation.stress_validation import apply, validate
    manifest = ck.read_manifest(args.dir)
    load = manifest["data"].get("load")
    if args.data is not None:
        load = _load_info(args)
    if load is None:
        print("alpha-gym stress validate: the manifest does not say how to reload its data; pass --data",
              file=sys.stderr)
        return 2
    panel = _load(load["data"], load["universe"], load["start"], load["end"])
    from alpha_gym.evaluation.stress_validation import default_formulas
    pool = default_formulas(args.random, alpha101=not args.no_alpha101, seed=args.seed)
    result = validate(args.dir, panel, pool, split=args.split, config=settings_from_args(args).verifier)
    if args.json:
        print(json_dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    else:
        print(f"earlier part ..{result['split_last_earlier_session']}, later part {result['first_later_session']}..; "
              f"{result['candidates']} of {result['formulas']} formulas trade and score > 0 on the earlier part; "
              f"{result['hold_up']} hold up (later net Sharpe > 0), {result['fail']} do not")
        print("AUC of -drop for 'holds up' [95% bootstrap interval over formulas] (0.5 = chance; a scenario "
              "earns its place only where the interval lies above 0.5):")
        for name, a in result["auc"].items():
            print(f"  {name:<12} {fmt(a, '.3f')}{fmt_interval(result['auc_interval'][name])}"
                  f"   mean drop {result['mean_drop'][name]:.3f}")
        print(f"  {'mean drop':<12} {fmt(result['auc_mean_drop'], '.3f')}"
              f"{fmt_interval(result['auc_mean_drop_interval'])}"
              f"   (scenarios {', '.join(result['enabled_for_mean_drop'])})")
        print(f"  (earlier CPCV itself: {fmt(result['auc_early_cpcv'], '.3f')}"
              f"{fmt_interval(result['auc_early_cpcv_interval'])}; with R3 added as the reward adds it: "
              f"{fmt(result['auc_early_cpcv_with_r3'], '.3f')}{fmt_interval(result['auc_early_cpcv_with_r3_interval'])}, "
              f"a gain of {fmt(result['auc_gain_from_r3'], '+.3f')}{fmt_interval(result['auc_gain_from_r3_interval'])})")
        print("note: " + result["note"])
    if args.apply:
        manifest = apply(args.dir, result, args.threshold)
        off = manifest["scenarios"]["switched_off"]
        print("switched off: " + (", ".join(f"{k} ({v})" for k, v in off.items()) if off else "none"))
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add the `stress` command group to an argparse subparsers object."""
    p = subparsers.add_parser("stress", help="the R3 world model: fit, check, validate")
    sub = p.add_subparsers(dest="stress_command", required=True)

    f = sub.add_parser("fit", help="fit the JEPA world model on the train window (resumable, seeded)")
    add_data_args(f)
    add_settings_args(f)
    f.add_argument("--out", required=True, help="checkpoint directory")
    f.add_argument("--size", default="default", choices=("tiny", "default", "large"))
    f.add_argument("--steps", type=int, help="training steps (default: the size's)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--threads", type=int, help="torch threads for training (default 1)")
    f.add_argument("--max-steps", type=int, help="stop after this many steps (resume later)")
    f.add_argument("--restart", action="store_true", help="discard a partial or complete fit in --out")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_fit)

    c = sub.add_parser("check", help="print the gates of a checkpoint (exit 1 when a gate failed)")
    c.add_argument("dir")
    add_data_args(c)
    c.add_argument("--regate", action="store_true", help="evaluate the gates again under this version's rules "
                                                         "(the weights and scenarios stay; needs the data)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_check)

    v = sub.add_parser("validate", help="AUC of each scenario's drop for formulas that hold up later in the "
                                        "train window")
    v.add_argument("dir")
    add_data_args(v)
    add_settings_args(v)
    v.add_argument("--split", type=float, default=2.0 / 3.0, help="share of the train window in the earlier part")
    v.add_argument("--random", type=int, default=300, help="random formulas of the task sampler in the pool")
    v.add_argument("--seed", type=int, default=0, help="seed of the random formulas")
    v.add_argument("--no-alpha101", action="store_true", help="leave the 82 Alpha101s out of the pool")
    v.add_argument("--apply", action="store_true", help="record the result and switch off the scenarios "
                                                        "whose AUC interval does not lie above --threshold")
    v.add_argument("--threshold", type=float, default=0.5)
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_validate)
    return p
