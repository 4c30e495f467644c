"""The walk-forward table (trainers/compare/walk_forward.py), the runs behind it (benchmarks/walk_forward.py), and
the comparison page that shows it (comparison.md's walk-forward section), with the runs' PBO, effective bets and
the targets read off the rows."""

from __future__ import annotations

import json

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import KeptError
from alpha_gym.evaluation.walk_forward import SELECTIONS
from trainers.compare.walk_forward import (FOLDER, SHOWN, overfitting_lines, read_fold_rows, t_interval, table_lines,
                                           target_lines, write_fold_rows, write_walk_forward_table)


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


def _bench_args(market_csv, folder, *more):
    return ["--data", str(market_csv), "--universe", "", "--budget", "16", "--seeds", "0", "--folds", "5",
            "--sessions", "60", "--out", str(folder / "runs"), "--results", str(folder / "kept"), *more]


@pytest.fixture(scope="module")
def bench_runs(market_csv, tmp_path_factory):
    """The benchmark's three arms on fold 5 of the smoke market, run once: (its folder, what it printed)."""
    import contextlib
    import io
    from benchmarks.walk_forward import main as bench
    folder = tmp_path_factory.mktemp("bench")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert bench(_bench_args(market_csv, folder)) == 0
    return folder, printed.getvalue()


def test_the_benchmark_runs_each_arm_on_a_fold_keeps_a_row_and_skips_it_after(market_csv, bench_runs, capsys):
    from benchmarks.walk_forward import main as bench
    tmp_path, out = bench_runs
    args = _bench_args(market_csv, tmp_path)
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
    assert all(r["pbo"]["n_blocks"] == 16 and r["reference"]["formula"] == "rank(volume)"
               and set(r["selections"]["book_train"]["effective_bets"]) == {"search", "validation", "test"}
               for r in rows)
    assert "Targets (means over folds" in (tmp_path / "kept" / "walk-forward.md").read_text()
    capsys.readouterr()
    assert bench(args) == 0                                    # every row kept: nothing runs again
    assert "===" not in capsys.readouterr().out


def _without_measures(row):
    return {**{k: v for k, v in row.items() if k not in ("pbo", "reference")},
            "selections": {k: {kk: vv for kk, vv in v.items() if kk != "effective_bets"}
                           for k, v in row["selections"].items()}}


def test_the_measures_are_added_to_kept_rows_from_their_run_folders(market_csv, bench_runs, tmp_path, capsys):
    """Rows kept before the measures get them from their run folders without a search run again: the same
    numbers a new run writes; a row its run folder does not give again, or one without a folder, is refused."""
    import shutil
    from alpha_gym.evaluation.kept import write_rows
    from benchmarks.walk_forward import main as bench
    shutil.copytree(bench_runs[0] / "kept", tmp_path / "kept")
    (tmp_path / "runs").symlink_to(bench_runs[0] / "runs")
    measured = {r["arm"]: r for r in read_fold_rows(tmp_path / "kept")}
    for arm, row in measured.items():
        write_rows(tmp_path / "kept" / f"{arm}.jsonl", [_without_measures(row)])
    assert "| n/a |" in "\n".join(write_walk_forward_table(tmp_path / "kept", [tmp_path]))
    assert bench(_bench_args(market_csv, tmp_path, "--add-overfitting")) == 0
    assert "PBO" in capsys.readouterr().out
    assert {r["arm"]: r for r in read_fold_rows(tmp_path / "kept")} == measured
    # a kept row its run folder does not give again (its own book's test score edited, and sealed again)
    row = _without_measures(measured["random"])
    row["selections"]["book_train"]["test"] = 9.0
    write_rows(tmp_path / "kept" / "random.jsonl", [row])
    with pytest.raises(SystemExit, match="does not give the kept row .random, seed 0, fold 5, 16 calls.: "
                                         "book_train's test score"):
        bench(_bench_args(market_csv, tmp_path, "--add-overfitting"))
    with pytest.raises(SystemExit, match="no run folder .*fold-5/seed-0/random-16"):
        bench(_bench_args(market_csv, tmp_path, "--add-overfitting", "--out", str(tmp_path / "elsewhere")))


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


