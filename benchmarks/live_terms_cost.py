"""What taking dead terms out (`alpha_gym.scoring.live_terms`, what R9 and R13 read) costs a score.

    python benchmarks/live_terms_cost.py [--panels us46,all496] [--kept 200] [--repeat 3]

One process, one thread. `Verifier.score_formula` with the live tree and without it (`live_tree` replaced by the
formula itself, the path before), interleaved per formula so both see the same machine load: CPU milliseconds,
best of `--repeat` each (the sum's increase and the median formula's), over the 22 formulas of `verifier_speed.py` and over `--kept` valid formulas of the
kept runs (every formula a `benchmarks/results/**/*.jsonl` row marks `train_valid`, sorted, evenly thinned), and
`live_tree` alone. Also printed: how many of those formulas lose a term, and the CPU flags that matter to numpy.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "us_equities"


def kept_formulas(n: int) -> list[str]:
    """`n` valid formulas of the kept runs, evenly taken from their sorted set (the same on every checkout)."""
    found = set()
    for path in sorted((ROOT / "benchmarks" / "results").rglob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("train_valid") and isinstance(row.get("formula"), str):
                found.add(row["formula"])
    ordered = sorted(found)
    step = max(1, len(ordered) // n)
    return ordered[::step][:n]


def cpu_flags() -> str:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown"
    return " ".join(f for f in flags.split(":", 1)[1].split() if f.startswith(("avx", "fma", "sse4")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--panels", default="us46")
    ap.add_argument("--kept", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import alpha_gym.scoring.verifier as V
    from alpha_gym import load_panel, load_universe
    from alpha_gym.language import parse
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.live_terms import live_tree
    from verifier_speed import FORMULAS  # this script's folder

    def cpu_ms(fn) -> float:
        times = []
        for _ in range(args.repeat):
            t = time.process_time()
            fn()
            times.append(time.process_time() - t)
        return min(times) * 1000

    full = load_panel(DATA / "us_daily_train.csv.gz")
    print(json.dumps({"cpu": platform.processor() or platform.machine(), "flags": cpu_flags()}), flush=True)
    sets = {"verifier_speed": FORMULAS, "kept": kept_formulas(args.kept)}
    for name in args.panels.split(","):
        panel = full.select(load_universe(DATA / "universe_us46.txt")) if name == "us46" else full
        v = V.Verifier(panel, VerifierConfig(archive_seed=False))
        for label, formulas in sets.items():
            on = off = alone = 0.0
            changed = scored = 0
            ratios = []
            for f in formulas:
                V.live_tree = live_tree
                first = v.score_formula(f)
                if not first.valid:
                    continue
                scored += 1
                changed += "live_formula" in first.diagnostics
                with_ms = cpu_ms(lambda: v.score_formula(f))
                V.live_tree = lambda node, *rest: node
                without_ms = cpu_ms(lambda: v.score_formula(f))
                on, off = on + with_ms, off + without_ms
                ratios.append(with_ms / without_ms)
                node = parse(f)
                alone += cpu_ms(lambda: live_tree(node, panel, v.config.min_valid_stocks))
            V.live_tree = live_tree
            print(json.dumps({"panel": name, "formulas": label, "valid": scored, "losing_a_term": changed,
                              "ms_per_score_without": round(off / scored, 2), "ms_per_score_with": round(on / scored, 2),
                              "increase": f"{on / off - 1:+.1%}", "median_increase": f"{statistics.median(ratios) - 1:+.1%}",
                              "live_tree_ms": round(alone / scored, 2)}),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
