"""R14 `book` (issue 39.2): what an answer adds to the run's correlation-capped book, off by default (priority 0:
not computed, 0), on in the `book` and `brief_book` reward recipes. Its rule is `alpha_gym.scoring.book_gain`
(tests/test_book_gain.py); here: the verifier's candidates (the archive's learned entries as they stand), the
properties the issue asks for through the verifier, the reward contract on every in-process path, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_gym.scoring import cpcv
from alpha_gym.scoring.book_gain import Candidate
from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES, REWARD_RECIPES, VerifierConfig, weighted_sum
from alpha_gym.scoring.verifier import Verifier

# On the embedded synthetic market (46 stocks x 3,304 days), train CPCV and |daily P&L correlation|:
#   FAST  rank(-ts_delta(close, 5))           0.99
#   SLOW  rank(-ts_delta(close, 6))           0.80   |corr| with FAST 0.85: a near-copy, worse
#   LONG  rank(-ts_delta(close, 60))          0.24   |corr| with FAST 0.31: a different bet
#   DECAY rank(ts_decay_linear(-returns, 5))  1.58   |corr| with FAST 0.73, with LONG 0.25: a better near-copy
#   LOSER rank(ts_corr(close, volume, 10))   -1.73
FAST, SLOW, LONG = "rank(-ts_delta(close, 5))", "rank(-ts_delta(close, 6))", "rank(-ts_delta(close, 60))"
DECAY, LOSER = "rank(ts_decay_linear(-returns, 5))", "rank(ts_corr(close, volume, 10))"
ON = VerifierConfig.recipe("book", archive_seed=False)  # R14 reads the learned entries only: the seeds cost time


def _answer(formula: str) -> str:
    return f"<alpha>{formula}</alpha>"


def _grown(panel, formulas, config=ON) -> Verifier:
    """A verifier whose archive learned `formulas` (scored as one group, then `update_archive`)."""
    v = Verifier(panel, config)
    assert v.update_archive(v.score_group([_answer(f) for f in formulas])) == len(formulas)
    return v


def _book_cpcv(v: Verifier, formulas) -> float:
    """The literal M: the CPCV of the equal-weight book of these formulas' train-window daily net P&L."""
    book = np.mean([v.evaluate(f).net for f in formulas], axis=0)
    test, _ = cpcv.slice_sharpes(book, v.config.cpcv)
    return cpcv.cpcv_score(test, v.config.cpcv.std_penalty)


@pytest.fixture(scope="module")
def market(synthetic46):
    v = Verifier(synthetic46, ON)
    got = {f: v.evaluate(f) for f in (FAST, SLOW, LONG, DECAY, LOSER)}
    corr = lambda a, b: abs(float(np.corrcoef(got[a].net, got[b].net)[0, 1]))  # noqa: E731
    # the premises the tests rest on (if the synthetic market changes, pick other formulas)
    assert got[DECAY].cpcv > got[FAST].cpcv > got[SLOW].cpcv > got[LONG].cpcv > 0 > got[LOSER].cpcv
    assert corr(FAST, SLOW) > 0.5 and corr(FAST, DECAY) > 0.5 and corr(FAST, LONG) < 0.5 > corr(DECAY, LONG)
    return synthetic46


def test_the_channel_is_off_by_default_and_the_recipes_turn_it_on():
    assert DEFAULT_PRIORITIES["book"] == 0.0 and CHANNELS[13] == "book"
    assert REWARD_RECIPES["book"] == {"priorities": {"book": 3.0}}
    assert VerifierConfig.recipe("book").priorities == {**DEFAULT_PRIORITIES, "book": 3.0}
    assert VerifierConfig.recipe("brief_book").priorities == {**DEFAULT_PRIORITIES, "brief": 1.0, "book": 3.0}
    from alpha_gym.settings import load  # the settings file says the same
    assert load(None, ("verifier.priorities.book=3",)).verifier == VerifierConfig.recipe("book")
    # on, its minimum is R1's clip, and the invalid answers sit beneath it; off, nothing moves
    assert VerifierConfig().channel_minima()["book"] == 0.0
    assert VerifierConfig.recipe("book").channel_minima()["book"] == -5.0
    assert VerifierConfig.recipe("book").valid_reward_bound() == VerifierConfig().valid_reward_bound() - 15.0


def test_a_copy_of_a_member_adds_exactly_zero(market):
    v = _grown(market, [FAST, LONG])
    for s in v.score_group([_answer(FAST), _answer(LONG), _answer("rank(-ts_delta(close,60))")]).scores:
        assert s.valid and s.channels["book"] == 0.0
        assert not s.diagnostics["book_gain"]["admitted"] and s.diagnostics["book_gain"]["members"] == 2


def test_an_uncorrelated_profitable_answer_adds_what_it_diversifies(market):
    v = _grown(market, [LONG])
    s = v.score(_answer(FAST))
    want = _book_cpcv(v, [FAST, LONG]) - _book_cpcv(v, [LONG])
    assert s.channels["book"] > 0 and s.channels["book"] == pytest.approx(want, abs=1e-12)
    assert s.diagnostics["book_gain"]["joined"] == [FAST] and s.diagnostics["book_gain"]["left"] == []
    # an empty book (a fresh run) gains the answer's own CPCV, as R1 measures it
    fresh = Verifier(market, ON).score(_answer(FAST))
    assert fresh.channels["book"] == pytest.approx(fresh.diagnostics["cpcv"], abs=1e-12)


