"""Batch scoring speed: in one process, on 2 worker processes, and on 2 Ray workers (a local cluster).

    python benchmarks/score_batch_speed.py [--data ../shared/data/us_equities] [--universe us46] [--n 1000]
                                           [--rounds 1] [--no-ray] [--out runs/score_batch]

Draws `--n` random formulas (seed 0, the SFT pool's sampler), scores them with
`alpha-gym score-batch --workers 1` (this process), `--workers 2` (the scoring pool's worker
processes) and `--workers 2 --ray-address local` (a fresh local Ray cluster, as `--workers 2`
did before issue 42), in turn, `--rounds` times, and checks that every output is the same
bytes. Reports per mode the median wall time of the whole command, its start-up (the verifier and
archive, then the workers or Ray) and formulas/s after start-up. Uses the real panel's
`--universe` when present, else the synthetic market.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "us_equities"))
    ap.add_argument("--universe", default="us46", help="us46, us100 or all (496 stocks)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-ray", action="store_true", help="leave out the Ray mode")
    ap.add_argument("--out", default="runs/score_batch_bench")
    args = ap.parse_args()
    import statistics
    import numpy as np
    from alpha_gym.language.sample import random_formula

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    pool = out / "pool.txt"
    pool.write_text("\n".join(random_formula(rng, depth=int(rng.integers(2, 5))) for _ in range(args.n)) + "\n")
    data = Path(args.data) / "us_daily_train.csv.gz"
    data_args = (["--data", str(data), "--universe", str(Path(args.data) / f"universe_{args.universe}.txt")]
                 if data.exists() else [])
    modes = {"1 (this process)": ["--workers", "1"], "2 worker processes": ["--workers", "2"]}
    if not args.no_ray:
        modes["2 Ray workers (--ray-address local)"] = ["--workers", "2", "--ray-address", "local"]
    rows, outputs = {m: [] for m in modes}, []
    for r in range(args.rounds):
        for k, (mode, flags) in enumerate(modes.items()):
            result = out / f"mode{k}.jsonl"
            for p in (result, Path(str(result) + ".meta.json")):
                p.unlink(missing_ok=True)
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "alpha_gym", "score-batch", "--formulas", str(pool),
                                   "--out", str(result), "--quiet", *flags] + data_args,
                                  cwd=ROOT, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t
            summary = json.loads(proc.stdout.strip().splitlines()[-1])
            scoring = summary["seconds"] - summary["startup_seconds"]
            rows[mode].append((wall, summary["startup_seconds"], scoring))
            print(f"round {r + 1} {mode}: {wall:.1f} s", file=sys.stderr, flush=True)
            outputs.append(result.read_bytes())
    print(f"machine: {platform.machine()}, {platform.python_version()}; {args.n} formulas; "
          f"panel: {args.universe + ' (real)' if data_args else 'synthetic 46'}; {args.rounds} rounds, medians")
    print("| workers | wall s (process) | start-up s | scoring s | formulas/s after start-up |")
    print("|---|---:|---:|---:|---:|")
    for mode, runs in rows.items():
        wall, start, scoring = (statistics.median(x[i] for x in runs) for i in range(3))
        print(f"| {mode} | {wall:.1f} | {start:.1f} | {scoring:.1f} | {args.n / scoring:.1f} |")
    same = all(o == outputs[0] for o in outputs)
    print(f"outputs identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
