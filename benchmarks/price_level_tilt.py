"""Is `rank(close - 2 * open)` a low-price factor or the reference's Jul 6 hack re-spelled? (issue 41.2)

    python benchmarks/price_level_tilt.py [--data ../shared/data/us_equities]
                                          [--out benchmarks/results/price-level-tilt]
                                          [--skip-kept] [--skip-wide]

On the real panel (us46, the train window 2012-06-29..2025-08-20; the pseudo-holdout is its last 252
sessions, as in `alpha-gym compare`; nothing after 2025-08-20 is read), measures:

1. decomposition: how much of the tilt's book is the static price level and how much the intraday term
   (`close - 2 * open = -close + 2 * (close - open)`): the P&L correlation with `rank(-close)`, the share
   of P&L variance that static book explains, the residual's Sharpe, the daily rank correlation of the
   signal with the close (`alpha_gym.scoring.price_level`), and the intraday term traded on its own;
2. pseudo-holdout: the tilt, the static book and the reference's best formula trained on the window less
   its last year and scored on that year (`holdout_score`, realistic costs, no turnover floor);
3. R4 with a price-level factor: `rank(-close)`'s book added to the five known factors, what that takes
   out of the tilt's residual Sharpe and reward (R4 = -0.4 x clip(raw - residual Sharpe, 0, 3), priority 0.4);
4. the floor's statistic on both classes, to choose its threshold: the tilt family (spellings of a price
   ranking nudged by noise, wrappers) against the honest sets (the reference's published formulas, README's
   examples, the baselines' motifs, the 82 Alpha101s, the seed archive and every formula kept under
   benchmarks/results/ on the kept comparisons' train window), on us46 and, with the wide panels, us100
   and all 496 stocks (the family and the honest sets but the kept answers);
5. cost: the statistic's time against a core score (`Verifier.evaluate`) on us46, best of 5.

Writes summary.json (everything but the per-formula rows) and formulas.jsonl (one row per formula and
panel) under --out, and prints the summary.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: The hack and its class: a price-level ranking nudged over the 2% turnover floor, whatever the spelling.
FAMILY = (
    "rank(close - 2 * open)", "rank(close - 1.5 * open)", "rank(close - 3 * open)", "rank(close - 5 * open)",
    "rank(close - 1.1 * open)", "rank(vwap - 2 * open)", "rank(high - 2 * low)", "rank(ts_mean(close, 5) - 2 * open)",
    "scale(close - 2 * open)", "close - 2 * open", "-(close - 2 * open)", "power(close - 2 * open, 3)",
    "sign(close - 2 * open) * abs(close - 2 * open)", "-1 * rank(2 * open - close)",
    "rank(-close) + 0.05 * rank(returns)", "rank(-close) + 0.1 * rank(-returns)",
    "rank(-close) + 0.2 * rank(volume)", "rank(1 / close) + 0.05 * rank(returns)",
    "rank(1 / close + 0.0001 * ts_delta(close, 1))", "-close + 3 * ts_delta(close, 1)",
    "-log(close) + 2 * returns", "rank(close) + 0.05 * rank(returns)", "rank(close + 2 * ts_delta(close, 1))",
    "rank(-vwap) + 0.1 * rank(high - low)", "rank(1 / ts_mean(close, 10)) + 0.05 * rank(-returns)",
)

README_EXAMPLES = ("rank(ts_std(volume, 20) / ts_mean(volume, 20))", "rank(-ts_delta(close, 5))",
                   "((close - open) / ((high - low) + .001))", "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))")

#: The reference's table of step-500 answers (its post, section 7), the losing one included.
REFERENCE_PUBLISHED = (
    "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))", "rank(ts_max(volume / vwap, 34) / ts_std(returns, 34))",
    "rank(ts_std(volume / (high - low), 34))", "rank(ts_std(volume, 8) / ts_std(close, 8))",
    "rank(ts_std(volume, 17) / ts_mean(volume, 17) + ts_std(volume, 17) / ts_mean(volume, 17))",
)

HACK, STATIC, INTRADAY = "rank(close - 2 * open)", "rank(-close)", "rank(close - open)"


def kept_formulas() -> dict[str, set[str]]:
    """Every distinct formula kept under benchmarks/results/ (answers, archives, books), with where it is kept:
    "FOLDER/probe" (a run's shipped probe answers, seed-S/NAME.jsonl), "FOLDER/archive" (NAME.archive.jsonl),
    "FOLDER/step-0" or "FOLDER/other"."""
    out: dict[str, set[str]] = {}
    results = ROOT / "benchmarks" / "results"
    for path in sorted(results.rglob("*.jsonl")):
        rel = path.relative_to(results)
        kind = ("archive" if path.name.endswith(".archive.jsonl") else "step-0" if path.name == "step-0.jsonl"
                else "probe" if rel.parts[1].startswith("seed-") else "other") if len(rel.parts) > 1 else "other"
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                for k in ("formula", "text"):
                    if isinstance(row.get(k), str):
                        out.setdefault(row[k], set()).add(f"{rel.parts[0]}/{kind}")
    return out


def honest_sets() -> dict[str, tuple[str, ...]]:
    from alpha_gym.alpha101 import formulas
    from alpha_gym.evaluation.baselines import MOTIFS
    from alpha_gym.scoring.seeds import SEED_FORMULAS
    return {"reference_published": REFERENCE_PUBLISHED, "readme": README_EXAMPLES,
            "motifs": tuple(f for b in MOTIFS for f in b.formulas),
            "alpha101": tuple(formulas(industry_free=True).values()), "seed_archive": tuple(SEED_FORMULAS)}


def statistic(verifier, formula: str):
    """(price_level statistic, book) of a formula on the verifier's panel; (None, None) if it does not trade."""
    from alpha_gym.language import parse
    from alpha_gym.language.evaluate import evaluate
    from alpha_gym.scoring.price_level import price_level_correlation
    try:
        node = parse(formula)
        signal = evaluate(node, verifier.panel)
        book = verifier._book_of(node, signal)
    except Exception:  # noqa: BLE001  (an answer that does not parse or evaluate has no statistic)
        return None, None
    return price_level_correlation(book.weights, book.traded, signal, verifier.panel), book


def row(verifier, formula: str, group: str, panel_name: str, static_net=None) -> dict:
    level, book = statistic(verifier, formula)
    out = {"panel": panel_name, "group": group, "formula": formula, "price_level": level}
    if book is None:
        return out
    s = verifier.score_formula(formula)
    out.update(valid=s.valid, reason=s.reason, reward=s.reward, cpcv=s.channels["cpcv"],
               turnover=float(book.turnover.mean()), ic=s.diagnostics.get("ic"))
    if static_net is not None:
        out["pnl_corr_static"] = float(np.corrcoef(book.net, static_net)[0, 1])
    return out


def decomposition(verifier) -> dict:
    """How much of the tilt is the static level and how much the intraday term, on one panel."""
    from alpha_gym.book import metrics
    from alpha_gym.language import parse
    hack, static, intraday = (verifier.book(parse(f)) for f in (HACK, STATIC, INTRADAY))
    x, y = static.net, hack.net
    slope = float(np.cov(x, y)[0, 1] / np.var(x, ddof=1))
    residual = y - slope * x
    w_h, w_s = hack.weights, static.weights
    traded = hack.traded & static.traded
    num = (w_h * w_s).sum(axis=1)[traded]
    den = np.sqrt((w_h * w_h).sum(axis=1) * (w_s * w_s).sum(axis=1))[traded]
    return {
        "formula": HACK, "static": STATIC, "intraday": INTRADAY,
        "pnl_corr_static": float(np.corrcoef(x, y)[0, 1]),
        "pnl_variance_explained_by_static": float(np.corrcoef(x, y)[0, 1] ** 2),
        "pnl_slope_on_static": slope,
        "sharpe": {"tilt": metrics.sharpe(y), "static": metrics.sharpe(x),
                   "tilt_minus_static_part": metrics.sharpe(residual), "intraday_alone": metrics.sharpe(intraday.net)},
        "pnl_corr_intraday": float(np.corrcoef(intraday.net, y)[0, 1]),
        "weights_corr_static_mean": float((num / den).mean()),
        "turnover": {"tilt": float(hack.turnover.mean()), "static": float(static.turnover.mean()),
                     "intraday_alone": float(intraday.turnover.mean())},
    }


def pseudo_holdout(full) -> dict:
    """Trained on the window less its last 252 sessions, scored on them (the comparisons' pseudo-holdout)."""
    from alpha_gym.evaluation.holdout import holdout_score
    train, hold = full.head(full.n_days - 252), full.window(start=full.dates[full.n_days - 252])
    out = {"train": [str(train.dates[0]), str(train.dates[-1])], "holdout": [str(hold.dates[0]), str(hold.dates[-1])]}
    for f in (HACK, STATIC, INTRADAY, REFERENCE_PUBLISHED[0], "rank(-ts_delta(close, 5))"):
        r = holdout_score(f, train, hold)
        out[f] = {k: getattr(r, k) for k in ("valid", "score", "cpcv", "sharpe", "total_return", "turnover", "beta")}
    return out


def r4_with_price_factor(verifier) -> dict:
    """The tilt's R4 and reward with `rank(-close)`'s book as a sixth factor, against the five known factors."""
    from alpha_gym.book import metrics
    from alpha_gym.language import parse
    from alpha_gym.scoring.channels import factor_neutrality_channel
    from alpha_gym.scoring.factors import residual_sharpe
    static = verifier.book(parse(STATIC)).gross
    six = np.column_stack([verifier.factors, static])
    p = verifier.config.priorities["factor_neutrality"]
    out = {}
    for f in (HACK, REFERENCE_PUBLISHED[0], "rank(-ts_delta(close, 5))"):
        book, s = verifier.book(parse(f)), verifier.score_formula(f)
        raw = metrics.sharpe(book.net)
        r5, r6 = residual_sharpe(book.net, verifier.factors), residual_sharpe(book.net, six)
        r4_5, r4_6 = factor_neutrality_channel(raw, r5), factor_neutrality_channel(raw, r6)
        out[f] = {"sharpe": raw, "residual_sharpe_5": r5, "residual_sharpe_6": r6, "r4_5": r4_5, "r4_6": r4_6,
                  "reward_5": s.reward, "reward_6": s.reward + p * (r4_6 - r4_5), "valid": s.valid}
    return out


def timing(verifier, formulas) -> dict:
    """Best-of-5 ms of a core score and of the statistic alone, per formula (us46), and the ratio."""
    from alpha_gym.language import parse
    from alpha_gym.language.evaluate import evaluate
    from alpha_gym.scoring.price_level import price_level_correlation
    core, stat = [], []
    for f in formulas:
        node = parse(f)
        signal = evaluate(node, verifier.panel)
        book = verifier._book_of(node, signal)
        verifier.evaluate(f)
        c = min(_time(lambda: verifier.evaluate(f)) for _ in range(5))
        s = min(_time(lambda: price_level_correlation(book.weights, book.traded, signal, verifier.panel))
                for _ in range(5))
        core.append(c)
        stat.append(s)
    return {"formulas": len(formulas), "core_ms_median": float(np.median(core)),
            "stat_ms_median": float(np.median(stat)),
            "stat_over_core_median": float(np.median(np.array(stat) / np.array(core)))}


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = set(re.findall(r"\b(avx512_bf16|avx512f|avx2|amx_\w+)\b", text))
    return sorted(flags)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "us_equities")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "price-level-tilt")
    ap.add_argument("--skip-kept", action="store_true", help="leave out the kept answers (3,600 formulas, ~2 min)")
    ap.add_argument("--skip-wide", action="store_true", help="us46 only (no us100 and all-496 panels)")
    args = ap.parse_args(argv)
    from alpha_gym import Verifier
    from alpha_gym.language import parse
    from alpha_gym.market import load_panel, load_universe
    from alpha_gym.scoring.config import VerifierConfig
    train_file = args.data / "us_daily_train.csv.gz"
    if not train_file.is_file():
        print(f"real panel not found at {train_file}", file=sys.stderr)
        return 2
    # R3 off (the numbers do not depend on a fitted model) and the price-level floor off: what the tilts scored
    # before it; `price_level` against `VerifierConfig().max_price_level_corr` says what the floor now refuses
    config = VerifierConfig(stress_checkpoint=None, max_price_level_corr=1.0)
    everything = load_panel(train_file)
    rows: list[dict] = []
    us46 = everything.select(load_universe(args.data / "universe_us46.txt"))
    panels = {"us46": us46}
    if not args.skip_wide:
        panels["us100"] = everything.select(load_universe(args.data / "universe_us100.txt"))
        panels["all496"] = everything
    threshold = VerifierConfig().max_price_level_corr
    summary: dict = {"window": [str(us46.dates[0]), str(us46.dates[-1])], "cpu_flags": cpu_flags(),
                     "threshold": threshold}
    for name, panel in panels.items():
        v = Verifier(panel, config)
        static_net = v.book(parse(STATIC)).net
        for f in FAMILY:
            rows.append(row(v, f, "family", name, static_net))
        for group, fs in honest_sets().items():
            for f in fs:
                rows.append(row(v, f, group, name, static_net))
        print(f"{name}: scored", flush=True)
        if name == "us46":
            summary["decomposition"] = decomposition(v)
            summary["r4_price_factor"] = r4_with_price_factor(v)
            summary["timing_us46"] = timing(v, REFERENCE_PUBLISHED + FAMILY[:5] + README_EXAMPLES)
    summary["pseudo_holdout"] = pseudo_holdout(us46)
    if not args.skip_kept:  # the kept comparisons' train window: the panel less its last 252 sessions
        train = us46.head(us46.n_days - 252)
        v = Verifier(train, config)
        for f, where in sorted(kept_formulas().items()):
            level, book = statistic(v, f)
            if level is None:
                continue
            rows.append({"panel": "us46-kept-train", "group": "kept", "formula": f, "price_level": level,
                         "turnover": float(book.turnover.mean()), "kept_in": sorted(where)})
        summary["kept_over_threshold"] = kept_over(rows, threshold)
    summary["classes"] = classes(rows)
    summary["family_refused"] = {p: [sum(r["price_level"] > threshold for r in fam), len(fam)] for p in panels
                                 if (fam := [r for r in rows if r["panel"] == p and r["group"] == "family"
                                             and r["price_level"] is not None])}
    kept = np.array([r["price_level"] for r in rows if r["group"] == "kept" and r["turnover"] >= 0.02])
    if kept.size:
        edges = [0.0, 0.5, 0.7, 0.8, 0.9, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0]
        summary["kept_histogram"] = {"edges": edges, "counts": np.histogram(kept, bins=edges)[0].tolist()}
    # the file keeps every family and honest row and the kept formulas from 0.95 up (the rest: the histogram)
    rows = [r for r in rows if r["group"] != "kept" or r["price_level"] >= 0.95]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
    with open(args.out / "formulas.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r, default=float) + "\n")
    print(json.dumps(summary, indent=1, default=float))
    return 0


def kept_over(rows: list[dict], threshold: float) -> dict:
    """How many distinct kept formulas trading over the 2% floor the price-level floor now refuses, by where they
    are kept, and the highest-scoring spellings' statistic (the kept train window)."""
    hit = [r for r in rows if r["group"] == "kept" and r["turnover"] >= 0.02 and r["price_level"] > threshold]
    counts: dict = {}
    for r in hit:
        for w in r["kept_in"]:
            counts[w] = counts.get(w, 0) + 1
    total = sum(1 for r in rows if r["group"] == "kept" and r["turnover"] >= 0.02)
    return {"over_floor": total, "refused": len(hit), "by_place": dict(sorted(counts.items())),
            "examples": [r["formula"] for r in sorted(hit, key=lambda r: -r["price_level"])[:5]]}


def classes(rows: list[dict]) -> dict:
    """Per panel: the lowest statistic of the family's books that trade over the 2% floor, the highest of each
    honest set's (kept answers: those over the floor), and the formulas that decide them."""
    out: dict = {}
    for r in rows:
        if r.get("price_level") is None or r.get("turnover", 0.0) < 0.02:
            continue
        key = out.setdefault(r["panel"], {})
        if r["group"] == "family":
            cur = key.get("family_min")
            if cur is None or r["price_level"] < cur[0]:
                key["family_min"] = (r["price_level"], r["formula"])
        else:
            cur = key.get(f"{r['group']}_max")
            if cur is None or r["price_level"] > cur[0]:
                key[f"{r['group']}_max"] = (r["price_level"], r["formula"])
    return out


if __name__ == "__main__":
    sys.exit(main())
