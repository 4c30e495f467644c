"""R13 `brief` (issue 39.1): the share of the brief's checkable constraints an answer meets, off by default, on in
the `brief` reward recipe; with it on, every in-process path gives one reward, the default's plus R13."""

from __future__ import annotations

import pytest

from alpha_gym.errors import ConfigError
from alpha_gym.language import parse
from alpha_gym.scoring.channels import brief_channel
from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES, REWARD_RECIPES, VerifierConfig, weighted_sum
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.tasks.compliance import EXTRA_CHECKS, brief_compliance
from alpha_gym.tasks.sets import brief_by_id, brief_set

#: The third answer meets all 10 checks of BRIEF (the first probe brief: the variability of volume relative to its
#: level, roughly 63-day windows, high and low, the sign of a time-series relationship, no long price sums, short).
ANSWERS = ["<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>sign(ts_std(volume, 63) / ts_mean(volume, 63) - ts_std(high - low, 63))</alpha>",
           "<alpha>rank(close -)</alpha>", "no tag"]
BRIEF = brief_set("probe")[0]


def test_the_channel_is_the_extended_share_and_zero_without_anything_to_check():
    node = parse("sign(ts_std(volume, 63) / ts_mean(volume, 63) - ts_std(high - low, 63))")
    assert brief_channel(BRIEF, node) == 1.0
    assert brief_channel(None, node) == 0.0
    assert brief_channel(brief_set("fixed")[0], node) == 0.0  # no constraints: nothing checked, nothing paid
    for brief in brief_set("probe")[:10]:
        want = brief_compliance(brief, node, extended=True)
        assert want["n"] > 0 and brief_channel(brief, node) == want["share"]
    shares = {brief_channel(b, parse(a.removeprefix("<alpha>").removesuffix("</alpha>")))
              for b in brief_set("probe") for a in ANSWERS[:3]}
    assert min(shares) < 0.5 < max(shares) <= 1.0 and min(shares) >= 0.0  # it can fail and it can pay in full


def test_the_new_extended_checks_can_fail():
    spread = EXTRA_CHECKS["m_vol_change"][-1]  # a short AND a long ts_std
    assert spread.check(parse("ts_std(returns, 5) / ts_std(returns, 63)"))
    assert not spread.check(parse("ts_std(returns, 20) - ts_std(returns, 21)"))    # two windows, not 2x apart
    assert not spread.check(parse("ts_std(returns, 5) / ts_mean(returns, 63)"))    # one ts_std only
    decayed = EXTRA_CHECKS["m_decayed"][0]      # a decayed average of moves, not of levels
    assert decayed.check(parse("ts_decay_linear(returns, 10)"))
    assert decayed.check(parse("ts_ema(ts_delta(close, 1), 5)"))
    assert not decayed.check(parse("ts_decay_linear(close, 10)"))
    assert not decayed.check(parse("ts_ema(volume, 5) - delay(close, 1)"))        # the move is outside the decay
    train = brief_set("train")
    vol = next(b for b in train if b.parts["mechanism"]["id"] == "m_vol_change")
    got = brief_compliance(vol, "ts_std(returns, 20) / ts_std(returns, 21)", extended=True)
    assert not all(got["checks"].values()) and got["n"] > len(vol.constraints)


def test_the_recipe_turns_the_channel_on_over_the_default_priorities():
    assert DEFAULT_PRIORITIES["brief"] == 0.0 and CHANNELS[12] == "brief"  # R13 (R14 `book` follows it)
    assert VerifierConfig.recipe("reference") == VerifierConfig()
    on = VerifierConfig.recipe("brief")
    assert on.priorities == {**DEFAULT_PRIORITIES, "brief": 1.0} and REWARD_RECIPES["brief"] == {
        "priorities": {"brief": 1.0}}
    assert on == VerifierConfig.reference().recipe("brief")  # a recipe starts from the defaults, not from `self`
    changed = VerifierConfig.recipe("brief", priorities={"cpcv": 1.0}, turnover_cap=0.4)
    assert changed.priorities == {**DEFAULT_PRIORITIES, "brief": 1.0, "cpcv": 1.0} and changed.turnover_cap == 0.4
    with pytest.raises(ConfigError, match=r"unknown reward recipe 'brif'; choose from \['book', 'brief', "
                                          r"'brief_book', 'reference'\]"):
        VerifierConfig.recipe("brif")
    # the settings file says the same: --set verifier.priorities.brief=1
    from alpha_gym.settings import load
    assert load(None, ("verifier.priorities.brief=1",)).verifier == on


def test_invalid_answers_get_zero_and_the_bound_and_penalties_stay(small_synthetic):
    on, off = VerifierConfig.recipe("brief"), VerifierConfig()
    assert on.valid_reward_bound() == off.valid_reward_bound()
    assert [on.invalid_reward(k) for k in ("missing_tag", "unparseable", "invalid_book")] == \
        [off.invalid_reward(k) for k in ("missing_tag", "unparseable", "invalid_book")]
    scores = Verifier(small_synthetic, on).score_group(ANSWERS, brief=BRIEF).scores
    assert [s.valid for s in scores] == [True, True, True, False, False]
    assert [s.channels["brief"] for s in scores[3:]] == [0.0, 0.0]
    assert min(s.reward for s in scores[:3]) > max(s.reward for s in scores[3:])


