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

#: The model-free arms: each runs on every fold in a test's time.
FREE_ARMS = "random,evolve,search"
#: Steps of the smoke scale: 16 verifier calls a run (8 x 1 prompt x 2 answers), past the first groups.
STEPS = "8"


def market_frame(panel: Panel):
    import pandas as pd
    dates = np.repeat(np.asarray(panel.dates).astype(str), len(panel.tickers))
    return pd.DataFrame({"date": dates, "ticker": np.tile(np.asarray(panel.tickers), len(panel.dates)),
                         **{f: panel.data[f].reshape(-1) for f in ("open", "high", "low", "close", "volume")}})


def scrambled(panel: Panel, first: int, seed: int = 3) -> Panel:
    """The panel with the sessions from `first` on in another order (each session's rows kept whole)."""
    order = np.arange(panel.n_days)
    order[first:] = first + np.random.default_rng(seed).permutation(panel.n_days - first)
    return Panel({k: v[order] for k, v in panel.data.items()}, panel.dates, panel.tickers, source="scrambled")


@pytest.fixture(scope="module")
def markets(tmp_path_factory):
    """The smoke scale's market (synthetic, 20 stocks x 800 sessions) as a data file, and a copy whose
    validation and test windows of fold 5 (and nothing before them) hold other prices."""
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    fold = make_fold(panel.dates, 5, fold_plan(SCALES["smoke"]))
    folder = tmp_path_factory.mktemp("markets")
    plain, later = folder / "plain.csv", folder / "scrambled.csv"
    market_frame(panel).to_csv(plain, index=False)
    market_frame(scrambled(panel, fold.validation.first)).to_csv(later, index=False)
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
    """A logged object without its wall-clock times and process stamps (what may differ between two equal runs)."""
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if "seconds" not in k and k not in ("added", "_hash")}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def run_record(out, results, arm):
    """Every reward and train number one arm's run logged on fold 5: each call (proposals), the curve, the archive,
    the book, the checkpoint's database, the kept answers and numbers."""
    run, kept = out / "fold-5" / "seed-42" / arm, results / "fold-5" / "seed-42"
    # the checkpoint's programs with their rewards (which archive file it names alternates with how often the run
    # found time to write one)
    state = {k: v for k, v in json.loads((run / "state.json").read_text()).items()
             if k in ("calls", "rejected", "database", "history")}
    return {"proposals": _jsonl(run / "proposals.jsonl"), "curve": _untimed(_jsonl(run / "curve.jsonl")),
            "archive": _untimed(_jsonl(run / "archive.jsonl")), "book": _untimed(json.loads((run / "book.json").read_text())),
            "state": _untimed(state), "answers": _untimed(read_rows(kept / f"{arm}.jsonl")),
            "numbers": _untimed(read_object(kept / f"{arm}.json")),
            "run_book": _untimed(read_object(kept / f"{arm}.book.json"))}


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
    changed = [arm for arm, (a, b) in rows.items()
               if (a[0]["selections"]["pool"]["validation"], a[0]["selections"]["pool"]["test"])
               != (b[0]["selections"]["pool"]["validation"], b[0]["selections"]["pool"]["test"])]
    assert changed == FREE_ARMS.split(",")


def test_the_walk_forward_table_shows_each_arm_on_the_fold_and_a_kept_fold_is_not_run_again(markets, tmp_path,
                                                                                            capsys):
    plain, _later, fold = markets
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
    # the same results with another data file: its kept rows are on other windows, refused in one line
    shorter = tmp_path / "shorter.csv"
    market_frame(synthetic_panel(n_stocks=20, n_days=790, seed=0)).to_csv(shorter, index=False)
    assert compare(shorter, tmp_path / "out2", results) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "on other windows" in err[0]
