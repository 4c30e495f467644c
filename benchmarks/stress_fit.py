"""Benchmark of R3 (jepa_stress): fit the default world model on real us46, gates, R3 overhead, scenario AUCs.

    python benchmarks/stress_fit.py [--out DIR] [--size default] [--report FILE.json] [--apply] [--no-validation]

Needs ../shared/data/us_equities (or ALPHA_GYM_REAL_DATA) and the `stress`
extra. The fit is resumable: run the same command again after an interruption.
Prints

* the fit's wall time (budget: 30 minutes on the 2-core reference machine);
* the gate values of the fitted model;
* R3's scoring overhead per formula: the time of `provider.channel` (the
  formula re-scored in the enabled worlds) against the time of the core
  `Verifier.score_formula` on the real panel (budget: 4x);
* the scenario validation AUCs (`alpha-gym stress validate`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DATA = Path(os.environ.get("ALPHA_GYM_REAL_DATA", ROOT.parent / "shared" / "data" / "us_equities"))

TIMING_FORMULAS = [
    "rank(-ts_delta(close, 5))", "rank(volume / ts_mean(volume, 20))", "-ts_corr(close, volume, 10)",
    "rank(ts_std(returns, 20))", "((close - open) / ((high - low) + .001))", "rank(-ts_mean(returns, 3))",
    "-rank(ts_skew(returns, 40))", "rank(ts_decay_linear(-returns, 10)) * rank(volume / adv(20))",
    "-1 * correlation(rank(open), rank(volume), 10)", "rank((close - ts_mean(close, 20)) / ts_std(close, 20))",
    "ts_rank(volume, 10) - ts_rank(close, 10)", "-rank(ts_corr(returns, delay(returns, 1), 20))",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/alpha_gym_stress_us46", help="checkpoint directory")
    ap.add_argument("--size", default="default", choices=("tiny", "default", "large"))
    ap.add_argument("--steps", type=int)
    ap.add_argument("--report", help="write the numbers as JSON here")
    ap.add_argument("--apply", action="store_true", help="switch off scenarios whose validation AUC interval does not lie above 0.5")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="timing repeats per formula")
    ap.add_argument("--no-validation", action="store_true",
                    help="skip the scenario validation (run `alpha-gym stress validate DIR --random N` instead)")
    args = ap.parse_args(argv)

    from alpha_gym import Verifier, VerifierConfig
    from alpha_gym.market import load_panel
    from alpha_gym.stress import StressProvider
    from alpha_gym.stress.report import format_gates
    from alpha_gym.stress.config import preset
    from alpha_gym.stress.fit import fit
    from alpha_gym.evaluation.stress_validation import apply, validate

    train = DATA / "us_daily_train.csv.gz"
    if not train.exists():
        print(f"real data not found at {train}", file=sys.stderr)
        return 2
    panel = load_panel(train, universe=DATA / "universe_us46.txt")
    print(f"panel: {panel!r}")
    cfg = preset(args.size, **({"steps": args.steps} if args.steps else {}))
    t0 = time.perf_counter()
    manifest = fit(panel, args.out, cfg, progress=not args.no_progress,
                   data_extra={"load": {"data": str(train), "universe": str(DATA / "universe_us46.txt"),
                                        "start": None, "end": None}})
    wall = time.perf_counter() - t0
    fit_seconds = manifest["fit"].get("seconds", wall)
    print(f"\nfit: {fit_seconds:.0f} s in total for {manifest['fit']['steps']} steps "
          f"({manifest['fit'].get('training_seconds', float('nan')):.0f} s training; this call {wall:.0f} s; "
          f"budget 1800 s)")
    print(format_gates(manifest, args.out))

    # ---- R3 overhead per formula
    verifier = Verifier(panel, VerifierConfig())
    verifier.score_formula(TIMING_FORMULAS[0])          # warm-up: factors, archive seeding
    provider = StressProvider.from_checkpoint(args.out, verifier)
    if not provider.on:
        print(f"\nR3 is off ({provider.reason}); timing the worlds anyway through the cached panels")
        from alpha_gym.stress import checkpoint as ck
        from alpha_gym.stress.scenarios import load_or_build
        panels, _ = load_or_build(args.out, panel, ck.read_manifest(args.out))
        cfg_w = verifier.config.with_(archive_seed=False)
        provider = StressProvider({k: Verifier(p, cfg_w) for k, p in panels.items()}, "forced for timing")
    core, stress, values = [], [], {}
    for f in TIMING_FORMULAS:
        for _ in range(args.repeats):
            t = time.perf_counter()
            verifier.score_formula(f)
            core.append(time.perf_counter() - t)
            cpcv = verifier.evaluate(f).cpcv
            t = time.perf_counter()
            values[f] = provider.channel(f, cpcv)
            stress.append(time.perf_counter() - t)
    core_ms, stress_ms = 1000 * sum(core) / len(core), 1000 * sum(stress) / len(stress)
    print(f"\nR3 overhead: {stress_ms:.1f} ms per formula in {len(provider.worlds)} worlds vs {core_ms:.1f} ms for "
          f"the core score: ratio {stress_ms / core_ms:.2f} (budget 4x)")
    for f, (v, state) in values.items():
        print(f"  R3 {v:+.3f}  {f}   [{state}]")

    if args.no_validation:
        if args.report:
            Path(args.report).write_text(json.dumps({
                "fit_seconds": fit_seconds, "gates": manifest["gates"], "r3_ms_per_formula": stress_ms,
                "core_ms_per_formula": core_ms, "r3_overhead_ratio": stress_ms / core_ms}, indent=2) + "\n")
        return 0

    # ---- scenario validation
    t = time.perf_counter()
    result = validate(args.out, panel)
    print(f"\nscenario validation ({time.perf_counter() - t:.0f} s): "
          f"earlier part ..{result['split_last_earlier_session']},"
          f" {result['candidates']} candidate formulas, {result['hold_up']} hold up, {result['fail']} do not")
    def iv(pair):
        return f"[{pair[0]:.3f}, {pair[1]:.3f}]"
    for name, a in result["auc"].items():
        print(f"  AUC {name:<12} {a:.3f} {iv(result['auc_interval'][name])}"
              f"  (mean drop {result['mean_drop'][name]:.3f})")
    print(f"  AUC mean drop    {result['auc_mean_drop']:.3f} {iv(result['auc_mean_drop_interval'])}   "
          f"(earlier CPCV alone: {result['auc_early_cpcv']:.3f} {iv(result['auc_early_cpcv_interval'])}; "
          f"with R3 added: {result['auc_early_cpcv_with_r3']:.3f} {iv(result['auc_early_cpcv_with_r3_interval'])})")
    if args.apply:
        m = apply(args.out, result)
        print("switched off:", m["scenarios"]["switched_off"] or "none")
    if args.report:
        report = {"fit_seconds": fit_seconds, "fit_call_seconds": wall, "gates": manifest["gates"],
                  "scenario_checks": manifest["scenarios"]["checks"], "calibration": manifest["calibration"],
                  "r3_ms_per_formula": stress_ms, "core_ms_per_formula": core_ms,
                  "r3_overhead_ratio": stress_ms / core_ms, "r3_values": {f: v for f, (v, _) in values.items()},
                  "validation": {k: v for k, v in result.items() if k != "rows"}}
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        print(f"report written to {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
