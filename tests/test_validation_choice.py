"""On a walk-forward fold the trained arms choose on the validation window, the train window only admitting:
best-of-N's sample per brief (trainers/compare/arms/best_of_n.py) and an RL rung's shipped checkpoint
(trainers/compare/runner.py, `fold_checkpoints`). Each choice is what the rule gives on the recorded readings, the
test window reaches none of it, a plain run is unchanged, and damaged readings are read back as stated."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import answer_row, read_object, read_rows
from alpha_gym.evaluation.selection import (TrainRecord, select_checkpoint, select_checkpoint_on_validation,
                                            select_sample_on_validation)
from alpha_gym.evaluation.validation import ValidationReadingsError, ValidationScorer, kept_readings
from alpha_gym.jsonable import json_dumps
from alpha_gym.market import synthetic_panel
from alpha_gym.market.folds import FoldPlan, cut_fold, make_fold
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.evolve_arm import VALIDATION_LOG
from alpha_gym.tasks.sets import brief_set
from trainers.compare.ladder import SCALES
from fold_markets import scrambled  # a panel whose later sessions are shuffled

#: Fold windows of 60 sessions on the 800-session market (fold 5's search window: its first 428 sessions).
SESSIONS = 60

#: One probe brief's samples each: brief 1's best train reward is a 20-day reversal, -rank(close / ts_mean(close,
#: 20)), which loses on the validation window; validation chooses rank(volume) - rank(close) among the admitted, not
#: -rank(ts_std(returns, 20)), which scores highest there but whose train CPCV is negative (not admitted); foo(close)
#: does not parse. Brief 2 has no admitted sample: the train pick stands.
SAMPLES = (["-rank(close / ts_mean(close, 20))", "rank(volume) - rank(close)", "-rank(ts_std(returns, 20))",
            "foo(close)"],
           ["-rank(ts_std(returns, 20))", "rank(close)", "-ts_mean(returns, 3)", "rank(adv20)"])

#: An RL rung's probe formulas per checkpoint: step 1 has the higher mean train CPCV, step 2 (admitted) the higher
#: mean validation score, step 3 the highest validation score but a negative train CPCV; step 0 nothing valid.
PROBES = {0: ["rank(close)", "foo(close)"], 1: ["-rank(close / ts_mean(close, 20))", "rank(ts_min(volume, 10))"],
          2: ["rank(volume) - rank(close)", "rank(ts_mean(volume, 20))"],
          3: ["-rank(ts_std(returns, 20))", "foo(close)"]}


def fold_setup(panel, fold):
    """(the fold's panels, a verifier on its search window, the validation scorer, the purge panel)."""
    panels = cut_fold(panel, fold)
    verifier = Verifier(panels.search, VerifierConfig())
    return panels, verifier, ValidationScorer(panels, verifier), panel.window(fold.purge.start, fold.purge.end)


@pytest.fixture(scope="module")
def markets():
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    fold = make_fold(panel.dates, 5, FoldPlan(test=SESSIONS, validation=SESSIONS))
    return {"plain": fold_setup(panel, fold), "test": fold_setup(scrambled(panel, fold.test.first), fold),
            "validation+test": fold_setup(scrambled(panel, fold.validation.first), fold)}


def fresh_readings(scorer, formulas, valid):
    return [scorer.reading(f, ok)["score"] for f, ok in zip(formulas, valid)]


# ------------------------------------------------------------------ best-of-N's pick
SCALE = replace(SCALES["smoke"], steps=4)    # 8 calls: k = 4 samples for each of the 2 probe briefs
PROBE = tuple(list(brief_set("probe"))[: SCALE.probe])


def sampled(verifier):
    """samples.json's records as `sample_and_pick` writes them, each brief's samples scored as one group."""
    from trainers.compare.arms.best_of_n import best_sample
    records = []
    for brief, formulas in zip(PROBE, SAMPLES):
        texts = [f"<alpha>{f}</alpha>" for f in formulas]
        group = verifier.score_group(texts, brief=brief)
        records.append({"brief_id": brief.id, "answers": texts, "rewards": group.rewards.tolist(),
                        "valid": group.valid.tolist(),
                        "cpcv": [float(s.channels["cpcv"]) if s.valid else None for s in group.scores],
                        "best": best_sample(group.rewards)})
    return records


def best_of_n_run(setup, folder, on_fold: bool):
    """run_best_of_n_rung on the fold's search window with samples.json already kept (no model is loaded)."""
    from trainers.compare.arms.best_of_n import run_best_of_n_rung, sampling_settings
    panels, verifier, scorer, purge = setup
    records = sampled(verifier)
    run_dir = folder / "out" / "seed-42" / "best_of_n"
    run_dir.mkdir(parents=True)
    settings = sampling_settings(SCALE, 42, None, PROBE)[3]
    (run_dir / "samples.json").write_text(json_dumps({"settings": settings, "seconds": 1.0, "briefs": records}))
    numbers = run_best_of_n_rung(SCALE, 42, None, verifier, panels.search, purge, PROBE, folder / "results",
                                 out=folder / "out", validation=scorer if on_fold else None)
    return records, numbers, read_rows(folder / "results" / "seed-42" / "best_of_n.jsonl"), run_dir


@pytest.fixture(scope="module")
def best_of_n_runs(markets, tmp_path_factory):
    return {which: best_of_n_run(markets[which], tmp_path_factory.mktemp(which.replace("+", "-")), True)
            for which in markets}


def test_best_of_n_on_a_fold_ships_the_rule_s_pick_on_the_recorded_readings(markets, best_of_n_runs):
    records, numbers, rows, run_dir = best_of_n_runs["plain"]
    scorer = markets["plain"][2]
    from alpha_gym.language.answer import formula_or_none
    for p, row in zip(records, rows):
        readings = fresh_readings(scorer, [formula_or_none(a) for a in p["answers"]], p["valid"])
        choice = select_sample_on_validation(p["rewards"], p["cpcv"], readings)
        assert (row["sample"], row["train_sample"], row["chosen_by"], row["validation_score"]) == (
            choice.index, p["best"], choice.rule, readings[choice.index])
        assert row["answer"] == p["answers"][choice.index] and row["reward"] == p["rewards"][choice.index]
        assert row["train_cpcv"] == p["cpcv"][choice.index]
    first, second = rows
    # brief 1: the train pick is the reversal; validation chooses rank(volume) - rank(close) among the admitted,
    # not the sample scoring highest there, whose train CPCV is negative
    assert (first["train_sample"], first["sample"], first["chosen_by"]) == (0, 1, "validation")
    assert first["validation_score"] < fresh_readings(scorer, [SAMPLES[0][2]], [True])[0]
    assert second["chosen_by"] == "validation: none admitted, chosen on train"
    assert second["sample"] == second["train_sample"]
    assert (numbers["chosen_on_validation"], numbers["differs_from_train_pick"]) == (1, 1)
    assert "validation score" in numbers["pick"]
    # every distinct formula valid on the search window read once, kept for a rerun
    kept = [json.loads(line) for line in (run_dir / VALIDATION_LOG).read_text().splitlines()]
    valid = {formula_or_none(a) for p in records for a, ok in zip(p["answers"], p["valid"]) if ok}
    assert sorted(r["formula"] for r in kept) == sorted(valid)


def test_best_of_n_s_pick_reads_no_test_window_and_moves_with_the_validation_window(best_of_n_runs):
    plain, test, later = (best_of_n_runs[w] for w in ("plain", "test", "validation+test"))
    assert plain[2] == test[2]          # == on floats parsed from their repr: bit for bit
    assert (plain[3] / VALIDATION_LOG).read_bytes() == (test[3] / VALIDATION_LOG).read_bytes()
    assert plain[0] == later[0]         # the samples' train rewards: the search window only
    assert [r["validation_score"] for r in plain[2]] != [r["validation_score"] for r in later[2]]


#: Readings that are no score (a train CPCV or validation reading): each counts as a sample without one.
NOT_SCORES = [None, float("nan"), float("inf"), -float("inf"), "0.5", True, False, [0.5], {"score": 0.5}, b"1"]


@pytest.mark.parametrize("bad", NOT_SCORES)
@pytest.mark.parametrize("where", ["train_cpcv", "validation"])
def test_a_sample_reading_that_is_no_score_is_not_admitted(bad, where):
    """Sample 0 has the best reward and, but for the bad reading, the best validation score: with it, it is not
    admitted, and validation chooses sample 1."""
    cpcv, validation = [0.5, 0.4, -0.1], [2.0, 1.0, 3.0]
    {"train_cpcv": cpcv, "validation": validation}[where][0] = bad
    choice = select_sample_on_validation([1.0, 0.5, 0.2], cpcv, validation)
    assert (choice.index, choice.train_index, choice.rule, choice.validation) == (1, 0, "validation", 1.0)


@pytest.mark.parametrize("sizes", [(0, 0, 0), (2, 3, 3), (3, 2, 3), (3, 3, 2)])
def test_readings_of_other_lengths_than_the_samples_are_refused(sizes):
    with pytest.raises(ValueError, match="per sample"):
        select_sample_on_validation(*[[0.1] * n for n in sizes])


def test_best_of_n_on_no_fold_keeps_its_rows_as_before(markets, tmp_path):
    records, numbers, rows, run_dir = best_of_n_run(markets["plain"], tmp_path, False)
    from alpha_gym.language.answer import formula_or_none
    before = [answer_row(b.id, SCALE.steps, p["answers"][p["best"]], formula_or_none(p["answers"][p["best"]]),
                         p["cpcv"][p["best"]], k=4, reward=p["rewards"][p["best"]], sample=p["best"])
              for b, p in zip(PROBE, records)]
    assert rows == before
    assert not {"pick", "chosen_on_validation", "differs_from_train_pick"} & set(numbers)
    assert not (run_dir / VALIDATION_LOG).exists()


# ------------------------------------------------------------------ an RL rung's checkpoint
def probe_files(folder, verifier):
    """probe-step-N.json as `probe_records` writes them (step 0 in its own folder, as a rung's), and the records."""
    from alpha_gym.evaluation.kept import probe_scores
    files, records = {}, []
    for step, formulas in PROBES.items():
        where = folder / ("step-0" if step == 0 else "run")
        where.mkdir(parents=True, exist_ok=True)
        cpcvs = probe_scores(verifier, formulas)
        files[step] = where / f"probe-step-{step}.json"
        files[step].write_text(json_dumps({"step": step, "answers": [f"<alpha>{f}</alpha>" for f in formulas],
                                           "formulas": formulas, "train_cpcv": cpcvs, "summary": {}}))
        records.append(TrainRecord(step, tuple(cpcvs)))
    return files, records


#: The summaries `probe_records` returns (reported only: the purge's scores are no input of the choice).
REPORTS = {s: {"mean_score": None, "n_valid": 0, "n_answers": 2, "n_families": 0, "book_return": None,
               "book_sharpe": None} for s in PROBES}
LOG = [{"step": 1, "reward": -1.25}, {"step": 2, "reward": 0.5}, {"step": 3, "reward": 0.75}]


def checkpoints_of(setup, folder):
    from trainers.compare.runner import fold_checkpoints
    files, records = probe_files(folder, setup[1])
    return fold_checkpoints(records, files, REPORTS, LOG, setup[2]), records, files


@pytest.fixture(scope="module")
def rung_tables(markets, tmp_path_factory):
    return {which: checkpoints_of(markets[which], tmp_path_factory.mktemp("rung-" + which.replace("+", "-")))
            for which in markets}


def test_the_rung_s_checkpoint_is_the_rule_s_choice_on_the_recorded_readings(markets, rung_tables):
    table, records, _files = rung_tables["plain"]
    scorer = markets["plain"][2]
    readings = {r.step: fresh_readings(scorer, PROBES[r.step], [c is not None for c in r.probe_train_cpcv])
                for r in records}
    choice = select_checkpoint_on_validation(records, readings)
    assert table["selected_step"] == choice.step == 2 and table["chosen_by"] == "validation"
    assert table["train_selected_step"] == select_checkpoint(records).step == 1
    rows = {r["step"]: r for r in table["rows"]}
    assert [rows[s]["validation_score"] for s in sorted(rows)] == [choice.validation_means[s] for s in sorted(rows)]
    assert rows[3]["validation_score"] > rows[2]["validation_score"] and rows[3]["train_cpcv"] < 0  # not admitted
    assert rows[0]["validation_score"] is None and rows[0]["n_valid_validation"] == 0
    assert [rows[s]["train_reward"] for s in (0, 1, 2, 3)] == [None, -1.25, 0.5, 0.75]
    assert [s for s in rows if rows[s]["selected"]] == [2] and [s for s in rows if rows[s]["train_selected"]] == [1]


def test_the_rung_s_choice_reads_no_test_window(rung_tables):
    plain, test, later = (rung_tables[w][0] for w in ("plain", "test", "validation+test"))
    assert plain == test
    files = [rung_tables[w][2][1].parent / VALIDATION_LOG for w in ("plain", "test")]
    assert files[0].read_bytes() == files[1].read_bytes()
    assert not (rung_tables["plain"][2][0].parent / VALIDATION_LOG).exists()   # step 0: no answer valid to read
    assert [r["validation_score"] for r in plain["rows"]] != [r["validation_score"] for r in later["rows"]]


def test_the_run_page_shows_validation_beside_the_train_reward_per_checkpoint(rung_tables, tmp_path):
    from alpha_gym.evaluation.report import write_report
    from alpha_gym.evaluation.selection import save_checkpoints
    save_checkpoints(tmp_path, rung_tables["plain"][0])
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LOG))
    page = write_report(tmp_path).read_text()
    part = page[page.index('id="checkpoints"'):]
    heads = part[part.index("<tr>"): part.index("</tr>")]
    assert heads.index("train_reward") < heads.index("train_cpcv") < heads.index("validation_score")
    assert "Selected step: 2 (train CPCV alone: step 1)" in part and "chosen on validation" in part
    assert "+0.500" in part    # step 2's train reward


