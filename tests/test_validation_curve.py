"""A fold run's curve carries the validation score of its best by train reward (alpha_gym/search/evolve_arm.py),
calls.md/calls.png show it beside the train reward (trainers/compare/calls.py), the test window reaches none of it,
and a run on no fold keeps its curve as before."""

from __future__ import annotations

import json

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.validation import ValidationScorer
from alpha_gym.market.folds import fold_panels
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.evolve_arm import VALIDATION_KEY, VALIDATION_LOG, curve_rows, validation_readings
from trainers.compare.calls import VALIDATION_COLUMN, arm_curves, budget_rows, calls_table, write_calls
from fold_markets import scrambled_market_files  # fold 5's market, its later sessions shuffled

#: Fold windows of 60 sessions on the 800-session market (fold 5's search window: its first 428 sessions).
SESSIONS = 60


@pytest.fixture(scope="module")
def market(tmp_path_factory, write_market_csv):
    return scrambled_market_files(tmp_path_factory.mktemp("market"), write_market_csv, SESSIONS)


def evolve_args(csv, out, *more, budget=32):
    return ["evolve", "--data", str(csv), "--budget", str(budget), "--group-size", "4", "--islands", "2",
            "--pseudo-holdout", str(SESSIONS), "--probe", "2", "--workers", "1", "--out", str(out), *more]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _without_seconds(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


@pytest.fixture(scope="module")
def runs(market, tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    out = {}
    for which in ("plain", "test", "validation+test"):
        out[which] = folder / which
        assert main(evolve_args(market[which], out[which], "--fold", "5")) == 0
    return out


def test_each_curve_row_has_the_validation_score_of_its_best_by_train_reward(market, runs, capsys):
    run = runs["plain"]
    curve = _lines(run / "curve.jsonl")
    history = json.loads((run / "state.json").read_text())["history"]
    assert len(curve) == len(history) == 8 and all(VALIDATION_KEY in r for r in curve)
    # scored again here, on a fresh scorer of the fold: the reading of each row's best program
    panels = fold_panels(market["panel"], "5", SESSIONS)
    scorer = ValidationScorer(panels, Verifier(panels.search))
    again = {h["best"]: scorer.reading(h["best"], True)["score"] for h in history}
    assert [r[VALIDATION_KEY] for r in curve] == [again[h["best"]] for h in history]
    assert any(v is not None for v in again.values())
    # each distinct best scored once
    assert sorted(r["formula"] for r in _lines(run / VALIDATION_LOG)) == sorted(again)
    # the kept arm file holds the same curve
    kept = json.loads((run / "results" / "seed-0" / "evolve.json").read_text())
    assert _without_seconds(kept["curve"]) == _without_seconds(curve)


def test_the_test_window_reaches_no_reading_and_the_validation_window_only_the_readings(runs):
    plain, test, later = (runs[k] for k in ("plain", "test", "validation+test"))
    # test window scrambled: the run and every validation reading bit-identical
    assert _without_seconds(_lines(test / "curve.jsonl")) == _without_seconds(_lines(plain / "curve.jsonl"))
    assert (test / VALIDATION_LOG).read_bytes() == (plain / VALIDATION_LOG).read_bytes()
    # validation window scrambled too: the run is the same (it never reads the readings), the readings move
    a, b = _lines(later / "curve.jsonl"), _lines(plain / "curve.jsonl")
    assert (later / "proposals.jsonl").read_bytes() == (plain / "proposals.jsonl").read_bytes()
    assert [{k: v for k, v in r.items() if k not in ("seconds", VALIDATION_KEY)} for r in a] == \
        [{k: v for k, v in r.items() if k not in ("seconds", VALIDATION_KEY)} for r in b]
    assert [r[VALIDATION_KEY] for r in a] != [r[VALIDATION_KEY] for r in b]


def test_calls_md_and_png_show_the_validation_column_of_a_fold_run(runs, tmp_path):
    rows = write_calls(runs["plain"] / "results", [tmp_path])
    text = (tmp_path / "calls.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| arm |"))
    assert f"| best train reward | {VALIDATION_COLUMN[1]} |" in header
    last = _lines(runs["plain"] / "curve.jsonl")[-1][VALIDATION_KEY]
    row = next(r for r in rows if r["budget"] == 32)
    assert row[VALIDATION_KEY] == pytest.approx((last, last, last))
    assert (tmp_path / "calls.png").stat().st_size > 0


def test_a_run_on_no_fold_keeps_its_curve_and_table_unchanged(market, tmp_path):
    out = tmp_path / "nofold"
    assert main(evolve_args(market["plain"], out)) == 0
    assert not (out / VALIDATION_LOG).exists()
    assert all(VALIDATION_KEY not in r for r in _lines(out / "curve.jsonl"))
    kept = json.loads((out / "results" / "seed-0" / "evolve.json").read_text())
    assert all(VALIDATION_KEY not in r for r in kept["curve"])
    rows = budget_rows(arm_curves(out / "results"))
    assert all(VALIDATION_KEY not in r for r in rows)
    assert VALIDATION_COLUMN[1] not in calls_table(rows)


def test_curve_rows_without_readings_are_the_rows_before():
    history = [{"group": 1, "calls": 4, "best_reward": 0.5, "best": "rank(close)", "programs": 1}]
    assert curve_rows(history) == curve_rows(history, None, None)
    assert VALIDATION_KEY not in curve_rows(history)[0]
    assert curve_rows(history, None, {"rank(close)": 0.25})[0][VALIDATION_KEY] == 0.25
    assert curve_rows(history, None, {})[0][VALIDATION_KEY] is None


#: Lines of a damaged validation.jsonl (a kill, a hand edit): each is left out, never read as a reading.
BAD_LINES = ["", "{", "not json", "[]", "null", "1", '"rank(close)"', '{"formula": 1, "validation": 0.1}',
             '{"formula": null, "validation": 0.1}', '{"validation": 0.1}', '{"formula": "x"}',
             '{"formula": "x", "validation": "0.1"}', '{"formula": "x", "validation": true}',
             '{"formula": "x", "validation": NaN}', '{"formula": "x", "validation": Infinity}',
             '{"formula": "x", "validation": -Infinity}', '{"formula": "x", "validation": [0.1]}',
             '{"formula": "x", "validation": {"a": 1}}', '{"formula": ["x"], "validation": 0.1}',
             '{"formula": "x", "validation": 1e400}', '{"formula": {"a": {"b": {"c": 1}}}, "validation": 0.1}',
             "\x00\x01", "\xff\xfe", '{"formula": "x", "validation": 0.1', "[" * 5000]


@pytest.mark.parametrize("line", BAD_LINES)
def test_a_damaged_reading_line_is_left_out(tmp_path, line):
    good = '{"formula": "rank(volume)", "validation": 0.5}\n{"formula": "rank(open)", "validation": null}\n'
    (tmp_path / VALIDATION_LOG).write_bytes((good + line + "\n").encode("utf-8", "surrogateescape"))
    assert validation_readings(tmp_path) == {"rank(volume)": 0.5, "rank(open)": None}


# ------------------------------------------------------------------ the best checkpoint on a fold
from alpha_gym.evaluation.selection import select_checkpoint, select_checkpoint_on_validation  # noqa: E402

TRAIN = {100: [0.9, 0.8], 200: [0.3, None], 300: [-0.2, 0.1], 400: [None, None]}


def test_on_a_fold_the_train_cpcv_admits_and_the_validation_score_chooses():
    plain = select_checkpoint(TRAIN)
    assert plain.step == 100 and "rule" not in plain.to_dict()          # a plain run: as before
    choice = select_checkpoint_on_validation(TRAIN, {100: [0.1, 0.0], 200: [0.6, None], 300: [2.0, 2.0]})
    # 300 scores best on validation but its train CPCV (-0.05) does not admit it; 400 has no valid answer
    assert (choice.step, choice.rule) == (200, "validation")
    assert choice.validation_means == {100: 0.05, 200: 0.6, 300: 2.0, 400: None}
    assert choice.means == plain.means
    # ties: the earliest step
    assert select_checkpoint_on_validation(TRAIN, {100: [0.5], 200: [0.5]}).step == 100


def test_without_an_admitted_reading_the_choice_is_the_train_choice():
    for validation in ({}, {300: [1.0]}, {100: [None], 200: [float("nan")]}):
        choice = select_checkpoint_on_validation(TRAIN, validation)
        assert choice.step == select_checkpoint(TRAIN).step and choice.rule.startswith("validation: none admitted")


@pytest.mark.parametrize("reading", [None, float("nan"), float("inf"), -float("inf"), "0.5", True, [0.5], {"a": 1}])
def test_a_reading_that_is_no_score_counts_as_an_answer_without_one(reading):
    choice = select_checkpoint_on_validation(TRAIN, {100: [reading], 200: [0.1]})
    assert choice.step == 200 and choice.validation_means[100] is None


@pytest.mark.parametrize("validation", [[0.5], "x", None, {999: [0.1]}, {"100": [0.1]}])
def test_readings_of_no_checkpoint_are_refused(validation):
    with pytest.raises((TypeError, ValueError)):
        select_checkpoint_on_validation(TRAIN, validation)
