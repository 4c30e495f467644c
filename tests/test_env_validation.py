"""`AlphaFormula-v0`'s opt-in validation reading (`fold=`, `validation_score=True`): the verifier sees the fold's
search window only, `info["validation"]` is the walk-forward validation score of the same formula, and the
reading never reaches the reward (scrambled validation and test prices leave every reward bit-identical)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import alpha_gym  # noqa: F401  (registers the envs)
from alpha_gym.env import AlphaFormulaEnv, AlphaFormulaEvolveEnv
from alpha_gym.evaluation.holdout import evaluate_holdout
from alpha_gym.evaluation.validation import REFUSED_ON_SEARCH
from alpha_gym.market import synthetic_panel
from alpha_gym.market.folds import FoldError, FoldPlan, cut_fold, make_fold
from alpha_gym.scoring.holdout_config import HoldoutConfig
from alpha_gym.scoring.verifier import Verifier
from fold_markets import scrambled  # a panel whose later sessions are shuffled

ANSWERS = ["<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(ts_corr(close, volume, 10))</alpha>",
           "<alpha>-rank(ts_std(returns, 20))</alpha>", "<alpha>rank(close)</alpha>", "no formula here",
           "<alpha>rank(volume) +</alpha>", "<alpha>1</alpha>"]


@pytest.fixture(scope="module")
def market():
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    return panel, make_fold(panel.dates, 5, FoldPlan(test=60, validation=60))


def run(env, answers=ANSWERS):
    out = []
    for k, a in enumerate(answers):
        env.reset(seed=k, options={"brief_index": k})
        out.append(env.step(a))
    return out


def test_the_verifier_sees_the_search_window_and_the_reading_is_the_walk_forward_validation_score(market):
    panel, fold = market
    env = AlphaFormulaEnv(panel=panel, fold=fold, validation_score=True, archive="frozen")
    assert env.verifier.panel.dates[-1] == panel.dates[fold.search.stop - 1]
    assert env.fold == fold
    steps = run(env)
    panels = cut_fold(panel, fold)
    # the reward is score_group's on the fold's search window (a fresh verifier there, its archive frozen too)
    verifier = Verifier(panels.search)
    for k, (answer, step) in enumerate(zip(ANSWERS, steps)):
        assert step[1] == verifier.score_group([answer], brief=env.briefs[k % len(env.briefs)]).scores[0].reward
    formulas = [s[4]["formula"] for s in steps]
    report = evaluate_holdout(formulas, panels.validation_history, panels.validation,
                              config=HoldoutConfig.from_verifier(env.verifier.config), alpha_tests=False,
                              train_valid=[s[4]["valid"] for s in steps])
    n_scored = 0
    for (_, _, _, _, info), expected in zip(steps, report.answers):
        reading = info["validation"]
        assert reading["window"] == {"start": fold.validation.start, "end": fold.validation.end, "fold": 5}
        if not info["valid"]:
            assert reading["valid"] is False and reading["score"] is None
            assert reading["reason"].startswith(REFUSED_ON_SEARCH) and info["reason"] in reading["reason"]
            continue
        assert reading["valid"] == expected.valid
        if expected.valid:
            n_scored += 1
            assert reading["score"] == pytest.approx(expected.score, rel=0, abs=0)
    assert n_scored >= 2          # the reading was exercised, not only refusals


def test_the_reading_never_reaches_the_reward(market):
    panel, fold = market
    plain = run(AlphaFormulaEnv(panel=panel, fold=fold, validation_score=True))
    without = run(AlphaFormulaEnv(panel=panel, fold=fold))
    later = run(AlphaFormulaEnv(panel=scrambled(panel, fold.validation.first, seed=3), fold=fold,
                                validation_score=True))
    assert [s[1] for s in plain] == [s[1] for s in without] == [s[1] for s in later]
    assert all("validation" not in s[4] for s in without)
    assert [s[4]["channels"] for s in plain] == [s[4]["channels"] for s in later]
    # the validation window's prices did change what the reading says
    assert [s[4]["validation"]["score"] for s in plain] != [s[4]["validation"]["score"] for s in later]


def test_gym_make_and_the_improve_env_take_the_fold(market):
    panel, fold = market
    env = gym.make("AlphaFormula-v0", panel=panel, fold=fold, validation_score=True)
    env.reset(seed=0)
    _, _, _, _, info = env.step(ANSWERS[0])
    assert info["valid"] and info["validation"]["window"]["fold"] == 5
    evolve = AlphaFormulaEvolveEnv(panel=panel, fold=fold, validation_score=True, briefs=None,
                                   database=["rank(-ts_delta(close, 5))", "rank(ts_corr(close, volume, 10))"])
    evolve.reset(seed=0)
    _, _, _, _, info = evolve.step(ANSWERS[2])
    assert "validation" in info and "improvement" in info
    assert evolve.verifier.panel.dates[-1] == panel.dates[fold.search.stop - 1]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"validation_score": True}, ValueError, "needs fold"),
    ({"fold": 5, "validation_score": "yes"}, ValueError, "True or False"),
    ({"fold": "x"}, FoldError, "not a fold number"),
    ({"fold": 9}, FoldError, "out of range"),
    ({"fold": 5}, FoldError, "does not fit the data"),     # the default plan needs more sessions than 800
])
def test_bad_fold_options_are_clear_errors(market, kwargs, error, match):
    panel, _ = market
    with pytest.raises(error, match=match):
        AlphaFormulaEnv(panel=panel, **kwargs)


def test_a_fold_with_a_given_verifier_is_refused(market):
    panel, fold = market
    env = AlphaFormulaEnv(panel=panel)
    with pytest.raises(ValueError, match="not both"):
        AlphaFormulaEnv(verifier=env.verifier, fold=fold)
