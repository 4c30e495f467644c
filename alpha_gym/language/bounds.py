"""Rounding-error bounds: how far a formula's float64 value can be from its value in exact arithmetic.

Evaluated with `evaluate(node, panel, bound=True)`, every node carries beside its values an absolute
bound `e >= 0` per cell: the exact-arithmetic value of the formula (on the same data, with the same
operator rules) lies in `[value - e, value + e]`. Each operator of the registry declares, next to its
kernel (`OpSpec.bound` in `operators.py`), how it propagates its arguments' bounds and adds its own
rounding; the functions are here. The verifier reads the root's bound (`noise_days`): a day whose
cross-section fits inside its bounds (the intervals `[v - e, v + e]` of its stocks share a point) is
consistent with one constant, so what the book would trade that day is rounding noise however the
formula was written (`close * 1.1 / 1.1 / close`, its `log`, `rank`, `sign`, `* 1e16`, ...).

Conventions. `u = 2**-53` is the unit roundoff; one correctly rounded operation is off by at most
`u |result|`, and each rule charges `ROUND = 4u` (two ulps) per operation it performs, libm's `log`
and `pow` (within 1 ulp) included. A bound is a float64 array, a Python float for a whole panel (0.0
when exact) or a `Relative` k meaning `k |value|` (what operations on exact inputs leave: one number, no
array, for the rules marked `reads_relative`; the evaluator makes it an array for the others), never NaN
where the value is a number: a bound that cannot be computed is `inf` ("anything"). Fields are exact except `returns`, one division and one subtraction. The rules are first
order where that is tight (`x * y`: `|x| e_y + |y| e_x + e_x e_y`), and use the operator's own kernel on
the ends of the input interval where the operator is monotone (log, sign, powers), which is exact for
them. Statistics of a window are bounded by the largest input bound in the window plus their
algorithm's rounding (`d` additions; centred moments). Order statistics (`rank`, `ts_rank`,
`ts_argmax`/`ts_argmin`) and comparisons are discrete: where their input is indistinguishable from a
constant within its bounds (a row for `rank`, a window for `ts_rank`, `|x - y| <= e_x + e_y` for a
comparison) their bound is their whole range, elsewhere 0: a near-tie inside an otherwise distinct
row is not tracked (docs/operators.md, rule 5, "Limits").

`tests/test_bounds.py` checks every rule against exact rational arithmetic on random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import math

import numpy as np

from alpha_gym.language import ops

#: The unit roundoff of float64.
U = 2.0 ** -53
#: A book is invalid when at least this share of its traded days are `noise_days` (docs/operators.md, rule 5).
NOISE_SHARE = 0.5
#: A traded day counts toward `NOISE_SHARE` too where rounding decides orders inside it (`rounding_runs`) whose ties
#: move more than this share of the book's gross weight (the weights' L1 change).
ORDER_SHARE = 0.1
#: Rule 1's tie tolerance relative to a value (`ops.TIE_ULPS` ulps, 2**-30): rows and windows whose bounds stay
#: below it are tied by the language's own rules in exact arithmetic as in floats, so the rules decide them.
TIE_REL = ops.TIE_ULPS * 2.0 ** -52
#: What one operation adds, relative to its result: two ulps (correctly rounded arithmetic is half an
#: ulp, numpy's and libm's log/pow/sqrt within one).
ROUND = 4 * U


@dataclass(frozen=True)
class Relative:
    """The bound `k |value|` for the whole panel: what operations on exact inputs leave (their rounding), kept
    as one number until a rule needs the array (`absolute`). Rules marked `relative` read it; the evaluator
    turns it into an array for the others."""

    k: float


def absolute(e, value):
    """A bound as an array or a float: `k |value|` for a `Relative` one."""
    if not isinstance(e, Relative):
        return e
    if isinstance(value, np.ndarray):
        out = np.abs(value)
        out *= e.k  # k |value| cell by cell, in the array abs made
        return out
    return e.k * _abs(value)


def reads_relative(rule):
    """Mark a rule that accepts `Relative` bounds (and may return one)."""
    rule.relative = True
    return rule


def _relative_or_exact(errs) -> bool:
    return all(isinstance(e, Relative) or _exact(e) for e in errs)


def _k(e) -> float:
    return e.k if isinstance(e, Relative) else 0.0


def _abs(x):
    return np.abs(x) if isinstance(x, np.ndarray) else abs(float(x))


def _exact(e) -> bool:
    """A bound known to be 0 for the whole panel (the value is exact)."""
    return not isinstance(e, np.ndarray) and e == 0.0


def _clean(e, like=None):
    """`e` as a bound: NaN (inf - inf, 0 * inf of an unbounded input) becomes inf; scalars stay scalars."""
    if isinstance(e, np.ndarray):
        np.copyto(e, np.inf, where=np.isnan(e))
        return e
    e = float(e)
    return np.inf if e != e else e


def _array(e, shape) -> np.ndarray:
    return e if isinstance(e, np.ndarray) else np.full(shape, float(e))


#: cells per block of rows in the row-wise tests below: their temporaries stay in cache
_BLOCK_CELLS = 1 << 16


def _row_blocks(shape) -> list[slice]:
    """Cache-sized blocks of rows of a (T, N) panel: row-wise tests give the same answer block by block."""
    T, N = shape
    rows = max(1, _BLOCK_CELLS // max(N, 1))
    return [slice(r0, r0 + rows) for r0 in range(0, T, rows)]


def _rows_of(e, s: slice):
    """Rows `s` of a bound (an array, or a number for the whole panel)."""
    return e[s] if isinstance(e, np.ndarray) and e.ndim == 2 else e


# ----------------------------------------------------------------------------------------- leaves
def constant(value: float) -> float:
    """A constant of the formula: exact when its shortest decimal spelling is its binary value (`0.5`,
    `3`, `1e3`), else within half an ulp of the decimal the model wrote (`1.1`, `0.1`)."""
    if value != value or value in (np.inf, -np.inf):
        return 0.0
    return 0.0 if Fraction(repr(value)) == Fraction(value) else U * abs(value)


def field(name: str, values: np.ndarray, loaded: bool):
    """A field of the panel: exact as loaded; derived ones carry their rounding: `returns` = close /
    delay(close) - 1 (two operations), `vwap` = (high + low + close) / 3 where the data has none (three)."""
    if loaded:
        return 0.0
    if name == "returns":
        return _clean(ROUND * (np.abs(values) + 1.0))
    return Relative(ROUND * 2)


@reads_relative
def adv(args, errs, out, node):
    """adv{d}: the mean of vwap * volume over d sessions (one product, d additions, one division)."""
    return Relative(ROUND * (node.window + 2))


# ------------------------------------------------------------------------------------ element-wise
@reads_relative
def add(args, errs, out, node):
    """`x + y`, `x - y`: the bounds add, plus the rounding of the result (0 where the operands cancelled)."""
    if _exact(errs[0]) and _exact(errs[1]):
        return Relative(ROUND)
    ex, ey = (absolute(e, a) for e, a in zip(errs, args))
    e = ROUND * _abs(out)
    e += ex
    e += ey
    return e


sub = add


@reads_relative
def mul(args, errs, out, node):
    """`x * y`: `|x| e_y + |y| e_x + e_x e_y`, plus the rounding of the product (relative bounds: `kx + ky + kx ky`)."""
    if _relative_or_exact(errs):
        kx, ky = _k(errs[0]), _k(errs[1])
        return Relative(kx + ky + kx * ky + ROUND)
    x, y = args
    ex, ey = (absolute(e, a) for e, a in zip(errs, args))
    e = ROUND * _abs(out)
    if not _exact(ex):
        e = e + _abs(y) * ex
    if not _exact(ey):
        e = e + _abs(x) * ey
    if not (_exact(ex) or _exact(ey)):
        e = e + ex * ey
    return _clean(e)  # 0 * inf (an unbounded factor times an exact 0) is NaN: anything


@reads_relative
def div(args, errs, out, node):
    """`x / y`: `(e_x + |x / y| e_y) / (|y| - e_y)`, inf where `y` may be 0, plus the rounding (relative bounds:
    `(kx + ky) / (1 - ky)`)."""
    if _relative_or_exact(errs) and _k(errs[1]) < 0.5:
        kx, ky = _k(errs[0]), _k(errs[1])
        return Relative((kx + ky) / (1 - ky) + ROUND)
    x, y = args
    ex, ey = (absolute(e, a) for e, a in zip(errs, args))
    e = ROUND * _abs(out)
    if _exact(ex) and _exact(ey):
        return e
    with np.errstate(all="ignore"):
        room = np.asarray(_abs(y) - ey, dtype=np.float64)
        part = (ex + _abs(out) * ey) / np.where(room > 0, room, np.nan)
    return _clean(e + part)


@reads_relative
def same(args, errs, out, node):
    """Exact operations on one argument (`-x`, `abs(x)`): the argument's bound."""
    return errs[0]


