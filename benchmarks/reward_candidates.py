"""Which reward, read on a fold's search window, ranks formulas the way the later windows do: each candidate
reward measure over the walk-forward folds' pools (`alpha_gym.market.folds`, `alpha_gym.evaluation.walk_forward`).

    python benchmarks/reward_candidates.py                     # every fold of the kept pools, us46
    python benchmarks/reward_candidates.py --folds 5 --limit 50
    python benchmarks/reward_candidates.py --table-only        # the table from the kept per-formula values

A fold's pool is every distinct formula the model-free arms found on its search window (--pools: one JSON row per
fold, arm and formula). Each formula is scored with the current verifier (default `VerifierConfig`, a fresh
verifier on the fold's search window: its archive holds the seed books only, and each formula is scored alone
against it) and on the fold's validation and test windows under one validity, as `walk_forward.score_fold`
scores them: the search window's verdict (`holdout.train_verdict`, every rule of a training score) decides
validity everywhere, the window score is the holdout score. Each candidate's value is read on the search
window only (CANDIDATES says what each is). Over the formulas valid on the search window, per fold: Spearman's
rank correlation of the value with the validation score and with the test score (over the formulas scored
there), and the mean test score of its top 20 and top 100 (their members valid on the test window).

Writes one row per (fold, formula) into --results/values.jsonl as it goes (a fold's formulas already kept are
not scored again: a stopped run resumes), and the table, reward-candidates.md, beside it; prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "us_equities"
RESULTS = ROOT / "benchmarks" / "results" / "reward-candidates"
VALUES_FILE = "values.jsonl"
TABLE_FILE = "reward-candidates.md"
TOPS = (20, 100)
#: Decimals kept of each score and value (`rounded`).
DIGITS = 6
#: Formulas scored between writes (each chunk's validation and test windows are scored together).
CHUNK = 50
#: The books the residual CPCV regresses out besides R4's five factors: a price level and a volume level,
#: each the verifier's book of the formula (its daily net P&L under training costs on the search window).
LEVEL_BOOKS = ("rank(close)", "rank(volume)")
COMPLEXITY_TIMES = (10, 30)
#: A stronger parsimony still: R11 free up to this many nodes (24 by default), at the priorities above.
FREE_NODES = 12
NODE_BUDGETS = (12, 20)
#: Lexicographic parsimony: rewards within one bucket of this width tie, and the fewer nodes wins among them.
LEXICOGRAPHIC_BUCKET = 0.5
#: The last sessions of the search window whose Sharpe one candidate reads (a year).
LAST_YEAR = 252

#: (key, what it is), in the order the tables show them.
CANDIDATES = (
    ("reward", "today's reward (the scalar, default VerifierConfig)"),
    ("train_cpcv", "train CPCV alone (R1 before its clip)"),
    *((f"complexity_x{k}", f"the reward with R11's priority x{k} ({0.2 * k:g})") for k in COMPLEXITY_TIMES),
    *((f"complexity_free{FREE_NODES}_x{k}", f"the reward with R11 free up to {FREE_NODES} nodes (not 24), its priority "
       f"x{k}") for k in COMPLEXITY_TIMES),
    *((f"node_budget_{n}", f"the reward; above {n} nodes the invalid reward") for n in NODE_BUDGETS),
    ("lexicographic", f"the reward in buckets of {LEXICOGRAPHIC_BUCKET:g}, fewer nodes first within one"),
    ("residual_cpcv", "CPCV of the daily net P&L's residual to R4's five factors, rank(close) and rank(volume)"),
    ("reward_residual", "the reward with R1 read on that residual"),
    ("deflated_cpcv", "mean - 0.5 std of the CPCV slices' deflated-Sharpe z (trials: the fold's pool size)"),
    ("dsr", "deflated Sharpe ratio of the search window's daily net P&L (trials: the fold's pool size)"),
    ("recent_linear", "CPCV with block weights 1..6, oldest to newest (a slice: its blocks' mean)"),
    ("recent_last_double", "CPCV with the last block weighted 2, the others 1"),
    ("reward_recent_linear", "the reward with R1 read as recent_linear"),
    ("last_year_sharpe", f"Sharpe of the search window's last {LAST_YEAR} sessions"),
)
CANDIDATE_KEYS = tuple(k for k, _ in CANDIDATES)


# --------------------------------------------------------------------------------------------- the measures
def settled_reward(channels: Mapping[str, float], priorities: Mapping[str, float]) -> float:
    """The scalar reward of a valid answer's channels under other priorities: R10's clamp settled again on the
    new weighted rest (`channels.motif_guard_settle`), then the weighted sum. With the verifier's own
    priorities it is the verifier's reward."""
    from alpha_gym.scoring.channels import motif_guard_settle
    from alpha_gym.scoring.config import weighted_sum
    ch = {**channels, "motif_guard": 0.0}
    fired = -1.0 if channels["motif_guard"] < 0 else 0.0
    ch["motif_guard"] = motif_guard_settle(fired, weighted_sum(ch, priorities), priorities["motif_guard"])
    return weighted_sum(ch, priorities)


