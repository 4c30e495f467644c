"""Where an evolve run's time goes as it grows, and the same run on another source tree (the tree mutator, us46).

    python benchmarks/evolve_phases.py --budget 4000                                   # phases per 500 calls
    python benchmarks/evolve_phases.py --budget 3000 --baseline /tmp/base --rounds 2   # before/after, alternated
        (/tmp/base: e.g. `git archive e41ab9f~3 | tar -x -C /tmp/base`, the commit before the checkpoint rule)

Each run is `alpha-gym evolve --budget B --seed 42 --workers 1` on the us46 train window, fresh, in a process of
its own (PYTHONPATH = the tree), with the loop's steps (`alpha_gym.search.evolution._Run`: seed_batch,
proposal_batch, score, book, row, checkpoint) timed and summed per --every calls. It prints one line per stretch
and, for each run, its whole wall time (the kept answers at the end included). With --baseline the two trees
alternate for --rounds rounds, so both see the same load, and the script checks that they made the same run:
curve.jsonl (but its seconds), proposals.jsonl and book.json equal. --json keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "us_equities"
STEPS = ("seed_batch", "proposal_batch", "score", "book", "row", "checkpoint")


def worker(budget: int, every: int, out: str, data: Path) -> None:
    """One run in this process: the steps timed, one JSON line per stretch of `every` calls, then the total."""
    from alpha_gym.search import evolution, evolve_arm
    spent = dict.fromkeys(STEPS, 0.0)

    def timed(name, f):
        def g(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
        return g
    for name in STEPS:
        setattr(evolution._Run, name, timed(name, getattr(evolution._Run, name)))
    mark = {"calls": 0, "t": time.perf_counter()}

    def progress(row):
        if row["calls"] // every > mark["calls"] // every or row["calls"] >= budget:
            now = time.perf_counter()
            print(json.dumps({"calls": row["calls"], "admitted": row["admitted"], "wall_s": round(now - mark["t"], 3),
                              **{k: round(v, 3) for k, v in spent.items()}}), flush=True)
            spent.update(dict.fromkeys(STEPS, 0.0))
            mark["t"] = now
        mark["calls"] = row["calls"]
    plain = evolve_arm.evolve
    evolve_arm.evolve = lambda *a, **k: plain(*a, **{**k, "progress": progress})
    from alpha_gym.commands.main import main as cli
    t0 = time.perf_counter()
    code = cli(["evolve", "--budget", str(budget), "--seed", "42", "--workers", "1", "--out", out,
                "--data", str(data / "us_daily_train.csv.gz"), "--universe", str(data / "universe_us46.txt")])
    print(json.dumps({"total_s": round(time.perf_counter() - t0, 3), "exit": code}), flush=True)


def run_tree(tree: Path, budget: int, every: int, out: Path, data: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--budget", str(budget),
                           "--every", str(every), "--out", str(out), "--data", str(data)],
                          env=env, cwd=str(tree), capture_output=True, text=True)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines or lines[-1].get("exit") != 0:
        raise SystemExit(f"the run in {tree} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return {"stretches": lines[:-1], "total_s": lines[-1]["total_s"]}


def same_run(a: Path, b: Path) -> bool:
    def curve(p):
        return [{k: v for k, v in json.loads(x).items() if k != "seconds"}
                for x in (p / "curve.jsonl").read_text().splitlines()]
    return (curve(a) == curve(b) and (a / "proposals.jsonl").read_bytes() == (b / "proposals.jsonl").read_bytes()
            and (a / "book.json").read_bytes() == (b / "book.json").read_bytes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=4000)
    ap.add_argument("--every", type=int, default=500, help="calls a stretch (one printed line)")
    ap.add_argument("--baseline", type=Path, help="a source tree to run alternately with this one")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--data", type=Path, default=DATA, help="the folder of us_daily_train.csv.gz")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not 100 <= args.budget <= 100_000 or not 8 <= args.every <= args.budget or not 1 <= args.rounds <= 10:
        ap.error("--budget in [100, 100000], --every in [8, budget], --rounds in [1, 10]")
    if args.worker:
        return worker(args.budget, args.every, args.out, args.data)
    if not (args.data / "us_daily_train.csv.gz").exists():
        ap.error(f"{args.data} holds no us_daily_train.csv.gz (give --data)")
    trees = {"new": Path(__file__).resolve().parents[1]}
    if args.baseline:
        trees["baseline"] = args.baseline.resolve()
    runs = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, tree in (trees.items() if r % 2 == 0 else reversed(trees.items())):
                out = Path(tmp) / f"{name}-{r}"
                got = run_tree(tree, args.budget, args.every, out, args.data)
                runs[name].append(got)
                for s in got["stretches"]:
                    print(f"{name:8s} round {r}  calls {s['calls']:6d}  admitted {s['admitted']:5d}  wall "
                          f"{s['wall_s']:6.1f} s  " + "  ".join(f"{k} {s[k]:5.1f}" for k in STEPS), flush=True)
                print(f"{name:8s} round {r}  whole command {got['total_s']:.1f} s", flush=True)
        result = {"budget": args.budget, "every": args.every, "runs": runs,
                  "median_total_s": {n: statistics.median(g["total_s"] for g in v) for n, v in runs.items()}}
        if args.baseline:
            result["same_run"] = all(same_run(Path(tmp) / f"new-{r}", Path(tmp) / f"baseline-{r}")
                                     for r in range(args.rounds))
            m = result["median_total_s"]
            result["new_over_baseline"] = m["new"] / m["baseline"]
            print(f"whole command, median: new {m['new']:.1f} s, baseline {m['baseline']:.1f} s "
                  f"({result['new_over_baseline']:.2f}x); the same run: {result['same_run']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
