"""`alpha-gym compare --fold K|all` (trainers/compare/folds.py): every arm runs on the fold's search window only,
what it found is scored on the fold's validation and test windows afterwards, and the rows kept in
RESULTS/walk-forward/ make the walk-forward table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import answer_row, read_object, read_rows, write_rows
from alpha_gym.market import synthetic_panel
from alpha_gym.market.folds import make_fold
from alpha_gym.market.panel import Panel
from trainers.compare.folds import fold_plan
from trainers.compare.ladder import SCALES
from trainers.compare.walk_forward import FOLDER
from fold_markets import scrambled  # a panel whose later sessions are shuffled

#: The model-free arms: each runs on every fold in a test's time.
FREE_ARMS = "random,evolve,search"
#: Steps of the smoke scale: 16 verifier calls a run (8 x 1 prompt x 2 answers), past the first groups.
STEPS = "8"


def market_frame(panel: Panel):
    import pandas as pd
    dates = np.repeat(np.asarray(panel.dates).astype(str), len(panel.tickers))
    return pd.DataFrame({"date": dates, "ticker": np.tile(np.asarray(panel.tickers), len(panel.dates)),
                         **{f: panel.data[f].reshape(-1) for f in ("open", "high", "low", "close", "volume")}})


@pytest.fixture(scope="module")
def markets(tmp_path_factory):
    """The smoke scale's market (synthetic, 20 stocks x 800 sessions) as a data file, and a copy whose
    validation and test windows of fold 5 (and nothing before them) hold other prices."""
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    fold = make_fold(panel.dates, 5, fold_plan(SCALES["smoke"]))
    folder = tmp_path_factory.mktemp("markets")
    plain, later = folder / "plain.csv", folder / "scrambled.csv"
    market_frame(panel).to_csv(plain, index=False)
    market_frame(scrambled(panel, fold.validation.first, seed=3)).to_csv(later, index=False)
    return plain, later, fold


def with_step0(results, fold: int):
    """A kept step 0 in the fold's results (the seeded arms start from its answers): no model is loaded."""
    from alpha_gym.tasks.sets import brief_set
    probe = list(brief_set("probe"))[: SCALES["smoke"].probe]
    write_rows(results / f"fold-{fold}" / "step-0.jsonl",
               [answer_row(b.id, 0, "<alpha>rank(close)</alpha>", "rank(close)", 0.0) for b in probe])


def compare(data, out, results, fold="5", rungs=FREE_ARMS, *more):
    return main(["compare", "--scale", "smoke", "--steps", STEPS, "--data", str(data), "--fold", fold, "--rungs", rungs,
                 "--seeds", "42", "--out", str(out), "--results", str(results), *more])


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _untimed(x):
    """A logged object without its wall-clock times and process stamps (what may differ between two equal runs),
    and without the curves' validation readings (they read the validation window, beside the run)."""
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items()
                if "seconds" not in k and k not in ("added", "_hash", "best_validation")}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def _train_book(book):
    """The book chosen on train of a book a fold run ships (chosen on the validation window, so not the run's:
    alpha_gym/search/evolve_arm.py `shipped_book`); test_fold_shipped_book.py checks what it ships."""
    from alpha_gym.search.evolve_arm import SHIPPED_KEYS, train_book_of
    assert book["chosen_on"] in ("validation", "train")
    return {k: v for k, v in train_book_of(book).items() if k not in SHIPPED_KEYS}


def run_record(out, results, arm):
    """Every reward and train number one arm's run logged on fold 5: each call (proposals), the curve, the archive,
    the book chosen on train, the checkpoint's database, the kept answers and numbers (less what it ships, chosen
    on the validation window)."""
    run, kept = out / "fold-5" / "seed-42" / arm, results / "fold-5" / "seed-42"
    # the checkpoint's programs with their rewards (which archive file it names alternates with how often the run
    # found time to write one)
    state = {k: v for k, v in json.loads((run / "state.json").read_text()).items()
             if k in ("calls", "rejected", "database", "history")}
    numbers = read_object(kept / f"{arm}.json")
    assert numbers.pop("shipped")["chosen_on"] in ("validation", "train")
    book, run_book = json.loads((run / "book.json").read_text()), read_object(kept / f"{arm}.book.json")
    assert run_book["members"] == book["members"]      # the kept book is the one the run shipped
    return {"proposals": _jsonl(run / "proposals.jsonl"), "curve": _untimed(_jsonl(run / "curve.jsonl")),
            "archive": _untimed(_jsonl(run / "archive.jsonl")), "book": _untimed(_train_book(book)),
            "state": _untimed(state), "answers": _untimed(read_rows(kept / f"{arm}.jsonl")),
            "numbers": _untimed(numbers), "run_book": _untimed(_train_book(run_book))}


