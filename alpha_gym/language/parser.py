"""Text -> immutable nodes, with every limit checked and every error located.

Parsing is LALR(1) over `grammar.lark`; nothing the model writes is ever
evaluated as Python. The checks run cheapest first: length and bracket
nesting on the raw text, the token count on the lexer's output, then names,
arities, windows, depth and nested lookback while the tree is built, and last
the estimated evaluation cost of the whole tree (`cost.py`).
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from alpha_gym.language.cost import cost
from alpha_gym.language.errors import (FormulaArgumentError, FormulaError, FormulaLimitError,
                                       FormulaSyntaxError, UnknownNameError)
from alpha_gym.language.nodes import Field, Node, Num, Op, depth
from alpha_gym.language.operators import (COMPARE_OPS, FIELDS, INDCLASS_LEVELS, OPERATORS, OPTIONAL_FIELDS,
                                          OpSpec, resolve)
from alpha_gym.ranges import above, check_fields, ints

_INDCLASS = "IndClass."
#: Element-wise `min`/`max` that the paper reads as `ts_min`/`ts_max` when the second argument
#: is an integer literal (see `_ToNodes.call`).
_PAPER_TS_MINMAX = {"min": "ts_min", "max": "ts_max"}


def _is_indclass(node) -> bool:
    """The placeholder node of an `IndClass.<level>` name (only valid inside IndNeutralize)."""
    return isinstance(node, Field) and node.name.startswith(_INDCLASS)


@dataclass(frozen=True)
class Limits:
    """Size limits of one formula (the reference contract's defaults)."""

    max_window: int = 252      # 1 <= d <= max_window
    max_lookback: int = 252    # past sessions needed along any path, summed
    max_tokens: int = 256      # lexer tokens
    max_depth: int = 16        # tree levels
    max_chars: int = 4096      # raw text length, checked before lexing
    max_brackets: int = 64     # bracket nesting, checked before parsing
    # Estimated evaluation work, units per cell (`cost.py`): bounds the slowest valid formula at a few
    # times the median one. The paper's 101 alphas cost 16..460; 36 x ts_rank(x, 250) would cost about 7,700.
    max_cost: float = 500.0

    def __post_init__(self):
        check_fields(self, LIMIT_RANGES)


#: Each limit must let some formula through (a window of 1, one token, one level); the upper bounds keep
#: the parser inside Python's recursion limit and the complexity channel's minimum a finite number.
LIMIT_RANGES = {
    "max_window": ints(1, 100_000),
    "max_lookback": ints(0, 1_000_000),
    "max_tokens": ints(1, 1_000_000),
    "max_depth": ints(1, 256),
    "max_chars": ints(1, 10_000_000),
    "max_brackets": ints(1, 256),
    "max_cost": above(0.0, 1e12),
}

DEFAULT_LIMITS = Limits()


@lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = resources.files("alpha_gym.language").joinpath("grammar.lark").read_text()
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def _column(meta_or_token) -> int | None:
    return getattr(meta_or_token, "column", None)


@lru_cache(maxsize=65536)
def lookback(node: Node) -> int:
    """Past sessions a node needs beyond today: windows summed along the deepest path.

    Rolling windows of d sessions need d - 1 past sessions, `delay`/`ts_delta`
    need d, `returns` needs 1, `adv{d}` needs d - 1 (a d-session mean of vwap * volume).
    """
    if isinstance(node, Field):
        return 1 if node.name == "returns" else 0
    if isinstance(node, Num):
        return 0
    spec = OPERATORS[node.name]
    own = spec.lookback(node.window) if node.window is not None else 0
    return own + max((lookback(a) for a in node.args), default=0)


class _ToNodes(Transformer):
    """Maps each grammar rule to a node, validating as it goes (bottom-up)."""

    def __init__(self, limits: Limits):
        super().__init__()
        self.limits = limits

    # ----------------------------------------------------------- helpers
    def _checked(self, node: Node, column: int | None) -> Node:
        if isinstance(node, Op):
            for a in node.args:
                if _is_indclass(a):
                    raise FormulaArgumentError(f"{a.name} can only be the second argument of IndNeutralize",
                                               column)
        if depth(node) > self.limits.max_depth:
            raise FormulaLimitError(f"formula is nested {depth(node)} levels deep; the limit is "
                                    f"{self.limits.max_depth}", column)
        if lookback(node) > self.limits.max_lookback:
            raise FormulaLimitError(f"nested lookback of {lookback(node)} sessions exceeds "
                                    f"{self.limits.max_lookback}", column)
        return node

    def _window(self, arg: Node, opname: str, column: int | None) -> int:
        if not isinstance(arg, Num):
            raise FormulaArgumentError(f"the window of {opname} must be a number, not an expression", column)
        if not math.isfinite(arg.value):
            raise FormulaArgumentError(f"the window of {opname} is not a finite number", column)
        d = math.floor(arg.value)  # the paper's rule: non-integer windows are floored
        if not 1 <= d <= self.limits.max_window:
            raise FormulaArgumentError(f"window {arg.value:g} of {opname} is outside 1..{self.limits.max_window}",
                                       column)
        return d

    def _binary(self, name: str, meta, a: Node, b: Node) -> Node:
        return self._checked(Op(name, (a, b)), _column(meta))

    # ------------------------------------------------------------- atoms
    @v_args(meta=True)
    def number(self, meta, children, integer: bool = False):
        token = children[0]
        value = float(token)
        if not math.isfinite(value):
            raise FormulaArgumentError(f"constant {str(token)[:20]} is too large", _column(token))
        return Num(value, integer=integer)

    @v_args(meta=True)
    def integer(self, meta, children):
        """An INT literal (digits only): the paper's `min(x, 5)` reads it as a window."""
        return self.number(meta, children, integer=True)

    @v_args(meta=True)
    def name(self, meta, children):
        token: Token = children[0]
        text = str(token)
        if text in FIELDS or text in OPTIONAL_FIELDS:
            return Field(text)
        if text.startswith("adv") and text[3:].isdigit():  # the paper's adv{d}
            return self._checked(Op("adv", (), window=self._window(Num(float(text[3:])), text, token.column)),
                                 token.column)
        if text.startswith(_INDCLASS):
            if text[len(_INDCLASS):] in INDCLASS_LEVELS:
                return Field(text)  # placeholder: IndNeutralize consumes it, anywhere else is an error
            raise UnknownNameError(f"unknown industry level {text!r}; levels are "
                                   f"{', '.join(_INDCLASS + lv for lv in INDCLASS_LEVELS)}", token.column)
        if resolve(text) is not None:
            raise FormulaArgumentError(f"{text} is a function; call it as {text}(...)", token.column)
        raise UnknownNameError(f"unknown field {text!r}; fields are {', '.join(FIELDS)}", token.column)

    @v_args(meta=True)
    def call(self, meta, children):
        token: Token = children[0]
        args = list(children[1].children) if len(children) > 1 else []
        name = str(token)
        column = token.column
        if name == "adv":
            if len(args) != 1:
                raise FormulaArgumentError("adv takes one window: adv(d) or adv{d}", column)
            return self._checked(Op("adv", (), window=self._window(args[0], name, column)), column)
        if (name in _PAPER_TS_MINMAX and len(args) == 2 and isinstance(args[1], Num) and args[1].integer
                and not isinstance(args[0], Num) and args[1].value >= 1):
            # The paper: "min(x, d) = ts_min(x, d)". An integer literal d >= 1 after an
            # expression is a window; write min(d, x) or min(x, d.0) for the element-wise minimum.
            d = args[1].value
            if d > self.limits.max_window:
                raise FormulaArgumentError(
                    f"{name}(x, {d:g}) is the paper's ts_{name}(x, {d:g}) and window {d:g} is outside "
                    f"1..{self.limits.max_window}; for the element-wise {name} write {name}({d:g}, x)", column)
            return self._checked(Op(_PAPER_TS_MINMAX[name], (args[0],), window=int(d)), column)
        spec: OpSpec | None = resolve(name)
        if spec is None:
            hint = " (fields are not functions)" if name in FIELDS else ""
            raise UnknownNameError(f"unknown function {name!r}{hint}", column)
        if spec.name == "ind_neutralize":
            if len(args) == 2 and _is_indclass(args[1]):
                args = args[:1]  # every IndClass level reads the panel's one sector map
            if len(args) != 1 or _is_indclass(args[0]):
                raise FormulaArgumentError(f"{name} takes an expression and optionally an IndClass level: "
                                           f"{name}(x, IndClass.industry)", column)
            return self._checked(Op("ind_neutralize", (args[0],)), column)
        n = spec.n_series
        if spec.kind == "ts":
            if len(args) != n + 1:
                raise FormulaArgumentError(f"{name} takes {n} expression argument{'s' * (n > 1)} and a window "
                                           f"({n + 1} in all), got {len(args)}", column)
            node = Op(spec.name, tuple(args[:n]), window=self._window(args[n], name, column))
        elif spec.optional_const is not None:
            if not n <= len(args) <= n + 1:
                raise FormulaArgumentError(f"{name} takes {n} or {n + 1} arguments, got {len(args)}", column)
            const = spec.optional_const
            if len(args) == n + 1:
                if not isinstance(args[n], Num):
                    raise FormulaArgumentError(f"the last argument of {name} must be a number", column)
                const = args[n].value
            node = Op(spec.name, tuple(args[:n]), const=const)
        else:
            if len(args) != n:
                raise FormulaArgumentError(f"{name} takes {n} argument{'s' * (n > 1)}, got {len(args)}", column)
            node = Op(spec.name, tuple(args))
        return self._checked(node, column)

    # ---------------------------------------------------------- operators
    @v_args(meta=True)
    def neg(self, meta, children):
        (x,) = children
        if isinstance(x, Num):
            return Num(-x.value)
        return self._checked(Op("neg", (x,)), _column(meta))

    @v_args(meta=True)
    def pos(self, meta, children):
        return children[0]

    @v_args(meta=True)
    def add(self, meta, c): return self._binary("add", meta, *c)

    @v_args(meta=True)
    def sub(self, meta, c): return self._binary("sub", meta, *c)

    @v_args(meta=True)
    def mul(self, meta, c): return self._binary("mul", meta, *c)

    @v_args(meta=True)
    def div(self, meta, c): return self._binary("div", meta, *c)

    @v_args(meta=True)
    def pow(self, meta, c): return self._binary("power", meta, *c)

    @v_args(meta=True)
    def or_(self, meta, c): return self._binary("or", meta, *c)

    @v_args(meta=True)
    def and_(self, meta, c): return self._binary("and", meta, *c)

    @v_args(meta=True)
    def compare(self, meta, children):
        a, op, b = children
        return self._binary(COMPARE_OPS[str(op)], meta, a, b)

    @v_args(meta=True)
    def cond(self, meta, children):
        return self._checked(Op("where", tuple(children)), _column(meta))


def _precheck(text: str, limits: Limits) -> None:
    if len(text) > limits.max_chars:
        raise FormulaLimitError(f"formula is {len(text)} characters long; the limit is {limits.max_chars}")
    if not text.strip():
        raise FormulaSyntaxError("empty formula", 1)
    level = 0
    for i, ch in enumerate(text):
        if ch == "(":
            level += 1
            if level > limits.max_brackets:
                raise FormulaLimitError(f"brackets nested more than {limits.max_brackets} deep", i + 1)
        elif ch == ")":
            level -= 1


def _unicode_name(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip()


def _describe(err: UnexpectedInput, text: str) -> FormulaSyntaxError:
    column = getattr(err, "column", None)
    if isinstance(err, UnexpectedCharacters):
        ch = text[err.pos_in_stream] if 0 <= err.pos_in_stream < len(text) else "?"
        if ch.isdigit() or unicodedata.numeric(ch, None) is not None:  # never read as a number (issue 41.7)
            return FormulaSyntaxError(f"{ch!r} ({_unicode_name(ch)}) is not a digit of the formula language: "
                                      "numbers and windows are written with the ASCII digits 0-9", column)
        return FormulaSyntaxError(f"unexpected character {ch!r}", column)
    if isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END"):
        return FormulaSyntaxError("formula ends too early (unclosed bracket or missing operand)", len(text) + 1)
    if isinstance(err, UnexpectedToken):
        expected = sorted(err.expected)[:6]
        return FormulaSyntaxError(f"unexpected {str(err.token)!r}; expected one of {', '.join(expected)}", column)
    return FormulaSyntaxError(str(err).splitlines()[0], column)


def parse(text: str, limits: Limits = DEFAULT_LIMITS) -> Node:
    """Parse one formula. Raises a `FormulaError` subclass saying what and where."""
    if not isinstance(text, str):
        raise FormulaSyntaxError(f"a formula must be a string, not {type(text).__name__}")
    _precheck(text, limits)
    lark = _lark()
    try:
        n_tokens = sum(1 for _ in lark.lex(text))
    except UnexpectedInput as err:
        raise _describe(err, text) from None
    if n_tokens > limits.max_tokens:
        raise FormulaLimitError(f"formula has {n_tokens} tokens; the limit is {limits.max_tokens}")
    try:
        tree = lark.parse(text)
    except UnexpectedInput as err:
        raise _describe(err, text) from None
    try:
        node = _ToNodes(limits).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, FormulaError):
            raise err.orig_exc from None
        raise
    except RecursionError:
        raise FormulaLimitError(f"formula is nested more than {limits.max_depth} levels deep") from None
    if _is_indclass(node):
        raise FormulaArgumentError(f"{node.name} can only be the second argument of IndNeutralize", 1)
    work = cost(node)
    if work > limits.max_cost:
        raise FormulaLimitError(f"estimated evaluation cost {work:.0f} units a cell exceeds the limit max_cost="
                                f"{limits.max_cost:g} (VerifierConfig.limits; ts_rank(x, d) costs about 4d/5, "
                                "rank 50, other operators 3 to 130)")
    return node


def count_tokens(text: str) -> int:
    """DSL tokens in a formula (what the 256-token limit counts)."""
    return sum(1 for _ in _lark().lex(text))
