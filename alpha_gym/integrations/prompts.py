"""The integrations' prompts: a task's prompts under the limits of the verifier their reward function is given
(the same `config`, `settings` and market), each the Gym env's for that task, brief and seed
(`alpha_gym.tasks.prompts`)."""

from __future__ import annotations

from alpha_gym.pool import resolve_config, shared_verifier
from alpha_gym.search.task_prompts import task_prompts
from alpha_gym.tasks.prompts import TaskPrompts, check_task
from alpha_gym.tasks.task import TASKS


def integration_prompts(task: str, owner: str, *, data=None, universe=None, start=None, end=None, config=None,
                        settings=()) -> TaskPrompts:
    """The prompts of `task` for the verifier `shared_verifier(data=, ..., config=, settings=)` holds answers to.
    The write task reads the limits alone, so no market is loaded for it; the improve task's parents are scored
    by that verifier. An unknown task is a SettingError naming `owner`'s key."""
    check_task(owner, task)
    if not TASKS[task].context:
        return TaskPrompts(task, resolve_config(config, settings).limits)
    verifier = shared_verifier(data=data, universe=universe, start=start, end=end, config=config, settings=settings)
    return task_prompts(task, verifier, owner=owner)