def extremum(args, errs, out, node):
    """`min(x, y)`, `max(x, y)`: exact; off by at most the larger bound."""
    ex, ey = errs
    if _exact(ex) and _exact(ey):
        return 0.0
    return np.maximum(ex, ey)


def _ends(kernel, args, errs, out, zero: bool):
    """A function monotone in each argument on each side of 0: the largest distance from `out` of its value
    at the ends of each argument's interval, widened by the rounding of `x +- e` (the others at their value)
    and, with `zero`, at 0 where the first argument's interval holds it; plus the rounding of both values.
    NaN at an end (log of x <= 0) means anything: inf."""
    dev = 0.0 * _abs(out)
    with np.errstate(all="ignore"):
        for i, e in enumerate(errs):
            if _exact(e):
                continue
            wide = e + ROUND * _abs(args[i])
            for sign in (-1.0, 1.0):
                moved = list(args)
                moved[i] = args[i] + sign * wide
                dev = np.maximum(dev, np.abs(kernel(*moved) - out))
            if zero and i == 0:
                lo, hi = args[0] - wide, args[0] + wide
                moved = list(args)
                moved[0] = 0.0 * args[0]
                at_zero = np.abs(kernel(*moved) - out)
                dev = np.where((lo < 0) & (hi > 0), np.maximum(dev, at_zero), dev)
        dev = dev * (1 + ROUND) + 2 * ROUND * _abs(out)
    if isinstance(dev, np.ndarray):
        np.copyto(dev, np.inf, where=np.isnan(dev) & ~np.isnan(out))
    return _clean(dev)


