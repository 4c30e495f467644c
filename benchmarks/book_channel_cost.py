"""What R14 `book` costs a scoring call: `score_group` with the reference reward against the `book` recipe.

    python benchmarks/book_channel_cost.py --data ../shared/data/us_equities/us_daily_train.csv.gz \
        --universe ../shared/data/us_equities/universe_us46.txt \
        [--archive benchmarks/results/compare-long/seed-42/best_of_n.archive.jsonl] \
        [--answers benchmarks/results/compare-long/step-0.jsonl] [--group 8] [--groups 6] [--reps 3]

Two verifiers on the panel, the reference reward (R14 at priority 0: not computed) and the `book` recipe (R14 at
3.0), each with the same archive: its learned entries are the formulas of a kept run's archive.jsonl scored and
offered to the archive (those valid and profitable on this panel join). Then `--groups` groups of `--group`
answers (the kept step-0 probe answers) are scored by both, alternately, `--reps` times; printed: the median
milliseconds per `score_group` of each, R14's own part of a call (`Verifier._book_gains` on the group's tradable
answers), and the one-off cost of building the run's book for an archive state (`BookGain`: the learned entries'
correlation matrix; paid once per step, when the archive changes). With R14 at 0 the verifier computes nothing
for it (one priority lookup a call).
The rewards of the two differ only by 3 x R14 for valid answers (checked).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--universe", required=True)
    ap.add_argument("--archive", default=str(ROOT / "benchmarks/results/compare-long/seed-42/best_of_n.archive.jsonl"))
    ap.add_argument("--answers", default=str(ROOT / "benchmarks/results/compare-long/step-0.jsonl"))
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import numpy as np

    from alpha_gym.market import load_panel, load_universe
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier

    panel = load_panel(args.data).select(load_universe(args.universe))
    formulas = list(dict.fromkeys(json.loads(line)["formula"] for line in Path(args.archive).read_text().splitlines()
                                  if line.strip()))
    answers = [json.loads(line)["answer"] for line in Path(args.answers).read_text().splitlines() if line.strip()]
    groups = [answers[i * args.group:(i + 1) * args.group] for i in range(args.groups)]
    off = Verifier(panel, VerifierConfig())
    on = Verifier(panel, VerifierConfig.recipe("book"))
    for v in (off, on):
        for i in range(0, len(formulas), 16):
            v.update_archive(v.score_group([f"<alpha>{f}</alpha>" for f in formulas[i:i + 16]]))
    learned = sum(not s for s in off.archive.seed)
    assert learned == sum(not s for s in on.archive.seed)
    t0 = time.perf_counter()
    rule = on._book_of_archive()          # the run's book for this archive state (cached from here on)
    setup = time.perf_counter() - t0
    times = {"reference": [], "book": []}
    for _ in range(args.reps):
        for g in groups:
            for name, v in (("reference", off), ("book", on)):
                t0 = time.perf_counter()
                got = v.score_group(g)
                times[name].append(time.perf_counter() - t0)
                if name == "reference":
                    ref = got
            for a, b in zip(ref.scores, got.scores):
                if a.valid:
                    assert b.reward == a.reward + 3.0 * b.channels["book"], (a.formula, a.reward, b.reward)
    gains = [s.channels["book"] for g in groups for s in on.score_group(g).scores if s.valid]
    evs = [[ev for ev in on.score_group(g).evaluated if ev is not None] for g in groups]
    own = []                              # R14's own part of a call: the gains of a group's tradable answers
    for _ in range(args.reps):
        for e in evs:
            t0 = time.perf_counter()
            on._book_gains(e)
            own.append(time.perf_counter() - t0)
    print(f"machine: {platform.processor() or platform.machine()}, numpy {np.__version__}")
    print(f"panel {panel.n_stocks} stocks x {panel.n_days} days; archive: {len(off.archive) - learned} seeds, "
          f"{learned} learned entries (of {len(formulas)} formulas); the run's book: {len(rule.members)} members")
    print(f"book setup (once per archive state): {setup * 1e3:.1f} ms")
    print("| reward | ms per score_group (median) | min | max | groups timed |")
    print("|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts) * 1e3:.1f} | {min(ts) * 1e3:.1f} | {max(ts) * 1e3:.1f} | {len(ts)} |")
    print(f"R14's own part (`Verifier._book_gains`, the book built): {statistics.median(own) * 1e3:.2f} ms per group "
          f"(median of {len(own)}; {sum(map(len, evs)) / len(evs):.1f} tradable answers a group)")
    print(f"R14 over the valid answers: {sum(x > 0 for x in gains)} > 0, {sum(x == 0 for x in gains)} = 0, "
          f"{sum(x < 0 for x in gains)} < 0 of {len(gains)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
