"""The task seam (`alpha_gym.tasks.task`): every prompt is rendered in one place, and the write task's prompts
are the text `Brief.prompt()` returned before the seam, byte for byte."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from alpha_gym.errors import InputError
from alpha_gym.language.parser import Limits
from alpha_gym.tasks import ANSWER_CONTRACT, FIXED_BRIEFS, TASKS, Task, dsl_reference, render_prompt
from alpha_gym.tasks.sets import brief_set

ROOT = Path(__file__).resolve().parents[1]
NARROW = Limits(max_window=60, max_lookback=120, max_tokens=64, max_depth=9)

#: sha256 of `Brief.prompt(limits)` before the seam (commit 1606f8c), for default and NARROW limits. A change
#: to the operator table's prompt words moves these too: then check the new text and pin it again.
PINNED = {
    ("fixed", 0): ("50e827ec3095e96e86531a97264b775bed8dfc7b4d749675d7b0120fc3938342",
                   "d303fc454f6462329ad2729ff0a4cae4a3b751e0e9e38f2de28f881ef4b55ea4"),
    ("fixed", 6): ("ff7fb61842b8761f95d125e2b0749b2410f574064fd56a81831ccd43cb69207c",
                   "d5379de59980a1a566c4f2b735f0f43e45872fea118980cfcdfa3a313dc6904e"),
    ("train", 0): ("93911e24dd30bebb4ac697a8dec435a8a1e80259df50e2e2cb3d39e63e5bab13",
                   "99af2e48f634f8ce0a4de699f5c9c645b98513126111896f67d103a70b4f4a58"),
    ("train", 449): ("044aea4335969eb7916f8073a0219853eee1f26129078ca5831aed88c5bf278f",
                     "079198f1cc2247d684f7efc075dacf8178ec647f0d66e9e8886cf7e634fa9378"),
    ("probe", 17): ("1d867fc5e4c247634ec0726fa6e6593bb034816919302094898870f112316135",
                    "8e7eeed3c3575cbafd6372ddd55f307e0075d72b9d891cd0cc01e0e06c1a1bf5"),
}

#: `FIXED_BRIEFS[3].prompt()` before the seam, in full.
FIXED_003 = "Market: US-listed stocks trading on weekday sessions. Design an alpha whose PRIMARY mechanism is: where the close sits inside the day's high-low range. Target horizon: one day.\n\nAnswer with exactly one formula inside <alpha>...</alpha>, at most 128 tokens. The book goes long the stocks your formula ranks highest at today's close and short the lowest, dollar-neutral, filled at the next open.\n\nFields: open high low close volume returns vwap.\nCross-sectional: rank(x) in [0, 1] per day; scale(x) rescales so sum |x| = 1.\nTime series (d = integer window, 1..252): delay(x, d), ts_delta(x, d), ts_mean, ts_std, ts_sum,\nts_max, ts_min, ts_rank, ts_decay_linear, ts_ema, ts_skew, ts_kurt, ts_slope, ts_argmax,\nts_argmin, ts_product (x, d); ts_corr(x, y, d), ts_cov(x, y, d).\nElement-wise: + - * /, abs, log, sign, power(x, y), signed_power(x, y), min(x, y), max(x, y).\nPaper names (correlation, stddev, sum, Ts_Rank, SignedPower, adv20, ...) are aliases; min(x, d)/max(x, d)\nwith an integer d is ts_min/ts_max (write max(x, 1.0) for element-wise).\nLimits: total nested lookback <= 252 sessions, <= 256 tokens, depth <= 16."


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("key", sorted(PINNED))
def test_the_write_task_renders_the_prompts_of_before_the_seam(key):
    brief = brief_set(key[0])[key[1]]
    for limits, pinned in zip((Limits(), NARROW), PINNED[key]):
        assert _sha(render_prompt(brief, limits)) == pinned
        assert brief.prompt(limits) == render_prompt(brief, limits, task="write")


def test_a_prompt_in_full():
    assert render_prompt(FIXED_BRIEFS[3]) == FIXED_BRIEFS[3].prompt() == FIXED_003


def test_the_write_row_names_its_contract_and_reads_no_context():
    row = TASKS["write"]
    assert row.contract == ANSWER_CONTRACT and row.context == ()
    assert row.contract in render_prompt(FIXED_BRIEFS[0])


def test_bad_task_and_context_are_refused_by_name():
    with pytest.raises(InputError, match="unknown task 'rewrite'; known tasks: write, improve"):
        render_prompt(FIXED_BRIEFS[0], task="rewrite")
    with pytest.raises(InputError, match=r"task 'write' reads no context \['parents'\]"):
        render_prompt(FIXED_BRIEFS[0], context={"parents": []})


def test_a_new_task_is_a_render_function_and_a_row():
    """The docstring's recipe: a task whose prompt carries context, rendered through the same seam."""
    def render(brief, limits, context):
        parents = "\n".join(context["parents"])
        return f"{brief.request}\n\nImprove on:\n{parents}\n\n{ANSWER_CONTRACT}\n\n{dsl_reference(limits)}"

    improve = Task("improve", render, ANSWER_CONTRACT, context=("parents",), doc="a better formula")
    text = render_prompt(FIXED_BRIEFS[0], NARROW, {"parents": ["rank(close)"]}, task=improve)
    assert "Improve on:\nrank(close)\n" in text and text.endswith(dsl_reference(NARROW))


