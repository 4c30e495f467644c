"""`alpha-gym evolve --fold K` and the choices scored on a fold (alpha_gym/evaluation/walk_forward.py): the run
never reads past its search window (scrambled later prices leave every reward bit-identical), one validity on
every window, choices made on the validation window alone, and a clear refusal of a bad fold; the run's PBO,
each choice's effective bets and the reference formula's scores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.holdout import TRAIN_REFUSED, evaluate_holdout
from alpha_gym.evaluation.walk_forward import (PBO_BLOCKS, REFERENCE, ROWS_FILE, SELECTIONS, SUMMARY_FILE, TOP,
                                               PoolEntry, WalkForwardError, pool_pbo, pool_sample, score_fold)
from alpha_gym.market import load_panel, synthetic_panel
from alpha_gym.market.folds import FoldPlan, cut_fold, fold_panels, make_fold
from alpha_gym.scoring.verifier import Verifier
from fold_markets import scrambled  # a panel whose later sessions are shuffled

#: Fold windows of 60 sessions on the 800-session market: fold 5's search window is its first 428 sessions.
SESSIONS = 60


@pytest.fixture(scope="module")
def market(tmp_path_factory, write_market_csv):
    """The comparison's smoke market (synthetic, 20 stocks x 800 sessions) as a data file, and two copies whose
    sessions after fold 5's search window are shuffled: from its validation window on, and from its purge on."""
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    fold = make_fold(panel.dates, 5, FoldPlan(test=SESSIONS, validation=SESSIONS))
    folder = tmp_path_factory.mktemp("market")
    return {"fold": fold, "panel": panel,
            "plain": write_market_csv(panel, folder / "plain.csv.gz"),
            "validation+test": write_market_csv(scrambled(panel, fold.validation.first), folder / "later.csv.gz"),
            "purge+validation+test": write_market_csv(scrambled(panel, fold.purge.first), folder / "purge.csv.gz")}


