"""The comparison's walk-forward table: each arm's choice scored on each fold's test window, and the mean over folds.

The rows are kept in a folder of ARM.jsonl files (a comparison's RESULTS/walk-forward/, benchmarks/walk_forward.py's
--results), one sealed line per (calls, seed, fold): what `alpha_gym.evaluation.walk_forward.score_fold` made of
one run on one fold (`fold_row`). For each arm and budget the table shows, per choice:

    fold k      the test-window score of the choice on fold k (the mean score of its members valid there), averaged
                over the seeds run on that fold
    mean        the mean over the folds with a 95% interval over folds (Student's t, folds - 1 degrees of freedom:
                each fold's test year is one sample); a fold where no member of the choice is valid on the test
                window (or none was chosen) has no score, and the mean says over how many folds it is
    validation  the same mean of the choice's validation-window score (what the choices by validation read)

The choices: the run's own book and its best as the run reports them (by train reward), the same chosen on the
validation window among its 100 best by train reward, and its pool drawn unselected (the `random` arm's: the
unselected random pool, the bar every choice has to clear).

Rows made since score_fold measured them also carry, per run, the PBO of its selection (CSCV over its pool's
daily net P&L on the search window) and each choice's effective bets on each window, and the reference
formula's scores (rank(volume), under the search window's validity); the overfitting table shows them per fold
and the targets lines read the comparison's targets off the mean over folds. Older rows read and show "n/a".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from alpha_gym.evaluation.kept import KeptError, read_rows, write_rows
from alpha_gym.evaluation.walk_forward import REFERENCE as REFERENCE_NAME

FOLDER = "walk-forward"
#: The choices the table shows for each arm (keys of `walk_forward.SELECTIONS`), in order.
SHOWN = (("book_train", "own book (chosen on train)"), ("book_validation", "book chosen on validation"),
         ("best_train", "best by train reward"), ("best_validation", "best by validation"),
         ("top_validation", "top 20 by validation"), ("pool", "pool, unselected"))
ROW_KEYS = ("arm", "calls", "seed", "fold", "windows", "selections")
#: The choices whose effective bets the overfitting table shows (the books a run ships).
BOOKS = (("book_train", "own book"), ("book_validation", "book chosen on validation"))
#: The targets: an own book of at least this many effective bets (on the search window), a PBO below this.
MIN_BETS = 5.0
MAX_PBO = 0.2
#: The budgets the first target compares: the long evolve run against the short one.
LONG_CALLS, SHORT_CALLS = 10_000, 1_600


def fold_row(arm: str, calls: int, seed: int, result: dict[str, Any], seconds: float | None = None) -> dict[str, Any]:
    """One line of RESULTS/walk-forward/ARM.jsonl from a `score_fold` result (its formulas but no per-formula rows)."""
    f = result["fold"]
    return {"arm": arm, "calls": int(calls), "seed": int(seed), "fold": int(f["fold"]),
            "windows": {w: [f[w]["start"], f[w]["end"]] for w in ("search", "validation", "test")},
            "selections": {k: {kk: v[kk] for kk in ("n", "train_cpcv", "validation", "validation_valid", "test",
                                                      "test_valid", "effective_bets", "formulas") if kk in v}
                           for k, v in result["selections"].items()},
            **{k: result[k] for k in ("pbo", "reference") if result.get(k) is not None},
            "seconds": None if seconds is None else round(float(seconds), 1)}


def write_fold_rows(folder: Path, arm: str, rows: Sequence[dict]) -> Path:
    """FOLDER/ARM.jsonl: the rows already kept there and these, one per (calls, seed, fold), each sealed."""
    path = Path(folder) / f"{arm}.jsonl"
    kept = read_rows(path) if path.exists() else []
    key = lambda r: (r["calls"], r["seed"], r["fold"])    # noqa: E731  (a row's identity)
    new = {key(r) for r in rows}
    merged = sorted([r for r in kept if key(r) not in new] + list(rows), key=key)
    write_rows(path, merged)
    return path


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _measures_problem(r: dict) -> str | None:
    """What is wrong with a row's PBO, effective bets or reference (None: each absent, or well formed)."""
    pbo = r.get("pbo")
    if pbo is not None:
        if not isinstance(pbo, dict) or "pbo" not in pbo:
            return "its pbo is not an object with a pbo"
        if pbo["pbo"] is not None and not (_is_number(pbo["pbo"]) and 0 <= pbo["pbo"] <= 1):
            return f"its PBO {pbo['pbo']!r} is not a probability"
    ref = r.get("reference")
    if ref is not None and not (isinstance(ref, dict) and all(ref.get(k) is None or _is_number(ref.get(k))
                                                               for k in ("validation", "test"))):
        return "its reference is not an object with a validation and a test score"
    if not isinstance(r["selections"], dict) or not all(isinstance(v, dict) for v in r["selections"].values()):
        return "its selections are not objects"
    for key, sel in r["selections"].items():
        bets = sel.get("effective_bets")
        if bets is None:
            continue
        if not isinstance(bets, dict) or not all(v is None or (_is_number(v) and v >= 0) for v in bets.values()):
            return f"{key}'s effective bets are not a count (or None) per window"
    return None


