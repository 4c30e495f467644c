"""Does R3 change what is learned? One rung of the comparison with R3 off and on, side by side (issue 14, item 4).

    python benchmarks/r3_on_off.py --rung cispo_repo_r --model runs/stress_us46_cmp \
        --off benchmarks/results/compare-cpu --on benchmarks/results/compare-cpu-r3on \
        [--off-runs runs/compare-cpu --on-runs runs/compare-cpu-r3on] \
        --data ../shared/data/us_equities/us_daily_train.csv.gz --universe ../shared/data/us_equities/universe_us46.txt

The two results folders are what `alpha-gym compare --results` kept: the off arm without a world model, the
on arm with `--stress-checkpoint MODEL` (a model fitted on the comparison's train window, `alpha-gym stress fit
--end <the day before the pseudo-holdout>`). For every seed both arms ran, per arm:

* the pseudo-holdout score, valid answers and formula families of the shipped checkpoint (as the table);
* the share of the shipped answers R3 penalises (R3 < 0), both arms' answers re-scored on the train
  window with MODEL: so the off arm says what R3 would have said about answers trained without it;
* with `--off-runs/--on-runs` (the run folders, not committed), the share of valid answers during training
  whose reward carried R3 < 0 (0 in the off arm by construction: a check that it was off).

Over the seeds both arms ran: each arm's mean pseudo-holdout with a 95% bootstrap interval (resampling
briefs and seeds, as the comparison's table) and the paired difference on - off with its interval.

Prints markdown tables; `--json FILE` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def shipped(results: Path, seed: int, rung: str) -> tuple[dict, list[dict]] | None:
    """(the rung's kept summary, its shipped probe answers) or None when that seed has not run."""
    summary, answers = results / f"seed-{seed}" / f"{rung}.json", results / f"seed-{seed}" / f"{rung}.jsonl"
    if not (summary.is_file() and answers.is_file()):
        return None
    from alpha_gym.evaluation.kept import read_object, read_rows  # checked against their hashes
    return read_object(summary), read_rows(answers)


def training_share(run_dir: Path) -> dict | None:
    """R3 during training, from a run's completions.jsonl (None when the run folder is absent).

    share: valid answers whose reward carried R3 < 0; n: valid answers; cpcv_penalised / cpcv_rest: the
    mean CPCV channel (priority-weighted, as in the reward) of those answers and of the others;
    r3_penalised: their mean R3 channel. Together they say whether R3 acts on answers the core score
    already ranks low.
    """
    path = run_dir / "completions.jsonl"
    if not path.is_file():
        return None
    hit, rest, r3 = [], [], []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("valid"):
            channels = row["channels"]
            penalised = channels.get("jepa_stress", 0.0) < 0
            (hit if penalised else rest).append(channels["cpcv"])
            if penalised:
                r3.append(channels["jepa_stress"])
    n = len(hit) + len(rest)

    def mean(xs):
        return sum(xs) / len(xs) if xs else None
    return {"share": len(hit) / n if n else float("nan"), "n": n, "cpcv_penalised": mean(hit),
            "cpcv_rest": mean(rest), "r3_penalised": mean(r3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rung", default="cispo_repo_r")
    ap.add_argument("--model", type=Path, required=True, help="the world model the on arm used")
    ap.add_argument("--off", type=Path, required=True, help="results folder of the off arm")
    ap.add_argument("--on", type=Path, required=True, help="results folder of the on arm")
    ap.add_argument("--off-runs", type=Path, help="run folder (--out) of the off arm")
    ap.add_argument("--on-runs", type=Path, help="run folder (--out) of the on arm")
    ap.add_argument("--data", required=True)
    ap.add_argument("--universe")
    ap.add_argument("--seeds", default="42,43,44")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import numpy as np
    from trainers.compare.ladder import panels
    from trainers.compare.report import rescore
    from trainers.compare.stats import paired_difference, table_interval, valid_mean
    from alpha_gym import Verifier, VerifierConfig

    train, holdout = panels("cpu", args.data, args.universe)
    verifier = Verifier(train, VerifierConfig(stress_checkpoint=str(args.model)))
    state = verifier.score_formula("rank(-ts_delta(close, 5))").diagnostics["channel_state"]["jepa_stress"]
    if not state.startswith("on"):
        sys.exit(f"R3 is not on with {args.model} on the comparison's train window: {state}")
    rows, tables = [], {"off": [], "on": []}
    for seed in (int(s) for s in args.seeds.split(",")):
        arms = {"off": shipped(args.off, seed, args.rung), "on": shipped(args.on, seed, args.rung)}
        if any(v is None for v in arms.values()):
            continue
        for arm, (summary, answers) in arms.items():
            step = summary["selected_step"]
            ck = next(c for c in summary["checkpoints"] if c["step"] == step)
            formulas = [a["formula"] for a in answers if a["train_valid"]]
            r3 = [verifier.score_formula(f).channels["jepa_stress"] for f in formulas]
            runs = args.off_runs if arm == "off" else args.on_runs
            during = training_share(runs / f"seed-{seed}" / args.rung) if runs else None
            tables[arm].append(rescore(answers, train, holdout)[0])
            rows.append({"seed": seed, "arm": arm, "step": step, "holdout": ck["holdout_score"],
                         "valid": ck["valid"], "families": ck["families"],
                         "shipped_r3_penalised": sum(v < 0 for v in r3) / max(len(r3), 1),
                         "shipped_r3_mean": sum(r3) / max(len(r3), 1),
                         "training_r3_penalised": None if during is None else during["share"],
                         "training_valid_answers": None if during is None else during["n"],
                         "training": during})
    if not rows:
        sys.exit(f"no seed has both arms of {args.rung} in {args.off} and {args.on}")
    print(f"R3 off / on, rung {args.rung}, model {args.model} (R3 state: {state.split(':')[0]})\n")
    print("| seed | R3 | shipped step | pseudo-holdout | valid | families | shipped answers R3 penalises | "
          "mean R3 of shipped | valid training answers R3 penalised |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        during = "n/a" if r["training_r3_penalised"] is None else \
            f"{r['training_r3_penalised']:.0%} of {r['training_valid_answers']}"
        print(f"| {r['seed']} | {r['arm']} | {r['step']} | {r['holdout']:+.2f} | {r['valid']} | {r['families']} | "
              f"{r['shipped_r3_penalised']:.0%} | {r['shipped_r3_mean']:+.3f} | {during} |")
    acted = [r for r in rows if r["arm"] == "on" and r["training"] and r["training"]["r3_penalised"] is not None]
    if acted:
        print("\nWhere R3 acted in training (on arm; channels priority-weighted as in the reward):\n")
        print("| seed | answers R3 penalised | their mean R3 | their mean CPCV channel | the other answers' CPCV |")
        print("|---:|---:|---:|---:|---:|")
        for r in acted:
            t = r["training"]
            print(f"| {r['seed']} | {t['share']:.0%} of {t['n']} | {t['r3_penalised']:+.3f} | "
                  f"{t['cpcv_penalised']:+.2f} | {t['cpcv_rest']:+.2f} |")
    summary = {}
    for arm in ("off", "on"):
        table = np.array(tables[arm])
        lo, hi = table_interval(table)
        mine = [r for r in rows if r["arm"] == arm]
        during = [r["training_r3_penalised"] for r in mine if r["training_r3_penalised"] is not None]
        summary[arm] = {"seeds": [r["seed"] for r in mine], "holdout": valid_mean(table), "lo": lo, "hi": hi,
                        "families": float(np.mean([r["families"] for r in mine])),
                        "valid": float(np.mean([r["valid"] for r in mine])),
                        "shipped_r3_penalised": float(np.mean([r["shipped_r3_penalised"] for r in mine])),
                        "training_r3_penalised": float(np.mean(during)) if during else None}
    diff = paired_difference(np.array(tables["on"]), np.array(tables["off"]))
    print(f"\nOver seeds {', '.join(str(s) for s in summary['on']['seeds'])} (mean pseudo-holdout of the valid "
          "answers, 95% bootstrap interval over briefs and seeds):\n")
    print("| R3 | pseudo-holdout [95% CI] | valid | families | shipped answers R3 penalises | "
          "valid training answers R3 penalised |")
    print("|---|---:|---:|---:|---:|---:|")
    for arm, m in summary.items():
        during = "n/a" if m["training_r3_penalised"] is None else f"{m['training_r3_penalised']:.0%}"
        print(f"| {arm} | {m['holdout']:+.3f} [{m['lo']:+.3f}, {m['hi']:+.3f}] | {m['valid']:.1f} | "
              f"{m['families']:.1f} | {m['shipped_r3_penalised']:.0%} | {during} |")
    print(f"\non - off, paired: {diff['diff']:+.3f} [{diff['lo']:+.3f}, {diff['hi']:+.3f}] "
          f"({'outside' if diff['outside_noise'] else 'inside'} the noise)")
    if args.json:
        args.json.write_text(json.dumps({"rung": args.rung, "model": str(args.model), "rows": rows,
                                         "summary": summary, "on_minus_off": diff}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
