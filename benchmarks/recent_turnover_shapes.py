"""The recent turnover floor (`VerifierConfig.min_recent_turnover`): other shapes of a book that stops trading,
and what the rule costs a score.

    python benchmarks/recent_turnover_shapes.py [--data ../shared/data/us_equities]

On us46's walk-forward fold 5 search window (2012-06-29..2022-08-15), four shapes of "trade a real signal while
a stock's yearly mean price is under K, then stop" (K in 8 levels x 3 signals each) are admitted with the rule
off and on; for each: how many were admitted, how many of those had a last CPCV block under 1% a day, and the
smallest recent turnover among the books the rule admits. Then the rule's own cost (`cpcv.last_block_mean` on a
book's daily turnover) against one whole score.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

SIGNALS = ("rank(-ts_delta(close, 5))", "rank(volume / adv20)", "-rank(ts_std(returns, 10))")
LEVELS = (20, 40, 60, 80, 100, 150, 200, 300)
SHAPES = {
    "switch to a constant": "(ts_mean(close, 252) < {k}) ? {s} : 0.5",
    "multiply by an indicator": "{s} * (ts_mean(close, 252) < {k})",
    "switch to a slow book": "(ts_mean(close, 252) < {k}) ? {s} : rank(ts_mean(volume, 250))",
    "switch to a lagged slow book": "(ts_mean(close, 252) < {k}) ? {s} : delay(rank(ts_mean(volume, 250)), 5)",
    "fade by a price window": "{s} * ts_min(ts_mean(close, 252) < {k}, 20)",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "us_equities"))
    args = p.parse_args()
    from alpha_gym.market import load_panel
    from alpha_gym.scoring import cpcv
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Evaluated, Verifier
    data = Path(args.data)
    panel = load_panel(data / "us_daily_train.csv.gz", universe=data / "universe_us46.txt").window(None, "2022-08-15")
    on, off = Verifier(panel), Verifier(panel, VerifierConfig(min_recent_turnover=0.0))
    print("| shape | admitted, rule off | of those, last block < 1% | admitted, rule on | least recent turnover admitted |")
    print("|---|---:|---:|---:|---:|")
    for name, template in SHAPES.items():
        before = dead = after = 0
        recent = []
        for k in LEVELS:
            for s in SIGNALS:
                f = template.format(s=s, k=k)
                b, a = off.admit(f), on.admit(f)
                if isinstance(b, Evaluated):
                    before += 1
                    dead += b.recent_turnover < 0.01
                if isinstance(a, Evaluated):
                    after += 1
                    recent.append(a.recent_turnover)
        least = f"{min(recent):.1%}" if recent else "-"
        print(f"| {name} | {before} | {dead} | {after} | {least} |")
    ev = on.admit(SIGNALS[0])
    t = time.perf_counter()
    for _ in range(10_000):
        cpcv.last_block_mean(ev.book.turnover, on.config.cpcv.n_blocks)
    rule = (time.perf_counter() - t) / 10_000
    t = time.perf_counter()
    for _ in range(5):
        on.score_formula(SIGNALS[0])
    score = (time.perf_counter() - t) / 5
    print(f"\nthe rule: {rule * 1e6:.1f} us a book ({len(ev.book.turnover)} days); one score {score * 1e3:.0f} ms: "
          f"{rule / score:.5%} of it")


if __name__ == "__main__":
    main()
