"""A run on a bf16 base against the spread of fp32 runs (issue 42.3): is its reward curve inside theirs?

    python benchmarks/bf16_reward_curves.py --fp32 runs/bf16/fp32-{42,43,44} --bf16 runs/bf16/bf16-{42,43,44} \
        --plot benchmarks/results/bf16-base/reward_curves.png

Reads each run folder's log.jsonl (`alpha-gym train`), smooths each run's mean group reward over a window of
`--window` steps (trailing; a single step's reward is two groups' worth of noise), and reports for each bf16
run the share of steps where it lies inside the fp32 runs' band (their minimum to maximum at that step), its
mean reward over all steps and over the last `--window`, the fp32 runs' range of the same, and the seconds a
step took (the log's own timing). With three or more fp32 runs each is also held to the band of the others
(in brackets): how often a run that differs only by its seed stays inside, the yardstick for the bf16 rows. Prints a markdown table; `--plot` draws the curves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np



def curve(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """(reward per step, seconds per step) from a run folder's log.jsonl, steps in order."""
    from trainers.run_log import read_log
    log = sorted(read_log(run), key=lambda r: r["step"])
    if not log:
        raise SystemExit(f"{run} has no log.jsonl lines")
    seconds = [r.get("seconds/total", np.nan) for r in log]
    return np.array([r["reward"] for r in log], float), np.array(seconds, float)


def smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over `window` steps (fewer at the start)."""
    c = np.cumsum(np.insert(x, 0, 0.0))
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(i - window, 0)
    return (c[i] - c[lo]) / (i - lo)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fp32", nargs="+", required=True, type=Path, help="fp32 run folders (the band)")
    ap.add_argument("--bf16", nargs="+", required=True, type=Path, help="bf16-base run folders")
    ap.add_argument("--window", type=int, default=5, help="trailing smoothing window, steps (default 5)")
    ap.add_argument("--plot", type=Path, help="write the curves here (PNG)")
    a = ap.parse_args(argv)
    if a.window < 1:
        ap.error("--window must be >= 1")
    fp32 = {p.name: curve(p) for p in a.fp32}
    bf16 = {p.name: curve(p) for p in a.bf16}
    steps = min(len(r) for r, _ in [*fp32.values(), *bf16.values()])
    band = np.array([smooth(r[:steps], a.window) for r, _ in fp32.values()])
    lo, hi = band.min(0), band.max(0)
    print(f"Reward per step, trailing mean over {a.window} steps, the first {steps} steps of every run\n")
    print("| run | steps inside the fp32 band | mean reward | mean, last window | s a step (median) |")
    print("|---|---:|---:|---:|---:|")
    smoothed = {name: smooth(r[:steps], a.window) for name, (r, _) in fp32.items()}
    for name, (r, s) in [*fp32.items(), *bf16.items()]:
        sm = smooth(r[:steps], a.window)
        if name in bf16:
            inside = f"{int(((sm >= lo) & (sm <= hi)).sum())}/{steps}"
        elif len(fp32) >= 3:  # the yardstick: an fp32 run against the band of the other fp32 runs
            others = np.array([v for k, v in smoothed.items() if k != name])
            inside = f"({int(((sm >= others.min(0)) & (sm <= others.max(0))).sum())}/{steps} of the others')"
        else:
            inside = "-"
        print(f"| {name} | {inside} | {r[:steps].mean():+.3f} | {sm[-1]:+.3f} | {np.nanmedian(s[:steps]):.1f} |")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        x = np.arange(1, steps + 1)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.fill_between(x, lo, hi, color="tab:blue", alpha=0.2, label="fp32 band (min-max)")
        for name, (r, _) in fp32.items():
            ax.plot(x, smooth(r[:steps], a.window), color="tab:blue", lw=0.8)
        for name, (r, _) in bf16.items():
            ax.plot(x, smooth(r[:steps], a.window), color="tab:red", lw=1.4, label=name)
        ax.set_xlabel("step")
        ax.set_ylabel(f"mean group reward ({a.window}-step trailing mean)")
        ax.set_title("bf16 base against fp32 runs")
        ax.legend(fontsize=8)
        fig.tight_layout()
        a.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(a.plot, dpi=110)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
