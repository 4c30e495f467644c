"""Variation operators on parsed formula trees: point mutations and subtree crossover.

Everything here maps immutable nodes (`alpha_gym.language.nodes`) to new nodes with a numpy Generator;
nothing is evaluated. A child is only a candidate: `checked` prints it and parses the text again under the
verifier's Limits (depth, tokens, lookback, cost), so a child the search submits is one the parser accepts.

    mutate_operator  an operator -> another of the same kind and arity (ts_mean -> ts_max, + -> *, rank -> scale)
    mutate_field     a field -> another field (close -> vwap)
    mutate_number    a window -> a nearby window (x0.5..x2, kept in 1..max_window), a constant -> a nearby one
    mutate_subtree   a subtree -> a fresh random one of depth <= 3 (`alpha_gym.language.sample.random_node`)
    crossover        a subtree of one parent -> a subtree of the other
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from alpha_gym.language import FormulaError, Limits, parse, to_text
from alpha_gym.language.nodes import Field, Node, Num, Op
from alpha_gym.language.operators import FIELDS, OPERATORS
from alpha_gym.language.sample import random_node

TreePath = tuple[int, ...]  # argument indices from the root to a node

#: Operators that may replace each other: same kind, same number of expression arguments, same reading
#: (a comparison stays a comparison). ind_neutralize and adv have no partner (adv has no argument to keep).
SWAP_GROUPS: tuple[tuple[str, ...], ...] = (
    ("rank", "scale"),
    tuple(sorted(n for n, s in OPERATORS.items() if s.kind == "ts" and s.n_series == 1)),
    ("ts_corr", "ts_cov"),
    ("abs", "log", "sign", "neg"),
    ("add", "sub", "mul", "div", "min", "max"),
    ("power", "signed_power"),
    ("lt", "gt", "le", "ge", "eq", "ne"),
    ("and", "or"),
)
_PARTNERS = {name: tuple(n for n in group if n != name) for group in SWAP_GROUPS for name in group}
#: Window factors of a window mutation (a neighbour on a log scale, never the same window twice in a row).
WINDOW_FACTORS = (0.5, 0.67, 0.8, 1.25, 1.5, 2.0)
CONSTANT_FACTORS = (0.5, 0.8, 1.25, 2.0, -1.0)


def subtrees(node: Node, path: TreePath = ()) -> list[tuple[TreePath, Node]]:
    """Every (path, subtree), parents before children (the root has path ())."""
    out = [(path, node)]
    if isinstance(node, Op):
        for i, a in enumerate(node.args):
            out.extend(subtrees(a, path + (i,)))
    return out


def replace_at(node: Node, path: TreePath, new: Node) -> Node:
    """`node` with the subtree at `path` replaced by `new`."""
    if not path:
        return new
    if not isinstance(node, Op):
        raise ValueError(f"path {path} goes below a leaf")
    i = path[0]
    args = node.args[:i] + (replace_at(node.args[i], path[1:], new),) + node.args[i + 1:]
    return Op(node.name, args, node.window, node.const)


def _pick(rng: np.random.Generator, items: list):
    return items[int(rng.integers(len(items)))]


def mutate_operator(node: Node, rng: np.random.Generator) -> Node | None:
    """One operator swapped for a partner of its group; None when the tree has no swappable operator."""
    spots = [(p, n) for p, n in subtrees(node) if isinstance(n, Op) and n.name in _PARTNERS]
    if not spots:
        return None
    path, old = _pick(rng, spots)
    name = str(_pick(rng, list(_PARTNERS[old.name])))
    const = OPERATORS[name].optional_const  # scale's a = 1 (the default); rank has none
    return replace_at(node, path, Op(name, old.args, old.window, const))


def mutate_field(node: Node, rng: np.random.Generator) -> Node | None:
    """One market field swapped for another (IndClass placeholders and optional fields are left alone)."""
    spots = [(p, n) for p, n in subtrees(node) if isinstance(n, Field) and n.name in FIELDS]
    if not spots:
        return None
    path, old = _pick(rng, spots)
    return replace_at(node, path, Field(str(_pick(rng, [f for f in FIELDS if f != old.name]))))


def mutate_number(node: Node, rng: np.random.Generator, max_window: int = 252) -> Node | None:
    """One window or constant moved to a neighbour; None when the tree has neither."""
    spots = [(p, n) for p, n in subtrees(node) if (isinstance(n, Op) and n.window is not None) or isinstance(n, Num)]
    if not spots:
        return None
    path, old = _pick(rng, spots)
    if isinstance(old, Num):
        value = old.value * float(_pick(rng, list(CONSTANT_FACTORS))) if old.value != 0 else 1.0
        return replace_at(node, path, Num(round(value, 6)))
    window = old.window
    for _ in range(8):  # a short window rounds back to itself: try other factors
        window = int(min(max_window, max(1, round(old.window * float(_pick(rng, list(WINDOW_FACTORS)))))))
        if window != old.window:
            break
    return replace_at(node, path, Op(old.name, old.args, window, old.const))


def mutate_subtree(node: Node, rng: np.random.Generator, depth: int = 3) -> Node:
    """One subtree replaced by a random tree of at most `depth` levels."""
    path, _ = _pick(rng, subtrees(node))
    return replace_at(node, path, random_node(rng, depth))


def crossover(a: Node, b: Node, rng: np.random.Generator) -> Node:
    """A subtree of `a` (never the whole of it when it has children) replaced by a random subtree of `b`."""
    spots = subtrees(a)
    if len(spots) > 1:
        spots = spots[1:]  # replacing the root would just copy a piece of b
    path, _ = _pick(rng, spots)
    _, donor = _pick(rng, subtrees(b))
    return replace_at(a, path, donor)


MUTATIONS: dict[str, Callable] = {"operator": mutate_operator, "field": mutate_field, "number": mutate_number,
                                  "subtree": mutate_subtree}


def checked(node: Node, limits: Limits) -> tuple[str, Node] | None:
    """(text, reparsed tree) when the printed child parses under `limits`, else None.

    The reparse is the verifier's own first check, so a child the search submits meets every Limit
    (depth, tokens, nested lookback, window range, cost); an operator only reachable through the printer's
    spelling (a `min(x, 5)` read back as ts_min) is read back as the verifier will read it.
    """
    if not isinstance(node, Op):  # a bare field or constant is never a tradable book
        return None
    text = to_text(node)
    try:
        return text, parse(text, limits)
    except (FormulaError, RecursionError):
        return None
