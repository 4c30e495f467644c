"""The industry's alpha tests (WorldQuant BRAIN's submission tests): diagnostics on books whose values are known."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from alpha_gym.book import metrics
from alpha_gym.evaluation import alpha_tests as T
from alpha_gym.evaluation.holdout import evaluate_holdout
from alpha_gym.scoring.archive import Archive
from alpha_gym.scoring.verifier import Verifier

# a book earning +0.3% and -0.1% on alternate days: mean 0.1%, deviations +-0.2%
NET = np.tile([0.003, -0.001], 126)


def test_fitness_of_a_known_book_by_hand():
    sd = 0.002 * math.sqrt(252 / 251)              # sample std of +-0.002 around the mean, 252 points
    sharpe = 0.001 / sd * math.sqrt(252)
    assert metrics.sharpe(NET) == pytest.approx(sharpe, rel=1e-12)
    assert T.annual_return(NET) == pytest.approx(0.252, rel=1e-12)
    # turnover 30% a day: above the 12.5% floor, so it divides the return
    tests = T.alpha_tests(metrics.sharpe(NET), NET, 0.30, 0.05)
    assert tests["fitness"]["value"] == pytest.approx(sharpe * math.sqrt(0.252 / 0.30), rel=1e-12)
    assert tests["fitness"]["pass"] is True and tests["fitness"]["value"] > 1
    # turnover 5% a day: the 12.5% floor applies instead
    assert T.fitness(sharpe, 0.252, 0.05) == pytest.approx(sharpe * math.sqrt(0.252 / 0.125), rel=1e-12)
    assert T.fitness(2.0, 0.18, 0.5) == pytest.approx(1.2)
    assert T.fitness(1.0, -0.25 * 0.125, 0.01) == pytest.approx(0.5)   # |returns|: a loser's fitness keeps its sign
    assert T.fitness(-1.0, -0.25 * 0.125, 0.01) == pytest.approx(-0.5)


def test_a_low_fitness_book_fails_only_fitness():
    net = NET * 0.001   # the same Sharpe (7.9), a thousandth of the return
    tests = T.alpha_tests(metrics.sharpe(net), net, 0.30, 0.05, sub_sharpe=10.0, n_sub=23, n_full=46,
                          self_corr=0.1, self_corr_with="x")
    assert tests["fitness"]["value"] == pytest.approx(metrics.sharpe(net) * math.sqrt(0.000252 / 0.30))
    assert tests["failed"] == ["fitness"] and tests["passed"] is False
    assert all(tests[t]["source"] == "docs/alpha_tests.md" for t in T.TESTS)


def test_sub_universe_cutoff_and_verdict():
    assert T.sub_universe_cutoff(2.0, 23, 46) == pytest.approx(0.75 * math.sqrt(0.5) * 2.0)
    full = metrics.sharpe(NET)
    cut = 0.75 * math.sqrt(0.5) * full
    passing = T.alpha_tests(full, NET, 0.3, 0.05, sub_sharpe=cut, n_sub=23, n_full=46)
    failing = T.alpha_tests(full, NET, 0.3, 0.05, sub_sharpe=cut - 1e-9, n_sub=23, n_full=46)
    assert passing["sub_universe"]["pass"] is True and failing["sub_universe"]["pass"] is False
    assert passing["sub_universe"]["cutoff"] == pytest.approx(cut)


def test_liquid_half_by_mean_dollar_volume():
    dv = np.array([[1.0, 5.0, 3.0, 9.0, np.nan],
                   [1.0, 5.0, 3.0, 9.0, 100.0]])
    # means 1, 5, 3, 9, 100 (NaN skipped): the two largest of five are columns 3 and 4
    assert T.liquid_half(dv).tolist() == [3, 4]
    assert T.liquid_half(np.ones((3, 4))).tolist() == [0, 1]   # ties keep the earlier columns


def test_weight_and_turnover_tests_on_a_known_book():
    w = np.array([[0.25, -0.25, 0.25, -0.25],
                  [0.05, -0.05, 0.45, -0.45]])
    assert T.max_abs_weight(w) == 0.45
    tests = T.alpha_tests(1.0, NET, 0.80, T.max_abs_weight(w))
    assert tests["max_weight"]["pass"] is False and tests["turnover"]["pass"] is False
    assert T.alpha_tests(1.0, NET, 0.70, 0.0999)["turnover"]["pass"] is False   # the band is open: 1% < t < 70%
    assert T.alpha_tests(1.0, NET, 0.6999, 0.0999)["max_weight"]["pass"] is True
    assert T.alpha_tests(1.0, NET, 0.01, 0.05)["turnover"]["pass"] is False
    # a test that did not run leaves its pass None and is not counted against "passed"
    assert tests["sub_universe"]["pass"] is None and tests["self_correlation"]["pass"] is None


def test_self_correlation_names_the_nearest_archive_entry():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=252), rng.normal(size=252)
    archive = Archive("fp", 252)
    archive.add("A", "book a", a, 0.0, np.zeros(15), np.zeros(15), seed=True)
    archive.add("B", "book b", b, 0.0, np.zeros(15), np.zeros(15), seed=True)
    corr, k = T.self_correlation(-3 * b + 1, archive)   # sign and scale do not matter
    assert k == 1 and corr == pytest.approx(1.0) and archive.texts[k] == "book b"
    assert corr == pytest.approx(archive.max_abs_corr(-3 * b + 1))
    tests = T.alpha_tests(1.0, NET, 0.3, 0.05, self_corr=corr, self_corr_with="book b")
    assert tests["self_correlation"]["pass"] is False and tests["self_correlation"]["most_correlated"] == "book b"
    assert T.self_correlation(a, Archive("fp", 252)) == (0.0, None)


def test_on_a_verifier_the_tests_read_its_book_and_leave_the_score_alone(small_synthetic):
    verifier = Verifier(small_synthetic)
    formula = "rank(-ts_delta(close, 5))"
    before = verifier.score_formula(formula).to_dict()
    tests = T.score_alpha_tests(verifier, formula)
    after = verifier.score_formula(formula)
    assert after.to_dict() == before   # a diagnostic: the reward and channels are bit-identical
    d = after.diagnostics
    fit = T.fitness(d["sharpe"], T.annual_return(verifier.evaluate(formula).net), d["turnover"])
    assert tests["fitness"]["value"] == pytest.approx(fit, rel=1e-12)
    assert tests["turnover"]["value"] == d["turnover"]
    # the sub-universe book is the formula traded on the 6 most liquid of the 12 stocks
    idx = T.liquid_half(small_synthetic.field("dollar_volume"))
    sub = Verifier(small_synthetic.select([small_synthetic.tickers[i] for i in idx]))
    assert tests["sub_universe"]["n_sub"] == 6 and tests["sub_universe"]["n_full"] == 12
    assert tests["sub_universe"]["value"] == pytest.approx(sub.evaluate(formula).sharpe, rel=1e-12)
    assert tests["self_correlation"]["value"] == pytest.approx(verifier.archive.max_abs_corr(verifier.evaluate(formula).net))
    assert tests["self_correlation"]["most_correlated"] in verifier.archive.texts
    json.dumps(tests, allow_nan=False)


def test_cli_score_reports_the_tests(capsys):
    from alpha_gym.commands.main import main
    assert main(["score", "rank(-ts_delta(close, 5))", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["alpha_tests"]) == set(T.TESTS) | {"passed", "failed"}
    assert printed["alpha_tests"]["fitness"]["threshold"] == ">= 1"
    assert main(["score", "rank(-ts_delta(close, 5))"]) == 0
    text = capsys.readouterr().out
    assert "Alpha tests (WorldQuant BRAIN's submission tests" in text and "sub_universe" in text
    assert main(["score", "rank(close -)", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["alpha_tests"] is None   # invalid: nothing to test


def test_holdout_report_carries_the_tests(small_synthetic, tmp_path):
    from alpha_gym.evaluation.report import write_report
    train, hold = small_synthetic.head(300), small_synthetic.window(start=small_synthetic.dates[300])
    verifier = Verifier(train)
    rep = evaluate_holdout(["rank(-ts_delta(close, 5))", "rank(close -)"], train, hold, train_verifier=verifier)
    good, bad = rep.answers
    assert bad.alpha_tests is None and "alpha_tests" not in bad.to_dict()
    t = good.alpha_tests
    assert t["fitness"]["value"] == pytest.approx(T.fitness(good.sharpe, T.annual_return(good.net), good.turnover))
    assert t["self_correlation"]["value"] == pytest.approx(
        verifier.archive.max_abs_corr(verifier.evaluate(good.formula).net))
    assert t["sub_universe"]["n_sub"] == 6 and t["sub_universe"]["value"] is not None
    # without a training verifier there is no archive: self-correlation does not run
    alone = evaluate_holdout(["rank(-ts_delta(close, 5))"], train, hold).answers[0].alpha_tests
    assert alone["self_correlation"]["pass"] is None and alone["sub_universe"]["value"] == t["sub_universe"]["value"]
    rep.save(tmp_path)
    page = write_report(tmp_path).read_text()
    assert "Alpha tests per answer" in page and "alpha tests passed" in page
