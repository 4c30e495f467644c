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
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from alpha_gym.evaluation.kept import KeptError, read_rows, write_rows

FOLDER = "walk-forward"
#: The choices the table shows for each arm (keys of `walk_forward.SELECTIONS`), in order.
SHOWN = (("book_train", "own book (chosen on train)"), ("book_validation", "book chosen on validation"),
         ("best_train", "best by train reward"), ("best_validation", "best by validation"),
         ("top_validation", "top 20 by validation"), ("pool", "pool, unselected"))
ROW_KEYS = ("arm", "calls", "seed", "fold", "windows", "selections")


def fold_row(arm: str, calls: int, seed: int, result: dict[str, Any], seconds: float | None = None) -> dict[str, Any]:
    """One line of RESULTS/walk-forward/ARM.jsonl from a `score_fold` result (its formulas but no per-formula rows)."""
    f = result["fold"]
    return {"arm": arm, "calls": int(calls), "seed": int(seed), "fold": int(f["fold"]),
            "windows": {w: [f[w]["start"], f[w]["end"]] for w in ("search", "validation", "test")},
            "selections": {k: {kk: v[kk] for kk in ("n", "train_cpcv", "validation", "validation_valid", "test",
                                                      "test_valid", "formulas")}
                           for k, v in result["selections"].items()},
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


def read_fold_rows(folder: Path) -> list[dict]:
    """Every walk-forward row kept in `folder`'s *.jsonl (KeptError for a damaged or edited file)."""
    rows = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for r in read_rows(path):
            if not isinstance(r, dict) or any(k not in r for k in ROW_KEYS):
                raise KeptError(f"{path}: a line without {', '.join(ROW_KEYS)}: not a walk-forward row")
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


def write_walk_forward_table(kept: Path, folders) -> list[str]:
    """walk-forward.md into each of `folders` from the rows kept in `kept` (nothing, and [], where there is none);
    returns the table's lines, which the comparison appends to comparison.md."""
    lines = table_lines(read_fold_rows(kept))
    if lines:
        for folder in folders:
            (Path(folder) / "walk-forward.md").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    return lines