def test_scrambled_validation_and_test_prices_leave_every_reward_of_the_run_bit_identical(markets, tmp_path, capsys):
    """The runs read the search window only: on a copy of the data whose validation and test sessions are
    scrambled, every call's reward, the curves, the archives, the books and the kept numbers are equal bit for
    bit; the walk-forward scores, which read those windows after the run, change."""
    plain, later, fold = markets
    runs = {}
    for name, data in (("plain", plain), ("scrambled", later)):
        out, results = tmp_path / name / "out", tmp_path / name / "results"
        with_step0(results, 5)
        assert compare(data, out, results) == 0
        printed = capsys.readouterr().out
        assert f"fold 5/5: search {fold.search.start}..{fold.search.end}" in printed
        runs[name] = (out, results)
    rows = {}
    for arm in FREE_ARMS.split(","):
        one, two = (run_record(*runs[name], arm) for name in ("plain", "scrambled"))
        assert len(one["proposals"]) == 16 and all(isinstance(p["reward"], float) for p in one["proposals"])
        assert one == two, arm     # == on floats parsed from their repr: bit for bit
        rows[arm] = [read_rows(runs[name][1] / FOLDER / f"{arm}.jsonl") for name in ("plain", "scrambled")]
        for a, b in zip(*rows[arm]):
            assert (a["arm"], a["fold"], a["windows"]) == (arm, 5, b["windows"])
            # the same choices by train (the run's own), each scored on other validation and test prices
            assert a["selections"]["top_train"]["formulas"] == b["selections"]["top_train"]["formulas"]
            assert a["selections"]["top_train"]["train_cpcv"] == b["selections"]["top_train"]["train_cpcv"]
    # the curves carry the best's validation score: read on the validation window, so the scramble moves it
    readings = {name: [r["best_validation"] for arm in FREE_ARMS.split(",")
                       for r in _jsonl(runs[name][0] / "fold-5" / "seed-42" / arm / "curve.jsonl")]
                for name in ("plain", "scrambled")}
    assert any(v is not None for v in readings["plain"]) and readings["plain"] != readings["scrambled"]
    changed = [arm for arm, (a, b) in rows.items()
               if (a[0]["selections"]["pool"]["validation"], a[0]["selections"]["pool"]["test"])
               != (b[0]["selections"]["pool"]["validation"], b[0]["selections"]["pool"]["test"])]
    assert changed == FREE_ARMS.split(",")


def test_the_walk_forward_table_shows_each_arm_on_the_fold_and_a_kept_fold_is_not_run_again(markets, tmp_path,
                                                                                            capsys):
    plain, later, fold = markets
    out, results = tmp_path / "out", tmp_path / "results"
    with_step0(results, 5)
    assert compare(plain, out, results) == 0
    capsys.readouterr()
    page = (out / "comparison.md").read_text()
    assert f"fold 5 test {fold.test.start}..{fold.test.end}" in page
    for arm in FREE_ARMS.split(","):
        assert f"| {arm} | 16 | 1 | pool, unselected |" in page
        row, = read_rows(results / FOLDER / f"{arm}.jsonl")
        assert (row["calls"], row["seed"], row["fold"]) == (16, 42, 5)
        assert row["windows"]["search"] == [fold.search.start, fold.search.end]
        assert (out / "fold-5" / "seed-42" / arm / "walk-forward.json").exists()
    assert (results / "walk-forward.md").read_text() == (out / "walk-forward.md").read_text()
    kept = {arm: (results / FOLDER / f"{arm}.jsonl").read_bytes() for arm in FREE_ARMS.split(",")}
    # run again: the fold is kept, nothing runs and no row changes
    assert compare(plain, out, results) == 0
    assert "every run kept" in capsys.readouterr().out
    assert kept == {arm: (results / FOLDER / f"{arm}.jsonl").read_bytes() for arm in FREE_ARMS.split(",")}
    # another data file with the same sessions (the scrambled copy) into the same results: refused in one line
    kept_rows = {arm: (results / FOLDER / f"{arm}.jsonl").read_bytes() for arm in FREE_ARMS.split(",")}
    assert compare(later, tmp_path / "out3", results, "5", "random", "--seeds", "43") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was made from data" in err[0] and "scrambled.csv" in err[0], err
    assert kept_rows == {arm: (results / FOLDER / f"{arm}.jsonl").read_bytes() for arm in FREE_ARMS.split(",")}
    # the same results with another data file: its kept rows are on other windows, refused in one line
    shorter = tmp_path / "shorter.csv"
    market_frame(synthetic_panel(n_stocks=20, n_days=790, seed=0)).to_csv(shorter, index=False)
    assert compare(shorter, tmp_path / "out2", results) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "on other windows" in err[0]


