"""Where the 101 alphas spend their time, by kernel, and what two kernel threads give each heavy kernel (issue 42.2).

    python benchmarks/alpha101_kernels.py [--panel us46|all] [--data ../shared/data/us_equities]

1. By kernel: the 82 industry-free alphas evaluated one after another on one thread, each kernel call timed
   (`alpha_gym.language.operators.KERNELS` wrapped with a timer after two warm-up rounds): total ms, calls and
   ms a call per kernel.
2. Threads: ts_corr(close, volume, 10), rank(close), ts_rank(close, 10), ts_sum(close, 10) and close - volume,
   best of 7, on one thread and inside `alpha_gym.language.ops.kernel_threads(2)`, and the ratio; the two
   results are checked to be bit-identical.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def by_kernel(panel) -> None:
    from alpha_gym.alpha101 import formulas, parse_alpha
    from alpha_gym.language import operators
    from alpha_gym.language.evaluate import evaluate
    nodes = [parse_alpha(n) for n in formulas(industry_free=True)]
    for _ in range(2):
        for node in nodes:
            evaluate(node, panel)
    spent, calls = collections.Counter(), collections.Counter()
    original = dict(operators.KERNELS)

    def timed(name, kernel):
        def run(*args):
            t = time.perf_counter()
            out = kernel(*args)
            spent[name] += time.perf_counter() - t
            calls[name] += 1
            return out
        return run
    try:
        for name, kernel in original.items():
            operators.KERNELS[name] = timed(name, kernel)
        t = time.perf_counter()
        for node in nodes:
            evaluate(node, panel)
        total = time.perf_counter() - t
    finally:
        operators.KERNELS.update(original)
    print(f"{len(nodes)} alphas, one thread: {total * 1e3:.0f} ms, {sum(spent.values()) * 1e3:.0f} ms in kernels\n")
    print("| kernel | ms | calls | ms a call |\n|---|---:|---:|---:|")
    for name, s in spent.most_common():
        print(f"| {name} | {s * 1e3:.1f} | {calls[name]} | {s / calls[name] * 1e3:.2f} |")


def threads(panel) -> None:
    from alpha_gym.language import ops
    c, v = np.array(panel.field("close")), np.array(panel.field("volume"))
    cases = {"ts_corr": lambda: ops.ts_corr(c, v, 10), "rank": lambda: ops.rank(c),
             "ts_rank": lambda: ops.ts_rank(c, 10), "ts_sum": lambda: ops.ts_sum(c, 10), "sub": lambda: ops.sub(c, v)}
    print("\n| kernel | 1 thread ms | 2 threads ms | speed-up |\n|---|---:|---:|---:|")
    for name, f in cases.items():
        best, out = [], []
        for n in (1, 2):
            with ops.kernel_threads(n):
                b = 1e9
                for _ in range(7):
                    t = time.perf_counter()
                    r = f()
                    b = min(b, time.perf_counter() - t)
            best.append(b)
            out.append(r.tobytes())
        if out[0] != out[1]:
            sys.exit(f"{name}: two threads gave other bits than one")
        print(f"| {name} | {best[0] * 1e3:.2f} | {best[1] * 1e3:.2f} | {best[0] / best[1]:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/us_equities")
    ap.add_argument("--panel", choices=("us46", "all"), default="us46")
    args = ap.parse_args()
    from alpha_gym import load_panel, load_universe
    csv = args.data / "us_daily_train.csv.gz"
    if not csv.exists():
        sys.exit(f"real data not found at {csv} (use --data)")
    panel = load_panel(csv)
    if args.panel == "us46":
        panel = panel.select(load_universe(args.data / "universe_us46.txt"))
    for f in ("returns", "vwap", "dollar_volume"):
        panel.field(f)
    by_kernel(panel)
    threads(panel)


if __name__ == "__main__":
    main()
