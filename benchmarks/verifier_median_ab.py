"""The verifier's median time per formula (benchmarks/verifier_speed.py's formulas) on one panel, in one process:
one side of an interleaved before/after. The checkout scored is the one Python imports `alpha_gym` from
(PYTHONPATH picks another; printed on stderr), so one command times any commit:

    for round in 1 2 3; do for c in NEW OLD; do
        PYTHONPATH=$c python benchmarks/verifier_median_ab.py --panel all; done; done

Prints `median_cpu_ms median_wall_ms` (each formula's best of --repeat, after one warm evaluation): CPU time
is the figure to compare on a shared machine, wall time beside it.
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "us_equities"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--panel", choices=("us46", "all"), default="all", help="us46 or all 496 stocks of the train file")
    ap.add_argument("--repeat", type=int, default=3, help="timed evaluations of each formula (best taken)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import alpha_gym
    from alpha_gym import Verifier, load_panel, load_universe
    from benchmarks.verifier_speed import FORMULAS
    print(f"alpha_gym from {Path(alpha_gym.__file__).parent}", file=sys.stderr)
    panel = load_panel(DATA / "us_daily_train.csv.gz")
    if args.panel == "us46":
        panel = panel.select(load_universe(DATA / "universe_us46.txt"))
    v = Verifier(panel)
    v.archive, v.factors  # lazy state built outside the timings
    cpu, wall = [], []
    for f in FORMULAS:
        v.evaluate(f)
        best_cpu = best_wall = float("inf")
        for _ in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            v.evaluate(f)
            best_cpu = min(best_cpu, time.process_time() - c0)
            best_wall = min(best_wall, time.perf_counter() - w0)
        cpu.append(best_cpu * 1e3)
        wall.append(best_wall * 1e3)
    print(f"{statistics.median(cpu):.2f} {statistics.median(wall):.2f}")


if __name__ == "__main__":
    main()
