"""Per-cell time of every kernel at a few windows: the calibration behind `alpha_gym/language/cost.py`.

    python benchmarks/kernel_costs.py [--panels us46,all] [--repeat 3]

Single thread. Each operator runs on real fields of the panel (`close`, and `volume` as the second
series); the table gives nanoseconds per cell (best of `--repeat`) next to the cost model's units,
so a kernel whose measured time outgrows its units shows up (one unit is meant to be about 1 ns a
cell on the development machine, with headroom for a loaded machine).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/us_equities"


def main() -> None:
    from alpha_gym.language.cost import node_work
    from alpha_gym.language.nodes import Field, Op
    from alpha_gym.language.operators import KERNELS, OPERATORS
    from alpha_gym.market import load_panel, load_universe

    ap = argparse.ArgumentParser()
    ap.add_argument("--panels", default="us46,all")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    full = load_panel(DATA / "us_daily_train.csv.gz")
    panels = {n: full if n == "all" else full.select(load_universe(DATA / f"universe_{n}.txt"))
              for n in args.panels.split(",")}
    x, y = Field("close"), Field("volume")
    rows = []
    for name, spec in OPERATORS.items():
        if name in ("adv", "ind_neutralize"):
            continue
        windows = (2, 20, 120, 252) if spec.kind == "ts" else (None,)
        for d in windows:
            node = Op(name, (x, y, x)[:spec.n_series], window=d)
            row = [f"{name}" + (f"({d})" if d else ""), node_work(node)]
            for panel in panels.values():
                a = [panel.field(f.name) for f in node.args]
                kernel = KERNELS[name]
                call = (lambda: kernel(*a, d)) if d else (lambda: kernel(*a))
                call()
                best = float("inf")
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    call()
                    best = min(best, time.perf_counter() - t)
                row.append(best * 1e9 / a[0].size)
            rows.append(row)
    print("| kernel | cost units | " + " | ".join(f"ns/cell {n}" for n in panels) + " |")
    print("|---|---:|" + "---:|" * len(panels))
    for r in rows:
        print(f"| {r[0]} | {r[1]:.1f} | " + " | ".join(f"{v:.1f}" for v in r[2:]) + " |")


if __name__ == "__main__":
    main()
