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

from functools import lru_cache
from typing import MutableMapping

import numpy as np

from alpha_gym.language import bounds
from alpha_gym.language.errors import UnknownNameError
from alpha_gym.language.nodes import Field, Node, Num, Op
from alpha_gym.language.operators import KERNELS, OPERATORS


class DataUnavailableError(UnknownNameError):
    """The formula is well formed but needs data this panel does not carry
    (`cap`, or the sector map behind `IndNeutralize`): an invalid answer with a reason."""

    kind = "missing_data"


def _full(x, shape) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return np.full(shape, float(x))


def evaluate(node: Node, panel, cache: MutableMapping | None = None, bound: bool = False):
    """The formula's value for every (day, stock) of `panel`.

    With `bound`, the pair `(values, error)`: `error` (an array, a float for the whole panel, or a
    `bounds.Relative` k meaning `k |values|`; `bounds.absolute` makes it an array) bounds,
    per cell, how far the values are from the formula's value in exact arithmetic (`bounds.py`; each
    operator's `OpSpec.bound` propagates it), computed alongside and freed alike; `cache` is then ignored.

    Without `cache`, every intermediate array is dropped as soon as its last consumer has
    used it (a shared subexpression is computed once and kept until its last use), and the
    arguments needing the most memory are evaluated first: peak memory grows with the
    tree's nesting, not with its size (`peak_arrays`).

    `cache` (optional) memoises every subtree by node across calls on the same panel, so
    answers sharing subexpressions compute them once; it keeps every intermediate alive,
    so use it only on small panels. Results are read-only arrays; never mutate them.
    """
    _tune_allocator()
    if bound:
        out, error = _Freeing(node, panel, bounded=True).value(node)
        return _full(out, panel.shape), error
    if cache is not None:
        out = _eval(node, panel, cache)
    else:
        out = _Freeing(node, panel).value(node)
    return _full(out, panel.shape)


def _tune_allocator() -> None:
    from alpha_gym.language._malloc import keep_freed_memory
    keep_freed_memory()


def uses(node: Node) -> dict[Node, int]:
    """How many times each distinct subexpression is read by an operator (edges of the tree's DAG)."""
    count: dict[Node, int] = {}
    seen = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen or not isinstance(n, Op):
            continue
        seen.add(n)
        for a in n.args:
            count[a] = count.get(a, 0) + 1
            stack.append(a)
    return count


@lru_cache(maxsize=65536)
def peak_arrays(node: Node) -> int:
    """Panel-sized arrays alive at once while evaluating `node` alone, in the order `evaluate` uses
    (largest need first), counting its result; fields and constants cost nothing (the panel holds them).

    This is the Sethi-Ullman number of the tree: at most about log2(leaves) + 1, and at most the
    tree's depth. Shared subexpressions kept for a later use can add to it (at most one each).
    """
    if not isinstance(node, Op):
        return 0
    needs = sorted((peak_arrays(a) for a in node.args), reverse=True)
    held = max((i + need for i, need in enumerate(needs)), default=0)
    return max(held, len([a for a in node.args if isinstance(a, Op)]) + 1, 1)


class _Freeing:
    """One evaluation that frees each intermediate after its last use; `bounded`: each value is a pair
    (values, rounding-error bound)."""

    def __init__(self, root: Node, panel, bounded: bool = False):
        self.panel = panel
        self.bounded = bounded
        self.left = uses(root)          # reads still to come, per distinct subexpression
        self.kept: dict[Node, object] = {}  # values of shared subexpressions awaiting another read

    def value(self, node: Node):
        if isinstance(node, Num):
            return (node.value, bounds.constant(node.value)) if self.bounded else node.value
        hit = self.kept.get(node)
        if hit is None:
            if isinstance(node, Field):
                hit = _field(node, self.panel)
                if self.bounded:
                    hit = (hit, _field_bound(node, hit, self.panel))
            else:
                hit = self._compute(node)
            if self.left.get(node, 0) > 1 and not isinstance(node, Field):
                self.kept[node] = hit
        return hit

    def _read(self, node: Node) -> None:
        """One read of `node` done: forget it after its last one."""
        if isinstance(node, Num):
            return
        self.left[node] -= 1
        if self.left[node] == 0:
            self.kept.pop(node, None)

    def _compute(self, node: Op):
        _check_data(node, self.panel)
        # Largest need first (Sethi-Ullman), so fewer results wait while a big argument is built.
        order = sorted(range(len(node.args)), key=lambda i: -peak_arrays(node.args[i]))
        args: list = [None] * len(node.args)
        for i in order:
            args[i] = self.value(node.args[i])
        if self.bounded:
            errors = [e for _, e in args]
            args = [v for v, _ in args]
        value = _apply_values(node, self.panel, args)
        if self.bounded:
            error = _apply_bound(node, self.panel, args, errors, value)
            if node.name == "rank":  # an order that rounding decides is a tie (bounds.rounding_runs)
                value, error = _tie_rounding(args[0], errors[0], value, error)
            del errors
        del args
        for a in node.args:
            self._read(a)
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
        return (value, error) if self.bounded else value


