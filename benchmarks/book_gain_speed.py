"""Speed of the book-gain rule (`alpha_gym.evaluation.book_gain`): time per answer offered to a book.

    python benchmarks/book_gain_speed.py [--days 2000] [--candidates 50 1000] [--answers 500]

Builds candidates with random daily P&L sharing six factors (so the cap at |corr| 0.5 binds), offers
`--answers` answers one at a time, and reports milliseconds per answer for `BookGain.gain` (the
precomputed path) and for the rule read literally (`select_correlation_capped` without and with the
answer, then the CPCV of both books), and checks that both give the same members and gains. The
setup time (`BookGain(candidates)`: the candidates' correlation matrix) is reported apart.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from alpha_gym.evaluation.book_gain import BookGain
from alpha_gym.evaluation.selection import Candidate, select_correlation_capped
from alpha_gym.scoring import cpcv


def _cpcv(pnl) -> float:
    return cpcv.cpcv_score(cpcv.slice_sharpes(np.asarray(pnl, dtype=np.float64))[0])


def _pool(rng, n: int, days: int, factors: np.ndarray, prefix: str) -> list[Candidate]:
    out = []
    for k in range(n):
        w = rng.standard_normal(len(factors)) * (rng.random(len(factors)) < 0.4)
        pnl = rng.uniform(-2e-4, 8e-4) + 0.01 * (w @ factors + rng.standard_normal(days)) / 2
        out.append(Candidate(f"{prefix}{k:05d}", _cpcv(pnl), float(rng.choice([0.01, 0.05, 0.2])), pnl))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=2000)
    ap.add_argument("--candidates", type=int, nargs="+", default=[50, 1000])
    ap.add_argument("--answers", type=int, default=500)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, numpy {np.__version__}")
    for n in args.candidates:
        rng = np.random.default_rng(0)
        factors = rng.standard_normal((6, args.days))
        pool, answers = _pool(rng, n, args.days, factors, "c"), _pool(rng, args.answers, args.days, factors, "a")
        t0 = time.perf_counter()
        rule = BookGain(pool)
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        fast = rule.gains(answers)
        per_fast = (time.perf_counter() - t0) / len(answers)
        k = min(len(answers), 50)                         # the literal rule is slow: time a sample of answers
        before = select_correlation_capped(pool)
        value = _cpcv(before.returns) if before.n else 0.0
        t0 = time.perf_counter()
        slow = []
        for a in answers[:k]:
            after = select_correlation_capped(pool + [a])
            slow.append((after.members, (_cpcv(after.returns) if after.n else 0.0) - value))
        per_slow = (time.perf_counter() - t0) / k
        same = all(f.members == m and abs(f.gain - g) < 1e-12 for f, (m, g) in zip(fast, slow))
        print(f"{n} candidates x {args.days} days, book of {len(rule.members)}: setup {setup * 1e3:.1f} ms, "
              f"BookGain.gain {per_fast * 1e3:.2f} ms/answer, literal rule {per_slow * 1e3:.2f} ms/answer, "
              f"admitted {sum(g.admitted for g in fast)}/{len(fast)}, same result: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
