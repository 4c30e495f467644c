"""Pull the formula out of a model's raw answer: exactly one `<alpha>...</alpha>` block.

The tags are found with literal searches and paired in one pass, so extraction is linear in the
answer's length. (The regex `<alpha>(.*?)</alpha>` it replaces gives the same blocks, but restarts
its lazy scan at every unclosed `<alpha>`: quadratic, 1 s of CPU for `"<alpha>" * 4681`.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from alpha_gym.language.errors import AnswerError

_OPEN = re.compile("<alpha>", re.IGNORECASE)
_CLOSE = re.compile("</alpha>", re.IGNORECASE)
_THINK_OPEN = re.compile("<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile("</think>", re.IGNORECASE)
_NON_SPACE = re.compile(r"\S")
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
    blocks = alpha_blocks(text)
    if not blocks:
        raise AnswerError("no <alpha>...</alpha> block in the answer")
    if len(blocks) > 1:
        raise AnswerError(f"{len(blocks)} <alpha> blocks; answer with exactly one formula")
    start, inner_start, inner_end = blocks[0]
    formula = text[inner_start:inner_end].strip()
    if not formula:
        raise AnswerError("the <alpha> block is empty")
    return Answer(formula, has_reasoning(text, start))


def alpha_blocks(text: str) -> list[tuple[int, int, int]]:
    """(block start, formula start, formula end) of each `<alpha>...</alpha>` block, in linear time.

    The blocks `re.finditer(r"<alpha>(.*?)</alpha>", re.I | re.S)` finds: each opening tag pairs
    with the first closing tag after it, and the next block starts after that closing tag.
    """
    opens = [(m.start(), m.end()) for m in _OPEN.finditer(text)]
    closes = [(m.start(), m.end()) for m in _CLOSE.finditer(text)]
    blocks, i, j, pos = [], 0, 0, 0
    while True:
        while i < len(opens) and opens[i][0] < pos:
            i += 1
        if i == len(opens):
            return blocks
        start, inner = opens[i]
        while j < len(closes) and closes[j][0] < inner:
            j += 1
        if j == len(closes):  # no later opening tag can be closed either
            return blocks
        blocks.append((start, inner, closes[j][0]))
        pos = closes[j][1]


def has_reasoning(text: str, end: int) -> bool:
    """Whether `text[:end]` holds a non-empty `<think>...</think>` block (linear time).

    Same verdict as `re.search(r"<think>\\s*\\S.*?</think>", text[:end], re.I | re.S)`: the first
    opening tag is the one that can close soonest, so only it needs checking.
    """
    opening = _THINK_OPEN.search(text, 0, end)
    if opening is None:
        return False
    first = _NON_SPACE.search(text, opening.end(), end)
    return first is not None and _THINK_CLOSE.search(text, first.end(), end) is not None


def formula_or_none(text: str) -> str | None:
    """The formula in an answer, or None when the answer holds no usable `<alpha>` block."""
    try:
        return extract(text).formula
    except AnswerError:
        return None