def evolve_args(csv, out, *more, budget=32):
    return ["evolve", "--data", str(csv), "--budget", str(budget), "--group-size", "4", "--islands", "2",
            "--pseudo-holdout", str(SESSIONS), "--probe", "2", "--workers", "1", "--out", str(out), *more]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def plain_run(market, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "plain"
    assert main(evolve_args(market["plain"], out, "--fold", "5")) == 0
    return out


@pytest.mark.parametrize("which", ["validation+test", "purge+validation+test"])
def test_scrambling_the_later_prices_leaves_every_reward_of_the_run_bit_identical(market, plain_run, tmp_path, which):
    loaded = load_panel(market[which])
    fold = market["fold"]
    changed = ~np.all(loaded.data["close"] == market["panel"].data["close"], axis=1)
    assert not changed[:fold.search.stop].any() and changed[fold.validation.first:].mean() > 0.9   # what was scrambled
    out = tmp_path / "scrambled"
    assert main(evolve_args(market[which], out, "--fold", "5")) == 0
    # every proposal, its reward and verdict, to the bit (the log writes each float's shortest exact repr)
    assert (out / "proposals.jsonl").read_bytes() == (plain_run / "proposals.jsonl").read_bytes()
    rewards = [r["reward"] for r in _lines(out / "proposals.jsonl") if r["status"] == "scored"]
    assert len(rewards) == 32 and len(set(rewards)) > 10
    assert (out / "archive.jsonl").read_bytes() == (plain_run / "archive.jsonl").read_bytes()
    # the book the run chose on train is bit-identical; what it ships was chosen on the validation window, which
    # the scramble may move (tests/test_fold_shipped_book.py holds it to score_fold's choice)
    books = [json.loads((d / "book.json").read_text()) for d in (out, plain_run)]
    assert books[0]["train_book"] == books[1]["train_book"]
    assert all(b["chosen_on"] in ("validation", "train") for b in books)
    states = [json.loads((d / "state.json").read_text()) for d in (out, plain_run)]
    for s in states:
        s["admitted"] = {k: dict(v, added=0) for k, v in s["admitted"].items()}   # the archive's clock stamps
        s.pop("archive")
    assert states[0] == states[1]
    a, b = (json.loads((d / SUMMARY_FILE).read_text()) for d in (out, plain_run))
    assert a["selections"]["best_train"]["formulas"] == b["selections"]["best_train"]["formulas"]
    assert a["selections"]["book_train"]["formulas"] == b["selections"]["book_train"]["formulas"]
    # the scramble reached the windows scored afterwards: their scores moved
    assert a["selections"]["pool"]["test"] != b["selections"]["pool"]["test"]
    assert a["selections"]["pool"]["validation"] != b["selections"]["pool"]["validation"]


def test_a_fold_run_writes_and_prints_its_choices_on_the_fold_windows(market, plain_run, capsys):
    fold = market["fold"]
    summary = json.loads((plain_run / SUMMARY_FILE).read_text())
    assert summary["fold"] == fold.to_dict()
    assert list(summary["selections"]) == [k for k, _ in SELECTIONS]
    stamp = json.loads((plain_run / "evolve-settings.json").read_text())
    assert stamp["fold"] == fold.to_dict()
    assert stamp["train_window"] == [fold.search.start, fold.search.end]
    assert stamp["pseudo_holdout"] == [fold.validation.start, fold.validation.end]   # the kept answers' window
    rows = _lines(plain_run / ROWS_FILE)
    scored = {r["formula"] for r in rows}
    for key, _ in SELECTIONS:
        assert set(summary["selections"][key]["formulas"]) <= scored
    # the kept answers were scored on the validation window with the purge as lookback history, not the search tail
    held = json.loads(next(plain_run.glob("holdout-step-*.json")).read_text())
    assert (held["holdout_start"], held["holdout_end"]) == (fold.validation.start, fold.validation.end)
    # a rerun of the finished run reads the same choices again and prints them
    capsys.readouterr()
    assert main(evolve_args(market["plain"], plain_run, "--fold", "5")) == 0
    out = capsys.readouterr().out
    assert f"walk-forward fold 5/5: search {fold.search.start}..{fold.search.end}, purge 252 sessions" in out
    assert "book chosen on validation" in out and f"test {fold.test.start}..{fold.test.end}" in out
    assert json.loads((plain_run / SUMMARY_FILE).read_text()) == summary


def test_a_fold_run_resumes_only_on_its_own_fold(market, plain_run, capsys):
    capsys.readouterr()
    assert main(evolve_args(market["plain"], plain_run, "--fold", "4")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings" in err[0]
    assert main(evolve_args(market["plain"], plain_run)) == 2        # the same folder without a fold
    assert "other settings" in capsys.readouterr().err


#: --fold spellings that are not a fold: argparse refuses them naming the range, before any data is read.
BAD_FOLD_FLAGS = ["0", "6", "-1", "1.5", "two", "", "٣", " 1", "1_0", "all", "5x"]


@pytest.mark.parametrize("text", BAD_FOLD_FLAGS)
def test_a_bad_fold_flag_is_refused_naming_the_folds(text, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(evolve_args(tmp_path / "no-such-data.csv", tmp_path / "run", "--fold", text))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --fold" in err and "1..5" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fold", ["1", "2", "3"])
def test_a_fold_the_data_cannot_hold_is_refused_in_one_line(market, tmp_path, capsys, fold):
    """At 120-session windows the smoke market holds folds 4 and 5 only."""
    capsys.readouterr()
    args = evolve_args(market["plain"], tmp_path / "run", "--fold", fold)
    args[args.index("--pseudo-holdout") + 1] = "120"
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"fold {fold} does not fit the data" in err[0] and "the data has 800" in err[0]


# ------------------------------------------------------------------------------ the choices, directly
@pytest.fixture(scope="module")
def fold_setup():
    panel = synthetic_panel(n_stocks=12, n_days=900, seed=3)
    panels = fold_panels(panel, "5", 80)
    return panel, panels, Verifier(panels.search)


#: A pool: formulas with made-up train rewards (the order the train reward ranks them in is what matters), and
#: slow books the search window's 2% turnover floor refuses.
POOL = ["rank(volume)", "-rank(ts_delta(close, 3))", "rank(ts_delta(close, 5))", "-ts_corr(open, volume, 10)",
        "rank(-returns)", "ts_rank(volume, 10)", "-rank(high - low)", "rank(close / open)", "-rank(vwap - close)",
        "ts_corr(close, volume, 5)", "rank(ts_mean(returns, 3))", "-ts_rank(close, 20)"]
SLOW = ["ts_max(close, 100)", "ts_mean(volume, 126)"]


def _pool(formulas):
    return [PoolEntry(f, float(len(formulas) - i), None) for i, f in enumerate(formulas)]


def test_choices_on_validation_read_the_validation_window_alone(fold_setup):
    panel, panels, verifier = fold_setup
    result = score_fold(_pool(POOL + SLOW), verifier, panels, shortlist=10)
    rows = {r["formula"]: r for r in result["rows"]}
    sel = result["selections"]
    assert sel["best_train"]["formulas"] == [POOL[0]]
    assert sel["top_train"]["formulas"] == (POOL + SLOW)[:TOP]
    shortlisted = [f for f in POOL[:10] if rows[f]["validation"] is not None]
    best = max(shortlisted, key=lambda f: (rows[f]["validation"], f))
    assert sel["best_validation"]["formulas"] == [best]
    assert sel["top_validation"]["formulas"] == sorted(shortlisted, key=lambda f: (-rows[f]["validation"], f))
    assert set(sel["book_validation"]["formulas"]) <= set(shortlisted)
    # the test window cannot reach a choice: with its prices scrambled every choice stays, and its scores move
    later = cut_fold(scrambled(panel, panels.fold.test.first), panels.fold)
    again = score_fold(_pool(POOL + SLOW), verifier, later, shortlist=10)
    for key, _ in SELECTIONS:
        assert again["selections"][key]["formulas"] == sel[key]["formulas"]
        assert again["selections"][key]["validation"] == sel[key]["validation"]
    assert again["selections"]["pool"]["test"] != sel["pool"]["test"]


def test_one_validity_a_formula_refused_on_the_search_window_scores_nowhere(fold_setup):
    _panel, panels, verifier = fold_setup
    result = score_fold(_pool(SLOW + POOL[:3]), verifier, panels)
    rows = {r["formula"]: r for r in result["rows"]}
    for f in SLOW:
        assert rows[f]["train_valid"] is False and rows[f]["validation"] is None and rows[f]["test"] is None
        assert rows[f]["reason"].startswith(TRAIN_REFUSED)
        # the holdout alone would have scored it on both windows
        for history, window in ((panels.validation_history, panels.validation), (panels.test_history, panels.test)):
            assert evaluate_holdout([f], history, window, alpha_tests=False).answers[0].valid
    assert result["selections"]["best_train"]["test_valid"] == 0     # the best by reward was a refused one
    assert result["selections"]["best_validation"]["formulas"][0] in POOL[:3]


def test_a_window_score_is_the_holdout_score_with_the_windows_own_history(fold_setup):
    _panel, panels, verifier = fold_setup
    result = score_fold(_pool(POOL[:4]), verifier, panels)
    direct = evaluate_holdout(POOL[:4], panels.test_history, panels.test, train_verifier=verifier, alpha_tests=False)
    assert [r["test"] for r in result["rows"]] == [a.score for a in direct.answers]
    # the book chosen on train when the run kept none: select_correlation_capped over the search window's books
    from alpha_gym.evaluation.selection import Candidate, select_correlation_capped
    expected = select_correlation_capped([Candidate.from_evaluated(verifier.admit(f)) for f in POOL[:4]])
    assert result["selections"]["book_train"]["formulas"] == list(expected.members)


def test_the_pool_sample_is_a_uniform_draw_that_ignores_scores():
    pool = [f"rank(ts_delta(close, {d}))" for d in range(1, 201)]
    drawn = pool_sample(pool, 50)
    assert len(drawn) == 50 == len(set(drawn)) and drawn == [f for f in pool if f in set(drawn)]
    assert drawn == pool_sample(pool, 50) and pool_sample(pool[:30], 50) == pool[:30]
    assert max(pool.index(f) for f in drawn) > 150 and min(pool.index(f) for f in drawn) < 50


def test_a_pool_on_another_window_or_an_empty_one_is_refused(fold_setup):
    panel, panels, verifier = fold_setup
    with pytest.raises(WalkForwardError, match="not on fold 5's search window"):
        score_fold(_pool(POOL[:2]), Verifier(panel.window(end=panels.fold.validation.end)), panels)
    with pytest.raises(WalkForwardError, match="empty pool"):
        score_fold([], verifier, panels)


def test_a_short_shortlist_still_scores_the_top_by_train_reward(fold_setup):
    _panel, panels, verifier = fold_setup
    result = score_fold(_pool(POOL + SLOW), verifier, panels, shortlist=2, pool_size=2)
    sel = result["selections"]
    assert sel["top_train"]["n"] == len(POOL + SLOW) and sel["top_train"]["test_valid"] == len(POOL)
    assert set(sel["top_validation"]["formulas"]) <= set(POOL[:2]) and sel["pool"]["n"] == 2


@pytest.mark.real_data
def test_on_the_real_panel_fold_5s_test_score_is_the_pseudo_holdout_score(real_us46):
    """Fold 5's test window is the comparison's pseudo-holdout with the same lookback history (its validation
    window is the year before it), so a formula valid on both training windows scores the same on both."""
    panels = fold_panels(real_us46, "5", 252)
    formulas = ["rank(volume)", "rank(-ts_delta(close, 5))", "-ts_corr(open, volume, 10)"]
    result = score_fold(_pool(formulas), Verifier(panels.search), panels)
    assert all(r["train_valid"] for r in result["rows"])
    train, hold = real_us46.window(end="2024-08-16"), real_us46.window(start="2024-08-19")
    direct = evaluate_holdout(formulas, train, hold, alpha_tests=False)
    assert [r["test"] for r in result["rows"]] == [a.score for a in direct.answers]
    assert all(a.valid for a in direct.answers)


# ------------------------------------------------------------------------------ PBO, effective bets, the reference
def test_the_pbo_is_cscv_over_the_pools_search_window_pnl(fold_setup):
    _panel, panels, verifier = fold_setup
    from alpha_gym.evaluation.holdout import train_verdict
    from alpha_gym.evaluation.overfitting import probability_of_backtest_overfitting
    result = score_fold(_pool(POOL + SLOW), verifier, panels)
    pbo = result["pbo"]
    nets = [train_verdict(verifier, f).net for f in POOL]            # best train reward first; SLOW is refused
    direct = probability_of_backtest_overfitting(np.stack(nets, axis=1), PBO_BLOCKS)
    assert pbo["pbo"] == direct.pbo and pbo["n_splits"] == 12_870 and pbo["n_days"] == len(nets[0]) > 400
    assert (pbo["n_pool"], pbo["n_drawn"], pbo["n_candidates"]) == (len(POOL + SLOW), len(POOL + SLOW), len(POOL))
    assert "daily net P&L on the search window" in pbo["pnl"]
    capped = score_fold(_pool(POOL + SLOW), verifier, panels, pbo_cap=5)["pbo"]
    assert capped["n_drawn"] == 5 and capped["n_pool"] == len(POOL + SLOW)
    assert score_fold(_pool(POOL[:3]), verifier, panels, pbo_cap=0)["pbo"] is None
    alone = score_fold(_pool(POOL[:1] + SLOW), verifier, panels)["pbo"]      # one valid formula: no choice to make
    assert alone["pbo"] is None and "1 pool formula(s) valid" in alone["reason"]
    for bad in (-1, 2.5, True, "100", None):                              # a cap that is no count: one named error
        with pytest.raises(WalkForwardError, match="pbo_cap"):
            score_fold(_pool(POOL[:3]), verifier, panels, pbo_cap=bad)


def test_the_pbo_of_a_row_reads_a_planted_edge_and_noise():
    """The row's PBO is `overfitting`'s over the formulas valid on the search window (the statistic itself on
    noise and planted edges: test_overfitting.py)."""
    rng = np.random.default_rng(0)
    noise = {f"f{j}": rng.normal(0.0, 0.01, 1000) for j in range(40)}
    edge = dict(noise, f7=noise["f7"] + 0.003)
    refused = dict(edge, slow=None)
    got = [pool_pbo(nets, len(nets))["pbo"] for nets in (noise, edge, refused)]
    assert 0.1 < got[0] < 0.9 and got[1] <= 0.01 and got[2] == got[1]
    assert pool_pbo(refused, 50)["n_candidates"] == 40 and pool_pbo(refused, 50)["n_drawn"] == 41
    short = pool_pbo({"a": np.zeros(20), "b": np.ones(20)}, 2)
    assert short["pbo"] is None and "at least 32 days" in short["reason"]


def test_each_choice_carries_its_effective_bets_on_each_window(fold_setup):
    _panel, panels, verifier = fold_setup
    from alpha_gym.evaluation.holdout import train_verdict
    from alpha_gym.evaluation.selection import effective_bets
    result = score_fold(_pool(POOL + SLOW), verifier, panels)
    test = {a.formula: a for a in evaluate_holdout(POOL + SLOW, panels.test_history, panels.test,
                                                    train_verifier=verifier, alpha_tests=False).answers}
    for key, _ in SELECTIONS:
        sel = result["selections"][key]
        valid = [f for f in sel["formulas"] if f not in SLOW]
        bets = sel["effective_bets"]
        if not valid:
            assert bets["search"] is None
            continue
        assert bets["search"] == pytest.approx(effective_bets(np.stack([train_verdict(verifier, f).net
                                                                        for f in valid])))
        on_test = [test[f].net for f in valid if test[f].valid]
        assert bets["test"] == (pytest.approx(effective_bets(np.stack(on_test))) if on_test else None)
        assert 1.0 - 1e-9 <= bets["search"] <= len(valid) + 1e-9
    assert result["selections"]["best_train"]["effective_bets"]["search"] == pytest.approx(1.0)


def test_the_reference_is_scored_like_a_choice(fold_setup):
    _panel, panels, verifier = fold_setup
    result = score_fold(_pool(POOL[1:4]), verifier, panels)         # the reference is not in the pool
    direct = evaluate_holdout([REFERENCE], panels.test_history, panels.test, train_verifier=verifier,
                              alpha_tests=False).answers[0]
    ref = result["reference"]
    assert ref["formula"] == REFERENCE == "rank(volume)" and ref["train_valid"] is True
    assert ref["test"] == direct.score is not None
    row = next(r for r in result["rows"] if r["formula"] == REFERENCE)
    assert row["in"] == ["reference"]                               # in no choice
    assert all(REFERENCE not in s["formulas"] for s in result["selections"].values())
