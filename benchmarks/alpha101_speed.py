"""Speed of the 101 Formulaic Alphas: this engine against py-alpha-lib (Rust kernels), alpha101v for orientation.

    python benchmarks/alpha101_speed.py --alphalib-python /tmp/alphalib312/bin/python \\
        [--data ../shared/data/us_equities] [--repeat 2] [--panels us46,all] [--no-alpha101v]

The common set is every alpha of the paper that needs no industry labels or market cap
(82) and that py-alpha-lib also computes. Each engine evaluates the whole set on us46
(46 x 3,304) and on all 496 stocks, once with one thread and once with default threads;
the best of `--repeat` runs is reported as total seconds and formulas per second, with
the ratio ours / theirs (below 1.0: this engine is faster).

- This engine: parsed trees evaluated by `alpha_gym.language.evaluate` (one memo per
  alpha: shared subexpressions are computed once), alphas one after another (BLAS/OpenMP
  pinned to 1 thread before numpy loads). Default threads: inside
  `alpha_gym.language.ops.kernel_threads(os.cpu_count())`, each heavy kernel splits its
  column chunks or row segments over that many threads (numpy releases the GIL in its
  loops; the values are bit-identical to one thread's).
- py-alpha-lib (PyPI `py-alpha-lib`, import `alpha`; 0.3.1 does not import on Python 3.11):
  runs in a subprocess of the Python given by `--alphalib-python` (e.g. a 3.12 venv:
  `python3.12 -m venv /tmp/alphalib312 && /tmp/alphalib312/bin/pip install py-alpha-lib pandas numpy`).
  Formulas are translated by `alpha.lang.to_python(..., as_function=True)` and called on
  `alpha.ExecContext(df)`; one thread = `RAYON_NUM_THREADS=1`, default = rayon's default.
  Its conventions differ (rank scale, argmax direction, ddof, whole-array scale, adv from
  share volume) and some of its results are wrong: it is the speed anchor only.
  Without `--alphalib-python` (or when that Python cannot import `alpha`) its side is skipped.
- alpha101v (pandas; the correctness oracle of tests/test_alpha101.py): its `run_factor_raw`
  on the same set, one thread, one run, for orientation (`--no-alpha101v` skips it).

Data loading, parsing, translation and the construction of each engine's context are
outside the timings.
"""

from __future__ import annotations

import os

# one-thread runs must not fan out in BLAS / OpenMP; set before numpy loads
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: The py-alpha-lib side, run by the other Python: argv = data.csv.gz, universe file or "",
#: formulas.json, repeats, mode ("1" or "default"). Prints one JSON line.
_ALPHALIB_RUNNER = r'''
import json, os, sys, time
mode = sys.argv[5]
if mode == "1":
    os.environ["RAYON_NUM_THREADS"] = "1"
else:
    os.environ.pop("RAYON_NUM_THREADS", None)
import numpy as np, pandas as pd
import alpha
from alpha.lang import to_python
data, universe, formulas, repeats = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), int(sys.argv[4])
df = pd.read_csv(data)
if universe:
    keep = [l.strip() for l in open(universe) if l.strip() and not l.lstrip().startswith("#")]
    df = df[df["ticker"].isin(keep)]
df = df.rename(columns={"ticker": "securityid", "date": "tradetime", "volume": "vol"})
df = df.sort_values(["securityid", "tradetime"]).reset_index(drop=True)
df["vwap"] = (df["high"] + df["low"] + df["close"]) / 3.0   # as alpha_gym's panel without a vwap column
df["vol"] = df["vol"].astype(float)
ctx = alpha.ExecContext(df)
fns, failed = {}, {}
for n, text in formulas.items():
    ns = {"np": np}
    try:
        exec(to_python(f"a{n}", text, as_function=True, name_convertor=str.upper), ns)
        np.asarray(ns[f"a{n}"](ctx), dtype=float)  # warm-up and probe
        fns[n] = ns[f"a{n}"]
    except Exception as exc:  # its parser or kernels may reject a formula: report, do not time it
        failed[n] = f"{type(exc).__name__}: {exc}"[:200]
best, each = None, {}
for _ in range(repeats):
    t = time.perf_counter()
    for n, fn in fns.items():
        t1 = time.perf_counter()
        fn(ctx)
        each[n] = min(each.get(n, 1e30), time.perf_counter() - t1)
    dt = time.perf_counter() - t
    best = dt if best is None else min(best, dt)
print(json.dumps({"ok": sorted(fns, key=int), "failed": failed, "seconds": best, "each": each,
                  "version": getattr(alpha, "__version__", None), "stocks": int(df["securityid"].nunique()),
                  "days": int(df["tradetime"].nunique())}))
'''