def _tie_rounding(x, ex, value, error):
    """`rank`'s value with the orders its input's rounding decides tied, and its bound: the rounding of the tied
    ranks where they moved (the tie is the language's rule, as rule 1's ties are), as computed elsewhere."""
    if not (isinstance(x, np.ndarray) and x.ndim == 2 and isinstance(value, np.ndarray)):
        return value, error  # a constant row has no order to decide
    tied = bounds.rounding_runs(x, ex, value)
    if tied is None:
        return value, error
    error = np.maximum(bounds.absolute(error, value), bounds.ROUND * np.abs(tied))
    return tied, error


def _field(node: Field, panel) -> np.ndarray:
    if not panel.has(node.name):
        raise DataUnavailableError(f"the data has no {node.name!r} field (market cap is not available "
                                   "on this panel)" if node.name == "cap" else
                                   f"the data has no {node.name!r} field")
    return panel.field(node.name)


def _field_bound(node: Field, values: np.ndarray, panel):
    """The rounding bound of a field (`bounds.field`), kept with the panel as its derived fields are."""
    loaded = node.name in panel.data
    if loaded or node.name != "returns" or not hasattr(panel, "memo"):
        return bounds.field(node.name, values, loaded)
    return panel.memo(("bound", node.name), lambda: bounds.field(node.name, values, loaded))


def _eval(node: Node, panel, memo):
    if isinstance(node, Num):
        return node.value
    hit = memo.get(node)
    if hit is not None:
        return hit
    if isinstance(node, Field):
        value = _field(node, panel)
    else:
        _check_data(node, panel)
        value = _apply_values(node, panel, [_eval(a, panel, memo) for a in node.args])
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    memo[node] = value
    return value


def _check_data(node: Op, panel) -> None:
    """Refuse, before evaluating its argument, an operator that needs data the panel lacks."""
    if node.name == "ind_neutralize" and getattr(panel, "sectors", None) is None:
        raise DataUnavailableError("IndNeutralize needs industry data, and this panel has no sector map")


def _apply_bound(node: Op, panel, args: list, errors: list, value):
    """The rounding-error bound of one operator's value (`OpSpec.bound`), its arguments as its kernel saw them."""
    spec = OPERATORS[node.name]
    if spec.kind != "elem":
        args = [_full(a, panel.shape) for a in args]
    if not getattr(spec.bound, "relative", False):
        errors = [bounds.absolute(e, a) for e, a in zip(errors, args)]
    with np.errstate(all="ignore"):  # inf * 0 of an unbounded input: NaN, read as inf (bounds._clean)
        if spec.kind == "elem" and not isinstance(value, np.ndarray):  # a folded constant: a scalar bound
            args = [np.float64(a) for a in args]
            errors = [bounds.absolute(e, a) for e, a in zip(errors, args)]
            return float(np.max(bounds.absolute(spec.bound(args, errors, np.float64(value), node), value)))
        error = spec.bound(args, errors, value, node)
    if isinstance(error, np.ndarray):
        error.setflags(write=False)
    return error


def _apply_values(node: Op, panel, args: list):
    """Apply one operator to its evaluated arguments (arrays or scalar constants)."""
    if node.name == "adv":
        return KERNELS["ts_mean"](panel.field("dollar_volume"), node.window)
    if node.name == "ind_neutralize":
        return KERNELS["ind_neutralize"](_full(args[0], panel.shape), panel.sectors)
    spec = OPERATORS[node.name]
    kernel = KERNELS[node.name]
    if node.name == "rank" and isinstance(node.args[0], Field) and hasattr(panel, "memo"):
        # rank(close), rank(volume)...: common in formulas and a full sort each; kept with the panel
        return panel.memo(("rank", node.args[0].name), lambda: kernel(args[0]))
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