def test_a_plain_checkpoint_table_is_unchanged():
    from alpha_gym.evaluation.selection import checkpoint_table
    records = [TrainRecord(1, (0.5, None)), TrainRecord(2, (0.2, 0.1))]
    table = checkpoint_table(records, {1: {"holdout_score": 0.3}})
    assert set(table) == {"format", "selected_step", "rule", "rows"} and table["selected_step"] == 1
    assert all(set(r) == {"step", "train_cpcv", "n_valid_train", "n_probe", "selected"} | (
        {"holdout_score"} if r["step"] == 1 else set()) for r in table["rows"])


# ------------------------------------------------------------------ damaged readings and probe files
from test_validation_curve import BAD_LINES  # noqa: E402  (25 damaged validation.jsonl lines)


@pytest.mark.parametrize("line", BAD_LINES)
def test_a_damaged_readings_line_is_scored_again(markets, tmp_path, line):
    """A line that is not a reading is left out and its formula scored again (the stated fallback): the readings
    equal a fresh scorer's, and the file holds a whole reading line for it afterwards."""
    scorer = markets["plain"][2]
    formulas, valid = ["rank(volume)", "rank(adv20)", "foo(close)"], [True, True, False]
    good = json_dumps({"formula": "rank(volume)", "validation": scorer.reading("rank(volume)", True)["score"]})
    (tmp_path / VALIDATION_LOG).write_bytes((good + "\n" + line).encode("utf-8", "surrogateescape"))  # cut: no \n
    assert kept_readings(tmp_path, scorer, formulas, valid) == fresh_readings(scorer, formulas, valid)
    again = kept_readings(tmp_path, scorer, formulas, valid)    # read back whole
    assert again == fresh_readings(scorer, formulas, valid)
    last = (tmp_path / VALIDATION_LOG).read_text(errors="replace").splitlines()[-1]
    assert last.startswith('{"formula": "rank(adv20)"')