def test_a_better_near_copy_replaces_its_member_and_adds_the_difference(market):
    one = _grown(market, [SLOW])                      # a one-member book: the difference of the two CPCVs
    s = one.score(_answer(FAST))
    assert s.diagnostics["book_gain"]["left"] == [SLOW] and s.diagnostics["book_gain"]["joined"] == [FAST]
    assert s.diagnostics["channel_state"]["book"].startswith(f"joins the run's book (1 members, train CPCV 0.80")
    assert f"replacing {SLOW}" in s.diagnostics["channel_state"]["book"]  # the score report's line for R14
    assert s.channels["book"] > 0
    assert s.channels["book"] == pytest.approx(one.evaluate(FAST).cpcv - one.evaluate(SLOW).cpcv, abs=1e-12)
    two = _grown(market, [FAST, LONG])                # in a bigger book: the difference between the two books
    s = two.score(_answer(DECAY))
    assert s.diagnostics["book_gain"]["left"] == [FAST]
    want = _book_cpcv(two, [DECAY, LONG]) - _book_cpcv(two, [FAST, LONG])
    assert s.channels["book"] == pytest.approx(want, abs=1e-12)
    # the worse near-copy is refused by the better member: 0
    assert two.score(_answer(SLOW)).channels["book"] == 0.0


def test_losing_and_invalid_answers_add_nothing_and_sit_where_they_did(market):
    v = _grown(market, [FAST])
    scores = v.score_group([_answer(LOSER), "no tag", "<alpha>rank(close -)</alpha>"]).scores
    assert scores[0].valid and scores[0].channels["book"] == 0.0  # CPCV <= 0: it never joins the run's book
    assert [s.valid for s in scores[1:]] == [False, False]
    assert [s.channels["book"] for s in scores[1:]] == [0.0, 0.0] and "book_gain" not in scores[1].diagnostics
    assert [s.reward for s in scores[1:]] == [ON.invalid_reward("missing_tag"), ON.invalid_reward("unparseable")]
    assert max(s.reward for s in scores[1:]) < ON.valid_reward_bound() <= scores[0].reward


def test_the_recipe_changes_the_scalar_and_the_default_does_not(market):
    answers = [_answer(f) for f in (FAST, LONG, DECAY, SLOW, LOSER)] + ["no tag"]
    off_config = ON.with_(priorities={**ON.priorities, "book": 0.0})
    off, on = _grown(market, [SLOW], off_config), _grown(market, [SLOW])
    default, book = off.score_group(answers), on.score_group(answers)
    assert [s.channels["book"] for s in default.scores] == [0.0] * len(answers)
    assert all("book_gain" not in s.diagnostics for s in default.scores)  # off: nothing computed, nothing said
    gains = [s.channels["book"] for s in book.scores]
    assert gains[0] > 0 and gains[1] != 0 and gains[2] > 0 and gains[3] == 0.0 and gains[4:] == [0.0, 0.0]
    for d, b in zip(default.scores, book.scores):  # the contract, and for a valid answer the default reward + 3 x R14
        assert b.reward == weighted_sum(b.channels, ON.priorities)
        assert d.reward == weighted_sum(d.channels, off_config.priorities)
        if b.valid:  # (an invalid answer's R1 sits 3 x 5 lower with R14 on: beneath the lower valid bound)
            assert {k: x for k, x in b.channels.items() if k != "book"} == \
                {k: x for k, x in d.channels.items() if k != "book"}
            assert b.reward == d.reward + 3.0 * b.channels["book"]
    assert book.rewards.tolist() != default.rewards.tolist()
    assert book.matrix[:, CHANNELS.index("book")].tolist() == gains


def test_deterministic_given_the_archive_also_after_a_save_and_a_load(market, tmp_path):
    answers = [_answer(f) for f in (DECAY, FAST, LONG, SLOW)]
    runs = []
    for _ in range(2):  # two verifiers, the same groups and updates: bit-identical
        v = Verifier(market, ON)
        first = v.score_group(answers[:2])
        v.update_archive(first)
        runs.append((first.rewards.tolist(), v.score_group(answers).matrix.tobytes(), v))
    assert runs[0][:2] == runs[1][:2]
    # group order inside a group does not matter (each answer is offered alone to the same book)
    v = runs[0][2]
    again = v.score_group(answers[::-1])
    assert again.matrix[::-1].tobytes() == runs[0][1]
    # an archive loaded from a file keeps standardised books only: the entries are traded again, to the same bits
    v.save_archive(tmp_path / "archive.npz")
    loaded = Verifier(market, ON)
    loaded.load_archive(tmp_path / "archive.npz")
    assert loaded.score_group(answers).matrix.tobytes() == runs[0][1]
    # a fork keeps its own book: the parent's updates do not reach it
    twin = v.fork()
    assert v.update_archive(v.score_group([answers[2]])) == 1
    assert twin.score_group(answers).matrix.tobytes() == runs[0][1]


