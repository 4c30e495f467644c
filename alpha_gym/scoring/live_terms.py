"""The live part of a formula: what is left once every term that cannot change its book is taken out.

A brief's checks (R13) and the duplicate form (R9) read the formula's structure, and structure is cheap to
pad: `1 ? H : T`, `(close > 0) ? H : T`, `H + 0 * T`, `H + 1e-300 * T`, `H + T - T` trade the book of `H`,
yet a structural check counts what `T` holds, and `H + 0 * T` does not print as `H`. The verifier runs both
on `live_tree(...)` instead, so a part of the formula counts only where it can move the book.

A *term* is an operand of an operator with several operands. Taking one out replaces its operator by what is
left, tried in this order:

    a + b, a * b, min(a, b), max(a, b), a && b, a || b    ->  a (b taken out), then b (a taken out)
    a - b                                                 ->  a, then -b
    a / b                                                 ->  a
    c ? a : b                                             ->  a (c and b taken out), then b
    a chain of + and - (or * and /) holding t and -t      ->  the chain without both (added, then subtracted)

Only what a brief's check could count is taken out: a term holding a field or an operator other than
arithmetic (`ts_mean(1, 63)` holds a window), or any operand of `?:`, `&&`, `||` (a check counts those
operators themselves). `rank(x) - 0.5` keeps its 0.5 and `ts_sum(x, 8) / 8` its 8: numbers meet no check. A
one-operand operator (`rank`, `sign`, `ts_mean`, ...) is never taken out (an outer `rank` never moves the
book, yet it is the shape a brief may ask for), nor the condition of `?:` alone, nor a window.

A term is dead when either holds, on the whole panel:

- negligible: where it stands, the values with and without it differ by at most `NEGLIGIBLE` of the day's
  largest |value| (the cross-section's scale), with the same missing cells, from the first day both have a
  value (`H + 0 * T`, `1 ? H : T`, `(close > 0) ? H : T`, `H + 1e-300 * T`, `(close - close) * T`,
  `max(low, high)`). Such a term is dead even where it would break a tie (`H + 1e-300 * T` with H exactly 0
  on some stocks): a term scaled out of sight is the padding this closes;
- the book does not move: the formula without it trades the same positions (`weights_from_signal`, the
  verifier's trade rule), within a mean daily distance sum_i |w_i - w'_i| of `DEAD_DISTANCE` (0: the same
  positions, 2: opposite ones; a day one book trades and the other does not counts 1), from the first day
  both trade, so a dead term's window that only delays the start is no move (`sign(x) + 0.5 * rank(y)`
  against `sign(x) + rank(y)`, `ts_rank((high + low) / 2, 3)`, `volume + returns`).

Terms are tried parents first; a dead one is taken out and what is left is tried again, the book always
compared with the ORIGINAL formula's, so the live tree trades the original book within the same bound. Every
value is computed here by `evaluate` (the verifier's values may differ where rounding decides an order).
Deterministic: the same tree and panel give the same live tree.

Cost: nothing for a formula without terms. Each term is first tried on the last `SAMPLE_DAYS` decision days
(the panel cut to them and the formula's lookback): a term that is not negligible there and moves the book
there is live without more work; then on every `STRIDE`-th day of the panel, then on every day
(benchmarks/live_terms_cost.py measures it).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from alpha_gym.book.book import weights_from_signal
from alpha_gym.language.errors import MODEL_FAULTS
from alpha_gym.language.evaluate import evaluate
from alpha_gym.language.nodes import Field, Node, Num, Op, walk
from alpha_gym.language.parser import lookback

#: A term is negligible where it moves the node by at most this share of the day's largest |value|: the
#: language's own rounding rule (`ops.CANCEL_RTOL`: a sum within 1e-9 of its larger operand is exactly 0).
NEGLIGIBLE = 1e-9
#: The book does not move when the mean daily distance between the positions with and without a term is at most
#: this (a day's gross is 1): a tie broken on a few days stays under it, a term that carries weight moves the
#: book far more (tests/test_live_terms.py measures both sides on us46).
DEAD_DISTANCE = 1e-4
#: Decision days a term is tried on first (the last ones); a mean distance there above SAMPLE_FACTOR x
#: DEAD_DISTANCE is a move. Then every STRIDE-th day of the panel, the same way.
SAMPLE_DAYS = 64
SAMPLE_FACTOR = 4
STRIDE = 8
#: The most memory the values shared by a formula's candidates are kept in (us46 never reaches it).
KEPT_BYTES = 256 << 20

_WITH_TERMS = frozenset(("add", "sub", "mul", "div", "min", "max", "and", "or", "where"))
#: Operators a check counts by themselves (`fb_no_compare`): taking out any of their operands takes them out.
_COUNTED = frozenset(("and", "or", "where"))
_ARITHMETIC = frozenset(("add", "sub", "mul", "div", "neg"))


def countable(node: Node) -> bool:
    """Whether a brief's check could count something in `node`: a field, or an operator other than arithmetic
    (`ts_mean(1, 63)` holds a window; `(1 - 0.5) * 2` holds nothing a check reads)."""
    return any(isinstance(n, Field) or (isinstance(n, Op) and n.name not in _ARITHMETIC) for n in walk(node))


def has_terms(node: Node) -> bool:
    """Whether `node` holds an operator with a term that could be taken out (else it is its own live tree)."""
    return any(isinstance(n, Op) and n.name in _WITH_TERMS and next(drop_options(n), None) is not None
               for n in walk(node))


# --------------------------------------------------------------------------- taking a term out
def _negate(node: Node) -> Node:
    if isinstance(node, Num):
        return Num(-node.value)
    if isinstance(node, Op) and node.name == "neg":
        return node.args[0]
    return Op("neg", (node,))


def drop_options(node: Op) -> Iterator[Node]:
    """What `node` becomes with one of its terms taken out, in the order they are tried (module docstring)."""
    name, args = node.name, node.args
    counted = name in _COUNTED
    if name in ("add", "mul", "min", "max", "and", "or", "sub", "div"):
        if counted or countable(args[1]):
            yield args[0]
        if name not in ("sub", "div") and (counted or countable(args[0])):
            yield args[1]
        if name == "sub" and countable(args[0]):
            yield _negate(args[1])
    elif name == "where":  # the condition goes with the branch left out
        yield args[1]
        yield args[2]
    if name in ("add", "sub"):
        yield from _cancelled(node, "add", "sub", Num(0.0))
    elif name in ("mul", "div"):
        yield from _cancelled(node, "mul", "div", Num(1.0))


def _signed(node: Node, plus: str, minus: str, sign: bool = True) -> list[tuple[bool, Node]]:
    """The terms of a chain of `plus` and `minus` (or its factors), each with its sign (True: + or *)."""
    if isinstance(node, Op) and node.name == plus:
        return _signed(node.args[0], plus, minus, sign) + _signed(node.args[1], plus, minus, sign)
    if isinstance(node, Op) and node.name == minus:
        return _signed(node.args[0], plus, minus, sign) + _signed(node.args[1], plus, minus, not sign)
    if plus == "add" and isinstance(node, Op) and node.name == "neg":
        return _signed(node.args[0], plus, minus, not sign)
    return [(sign, node)]


def _cancelled(node: Op, plus: str, minus: str, unit: Num) -> Iterator[Node]:
    """The chain `node` heads without its first pair of equal countable terms of opposite signs (`t` added and
    subtracted, or multiplied and divided), rebuilt left to right from the terms left."""
    terms = _signed(node, plus, minus)
    for i, (sign, term) in enumerate(terms):
        if not countable(term):
            continue
        j = next((j for j in range(i + 1, len(terms)) if terms[j][0] != sign and terms[j][1] == term), None)
        if j is not None:
            yield _chain([t for k, t in enumerate(terms) if k not in (i, j)], plus, minus, unit)
            return


def _chain(terms: list[tuple[bool, Node]], plus: str, minus: str, unit: Num) -> Node:
    if not terms:
        return unit
    sign, out = terms[0]
    if not sign:
        out = _negate(out) if plus == "add" else Op(minus, (unit, out))
    for sign, term in terms[1:]:
        out = Op(plus if sign else minus, (out, term))
    return out


def _at(root: Node, path: tuple[int, ...]) -> Node:
    for i in path:
        root = root.args[i]
    return root


def _replace(root: Node, path: tuple[int, ...], new: Node) -> Node:
    """`root` with the node at `path` (child indexes from the root) replaced by `new`."""
    if not path:
        return new
    args = list(root.args)
    args[path[0]] = _replace(args[path[0]], path[1:], new)
    return Op(root.name, tuple(args), root.window, root.const)


# --------------------------------------------------------------------------- is a term dead?
def negligible(with_term: np.ndarray, without: np.ndarray) -> bool:
    """Whether taking a term out moves a node's values by at most `NEGLIGIBLE` of each day's largest |value|,
    with the same missing cells, from the first day both have a value (module docstring)."""
    a, b = np.broadcast_arrays(np.atleast_2d(with_term), np.atleast_2d(without))
    fa, fb = np.isfinite(a), np.isfinite(b)
    has_a, has_b = fa.any(axis=1), fb.any(axis=1)
    if not (has_a.any() and has_b.any()):
        return not (has_a.any() or has_b.any())
    start = max(_first(has_a), _first(has_b))
    a, b, fa = a[start:], b[start:], fa[start:]
    if not np.array_equal(fa, fb[start:]):
        return False
    scale = np.where(fa, np.abs(a), 0.0).max(axis=1, keepdims=True)
    # finite values near the float limit can differ by more than it: the difference is then inf, which is
    # correctly not negligible, so the overflow is no error here
    with np.errstate(invalid="ignore", over="ignore"):
        return bool((np.where(fa, np.abs(a - b), 0.0) <= NEGLIGIBLE * scale).all())


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask)) if mask.any() else len(mask)


def _ranked(node: Node) -> bool:
    return isinstance(node, Op) and node.name == "rank"  # the trade rule skips ranking a rank (book.py)


class _Kept(dict):
    """An evaluation memo that stops keeping arrays past `KEPT_BYTES` (what it does not keep is computed again)."""

    nbytes = 0

    def __setitem__(self, node, value):
        size = getattr(value, "nbytes", 0)
        if self.nbytes + size <= KEPT_BYTES:
            self.nbytes += size
            super().__setitem__(node, value)


class _Values:
    """A formula's values and positions on one panel (the whole one, or its last days), computed as needed."""

    def __init__(self, node: Node, panel, min_valid: int, n: int):
        self.node, self.panel, self.min_valid, self.n = node, panel, min_valid, n  # n: decision days
        self.memo = _Kept()
        self._base: dict[tuple[int, int], np.ndarray] = {}

    def of(self, node: Node) -> np.ndarray:
        return evaluate(node, self.panel, self.memo)

    def positions(self, skip: int = 0, stride: int = 1) -> np.ndarray:
        """The formula's positions on every `stride`-th decision day from `skip` on."""
        key = (skip, stride)
        if key not in self._base:
            self._base[key] = weights_from_signal(self.of(self.node)[skip:self.n:stride], self.min_valid,
                                                  _ranked(self.node))
        return self._base[key]

    def moved(self, candidate: Node, stride: int = 1) -> float:
        """The mean daily distance of `candidate`'s positions from the formula's, on every `stride`-th day from
        the first both trade (module docstring)."""
        signal = self.of(candidate)
        base = self.positions(0, stride)
        trades = np.abs(base).sum(axis=1) > 0
        can = (~np.isnan(signal[:self.n:stride])).sum(axis=1) >= self.min_valid  # a day with fewer values is flat
        start = max(_first(trades), _first(can))
        if start >= len(base):  # never both trading: the same book only if neither ever trades
            return 0.0 if not trades.any() and not can.any() else 1.0
        got = weights_from_signal(signal[:self.n:stride][start:], self.min_valid, _ranked(candidate))
        return float(np.abs(got - base[start:]).sum(axis=1).mean())