def reward_with_cpcv(channels: Mapping[str, float], cpcv: float, config) -> float:
    """The reward with R1 read from another CPCV-like value (clipped as R1 is), the other channels unchanged."""
    from alpha_gym.scoring.channels import cpcv_channel
    return settled_reward({**channels, "cpcv": cpcv_channel(cpcv, config.cpcv_clip)}, config.priorities)


def factor_residual(pnl: np.ndarray, books: np.ndarray) -> np.ndarray:
    """The daily P&L less its OLS exposure to the books (days x k), the intercept kept: the series whose Sharpe
    `factors.residual_sharpe` reports when the books are R4's five factors."""
    pnl = np.asarray(pnl, dtype=np.float64)
    X = np.column_stack([np.ones(len(pnl)), books])
    coef, *_ = np.linalg.lstsq(X, pnl, rcond=None)
    return pnl - books @ coef[1:]


def block_weights(kind: str, n_blocks: int) -> np.ndarray:
    """Weights of the CPCV blocks, oldest first: "linear" 1..n, "last_double" 1 each and 2 for the newest."""
    if kind == "linear":
        return np.arange(1.0, n_blocks + 1.0)
    if kind == "last_double":
        return np.r_[np.ones(n_blocks - 1), 2.0]
    raise ValueError(f"block weights {kind!r}: linear or last_double")


def weighted_cpcv(pnl: np.ndarray, weights_of_blocks: np.ndarray, config) -> float:
    """CPCV with some blocks counting more: each slice weighted by the mean weight of its test blocks, then the
    weighted mean - std_penalty x the weighted (population) std of the slice Sharpes. Equal weights give
    `cpcv.cpcv_score` of `cpcv.slice_sharpes`."""
    from alpha_gym.scoring import cpcv
    sharpes, _ = cpcv.slice_sharpes(pnl, config)
    w = np.array([weights_of_blocks[list(s.blocks)].mean() for s in cpcv.splits(len(pnl), config)])
    w = w / w.sum()
    mean = float(w @ sharpes)
    return mean - config.std_penalty * math.sqrt(float(w @ (sharpes - mean) ** 2))


def deflated_z(returns: np.ndarray, n_trials: float) -> float:
    """The deflated Sharpe ratio's statistic before the normal CDF (Bailey and Lopez de Prado 2014):
    (SR - SR0) sqrt(T - 1) / sqrt(1 - skew SR + (kurtosis - 1) / 4 SR^2), SR0 the expected best of `n_trials`
    zero-edge trials (`overfitting.expected_max_sharpe`, sigma sqrt(1 / (T - 1))). The CDF saturates at 1 for
    the good books a reward must still tell apart; the z does not. nan where the moments are undefined."""
    from alpha_gym.evaluation.overfitting import OverfittingError, expected_max_sharpe, return_moments, sharpe_z
    try:
        sr, skew, kurt, n = return_moments(returns)
        return sharpe_z(sr, expected_max_sharpe(n_trials, math.sqrt(1.0 / (n - 1))), n, skew, kurt)
    except OverfittingError:
        return float("nan")


def deflated_cpcv(pnl: np.ndarray, n_trials: float, config) -> float:
    """CPCV of deflated slices: each slice's test days' `deflated_z`, then mean - std_penalty x std."""
    from alpha_gym.scoring import cpcv
    z = np.array([deflated_z(pnl[s.test], n_trials) for s in cpcv.splits(len(pnl), config)])
    return cpcv.cpcv_score(z, config.std_penalty) if np.isfinite(z).all() else float("nan")


def node_budget(reward: float, nodes: int, budget: int, invalid: float) -> float:
    """The reward under a node budget: a formula of more than `budget` nodes gets the invalid reward."""
    return reward if nodes <= budget else invalid


def lexicographic(reward: float, nodes: int, bucket: float = LEXICOGRAPHIC_BUCKET) -> float:
    """Lexicographic parsimony as one number: the reward's bucket first, then fewer nodes (a formula has fewer
    than 1,000 nodes: the lexer's token limit is 256)."""
    return math.floor(reward / bucket) * 1000.0 - nodes


