"""What round four's two rules cost a score: the rounding ties and the tie-adjusted price-level statistic.

    python benchmarks/round4_rules_cost.py [--data ../shared/data/us_equities] [--repeat 5] [--panels us46,all]

For the 82 Alpha101s and README's examples on us46 and on all 496 stocks (the train window), one thread: the
median over formulas of the best-of-`repeat` milliseconds of a whole `Verifier.evaluate` (parse, bounded
evaluation, book, rules, CPCV), of `bounds.rounding_runs` on the formula's values and bounds (the check every
score now makes; ties only where rounding decides a material order), and of `price_level_correlation` (its tie
adjustment included), with each one's share of the score. Prints one JSON object.
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

README = ("rank(ts_std(volume, 20) / ts_mean(volume, 20))", "rank(-ts_delta(close, 5))",
          "((close - open) / ((high - low) + .001))", "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))")


def _best(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out) * 1e3


def measure(panel, formulas, repeat: int) -> dict:
    from alpha_gym.language import parse
    from alpha_gym.language.bounds import rounding_runs
    from alpha_gym.language.evaluate import evaluate
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.price_level import price_level_correlation
    from alpha_gym.scoring.verifier import Verifier
    v = Verifier(panel, VerifierConfig(stress_checkpoint=None, archive_seed=False))
    score, runs, level, tied = [], [], [], 0
    for f in formulas:
        node = parse(f, v.config.limits)
        signal, error = evaluate(node, panel, bound=True)
        book = v._book_of(node, signal)
        ranked = v._ranked(node)
        v.evaluate(f)
        score.append(_best(lambda: v.evaluate(f), repeat))
        runs.append(_best(lambda: rounding_runs(signal, error, signal if ranked else None), repeat))
        level.append(_best(lambda: price_level_correlation(book.weights, book.traded, signal, panel), repeat))
        tied += rounding_runs(signal, error, signal if ranked else None) is not None
    med = statistics.median
    return {"formulas": len(formulas), "tied_by_rounding": tied, "score_ms": med(score),
            "rounding_runs_ms": med(runs), "price_level_ms": med(level),
            "rounding_runs_share": med(r / s for r, s in zip(runs, score)),
            "price_level_share": med(p / s for p, s in zip(level, score))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "us_equities"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--panels", default="us46,all", help="which of us46 and all (496 stocks) to measure")
    args = ap.parse_args()
    from alpha_gym.alpha101 import formulas
    from alpha_gym.market import load_panel, load_universe
    everything = load_panel(Path(args.data) / "us_daily_train.csv.gz")
    panels = {"us46": everything.select(load_universe(Path(args.data) / "universe_us46.txt")), "all": everything}
    asked = args.panels.split(",")
    if not asked or any(name not in panels for name in asked):
        ap.error(f"--panels: a comma-separated list of {', '.join(panels)}, not {args.panels!r}")
    panels = {name: panels[name] for name in asked}
    todo = README + tuple(formulas(industry_free=True).values())
    print(json.dumps({name: measure(p, todo, args.repeat) for name, p in panels.items()}, indent=1))


if __name__ == "__main__":
    main()
