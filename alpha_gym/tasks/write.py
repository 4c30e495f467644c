"""The write task (the default, `AlphaFormula-v0`): one formula from a design brief alone.

Its prompt is the brief's request, the answer contract and the DSL reference under the verifier's limits,
exactly the text `Brief.prompt()` has always returned; it reads no context.
"""

from __future__ import annotations

from typing import Any, Mapping

from alpha_gym.language.parser import Limits
from alpha_gym.tasks.dsl import ANSWER_CONTRACT, dsl_reference


def render(brief, limits: Limits, context: Mapping[str, Any]) -> str:
    """The request, the answer contract and the DSL reference under `limits`."""
    return f"{brief.request}\n\n{ANSWER_CONTRACT}\n\n{dsl_reference(limits)}"
