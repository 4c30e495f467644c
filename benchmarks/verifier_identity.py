"""Bit-identity of scores between two source trees (issue 13): every reward, channel and diagnostic.

    python benchmarks/verifier_identity.py --baseline /tmp/base [--panels us46,all] [--random 120]

`--baseline` is a source tree of the code to compare with (e.g. `git archive <commit> | tar -x -C
/tmp/base`). Each tree scores the same answers in its own process (groups of 12 with every channel,
the Alpha101-seeded archive included, then single answers, then each book's net P&L bytes); the JSON
records are compared exactly (floats written with repr). Prints the differences, exits 1 if any.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/us_equities"


def answers(n_random: int) -> list[str]:
    import numpy as np

    from alpha_gym.language.sample import random_formula
    from alpha_gym.scoring.seeds import SEED_FORMULAS
    from verifier_speed import FORMULAS  # this script's folder
    rng = np.random.default_rng(13)
    forms = list(FORMULAS) + list(SEED_FORMULAS) + [random_formula(rng, 5) for _ in range(n_random)]
    out = [f"<alpha>{f}</alpha>" for f in forms]
    # invalid answers too: every kind of verdict must stay the same
    out += ["no tag", "<alpha>rank(close -)</alpha>", "<alpha>ts_mean(delay(close, 200), 100)</alpha>",
            "<think>why</think><alpha>rank(close)</alpha>", "<alpha>close - close</alpha>"]
    return out


def worker(panel_name: str, n_random: int) -> None:
    """Score every answer on one panel; print one JSON line per record."""
    from alpha_gym import Verifier, load_panel, load_universe
    full = load_panel(DATA / "us_daily_train.csv.gz")
    panel = full if panel_name == "all" else full.select(load_universe(DATA / f"universe_{panel_name}.txt"))
    v = Verifier(panel)
    items = answers(n_random)
    for k in range(0, len(items), 12):
        group = v.score_group(items[k:k + 12])
        for a, s, ev in zip(items[k:k + 12], group.scores, group.evaluated):
            rec = s.to_dict()
            rec["answer"] = a
            rec["net_sha"] = hashlib.sha256(ev.net.tobytes()).hexdigest() if ev is not None else None
            print(json.dumps(rec, sort_keys=True))
    for a in items[:30]:
        print(json.dumps({"single": a, **v.score(a).to_dict()}, sort_keys=True))


def run_tree(tree: Path, panel: str, n_random: int) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", panel, "--random", str(n_random)],
                         env=env, cwd=str(tree), capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _without_state(lines: list[str]) -> list[str]:
    """The records with their channel-state messages removed (re-serialised the same way: repr floats)."""
    out = []
    for line in lines:
        rec = json.loads(line)
        rec.get("diagnostics", {}).pop("channel_state", None)
        out.append(json.dumps(rec, sort_keys=True))
    return out


def max_change(diffs) -> float:
    """The largest absolute difference of a reward or a channel value among differing records."""
    worst = 0.0
    for a, b in diffs:
        ja, jb = json.loads(a), json.loads(b)
        pairs = [(ja.get("reward"), jb.get("reward"))]
        pairs += [(ja["channels"].get(k), jb["channels"].get(k)) for k in ja.get("channels", {})]
        for x, y in pairs:
            if isinstance(x, float) and isinstance(y, float):
                worst = max(worst, abs(x - y))
    return worst


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--panels", default="us46,all")
    ap.add_argument("--random", type=int, default=120)
    ap.add_argument("--worker")
    ap.add_argument("--ignore-state", action="store_true",
                    help="compare without diagnostics.channel_state (the channels' messages, not numbers)")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.random)
        return 0
    bad = 0
    for panel in args.panels.split(","):
        new, old = run_tree(ROOT, panel, args.random), run_tree(args.baseline, panel, args.random)
        if args.ignore_state:
            new, old = _without_state(new), _without_state(old)
        diffs = [(a, b) for a, b in zip(old, new) if a != b]
        bad += len(diffs) + abs(len(old) - len(new))
        print(f"{panel}: {len(new)} records, {len(diffs)} differ; largest change of a reward or channel: "
              f"{max_change(diffs):.3g}")
        for a, b in diffs[:5]:
            ja, jb = json.loads(a), json.loads(b)
            keys = sorted(k for k in set(ja) | set(jb) if ja.get(k) != jb.get(k))
            print("  ", ja.get("answer") or ja.get("single"), keys)
            for k in keys[:3]:
                print("     old", k, str(ja.get(k))[:300])
                print("     new", k, str(jb.get(k))[:300])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
