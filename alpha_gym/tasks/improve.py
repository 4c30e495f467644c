"""The improve task (`AlphaFormulaEvolve-v0`, the language-model mutators of `evolve`): one better formula from
earlier formulas and their train-window numbers, with or without a design brief.

Its prompt is the DSL reference under the verifier's limits, the answer contract, the brief's request (when
there is a brief), then the parent formulas, each with the numbers the verifier measured on the train window
(reward, CPCV, turnover, IC, max |corr| of its P&L with the book), and the instruction. What stays the same
over a run comes first and the parents last, so a server that keeps the last prompt's KV cache (llama.cpp)
evaluates only the parents of the next prompt, not the ~500 tokens of reference before them. The answer is scored as a write-task answer is (the
verifier's reward, the brief beside it); `improvement` is that reward less the best parent's.

Context: `parents`, a list (best first, possibly empty) of mappings with a `formula` (str) and any of the
numbers in `NUMBERS` (a real number or None, shown as "n/a"). `alpha_gym.tasks.parents.parents_context`
builds it from the program database's `Program`s.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Mapping, Sequence

from alpha_gym.errors import InputError
from alpha_gym.language.parser import Limits
from alpha_gym.tasks.dsl import ANSWER_CONTRACT, dsl_reference

#: A parent's numbers, in the order the prompt shows them: (key, label, format).
NUMBERS = (("reward", "reward", "+.3f"), ("cpcv", "CPCV", "+.3f"), ("turnover", "daily turnover", ".3f"),
           ("ic", "IC", "+.4f"), ("max_corr", "max |corr| with the book", ".2f"))
#: The request of a prompt without a brief.
NO_BRIEF_REQUEST = ("Market: US-listed stocks trading on weekday sessions. Design an alpha: a formula whose "
                    "daily long-short book earns on the train window.")
INSTRUCTION = ("Write one new formula that improves on them: a higher reward (a higher CPCV at a turnover the "
               "costs allow) and a P&L less correlated with the book. Do not repeat a formula above.")


def _number(parent: Mapping[str, Any], key: str, fmt: str) -> str:
    value = parent.get(key)
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InputError(f"parent number {key!r} must be a real number or None, got {type(value).__name__}")
    return format(float(value), fmt) if math.isfinite(value) else "n/a"


def parent_lines(parents: Sequence[Mapping[str, Any]]) -> str:
    """The parents as the prompt lists them: the formula, then its numbers on the next line."""
    lines = []
    for k, parent in enumerate(parents, 1):
        if not isinstance(parent, Mapping) or not isinstance(parent.get("formula"), str) or not parent["formula"]:
            raise InputError(f"parent {k} must be a mapping with a non-empty 'formula' string, got {parent!r:.80}")
        unknown = sorted(set(parent) - {"formula"} - {key for key, _, _ in NUMBERS})
        if unknown:
            raise InputError(f"parent {k} has keys the improve task does not read: {unknown}")
        numbers = ", ".join(f"{label} {_number(parent, key, fmt)}" for key, label, fmt in NUMBERS)
        lines.append(f"{k}. {' '.join(parent['formula'].split())}\n   {numbers}")
    return "\n".join(lines)


def render(brief, limits: Limits, context: Mapping[str, Any]) -> str:
    """The DSL reference under `limits`, the answer contract, the request (or `NO_BRIEF_REQUEST` when `brief`
    is None), the parents with their train-window numbers and the instruction: the fixed text first (see the
    module docstring)."""
    if "parents" not in context:
        raise InputError("the improve task needs context={'parents': [...]}: the earlier formulas to improve on")
    parents = context["parents"]
    if isinstance(parents, (str, bytes, Mapping)) or not isinstance(parents, Sequence):
        raise InputError(f"context['parents'] must be a list of parents, got {type(parents).__name__}")
    request = NO_BRIEF_REQUEST if brief is None else brief.request
    if parents:
        body = (f"Earlier formulas (best first) and their train-window numbers:\n{parent_lines(parents)}"
                f"\n\n{INSTRUCTION}")
    else:
        body = "No formula has been scored yet: write a first one."
    return f"{dsl_reference(limits)}\n\n{ANSWER_CONTRACT}\n\n{request}\n\n{body}"


def improvement(reward: float, parent_rewards: Sequence[float]) -> float | None:
    """The answer's reward less the best parent's (negative when it is worse; None with no parents)."""
    rewards = [float(r) for r in parent_rewards if r is not None]
    return None if not rewards else float(reward) - max(rewards)
