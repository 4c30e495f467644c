"""verifiers (`verifiers.v1`): the briefs as a taskset, the 14 reward channels as weighted async rewards.

    from alpha_gym.integrations.verifiers import load_environment
    taskset = load_environment(briefs="train")            # an AlphaTaskset (a verifiers.v1 Taskset)
    for task in taskset.take(2): print(task.data.brief_id, task.data.prompt[:60])

Each task is one brief (`TaskData.prompt` is the brief's prompt, `brief_id`/`family` ride
along). Its rewards are 14 `@vf.reward` methods, one per channel, each returning the
channel's raw value with the verifier's priority as its weight, plus `verifier_adjustment`
(weight 1): the verifier's reward minus the weighted channels (0 whenever the reward is their
weighted sum; otherwise a rule such as a fixed invalid-answer reward or a cap). So `trace.reward`,
verifiers' weighted sum,
is `Verifier.score(answer).reward` up to the rounding of verifiers' own float sum (a few
1e-16; exact where floats allow), and each channel is exactly the verifier's. The verifier's
reward itself, bit for bit, is the metric `verifier_reward`. `valid` is a metric. The answer is `trace.last_reply`.

The module exports one Taskset subclass in `__all__`, as verifiers' plugin loader wants.
Market data comes from the task config (`data`, `universe`, `start`, `end`, as `--data`), the settings
from `load_environment(config=..., settings=[...])` (as `--config` and `--set`);
one Verifier per process and data is shared by every task (`cache.shared_verifier`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import verifiers.v1 as vf

from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES

__all__ = ["AlphaTaskset", "AlphaTask", "AlphaData", "AlphaTaskConfig", "AlphaTasksetConfig", "load_environment"]


class AlphaTaskConfig(vf.TaskConfig):
    """Which market the verifier scores on (as `alpha-gym score --data ...`); None: the embedded synthetic one."""

    data: str | None = None
    universe: str | None = None
    start: str | None = None
    end: str | None = None
    priorities: dict[str, float] = {}
    """Channel priorities for the verifier (defaults: the reference's); `load_environment` sets the reward
    weights to match."""
    verifier: dict = {}
    """The verifier's settings as a [verifier] table (`alpha-gym config show`); empty: the defaults."""


class AlphaTasksetConfig(vf.TasksetConfig):
    briefs: str = "train"
    """A brief set: "train" (450 briefs), "probe" (50 held-out briefs) or "fixed"."""
    task_type: str = "write"
    """The task whose prompts the tasks hold: "write" (AlphaFormula-v0's) or "improve" (AlphaFormulaEvolve-v0's)."""
    seed: int = 0
    """Task i's prompt is the Gym env's after `reset(seed=prompt_seed(seed, i))` (the improve task's parents)."""
    task: AlphaTaskConfig = AlphaTaskConfig()


class AlphaData(vf.TaskData):
    brief_id: str = ""
    family: str = ""


def _channel_reward(name: str):
    async def channel(self, trace) -> float:
        return self.verdict(trace)["channels"][name]
    channel.__name__ = channel.__qualname__ = name
    channel.__doc__ = f"The verifier's `{name}` channel (raw value; the weight is its priority)."
    return vf.reward(channel, weight=DEFAULT_PRIORITIES[name])


class AlphaTask(vf.Task[AlphaData, vf.State, AlphaTaskConfig]):
    """One brief; scoring runs the shared verifier once per trace and reads every reward off it."""

    def verifier(self):
        from alpha_gym.pool import resolve_config, shared_verifier
        c = self.config
        config = resolve_config({"verifier": dict(c.verifier)} if c.verifier else None)
        if c.priorities:
            config = config.with_(priorities={**config.priorities, **c.priorities})
        return shared_verifier(config=config, data=c.data, universe=c.universe, start=c.start, end=c.end)

    def verdict(self, trace) -> dict:
        """The verifier's score of `trace.last_reply` with the task's brief, computed once and kept in
        `trace.info["alpha_gym"]`."""
        cached = trace.info.get("alpha_gym")
        if cached is None:  # no await in here: the rewards, gathered concurrently, cannot score twice
            from alpha_gym.tasks.sets import require_brief
            verifier = self.verifier()
            score = verifier.score(trace.last_reply, brief=require_brief(getattr(self.data, "brief_id", "") or None))
            # summed as verifiers sums trace.rewards (by name, score x weight), so that
            # weighted + adjustment gives the verifier's reward exactly, not to rounding
            weighted = sum(float(v) * float(verifier.config.priorities[k]) for k, v in sorted(score.channels.items()))
            cached = trace.info["alpha_gym"] = {
                "valid": score.valid, "reason": score.reason, "reward": score.reward, "formula": score.formula,
                "channels": dict(score.channels), "adjustment": _closing_term(weighted, score.reward),
                "world_model": score.world_model, "brief_compliance": score.diagnostics.get("brief_compliance")}
        return cached

    @vf.metric
    async def valid(self, trace) -> float:
        """1.0 for a tradable formula, 0.0 for an invalid answer."""
        return float(self.verdict(trace)["valid"])

    @vf.metric
    async def verifier_reward(self, trace) -> float:
        """The verifier's reward, exactly (trace.reward is the same number up to float rounding)."""
        return float(self.verdict(trace)["reward"])

    @vf.reward(weight=1.0)
    async def verifier_adjustment(self, trace) -> float:
        """The verifier's reward minus its weighted channels (0 when the reward is their weighted sum)."""
        return self.verdict(trace)["adjustment"]


for _name in CHANNELS:
    setattr(AlphaTask, _name, _channel_reward(_name))


def _closing_term(partial: float, total: float) -> float:
    """x with partial + x == total in floating point (total - partial, nudged by an ulp where rounding needs it)."""
    x = total - partial
    for _ in range(8):
        got = partial + x
        if got == total:
            break
        x = math.nextafter(x, math.inf if got < total else -math.inf)
    return x


class AlphaTaskset(vf.Taskset[AlphaTask, AlphaTasksetConfig]):
    """alpha-gym's design briefs, one task each."""

    def load(self) -> Iterator[AlphaTask]:
        from alpha_gym.integrations.prompts import integration_prompts
        from alpha_gym.tasks.sets import brief_set
        c = self.config.task  # the prompts state the limits of the verifier `AlphaTask.verifier` scores with
        prompts = integration_prompts(self.config.task_type, "AlphaTasksetConfig", data=c.data, universe=c.universe,
                                      start=c.start, end=c.end,
                                      config={"verifier": dict(c.verifier)} if c.verifier else None)
        briefs = brief_set(self.config.briefs)
        for brief, prompt in zip(briefs, prompts.prompts(briefs, self.config.seed)):
            yield AlphaTask(AlphaData(id=brief.id, name=brief.id, prompt=prompt, brief_id=brief.id,
                                      family=brief.family), self.config.task)


def load_environment(briefs: str = "train", data: str | None = None, universe: str | None = None,
                     start: str | None = None, end: str | None = None, priorities=None, config=None,
                     settings=(), task: str = "write", seed: int = 0) -> AlphaTaskset:
    """The alpha-gym taskset. `config` (a VerifierConfig, a settings TOML's path or a mapping of its
    tables) and `settings` (--set items) set the verifier as `--config`/`--set` do; `priorities`
    overrides channel weights ({channel: weight}) after them. Every priority that differs from the
    default goes through verifiers' own per-reward weight config, so traces record the weights they
    were scored with. `task`: the task whose prompts the taskset holds ("write" or "improve"), each under the
    verifier's limits; `seed` seeds them (`AlphaTasksetConfig.seed`)."""
    from alpha_gym.pool import resolve_config
    from alpha_gym.tasks.prompts import check_task
    check_task("load_environment", task)
    from alpha_gym.settings import to_dict
    unknown = set(priorities or {}) - set(CHANNELS)
    if unknown:
        raise ValueError(f"unknown channels {sorted(unknown)}; channels are {list(CHANNELS)}")
    given = config is not None or bool(settings)
    resolved = resolve_config(config, settings)
    prios = {**resolved.priorities, **{k: float(v) for k, v in (priorities or {}).items()}}
    changed = {k: float(prios[k]) for k in CHANNELS if prios[k] != DEFAULT_PRIORITIES[k] or k in (priorities or {})}
    rewards = {name: vf.RewardFunctionConfig(weight=w) for name, w in changed.items()}
    task_config = AlphaTaskConfig(data=data, universe=universe, start=start, end=end, rewards=rewards,
                                  priorities=changed, verifier=to_dict(resolved) if given else {})
    return AlphaTaskset(AlphaTasksetConfig(briefs=briefs, task=task_config, task_type=task, seed=seed))
