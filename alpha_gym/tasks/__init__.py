"""Tasks: the design briefs the model answers, the task types that render them into prompts (`task`),
and their named sets (`sets`); the `briefs` commands are in `alpha_gym/commands/briefs.py`."""

from alpha_gym.tasks.briefs import FIXED_BRIEFS, Brief
from alpha_gym.tasks.dsl import ANSWER_CONTRACT, DSL_REFERENCE, dsl_reference
from alpha_gym.tasks.task import TASKS, Task, render_prompt

__all__ = ["ANSWER_CONTRACT", "Brief", "DSL_REFERENCE", "FIXED_BRIEFS", "TASKS", "Task", "dsl_reference",
           "render_prompt"]
