"""One path from a model's answer (or a bare formula) to a traded book, or a typed invalid verdict.

    answer --extract--> formula --parse(limits)--> tree --evaluate(panel)--> values --trade--> book

The verifier (training book, CPCV and channels), the holdout evaluator (realistic costs on the holdout),
the stress worlds (R3) and the seed cache all go through `answer_to_book`, so an answer is refused for
the same reasons, under the same limits, everywhere. What a "book" is stays the caller's: `trade(node,
values)` builds it (the verifier's training book or the holdout's weights), inside the same guard, so a
failure while trading is the model's fault exactly as one while evaluating is.

Which exceptions are the model's fault is defined once: `alpha_gym.language.errors.MODEL_FAULTS`.
Anything else is a bug and raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from alpha_gym.language import AnswerError, FormulaError, Limits, Node, extract, lookback, parse, to_text
from alpha_gym.language.errors import MODEL_FAULTS
from alpha_gym.language.evaluate import evaluate

B = TypeVar("B")

#: How `answer_to_book` reads its text: a raw answer that must hold one `<alpha>` block, a bare formula,
#: or "auto" (an answer when the text holds an `<alpha` tag, a bare formula otherwise).
SOURCES = ("answer", "formula", "auto")


@dataclass(frozen=True, eq=False)
class InvalidVerdict:
    """Why an answer cannot be traded.

    kind: the verifier's penalty kind, "missing_tag" (no usable `<alpha>` block) or "unparseable" (the
    formula failed to parse, exceeded a limit, or failed to evaluate or trade); error: the finer label,
    "answer", a `FormulaError.kind` ("syntax", "limit", "missing_data", ...), "lookback" or "evaluation";
    reason: one line for a person; formula: the formula text when the answer gave one; node: the parsed
    tree when parsing succeeded; exception: the error caught (None for the lookback check).
    """

    kind: str
    error: str
    reason: str
    formula: str | None = None
    node: Node | None = None
    exception: BaseException | None = None

    @property
    def text(self) -> str | None:
        """The parsed formula printed canonically (None when it did not parse)."""
        return None if self.node is None else to_text(self.node)

    def raise_(self):
        """Raise the caught exception again (for callers whose contract is to raise on a bad formula)."""
        if self.exception is not None:
            raise self.exception
        raise FormulaError(self.reason)


@dataclass(frozen=True, eq=False)
class Traded(Generic[B]):
    """A formula that parsed, evaluated and traded: its tree, the caller's book and the reasoning flag."""

    node: Node
    book: B
    has_reasoning: bool = False

    @property
    def text(self) -> str:
        """The formula printed canonically."""
        return to_text(self.node)


def holds_alpha_tag(text: str) -> bool:
    """Whether "auto" reads `text` as an answer: it mentions an `<alpha` tag (any case)."""
    return "<alpha" in text.lower()


def answer_to_book(answer_or_formula: Any, limits: Limits, panel, trade: Callable[[Node, Any], B], *,
                   source: str = "answer", cache=None, max_lookback: int | None = None,
                   has_reasoning: bool = False, bound: bool = False) -> Traded[B] | InvalidVerdict:
    """Extract, parse under `limits`, evaluate on `panel` and `trade(node, values)`; never raises on bad input.

    source: "answer" (needs exactly one `<alpha>` block), "formula" (the text is the formula) or "auto"
    (see `SOURCES`). max_lookback: refuse a formula needing more past sessions than the panel offers
    before its first scored day (the holdout's context); None: no such check. has_reasoning: the answer's
    reasoning flag for a bare formula (an answer's own `<think>` block decides otherwise). `cache`: as in
    `evaluate`. bound: evaluate with rounding-error bounds and call `trade(node, values, error)`
    (`alpha_gym.language.bounds`; `cache` is then unused). Returns a `Traded` or an `InvalidVerdict`; an
    exception outside `MODEL_FAULTS` is a bug and propagates.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    formula = answer_or_formula
    if source == "answer" or (source == "auto" and isinstance(formula, str) and holds_alpha_tag(formula)):
        try:
            parsed = extract(answer_or_formula)
        except AnswerError as err:
            return InvalidVerdict("missing_tag", "answer", str(err), exception=err)
        formula, has_reasoning = parsed.formula, parsed.has_reasoning
    text = formula if isinstance(formula, str) else None
    try:
        node = parse(formula, limits)
    except FormulaError as err:
        return InvalidVerdict("unparseable", err.kind, str(err), text, exception=err)
    if max_lookback is not None and lookback(node) > max_lookback:
        return InvalidVerdict("unparseable", "lookback",
                              f"lookback {lookback(node)} exceeds the {max_lookback}-session context", text, node)
    try:
        book = trade(node, *evaluate(node, panel, bound=True)) if bound else trade(node, evaluate(node, panel, cache))
    except FormulaError as err:     # data the panel lacks, found while evaluating
        return InvalidVerdict("unparseable", err.kind, str(err), text, node, err)
    except MODEL_FAULTS as err:
        return InvalidVerdict("unparseable", "evaluation", f"evaluation failed: {type(err).__name__}: {err}",
                              text, node, err)
    return Traded(node, book, has_reasoning)
