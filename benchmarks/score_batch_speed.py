"""Batch scoring speed: serial against 1 and 2 Ray workers on this machine (local cluster, started and stopped).

    python benchmarks/score_batch_speed.py [--data ../shared/data/us_equities] [--n 1000] [--out runs/score_batch]

Draws `--n` random formulas (seed 0, the SFT pool's sampler), scores them with
`alpha-gym score-batch --workers 0`, `--workers 1` and `--workers 2` (each a fresh
local Ray cluster of that many CPUs), and checks that the three outputs are the same
bytes. Reports wall time, start-up (Ray and each worker's verifier) and formulas/s
after start-up. Uses us46 of the real panel when present, else the synthetic market.
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
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--out", default="runs/score_batch_bench")
    args = ap.parse_args()
    import numpy as np
    from alpha_gym.language.sample import random_formula

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    pool = out / "pool.txt"
    pool.write_text("\n".join(random_formula(rng, depth=int(rng.integers(2, 5))) for _ in range(args.n)) + "\n")
    data = Path(args.data) / "us_daily_train.csv.gz"
    data_args = ["--data", str(data), "--universe", str(Path(args.data) / "universe_us46.txt")] if data.exists() else []
    rows, outputs = [], []
    for workers in (0, 1, 2):
        result = out / f"workers{workers}.jsonl"
        for p in (result, Path(str(result) + ".meta.json")):
            p.unlink(missing_ok=True)
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "alpha_gym.cli", "score-batch", "--formulas", str(pool),
                               "--out", str(result), "--workers", str(workers), "--quiet"] + data_args,
                              cwd=ROOT, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        scoring = summary["seconds"] - summary["startup_seconds"]
        rows.append((workers, wall, summary["startup_seconds"], scoring, args.n / scoring))
        outputs.append(result.read_bytes())
    print(f"machine: {platform.machine()}, {platform.python_version()}; {args.n} formulas; "
          f"panel: {'us46 (real)' if data_args else 'synthetic 46'}")
    print("| workers | wall s (process) | start-up s | scoring s | formulas/s after start-up |")
    print("|---|---:|---:|---:|---:|")
    for w, wall, start, scoring, rate in rows:
        print(f"| {'serial (no Ray)' if w == 0 else w} | {wall:.1f} | {start:.1f} | {scoring:.1f} | {rate:.1f} |")
    same = all(o == outputs[0] for o in outputs)
    print(f"outputs identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
