"""A run on a walk-forward fold ships what it chooses on the validation window (alpha_gym/evaluation/shipped.py,
alpha_gym/search/evolve_arm.py `ship_on_validation`): its book.json, the kept NAME.book.json and NAME.json's
"shipped" hold the book and best that `walk_forward.score_fold` calls "chosen on validation", the book chosen on
train kept beside it for score_fold's "own book" row; the test window reaches none of it, a run on no fold ships as
before, and a damaged book read back is refused in one line."""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from alpha_gym.commands.main import main
from alpha_gym.errors import InputError
from alpha_gym.evaluation.kept import read_object
from alpha_gym.evaluation.shipped import ON_TRAIN, ON_VALIDATION, choose_to_ship
from alpha_gym.evaluation.walk_forward import PoolEntry, WalkForwardError, score_fold
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.evolve_arm import SHIPPED_KEYS, TRAIN_BOOK_KEY, run_pool, shipped_book, train_book_of
from trainers.compare.arms.kept import _finished_book
from fold_markets import scrambled_market_files  # fold 5's market, its later sessions shuffled

#: Fold windows of 60 sessions on the 800-session market (fold 5's search window: its first 428 sessions).
SESSIONS = 60
#: Calls of each run: 96 give an archive of several formulas (the choice on validation has candidates to move among).
BUDGET = 96


@pytest.fixture(scope="module")
def market(tmp_path_factory, write_market_csv):
    return scrambled_market_files(tmp_path_factory.mktemp("market"), write_market_csv, SESSIONS)


def evolve(csv, out, *more, budget=BUDGET) -> str:
    """`alpha-gym evolve` on the small market; what it printed (it must succeed)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["evolve", "--data", str(csv), "--budget", str(budget), "--group-size", "8", "--islands", "2",
                     "--pseudo-holdout", str(SESSIONS), "--probe", "2", "--workers", "1", "--out", str(out), *more])
    assert code == 0, printed.getvalue()
    return printed.getvalue()


def run_folder(root, which):
    """A run's folder as a comparison lays it out (OUT/seed-S/NAME), so `arm_pool` finds it."""
    return root / which / "seed-0" / "evolve"


