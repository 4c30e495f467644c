"""Evaluate a formula tree over a panel: one float64 (days x stocks) array, strictly backward-looking.

NaN rules (the kernels in `ops.py` implement them; `docs/operators.md` lists each one):
- warm-up: a rolling operator is NaN until its window is full, and wherever its
  window holds a NaN;
- undefined arithmetic is NaN: x / 0, log of x <= 0, a correlation over a
  constant window, invalid powers;
- infinities become NaN, so no inf ever leaves an operator.
A NaN cell later gets zero weight in the book.
"""

from __future__ import annotations

from typing import MutableMapping

import numpy as np

from alpha_gym.language.errors import UnknownNameError
from alpha_gym.language.nodes import Field, Node, Num, Op
from alpha_gym.language.ops import KERNELS
from alpha_gym.language.operators import OPERATORS


class DataUnavailableError(UnknownNameError):
    """The formula is well formed but needs data this panel does not carry
    (`cap`, or the sector map behind `IndNeutralize`): an invalid answer with a reason."""

    kind = "missing_data"


def _full(x, shape) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return np.full(shape, float(x))


def evaluate(node: Node, panel, cache: MutableMapping | None = None) -> np.ndarray:
    """The formula's value for every (day, stock) of `panel`.

    `cache` (optional) memoises subtrees by node across calls on the same
    panel, so answers sharing subexpressions compute them once. Results are
    read-only arrays; never mutate them.
    """
    memo = {} if cache is None else cache
    out = _eval(node, panel, memo)
    return _full(out, panel.shape)


def _eval(node: Node, panel, memo):
    if isinstance(node, Num):
        return node.value
    hit = memo.get(node)
    if hit is not None:
        return hit
    if isinstance(node, Field):
        if not panel.has(node.name):
            raise DataUnavailableError(f"the data has no {node.name!r} field (market cap is not available "
                                       "on this panel)" if node.name == "cap" else
                                       f"the data has no {node.name!r} field")
        value = panel.field(node.name)
    else:
        value = _apply(node, panel, memo)
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    memo[node] = value
    return value


def _apply(node: Op, panel, memo):
    if node.name == "adv":
        return KERNELS["ts_mean"](panel.field("dollar_volume"), node.window)
    if node.name == "ind_neutralize":
        sectors = getattr(panel, "sectors", None)
        if sectors is None:
            raise DataUnavailableError("IndNeutralize needs industry data, and this panel has no sector map")
        return KERNELS["ind_neutralize"](_full(_eval(node.args[0], panel, memo), panel.shape), sectors)
    spec = OPERATORS[node.name]
    args = [_eval(a, panel, memo) for a in node.args]
    kernel = KERNELS[node.name]
    if spec.kind == "elem":
        if all(not isinstance(a, np.ndarray) for a in args):  # constant folding stays scalar
            return float(_full(kernel(*[np.full((1, 1), a) for a in args]), (1, 1))[0, 0])
        return kernel(*args)
    args = [_full(a, panel.shape) for a in args]
    if spec.kind == "ts":
        return kernel(*args, node.window)
    if node.const is not None:
        return kernel(*args, node.const)
    return kernel(*args)