def monotone(kernel, zero: bool = False, exact: bool = False):
    """The bound rule of a monotone element-wise operator (`log`, `sign`; powers with `zero=True`: monotone on
    each side of 0, so 0 is the third point to try); `exact`: the operator itself does not round (`sign`)."""
    def rule(args, errs, out, node):
        if all(_exact(e) for e in errs):
            return 0.0 if exact else ROUND * _abs(out)
        if isinstance(errs[0], Relative) and all(_exact(e) for e in errs[1:]) and errs[0].k < 0.5:
            if exact:  # k |x| < |x|: the sign is known (and x = 0 is exact)
                return 0.0
            if zero and not isinstance(args[1], np.ndarray):  # x^y: relative bounds scale by |y|
                grow = math.expm1(abs(float(args[1])) * -math.log1p(-errs[0].k))
                return Relative(grow * (1 + ROUND) + 2 * ROUND)
        errs = [absolute(e, a) for e, a in zip(errs, args)]
        return _ends(kernel, args, errs, out, zero)
    rule.relative = True
    rule.__doc__ = f"`{kernel.__name__}`: its value at the ends of the input interval{' and at 0' if zero else ''}."
    return rule


def _undecided(x, y, ex, ey):
    """Cells where `x` and `y` may compare either way in exact arithmetic: `|x - y| <= e_x + e_y`, with bounds
    at least rule 2's `CANCEL_RTOL` of the operands (below it the rule reads both as equal, exact or not)."""
    room = ex + ey
    with np.errstate(invalid="ignore"):
        size = np.maximum(np.abs(x), np.abs(y)) * ops.CANCEL_RTOL
        return (np.abs(np.subtract(x, y)) <= room) & (room > 0) & (room >= size)


