"""verifiers.v1 integration: the briefs as a taskset, 12 weighted async channel rewards equal to the verifier's."""

from __future__ import annotations

import asyncio
import inspect

import pytest

vf = pytest.importorskip("verifiers.v1", reason="verifiers (verifiers.v1) is not installed")

from verifiers.v1.graph import MessageNode  # noqa: E402
from verifiers.v1.trace import AgentInfo, Trace, TraceTask  # noqa: E402
from verifiers.v1.types import AssistantMessage, UserMessage  # noqa: E402

from alpha_gym.integrations import verifiers as av  # noqa: E402
from alpha_gym.market.resolve import default_panel  # noqa: E402
from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES, VerifierConfig  # noqa: E402
from alpha_gym.scoring.verifier import Verifier  # noqa: E402
from alpha_gym.tasks.sets import brief_set  # noqa: E402

ANSWERS = ["<alpha>rank(-ts_delta(close, 5))</alpha>",
           "<think>fade volume</think><alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>close</alpha>",                         # a bare price: the motif guard may cap it
           "<alpha>rank(ts_mean(close, 250))</alpha>",     # static book: invalid
           "<alpha>rank(close -)</alpha>",                 # syntax error: invalid
           "no tag"]


def _trace(task, answer: str) -> Trace:
    return Trace(task=TraceTask(type=type(task).__name__, data=task.data), agent=AgentInfo(config=vf.AgentConfig()),
                 nodes=[MessageNode(message=UserMessage(content=task.data.prompt)),
                        MessageNode(parent=0, sampled=True, message=AssistantMessage(content=answer))])


@pytest.fixture(scope="module")
def direct():
    return Verifier(default_panel())


def test_taskset_holds_the_briefs():
    taskset = av.load_environment(briefs="probe")
    tasks = list(taskset)
    briefs = brief_set("probe")
    assert len(tasks) == len(briefs) == 50
    assert [t.data.brief_id for t in tasks] == [b.id for b in briefs]
    assert tasks[7].data.prompt == briefs[7].prompt() and tasks[7].data.idx == 7
    assert len({t.key for t in tasks}) == 50
    assert [t.data.brief_id for t in taskset.shuffle(seed=1).take(3)] != [b.id for b in briefs[:3]]
    from verifiers.v1.utils.loaders import _plugin_class  # the class verifiers' loader would pick
    assert _plugin_class(av, vf.Taskset, "taskset") is av.AlphaTaskset


def test_rewards_are_async_weighted_channels():
    task = next(iter(av.load_environment(briefs="fixed")))
    hooks = {fn.__name__: fn for fn in task.hooks("reward")}
    assert set(hooks) == set(CHANNELS) | {"verifier_adjustment"}
    assert all(inspect.iscoroutinefunction(fn) for fn in hooks.values())
    assert {k: hooks[k]._vf_weight for k in CHANNELS} == DEFAULT_PRIORITIES


@pytest.mark.parametrize("answer", ANSWERS)
def test_trace_reward_is_the_verifiers_reward(direct, answer):
    task = next(iter(av.load_environment(briefs="fixed")))
    trace = _trace(task, answer)
    asyncio.run(task.score(trace))
    want = direct.score(answer)
    assert trace.metrics["verifier_reward"] == want.reward  # bit for bit
    assert trace.reward == pytest.approx(want.reward, abs=1e-12)  # verifiers' own float sum
    assert {k: trace.rewards[k].score for k in CHANNELS} == want.channels
    assert {k: trace.rewards[k].weight for k in CHANNELS} == DEFAULT_PRIORITIES
    assert trace.metrics["valid"] == float(want.valid)
    assert trace.info["alpha_gym"]["reason"] == want.reason
    # the adjustment is whatever the verifier's reward adds to its weighted channels (0 when it is their sum)
    weighted = sum(DEFAULT_PRIORITIES[k] * v for k, v in want.channels.items())
    assert trace.rewards["verifier_adjustment"].score == pytest.approx(want.reward - weighted, abs=1e-12)


def test_the_tasks_brief_reaches_the_scoring(direct):
    """Issue 38.1: each task is scored with its brief (its compliance in trace.info); the reward is the same."""
    task = next(iter(av.load_environment(briefs="probe")))
    brief = brief_set("probe")[0]
    trace = _trace(task, ANSWERS[1])
    asyncio.run(task.score(trace))
    want = direct.score(ANSWERS[1], brief=brief)
    assert trace.metrics["verifier_reward"] == want.reward == direct.score(ANSWERS[1]).reward
    assert trace.info["alpha_gym"]["brief_compliance"] == want.diagnostics["brief_compliance"] is not None


def test_priorities_reach_both_the_weights_and_the_verifier():
    task = next(iter(av.load_environment(briefs="fixed", priorities={"cpcv": 2.0, "turnover": 0.0})))
    trace = _trace(task, ANSWERS[0])
    asyncio.run(task.score(trace))
    assert trace.rewards["cpcv"].weight == 2.0 and trace.rewards["turnover"].weight == 0.0
    want = Verifier(default_panel(), VerifierConfig(priorities={"cpcv": 2.0, "turnover": 0.0})).score(ANSWERS[0])
    assert trace.metrics["verifier_reward"] == want.reward
    assert trace.reward == pytest.approx(want.reward, abs=1e-12)
    with pytest.raises(ValueError, match="unknown channels"):
        av.load_environment(priorities={"sharpe": 1.0})


def test_settings_reach_both_the_weights_and_the_verifier(changed_settings):
    toml, sets, config = changed_settings
    brief = brief_set("probe")[0]  # the first task's brief: R13, on in the changed settings, reads it
    want = Verifier(default_panel(), config).score(ANSWERS[0], brief=brief)
    assert want.reward != Verifier(default_panel()).score(ANSWERS[0], brief=brief).reward
    assert want.channels["brief"] > 0
    for taskset in (av.load_environment(briefs="probe", config=str(toml)),
                    av.load_environment(briefs="probe", settings=sets),
                    av.load_environment(briefs="probe", config=config)):
        task = next(iter(taskset))
        trace = _trace(task, ANSWERS[0])
        asyncio.run(task.score(trace))
        assert {k: trace.rewards[k].weight for k in CHANNELS} == config.priorities
        assert trace.metrics["verifier_reward"] == want.reward
        assert trace.reward == pytest.approx(want.reward, abs=1e-12)
    # priorities= still overrides after the settings
    task = next(iter(av.load_environment(briefs="probe", config=str(toml), priorities={"cpcv": 2.0})))
    trace = _trace(task, ANSWERS[0])
    asyncio.run(task.score(trace))
    assert trace.rewards["cpcv"].weight == 2.0
    assert trace.metrics["verifier_reward"] == Verifier(
        default_panel(), config.with_(priorities={**config.priorities, "cpcv": 2.0})).score(ANSWERS[0], brief=brief).reward