def read_fold_rows(folder: Path) -> list[dict]:
    """Every walk-forward row kept in `folder`'s *.jsonl (KeptError for a damaged or edited file, or a row whose
    measures are not numbers where numbers belong)."""
    rows = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for n, r in enumerate(read_rows(path), start=1):
            if not isinstance(r, dict) or any(k not in r for k in ROW_KEYS):
                raise KeptError(f"{path}: a line without {', '.join(ROW_KEYS)}: not a walk-forward row")
            problem = _measures_problem(r)
            if problem:
                raise KeptError(f"{path}: row {n} ({r['arm']}, seed {r['seed']}, fold {r['fold']}): {problem}")
            rows.append(r)
    return rows


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95% Student-t interval of the mean (None for fewer than two values)."""
    from scipy.stats import t
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def _cells(rows: Sequence[dict], key: str, window: str) -> dict[int, float]:
    """fold -> the mean over seeds of the choice's score on `window` (folds where no seed has one left out)."""
    by_fold: dict[int, list[float]] = {}
    for r in rows:
        v = r["selections"].get(key, {}).get(window)
        if v is not None:
            by_fold.setdefault(int(r["fold"]), []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sorted(by_fold.items())}


def _mean_text(cells: dict[int, float], n_folds: int) -> str:
    """The mean over the folds with a score and its interval; how many folds, where some had none."""
    if not cells:
        return "-"
    values = list(cells.values())
    mean = sum(values) / len(values)
    ci = t_interval(values)
    return (f"{mean:+.2f}" + ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")
            + ("" if len(values) == n_folds else f" ({len(values)} of {n_folds} folds)"))


def table_lines(rows: Sequence[dict]) -> list[str]:
    """The walk-forward section of comparison.md (empty without rows)."""
    if not rows:
        return []
    folds = sorted({int(r["fold"]) for r in rows})
    tests = {int(r["fold"]): r["windows"]["test"] for r in rows}
    lines = ["", "Walk-forward (each run on a fold's search window only; test = the fold's test window, the mean "
             "score of the choice's members valid there, averaged over seeds; mean over folds with a 95% t-interval "
             "over folds): " + "; ".join(f"fold {k} test {tests[k][0]}..{tests[k][1]}" for k in folds) + ".", "",
             "| arm | calls | seeds | choice | " + " | ".join(f"fold {k}" for k in folds)
             + " | mean over folds [95% CI] | validation mean |",
             "|---|---:|---:|---|" + "---:|" * len(folds) + "---|---:|"]
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["arm"], int(r["calls"])), []).append(r)
    for (arm, calls), group in sorted(groups.items()):
        seeds = sorted({int(r["seed"]) for r in group})
        for key, label in SHOWN:
            test, validation = _cells(group, key, "test"), _cells(group, key, "validation")
            v = list(validation.values())
            lines.append(f"| {arm} | {calls:,} | {len(seeds)} | {label} | "
                         + " | ".join("-" if k not in test else f"{test[k]:+.2f}" for k in folds)
                         + f" | {_mean_text(test, len(folds))} | {'-' if not v else f'{sum(v) / len(v):+.2f}'} |")
    return lines


def _fold_means(rows: Sequence[dict], value) -> dict[int, float]:
    """fold -> the mean over seeds of value(row) (rows where it is None left out; folds with none left out)."""
    by_fold: dict[int, list[float]] = {}
    for r in rows:
        v = value(r)
        if v is not None:
            by_fold.setdefault(int(r["fold"]), []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sorted(by_fold.items())}


def _pbo(r: dict) -> float | None:
    return (r.get("pbo") or {}).get("pbo")


def _bets(key: str, window: str):
    return lambda r: ((r["selections"].get(key) or {}).get("effective_bets") or {}).get(window)


def _reference_test(r: dict) -> float | None:
    return (r.get("reference") or {}).get("test")


def _mean(cells: dict[int, float]) -> float | None:
    return sum(cells.values()) / len(cells) if cells else None


def _text(x: float | None, spec: str = "+.2f") -> str:
    return "n/a" if x is None else format(x, spec)


