"""Scoring on one worker against two (issue 42.4): best-of-N groups, the search, score-batch and the service.

    python benchmarks/two_cores.py [--data ../shared/data/us_equities] [--universe all] [--rounds 3]
                                   [--formulas 96] [--budget 96] [--only groups,search,batch,serve]

Loads the panel once (the real one when present: 496 stocks with `--universe all`, else the synthetic
market), warms the verifier's archive and starts the scoring pool's two workers (their start-up is
reported apart), then times each workload with 1 worker (this process) and 2 (`alpha_gym.pool`), in
turn, `--rounds` times: A B A B ..., so a machine whose load drifts slows both alike. Reports each
workload's median seconds and the median of the per-round ratios (1 worker / 2 workers), and checks that
the two give the same results, bit for bit and in the same order:

    groups  best-of-N's scoring: `--formulas` answers as groups of 8, each scored, then offered to the archive
    search  the evolution engine's GP setting (`GP_SEARCH`, the tree mutator) for `--budget` calls, Alpha101 seeds
    evolve  `alpha_gym.search.evolution.evolve` (tree + random mutators) for `--budget` calls, groups of 8
    batch   `score_batch` of `--formulas` formulas into a fresh output (the bytes compared)
    serve   the scoring service (`--workers 1` / `2`, 4 request threads): `--formulas` single-answer requests
            from 4 client threads (the responses compared)

Each worker runs one BLAS/OpenMP thread; the 1-worker side is pinned to one BLAS thread as well.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _formulas(n: int) -> list[str]:
    """`n` formulas: the Alpha101 set first (the search's seeds, real signals), then random ones (seed 0)."""
    import numpy as np
    from alpha_gym.alpha101 import formulas
    from alpha_gym.language.sample import random_formula
    out = list(formulas(industry_free=True).values())[: n // 2]
    rng = np.random.default_rng(0)
    while len(out) < n:
        out.append(random_formula(rng, depth=int(rng.integers(2, 5))))
    return out


def _split(verifier, formulas) -> tuple[float, float]:
    """Seconds one process spends preparing the answers (what workers can share) and scoring their channels."""
    from alpha_gym.pool import prepare, score_prepared
    from alpha_gym.threads import blas_threads
    items = [("answer", f"<alpha>{f}</alpha>") for f in formulas]
    with blas_threads(1):
        t0 = time.perf_counter()
        prepared = prepare(verifier, items, workers=1)
        t1 = time.perf_counter()
        for k in range(0, len(prepared), 8):
            score_prepared(verifier, prepared[k:k + 8])
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def run_groups(verifier, formulas, workers):
    from alpha_gym.pool import score_group
    v = verifier.fork()
    answers = [f"<alpha>{f}</alpha>" for f in formulas]
    out = []
    for k in range(0, len(answers), 8):  # as trainers/compare/arms/best_of_n.py: score a group, offer it to the archive
        group = score_group(v, answers[k:k + 8], workers=workers)
        v.update_archive(group)
        out.append([s.to_dict() for s in group.scores])
    return json.dumps(out, sort_keys=True, default=str)


def run_search(verifier, budget, workers):
    """The comparison's `search` arm: the evolution engine with the GP database and the tree mutator, Alpha101 seeds."""
    from alpha_gym.search.database import GP_SEARCH
    from alpha_gym.search.evolution import TreeMutator, evolve
    result = evolve(verifier.fork(), TreeMutator(), GP_SEARCH, budget=budget, seed=0, progress=None, say=None,
                    workers=workers)
    return json.dumps(result.database.to_dict(), sort_keys=True)


def run_evolve(verifier, budget, workers):
    """`alpha-gym evolve`'s loop (tree and random mutators, the bandit sharing) for `budget` calls, in groups of 8."""
    from alpha_gym.search.evolution import TreeMutator, evolve
    from alpha_gym.search.mutators import RandomMutator
    result = evolve(verifier.fork(), [TreeMutator(), RandomMutator()], budget=budget, seed=0, progress=None,
                    workers=workers)
    return json.dumps([[r["calls"], r["best_reward"], r["programs"]] for r in result.history], sort_keys=True)


def run_batch(panel, formulas, workers, tmp: Path):
    from alpha_gym.batch.runner import score_batch
    src, out = tmp / "pool.txt", tmp / f"batch-{workers}.jsonl"
    src.write_text("\n".join(formulas) + "\n")
    for p in (out, Path(str(out) + ".meta.json")):
        p.unlink(missing_ok=True)
    score_batch(panel, src, out, workers=workers, progress=False, chunk=16)
    return out.read_bytes()


def run_serve(verifier, formulas, workers):
    from alpha_gym.service.client import ScoringClient
    from alpha_gym.service.server import BackgroundServer
    answers = [f"<alpha>{f}</alpha>" for f in formulas]
    results: dict[int, dict] = {}
    with BackgroundServer(lambda: verifier, workers=workers, concurrency=4) as url:
        client = ScoringClient(url)
        client.wait_ready(300)
        todo = list(range(len(answers)))
        lock = threading.Lock()

        def send():
            while True:
                with lock:
                    if not todo:
                        return
                    k = todo.pop()
                results[k] = client.score(answers[k])

        t0 = time.perf_counter()
        threads = [threading.Thread(target=send) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
    return json.dumps([results[k] for k in sorted(results)], sort_keys=True), seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "us_equities"))
    ap.add_argument("--universe", default="all", help="us46, us100 or all (496 stocks)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--formulas", type=int, default=96)
    ap.add_argument("--budget", type=int, default=96)
    ap.add_argument("--only", default="groups,search,evolve,batch,serve")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    from alpha_gym.market import load_panel, synthetic_panel
    from alpha_gym.pool import close_scoring_pool, scoring_pool
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.threads import blas_threads

    data = Path(args.data) / "us_daily_train.csv.gz"
    if data.exists():
        panel = load_panel(data, universe=Path(args.data) / f"universe_{args.universe}.txt")
        label = f"{args.universe} (real, {panel.n_stocks} stocks x {panel.n_days} sessions)"
    else:
        panel, label = synthetic_panel(), "synthetic 46"
    verifier = Verifier(panel)
    t0 = time.perf_counter()
    _ = verifier.archive, verifier.factors
    archive_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scoring_pool(verifier, 2)  # started before the clock: its start-up is reported apart
    start_s = time.perf_counter() - t0
    formulas = _formulas(args.formulas)
    split = _split(verifier, formulas)
    tmp = Path(tempfile.mkdtemp(prefix="two_cores_"))
    workloads = {"groups": lambda w: run_groups(verifier, formulas, w),
                 "search": lambda w: run_search(verifier, args.budget, w),
                 "evolve": lambda w: run_evolve(verifier, args.budget, w),
                 "batch": lambda w: run_batch(panel, formulas, w, tmp),
                 "serve": lambda w: run_serve(verifier, formulas, w)}
    chosen = [name for name in args.only.split(",") if name in workloads]
    times = {(n, w): [] for n in chosen for w in (1, 2)}
    cpus = {(n, w): [] for n in chosen for w in (1, 2)}
    outputs: dict = {}
    pool = scoring_pool(verifier, 2)
    for r in range(args.rounds):
        for name in chosen:
            for w in (1, 2):
                cpu0 = sum(os.times()[:2]) + pool.cpu_seconds()
                t0 = time.perf_counter()
                with blas_threads(1):
                    out = workloads[name](w)
                seconds = time.perf_counter() - t0
                cpu = sum(os.times()[:2]) + pool.cpu_seconds() - cpu0  # this process and the two workers
                if isinstance(out, tuple):  # serve: the requests' own time, not the server's start
                    out, seconds = out
                times[(name, w)].append(seconds)
                cpus[(name, w)].append(cpu)
                same = outputs.setdefault((name, r), out) == out
                print(f"round {r + 1} {name} workers={w}: {seconds:.2f} s wall, {cpu:.2f} s CPU"
                      f"{'' if same else ' DIFFERENT'}", file=sys.stderr, flush=True)
                if not same:
                    outputs[("different", name)] = True
    close_scoring_pool()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}; panel {label}; "
          f"{args.formulas} formulas, search budget {args.budget}; load average after {load}")
    print(f"archive and factors {archive_s:.1f} s; two workers started in {start_s:.2f} s; of one process's "
          f"scoring of the {len(formulas)} answers as groups of 8, preparing took {split[0]:.2f} s (what the workers "
          f"share) and the channels {split[1]:.2f} s (scored in the calling process)")
    print("| workload | 1 worker: median s (CPU s) | 2 workers: median s (CPU s) | speed-up (median of per-round "
          "ratios) | cores used by 2 workers (CPU / wall) | identical |")
    print("|---|---:|---:|---:|---:|---|")
    rows = []
    for name in chosen:
        one, two = times[(name, 1)], times[(name, 2)]
        ratio = statistics.median(a / b for a, b in zip(one, two))
        used = statistics.median(c / t for c, t in zip(cpus[(name, 2)], two))
        same = ("different", name) not in outputs
        rows.append({"workload": name, "one": one, "two": two, "cpu_one": cpus[(name, 1)], "cpu_two": cpus[(name, 2)],
                     "speedup": ratio, "cores_used": used, "identical": same})
        print(f"| {name} | {statistics.median(one):.2f} ({statistics.median(cpus[(name, 1)]):.1f}) | "
              f"{statistics.median(two):.2f} ({statistics.median(cpus[(name, 2)]):.1f}) | {ratio:.2f}x | {used:.2f} | "
              f"{'yes' if same else 'NO'} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"panel": label, "start_s": start_s, "rows": rows, "load": load},
                                              indent=1))
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
