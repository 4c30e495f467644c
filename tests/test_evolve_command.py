"""`alpha-gym evolve` (issue 40, item 2): the command, its run folder, its kept files and its curve."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import read_object, read_rows
from alpha_gym.search import evolve_arm
from alpha_gym.search.evolve_arm import CURVE_FILE, EvolveRunError, curve_at, read_curve
from alpha_gym.search.mutators import MUTATORS, MutatorSpecError, make_mutator
from conftest import REAL_DATA_DIR, REAL_TRAIN_FILE, SKIP_REASON


@pytest.fixture(scope="module")
def market_csv(tmp_path_factory):
    """The comparison's smoke market (synthetic, 20 stocks x 800 sessions) as a data file, so the command and
    `compare --scale smoke --data` cut the same pseudo-holdout from it."""
    import pandas as pd
    from alpha_gym.market import synthetic_panel
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    dates = np.repeat(np.asarray(panel.dates).astype(str), len(panel.tickers))
    frame = pd.DataFrame({"date": dates, "ticker": np.tile(np.asarray(panel.tickers), len(panel.dates)),
                          **{f: panel.data[f].reshape(-1) for f in ("open", "high", "low", "close", "volume")}})
    path = tmp_path_factory.mktemp("market") / "smoke.csv"
    frame.to_csv(path, index=False)
    return path


def evolve_args(csv, out, budget=24, *more):
    return ["evolve", "--data", str(csv), "--budget", str(budget), "--group-size", "4", "--islands", "2",
            "--pseudo-holdout", "120", "--probe", "2", "--out", str(out), *more]


def _scored(out):
    return [r for r in map(json.loads, (out / "proposals.jsonl").read_text().splitlines()) if r["status"] == "scored"]


def test_the_command_spends_the_budget_exactly_and_its_kept_files_are_read_by_the_report(market_csv, tmp_path,
                                                                                        capsys):
    out = tmp_path / "run"
    assert main(evolve_args(market_csv, out, 22)) == 0
    err = capsys.readouterr().err
    assert len(_scored(out)) == 22 and json.loads((out / "state.json").read_text())["calls"] == 22
    assert err.count("evolve: group ") == 6 and "calls 22/22" in err      # five groups of 4, one of 2
    curve = read_curve(out / CURVE_FILE)
    assert [r["calls"] for r in curve] == [4, 8, 12, 16, 20, 22]
    assert all(set(evolve_arm.CURVE_KEYS) == set(r) and r["seconds"] is not None for r in curve)
    results = out / "results"
    rows = read_rows(results / "seed-0" / "evolve.jsonl")
    numbers = read_object(results / "seed-0" / "evolve.json")
    assert len(rows) == 2 and all(r["train_valid"] and r["formula"] for r in rows)
    assert numbers["verifier_calls"] == 22 and numbers["curve"] == curve and numbers["recipe"] == "evolve"
    assert read_object(results / "seed-0" / "evolve.book.json")["rung"] == "evolve"
    # the comparison's table, from these files alone (no step-0 row: the evolve row answers the scale's probe)
    assert main(["compare", "--scale", "smoke", "--report-only", "--data", str(market_csv), "--results",
                 str(results), "--out", str(tmp_path / "table")]) == 0
    row = json.loads((tmp_path / "table" / "report.json").read_text())["rows"]["evolve"]
    assert row["kind"] == "control" and row["seeds"] == [0] and row["valid"] == 2
    # holdout-formulas reads the kept answers (the pseudo-holdout's first session is the holdout start)
    holdout_start = read_object(results / "seed-0" / "evolve.json")["checkpoints"][0]
    capsys.readouterr()
    from alpha_gym.market import load_panel
    dates = load_panel(market_csv).dates
    assert main(["holdout-formulas", "--data", str(market_csv), "--holdout-start", str(dates[-120]),
                 "--formulas", str(results / "seed-0" / "evolve.jsonl"), "--no-baselines", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [a["formula"] for a in report["answers"]] == [r["formula"] for r in rows]
    assert holdout_start["n"] == 2


def test_a_killed_run_resumes_to_the_uninterrupted_state_and_other_settings_are_refused(market_csv, tmp_path,
                                                                                      monkeypatch, capsys):
    assert main(evolve_args(market_csv, tmp_path / "whole", 28)) == 0
    record = evolve_arm._Clock.record

    def killed_at_group_3(self, group, elapsed):
        if group == 3:
            raise KeyboardInterrupt          # after group 3's checkpoint, as Ctrl-C between groups
        record(self, group, elapsed)
    monkeypatch.setattr(evolve_arm._Clock, "record", killed_at_group_3)
    assert main(evolve_args(market_csv, tmp_path / "cut", 28)) == 130
    assert "rerun the same command" in capsys.readouterr().err
    # the checkpoint is written by time (alpha_gym.search.evolution.CHECKPOINT_RATIO): group 3's or one before
    assert json.loads((tmp_path / "cut" / "state.json").read_text())["calls"] in (4, 8, 12)
    monkeypatch.undo()
    assert main(evolve_args(market_csv, tmp_path / "cut", 28)) == 0
    whole, cut = (json.loads((tmp_path / d / "state.json").read_text()) for d in ("whole", "cut"))
    for s in (whole, cut):
        s["admitted"] = {k: dict(v, added=0) for k, v in s["admitted"].items()}   # the archive's clock stamps
        s.pop("archive")
    assert cut == whole
    assert (tmp_path / "cut" / "proposals.jsonl").read_text() == (tmp_path / "whole" / "proposals.jsonl").read_text()
    assert (read_rows(tmp_path / "cut" / "results" / "seed-0" / "evolve.jsonl")
            == read_rows(tmp_path / "whole" / "results" / "seed-0" / "evolve.jsonl"))
    capsys.readouterr()
    assert main(evolve_args(market_csv, tmp_path / "cut", 28, "--seed", "1")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings (seed)" in err[0]
    assert main(evolve_args(market_csv, tmp_path / "cut", 28, "--temperature", "0.5")) == 2
    assert "other settings (database)" in capsys.readouterr().err


def test_a_run_read_at_a_budget_prefix_is_the_shorter_run(market_csv, tmp_path):
    """The schedule does not depend on the budget: a run to 24 calls read at 16 keeps what a run to 16 keeps."""
    assert main(evolve_args(market_csv, tmp_path / "long", 24)) == 0
    assert main(evolve_args(market_csv, tmp_path / "short", 16)) == 0
    assert main(evolve_args(market_csv, tmp_path / "long", 24, "--keep-at", "18", "--results",
                            str(tmp_path / "at16"))) == 0
    at = read_object(tmp_path / "at16" / "seed-0" / "evolve.json")
    short = read_object(tmp_path / "short" / "results" / "seed-0" / "evolve.json")
    assert at["verifier_calls"] == 16 and at["budget"] == 18
    assert [r["calls"] for r in at["curve"]] == [r["calls"] for r in short["curve"]] == [4, 8, 12, 16]
    assert ([r["formula"] for r in read_rows(tmp_path / "at16" / "seed-0" / "evolve.jsonl")]
            == [r["formula"] for r in read_rows(tmp_path / "short" / "results" / "seed-0" / "evolve.jsonl")])
    curve = read_curve(tmp_path / "long" / CURVE_FILE)
    assert curve_at(curve, 16) == curve[3] and curve_at(curve, 19) == curve[3]
    with pytest.raises(EvolveRunError, match="stopped at 24 calls, before 1600"):
        curve_at(curve, 1600)
    with pytest.raises(EvolveRunError, match="no group"):
        curve_at(curve, 3)


def test_keep_at_keeps_a_run_under_its_own_arm_name_and_seed(market_csv, tmp_path, capsys):
    """A comparison's `random` arm run folder (name and seed in its stamp) read at a prefix into another budget's
    results lands as seed-S/random.json there, with its mutators, whatever --seed the command line carries."""
    from alpha_gym.commands.evolve import split_panel
    from alpha_gym.market.resolve import resolve_panel
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.search.evolve_arm import run_evolve
    from trainers.compare.arms.kept import keep_evolve
    from alpha_gym.search.database import DatabaseConfig
    from alpha_gym.tasks.sets import brief_set
    train, holdout = split_panel(resolve_panel(data=str(market_csv)), 120)
    probe = list(brief_set("probe"))[:2]
    run = tmp_path / "seed-5" / "random"
    run_evolve(Verifier(train), train, holdout, probe, mutators=("random",), budget=16, seed=5, out=run,
               name="random", database=DatabaseConfig(n_islands=2), group_size=4, progress=None, keep=keep_evolve)
    assert main(evolve_args(market_csv, run, 16, "--keep-at", "9", "--results", str(tmp_path / "at8"))) == 0
    assert "(random, seed 5) at 9 calls" in capsys.readouterr().out
    kept = read_object(tmp_path / "at8" / "seed-5" / "random.json")
    assert kept["rung"] == "random" and kept["verifier_calls"] == 8 and kept["config"]["mutators"] == ["random"]
    assert not (tmp_path / "at8" / "seed-0").exists()


def test_bad_specs_and_options_are_one_line_and_exit_2(market_csv, tmp_path, capsys):
    for more, says in ((["--mutator", "bogus:x"], "unknown mutator 'bogus:x'; known: tree, endpoint"),
                       (["--mutator", "tree", "--mutator", "tree"], "names 'tree' twice"),
                       (["--probe", "5000"], "--probe 5000: there are"),
                       (["--brief", "nope"], "nope"),
                       (["--pseudo-holdout", "790"], "leaves 10 of the data's 800 sessions"),
                       (["--workers", "99999"], "--workers 99999: this machine has")):
        assert main(evolve_args(market_csv, tmp_path / "bad", 8, *more)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (more, err)
    for more in (["--budget", "0"], ["--islands", "0"], ["--refresh", "sometimes"], ["--probe", "100000"]):
        with pytest.raises(SystemExit) as exit_:
            main(evolve_args(market_csv, tmp_path / "bad", 8, *more))
        assert exit_.value.code == 2
        assert more[0] in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()      # nothing claimed the folder
    with pytest.raises(MutatorSpecError, match="takes no argument"):
        make_mutator("tree:deep", verifier=None, limits=None)
    assert "tree" in [row.name for row in MUTATORS]


@pytest.mark.real_data
def test_the_command_on_real_us46(tmp_path, capsys):
    if not REAL_TRAIN_FILE.exists():
        pytest.skip(SKIP_REASON)
    out = tmp_path / "us46"
    assert main(["evolve", "--data", str(REAL_TRAIN_FILE), "--universe", str(REAL_DATA_DIR / "universe_us46.txt"),
                 "--budget", "12", "--group-size", "4", "--probe", "2", "--out", str(out)]) == 0
    assert len(_scored(out)) == 12 and "calls 12/12" in capsys.readouterr().err
    numbers = read_object(out / "results" / "seed-0" / "evolve.json")
    assert numbers["verifier_calls"] == 12 and numbers["checkpoints"][0]["n"] == 2


def test_two_scoring_workers_give_the_one_worker_run_bit_for_bit(two_cores, market_csv, tmp_path):
    """Issue 42.4: `--workers 2` prepares each group's answers on two scoring processes and scores the channels
    here; every call's reward, the archive, the book and the kept answers are those of `--workers 1`."""
    def run(name, workers):
        out = tmp_path / name
        assert main(evolve_args(market_csv, out, 100, "--workers", str(workers), "--mutator", "tree",
                                "--mutator", "random")) == 0
        # an archive entry's "added" is a stamp unique to the process that admitted it, not a result
        archive = [{k: v for k, v in json.loads(x).items() if k != "added"}
                   for x in (out / "archive.jsonl").read_text().splitlines()]
        return (_scored(out), archive, json.loads((out / "book.json").read_text()),
                (out / "results" / "seed-0" / "evolve.jsonl").read_text())
    one, two = run("one", 1), run("two", 2)
    assert [(r["formula"], r["reward"], r["origin"]) for r in one[0]] == \
        [(r["formula"], r["reward"], r["origin"]) for r in two[0]]
    assert len(one[0]) == 100 and {r["origin"] for r in one[0]} >= {"seed", "tree", "random"}  # past the 82 seeds
    assert one[1:] == two[1:]
