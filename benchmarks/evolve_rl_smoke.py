"""A small smoke run of RL on the mutation operator (issue 40.3): the frozen start model vs the trained one.

    python benchmarks/evolve_rl_smoke.py frozen --budget 64 --tokens 48 --out runs/evolve-rl-smoke
    python benchmarks/evolve_rl_smoke.py trained --budget 64 --tokens 48 --out runs/evolve-rl-smoke

One arm a process (run the two side by side, one torch thread each). Both evolve on the default synthetic
market from the same 4 seed formulas with the same seed, group size and token bound: "frozen" is
`trainers.mutator.ModelMutator` (one answer per parent set), "trained" is `trainers.evolve_rl.TrainedMutator`
(cispo, 4 answers per parent set, an update after every group). Prints one JSON line: best train reward,
share of the model's answers that parse, book members, proposals/s and verifier calls/s. Not the 40.5
comparison: a smoke run that shows the loop runs and what it costs on a CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from alpha_gym.market import synthetic_panel
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.database import DatabaseConfig
from alpha_gym.search.evolution import PROPOSALS_LOG, evolve
from trainers.models import load_base

SEEDS = ["rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))",
         "-1 * ts_corr(rank(open), rank(volume), 10)", "rank(-returns)"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("arm", choices=("frozen", "trained"))
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/evolve-rl-smoke")
    a = ap.parse_args()
    torch.set_num_threads(1)
    verifier = Verifier(synthetic_panel())
    if a.arm == "frozen":
        from trainers.mutator import ModelMutator
        m = ModelMutator(loaded=load_base(None), limits=verifier.config.limits, max_new_tokens=a.tokens)
    else:
        from trainers.evolve_rl import TrainedMutator
        m = TrainedMutator(loaded=load_base(None), limits=verifier.config.limits, recipe="cispo", answers_per_set=4,
                           train_every=1, max_new_tokens=a.tokens, name="model")
    out = Path(a.out) / a.arm
    t0 = time.perf_counter()
    r = evolve(verifier, m, DatabaseConfig(n_islands=1), a.budget, seed=a.seed, seed_formulas=SEEDS,
               group_size=a.group_size, max_rounds=1, out_dir=out, progress=None)
    wall = time.perf_counter() - t0
    log = [json.loads(x) for x in (out / PROPOSALS_LOG).read_text().splitlines()]
    asked = [x for x in log if x["origin"] == "model"]
    parsed = [x for x in asked if not str(x.get("reason") or "").startswith("unparseable")]
    updates = [row["updates"]["model"] for row in r.history if row.get("updates")]
    print(json.dumps({"arm": a.arm, "budget": a.budget, "calls": r.calls, "tokens": a.tokens,
                      "best_reward": r.best.reward if r.best else None, "best": r.best.text if r.best else None,
                      "model_answers": len(asked), "parseable_share": len(parsed) / max(1, len(asked)),
                      "model_scored": sum(x["status"] == "scored" for x in asked), "book_members": r.book.n,
                      "proposals_per_s": len(asked) / wall, "calls_per_s": r.calls / wall, "seconds": wall,
                      "updates": len(updates),
                      "nonzero_adv_mean": (sum(u["nonzero_adv"] for u in updates) / len(updates)) if updates else None}))


if __name__ == "__main__":
    main()
