"""A task's prompts for one verifier, as every consumer renders them: the training loop, best-of-N, the probe,
SFT data and the integrations' dataset rows ask a `TaskPrompts` for the prompt of (brief, seed), so each states
the limits the verifier holds answers to and each equals the Gym env's prompt for that task, brief and seed.

The env is the reference: `AlphaFormula-v0` is the write task, `AlphaFormulaEvolve-v0` the improve task, and
`env.reset(seed=s, options={"brief_id": b.id})` renders what `TaskPrompts.prompt(b, s)` renders (the improve
task's parents drawn with the generator Gymnasium builds from `s`, `task_rng`). The write task reads no seed.
Building the improve task's parent draw needs a scored program database: `alpha_gym.search.task_prompts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from alpha_gym.language.parser import DEFAULT_LIMITS, Limits
from alpha_gym.ranges import check_choice
from alpha_gym.tasks.task import DEFAULT_TASK, TASKS, render_prompt

#: Draws the improve task's `parents` context with a generator (`alpha_gym.search.task_prompts.parent_draw`).
ParentDraw = Callable[[np.random.Generator], Sequence[Mapping[str, Any]]]


def check_task(owner: str, task) -> str:
    """`task` when it names a task (`TASKS`); a SettingError naming `owner`'s key and the known tasks otherwise."""
    check_choice(owner, "task", task, tuple(TASKS))
    return task


def task_rng(seed: int) -> np.random.Generator:
    """The generator `env.reset(seed=seed)` gives the env (Gymnasium's `seeding.np_random`: PCG64 of the seed's
    SeedSequence), so a consumer draws the parents the env would draw for that seed."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))


def prompt_seed(*keys: int) -> int:
    """One prompt's seed from the keys that place it (run seed, step, index): a fixed 32-bit draw of their
    SeedSequence, so a rerun renders the same prompts and two places never share one by accident."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])


@dataclass(frozen=True)
class TaskPrompts:
    """The prompts of `task` under the verifier's `limits` (pass `verifier.config.limits`).

    parents: the improve task's parent draw (`alpha_gym.search.task_prompts.task_prompts` builds it from a
    program database scored by the verifier); the write task takes none.
    """

    task: str = DEFAULT_TASK
    limits: Limits = DEFAULT_LIMITS
    parents: ParentDraw | None = None

    def __post_init__(self):
        check_task(type(self).__name__, self.task)
        if not isinstance(self.limits, Limits):
            raise TypeError(f"TaskPrompts.limits must be a Limits (the verifier's config.limits), got "
                            f"{type(self.limits).__name__}")
        if TASKS[self.task].context and self.parents is None:
            raise ValueError(f"the {self.task} task draws parents: build its prompts with "
                             "alpha_gym.search.task_prompts.task_prompts(task, verifier)")

    def prompt(self, brief, seed: int = 0) -> str:
        """The env's prompt of `brief` for this task after `reset(seed=seed, options={"brief_id": ...})` (the
        write task ignores the seed)."""
        return self.drawn(brief, task_rng(seed))

    def drawn(self, brief, rng: np.random.Generator) -> str:
        """The prompt of `brief` with the improve task's parents drawn from `rng` (an env's own generator, after
        it drew the brief: the env's `reset(seed=s)` without a brief_id)."""
        if self.parents is None:
            return render_prompt(brief, self.limits, task=self.task)
        return render_prompt(brief, self.limits, {"parents": list(self.parents(rng))}, task=self.task)

    def prompts(self, briefs: Sequence, *keys: int) -> list[str]:
        """The prompts of `briefs` in order, prompt i the env's after `reset(seed=prompt_seed(*keys, i))`: `keys`
        place the list (a run's seed, a training step), so every consumer seeds its prompts one way."""
        return [self.drawn(b, task_rng(prompt_seed(*keys, i))) for i, b in enumerate(briefs)]