@pytest.mark.slow      # five folds' comparisons, each with its scoring pool, report and plots: ~3 min on the loaded box
def test_every_fold_runs_in_turn_and_a_rerun_of_all_runs_none(tmp_path, capsys):
    """`--fold all` on a market long enough for the five folds: the model-free `random` arm on each fold's search
    window, one kept row a fold, the table's five fold columns and the mean over them; run again, nothing runs."""
    from trainers.compare.walk_forward import t_interval
    panel = synthetic_panel(n_stocks=20, n_days=1250, seed=1)     # fold 1's search window: 278 sessions
    data, out, results = tmp_path / "long.csv", tmp_path / "out", tmp_path / "results"
    market_frame(panel).to_csv(data, index=False)
    for k in range(1, 6):
        with_step0(results, k)
    assert compare(data, out, results, "all", "random") == 0
    printed = capsys.readouterr().out
    assert [line.split(":")[0] for line in printed.splitlines() if line.startswith("=== fold")] == \
        [f"=== fold {k}/5" for k in range(1, 6)]
    rows = read_rows(results / FOLDER / "random.jsonl")
    assert [r["fold"] for r in rows] == [1, 2, 3, 4, 5]
    plan = fold_plan(SCALES["smoke"])
    for r in rows:
        fold = make_fold(panel.dates, r["fold"], plan)
        assert r["windows"]["search"] == [fold.search.start, fold.search.end]
        assert r["windows"]["test"] == [fold.test.start, fold.test.end]
    pool = next(line for line in (out / "comparison.md").read_text().splitlines()
                if line.startswith("| random |") and "pool, unselected" in line)
    tests = [r["selections"]["pool"]["test"] for r in rows]
    assert all(t is not None for t in tests)
    lo, hi = t_interval(tests)
    assert f"| {sum(tests) / 5:+.2f} [{lo:+.2f}, {hi:+.2f}] |" in pool
    assert pool.count("|") == 4 + 5 + 3            # arm, calls, seeds, choice; five folds; the mean, validation
    before = (results / FOLDER / "random.jsonl").read_bytes()
    assert compare(data, out, results, "all", "random") == 0
    again = capsys.readouterr().out
    assert again.count("every run kept") == 5 and "=== seed" not in again
    assert (results / FOLDER / "random.jsonl").read_bytes() == before


def test_an_arm_without_an_evolution_run_is_scored_on_its_shipped_answers(markets, tmp_path, monkeypatch, capsys):
    """A trained rung or best-of-N keeps answers, an archive and a book, not an evolution checkpoint: its pool is
    what it kept. A control that answers every brief with one formula (registered as one table row) is scored
    on the fold with that formula as its every choice."""
    from test_compare_arms import TINY_FORMULA, tiny
    from trainers.compare import arms
    plain, _later, _fold = markets
    grown = (*arms.ARMS, arms.Arm("tiny", "control", tiny, "one fixed formula"),
             arms.Arm("mute", "control", mute, "no formula"))
    monkeypatch.setattr(arms.table, "ARMS", grown)
    monkeypatch.setattr(arms, "ARMS", grown)
    import alpha_gym.commands.compare as command
    monkeypatch.setattr(command, "ARMS", grown)
    out, results = tmp_path / "out", tmp_path / "results"
    with_step0(results, 5)
    assert compare(plain, out, results, "5", "tiny,mute") == 0
    assert "mute, seed 42: the run found no formula to score (an empty pool): no choice to score" in \
        capsys.readouterr().out
    row, = read_rows(results / FOLDER / "tiny.jsonl")
    for key in ("best_train", "top_train", "pool"):
        assert row["selections"][key]["formulas"] == [TINY_FORMULA]
    page = (out / "comparison.md").read_text()
    assert "| tiny | 16 | 1 | pool, unselected |" in page
    # an arm that found nothing is kept as such: no score on the fold, and the fold is not run again
    nothing, = read_rows(results / FOLDER / "mute.jsonl")
    assert all(v["n"] == 0 and v["test"] is None for v in nothing["selections"].values())
    assert "| mute | 16 | 1 | pool, unselected | - | - | - |" in page
    assert compare(plain, out, results, "5", "tiny,mute") == 0
    assert "every run kept" in capsys.readouterr().out


def mute(context, seed: int) -> dict:
    """A control that answers no probe brief with a formula."""
    from alpha_gym.evaluation.kept import checkpoint_row, control_numbers, write_kept
    step = context.scale.steps
    rows = [answer_row(b.id, step, "no formula", None, None) for b in context.probe]
    checkpoint = checkpoint_row(step, [None] * len(rows), context.train, context.holdout, context.verifier(),
                                [None] * len(rows), context.run_dir(seed, "mute"), label="mute")
    numbers = control_numbers("mute", "mute", seed, 0.0, step, checkpoint, {}, steps=0)
    write_kept(context.results, seed, "mute", rows, numbers)
    return numbers


