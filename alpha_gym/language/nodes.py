"""Immutable expression nodes. A parsed formula is a tree of these, hashable and comparable."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator, Union


@dataclass(frozen=True, slots=True)
class Num:
    """A numeric constant. `integer`: written as an integer literal (the grammar's INT), which the paper's
    `min(x, 5)` reads as a window; it takes no part in equality, hashing or printing."""

    value: float
    integer: bool = field(default=False, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Field:
    """A market field: open high low close volume returns vwap (and cap where the data has it)."""

    name: str


@dataclass(frozen=True, slots=True)
class Op:
    """An operator applied to expression arguments, with a window `d` for time-series operators.

    `const` holds a constant parameter that is not an expression (the `a` of `scale(x, a)`).
    """

    name: str
    args: tuple["Node", ...]
    window: int | None = None
    const: float | None = None


Node = Union[Num, Field, Op]


def children(node: Node) -> tuple[Node, ...]:
    return node.args if isinstance(node, Op) else ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, parents before children."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


@lru_cache(maxsize=65536)  # the parser asks for every node bottom-up: each subtree is measured once
def depth(node: Node) -> int:
    """Levels in the tree; a lone field or constant has depth 1."""
    kids = children(node)
    return 1 + (max(depth(k) for k in kids) if kids else 0)


def size(node: Node) -> int:
    """Number of expression nodes (fields, constants and operators)."""
    return sum(1 for _ in walk(node))
