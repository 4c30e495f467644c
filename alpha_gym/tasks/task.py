"""The task types, declared once: how a prompt is rendered and which answer contract it states.

A task turns a brief, the verifier's formula limits (`VerifierConfig.limits`) and optional context
(for example earlier formulas and their scores) into the prompt text a model answers. `TASK_TABLE`
holds one row per task type, as `SPECS` does per operator and `CHANNEL_TABLE` per reward channel;
`render_prompt` is the one function every caller (the env, the training loop, best-of-N, SFT data,
evaluation, the integrations, serve) renders prompts with. Scoring takes the brief beside the answers
(`Verifier.score_group(answers, brief=...)`; a channel reads it as `Measures.brief`).

Adding a task type is one module and one row, as the improve task was: `alpha_gym/tasks/improve.py` (its
`render(brief, limits, context)`), its row below, and callers passing `task="improve",
context={"parents": [...]}` to `render_prompt`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from alpha_gym.errors import InputError
from alpha_gym.language.parser import DEFAULT_LIMITS, Limits
from alpha_gym.tasks import improve, write
from alpha_gym.tasks.dsl import ANSWER_CONTRACT


@dataclass(frozen=True)
class Task:
    """One task type.

    name      its key (`render_prompt(..., task=name)`)
    render    its module's `render(brief, limits, context) -> str`: the whole prompt text
    contract  the answer contract its prompts state (what a scored answer must look like)
    context   the context keys `render` reads (none: the prompt depends on the brief and limits alone)
    doc       one line: what the model is asked to do
    """

    name: str
    render: Callable[[Any, Limits, Mapping[str, Any]], str]
    contract: str
    context: tuple[str, ...] = ()
    doc: str = ""


TASK_TABLE: tuple[Task, ...] = (
    Task("write", write.render, ANSWER_CONTRACT, doc="one formula from a design brief alone (AlphaFormula-v0)"),
    Task("improve", improve.render, ANSWER_CONTRACT, context=("parents",),
         doc="one better formula from parent formulas and their train-window numbers, with or without a brief "
             "(AlphaFormulaEvolve-v0, the model mutators of evolve)"),
)
TASKS: dict[str, Task] = {t.name: t for t in TASK_TABLE}
DEFAULT_TASK = "write"


def get_task(task: str | Task = DEFAULT_TASK) -> Task:
    """The row of a task name (a `Task` is returned as it is); InputError naming the known tasks otherwise."""
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; known tasks: {', '.join(TASKS)}")
    return TASKS[task]


def render_prompt(brief, limits: Limits = DEFAULT_LIMITS, context: Mapping[str, Any] | None = None,
                  task: str | Task = DEFAULT_TASK) -> str:
    """The prompt of `brief` under the verifier's `limits` (pass `verifier.config.limits`, so the prompt states
    the limits answers are held to), for `task` with its `context`.

    A brief-like object without a `request` that renders itself (a `prompt()` method: the tests' short briefs)
    keeps its own text. Context keys the task does not read are refused (InputError), not ignored.
    """
    row = get_task(task)
    context = dict(context or {})
    unknown = sorted(set(context) - set(row.context))
    if unknown:
        raise InputError(f"task {row.name!r} reads no context {unknown}; it reads {list(row.context) or 'none'}")
    if getattr(brief, "request", None) is None and callable(getattr(brief, "prompt", None)):
        return brief.prompt()
    return row.render(brief, limits, context)