def candidate_values(score, ev, books: np.ndarray, n_trials: float, config) -> dict[str, float | None]:
    """Every candidate's value for one formula valid on the search window: its `Score` and `Evaluated` there,
    the residual's books (days x 7) and the fold's trials."""
    from alpha_gym.book.metrics import sharpe
    from alpha_gym.scoring import cpcv
    from alpha_gym.scoring.channels import complexity_channel
    ch, net, nodes, reward = score.channels, np.asarray(ev.net), int(score.diagnostics["nodes"]), score.reward
    cfg = config.cpcv
    residual = cpcv.cpcv_score(cpcv.slice_sharpes(factor_residual(net, books), cfg)[0], cfg.std_penalty)
    linear = weighted_cpcv(net, block_weights("linear", cfg.n_blocks), cfg)
    invalid = config.invalid_reward("invalid_book")
    from alpha_gym.evaluation.overfitting import OverfittingError, deflated_sharpe_ratio
    try:
        dsr = deflated_sharpe_ratio(net, n_trials).dsr
    except OverfittingError:
        dsr = None
    values = {
        "reward": reward, "train_cpcv": float(ev.cpcv),
        **{f"complexity_x{k}": settled_reward(ch, {**config.priorities,
                                                   "complexity": config.priorities["complexity"] * k})
           for k in COMPLEXITY_TIMES},
        **{f"complexity_free{FREE_NODES}_x{k}": settled_reward(
            {**ch, "complexity": complexity_channel(nodes, FREE_NODES, config.complexity_per_node)},
            {**config.priorities, "complexity": config.priorities["complexity"] * k}) for k in COMPLEXITY_TIMES},
        **{f"node_budget_{n}": node_budget(reward, nodes, n, invalid) for n in NODE_BUDGETS},
        "lexicographic": lexicographic(reward, nodes),
        "residual_cpcv": residual, "reward_residual": reward_with_cpcv(ch, residual, config),
        "deflated_cpcv": deflated_cpcv(net, n_trials, cfg), "dsr": dsr,
        "recent_linear": linear,
        "recent_last_double": weighted_cpcv(net, block_weights("last_double", cfg.n_blocks), cfg),
        "reward_recent_linear": reward_with_cpcv(ch, linear, config),
        "last_year_sharpe": sharpe(net[-LAST_YEAR:]),
    }
    return {k: (float(v) if v is not None and math.isfinite(v) else None) for k, v in values.items()}


def residual_books(verifier) -> np.ndarray:
    """R4's five factor returns and the LEVEL_BOOKS' daily net P&L on the verifier's window (days x 7)."""
    levels = [np.asarray(verifier.evaluate(f).net) for f in LEVEL_BOOKS]
    return np.column_stack([verifier.factors, *levels])


# --------------------------------------------------------------------------------------------- one fold
def score_chunk(formulas: Sequence[str], verifier, panels, books, n_trials: float) -> list[dict[str, Any]]:
    """Rows for some formulas of a fold: nodes, the search window's verdict, the candidates' values there, and
    the validation and test scores under that one validity."""
    from alpha_gym.evaluation.holdout import check_disjoint, evaluate_holdout
    from alpha_gym.scoring.holdout_config import HoldoutConfig
    from alpha_gym.scoring.verifier import Score
    config = verifier.config
    rows = []
    for f in formulas:
        out = verifier.admit(f)
        # `Verifier.score_formula`'s own path (admit, then the channels), keeping the book it traded
        score = out if isinstance(out, Score) else verifier._score_items([out]).scores[0]
        row = {"formula": f, "valid": score.valid, "nodes": score.diagnostics.get("nodes")}
        if score.valid:
            row["values"] = candidate_values(score, out, books, n_trials, config)
        else:
            row["reason"] = score.reason
        rows.append(row)
    verdicts = [r["valid"] for r in rows]
    holdout = HoldoutConfig.from_verifier(config)
    for window, history, panel in (("validation", panels.validation_history, panels.validation),
                                   ("test", panels.test_history, panels.test)):
        check_disjoint(verifier.panel, panel)      # the verifier saw the search window only
        report = evaluate_holdout(list(formulas), history, panel, config=holdout, train_valid=verdicts,
                                  alpha_tests=False)
        for r, a in zip(rows, report.answers):
            r[window] = float(a.score) if a.valid else None
    return rows