def _alphalib(python: str, data: Path, universe: Path | None, formulas: dict[int, str], repeats: int,
              mode: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        fpath = Path(tmp) / "formulas.json"
        fpath.write_text(json.dumps({str(k): v for k, v in formulas.items()}))
        env = {k: v for k, v in os.environ.items() if k != "RAYON_NUM_THREADS"}
        env.pop("PYTHONPATH", None)
        proc = subprocess.run([python, "-c", _ALPHALIB_RUNNER, str(data), str(universe or ""), str(fpath),
                               str(repeats), mode], capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"py-alpha-lib run failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _alphalib_usable(python: str | None) -> str | None:
    """Why the py-alpha-lib side cannot run, or None when it can."""
    if not python:
        return "no --alphalib-python given"
    if not Path(python).exists():
        return f"{python} does not exist"
    probe = subprocess.run([python, "-c", "import alpha, alpha.lang, pandas, numpy"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{python} cannot import py-alpha-lib: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def _ours(panel, nodes: dict, repeats: int, threads: int, each: dict | None = None) -> float:
    """Best total seconds of `repeats` runs; with `each` (one thread only), each alpha's best seconds go into it."""
    from alpha_gym.language.evaluate import evaluate
    from alpha_gym.language.ops import kernel_threads

    def one(node):
        evaluate(node, panel)  # a fresh memo per alpha: its shared subexpressions are computed once

    best = None
    for _ in range(repeats):
        t = time.perf_counter()
        with kernel_threads(threads):      # one thread: no pool; more: each heavy kernel splits its parts
            for n, node in nodes.items():
                t1 = time.perf_counter()
                one(node)
                if each is not None:
                    each[n] = min(each.get(n, 1e30), time.perf_counter() - t1)
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best


def _alpha101v(panel, numbers) -> float | None:
    try:
        import numpy as np
        import pandas as pd
        from alpha101v.operators import research_mode
        from alpha101v.registry import run_factor_raw
    except Exception as exc:  # optional
        print(f"alpha101v not available ({exc}); skipped")
        return None
    idx = pd.DatetimeIndex(panel.dates.astype("datetime64[ns]"))
    cols = list(panel.tickers)

    def frame(name):
        return pd.DataFrame(np.array(panel.field(name)), index=idx, columns=cols)

    fields = {"close": frame("close"), "Open": frame("open"), "high": frame("high"), "low": frame("low"),
              "volume": frame("volume"), "vwap": frame("vwap"), "returns": frame("returns"),
              "amount": frame("dollar_volume")}
    t = time.perf_counter()
    with research_mode(decay_dense=True):
        for n in numbers:
            run_factor_raw(f"alpha{n}", fields)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/us_equities")
    ap.add_argument("--alphalib-python", default=os.environ.get("ALPHALIB_PYTHON"),
                    help="a Python (3.12+) with py-alpha-lib, pandas and numpy installed")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the best is reported")
    ap.add_argument("--panels", default="us46,all", help="comma list of us46, all")
    ap.add_argument("--no-alpha101v", action="store_true", help="skip alpha101v's orientation timing")
    ap.add_argument("--per-alpha", type=Path, help="write each alpha's one-thread seconds (both engines) to this JSON "
                                                    "and print the slowest 15 per panel")
    ap.add_argument("--threads", default="1,default", help="which runs: 1, default or both (default both)")
    args = ap.parse_args()
    modes = [m for m in args.threads.split(",") if m]
    if not modes or any(m not in ("1", "default") for m in modes):
        sys.exit(f"--threads takes 1, default or 1,default, got {args.threads!r}")

    from alpha_gym import load_panel, load_universe
    from alpha_gym.alpha101 import formulas, parse_alpha

    csv = args.data / "us_daily_train.csv.gz"
    if not csv.exists():
        sys.exit(f"real data not found at {csv} (use --data)")
    full = load_panel(csv)
    panels = {}
    for name in args.panels.split(","):
        if name == "us46":
            uni = args.data / "universe_us46.txt"
            panels[name] = (full.select(load_universe(uni)), uni)
        elif name == "all":
            panels[name] = (full, None)
        else:
            sys.exit(f"unknown panel {name!r}")
    paper = formulas(industry_free=True)
    threads = os.cpu_count() or 1

    why_not = _alphalib_usable(args.alphalib_python)
    if why_not:
        print(f"py-alpha-lib side SKIPPED: {why_not}.\n  To include it: python3.12 -m venv /tmp/alphalib312 && "
              "/tmp/alphalib312/bin/pip install py-alpha-lib pandas numpy, then pass "
              "--alphalib-python /tmp/alphalib312/bin/python")
    print(f"python {platform.python_version()}, numpy {__import__('numpy').__version__}, "
          f"{platform.processor() or platform.machine()}, {threads} logical CPUs; best of {args.repeat}")

    rows, per_alpha = [], {}
    for pname, (panel, universe) in panels.items():
        for f in ("returns", "vwap", "dollar_volume"):
            panel.field(f)
        common = dict(paper)
        theirs = {}
        if not why_not:
            for mode in modes:
                theirs[mode] = _alphalib(args.alphalib_python, csv, universe, paper, args.repeat, mode)
            ok = set.intersection(*(set(theirs[m]["ok"]) for m in modes))
            failed = theirs[modes[0]]["failed"]
            if failed:
                print(f"{pname}: py-alpha-lib could not compute {sorted(map(int, failed))}: they are left out")
                # the timed set must be the same on both sides: rerun theirs on the common set only
                common = {n: t for n, t in paper.items() if str(n) in ok}
                for mode in modes:
                    theirs[mode] = _alphalib(args.alphalib_python, csv, universe, common, args.repeat, mode)
        nodes = {n: parse_alpha(n) for n in common}
        _ours(panel, dict(list(nodes.items())[:3]), 1, 1)  # warm the allocator and caches
        a101v = None if args.no_alpha101v else _alpha101v(panel, list(common))
        for mode, nthreads in (("1", 1), ("default", threads)):
            if mode not in modes:
                continue
            each: dict = {}
            ours = _ours(panel, nodes, args.repeat, nthreads, each if nthreads == 1 else None)
            if each:
                per_alpha[pname] = {str(n): {"ours": each[n], "theirs": theirs.get(mode, {}).get("each", {}).get(str(n))}
                                    for n in nodes}
            th = theirs.get(mode, {}).get("seconds")
            rows.append((pname, f"{panel.n_stocks} x {panel.n_days}", "1" if nthreads == 1 else f"default ({nthreads})",
                         len(common), ours, th, ours / th if th else None, a101v if mode == "1" else None))

    def fmt(x, spec):
        return format(x, spec) if x is not None else "-"

    if args.per_alpha and per_alpha:
        args.per_alpha.write_text(json.dumps(per_alpha, indent=1))
        for pname, table in per_alpha.items():
            total = sum(v["ours"] for v in table.values())
            print(f"\n{pname}: the 15 slowest alphas of ours (one thread; {total:.2f} s in all)")
            print("| alpha | ours ms | share | py-alpha-lib ms | ours / theirs |\n|---|---|---|---|---|")
            for n, v in sorted(table.items(), key=lambda kv: -kv[1]["ours"])[:15]:
                th = v["theirs"]
                print(f"| {n} | {v['ours'] * 1e3:.1f} | {v['ours'] / total:.1%} | {fmt(th and th * 1e3, '.1f')} | "
                      f"{fmt(th and v['ours'] / th, '.2f')} |")

    print()
    print("| panel | stocks x days | threads | alphas | ours s | ours formulas/s | py-alpha-lib s | "
          "py-alpha-lib formulas/s | ours / py-alpha-lib | alpha101v s (1 thread) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p, shape, th, n, ours, theirs_s, ratio, a101 in rows:
        print(f"| {p} | {shape} | {th} | {n} | {ours:.2f} | {n / ours:.1f} | {fmt(theirs_s, '.2f')} | "
              f"{fmt(theirs_s and n / theirs_s, '.1f')} | {fmt(ratio, '.2f')}{'x' if ratio else ''} | "
              f"{fmt(a101, '.1f')} |")


if __name__ == "__main__":
    main()
