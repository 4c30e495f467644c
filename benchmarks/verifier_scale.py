"""Verifier cost at scale (issue 13): time and peak memory per formula and per group, worst cases.

    python benchmarks/verifier_scale.py [--panels us46,us100,all,all_x2] [--baseline /tmp/base] [--repeat 3]

Single thread (BLAS/OpenMP pinned to 1). Panels: the real us46 / us100 / all-496 universes
(2012-06-29..2025-08-20, 3,304 sessions) and `all_x2`, all 496 stocks with the panel repeated in
time (6,608 sessions), so growth with stocks and with days shows separately.

Per panel:
- core score (parse + evaluate + book + costs + CPCV, `Verifier.evaluate`) of the 22 formulas
  of `verifier_speed.py`: median and max ms, best of `--repeat`;
- a group of 12 answers with every channel but R3 (`score_group`), seconds;
- peak memory (tracemalloc: bytes allocated above the panel) of each formula, and of the worst
  formulas constructed within the limits (largest memory, largest estimated cost), alone and
  as a group of 12;
- the slowest valid formula we can construct against the median (target <= 10x);
- seeding the archive: computed (cold) and read back from the disk cache (warm).

`--baseline PATH` also runs the speed part with the code of another source tree (for example the
commit before issue 13: `git archive e6678a2 | tar -x -C /tmp/base`) in a subprocess, interleaved
per panel, so both sides see the same machine load.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/us_equities"
GIB = float(1 << 30)
FIELDS = ("close", "open", "high", "low", "volume", "vwap")


def balanced(leaves: list[str], ops: list[str]) -> str:
    """A balanced expression over `leaves`, one operator per level (depth grows with log2 of the leaves)."""
    level = 0
    while len(leaves) > 1:
        op = ops[level % len(ops)]
        nxt = [f"({leaves[i]} {op} {leaves[i + 1]})" for i in range(0, len(leaves) - 1, 2)]
        if len(leaves) % 2:
            nxt.append(leaves[-1])
        leaves, level = nxt, level + 1
    return leaves[0]


def largest_valid(make, n_max: int = 200) -> str:
    """make(n) for the largest n whose formula is still valid (within every limit, cost included)."""
    from alpha_gym.language import FormulaError, parse
    best = None
    for n in range(1, n_max):
        try:
            parse(make(n))
        except FormulaError:
            if best is not None:
                return best
            continue
        best = make(n)
    return best


def worst_formulas() -> dict[str, str]:
    """Formulas built to be as slow or as memory-hungry as the limits allow."""
    f = FIELDS
    return {
        # memory: as many distinct panel-sized intermediates as tokens and cost allow
        "adv sum-products": largest_valid(lambda n: balanced([f"adv{2 + i}" for i in range(n)], ["*", "+"])),
        "delays sum-products": largest_valid(
            lambda n: balanced([f"delay({f[i % 6]}, {1 + i // 6})" for i in range(n)], ["*", "+"])),
        "ranks of delays": largest_valid(
            lambda n: balanced([f"rank(delay({f[i % 6]}, {1 + i // 6}))" for i in range(n)], ["+", "*"])),
        # time: the most expensive kernels at the longest windows, up to the cost limit
        "ts_rank 252..": largest_valid(lambda n: balanced([f"ts_rank({f[i % 6]}, {252 - 40 * i})" for i in range(n)],
                                                          ["+"]), 7),
        "ts_kurt/corr 252": largest_valid(lambda n: balanced(
            [f"ts_kurt({f[i % 6]}, {252 - i})" if i % 2 else f"ts_corr({f[i % 6]}, {f[(i + 1) % 6]}, {252 - i})"
             for i in range(n)], ["+", "*"])),
        "ts_std/decay 252": largest_valid(lambda n: balanced(
            [f"ts_decay_linear(ts_std({f[i % 6]}, {252 - i // 6 - 120}), 120)" for i in range(n)], ["+", "-"])),
        "nested ts_rank": largest_valid(lambda n: balanced(
            [f"ts_rank(ts_corr(rank({f[i % 6]}), rank(volume), {10 + i}), {120 + i})" for i in range(n)], ["+"])),
        "ts_argmax/slope sums": largest_valid(lambda n: balanced(
            [f"ts_argmax({f[i % 6]}, {20 + i})" if i % 2 else f"ts_slope({f[i % 6]}, {20 + i})" for i in range(n)],
            ["+", "-"])),
        "ts_mean/ema sums": largest_valid(lambda n: balanced(
            [f"ts_mean({f[i % 6]}, {5 + i})" if i % 2 else f"ts_ema({f[i % 6]}, {5 + i})" for i in range(n)],
            ["+", "*"])),
        "general powers": largest_valid(lambda n: balanced(
            [f"({f[i % 6]} ^ {f[(i + 1 + i // 6) % 6]})" for i in range(n)], ["+", "*"])),
        "elementwise chain": largest_valid(lambda n: balanced(
            [f"({f[i % 6]} > {f[(i + 1) % 6]} ? {f[(i + 2) % 6]} : {f[(i + 3) % 6]})" for i in range(n)],
            ["*", "-", "/", "+"])),
    }


def load_panels(names: list[str]):
    from alpha_gym.market import Panel, load_panel, load_universe
    full = load_panel(DATA / "us_daily_train.csv.gz")
    out = {}
    for name in names:
        if name == "all":
            out[name] = full
        elif name == "all_x2":  # the panel twice in a row, the copy's dates shifted past the original's
            import numpy as np
            shift = (full.dates[-1] - full.dates[0]) + np.timedelta64(1, "D")
            out[name] = Panel({k: np.vstack([v, v]) for k, v in full.data.items()},
                              np.concatenate([full.dates, full.dates + shift]), full.tickers, source="all_x2")
        else:
            out[name] = full.select(load_universe(DATA / f"universe_{name}.txt"))
    return out


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _peak(fn) -> int:
    """Bytes allocated above the starting level at the peak of fn() (numpy reports to tracemalloc)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def speed(panel, repeat: int) -> dict:
    """The side-by-side part: core score of the 22 formulas and a group of 12, same on both trees."""
    from verifier_speed import FORMULAS  # this script's folder

    from alpha_gym import Verifier
    v = Verifier(panel)
    v.archive, v.factors  # build lazy state outside the timings
    core = []
    for f in FORMULAS:
        v.evaluate(f)
        core.append(_best(lambda: v.evaluate(f), repeat) * 1000)
    group = [f"<alpha>{f}</alpha>" for f in FORMULAS[:12]]
    group_s = _best(lambda: v.score_group(group), repeat)
    peaks = [_peak(lambda: v.evaluate(f)) / 2**20 for f in FORMULAS]
    return {"core_ms": core, "group_s": group_s, "peak_mib": peaks}


