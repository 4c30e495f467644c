"""What the rounding-error bounds (docs/operators.md, rule 5) cost the core score (issue 41.1).

    python benchmarks/rounding_bounds_cost.py [us46,all496]

One process, one thread: `Verifier.evaluate` (parse, evaluate, book, CPCV) with the bounds and without them
(`answer_to_book(bound=False)`, the path before rule 5), interleaved per formula so both see the same machine
load, and `evaluate` alone with and without `bound=True`: CPU milliseconds summed over the 22 formulas of
`verifier_speed.py`, best of 5 each.
"""
import os
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"): os.environ[v] = "1"
import json
import sys
import time
from pathlib import Path
from verifier_speed import FORMULAS  # this script's folder
from alpha_gym import load_panel, load_universe
from alpha_gym.language import parse
from alpha_gym.language.evaluate import evaluate
import alpha_gym.scoring.verifier as V
from alpha_gym.scoring.config import VerifierConfig
D = Path(__file__).resolve().parents[2] / "shared/data/us_equities"
full = load_panel(D / "us_daily_train.csv.gz")
real = V.answer_to_book
def off(*a, **k):
    k["bound"] = False
    return real(*a, **k)
def best(fn):
    ts = []
    for _ in range(5):
        t = time.process_time(); fn(); ts.append(time.process_time() - t)
    return min(ts) * 1000
panels = sys.argv[1].split(",") if len(sys.argv) > 1 else ["us46", "all496"]
for name in panels:
    panel = full.select(load_universe(D / "universe_us46.txt")) if name == "us46" else full
    v = V.Verifier(panel, VerifierConfig(archive_seed=False))
    a = b = ea = eb = 0.0
    for f in FORMULAS:
        n = parse(f)
        V.answer_to_book = off; v.evaluate(f); a += best(lambda: v.evaluate(f))
        V.answer_to_book = real; v.evaluate(f); b += best(lambda: v.evaluate(f))
        ea += best(lambda: evaluate(n, panel)); eb += best(lambda: evaluate(n, panel, bound=True))
    print(json.dumps({"panel": name, "core_ms_without": round(a, 1), "core_ms_with": round(b, 1),
                      "core_increase": f"{b / a - 1:+.1%}", "evaluate_ms": round(ea, 1),
                      "evaluate_with_bounds_ms": round(eb, 1)}), flush=True)