def test_every_in_process_path_gives_the_default_reward_plus_the_brief_channel(small_synthetic):
    """score_group, the scoring pool, the Gym env, the TRL reward functions and the native loop's scoring, with
    the `brief` recipe: one reward, exactly the default reward + 1.0 x R13 (R13 is the last term of the sum)."""
    from alpha_gym import pool
    from alpha_gym.env import AlphaFormulaEnv
    on = VerifierConfig.recipe("brief")
    default = Verifier(small_synthetic).score_group(ANSWERS, brief=BRIEF)
    want = Verifier(small_synthetic, on).score_group(ANSWERS, brief=BRIEF)
    assert [s.channels["brief"] for s in want.scores] == [s.channels["brief"] for s in default.scores]
    assert [s.channels["brief"] > 0 for s in want.scores[:3]] == [True] * 3
    assert [w.reward for w in want.scores] == [d.reward + d.channels["brief"] for d in default.scores]
    assert [w.reward for w in want.scores] == [weighted_sum(w.channels, on.priorities) for w in want.scores]
    assert want.rewards.tolist() != default.rewards.tolist()
    assert pool.score_group(Verifier(small_synthetic, on), ANSWERS, BRIEF).rewards.tolist() == want.rewards.tolist()
    assert Verifier(small_synthetic, on).score_group(ANSWERS).rewards.tolist() == \
        Verifier(small_synthetic).score_group(ANSWERS).rewards.tolist()  # without a brief R13 is 0: no change
    env = AlphaFormulaEnv(panel=small_synthetic, config=on, briefs=[BRIEF], archive="frozen")
    for answer in ANSWERS:
        env.reset(seed=0)
        _, reward, _, _, info = env.step(answer)
        single = Verifier(small_synthetic, on).score(answer, brief=BRIEF)
        assert reward == single.reward and info["channels"] == single.channels


def test_the_trl_reward_functions_and_the_loop_score_with_the_brief_channel_on(small_synthetic):
    pytest.importorskip("torch")
    on = VerifierConfig.recipe("brief")
    want = Verifier(small_synthetic, on).score_group(ANSWERS, brief=BRIEF)
    from types import SimpleNamespace

    from trainers import loop
    briefs = [BRIEF, brief_by_id("fixed-000")]
    groups = [SimpleNamespace(texts=ANSWERS)] * 2  # the loop's scoring step reads each group's texts
    scores = loop._score(Verifier(small_synthetic, on), groups, briefs, {"scoring": 0.0})
    assert scores[0].rewards.tolist() == want.rewards.tolist()
    assert [s.channels["brief"] for s in scores[1].scores] == [0.0] * len(ANSWERS)  # a fixed brief: nothing checked
    pytest.importorskip("trl")
    from trainers.trl_adapter import GroupScorer, reward_funcs, reward_weights
    v = Verifier(small_synthetic, on)
    assert reward_weights(v) == [on.priorities[c] for c in CHANNELS]
    assert reward_weights(v)[CHANNELS.index("brief")] == 1.0
    got = GroupScorer(v, group_size=len(ANSWERS), briefs=[BRIEF]).scores(ANSWERS, brief_ids=[BRIEF.id] * len(ANSWERS))
    assert [s.reward for s in got] == want.rewards.tolist()
    columns = [f(prompts=["p0"] * len(ANSWERS), completions=ANSWERS, brief_id=[BRIEF.id] * len(ANSWERS))
               for f in reward_funcs(Verifier(small_synthetic, on), group_size=len(ANSWERS), briefs=[BRIEF])]
    assert [weighted_sum(dict(zip(CHANNELS, row)), on.priorities) for row in zip(*columns)] == want.rewards.tolist()


# ------------------------------------------------------------------------------------------ reports
def test_the_holdout_report_carries_compliance_only_where_answers_had_briefs(small_synthetic):
    from alpha_gym.errors import InputError
    from alpha_gym.evaluation.holdout import evaluate_holdout
    from alpha_gym.tasks.compliance import compliance_record
    train, hold = small_synthetic.head(300), small_synthetic.window(start=small_synthetic.dates[300])
    formulas = [a.removeprefix("<alpha>").removesuffix("</alpha>") for a in ANSWERS[:4]] + [None]
    plain = evaluate_holdout(formulas, train, hold, alpha_tests=False)
    assert "brief_share" not in plain.summary() and all("brief" not in a for a in plain.to_dict()["answers"])
    briefs = [BRIEF, BRIEF, BRIEF, BRIEF, None]
    report = evaluate_holdout(formulas, train, hold, alpha_tests=False, briefs=briefs)
    got = [a.brief for a in report.answers]
    assert got[4] is None and got[3] == {"id": BRIEF.id, "share": 0.0, "met_all": False, "n": 10}  # unparseable
    assert got[2] == {"id": BRIEF.id, "share": 1.0, "met_all": True, "n": 10}
    assert [g["share"] for g in got[:3]] == [compliance_record(BRIEF, f)["share"] for f in formulas[:3]]
    s = report.summary()
    assert s["n_briefs"] == 4 and s["brief_met_all"] == 1
    assert s["brief_share"] == pytest.approx(sum(g["share"] for g in got[:4]) / 4)
    assert {k: v for k, v in s.items() if not k.startswith(("brief", "n_briefs"))} == plain.summary()
    with pytest.raises(InputError, match="4 briefs for 5 formulas"):
        evaluate_holdout(formulas, train, hold, alpha_tests=False, briefs=briefs[:4])