def summary(runs: list[dict]) -> dict:
    """Best of several runs per formula (each run interleaved with the other tree's), then the median."""
    core = [min(ms) for ms in zip(*(r["core_ms"] for r in runs))]
    return {"median_ms": statistics.median(core), "max_ms": max(core), "group_s": min(r["group_s"] for r in runs),
            "median_peak_mib": statistics.median(runs[0]["peak_mib"]), "max_peak_mib": max(runs[0]["peak_mib"])}


def bounds(panel, repeat: int) -> dict:
    """Worst cases within the limits: memory and time, alone and as a group (this tree only)."""
    from alpha_gym import Verifier
    from alpha_gym.language import cost, parse
    v = Verifier(panel)
    v.archive, v.factors
    rows = {}
    for name, f in worst_formulas().items():
        v.evaluate(f)
        rows[name] = {"cost": cost(parse(f)), "ms": _best(lambda: v.evaluate(f), repeat) * 1000,
                      "peak_gib": _peak(lambda: v.evaluate(f)) / GIB}
    worst_mem = max(rows, key=lambda k: rows[k]["peak_gib"])
    group = [f"<alpha>{worst_formulas()[worst_mem]}</alpha>"] * 6 + \
            [f"<alpha>{f}</alpha>" for k, f in worst_formulas().items() if k != worst_mem][:6]
    return {"worst": rows, "worst_mem": worst_mem,
            "group_peak_gib": _peak(lambda: v.score_group(group)) / GIB,
            "group_s": _best(lambda: v.score_group(group), 1)}


def seeding(panel) -> dict:
    """Seeding the archive in a fresh cache folder: computed, then read back (as a new process would)."""
    from alpha_gym import Verifier
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["ALPHA_GYM_CACHE"] = tmp
        t = time.perf_counter()
        n = len(Verifier(panel).archive)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        Verifier(panel).archive
        warm = time.perf_counter() - t
        del os.environ["ALPHA_GYM_CACHE"]
    return {"seeds": n, "cold_s": cold, "warm_s": warm}


def extraction() -> dict:
    import re

    from alpha_gym.language import AnswerError, extract
    text = "<alpha>" * 4681
    old = re.compile(r"<alpha>(.*?)</alpha>", re.DOTALL | re.IGNORECASE)

    def new():
        try:
            extract(text)
        except AnswerError:
            pass
    return {"chars": len(text), "regex_s": _best(lambda: list(old.finditer(text)), 1), "extract_s": _best(new, 3)}


def worker(panel_name: str, repeat: int) -> None:
    panel = load_panels([panel_name])[panel_name]
    print(json.dumps(speed(panel, repeat)))


def tree_speed(tree: Path, panel: str, repeat: int) -> dict:
    """`speed` in a fresh process running the code of `tree` (its own seed cache, off)."""
    env = dict(os.environ, PYTHONPATH=str(tree), ALPHA_GYM_CACHE="off")
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", panel, "--repeat", str(repeat)],
                         env=env, cwd=str(tree), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--panels", default="us46,us100,all,all_x2")
    ap.add_argument("--baseline", type=Path, help="a source tree to time side by side (speed part only)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two trees (with --baseline)")
    ap.add_argument("--no-bounds", action="store_true", help="skip the worst-case part")
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.repeat)
        return
    import platform
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, one thread")
    print(json.dumps({"extraction": extraction()}))
    for name, panel in load_panels(args.panels.split(",")).items():
        row = {"panel": name, "shape": list(panel.shape)}
        if args.baseline:  # alternate the two trees, so both see the same machine load
            runs = {"baseline": [], "new": []}
            for _ in range(args.rounds):
                runs["baseline"].append(tree_speed(args.baseline, name, args.repeat))
                runs["new"].append(tree_speed(ROOT, name, args.repeat))
            row.update({k: summary(v) for k, v in runs.items()})
            row["speedup"] = row["baseline"]["median_ms"] / row["new"]["median_ms"]
        else:
            row["new"] = summary([speed(panel, args.repeat)])
        if not args.no_bounds:
            row["bounds"] = bounds(panel, args.repeat)
            row["seeding"] = seeding(panel)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
