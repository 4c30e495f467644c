"""One path from answer to score (issue 29.2): `alpha_gym.book.answer.answer_to_book`, used by the verifier,
the holdout, the stress worlds and the seed cache, with one definition of the model's faults."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_gym.book.answer import InvalidVerdict, Traded, answer_to_book
from alpha_gym.evaluation.holdout import HoldoutEvaluator, evaluate_holdout
from alpha_gym.language import DEFAULT_LIMITS, FormulaError, FormulaLimitError, Limits, depth, lookback, parse
from alpha_gym.language.errors import MODEL_FAULTS, is_model_fault
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.holdout_config import HoldoutConfig
from alpha_gym.scoring.seed_cache import compute_seed_books
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.stress.provider import StressProvider

DEEP = "rank(ts_mean(abs(ts_delta(close, 5)), 10))"      # 5 levels deep: valid under the default limits
SHALLOW = "rank(-ts_delta(close, 5))"
TIGHT = Limits(max_depth=4)


def _split(panel):
    return panel.head(300), panel.window(start=panel.dates[300])


def _values(node, signal):
    return signal


def test_the_deep_formula_is_what_the_limit_test_needs():
    assert depth(parse(DEEP)) == 5 and depth(parse(SHALLOW)) <= 4
    with pytest.raises(FormulaLimitError):
        parse(DEEP, TIGHT)


def test_a_custom_limit_changes_the_verifier_and_the_holdout_verdict_alike(small_synthetic):
    train, hold = _split(small_synthetic)
    for limits, deep_ok in ((DEFAULT_LIMITS, True), (TIGHT, False)):
        config = VerifierConfig(limits=limits, archive_seed=False, stress_checkpoint=None)
        verifier = Verifier(train, config)
        score = verifier.score(f"<alpha>{DEEP}</alpha>")
        report = evaluate_holdout([DEEP, SHALLOW], train, hold, train_verifier=verifier, alpha_tests=False)
        deep, shallow = report.answers
        assert report.config.limits == limits            # HoldoutConfig.from_verifier carries the limits
        assert score.valid is deep.valid is deep_ok
        assert shallow.valid
        if not deep_ok:
            assert score.diagnostics["error"] == "limit" and "levels deep" in score.reason
            assert deep.reason == score.reason            # the same verdict, word for word
            assert deep.train_cpcv is None                # and the training window refuses it too


def test_the_holdout_honours_its_own_limits_without_a_verifier(small_synthetic):
    train, hold = _split(small_synthetic)
    loose = HoldoutEvaluator(train, hold).score(DEEP)
    tight = HoldoutEvaluator(train, hold, config=HoldoutConfig(limits=TIGHT)).score(f"<alpha>{DEEP}</alpha>")
    assert loose.valid and not tight.valid and "levels deep" in tight.reason


def test_one_definition_of_the_models_faults():
    assert FormulaError in MODEL_FAULTS and ValueError in MODEL_FAULTS
    assert is_model_fault(FormulaLimitError("too deep")) and is_model_fault(FloatingPointError())
    assert is_model_fault(MemoryError()) and not is_model_fault(TypeError()) and not is_model_fault(KeyError("x"))


def test_answer_to_book_reads_answers_formulas_or_either(small_synthetic):
    limits = DEFAULT_LIMITS
    tagged = f"<think>reversal</think><alpha>{SHALLOW}</alpha>"
    got = answer_to_book(tagged, limits, small_synthetic, _values, source="answer")
    assert isinstance(got, Traded) and got.has_reasoning and got.book.shape == small_synthetic.shape
    assert got.text == "rank(-ts_delta(close, 5))"
    bare = answer_to_book(SHALLOW, limits, small_synthetic, _values, source="answer")
    assert isinstance(bare, InvalidVerdict) and (bare.kind, bare.error, bare.formula) == ("missing_tag", "answer", None)
    assert isinstance(answer_to_book(SHALLOW, limits, small_synthetic, _values, source="auto"), Traded)
    as_formula = answer_to_book(tagged, limits, small_synthetic, _values, source="formula")
    assert isinstance(as_formula, InvalidVerdict) and as_formula.error == "syntax"
    assert isinstance(answer_to_book(tagged, limits, small_synthetic, _values, source="auto"), Traded)
    with pytest.raises(ValueError, match="source"):
        answer_to_book(SHALLOW, limits, small_synthetic, _values, source="guess")


def test_a_fault_while_trading_is_the_models_and_a_bug_raises(small_synthetic):
    def overflowing(node, signal):
        raise FloatingPointError("overflow in the book")

    def buggy(node, signal):
        raise TypeError("a bug of ours")

    got = answer_to_book(SHALLOW, DEFAULT_LIMITS, small_synthetic, overflowing, source="formula")
    assert isinstance(got, InvalidVerdict) and got.error == "evaluation" and got.kind == "unparseable"
    assert got.reason == "evaluation failed: FloatingPointError: overflow in the book" and got.node is not None
    with pytest.raises(TypeError, match="a bug"):
        answer_to_book(SHALLOW, DEFAULT_LIMITS, small_synthetic, buggy, source="formula")


def test_the_lookback_check_sits_between_parse_and_evaluation(small_synthetic):
    calls = []
    got = answer_to_book("ts_mean(close, 60)", DEFAULT_LIMITS, small_synthetic,
                         lambda n, s: calls.append(n), source="formula", max_lookback=30)
    assert isinstance(got, InvalidVerdict) and got.error == "lookback" and calls == []
    assert got.reason == f"lookback {lookback(parse('ts_mean(close, 60)'))} exceeds the 30-session context"


def test_evaluate_still_raises_and_trade_returns_the_verdict(small_synthetic):
    verifier = Verifier(small_synthetic, VerifierConfig(limits=TIGHT, archive_seed=False, stress_checkpoint=None))
    with pytest.raises(FormulaLimitError):
        verifier.evaluate(DEEP)
    verdict = verifier.trade(DEEP)
    assert isinstance(verdict, InvalidVerdict) and verdict.error == "limit"
    assert verifier.trade(SHALLOW).cpcv == verifier.evaluate(SHALLOW).cpcv


def test_the_stress_worlds_and_the_seed_cache_take_the_same_path(small_synthetic):
    config = VerifierConfig(limits=TIGHT, archive_seed=False, stress_checkpoint=None)
    world = Verifier(small_synthetic, config)
    scores = StressProvider({"world": world}, "on").scenario_scores(DEEP)
    assert scores == {"world": float(config.reward_unparseable)}   # refused by the world's limits, not raised
    assert np.isfinite(StressProvider({"world": world}, "on").scenario_scores(SHALLOW)["world"])
    books = compute_seed_books(world, [DEEP, SHALLOW, "not a formula ("])
    assert [b.text for b in books] == ["rank(-ts_delta(close, 5))"]
