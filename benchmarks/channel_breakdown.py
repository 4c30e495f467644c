"""Where the reward of kept answers comes from: mean priority x channel of the valid ones, on the train window.

    python benchmarks/channel_breakdown.py --results benchmarks/results/compare-cpu \
        --data ../shared/data/us_equities/us_daily_train.csv.gz \
        --universe ../shared/data/us_equities/universe_us46.txt step-0 seed-42/dapo seed-42/cispo

Each answer is scored alone against the seeded archive (`Verifier.score_formula`), on the comparison's
training window (the pseudo-holdout cut off). Behind BENCHMARKS.md's "why the growing archive does not stop it".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--universe")
    ap.add_argument("--scale", default="cpu")
    ap.add_argument("files", nargs="+", help="answer files under --results, without .jsonl")
    args = ap.parse_args(argv)
    from alpha_gym import CHANNELS
    from alpha_gym.scoring.verifier import Verifier
    from trainers.compare.ladder import panels
    train, _ = panels(args.scale, args.data, args.universe)
    verifier = Verifier(train)
    for name in args.files:
        rows = [json.loads(x) for x in (Path(args.results) / f"{name}.jsonl").read_text().splitlines() if x.strip()]
        valid = [s for s in (verifier.score_formula(r["formula"]) for r in rows if r["formula"]) if s.valid]
        parts = {c: float(np.mean([verifier.config.priorities[c] * s.channels[c] for s in valid])) for c in CHANNELS}
        print(f"{name}: {len(valid)} valid, reward {np.mean([s.reward for s in valid]):+.3f}, "
              f"max |P&L corr| vs archive {np.mean([s.diagnostics['max_pnl_corr'] for s in valid]):.3f}; "
              + ", ".join(f"{c} {v:+.3f}" for c, v in parts.items() if abs(v) > 1e-4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