def test_holdout_formulas_and_score_report_compliance(tmp_path, small_synthetic, write_market_csv, capsys):
    import json

    from alpha_gym.commands.main import main
    p = small_synthetic
    data = write_market_csv(p, tmp_path / "m.csv.gz")
    rows = tmp_path / "answers.jsonl"  # as kept probe answers: a brief id beside each formula
    rows.write_text("\n".join(json.dumps({"brief_id": BRIEF.id, "formula": a.removeprefix("<alpha>").removesuffix(
        "</alpha>")}) for a in ANSWERS[:3]) + "\n")
    capsys.readouterr()
    assert main(["holdout-formulas", "--data", str(data), "--holdout-start", str(p.dates[300]), "--formulas",
                 str(rows), "--no-baselines", "--no-train"]) == 0
    assert "brief compliance: mean share" in capsys.readouterr().out
    formula = ANSWERS[2].removeprefix("<alpha>").removesuffix("</alpha>")
    assert main(["score", formula, "--data", str(data), "--brief", BRIEF.id, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["brief"]["share"] == 1.0 and out["brief"]["met_all"] and out["channels"]["brief"] == 1.0
    assert main(["score", "rank(-ts_delta(close, 5))", "--data", str(data), "--brief", BRIEF.id]) == 0
    text = capsys.readouterr().out
    assert f"brief   : {BRIEF.id}" in text and "checks met (share" in text and "all met: no" in text
    assert "  missed  mechanism" in text
    assert main(["score", "rank(close -)", "--data", str(data), "--brief", BRIEF.id]) == 0
    assert "0 of 10 checks met (share 0.00), all met: no; an invalid answer meets none" in capsys.readouterr().out
    assert main(["score", "rank(close)", "--data", str(data), "--brief", "nope"]) == 2


def test_the_comparison_table_says_each_rungs_compliance(tmp_path):
    """On the kept long runs (benchmarks/results/compare-long): step 0's probe answers meet every check of 0 of
    their 50 briefs, 0.41 of the checks on average (invalid answers meeting none); the table gets a section."""
    pytest.importorskip("torch")
    from pathlib import Path

    from alpha_gym.evaluation.kept import read_rows
    from trainers.compare.report import brief_compliance_of, write_table
    kept = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "compare-long" / "step-0.jsonl"
    step0_rows = read_rows(kept)
    step0 = brief_compliance_of(step0_rows, [r["train_valid"] for r in step0_rows])  # the long run's own verdicts
    assert step0["n_briefs"] == 50 and step0["brief_met_all"] == 0 and step0["brief_share"] == pytest.approx(0.412, abs=5e-4)
    rows = [{"brief_id": BRIEF.id, "formula": a.removeprefix("<alpha>").removesuffix("</alpha>")} for a in ANSWERS[:3]]
    valid = [True, True, False]
    assert brief_compliance_of(rows, valid)["brief_met_all"] == 0          # the third meets every check but was refused
    assert brief_compliance_of(rows[2:], [True])["brief_met_all"] == 1
    assert brief_compliance_of([{"brief_id": "x", "formula": "rank(close)"}], [True]) is None
    keys = dict(seeds=[42], valid=3.0, score=0.1, lo=0.0, hi=0.2, families=1.0, effective_bets=1.0, mean_abs_corr=0.5,
                book_sharpe=0.1, book_beta=0.1, book_market_corr=0.1, book_max_drawdown=-0.1, book_down_day=0.0)
    report = {"seeds": [42], "briefs": 3, "rows": {"cispo": {"label": "cispo", **keys, **{
        k: v for k, v in brief_compliance_of(rows, valid).items() if k != "n_briefs"}}}}
    text = write_table(report, "smoke", tmp_path)
    share = brief_compliance_of(rows, valid)["brief_share"]
    assert "| rung | brief share | every check met |" in text and f"| cispo | {share:.2f} | 0.0 |" in text
    report["rows"]["cispo"].update(brief_share=None, brief_met_all=None)
    assert "brief share" not in write_table(report, "smoke", tmp_path)
    from alpha_gym.evaluation.report_comparison import rung_table
    page = rung_table({"rows": {"cispo": {"label": "cispo", "seeds": [42], "brief_share": 0.5, "brief_met_all": 2.0}}})
    assert "every brief check met" in page and "0.50" in page and "2.0" in page