@pytest.fixture(scope="module")
def runs(market, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    printed = {which: evolve(market[which], run_folder(root, which), "--fold", "5")
               for which in ("plain", "test", "validation+test")}
    return root, printed


def book(root, which):
    return json.loads((run_folder(root, which) / "book.json").read_text())


def kept(root, which, suffix):
    return read_object(run_folder(root, which) / "results" / "seed-0" / f"evolve{suffix}")


def test_the_shipped_book_is_score_folds_book_chosen_on_validation(runs):
    root, _ = runs
    shipped = book(root, "plain")
    scored = json.loads((run_folder(root, "plain") / "walk-forward.json").read_text())["selections"]
    assert shipped["chosen_on"] == ON_VALIDATION and shipped["fallback"] is None
    assert shipped["members"] == scored["book_validation"]["formulas"] and shipped["members"]
    assert [shipped["best"]["formula"]] == scored["best_validation"]["formulas"]
    assert [shipped["train_best"]["formula"]] == scored["best_train"]["formulas"]
    # the train book beside it is what score_fold scored as the run's own book
    assert shipped[TRAIN_BOOK_KEY]["members"] == scored["book_train"]["formulas"]
    assert shipped["members"] != shipped[TRAIN_BOOK_KEY]["members"]      # this run's two books differ
    rows = {r["formula"]: r for r in (json.loads(line) for line in
                                      (run_folder(root, "plain") / "walk-forward.jsonl").read_text().splitlines())}
    assert shipped["member_validation"] == [rows[f]["validation"] for f in shipped["members"]]
    assert shipped["best"]["validation"] == rows[shipped["best"]["formula"]]["validation"] == \
        max(rows[f]["validation"] for f in rows if "shortlist" in rows[f]["in"] and rows[f]["validation"] is not None)
    assert (shipped["rule"]["shortlist"], shipped["rule"]["candidates"]) == \
        (100, sum("shortlist" in r["in"] for r in rows.values()))
    assert (shipped["rule"]["max_corr"], shipped["rule"]["min_turnover"]) == (0.5, 0.02)
    # the kept files ship the same, and NAME.json says what was chosen
    run_book = kept(root, "plain", ".book.json")
    assert {k: run_book[k] for k in SHIPPED_KEYS} == {k: shipped[k] for k in SHIPPED_KEYS}
    assert run_book["members"] == shipped["members"]
    numbers = kept(root, "plain", ".json")
    assert numbers["shipped"] == {k: shipped[k] for k in ("chosen_on", "rule", "fallback", "best", "train_best")}
    assert numbers["best_reward"] == shipped["train_best"]["reward"]    # the curve's train best stays as it was


def test_the_printed_summary_names_the_best_by_validation_beside_the_train_best(runs):
    root, printed = runs
    shipped = book(root, "plain")
    lines = printed["plain"].splitlines()
    assert "evolve: ships the book and best chosen on the fold's validation window" in printed["plain"]
    best, train = shipped["best"], shipped["train_best"]
    assert f"evolve: best by validation {best['formula']} (validation {best['validation']:+.3f}, " \
           f"train reward {best['reward']:+.3f})" in lines
    assert f"evolve: best by train reward {train['formula']} (validation {train['validation']:+.3f}, " \
           f"train reward {train['reward']:+.3f})" in lines
    assert best["formula"] != train["formula"]


def _shipped_lines(text):
    return [line for line in text.splitlines() if line.startswith("evolve: ") and " in " not in line]


def test_scrambling_the_test_window_leaves_the_shipped_book_and_best_bit_identical(runs):
    root, printed = runs
    for name in ("book.json", "results/seed-0/evolve.book.json"):
        assert (run_folder(root, "test") / name).read_bytes() == (run_folder(root, "plain") / name).read_bytes(), name
    assert kept(root, "test", ".json")["shipped"] == kept(root, "plain", ".json")["shipped"]
    assert _shipped_lines(printed["test"]) == _shipped_lines(printed["plain"])
    # the walk-forward scores read the test window afterwards: they do move
    assert (run_folder(root, "test") / "walk-forward.jsonl").read_bytes() != \
        (run_folder(root, "plain") / "walk-forward.jsonl").read_bytes()


def test_scrambling_the_validation_window_moves_the_shipped_choice_and_nothing_the_run_chose(runs):
    root, _ = runs
    plain, later = book(root, "plain"), book(root, "validation+test")
    assert (run_folder(root, "validation+test") / "proposals.jsonl").read_bytes() == \
        (run_folder(root, "plain") / "proposals.jsonl").read_bytes()
    assert plain[TRAIN_BOOK_KEY] == later[TRAIN_BOOK_KEY] and plain["train_best"]["formula"] == later["train_best"]["formula"]
    assert (plain["members"], plain["best"]["formula"]) != (later["members"], later["best"]["formula"])
    assert later["chosen_on"] == ON_VALIDATION


def test_arm_pool_hands_score_fold_the_train_book_never_the_shipped_one(runs, market):
    from trainers.compare.arms import RunContext
    from trainers.compare.folds import arm_pool
    root, _ = runs
    context = RunContext(scale_name="smoke", scale=None, model=None, data=None, universe=None, verifier_config=None,
                         train=None, holdout=None, probe=(), out=root / "plain", results=root / "plain" / "results")
    pool, train_members = arm_pool(context, "evolve", 0)
    shipped = book(root, "plain")
    assert list(train_members) == shipped[TRAIN_BOOK_KEY]["members"] != shipped["members"]
    assert (pool, train_members) == run_pool(run_folder(root, "plain"))
    panels = market["panels"]
    scored = score_fold(pool, Verifier(panels.search), panels, book=train_members)["selections"]
    assert scored["book_train"]["formulas"] == shipped[TRAIN_BOOK_KEY]["members"]
    assert scored["book_validation"]["formulas"] == shipped["members"]


def test_a_resumed_fold_run_and_a_rerun_ship_the_same_book(runs, market, tmp_path):
    root, _ = runs
    out = tmp_path / "resumed"
    evolve(market["plain"], out, "--fold", "5", budget=BUDGET // 2)
    half = json.loads((out / "book.json").read_text())
    assert half["chosen_on"] == ON_VALIDATION
    evolve(market["plain"], out, "--fold", "5")                   # resumed: a larger budget goes on
    assert (out / "book.json").read_bytes() == (run_folder(root, "plain") / "book.json").read_bytes()
    evolve(market["plain"], out, "--fold", "5")                   # a rerun of the finished run
    assert (out / "book.json").read_bytes() == (run_folder(root, "plain") / "book.json").read_bytes()
    # the kept files at a budget prefix ship what a run of that budget shipped
    evolve(market["plain"], out, "--fold", "5", "--keep-at", str(BUDGET // 2), "--results", str(tmp_path / "at"))
    at = read_object(tmp_path / "at" / "seed-0" / "evolve.book.json")
    assert {k: at[k] for k in ("members", *SHIPPED_KEYS)} == {k: half[k] for k in ("members", *SHIPPED_KEYS)}


def test_a_run_on_no_fold_ships_the_engine_book_as_before(market, tmp_path):
    out = tmp_path / "nofold"
    printed = evolve(market["plain"], out, budget=32)
    d = json.loads((out / "book.json").read_text())
    assert sorted(d) == sorted(["calls", "groups", "n_admitted", "n_members", "effective_bets", "members",
                                "selection"])
    assert not set(SHIPPED_KEYS) & set(read_object(out / "results" / "seed-0" / "evolve.book.json"))
    assert "shipped" not in read_object(out / "results" / "seed-0" / "evolve.json")
    assert "validation" not in printed and (out / "walk-forward.json").exists() is False
    assert run_pool(out)[1] == tuple(d["members"])


# ------------------------------------------------------------------ no candidate to choose on validation
def test_with_no_candidate_valid_on_validation_the_train_choice_ships_and_says_so(market):
    panels = market["panels"]
    verifier = Verifier(panels.search)
    refused = ["close", "1", "volume * 0", "rank(close) * 0"]   # static or empty books: refused on the search window
    assert not any(verifier.valid_book(f) for f in refused)
    pool = [PoolEntry(f, 1.0 - k, None) for k, f in enumerate(refused)]
    choice = choose_to_ship(pool, verifier, panels, max_corr=0.5, min_turnover=0.02)
    assert choice["chosen_on"] == ON_TRAIN and "none of the 4 candidates is valid" in choice["fallback"]
    assert choice["book"] is None and choice["best"] == choice["train_best"]
    assert choice["best"] == {"formula": "close", "reward": 1.0, "validation": None}
    train = {"n_admitted": 4, "n_members": 1, "effective_bets": 1.0, "members": ["rank(open)"], "selection": {}}
    shipped = shipped_book(train, choice)
    assert shipped["members"] == ["rank(open)"] and shipped["chosen_on"] == ON_TRAIN
    assert train_book_of(shipped)["members"] == ["rank(open)"]
    # an empty pool: nothing to choose, said so
    empty = choose_to_ship([], verifier, panels, max_corr=0.5, min_turnover=0.02)
    assert empty["chosen_on"] == ON_TRAIN and empty["best"] is None and "empty pool" in empty["fallback"]


def test_a_verifier_of_another_window_is_refused(market):
    panels = market["panels"]
    with pytest.raises(WalkForwardError, match="search window"):
        choose_to_ship([PoolEntry("rank(close)", 1.0, 0.1)], Verifier(market["panel"]), panels, max_corr=0.5,
                       min_turnover=0.02)


# ------------------------------------------------------------------ a damaged book read back
def _damaged() -> dict[str, object]:
    """Shipped books edited or cut, each naming what is wrong with it (generated: every key dropped, wrong types)."""
    cases: dict[str, object] = {}
    good = {"calls": 96, "groups": 12, "n_admitted": 2, "n_members": 1, "effective_bets": 1.0, "members": ["a"],
            "selection": {}, "chosen_on": "validation", "rule": {}, "fallback": None, "best": None,
            "train_best": None, "member_validation": [0.1],
            TRAIN_BOOK_KEY: {"n_members": 1, "effective_bets": 1.0, "members": ["b"], "selection": {}}}
    for key in ("n_admitted", "n_members", "effective_bets", "members", "selection", *SHIPPED_KEYS):
        cases[f"no {key}"] = {k: v for k, v in good.items() if k != key}
    for bad in (None, "a", 1, {"a": 1}, [1], [None], [["a"]], [{"a": 1}], ["a", 2]):
        cases[f"members = {bad!r}"] = {**good, "members": bad}
        cases[f"train members = {bad!r}"] = {**good, TRAIN_BOOK_KEY: {**good[TRAIN_BOOK_KEY], "members": bad}}
    for bad in (None, "", "Validation", "test", "train ", 1, True, ["validation"], {"on": "validation"}):
        cases[f"chosen_on = {bad!r}"] = {**good, "chosen_on": bad}
    for bad in (None, "b", ["b"], 1, {}):
        cases[f"train_book = {bad!r}"] = {**good, TRAIN_BOOK_KEY: bad}
    for key in ("n_members", "effective_bets", "members", "selection"):
        cases[f"train_book without {key}"] = {**good, TRAIN_BOOK_KEY: {k: v for k, v in good[TRAIN_BOOK_KEY].items()
                                                                        if k != key}}
    cases["chosen on train with other members"] = {**good, "chosen_on": "train"}
    cases["a list"] = [good]
    cases["a string"] = "book"
    cases["null"] = None
    return cases


DAMAGED = _damaged()
#: Bytes no run writes as its book.
BAD_BYTES = {"empty": b"", "cut": b'{"members": ["a"', "not utf-8": b'{"members": ["\xff"]}', "NaN": b'{"a": NaN}',
             "deep": b"[" * 5000 + b"]" * 5000, "binary": b"\x00\x01\x02"}


@pytest.fixture(scope="module")
def finished(runs):
    return run_folder(runs[0], "plain")


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_shipped_book_is_refused_in_one_line(finished, tmp_path, case):
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    (folder / "book.json").write_text(json.dumps(DAMAGED[case]), encoding="utf-8")
    for read in (lambda: run_pool(folder), lambda: _finished_book(folder / "book.json", 12)):
        with pytest.raises(InputError) as err:
            read()
        assert "\n" not in str(err.value) and "book.json" in str(err.value)


@pytest.mark.parametrize("case", sorted(BAD_BYTES))
def test_book_bytes_no_run_writes_are_refused_in_one_line(finished, tmp_path, case):
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    (folder / "book.json").write_bytes(BAD_BYTES[case])
    with pytest.raises(InputError) as err:
        run_pool(folder)
    assert "\n" not in str(err.value) and "book.json" in str(err.value)


@pytest.mark.parametrize("case", ["no train_book", "chosen_on = 'test'", "train members = [1]"])
def test_the_command_reading_a_damaged_book_back_says_so_in_one_line(finished, market, tmp_path, capsys, case):
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    (folder / "book.json").write_text(json.dumps(DAMAGED[case]), encoding="utf-8")
    capsys.readouterr()
    code = main(["evolve", "--data", str(market["plain"]), "--budget", str(BUDGET), "--group-size", "8",
                 "--islands", "2", "--pseudo-holdout", str(SESSIONS), "--probe", "2", "--out", str(folder),
                 "--fold", "5", "--keep-at", str(BUDGET)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "book.json" in err[-1] and "Traceback" not in "\n".join(err)