# ------------------------------------------------------------------------------ PBO, effective bets and the targets
def _measured(arm, seed, fold, test, pbo, bets, calls=1600, reference=0.2, validation_book=None):
    row = _row(arm, seed, fold, test, calls=calls)
    for key, sel in row["selections"].items():
        sel["effective_bets"] = {"search": bets, "validation": None, "test": bets / 2}
    if validation_book is not None:
        row["selections"]["book_validation"]["test"] = validation_book
    return {**row, "pbo": {"pbo": pbo, "pnl": "daily net P&L on the search window", "n_candidates": 10},
            "reference": {"formula": "rank(volume)", "train_valid": True, "validation": 0.0, "test": reference}}


def _line(lines, start, has):
    return next(line for line in lines if line.startswith(start) and has in line)


def test_the_overfitting_table_is_the_mean_over_seeds_then_folds():
    rows = [_measured("evolve", 0, 1, 1.0, 0.1, 4.0), _measured("evolve", 1, 1, 1.0, 0.3, 8.0),
            _measured("evolve", 0, 2, 1.0, 0.5, 9.0, reference=0.4)]
    lines = overfitting_lines(rows)
    assert _line(lines, "| evolve |", "PBO") == "| evolve | 1,600 | PBO of the run's selection | 0.20 | 0.50 | 0.35 |"
    assert _line(lines, "| evolve |", "own book, effective bets (search)").endswith("| 6.0 | 9.0 | 7.5 |")
    assert _line(lines, "| evolve |", "own book, effective bets (test)").endswith("| 3.0 | 4.5 | 3.8 |")
    assert _line(lines, "| rank(volume) |", "test").endswith("| +0.20 | +0.40 | +0.30 |")
    assert "daily net P&L on the search window" in lines[1]


def test_the_targets_read_the_rows():
    folds = (1, 2, 3, 4, 5)
    rows = ([_measured("evolve", 0, k, 0.5, 0.1, 6.0, calls=10_000, reference=-0.5, validation_book=0.0)
             for k in folds]
            + [_measured("evolve", 0, k, 0.2, 0.3, 4.0, reference=-0.5, validation_book=0.4) for k in folds]
            + [_measured("random", 0, k, -0.1, 0.5, 5.0, reference=-0.5) for k in folds])
    for r in rows:
        if r["arm"] == "random":
            r["selections"]["pool"]["test"] = 0.1 * r["fold"] - 0.4      # mean over folds -0.10
    lines = target_lines(rows)
    assert lines[1] == "Targets (means over folds; random pool -0.10 at 1,600 calls):"
    assert _line(lines, "- evolve own book", "10,000") == ("- evolve own book at 10,000 calls +0.50 >= at 1,600 "
                                                            "+0.20: holds; > random pool -0.10: holds")
    assert _line(lines, "- evolve book chosen", "10,000") == ("- evolve book chosen on validation at 10,000 calls "
                                                               "+0.00 >= at 1,600 +0.40: fails; > random pool -0.10: "
                                                               "holds")
    assert _line(lines, "- evolve 10,000:", "") == ("- evolve 10,000: own book 6.0 effective bets >= 5: holds; PBO "
                                                     "0.10 < 0.2: holds; fold 5 own book test +0.50 >= rank(volume) "
                                                     "-0.50: holds")
    assert "own book 4.0 effective bets >= 5: fails; PBO 0.30 < 0.2: fails" in _line(lines, "- evolve 1,600:", "")
    assert "own book 5.0 effective bets >= 5: holds; PBO 0.50 < 0.2: fails; fold 5 own book test -0.10 >= " \
           "rank(volume) -0.50: holds" in _line(lines, "- random 1,600:", "")
    # the evolve lines come first, then the other arms
    assert [line.split()[1] for line in lines[3:]] == ["evolve"] * 4 + ["random"]