def compare(args, errs, out, node):
    """`<`, `>`, `<=`, `>=`, `==`, `!=` (0 or 1): exact where `|x - y| > e_x + e_y`, else anything in [0, 1]."""
    (x, y), (ex, ey) = args, errs
    if _exact(ex) and _exact(ey):
        return 0.0
    return np.where(_undecided(x, y, ex, ey), 1.0, 0.0)


def logic(args, errs, out, node):
    """`||`, `&&` (0 or 1): exact where each operand is known to be 0 or known not to be, else [0, 1]."""
    if all(_exact(e) for e in errs):
        return 0.0
    unknown = np.zeros(np.shape(out), dtype=bool)
    for x, e in zip(args, errs):
        if not _exact(e):
            unknown |= _undecided(x, 0.0, e, 0.0)
    return np.where(unknown, 1.0, 0.0)


def where(args, errs, out, node):
    """`c ? a : b`: the chosen branch's bound; where `c` may be 0 or not, either branch: `|a - b|` more."""
    (c, a, b), (ec, ea, eb) = args, errs
    e = np.where(np.asarray(c) != 0, ea, eb) if not (_exact(ea) and _exact(eb)) else 0.0
    if not _exact(ec):
        with np.errstate(invalid="ignore"):
            either = np.maximum(ea, eb) + np.abs(np.subtract(a, b))
        e = np.where(_undecided(c, 0.0, ec, 0.0), either, e)
    return _clean(e)


# ---------------------------------------------------------------------------------- cross-section
def _beyond_ties(x, ex) -> bool:
    """Whether any bound reaches rule 1's tie tolerance of its value: if none does, rules 1 and 4 decide every
    near-tie, in exact arithmetic as in floats, and the order operators are exact (a cheap test first)."""
    with np.errstate(invalid="ignore"):
        if not isinstance(ex, np.ndarray):
            return bool(ex > (TIE_REL / 2) * np.nanmin(np.abs(x), initial=np.inf))
        if ex.shape != np.shape(x) or ex.ndim != 2:
            return bool(np.any(ex > (TIE_REL / 2) * np.abs(x)))
        for s in _row_blocks(ex.shape):  # block by block, stopping at the first
            size = np.abs(x[s])
            size *= TIE_REL / 2
            if np.any(ex[s] > size):
                return True
        return False


def constant_rows(values: np.ndarray, e) -> np.ndarray:
    """(T,) rows whose valid cells fit one constant within their bounds: the intervals `[v - e, v + e]`
    share a point (`max(v - e) <= min(v + e)`; a row without a valid cell is one, and has nothing to trade)."""
    out = np.empty(values.shape[0], dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):   # v +- e past the largest float is +-inf: still a bound
        for s in _row_blocks(values.shape):
            v, es = values[s], _rows_of(e, s)
            lo = np.fmax.reduce(v - es, axis=1, initial=-np.inf)  # fmax skips NaN cells
            hi = np.fmin.reduce(v + es, axis=1, initial=np.inf)
            np.less_equal(lo, hi, out=out[s])
    return out


