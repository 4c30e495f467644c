"""OpenEnv: alpha-gym as an OpenEnv `Environment`, with OpenEnv's action and observation types.

    env = AlphaEnvironment(briefs="train")
    obs = env.reset(seed=0)                        # AlphaObservation: prompt, brief_id
    obs = env.step(AlphaAction(answer="<alpha>rank(-ts_delta(close, 5))</alpha>"))
    obs.reward, obs.done, obs.valid, obs.channels  # the verifier's reward and channels

OpenEnv's own HTTP `/reset` and `/step` build a fresh environment for every request, so a
step never sees its reset ("call reset() before step()"). `openenv_server` serves this
environment with sessions instead; `AlphaEnvClient` is its client. Every environment in a
process shares one Verifier per data (`cache.shared_verifier`), so building one is cheap.

One episode scores one answer under any concurrency: `reset` and `step` of one environment run one
at a time (a lock per environment, so per server session), and a step checks and closes its episode
inside that lock; N parallel steps on one episode give one score and N-1 "episode is over" errors,
never N scores to pick the best from. A lone surrogate in an answer (text no UTF-8 can encode: a
JSON `"\ud800"` escape) is read as U+FFFD, as a UTF-8 decoder replacing errors would; it scores as
`alpha-gym serve` scores the raw text (the same reward and channels: outside the tag it changes
nothing, inside it is an unexpected character either way).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Optional

import numpy as np
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, field_validator


def without_lone_surrogates(text: str) -> str:
    """`text` with each unpaired UTF-16 surrogate (U+D800-U+DFFF alone) replaced by U+FFFD; pairs are joined."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class AlphaAction(Action):
    """The model's raw answer: one formula inside <alpha>...</alpha>."""

    answer: str = Field(..., max_length=32_768, description="the raw answer text holding <alpha>FORMULA</alpha>")

    @field_validator("answer", mode="before")
    @classmethod
    def _unicode_text(cls, value):
        # pydantic refuses a str holding a lone surrogate (it cannot be UTF-8), and its error then fails to
        # serialise: a model's answer is scored instead, as the scoring service scores it
        return without_lone_surrogates(value) if isinstance(value, str) else value


class AlphaObservation(Observation):
    """After reset: the brief. After step: the verdict (reward and done ride on Observation)."""

    prompt: str = ""
    brief_id: str = ""
    valid: Optional[bool] = None
    reason: str = ""
    formula: Optional[str] = None
    channels: dict[str, float] = Field(default_factory=dict)


class AlphaEnvironment(Environment[AlphaAction, AlphaObservation, State]):
    """One brief per episode, one answer per episode (done after the step), scored by the shared verifier."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # sessions share only the verifier, which scoring never changes

    def __init__(self, briefs: str = "train", data: str | None = None, universe=None, start=None, end=None,
                 config=None, settings=(), task: str = "write"):
        """`config`/`settings`: a VerifierConfig, a settings TOML or a mapping, and --set items (`cache.resolve_config`).
        `task`: "write" (AlphaFormula-v0's prompts) or "improve" (AlphaFormulaEvolve-v0's); `reset(seed=s)` gives
        the Gym env's prompt for that seed, under this verifier's limits."""
        super().__init__()
        from alpha_gym.pool import shared_verifier
        from alpha_gym.search.task_prompts import task_prompts
        from alpha_gym.tasks.prompts import check_task
        from alpha_gym.tasks.sets import brief_set
        check_task("AlphaEnvironment", task)
        self.briefs = brief_set(briefs)
        self.verifier = shared_verifier(data=data, universe=universe, start=start, end=end, config=config,
                                        settings=settings)
        self.prompts = task_prompts(task, self.verifier, owner="AlphaEnvironment")
        self._prompt = ""
        self._rng = np.random.default_rng()
        self._brief = None
        self._state = State(episode_id=None, step_count=0)
        self._lock = threading.Lock()  # one reset or step at a time: an episode is checked and closed in one go

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, brief_id: Optional[str] = None,
              **kwargs: Any) -> AlphaObservation:
        with self._lock:
            if seed is not None:
                self._rng = np.random.default_rng(seed)
            if brief_id is not None:
                matches = [b for b in self.briefs if b.id == brief_id]
                if not matches:
                    raise ValueError(f"no brief with id {brief_id!r}")
                self._brief = matches[0]
            else:
                self._brief = self.briefs[int(self._rng.integers(len(self.briefs)))]
            self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
            brief = self._brief
            # the improve task's parents come from the same generator after the brief, as the Gym env draws them
            prompt = self._prompt = self.prompts.drawn(brief, self._rng)
        return AlphaObservation(prompt=prompt, brief_id=brief.id, done=False, reward=None)

    def step(self, action: AlphaAction, timeout_s: Optional[float] = None, **kwargs: Any) -> AlphaObservation:
        with self._lock:  # held while scoring: a parallel step waits, then finds the episode over
            if self._brief is None:
                raise RuntimeError("call reset() before step()")
            if self._state.step_count > 0:
                raise RuntimeError("the episode is over (one answer per episode): call reset() for the next")
            brief, prompt = self._brief, self._prompt
            score = self.verifier.score(action.answer, brief=brief)
            self._state = State(episode_id=self._state.episode_id, step_count=1)
        return AlphaObservation(prompt=prompt, brief_id=brief.id,
                                done=True, reward=float(score.reward), valid=score.valid, reason=score.reason,
                                formula=score.formula, channels=dict(score.channels))

    @property
    def state(self) -> State:
        return self._state