def test_rows_made_before_the_measures_read_and_show_n_a(tmp_path):
    folder = tmp_path / FOLDER
    write_fold_rows(folder, "evolve", [_row("evolve", 0, 1, 1.0), _row("evolve", 0, 5, 2.0)])
    lines = write_walk_forward_table(folder, [tmp_path])
    page = (tmp_path / "walk-forward.md").read_text()
    assert "| evolve | 1,600 | PBO of the run's selection | n/a | n/a | n/a |" in page
    assert "- evolve 1,600: own book n/a effective bets >= 5: n/a; PBO n/a < 0.2: n/a; fold 5 own book test " \
           "+2.00 >= rank(volume) n/a: n/a" in page
    assert "- evolve own book at 10,000 calls n/a >= at 1,600 +1.50: n/a; > random pool n/a: n/a" in page
    assert lines[-1].startswith("- evolve 1,600")
    # a row with the measures beside older ones: each fold shows what its rows have
    write_fold_rows(folder, "evolve", [_measured("evolve", 0, 5, 2.0, 0.25, 3.0)])
    page = "\n".join(write_walk_forward_table(folder, [tmp_path]))
    assert "| evolve | 1,600 | PBO of the run's selection | n/a | 0.25 | 0.25 |" in page


def _damaged_measures():
    """Rows whose measures are not what score_fold writes (each sealed: the hash does not catch them; a NaN or an
    infinity cannot reach a kept row: the JSON writer writes it as null, which reads as n/a)."""
    good = _measured("evolve", 0, 1, 1.0, 0.3, 4.0)
    cases = {}
    for name, value in [("a string", "0.3"), ("negative", -0.1), ("above one", 1.5), ("a boolean", True),
                        ("a list", [0.3]), ("an object", {"pbo": 0.3})]:
        cases[f"pbo {name}"] = {**good, "pbo": {**good["pbo"], "pbo": value}}
    for name, value in [("a number", 0.3), ("a string", "0.3"), ("a list", [0.3]), ("without pbo", {"n": 3})]:
        cases[f"pbo object {name}"] = {**good, "pbo": value}
    for name, value in [("a string", "4"), ("negative", -1.0), ("a boolean", False), ("a list", [4.0]),
                        ("an object", {"n": 4})]:
        sel = {k: dict(v) for k, v in good["selections"].items()}
        sel["book_train"]["effective_bets"] = {"search": value, "test": 2.0}
        cases[f"bets {name}"] = {**good, "selections": sel}
    for name, value in [("a number", 4.0), ("a string", "4"), ("a list", [4.0])]:
        sel = {k: dict(v) for k, v in good["selections"].items()}
        sel["book_validation"]["effective_bets"] = value
        cases[f"bets object {name}"] = {**good, "selections": sel}
    for name, value in [("a number", 0.2), ("a string", "rank(volume)"), ("test a string", {"test": "0.2"}),
                        ("test a boolean", {"test": True}), ("validation a list", {"validation": [0.1]})]:
        cases[f"reference {name}"] = {**good, "reference": value}
    sel = dict(good["selections"], pool="not a selection")
    cases["a selection not an object"] = {**good, "selections": sel}
    return cases


@pytest.mark.parametrize("name", sorted(_damaged_measures()))
def test_a_row_with_damaged_measures_is_refused_naming_it(tmp_path, name):
    from alpha_gym.evaluation.kept import write_rows
    folder = tmp_path / FOLDER
    folder.mkdir()
    write_rows(folder / "evolve.jsonl", [_row("evolve", 0, 2, 0.0), _damaged_measures()[name]])
    with pytest.raises(KeptError) as err:
        read_fold_rows(folder)
    message = str(err.value)
    assert "row 2 (evolve, seed 0, fold 1)" in message and "\n" not in message