#: --fold values that name no fold: out of range, signs, other scripts' digits, spaces, decimals, words, lists.
BAD_FOLDS = ("0", "6", "7", "10", "99", "-1", "+3", "00", "1e0", "3.0", "3.", " 3", "3 ", "3\n", "٣", "３", "³", "⑤",
             "x", "", "All", "ALL", " all", "all,1", "1,2", "1-5", "1..5", "five", "fold5", "5fold", "0x5", "None",
             "nan", "inf", "-0", "1_0", "\x00", "5" * 60)


@pytest.mark.parametrize("value", BAD_FOLDS)
def test_a_value_naming_no_fold_is_refused_naming_the_flag(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--scale", "smoke", "--fold", value, "--rungs", "random", "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--fold" in err[-1] and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("more, says", [
    (["--report-only"], "--report-only cannot go with it"),
    (["--report-only", "--update-results"], "--report-only cannot go with it"),
    (["--eval", "runs/eval-x"], "--eval cannot go with it"),
    (["--fold", "4"], "fold 4 does not fit the data"),        # the smoke market holds fold 5 only
    (["--fold", "all"], "fold 1 does not fit the data"),
])
def test_a_fold_with_a_flag_it_cannot_go_with_or_beyond_the_data_is_one_line(more, says, markets, tmp_path, capsys):
    fold = [] if "--fold" in more else ["--fold", "5"]
    assert main(["compare", "--scale", "smoke", "--data", str(markets[0]), *fold, *more, "--rungs", "random",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow      # a real training of the smallest rung with the built-in model
def test_a_trained_rung_runs_on_a_fold_and_keeps_its_walk_forward_row(markets, tmp_path, capsys):
    """The smallest real rung (cispo at the smoke scale: 2 steps of 1 prompt x 2 answers, 16 tokens, the built-in
    start model, step 0 answered by it) on fold 5: it trains, logs each step, keeps its answers and numbers in
    RESULTS/fold-5 and its walk-forward row. (At 16 tokens every reward is the invalid-answer reward, so a run on
    scrambled later prices would log the same numbers whatever the code read: the scramble test above, on the
    model-free arms, is the one that can see a leak.)"""
    plain, _later, _fold = markets
    out, results = tmp_path / "out", tmp_path / "results"
    assert main(["compare", "--scale", "smoke", "--data", str(plain), "--fold", "5", "--rungs", "cispo",
                 "--seeds", "42", "--out", str(out), "--results", str(results)]) == 0
    capsys.readouterr()
    kept = results / "fold-5" / "seed-42"
    log = _untimed(_jsonl(out / "fold-5" / "seed-42" / "cispo" / "log.jsonl"))
    assert len(log) == 2 and all("reward" in str(line) for line in log)
    assert read_rows(results / "fold-5" / "step-0.jsonl") and read_rows(kept / "cispo.jsonl")
    assert read_object(kept / "cispo.json")
    assert (results / FOLDER / "cispo.jsonl").exists()


def test_the_world_model_setting_auto_is_made_explicit_on_each_fold_search_window(markets, tmp_path):
    """R3's "auto" names the world model registered for the panel the verifier is built on: on a fold, the search
    window (one registered for the whole train panel was fitted on the fold's later windows)."""
    from alpha_gym.market.folds import cut_fold
    from alpha_gym.market.resolve import resolve_panel
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.stress.registry import lookup
    from alpha_gym.tasks.sets import brief_set
    from trainers.compare.arms import RunContext
    from trainers.compare.folds import fold_context
    plain, _later, fold = markets
    full = resolve_panel(data=str(plain))
    context = RunContext("smoke", SCALES["smoke"], None, str(plain), None, VerifierConfig(), full, full,
                         tuple(list(brief_set("probe"))[:2]), tmp_path / "out", tmp_path / "results")
    assert context.verifier_config.stress_checkpoint == "auto"
    panels = cut_fold(full, fold)
    on_fold = fold_context(context, full, panels)
    assert on_fold.verifier_config.stress_checkpoint == lookup(panels.search)    # explicit: a folder or None
    assert on_fold.verifier().panel.fingerprint() == panels.search.fingerprint()
    assert [str(on_fold.holdout.dates[0])[:10], str(on_fold.holdout.dates[-1])[:10]] == [fold.purge.start, fold.purge.end]
    assert (on_fold.out, on_fold.results) == (tmp_path / "out" / "fold-5", tmp_path / "results" / "fold-5")
