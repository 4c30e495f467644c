"""`alpha-gym stress ...`: fit, check and validate the R3 world model.

    alpha-gym stress fit --data PATH [--universe U] [--start D] [--end D] --out DIR [--size default] [--seed 0]
                                      # registers DIR for the panel: R3 then uses it by default
    alpha-gym stress check DIR            # prints the gates; exit status 0 = usable, 1 = failed a gate
    alpha-gym stress validate DIR [--apply]

`register(subparsers)` adds the group to an argparse parser (the main CLI calls it).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from alpha_gym.commands.flags import add_data_args, add_settings_args, settings_from_args, universe_arg
from alpha_gym.jsonable import json_dumps


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


def _fmt(x, spec="+.3f"):
    if isinstance(x, (int, float)) and math.isfinite(x):
        return format(x, spec)
    return str(x)


def format_gates(manifest: dict, directory="") -> str:
    g = manifest["gates"]
    p, geo, sf = g["prediction"], g["geometry"], g["stylised_facts"]
    ok = {True: "PASS", False: "FAIL"}
    data = manifest["data"]
    lines = [f"world model {directory}: fitted on {data['source']} ({data['n_stocks']} stocks x {data['n_days']} "
             f"sessions, {data['first']}..{data['last']}), {manifest['fit'].get('steps')} steps, "
             f"{manifest['fit'].get('seconds', manifest['fit'].get('training_seconds', '?'))} s",
             f"held-back tail: {g['tail']['samples']} samples, targets {g['tail']['first_target_session']}.."
             f"{g['tail']['last_target_session']}",
             f"[{ok[p['passed']]}] prediction beats 'no change' (error ratio < {p['max_ratio']}): "
             f"latent {_fmt(p['latent_mse_ratio_vs_no_change'], '.3f')}, "
             f"geometry {_fmt(p['geometry_mse_ratio_vs_no_change'], '.3f')} "
             f"(latent vs train-mean baseline {_fmt(p['latent_mse_ratio_vs_train_mean'], '.3f')})",
             f"[{ok[geo['passed']]}] geometry R^2 ({_geometry_rule(geo)}): "
             f"{_fmt(geo['mean_r2'])} (no-change baseline {_fmt(geo['no_change_mean_r2'])}"
             + (f", ridge AR(1) on the observed geometry {_fmt(geo['ar1_mean_r2'])}" if "ar1_mean_r2" in geo else "")
             + (f", AR(1) and no change combined {_fmt(geo['baselines_mean_r2'])}; the forecast = AR(1) + "
                f"{_fmt(geo['blend_weights']['head'], '.3f')} x (head - AR(1)) + "
                f"{_fmt(geo['blend_weights']['no_change'], '.3f')} x (no change - AR(1)), weights fitted on the "
                f"validation block; head alone {_fmt(geo['head_mean_r2'])}" if geo.get("blend_weights") else "")
             + ")",
             "        " + ", ".join(f"{k} {_fmt(v, '+.2f')}" for k, v in geo["r2"].items()),
             f"[{ok[sf['passed']]}] stylised facts of a decoded panel (simulated shocks) vs real:",
             f"        |r| lag-1 autocorrelation {_fmt(sf['decoded']['abs_acf1'], '.3f')} vs "
             f"{_fmt(sf['real']['abs_acf1'], '.3f')} (ratio {_fmt(sf['abs_acf1_ratio'], '.2f')}, allowed "
             f"{sf['acf_ratio_range'][0]:.2f}..{sf['acf_ratio_range'][1]:.2f})",
             f"        mean correlation {_fmt(sf['decoded']['mean_corr'], '.3f')} vs "
             f"{_fmt(sf['real']['mean_corr'], '.3f')}"
             f" (difference {_fmt(sf['mean_corr_diff'], '+.3f')}, allowed +-{sf['corr_tolerance']})",
             f"        excess kurtosis {_fmt(sf['decoded']['excess_kurtosis'], '.2f')} vs "
             f"{_fmt(sf['real']['excess_kurtosis'], '.2f')} (ratio {_fmt(sf['excess_kurtosis_ratio'], '.2f')}, "
             f"allowed {sf['kurtosis_ratio_range'][0]:.2f}..{sf['kurtosis_ratio_range'][1]:.2f}); "
             f"OHLC consistent: {sf['ohlc_consistent']}",
             "scenarios (own statistic, real -> world, intended direction):"]
    sc = manifest["scenarios"]
    for name in sc["names"]:
        c = sc["checks"].get(name)
        state = "on " if sc["enabled"].get(name) else "OFF"
        if c is None:
            lines.append(f"  [{state}] {name}: not built")
            continue
        why = sc.get("switched_off", {}).get(name, "")
        lines.append(f"  [{state}] {name:<11} {_fmt(c['real'], '.4f')} -> {_fmt(c['world'], '.4f')} "
                     f"({c['intended']}: {'moved' if c['moved'] else 'DID NOT MOVE'}){'  ' + why if why else ''}")
    v = manifest.get("validation")
    if v:
        iv = v.get("auc_interval", {})
        lines.append(f"validation AUC ({v['candidates']} formulas, {v['hold_up']} hold up): "
                     + ", ".join(f"{k} {_fmt(a, '.3f')}{_interval(iv.get(k))}" for k, a in v["auc"].items())
                     + f"; mean drop {_fmt(v['auc_mean_drop'], '.3f')}{_interval(v.get('auc_mean_drop_interval'))}")
    lines.append(f"R3 with this model: {'ON' if g['passed'] and any(sc['enabled'].values()) else 'OFF'}")
    return "\n".join(lines)


def _geometry_rule(geo: dict) -> str:
    """The geometry gate's rule as stored with the checkpoint (older checkpoints: the minimum R^2 only)."""
    rule = f"mean over 10 targets >= {geo['min_mean_r2']}"
    if geo.get("beat_baselines"):
        rule += ", >= the AR(1)'s" + (" and the baselines' combined" if geo.get("blend_weights") else "")
    if geo.get("blend_weights"):
        rule += ", head weight > 0"
    return rule


def _interval(iv) -> str:
    """' [lo, hi]' of an AUC interval, '' when there is none."""
    if not iv or any(v is None or not math.isfinite(v) for v in iv):
        return ""
    return f" [{iv[0]:.3f}, {iv[1]:.3f}]"


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
            print(f"  {name:<12} {_fmt(a, '.3f')}{_interval(result['auc_interval'][name])}"
                  f"   mean drop {result['mean_drop'][name]:.3f}")
        print(f"  {'mean drop':<12} {_fmt(result['auc_mean_drop'], '.3f')}"
              f"{_interval(result['auc_mean_drop_interval'])}"
              f"   (scenarios {', '.join(result['enabled_for_mean_drop'])})")
        print(f"  (earlier CPCV itself: {_fmt(result['auc_early_cpcv'], '.3f')}"
              f"{_interval(result['auc_early_cpcv_interval'])}; with R3 added as the reward adds it: "
              f"{_fmt(result['auc_early_cpcv_with_r3'], '.3f')}{_interval(result['auc_early_cpcv_with_r3_interval'])}, "
              f"a gain of {_fmt(result['auc_gain_from_r3'], '+.3f')}{_interval(result['auc_gain_from_r3_interval'])})")
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
