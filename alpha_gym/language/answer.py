"""Pull the formula out of a model's raw answer: exactly one `<alpha>...</alpha>` block."""

from __future__ import annotations

import re
from dataclasses import dataclass

from alpha_gym.language.errors import AnswerError

_ALPHA = re.compile(r"<alpha>(.*?)</alpha>", re.DOTALL | re.IGNORECASE)
_REASONING = re.compile(r"<think>\s*\S.*?</think>", re.DOTALL | re.IGNORECASE)
MAX_ANSWER_CHARS = 32_768


@dataclass(frozen=True)
class Answer:
    formula: str
    has_reasoning: bool  # a non-empty <think>...</think> block before the formula


def extract(text: str) -> Answer:
    """The formula in `text`. Raises `AnswerError` for no block, several blocks or an empty one."""
    if not isinstance(text, str):
        raise AnswerError(f"an answer must be a string, not {type(text).__name__}")
    if len(text) > MAX_ANSWER_CHARS:
        raise AnswerError(f"answer is {len(text)} characters long; the limit is {MAX_ANSWER_CHARS}")
    blocks = list(_ALPHA.finditer(text))
    if not blocks:
        raise AnswerError("no <alpha>...</alpha> block in the answer")
    if len(blocks) > 1:
        raise AnswerError(f"{len(blocks)} <alpha> blocks; answer with exactly one formula")
    formula = blocks[0].group(1).strip()
    if not formula:
        raise AnswerError("the <alpha> block is empty")
    reasoning = _REASONING.search(text, 0, blocks[0].start())
    return Answer(formula, reasoning is not None)


def formula_or_none(text: str) -> str | None:
    """The formula in an answer, or None when the answer holds no usable `<alpha>` block."""
    try:
        return extract(text).formula
    except AnswerError:
        return None
