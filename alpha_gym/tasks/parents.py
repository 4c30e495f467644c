"""The improve task's prompts of scored programs: each parent's formula with its train-window numbers
(`parents_context`), one prompt per parent set (`improve_prompts`).

Every language-model mutator (the endpoint, a local model, the one trained during the run) and the improve
task's env render through here. A parent is anything with the attributes of a program database's `Program`
(`text`, `reward`, `cpcv`, `turnover`, `ic`, `max_corr`): the briefs' floor knows nothing of the search, which
stands above it.
"""

from __future__ import annotations

from typing import Any, Sequence

from alpha_gym.language.parser import DEFAULT_LIMITS, Limits
from alpha_gym.tasks.task import render_prompt


def parents_context(parents: Sequence[Any]) -> list[dict[str, Any]]:
    """The improve task's `parents` context of database programs: each formula with its train-window numbers."""
    return [{"formula": p.text, "reward": p.reward, "cpcv": p.cpcv, "turnover": p.turnover, "ic": p.ic,
             "max_corr": p.max_corr} for p in parents]


def improve_prompts(parent_sets: Sequence[Sequence[Any]], limits: Limits = DEFAULT_LIMITS, brief=None) -> list[str]:
    """One improve-task prompt per parent set (the brief, when given, in each)."""
    return [render_prompt(brief, limits, {"parents": parents_context(parents)}, task="improve")
            for parents in parent_sets]