def rounding_runs(x: np.ndarray, ex, ranks: np.ndarray | None = None):
    """`ranks` with every order that rounding decides inside a day tied, or None where it decides none (the common case).

    Sorted along each row, two neighbouring cells whose intervals `[v - e, v + e]` overlap (their gap is at most the
    sum of their bounds) are in an order that exact arithmetic may reverse; chained, such neighbours form a *run*.
    Where `ranks` (the row's float ranks, rule 1's ties included) already tie a run there is nothing to decide; where
    they differ inside a run, rounding decided them, and each such run's cells get the run's mean rank: the order a
    book may hold is the one exact arithmetic would keep, nothing inside the run (the language's `rank` under
    `evaluate(bound=True)` and the verifier's book both apply it). `ranks`: `rank(x)` where the caller has it (None:
    ranked here, only where a row needs it).
    Only rows holding a cell whose bound reaches rule 1's tie tolerance are sorted: between two narrower cells an
    overlap is within `TIE_ULPS`, and rule 1 has tied them already. Limits: a run is chained between sorted
    neighbours, so a cell with a wide bound reaching past a neighbour that is not itself linked onward joins only
    the neighbours it overlaps.
    """
    if _exact(ex) or isinstance(ex, Relative) and ex.k <= TIE_REL / 2:
        return None  # every overlap is within rule 1's tolerance: rule 1 has tied it
    ex = _array(absolute(ex, x), x.shape)
    valid = ~np.isnan(x)
    with np.errstate(invalid="ignore"):
        wide = valid & ~(ex <= (TIE_REL / 2) * np.abs(x))  # a NaN bound is "anything": wide
    rows = np.flatnonzero(wide.any(axis=1))
    if rows.size == 0:
        return None
    from alpha_gym.language import compiled
    picked = [np.ascontiguousarray(a[rows], dtype=np.float64) for a in (x, ex)]
    rs = ops.rank(picked[0]) if ranks is None else np.ascontiguousarray(ranks[rows])  # a row's ranks are its own
    runs = np.empty_like(rs)
    if compiled.ready(compiled.rounding_runs_rows):
        changed = compiled.rounding_runs_rows(*picked, rs, runs)
    else:   # not compiled yet (`compiled.ready`): the same rule in numpy, the same bits
        changed = _rounding_runs_rows(*picked, rs, runs)
    if changed == 0:
        return None
    tied = (ops.rank(x) if ranks is None else ranks).copy()
    tied[rows] = runs
    return tied


def _rounding_runs_rows(xs, es, rs, out) -> int:
    """`compiled.rounding_runs_rows` in numpy, block by block (what a process runs until the compiled one is ready)."""
    out[...] = rs
    changed = 0
    ok_all = ~np.isnan(xs) & ~np.isnan(rs)
    for s in _row_blocks(xs.shape):
        x, e_, r_, ok = xs[s], es[s], rs[s], ok_all[s]
        order = np.argsort(np.where(ok, x, np.inf), axis=1, kind="stable")  # valid cells first, in value order
        v, e, r, k = (np.take_along_axis(a, order, axis=1) for a in (x, e_, r_, ok))
        with np.errstate(invalid="ignore", over="ignore"):
            link = (v[:, 1:] - v[:, :-1]) <= (e[:, 1:] + e[:, :-1])
        link |= np.isnan(e[:, 1:]) | np.isnan(e[:, :-1])
        link &= k[:, 1:] & k[:, :-1]
        decided_by_rounding = link & (r[:, 1:] != r[:, :-1])
        if not decided_by_rounding.any():
            continue
        changed += int(np.count_nonzero(decided_by_rounding.any(axis=1)))
        n_rows, n = v.shape
        starts = np.ones((n_rows, n), dtype=bool)
        starts[:, 1:] = ~link
        run = np.cumsum(starts.reshape(-1)).reshape(n_rows, n) - 1  # a global run id per sorted cell
        ids = run.reshape(-1)
        size = np.bincount(ids, weights=k.reshape(-1).astype(float))
        mean = np.bincount(ids, weights=np.where(k, r, 0.0).reshape(-1)) / np.maximum(size, 1.0)
        back = np.empty_like(order)
        np.put_along_axis(back, order, np.arange(n)[None, :].repeat(n_rows, axis=0), axis=1)
        differs = np.zeros(size.shape, dtype=bool)  # runs whose ranks differ: the others keep theirs, bit for bit
        differs[run[:, 1:][decided_by_rounding]] = True
        out[s] = np.take_along_axis(np.where(k & differs[run], mean[run], r), back, axis=1)
    return changed