def test_a_brief_like_object_that_renders_itself_keeps_its_text():
    class Short:  # the training tests' short briefs: a real prompt is ~360 tokens
        id = "short"

        def prompt(self):
            return "Write one trading formula."

    assert render_prompt(Short()) == "Write one trading formula."


def _prompt_calls(path: Path) -> list[int]:
    """Lines of `x.prompt(...)` calls in a source file."""
    return [n.lineno for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == "prompt"]


def test_every_caller_renders_prompts_through_the_seam():
    seam = {ROOT / "alpha_gym" / "tasks" / "task.py"}
    found = {str(p.relative_to(ROOT)): lines for pkg in ("alpha_gym", "trainers", "benchmarks")
             for p in sorted((ROOT / pkg).rglob("*.py")) if p not in seam and (lines := _prompt_calls(p))}
    assert found == {}


# ------------------------------------------------------------------- the brief reaches the scoring
ANSWERS = ["<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(close -)</alpha>", "no tag"]


def test_the_brief_reaches_every_channel_and_leaves_the_reward(small_synthetic):
    """`score_group(answers, brief=)`: each tradable answer's `Measures.brief` is the brief (a channel may read it);
    only R13 (`brief`, priority 0 by default) does, so rewards and the other channels are those of scoring
    without it, bit for bit."""
    from alpha_gym import pool
    from alpha_gym.scoring.verifier import Evaluated, Verifier
    v, brief = Verifier(small_synthetic), brief_set("train")[0]
    without, with_brief = v.score_group(ANSWERS), v.score_group(ANSWERS, brief=brief)
    assert with_brief.rewards.tolist() == without.rewards.tolist()
    assert [{**s.channels, "brief": 0.0} for s in with_brief.scores] == [s.channels for s in without.scores]
    assert [s.channels["brief"] for s in without.scores] == [0.0] * len(ANSWERS)
    assert [s.channels["brief"] > 0 for s in with_brief.scores] == [True, True, True, False, False]
    assert "brief_compliance" in with_brief.scores[0].diagnostics
    assert pool.score_group(v, ANSWERS, brief).rewards.tolist() == without.rewards.tolist()
    evs = [it for it in (v._prepare_answer(a, None) for a in ANSWERS) if isinstance(it, Evaluated)]
    assert [m.brief for m in v._measures(evs, brief).answers] == [brief] * 3
    assert all(m.brief is None for m in v._measures(evs).answers)


def test_trl_reward_functions_score_each_group_with_its_briefs(small_synthetic):
    pytest.importorskip("trl")
    from alpha_gym.scoring.verifier import Verifier
    from trainers.trl_adapter import GroupScorer
    briefs = brief_set("train")[:2]
    scorer = GroupScorer(Verifier(small_synthetic), group_size=3)
    completions = ANSWERS[:3] + ANSWERS[:3]
    ids = [briefs[0].id] * 3 + [briefs[1].id] * 3
    got = scorer.scores(completions, brief_ids=ids)
    fresh = Verifier(small_synthetic)
    want = [s for k, b in ((0, briefs[0]), (3, briefs[1]))
            for s in fresh.score_group(completions[k:k + 3], brief=b).scores]
    assert [s.reward for s in got] == [s.reward for s in want]
    assert [s.diagnostics.get("brief_compliance") for s in got] == [s.diagnostics.get("brief_compliance") for s in want]
    assert scorer.scores(completions, brief_ids=ids) is got and scorer.calls == 2  # one scoring per batch
    with pytest.raises(ValueError, match="several brief ids"):
        GroupScorer(Verifier(small_synthetic), group_size=3).scores(completions, brief_ids=ids[1:] + ids[:1])
    with pytest.raises(ValueError, match="'x' is not one of the briefs given"):
        GroupScorer(Verifier(small_synthetic), group_size=3, briefs=briefs).scores(completions, brief_ids=["x"] * 6)
    other = GroupScorer(Verifier(small_synthetic), group_size=3).scores(completions, brief_ids=["x"] * 6)
    assert [s.reward for s in other] == [s.reward for s in got]  # another brief's rows: scored without one


def test_verls_compute_score_takes_the_brief_of_its_row(small_synthetic, tmp_path, write_market_csv):
    pytest.importorskip("verl")
    from alpha_gym.integrations import verl as av
    from alpha_gym.scoring.verifier import Verifier
    path = write_market_csv(small_synthetic, tmp_path / "bars.csv.gz")
    brief = brief_set("probe")[0]
    row = av.dataset_rows([brief])[0]
    got = av.compute_score("alpha_gym", ANSWERS[1], extra_info=row["extra_info"], data=str(path))
    assert got["score"] == Verifier(small_synthetic).score(ANSWERS[1], brief=brief).reward
    assert got["brief"] > 0  # R13 read the brief (its priority is 0: the score is the same without it)
    assert av.compute_score("alpha_gym", ANSWERS[1], extra_info={"brief_id": "x"}, data=str(path)) == {**got,
                                                                                                     "brief": 0.0}
