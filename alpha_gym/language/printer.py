"""Nodes -> text: a faithful printer, a canonical form, and a window-bucketed form for novelty.

`to_text(parse(s))` re-parses to the same tree. `canonical` also sorts the
arguments of commutative operators and flattens `+`/`*` chains, so that
`close + open` and `open + close` print alike. `canonical(node, bucket=True)`
additionally snaps every window to 5/21/63/126/252, so `ts_mean(close, 20)`
and `ts_mean(close, 21)` count as the same idea (the R9 rule).
"""

from __future__ import annotations

import math
from functools import lru_cache

from alpha_gym.language.nodes import Field, Node, Num, Op
from alpha_gym.language.operators import COMPARISON, OPERATORS

WINDOW_BUCKETS = (5, 21, 63, 126, 252)
_PREC_NEG = OPERATORS["neg"].precedence  # a negative constant binds like unary minus
_PREC_ATOM = 7


def bucket_window(d: int, buckets: tuple[int, ...] = WINDOW_BUCKETS) -> int:
    """The nearest bucket in log distance (boundaries at the buckets' geometric means)."""
    return min(buckets, key=lambda b: (abs(math.log(d / b)), b))


def _number(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _prec(node: Node) -> int:
    if isinstance(node, Op):
        spec = OPERATORS[node.name]
        if spec.precedence is not None:  # infix, prefix and ternary forms (operators.SPECS)
            return spec.precedence
    if isinstance(node, Num) and node.value < 0:
        return _PREC_NEG
    return _PREC_ATOM


def _wrap(child: Node, need: int, strict: bool) -> str:
    text = to_text(child)
    p = _prec(child)
    if p < need or (strict and p == need):
        return f"({text})"
    return text


@lru_cache(maxsize=65536)
def to_text(node: Node) -> str:
    """Print a node so that parsing the text gives the same node back."""
    if isinstance(node, Num):
        return _number(node.value)
    if isinstance(node, Field):
        return node.name
    name, args = node.name, node.args
    spec = OPERATORS[name]
    if spec.form == "infix":
        p = spec.precedence
        # The grammar is left-associative and comparisons do not chain: a right
        # operand of equal strength (and any comparison operand) needs brackets.
        left = _wrap(args[0], p, strict=(p == COMPARISON))
        right = _wrap(args[1], p, strict=True)
        return f"{left} {spec.symbol} {right}"
    if spec.form == "prefix":
        return f"{spec.symbol}{_wrap(args[0], spec.precedence, strict=False)}"
    if spec.form == "ternary":  # the condition binds tighter; the branches nest to the right
        return f"{_wrap(args[0], spec.precedence + 1, strict=False)} ? {to_text(args[1])} : {to_text(args[2])}"
    if spec.form == "window_name":
        return f"{name}{node.window}"
    parts = [to_text(a) for a in args]
    if name in ("min", "max") and _reads_as_window(args):
        # `min(x, 5)` would parse as the paper's ts_min(x, 5): `5.0` keeps it element-wise
        parts[1] = repr(float(args[1].value))
    if node.window is not None:
        parts.append(str(node.window))
    if node.const is not None and node.const != spec.optional_const:
        parts.append(_number(node.const))
    return f"{name}({', '.join(parts)})"


def _reads_as_window(args: tuple[Node, ...]) -> bool:
    """An element-wise min/max whose second argument would print as an integer literal >= 1."""
    a, b = args
    return (not isinstance(a, Num) and isinstance(b, Num) and b.value >= 1
            and _number(b.value).isdigit())


def _flatten(node: Node, name: str) -> list[Node]:
    if isinstance(node, Op) and node.name == name:
        return [leaf for a in node.args for leaf in _flatten(a, name)]
    return [node]


@lru_cache(maxsize=65536)
def normalize(node: Node, bucket: bool | tuple[int, ...] = False) -> Node:
    """The canonical tree: commutative arguments sorted, +/* chains flattened, windows optionally bucketed
    (`bucket`: True for WINDOW_BUCKETS, or the buckets themselves)."""
    if not isinstance(node, Op):
        return node
    if bucket is True:
        bucket = WINDOW_BUCKETS
    args = tuple(normalize(a, bucket) for a in node.args)
    window = bucket_window(node.window, bucket) if (bucket and node.window is not None) else node.window
    spec = OPERATORS[node.name]
    if node.name in ("add", "mul"):
        terms = sorted((t for a in args for t in _flatten(a, node.name)), key=to_text)
        out = terms[0]
        for t in terms[1:]:
            out = Op(node.name, (out, t))
        return out
    if spec.commutative:
        args = tuple(sorted(args, key=to_text))
    return Op(node.name, args, window, node.const)


def canonical(node: Node, bucket: bool | tuple[int, ...] = False) -> str:
    """Canonical text of a formula: equal for formulas that differ only in spacing or commutative order."""
    return to_text(normalize(node, bucket))