@reads_relative
def rank(args, errs, out, node):
    """`rank`: on a row indistinguishable from a constant, anything in [0, 1] (bound 1); elsewhere the
    rounding of its one division. A row whose bounds are below rule 1's tie tolerance is tied in exact
    arithmetic as in floats: rule 1 decides it."""
    (x,), (ex,) = args, errs
    if _exact(ex) or isinstance(ex, Relative) and ex.k <= TIE_REL / 2:
        return Relative(ROUND)  # one division (0 and 1 exact: a comparison of exact ranks stays decided)
    ex = absolute(ex, x)
    e = np.abs(out)
    e *= ROUND
    if not _beyond_ties(x, ex):
        return e
    ex = _array(ex, x.shape)
    wide = np.empty(x.shape[0], dtype=bool)
    with np.errstate(invalid="ignore"):
        for s in _row_blocks(x.shape):
            wide[s] = np.nanmax(np.where(np.isnan(x[s]), 0.0, ex[s]), axis=1, initial=0.0) > \
                TIE_REL * np.nanmax(np.abs(x[s]), axis=1, initial=0.0)
    rows = np.flatnonzero(wide)  # few: the fit test only where a row's bounds reach its tolerance
    e[rows[constant_rows(x[rows], ex[rows])]] = 1.0
    return e


def scale(args, errs, out, node):
    """`scale(x, a)` = `a x / S`, `S = sum |x|`: `(|a| e_x + |out| sum e_x) / (S - sum e_x)`, inf where the row's
    bounds reach its size, plus the rounding of the N-term sum."""
    (x,), (ex,) = args, errs
    a = abs(float(node.const if node.const is not None else 1.0))
    valid = ~np.isnan(x)
    n = valid.sum(axis=1, keepdims=True)
    e = ROUND * (n + 2) * np.abs(out)
    if _exact(ex):
        return e
    ex = _array(ex, x.shape)
    with np.errstate(all="ignore"):
        total = np.where(valid, np.abs(x), 0.0).sum(axis=1, keepdims=True)
        slack = np.where(valid, ex, 0.0).sum(axis=1, keepdims=True)
        room = total - slack
        part = (a * ex + np.abs(out) * slack) / np.where(room > 0, room, np.nan)
    return _clean(e + part)


def ind_neutralize(args, errs, out, node):
    """`x` minus its sector's mean: its bound plus the row's largest (a bound of any mean), plus the mean's rounding."""
    (x,), (ex,) = args, errs
    with np.errstate(invalid="ignore"):
        size = np.nanmax(np.abs(x), axis=1, keepdims=True, initial=0.0)
    e = ROUND * (x.shape[1] + 2) * size
    if not _exact(ex):
        ex = _array(ex, x.shape)
        e = e + ex + np.nanmax(np.where(np.isnan(x), 0.0, ex), axis=1, keepdims=True, initial=0.0)
    return _clean(e)


# ------------------------------------------------------------------------------------ time series
def _window_max(e, d: int):
    """The largest bound in each window (a bound for the whole panel stays one). Rolling, not the stock's
    largest over the panel: one unbounded cell (a NaN correlation's) would spread to every day."""
    return ops.ts_max(e, d) if isinstance(e, np.ndarray) else e


def _spread(x, d: int) -> np.ndarray:
    """Each window's range `ts_max - ts_min` (one pass)."""
    return ops.window_range(x, d)



@reads_relative
def delay(args, errs, out, node):
    """`delay(x, d)`: the bound d sessions ago (a relative bound stays one)."""
    if isinstance(errs[0], Relative):
        return errs[0]
    return ops.delay(errs[0], node.window) if isinstance(errs[0], np.ndarray) else errs[0]


@reads_relative
def ts_delta(args, errs, out, node):
    """`ts_delta(x, d)`: today's and d sessions ago's bounds, plus the subtraction's rounding."""
    if _exact(errs[0]):
        return Relative(ROUND)
    (x,), (ex,) = args, [absolute(errs[0], args[0])]
    e = ROUND * np.abs(out)
    if not _exact(ex):
        e += ex
        e += delay(args, [ex], out, node)
    return e


