"""Verifier speed: parse + evaluate + book + costs + CPCV per formula, and full group scoring.

    python benchmarks/verifier_speed.py [--data ../shared/data/us_equities] [--repeat 3]

Single-threaded (BLAS/OpenMP threads pinned to 1 before numpy loads). Uses the
real panel when present (us46 and all 496 stocks), else the synthetic market.
Targets: <= 20 ms per formula on us46 (46 x 3,304) on one core; a group of 12
answers with every channel except the stress test <= 0.5 s.
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


FORMULAS = [
    "((close - open) / ((high - low) + .001))",
    "rank(-ts_delta(close, 5))",
    "rank(ts_std(volume, 20) / ts_mean(volume, 20))",
    "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))",
    "rank(ts_std(volume / (high - low), 34))",
    "rank(ts_std(volume, 8) / ts_std(close, 8))",
    "-ts_corr(rank(open), rank(volume), 10)",
    "-rank(ts_cov(rank(close), rank(volume), 5))",
    "ts_rank(volume, 20) - rank(ts_std(returns, 10))",
    "rank(ts_decay_linear(-returns, 10))",
    "rank(ts_argmax(close, 30)) - rank(ts_argmin(close, 30))",
    "rank(ts_skew(returns, 63))",
    "-rank(ts_kurt(returns, 21))",
    "rank(ts_slope(log(close), 21))",
    "rank(ts_ema(volume, 10) / ts_mean(volume, 63))",
    "signed_power(rank(vwap - close), 2)",
    "rank(ts_product(1 + returns, 5))",
    "rank(ts_corr(ts_rank(volume, 5), ts_rank(high, 5), 5))",
    "scale(rank(ts_min(low, 10)) - rank(ts_max(high, 10)))",
    "rank(delay(returns, 1)) * -rank(ts_delta(volume, 3))",
    "(close > open ? rank(volume) : -rank(volume)) + rank(-returns)",
    "rank(abs(ts_delta(close, 1)) / ts_mean(abs(ts_delta(close, 1)), 21))",
]


def _panels(data_dir: Path | None):
    from alpha_gym import load_panel, load_universe, synthetic_panel
    if data_dir is not None and (data_dir / "us_daily_train.csv.gz").exists():
        full = load_panel(data_dir / "us_daily_train.csv.gz")
        return {"us46 (real)": full.select(load_universe(data_dir / "universe_us46.txt")), "all 496 (real)": full}
    return {"46 synthetic": synthetic_panel(46, 3304, 0), "496 synthetic": synthetic_panel(496, 3304, 0)}


def bench(panel, repeat: int):
    from alpha_gym import Verifier
    v = Verifier(panel)
    v.archive, v.factors  # build lazy state outside the timings
    core = []
    for f in FORMULAS:
        v.evaluate(f)  # warm
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            v.evaluate(f)
            times.append(time.perf_counter() - t)
        core.append(min(times))
    group = [f"<alpha>{f}</alpha>" for f in FORMULAS[:12]]
    gtimes = []
    for _ in range(repeat):
        t = time.perf_counter()
        v.score_group(group)
        gtimes.append(time.perf_counter() - t)
    return core, min(gtimes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/us_equities")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, single thread")
    print(f"| panel | formulas | median ms/formula | mean ms/formula | max ms | formulas/s | group of 12, all channels (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, panel in _panels(args.data).items():
        core, group_s = bench(panel, args.repeat)
        ms = [c * 1000 for c in core]
        print(f"| {name} {panel.n_stocks}x{panel.n_days} | {len(ms)} | {statistics.median(ms):.1f} | "
              f"{statistics.mean(ms):.1f} | {max(ms):.1f} | {1000 / statistics.mean(ms):.0f} | {group_s:.3f} |")


if __name__ == "__main__":
    main()