def test_a_readings_file_that_is_no_file_is_one_clear_error(markets, tmp_path):
    (tmp_path / VALIDATION_LOG).mkdir()
    with pytest.raises(ValidationReadingsError, match="is not a file"):
        kept_readings(tmp_path, markets["plain"][2], ["rank(volume)"], [True])


#: Damaged probe-step-N.json files: not JSON, not UTF-8, not an object, no formulas, the wrong count or types.
BAD_PROBES = [b"", b"{", b"\xff\xfe", b"[]", b"null", b'"x"', b'{"answers": []}', b'{"formulas": null}',
              b'{"formulas": "rank(close)"}', b'{"formulas": ["rank(close)"]}', b'{"formulas": [1, 2]}',
              b'{"formulas": ["a", "b", "c"]}', b'{"formulas": [["a"], "b"]}', b"[" * 5000]


@pytest.mark.parametrize("raw", BAD_PROBES)
def test_a_damaged_probe_file_is_a_compare_error_naming_it(markets, tmp_path, raw):
    """Read back for the validation readings, or by a rerun's `probe_records` (which answers nothing then)."""
    from trainers.compare.runner import CompareError, checkpoint_readings, probe_records
    files, records = probe_files(tmp_path, markets["plain"][1])
    files[2].write_bytes(raw.replace(b"}", b', "train_cpcv": [0.1, 0.2], "summary": {}}')
                         if raw.startswith(b'{"formulas"') else raw)
    with pytest.raises(CompareError, match="probe-step-2.json"):
        checkpoint_readings(records, files, markets["plain"][2])
    if not raw.startswith(b'{"formulas"'):    # no train scores either: refused by the rerun too
        with pytest.raises(CompareError, match="probe-step-2.json"):
            probe_records("unused", None, None, None, PROBE, SCALE, 2, files[2].parent)