def _nonnegative(x) -> bool:
    with np.errstate(invalid="ignore"):
        return not bool(np.any(x < 0))


def _window_of(statistic):
    @reads_relative
    def rule(args, errs, out, node):
        (x,), (ex,) = args, errs
        d = node.window
        if _relative_or_exact(errs) and _nonnegative(x):  # prices, volumes: the statistic of k |x| is k |out|
            return Relative(_k(ex) + ROUND * (d + 1))
        ex = absolute(ex, x)
        return statistic(ex + ROUND * (d + 1) * np.abs(x), d)
    return rule


#: `ts_sum`, `ts_mean`: the same window statistic of `e_x + ROUND (d + 1) |x|` (d additions, then / d).
ts_sum = _window_of(ops.ts_sum)
ts_mean = _window_of(ops.ts_mean)


@reads_relative
def window_mean(args, errs, out, node):
    """Means with positive weights summing to 1 (`ts_decay_linear`, `ts_ema`): at most the window's largest
    `e_x`, plus the rounding of d weighted additions (ts_ema's weights reach e^2 before they are normalised)."""
    (x,), (ex,) = args, errs
    d = node.window
    if _relative_or_exact(errs) and _nonnegative(x):  # a positive-weight mean of k |x| is k |out|
        return Relative(_k(ex) + ROUND * (4 * d + 4))
    ex = absolute(ex, x)
    return _window_max(ex + ROUND * (4 * d + 4) * np.abs(x), d)


def window_extremum(args, errs, out, node):
    """`ts_max`, `ts_min`: exact; off by at most the window's largest bound."""
    return _window_max(errs[0], node.window)


def ts_product(args, errs, out, node):
    """`ts_product`: relative bounds add up: `|out| (exp(sum -log(1 - e_x/|x|)) - 1)`, inf where `e_x >= |x|`,
    plus d roundings."""
    (x,), (ex,) = args, errs
    d = node.window
    e = ROUND * (d + 1) * np.abs(out)
    if _exact(ex):
        return e
    with np.errstate(all="ignore"):
        rel = np.minimum(ex / np.abs(x), 1.0)
        rel = np.where(ex == 0, 0.0, rel)
        grow = np.expm1(ops.ts_sum(-np.log1p(-rel), d))
        part = np.abs(out) * grow
        part = np.where(np.isinf(grow), np.inf, part)
    return _clean(e + part)


def ts_std(args, errs, out, node):
    """`ts_std`: a standard deviation moves by at most the largest input change (`std(x + v) - std(x) <= max |v|`),
    plus the algorithm's rounding: on values centred on a window member the variance is off by about d ulps of
    `mean(c^2) <= range^2 <= 4 (d - 1) var` (Samuelson), so the std by `eps_var / std`: `16 d^2 ulps` of it."""
    (x,), (ex,) = args, errs
    d = node.window
    e = ROUND * 16 * d * d * out
    if not _exact(ex):
        e += _window_max(ex, d)
    return e


def _relative_change(x, ex, d: int):
    """Largest input change over the window's standard deviation, which is at least range / sqrt(2d): how far
    a scale-free statistic (correlation, skewness, kurtosis) can move, up to a factor; inf on a window that
    may be constant."""
    r = _spread(x, d)
    with np.errstate(all="ignore"):
        return (_window_max(ex, d) * np.sqrt(2.0 * d)) / np.where(r > 0, r, np.nan)


def ts_cov(args, errs, out, node):
    """`ts_cov`: bilinear, so `cov(x + v, y + w) - cov(x, y)` is at most `V sd(y) + (sd(x) + V) W` with
    `V`, `W` the windows' largest bounds and `sd <= range / 2`, plus the rounding of centred products."""
    (x, y), (ex, ey) = args, errs
    d = node.window
    rx, ry = _spread(x, d), _spread(y, d)
    vx, vy = _window_max(ex, d), _window_max(ey, d)
    return _clean(vx * ry / 2 + (rx / 2 + vx) * vy + ROUND * 4 * (d + 2) * rx * ry)