class _Judge:
    """Decides whether a candidate (the formula with one term taken out) is dead: on the last days first."""

    def __init__(self, node: Node, panel, min_valid: int):
        n = panel.n_days - 2  # decision days with a realised return (book.py)
        first = n - SAMPLE_DAYS - lookback(node) - 2  # the last days, with the formula's history before them
        self.whole = _Values(node, panel, min_valid, n)
        self.last = _Values(node, panel.window(start=panel.dates[first]), min_valid, n - first) if first > 0 else None

    def dead(self, here: Node, option: Node, candidate: Node) -> bool:
        """`here`: the operator a term is taken out of, `option`: what it becomes, `candidate`: the formula then.
        A candidate that fails to evaluate keeps its term (the formula itself evaluated)."""
        try:
            return self._dead(here, option, candidate)
        except MODEL_FAULTS:
            return False

    def _dead(self, here: Node, option: Node, candidate: Node) -> bool:
        small = True  # a term negligible on the whole panel is negligible on its last days: not there, not at all
        if self.last is not None:
            small = negligible(self.last.of(here), self.last.of(option))
            if not small and self._moved(self.last, candidate, self.last.n - SAMPLE_DAYS):
                return False
        if small and negligible(self.whole.of(here), self.whole.of(option)):
            return True
        if self.whole.moved(candidate, STRIDE) > SAMPLE_FACTOR * DEAD_DISTANCE:
            return False
        return self.whole.moved(candidate) <= DEAD_DISTANCE

    @staticmethod
    def _moved(values: _Values, candidate: Node, skip: int) -> bool:
        """Whether `candidate` moves the book on the decision days of `values`' panel from `skip` on."""
        got = weights_from_signal(values.of(candidate)[skip:values.n], values.min_valid, _ranked(candidate))
        return float(np.abs(got - values.positions(skip)).sum(axis=1).mean()) > SAMPLE_FACTOR * DEAD_DISTANCE


def live_tree(node: Node, panel, min_valid: int) -> Node:
    """`node` without its dead terms (module docstring), on `panel`; `min_valid`: the fewest valid stocks a day
    the book trades with (`VerifierConfig.min_valid_stocks`)."""
    if not has_terms(node):
        return node
    judge = None  # built at the first term tried
    root, todo = node, [()]
    while todo:  # parents first: a stack of paths (child indexes from the root)
        path = todo.pop()
        here = _at(root, path)
        if not isinstance(here, Op):
            continue
        for option in drop_options(here):
            candidate = _replace(root, path, option)
            judge = judge or _Judge(node, panel, min_valid)
            if judge.dead(here, option, candidate):
                root = candidate
                todo.append(path)  # what is left may hold dead terms too
                break
        else:
            todo.extend(path + (i,) for i in reversed(range(len(here.args))))
    return root
