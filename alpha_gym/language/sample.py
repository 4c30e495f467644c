"""Random formulas drawn from the grammar: for property tests, fuzzing and supervised warm-start data."""

from __future__ import annotations

import numpy as np

from alpha_gym.language.nodes import Field, Node, Num, Op, depth as tree_depth  # random_node has a depth argument
from alpha_gym.language.operators import FIELDS, OPERATORS
from alpha_gym.language.parser import DEFAULT_LIMITS, Limits, lookback
from alpha_gym.language.printer import to_text

_WINDOWS = (1, 2, 3, 5, 8, 10, 14, 20, 21, 30, 40, 63, 100, 126)
_TS = sorted(n for n, s in OPERATORS.items() if s.kind == "ts" and n != "adv")
_ELEM_FUNCS = ("abs", "log", "sign", "signed_power", "min", "max")
_BINARY = ("add", "sub", "mul", "div")


def random_node(rng: np.random.Generator, depth: int = 4) -> Node:
    """A random tree of at most `depth` levels (it may still break the lookback limit; see `random_formula`)."""
    if depth <= 1 or rng.random() < 0.2:
        return Field(str(rng.choice(FIELDS))) if rng.random() < 0.9 else Num(float(rng.choice([1, 2, 0.5, 10])))
    kind = rng.choice(["ts", "cs", "bin", "elem", "neg"], p=[0.45, 0.2, 0.2, 0.1, 0.05])
    if kind == "ts":
        name = str(rng.choice(_TS))
        spec = OPERATORS[name]
        args = tuple(random_node(rng, depth - 1) for _ in range(spec.n_series))
        return Op(name, args, window=int(rng.choice(_WINDOWS)))
    if kind == "cs":
        name = str(rng.choice(["rank", "scale"]))
        return Op(name, (random_node(rng, depth - 1),), const=1.0 if name == "scale" else None)
    if kind == "bin":
        return Op(str(rng.choice(_BINARY)), (random_node(rng, depth - 1), random_node(rng, depth - 1)))
    if kind == "neg":
        return Op("neg", (random_node(rng, depth - 1),))
    name = str(rng.choice(_ELEM_FUNCS))
    n = OPERATORS[name].n_series
    return Op(name, tuple(random_node(rng, depth - 1) for _ in range(n)))


def random_formula(rng: np.random.Generator, depth: int = 4, limits: Limits = DEFAULT_LIMITS) -> str:
    """The text of a random formula that parses within `limits` (resampled until it does)."""
    depth = max(2, depth)  # a depth-1 tree is a bare field: never an operator, so never accepted
    while True:
        node = random_node(rng, depth)
        if isinstance(node, Op) and lookback(node) <= limits.max_lookback and tree_depth(node) <= limits.max_depth:
            return to_text(node)