def test_every_in_process_path_gives_the_same_reward_with_the_book_on(market):
    """score_group, the scoring pool, the Gym env on the same verifier, the native loop's scoring and the TRL
    reward functions, under the `brief_book` recipe (R13 and R14 on): one reward, the weighted sum."""
    from alpha_gym import pool
    from alpha_gym.env import AlphaFormulaEnv
    from alpha_gym.tasks.sets import brief_set
    config = VerifierConfig.recipe("brief_book", archive_seed=False)
    brief = brief_set("probe")[0]
    answers = [_answer(f) for f in (FAST, DECAY, LONG, LOSER)] + ["no tag"]
    v = _grown(market, [SLOW], config)
    want = v.score_group(answers, brief=brief)
    assert [s.channels["book"] != 0 for s in want.scores] == [True, True, True, False, False]
    assert want.rewards.tolist() == [weighted_sum(s.channels, config.priorities) for s in want.scores]
    assert pool.score_group(v, answers, brief).rewards.tolist() == want.rewards.tolist()
    env = AlphaFormulaEnv(verifier=v, briefs=[brief], archive="frozen")
    for answer, w in zip(answers, want.scores):
        env.reset(seed=0)
        _, reward, _, _, info = env.step(answer)
        single = v.score(answer, brief=brief)
        assert reward == single.reward and info["channels"] == single.channels
        assert single.channels["book"] == w.channels["book"]  # each answer offered alone: the group does not matter
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from trainers import loop
    scores = loop._score(v, [SimpleNamespace(texts=answers)], [brief], {"scoring": 0.0})  # the loop's scoring step
    assert scores[0].rewards.tolist() == want.rewards.tolist()
    pytest.importorskip("trl")
    from trainers.trl_adapter import GroupScorer, reward_funcs, reward_weights
    assert reward_weights(v)[CHANNELS.index("book")] == 3.0
    fresh = _grown(market, [SLOW], config)  # TRL's scorer grows its verifier's archive after a batch: one each
    scorer = GroupScorer(fresh, group_size=len(answers), briefs=[brief])
    got = scorer.scores(answers, brief_ids=[brief.id] * len(answers))
    assert [s.reward for s in got] == want.rewards.tolist()
    fresh = _grown(market, [SLOW], config)
    columns = [f(prompts=[""] * len(answers), completions=answers, brief_id=[brief.id] * len(answers))
               for f in reward_funcs(fresh, group_size=len(answers), briefs=[brief])]
    assert [weighted_sum(dict(zip(CHANNELS, row)), config.priorities) for row in zip(*columns)] == want.rewards.tolist()


@pytest.mark.real_data
def test_on_the_real_panel_the_channel_is_the_rule_read_literally(real_us46):
    """us46's train window: grow an archive, then each answer's R14 against the literal rule (seed section 8's
    selector over the learned entries with and without the answer, the CPCV of both books)."""
    from alpha_gym.evaluation.selection import select_correlation_capped
    # on us46 every profitable one-liner here is one bet (volume and volatility levels, |corr| 0.7-1.0) but the
    # 250-day mean of returns (|corr| ~0.2): the runs' shipped answers (issue 39) are near-copies of the pool
    pool_formulas = ["ts_std(volume, 24)", "ts_std(returns, 100)", "rank(ts_mean(returns, 250))"]
    answers = ["ts_max(volume, 24)", "ts_std(volume, 60)", "ts_std(returns, 60)", "rank(volume)",
               "rank(ts_std(returns, 20))", "rank(-ts_delta(close, 5))"]
    v = Verifier(real_us46, ON)
    v.update_archive(v.score_group([_answer(f) for f in pool_formulas]))
    learned = [t for t, s in zip(v.archive.texts, v.archive.seed) if not s]
    assert len(learned) == 3, f"the pool formulas are no longer profitable on the real panel: {learned}"
    members = [Candidate.from_evaluated(v.evaluate(t)) for t in learned]

    def literal(cands) -> float:
        sel = select_correlation_capped(cands)
        if not sel.n:
            return 0.0
        test, _ = cpcv.slice_sharpes(sel.returns, v.config.cpcv)
        return cpcv.cpcv_score(test, v.config.cpcv.std_penalty)

    before = literal(members)
    scores = v.score_group([_answer(a) for a in answers + learned[:1]]).scores
    for formula, s in zip(answers, scores):
        if not s.valid or s.diagnostics["cpcv"] <= 0:
            assert s.channels["book"] == 0.0
            continue
        want = literal(members + [Candidate.from_evaluated(v.evaluate(formula))]) - before
        assert s.channels["book"] == pytest.approx(want, abs=1e-9), formula
    assert scores[-1].channels["book"] == 0.0  # a copy of a member
    assert scores[0].channels["book"] == 0.0  # a worse near-copy of a member: refused
    better = scores[2].diagnostics["book_gain"]  # ts_std(returns, 60): a better near-copy of ts_std(returns, 100)
    assert better["left"] == ["ts_std(returns, 100)"] and scores[2].channels["book"] > 0