def _scale_free(limit: float):
    def rule(args, errs, out, node):
        d = node.window
        change = sum(_relative_change(x, e, d) for x, e in zip(args, errs) if not _exact(e))
        e = ROUND * 8 * (d + 2) * d
        if isinstance(change, np.ndarray):
            e = e + np.minimum(4.0 * d * np.nan_to_num(change, nan=np.inf), limit)
        return _clean(e)
    rule.__doc__ = (f"A scale-free window statistic (correlation, skewness, kurtosis; range at most {limit:g}):"
                    " 4d times the relative input change, at most the whole range, plus the rounding.")
    return rule


ts_corr = _scale_free(2.0)


def ts_skew(args, errs, out, node):
    """`ts_skew`: at most sqrt(d) in size; see `_scale_free`."""
    return _scale_free(2.0 * np.sqrt(node.window))(args, errs, out, node)


def ts_kurt(args, errs, out, node):
    """`ts_kurt`: in [-2, d]; see `_scale_free`."""
    return _scale_free(node.window + 2.0)(args, errs, out, node)


def ts_slope(args, errs, out, node):
    """`ts_slope` = cov(x, t) / var(t): moves by at most the largest input change over sd(t) = sqrt((d^2-1)/12),
    plus the rounding of the centred sums (d ulps of the window's range, over sd(t))."""
    (x,), (ex,) = args, errs
    d = node.window
    sd_t = np.sqrt(max(d * d - 1, 1) / 12.0)
    return _clean((_window_max(ex, d) + ROUND * 4 * (d + 2) * _spread(x, d)) / sd_t)


def _order(limit, rounding: float):
    def rule(args, errs, out, node):
        (x,), (ex,) = args, errs
        e = rounding * np.abs(out)
        if _exact(ex) or not _beyond_ties(x, ex):
            return e
        d = node.window
        with np.errstate(invalid="ignore"):
            room = 2.0 * _window_max(ex, d)
            hi, lo = ops.ts_max(x, d), ops.ts_min(x, d)
            spread = hi - lo
            size = np.maximum(np.abs(hi), np.abs(lo))
            flat = (spread <= room) & (room > TIE_REL * size)  # rule 4 decides below its tolerance
        return np.where(flat, float(limit(d)), e)
    return rule


def ts_rank(args, errs, out, node):
    """`ts_rank`: on a window indistinguishable from a constant, anything in [0, 1]; elsewhere exact."""
    return _order(lambda d: 1.0, ROUND)(args, errs, out, node)  # a count over d - 1: one division


def ts_arg(args, errs, out, node):
    """`ts_argmax`, `ts_argmin`: on a window indistinguishable from a constant, anything in [0, d - 1]."""
    return _order(lambda d: d - 1.0, 0.0)(args, errs, out, node)  # exact integers


# --------------------------------------------------------------------------------------- verdict
def noise_days(values: np.ndarray, e) -> np.ndarray:
    """(T,) days whose cross-section is consistent with one constant within its bounds, yet not one value
    bit for bit (a day of exact ties is a flat book, not noise): what the book trades there is rounding."""
    if _exact(e) or isinstance(e, Relative) and e.k < TIE_REL / 4:
        # within 2k of each other a day's values are tied by rule 1: the book is flat there, never noise
        return np.zeros(values.shape[0], dtype=bool)
    out = np.empty(values.shape[0], dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):   # v +- e past the largest float is +-inf: still a bound
        for s in _row_blocks(values.shape):  # block by block: the temporaries stay in cache
            v = values[s]
            es = absolute(_rows_of(e, s), v)
            spread = np.fmax.reduce(v, axis=1, initial=-np.inf) - np.fmin.reduce(v, axis=1, initial=np.inf)
            out[s] = (spread > 0) & constant_rows(v, es)
    return out
