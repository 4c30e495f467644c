"""Pull the formula out of a model's raw answer: exactly one `<alpha>...</alpha>` block outside reasoning.

Reasoning is what a `<think>` opens, up to the first `</think>` after it, or to the end of the answer when none
follows (a model cut off while thinking gave no answer); an answer whose first think tag is a `</think>` began
its reasoning in the prompt (as chat templates of reasoning models do), so everything before that tag is
reasoning too. A block that starts in reasoning is a draft, not the answer: it is neither scored nor counted
among the blocks, and an answer holding no other block is refused, saying so.

The tags are found with literal searches and paired in one pass, so extraction is linear in the
answer's length. (The regex `<alpha>(.*?)</alpha>` it replaces gives the same blocks, but restarts
its lazy scan at every unclosed `<alpha>`: quadratic, 1 s of CPU for `"<alpha>" * 4681`.)
"""

from __future__ import annotations

import bisect
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
    blocks = alpha_blocks(text, reasoning_spans(text))
    if not blocks:
        if alpha_blocks(text):
            raise AnswerError("no <alpha>...</alpha> block outside <think>...</think>: a block inside the "
                              "reasoning is a draft, not the answer; write the answer's block after </think>")
        raise AnswerError("no <alpha>...</alpha> block in the answer")
    if len(blocks) > 1:
        raise AnswerError(f"{len(blocks)} <alpha> blocks; answer with exactly one formula")
    start, inner_start, inner_end = blocks[0]
    formula = text[inner_start:inner_end].strip()
    if not formula:
        raise AnswerError("the <alpha> block is empty")
    return Answer(formula, has_reasoning(text, start))


def reasoning_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each stretch of reasoning in `text`, in order, in one pass over its think tags (see the
    module docstring): `<think>` to the first `</think>` after it (a `<think>` inside is text), or to the end
    when none follows; and the start to the first `</think>` when no `<think>` comes before it. Any other
    `</think>` is text."""
    tags = sorted([(m.start(), m.end(), True) for m in _THINK_OPEN.finditer(text)]
                  + [(m.start(), m.end(), False) for m in _THINK_CLOSE.finditer(text)])
    spans: list[tuple[int, int]] = []
    opened: int | None = None
    for start, end, is_open in tags:
        if opened is None and is_open:
            opened = start
        elif opened is not None and not is_open:
            spans.append((opened, end))
            opened = None
        elif not is_open and not spans and start == tags[0][0]:  # the answer's first think tag closes
            spans.append((0, end))
    if opened is not None:
        spans.append((opened, len(text)))
    return spans


def _outside(tags: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The tags (start, end) that start outside every span (spans in order and disjoint)."""
    if not spans:
        return tags
    starts = [a for a, _b in spans]
    kept = []
    for tag in tags:
        k = bisect.bisect_right(starts, tag[0]) - 1
        if k < 0 or tag[0] >= spans[k][1]:
            kept.append(tag)
    return kept


def alpha_blocks(text: str, reasoning: list[tuple[int, int]] = ()) -> list[tuple[int, int, int]]:
    """(block start, formula start, formula end) of each `<alpha>...</alpha>` block, in linear time.

    The blocks `re.finditer(r"<alpha>(.*?)</alpha>", re.I | re.S)` finds: each opening tag pairs
    with the first closing tag after it, and the next block starts after that closing tag. `reasoning`:
    spans (`reasoning_spans`) whose tags are left out, as if the text there were blank.
    """
    opens = _outside([(m.start(), m.end()) for m in _OPEN.finditer(text)], list(reasoning))
    closes = _outside([(m.start(), m.end()) for m in _CLOSE.finditer(text)], list(reasoning))
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
