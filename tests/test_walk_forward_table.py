"""The walk-forward table (trainers/compare/walk_forward.py), the runs behind it (benchmarks/walk_forward.py), and
the comparison page that shows it (comparison.md's walk-forward section)."""

from __future__ import annotations

import json

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import KeptError
from alpha_gym.evaluation.walk_forward import SELECTIONS
from trainers.compare.walk_forward import (FOLDER, SHOWN, read_fold_rows, t_interval, table_lines, write_fold_rows,
                                           write_walk_forward_table)


def _row(arm, seed, fold, test, validation=0.5, calls=1600):
    sel = {k: {"n": 1, "train_cpcv": 1.0, "validation": validation, "validation_valid": 1, "test": test,
               "test_valid": 1, "formulas": ["rank(volume)"]} for k, _ in SELECTIONS}
    return {"arm": arm, "calls": calls, "seed": seed, "fold": fold,
            "windows": {"search": ["2012-06-29", "x"], "validation": ["a", "b"], "test": [f"t{fold}", f"e{fold}"]},
            "selections": sel, "seconds": 1.0}


def test_the_t_interval_is_students():
    lo, hi = t_interval([1.0, 2.0, 3.0])           # mean 2, sd 1, t(0.975, 2) = 4.3027
    assert (lo, hi) == pytest.approx((2 - 4.3027 / 3 ** 0.5, 2 + 4.3027 / 3 ** 0.5), abs=1e-4)
    assert t_interval([1.0]) is None


def test_each_fold_is_the_mean_over_seeds_and_the_mean_is_over_folds():
    rows = [_row("evolve", 0, 1, 1.0), _row("evolve", 1, 1, 3.0), _row("evolve", 0, 2, -1.0),
            _row("random", 0, 1, 0.25), _row("random", 0, 2, 0.75, validation=None)]
    lines = table_lines(rows)
    assert "fold 1 test t1..e1; fold 2 test t2..e2" in lines[1]
    evolve = [line for line in lines if line.startswith("| evolve |")]
    assert len(evolve) == len(SHOWN)
    lo, hi = t_interval([2.0, -1.0])
    assert evolve[0] == (f"| evolve | 1,600 | 2 | {SHOWN[0][1]} | +2.00 | -1.00 | +0.50 [{lo:+.2f}, {hi:+.2f}] | "
                         "+0.50 |")
    pool = next(line for line in lines if line.startswith("| random |") and "pool, unselected" in line)
    assert "| +0.25 | +0.75 | +0.50 [" in pool and pool.endswith("| +0.50 |")   # validation: fold 2 had none
    # a fold where the choice has no test score is left out of the mean, which says over how many folds it is
    short = table_lines(rows + [_row("search", 0, 1, 0.4)])
    search = next(line for line in short if line.startswith("| search |"))
    assert "| +0.40 | - | +0.40 (1 of 2 folds) |" in search
    assert table_lines([]) == []


def test_kept_rows_merge_by_run_and_an_edited_row_is_refused(tmp_path):
    folder = tmp_path / FOLDER
    write_fold_rows(folder, "evolve", [_row("evolve", 0, 1, 1.0), _row("evolve", 0, 2, 2.0)])
    write_fold_rows(folder, "evolve", [_row("evolve", 0, 2, -2.0), _row("evolve", 1, 2, 0.0)])
    rows = read_fold_rows(folder)
    assert [(r["seed"], r["fold"], r["selections"]["pool"]["test"]) for r in rows] == [(0, 1, 1.0), (0, 2, -2.0),
                                                                                          (1, 2, 0.0)]
    lines = write_walk_forward_table(folder, [tmp_path])
    assert (tmp_path / "walk-forward.md").read_text() == "\n".join(lines[1:]) + "\n"
    path = folder / "evolve.jsonl"
    path.write_text(path.read_text().replace('"test": -2.0', '"test": 9.0'))
    with pytest.raises(KeptError, match="edited"):
        read_fold_rows(folder)


@pytest.fixture(scope="module")
def market_csv(tmp_path_factory, write_market_csv):
    from alpha_gym.market import synthetic_panel
    return write_market_csv(synthetic_panel(n_stocks=20, n_days=800, seed=0),
                            tmp_path_factory.mktemp("market") / "smoke.csv.gz")


def test_the_benchmark_runs_each_arm_on_a_fold_keeps_a_row_and_skips_it_after(market_csv, tmp_path, capsys):
    from benchmarks.walk_forward import main as bench
    args = ["--data", str(market_csv), "--universe", "", "--budget", "16", "--seeds", "0", "--folds", "5",
            "--sessions", "60", "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "kept")]
    assert bench(args) == 0
    out = capsys.readouterr().out
    assert out.count("=== fold 5/5") == 3
    rows = read_fold_rows(tmp_path / "kept")
    assert sorted(r["arm"] for r in rows) == ["evolve", "random", "search"]
    assert all(r["fold"] == 5 and r["calls"] == 16 and set(r["selections"]) == {k for k, _ in SELECTIONS}
               for r in rows)
    for arm in ("evolve", "random", "search"):
        run = tmp_path / "runs" / "fold-5" / "seed-0" / f"{arm}-16"
        summary = json.loads((run / "walk-forward.json").read_text())
        assert summary["fold"]["fold"] == 5 and summary["label"] == arm
    assert (tmp_path / "kept" / "walk-forward.md").exists()
    assert bench(args) == 0                                    # every row kept: nothing runs again
    assert "===" not in capsys.readouterr().out


def test_the_comparison_page_shows_the_kept_walk_forward_rows(market_csv, tmp_path):
    run = tmp_path / "run"
    assert main(["evolve", "--data", str(market_csv), "--budget", "8", "--group-size", "4", "--islands", "2",
                 "--pseudo-holdout", "120", "--probe", "2", "--workers", "1", "--out", str(run)]) == 0
    results = run / "results"
    write_fold_rows(results / FOLDER, "evolve", [_row("evolve", 0, 4, 0.5), _row("evolve", 0, 5, 1.5)])
    table = tmp_path / "table"
    assert main(["compare", "--scale", "smoke", "--report-only", "--data", str(market_csv), "--results",
                 str(results), "--out", str(table)]) == 0
    page = (table / "comparison.md").read_text()
    assert "Walk-forward (each run on a fold's search window only" in page
    assert f"| evolve | 1,600 | 1 | {SHOWN[0][1]} | +0.50 | +1.50 | +1.00 [" in page
    assert (table / "walk-forward.md").exists()
    assert not (results / "comparison.md").exists()            # --report-only leaves the kept folder alone