def overfitting_lines(rows: Sequence[dict]) -> list[str]:
    """Per arm and budget: the PBO of the run's selection and the effective bets of the books it ships, per fold
    (the mean over seeds) and over folds; rows without them read n/a."""
    if not rows:
        return []
    folds = sorted({int(r["fold"]) for r in rows})
    pnl = next((r["pbo"]["pnl"] for r in rows if isinstance(r.get("pbo"), dict) and r["pbo"].get("pnl")), None)
    lines = ["", "Overfitting and breadth (PBO: CSCV over "
             + (f"{pnl}" if pnl else "each run's pool's daily net P&L on its search window")
             + ", mean over seeds; effective bets: 1 / sum of squared eigenvalue shares of the book's members' "
             "P&L correlations, on the search window and on the test window; n/a: rows made before they were "
             "measured):", "",
             "| arm | calls | measure | " + " | ".join(f"fold {k}" for k in folds) + " | mean over folds |",
             "|---|---:|---|" + "---:|" * len(folds) + "---:|"]
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["arm"], int(r["calls"])), []).append(r)
    measures = [("PBO of the run's selection", _pbo, ".2f")] + [
        (f"{label}, effective bets ({window})", _bets(key, window), ".1f")
        for key, label in BOOKS for window in ("search", "test")]
    for (arm, calls), group in sorted(groups.items()):
        for label, value, spec in measures:
            cells = _fold_means(group, value)
            lines.append(f"| {arm} | {calls:,} | {label} | "
                         + " | ".join(_text(cells.get(k), spec) for k in folds) + f" | {_text(_mean(cells), spec)} |")
    reference = _fold_means(rows, _reference_test)
    if reference:
        formula = next(r["reference"]["formula"] for r in rows if r.get("reference"))
        lines.append(f"| {formula} | - | test score (search-window validity) | "
                     + " | ".join(_text(reference.get(k)) for k in folds) + f" | {_text(_mean(reference))} |")
    return lines


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("holds" if ok else "fails")


def _compare(a: float | None, b: float | None, op) -> bool | None:
    return None if a is None or b is None else bool(op(a, b))


def target_lines(rows: Sequence[dict]) -> list[str]:
    """The comparison's targets read off the rows (means over folds, each fold the mean over seeds): evolve's book
    at LONG_CALLS at or above its SHORT_CALLS book and above the random pool; per arm and budget, the own book at
    MIN_BETS effective bets or more (search window), the PBO below MAX_PBO, and on the last fold the own book's test
    score at or above the reference formula's. A target without the rows it reads says n/a."""
    if not rows:
        return []
    import operator
    by = lambda arm, calls: [r for r in rows if r["arm"] == arm and int(r["calls"]) == calls]   # noqa: E731
    test_mean = lambda group, key: _mean(_cells(group, key, "test"))                                # noqa: E731
    calls_seen = sorted({int(r["calls"]) for r in rows if r["arm"] == "random"})
    random_pool = test_mean(by("random", calls_seen[-1]), "pool") if calls_seen else None
    lines = ["", f"Targets (means over folds; random pool {_text(random_pool)}"
             + (f" at {calls_seen[-1]:,} calls" if calls_seen else "") + "):", ""]
    long, short = by("evolve", LONG_CALLS), by("evolve", SHORT_CALLS)
    for key, label in BOOKS:
        a, b = test_mean(long, key), test_mean(short, key)
        lines.append(f"- evolve {label} at {LONG_CALLS:,} calls {_text(a)} >= at {SHORT_CALLS:,} {_text(b)}: "
                     f"{_verdict(_compare(a, b, operator.ge))}; > random pool {_text(random_pool)}: "
                     f"{_verdict(_compare(a, random_pool, operator.gt))}")
    last = max(int(r["fold"]) for r in rows)
    reference = _fold_means(rows, _reference_test).get(last)
    groups = sorted({(r["arm"], int(r["calls"])) for r in rows}, key=lambda g: (g[0] != "evolve", g))
    for arm, calls in groups:
        group = by(arm, calls)
        bets = _mean(_fold_means(group, _bets("book_train", "search")))
        pbo = _mean(_fold_means(group, _pbo))
        own_last = _cells(group, "book_train", "test").get(last)
        lines.append(f"- {arm} {calls:,}: own book {_text(bets, '.1f')} effective bets >= {MIN_BETS:g}: "
                     f"{_verdict(_compare(bets, MIN_BETS, operator.ge))}; PBO {_text(pbo, '.2f')} < {MAX_PBO:g}: "
                     f"{_verdict(_compare(pbo, MAX_PBO, operator.lt))}; fold {last} own book test {_text(own_last)} "
                     f">= {REFERENCE_NAME} {_text(reference)}: {_verdict(_compare(own_last, reference, operator.ge))}")
    return lines


def write_walk_forward_table(kept: Path, folders) -> list[str]:
    """walk-forward.md into each of `folders` from the rows kept in `kept` (nothing, and [], where there is none);
    returns the table's lines, which the comparison appends to comparison.md."""
    rows = read_fold_rows(kept)
    lines = table_lines(rows)
    if lines:
        lines += overfitting_lines(rows) + target_lines(rows)
        for folder in folders:
            (Path(folder) / "walk-forward.md").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    return lines