def read_pools(path: Path) -> dict[int, dict[str, list[str]]]:
    """fold -> formula -> the arms that found it, in file order."""
    pools: dict[int, dict[str, list[str]]] = {}
    for n, row in _json_rows(path):
        fold, arm, formula = (row.get(k) for k in ("fold", "arm", "formula")) if isinstance(row, dict) else (None,) * 3
        if not (type(fold) is int and fold >= 1 and isinstance(arm, str) and isinstance(formula, str)):
            raise SystemExit(f"reward_candidates.py: {path} line {n}: not a row of fold (an integer >= 1), arm and "
                             "formula (strings)")
        pools.setdefault(fold, {}).setdefault(formula, []).append(arm)
    return pools


def _json_rows(path: Path):
    """(line number, parsed row) of a JSONL file, blank lines skipped; SystemExit naming the file and line of one
    that is not JSON or not UTF-8."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"reward_candidates.py: cannot read {path}: {e}")
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except ValueError as e:
                raise SystemExit(f"reward_candidates.py: {path} line {n}: not JSON: {e}")


#: What every kept row holds, and what a valid one holds besides.
ROW_KEYS = ("fold", "formula", "valid", "validation", "test")


def read_values(path: Path) -> list[dict[str, Any]]:
    """The kept per-formula rows (none when the file does not exist); SystemExit for a row that is not one."""
    if not path.exists():
        return []
    rows = []
    for n, row in _json_rows(path):
        ok = isinstance(row, dict) and all(k in row for k in ROW_KEYS) and type(row["fold"]) is int
        if ok and row["valid"] is True:
            v = row.get("values")
            ok = isinstance(v, dict) and all(k in v and isinstance(v[k], (int, float, type(None))) and
                                             not isinstance(v[k], bool) for k in CANDIDATE_KEYS)
        if ok:
            ok = all(isinstance(row[w], (int, float, type(None))) and not isinstance(row[w], bool)
                     for w in ("validation", "test"))
        if not ok:
            raise SystemExit(f"reward_candidates.py: {path} line {n}: not a kept row (fold, formula, valid, "
                             f"validation, test and, when valid, every candidate's value)")
        rows.append(row)
    return rows


def run_fold(fold_number: int, pool: dict[str, list[str]], panel, plan, out: Path, limit: int | None) -> int:
    """Score the fold's formulas not yet in `out`, appending rows a chunk at a time; returns how many."""
    from alpha_gym.jsonable import json_dumps
    from alpha_gym.market.folds import cut_fold, make_fold
    from alpha_gym.scoring.verifier import Verifier
    formulas = list(pool)[:limit]
    done = {r["formula"] for r in read_values(out) if r["fold"] == fold_number}
    todo = [f for f in formulas if f not in done]
    if not todo:
        return 0
    fold = make_fold(panel.dates, fold_number, plan)
    panels = cut_fold(panel, fold, plan.history)
    verifier = Verifier(panels.search)           # a fresh verifier on the search window only
    books = residual_books(verifier)
    n_trials = float(len(pool))                  # the deflation's trials: the fold's whole pool
    print(f"=== {fold.line()}: {len(todo)} of {len(formulas)} formulas to score", flush=True)
    t0 = time.perf_counter()
    for lo in range(0, len(todo), CHUNK):
        rows = score_chunk(todo[lo:lo + CHUNK], verifier, panels, books, n_trials)
        with out.open("a", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json_dumps(rounded({"fold": fold_number, "arms": pool[r["formula"]], "n_trials": n_trials,
                                             **r})) + "\n")
        print(f"  {min(lo + CHUNK, len(todo))}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return len(todo)


def rounded(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its scores and values to DIGITS decimals: the kept file stays small, and near-copies that differ
    further down keep their order (a tie among them is broken by the formula text)."""
    def r(x):
        return round(x, DIGITS) if isinstance(x, float) else x
    out = {k: r(v) for k, v in row.items()}
    if isinstance(row.get("values"), dict):
        out["values"] = {k: r(v) for k, v in row["values"].items()}
    return out


# --------------------------------------------------------------------------------------------- the table
def top_mean(rows: Sequence[dict], key: str, k: int) -> tuple[float | None, int]:
    """The mean test score of the k highest by `key` (ties by formula text), over those valid on the test window."""
    ranked = sorted((r for r in rows if r["values"].get(key) is not None),
                    key=lambda r: (-r["values"][key], r["formula"]))[:k]
    scores = [r["test"] for r in ranked if r["test"] is not None]
    return (float(np.mean(scores)) if scores else None), len(scores)


def fold_stats(rows: Sequence[dict]) -> dict[str, dict[str, float | None]]:
    """Per candidate, on one fold's rows valid on the search window: rho with validation and test, top-k test."""
    from alpha_gym.evaluation.overfitting import rank_correlation
    out = {}
    for key in CANDIDATE_KEYS:
        x = [r["values"].get(key) for r in rows]
        x = np.array([np.nan if v is None else v for v in x], dtype=np.float64)
        stats = {w: rank_correlation(x, np.array([np.nan if r[w] is None else r[w] for r in rows], dtype=np.float64))
                 for w in ("validation", "test")}
        for k in TOPS:
            stats[f"top{k}"] = top_mean(rows, key, k)[0]
        out[key] = stats
    tests = [r["test"] for r in rows if r["test"] is not None]
    out["pool"] = {"validation": None, "test": None, **{f"top{k}": float(np.mean(tests)) if tests else None
                                                        for k in TOPS}}
    return out


def _num(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


def _mean_ci(values: Sequence[float | None]) -> str:
    from trainers.compare.walk_forward import t_interval
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    ci = t_interval(v)
    text = f"{np.mean(v):+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
    return text + (f" ({len(v)} folds)" if len(v) < len(values) else "")


METRICS = (("validation", "Spearman of the value with the validation score"),
           ("test", "Spearman of the value with the test score"),
           ("top20", "mean test score of the top 20 by the value"),
           ("top100", "mean test score of the top 100 by the value"))


def table_lines(rows: Sequence[dict]) -> list[str]:
    """Markdown: one table per metric (candidates x folds, the mean over folds with a 95% t-interval), then the
    per-fold difference from today's reward for the test Spearman and the top 20."""
    folds = sorted({r["fold"] for r in rows})
    valid = {k: [r for r in rows if r["fold"] == k and r["valid"]] for k in folds}
    stats = {k: fold_stats(valid[k]) for k in folds}
    head = "| candidate | " + " | ".join(f"fold {k}" for k in folds) + " | mean over folds [95% t-CI] |"
    rule = "|---|" + "---:|" * len(folds) + "---|"
    lines = ["Formulas valid on the search window, per fold: " +
             ", ".join(f"fold {k} {len(valid[k])} of {sum(r['fold'] == k for r in rows)}" for k in folds) + "."]
    for metric, about in METRICS:
        lines += ["", f"**{about}**", "", head, rule]
        for key in (*CANDIDATE_KEYS, *(("pool",) if metric.startswith("top") else ())):
            cells = [stats[k][key][metric] for k in folds]
            lines.append(f"| {key} | " + " | ".join(_num(c) for c in cells) + f" | {_mean_ci(cells)} |")
    for metric in ("test", "top20"):
        lines += ["", f"**{dict(METRICS)[metric]}: candidate minus today's reward, per fold**", "", head, rule]
        for key in CANDIDATE_KEYS[1:]:
            cells = [None if stats[k][key][metric] is None or stats[k]["reward"][metric] is None
                     else stats[k][key][metric] - stats[k]["reward"][metric] for k in folds]
            lines.append(f"| {key} | " + " | ".join(_num(c) for c in cells) + f" | {_mean_ci(cells)} |")
    lines += ["", "Candidates:", ""] + [f"- `{k}`: {about}" for k, about in CANDIDATES]
    lines.append("- `pool`: every formula valid on the search window, unselected (the top-k rows: its mean test score)")
    return lines


def write_table(results: Path) -> list[str]:
    rows = read_values(results / VALUES_FILE)
    if not rows:
        return []
    lines = table_lines(rows)
    (results / TABLE_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def main(argv=None) -> int:
    from alpha_gym.market import load_panel
    from alpha_gym.market.folds import ALL_FOLDS, FoldPlan, chosen_folds
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DATA / "us_daily_train.csv.gz"))
    p.add_argument("--universe", default=str(DATA / "universe_us46.txt"), help="a ticker file (\"\": all)")
    p.add_argument("--pools", default=str(RESULTS / "pools.jsonl"))
    p.add_argument("--folds", default=ALL_FOLDS, help="comma-separated fold numbers, or all")
    p.add_argument("--sessions", type=int, default=252, help="test and validation window length")
    p.add_argument("--limit", type=int, default=None, help="score at most this many formulas of each fold's pool")
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args(argv)
    results = Path(args.results)
    if not args.table_only:
        pools = read_pools(Path(args.pools))
        panel = load_panel(args.data, universe=args.universe or None)
        plan = FoldPlan(test=args.sessions, validation=args.sessions)
        folds = [f.number for text in args.folds.split(",") for f in chosen_folds(text.strip(), panel.dates, plan)]
        results.mkdir(parents=True, exist_ok=True)
        for k in folds:
            if k in pools:
                run_fold(k, pools[k], panel, plan, results / VALUES_FILE, args.limit)
    lines = write_table(results)
    print("\n".join(lines) if lines else f"no rows in {results / VALUES_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