# ------------------------------------------------------------------ the trained arms through compare --fold
@pytest.mark.slow      # one real training of the smallest rung and best-of-N with the built-in model
def test_a_rung_and_best_of_n_on_a_fold_choose_on_validation_through_compare(tmp_path, capsys):
    """cispo (2 steps, 16 tokens) and best-of-N at the smoke scale on fold 5 of the synthetic market: the rung's
    run folder holds checkpoints.json (train admits, validation chooses, its rows' validation readings the kept
    ones), the kept numbers carry each checkpoint's validation score, and best-of-N's rows say which rule chose.
    (At 16 tokens no answer parses, so every choice is the stated train fallback: the rule itself is tested above
    on readings that choose.)"""
    from test_compare_folds import market_frame
    from trainers.compare.folds import fold_plan
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    data = tmp_path / "market.csv"
    market_frame(panel).to_csv(data, index=False)
    out, results = tmp_path / "out", tmp_path / "results"
    assert main(["compare", "--scale", "smoke", "--data", str(data), "--fold", "5", "--rungs", "cispo,best_of_n",
                 "--seeds", "42", "--out", str(out), "--results", str(results)]) == 0
    capsys.readouterr()
    fold = make_fold(panel.dates, 5, fold_plan(SCALES["smoke"]))
    run_dir, kept = out / "fold-5" / "seed-42" / "cispo", results / "fold-5" / "seed-42"
    table = json.loads((run_dir / "checkpoints.json").read_text())
    numbers = read_object(kept / "cispo.json")
    assert numbers["selected_step"] == table["selected_step"]
    assert [c["validation_score"] for c in numbers["checkpoints"]] == [r["validation_score"] for r in table["rows"]]
    assert table["chosen_by"] in ("validation", "validation: none admitted, chosen on train")
    records = [TrainRecord(r["step"], tuple(json.loads(
        ((out / "fold-5" / "step-0") if r["step"] == 0 else run_dir).joinpath(f"probe-step-{r['step']}.json")
        .read_text())["train_cpcv"])) for r in table["rows"]]
    panels = cut_fold(panel, fold)
    scorer = ValidationScorer(panels, Verifier(panels.search, VerifierConfig()))
    readings = {}
    for r in records:
        where = (out / "fold-5" / "step-0") if r.step == 0 else run_dir
        formulas = json.loads((where / f"probe-step-{r.step}.json").read_text())["formulas"]
        readings[r.step] = fresh_readings(scorer, formulas, [c is not None for c in r.probe_train_cpcv])
    assert table["selected_step"] == select_checkpoint_on_validation(records, readings).step
    shipped = read_rows(kept / "cispo.jsonl")
    assert {r["step"] for r in shipped} == {table["selected_step"]}
    rows = read_rows(kept / "best_of_n.jsonl")
    assert all(r["chosen_by"].startswith("validation") and "train_sample" in r for r in rows)
    assert "validation score" in read_object(kept / "best_of_n.json")["pick"]
