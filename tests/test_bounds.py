"""Every operator's declared rounding-error bound (`OpSpec.bound`, `alpha_gym/language/bounds.py`) holds.

For each operator: random float64 inputs `x` with random bounds `e` stand for exact inputs `x* = x + t e`
(`t` in [-1, 1], the ends included); the operator's kernel computes `out` from `x`, its bound rule `b` from
`(x, e, out)` (`e` an array, `k |x|` as a `bounds.Relative`, or exact), and a reference computes the
operator on `x*` in 200-bit arithmetic (mpmath; the definitions of docs/operators.md, written out here, not
the kernels). The bound must cover: `|out - ref| <= b` wherever `out` is a number. Inputs stay away from the operators' own rules (cancellation below 1e-9, windows constant
up to rounding), which define the language rather than round it; `test_hostile_rounding.py` covers those.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

mpmath = pytest.importorskip("mpmath")
mp = mpmath.mp
mp.prec = 200

from alpha_gym.language import Num, Op, bounds  # noqa: E402
from alpha_gym.language.nodes import Field  # noqa: E402
from alpha_gym.language.operators import KERNELS, OPERATORS, SPECS  # noqa: E402

T, N = 36, 5
SEEDS = range(6)
X = Field("close")


def _m(v) -> "mpmath.mpf":
    return mp.mpf(float(v))


# ------------------------------------------------------------------------- exact references, one cell
def _rank_row(row):
    """Average-tie rank (r - 1) / (n - 1) of a row (None for NaN)."""
    vals = [v for v in row if v is not None]
    out = []
    for v in row:
        if v is None:
            out.append(None)
            continue
        below = sum(1 for w in vals if w < v)
        equal = sum(1 for w in vals if w == v) - 1
        out.append((below + mp.mpf(equal) / 2) / (len(vals) - 1))
    return out


def _moments(w):
    n = len(w)
    mean = sum(w) / n
    c = [v - mean for v in w]
    return [sum(v ** k for v in c) / n for k in (2, 3, 4)]


def _window(name, w, d):
    """The exact statistic of one window `w` (oldest first) of `d` values."""
    n = len(w)
    if name == "ts_sum":
        return sum(w)
    if name == "ts_mean":
        return sum(w) / n
    if name == "ts_max":
        return max(w)
    if name == "ts_min":
        return min(w)
    if name == "ts_product":
        p = mp.mpf(1)
        for v in w:
            p *= v
        return p
    if name == "ts_std":
        return mpmath.sqrt(_moments(w)[0])
    if name == "ts_skew":
        m2, m3, _ = _moments(w)
        return m3 / m2 ** mp.mpf(1.5)
    if name == "ts_kurt":
        m2, _, m4 = _moments(w)
        return m4 / m2 ** 2 - 3
    if name == "ts_decay_linear":
        return sum((i + 1) * v for i, v in enumerate(w)) / (n * (n + 1) / mp.mpf(2))
    if name == "ts_ema":
        q = mp.mpf(d - 1) / (d + 1)
        weights = [q ** (n - 1 - i) for i in range(n)]
        return sum(a * v for a, v in zip(weights, w)) / sum(weights)
    if name == "ts_slope":
        t = list(range(n))
        tm, xm = mp.mpf(sum(t)) / n, sum(w) / n
        return sum((a - tm) * (v - xm) for a, v in zip(t, w)) / sum((a - tm) ** 2 for a in t)
    if name == "ts_rank":
        today = w[-1]
        below = sum(1 for v in w[:-1] if v < today)
        equal = sum(1 for v in w[:-1] if v == today)
        return (below + mp.mpf(equal) / 2) / (n - 1)
    if name in ("ts_argmax", "ts_argmin"):
        best = max(w) if name == "ts_argmax" else min(w)
        return mp.mpf(n - 1 - min(i for i, v in enumerate(w) if v == best))  # ties -> the oldest
    raise KeyError(name)


def _pair_window(name, a, b):
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / n
    if name == "ts_cov":
        return cov
    va = sum((x - ma) ** 2 for x in a) / n
    vb = sum((y - mb) ** 2 for y in b) / n
    return cov / mpmath.sqrt(va * vb) if va * vb > 0 else None  # NaN on a constant window


def reference(name: str, xs: list, d: int | None = None, const: float | None = None):
    """The operator on exact inputs: lists of (T, N) nested lists of mpf (None = NaN)."""
    x = xs[0]
    cells = [(t, i) for t in range(T) for i in range(N)]
    out = [[None] * N for _ in range(T)]
    if name == "rank":
        return [_rank_row(row) for row in x]
    if name == "scale":
        a = mp.mpf(1.0 if const is None else const)
        for t in range(T):
            total = sum(abs(v) for v in x[t] if v is not None)
            out[t] = [None if v is None else v * a / total for v in x[t]]
        return out
    if name == "ind_neutralize":
        for t in range(T):
            for i in range(N):
                group = [x[t][j] for j in range(N) if j % 2 == i % 2]
                out[t][i] = x[t][i] - sum(group) / len(group)
        return out
    spec = OPERATORS[name]
    for t, i in cells:
        if spec.kind == "ts":
            lag = d if name in ("delay", "ts_delta") else d - 1
            if t < lag:
                continue
            if name == "delay":
                out[t][i] = x[t - d][i]
            elif name == "ts_delta":
                out[t][i] = x[t][i] - x[t - d][i]
            elif spec.n_series == 2:
                out[t][i] = _pair_window(name, [x[s][i] for s in range(t - d + 1, t + 1)],
                                         [xs[1][s][i] for s in range(t - d + 1, t + 1)])
            else:
                out[t][i] = _window(name, [x[s][i] for s in range(t - d + 1, t + 1)], d)
        else:
            out[t][i] = _element(name, [a[t][i] for a in xs])
    return out


def _element(name, v):
    x = v[0]
    y = v[1] if len(v) > 1 else None
    truth = {"lt": x < y, "gt": x > y, "le": x <= y, "ge": x >= y, "eq": x == y, "ne": x != y} \
        if name in ("lt", "gt", "le", "ge", "eq", "ne") else None
    if truth is not None:
        return mp.mpf(int(truth[name]))
    table = {
        "add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "div": lambda: x / y,
        "neg": lambda: -x, "abs": lambda: abs(x), "log": lambda: mpmath.log(x) if x > 0 else None,
        "sign": lambda: mp.mpf(mpmath.sign(x)), "min": lambda: min(x, y), "max": lambda: max(x, y),
        "power": lambda: mpmath.power(x, y) if x > 0 or y == int(y) else None,
        "signed_power": lambda: mpmath.sign(x) * mpmath.power(abs(x), y),
        "or": lambda: mp.mpf(int(x != 0 or y != 0)), "and": lambda: mp.mpf(int(x != 0 and y != 0)),
        "where": lambda: v[1] if x != 0 else v[2],
    }
    return table[name]()


# ------------------------------------------------------------------------------------------- inputs
def _inputs(rng, kind: str):
    """A (T, N) float array and a bound of it (an array, or 0.0 for an exact one)."""
    if kind == "price":
        x = np.exp(rng.normal(4, 1, (T, N)) + np.cumsum(rng.normal(0, 0.02, (T, N)), axis=0))
    elif kind == "signed":
        x = rng.normal(0, 1, (T, N))
    elif kind == "unit":  # well inside (0, 1): logs, powers, comparisons against another unit series
        x = rng.uniform(0.1, 0.9, (T, N))
    elif kind == "bool":
        x = (rng.random((T, N)) < 0.5).astype(float)
    else:
        raise KeyError(kind)
    rel = 10.0 ** rng.uniform(-15, -9, (T, N))
    draw = rng.random()
    e = rel * np.abs(x) if draw < 0.6 else bounds.Relative(10.0 ** rng.uniform(-15, -9)) if draw < 0.85 else 0.0
    if kind == "bool":
        e = 0.0
    return x, e


def _exact(rng, x, e):
    """x + t e with t in [-1, 1] (the ends half the time), as mpf."""
    t = rng.uniform(-1, 1, x.shape)
    ends = rng.random(x.shape) < 0.5
    t[ends] = np.sign(t[ends])
    e = np.broadcast_to(np.asarray(bounds.absolute(e, x), dtype=float), x.shape)
    return [[_m(x[r, i]) + _m(t[r, i]) * _m(e[r, i]) for i in range(x.shape[1])] for r in range(x.shape[0])]


#: Which inputs each operator reads: its arguments' kinds, and a window (ts) or constant.
CASES = {
    "add": ("price", "price"), "sub": ("price", "signed"), "mul": ("signed", "price"), "div": ("price", "signed"),
    "neg": ("signed",), "abs": ("signed",), "log": ("price",), "sign": ("signed",),
    "power": ("unit", 1.7), "signed_power": ("signed", 0.5), "min": ("signed", "signed"),
    "max": ("signed", "signed"), "lt": ("unit", "unit"), "gt": ("unit", "unit"), "le": ("unit", "unit"),
    "ge": ("unit", "unit"), "eq": ("bool", "bool"), "ne": ("unit", "unit"), "or": ("bool", "signed"),
    "and": ("signed", "bool"), "where": ("bool", "signed", "price"),
    "rank": ("signed",), "scale": ("signed",), "ind_neutralize": ("price",),
}
WINDOWED = {"delay": "price", "ts_delta": "price", "ts_sum": "signed", "ts_mean": "price", "ts_std": "price",
            "ts_max": "signed", "ts_min": "signed", "ts_rank": "signed", "ts_decay_linear": "signed",
            "ts_ema": "price", "ts_skew": "signed", "ts_kurt": "signed", "ts_slope": "price",
            "ts_argmax": "signed", "ts_argmin": "signed", "ts_product": "unit", "ts_corr": ("price", "signed"),
            "ts_cov": ("signed", "price")}


def test_every_operator_declares_a_bound_and_is_checked_here():
    names = {s.name for s in SPECS}
    assert all(callable(s.bound) for s in SPECS)
    assert names - {"adv"} == set(CASES) | set(WINDOWED)


def _check(name, args, errs, node, exact_args):
    spec = OPERATORS[name]
    kernel = KERNELS[name]
    if name == "ind_neutralize":
        out = kernel(args[0], [i % 2 for i in range(N)])
    elif spec.kind == "ts":
        out = kernel(*args, node.window)
    else:
        out = kernel(*args)
    if not getattr(spec.bound, "relative", False):  # as the evaluator hands them over
        errs = [bounds.absolute(e, a) for e, a in zip(errs, args)]
    b = bounds.absolute(spec.bound(args, errs, out, node), out)
    b = np.broadcast_to(np.asarray(b, dtype=float), out.shape)
    ref = reference(name, exact_args, node.window, node.const)
    checked = 0
    for t in range(T):
        for i in range(N):
            r = ref[t][i]
            if np.isnan(out[t, i]) or r is None:
                continue
            gap = abs(_m(out[t, i]) - r)
            assert gap <= _m(b[t, i]), (f"{name}: |out - exact| = {mpmath.nstr(gap, 5)} > bound {b[t, i]:.3g} at "
                                        f"({t}, {i}), out {out[t, i]!r}")
            checked += 1
    assert checked > T  # most cells are numbers


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_element_and_cross_section_bounds_cover_the_exact_value(name, seed):
    rng = np.random.default_rng(seed)
    args, errs, exact = [], [], []
    for kind in CASES[name]:
        if isinstance(kind, float):  # a constant of the formula: exact or within half an ulp
            args.append(np.float64(kind))
            errs.append(bounds.constant(kind))
            exact.append([[mp.mpf(repr(kind))] * N for _ in range(T)])
            continue
        x, e = _inputs(rng, kind)
        args.append(x)
        errs.append(e)
        exact.append(_exact(rng, x, e))
    node = Op(name, tuple(Num(1.0) for _ in args), const=None)
    _check(name, args, errs, node, exact)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("d", (1, 2, 5, 12))
@pytest.mark.parametrize("name", sorted(WINDOWED))
def test_window_bounds_cover_the_exact_value(name, d, seed):
    too_short = {"ts_rank": 2, "ts_slope": 2, "ts_corr": 2, "ts_skew": 3, "ts_kurt": 4}
    if d < too_short.get(name, 1):
        pytest.skip("NaN by definition at this window")
    rng = np.random.default_rng(1000 * d + seed)
    kinds = WINDOWED[name] if isinstance(WINDOWED[name], tuple) else (WINDOWED[name],)
    args, errs, exact = [], [], []
    for kind in kinds:
        x, e = _inputs(rng, kind)
        args.append(x)
        errs.append(e)
        exact.append(_exact(rng, x, e))
    node = Op(name, (X,) * len(kinds), window=d)
    _check(name, args, errs, node, exact)


def test_a_constant_is_exact_when_its_decimal_is_its_binary_value():
    assert bounds.constant(0.5) == bounds.constant(3.0) == bounds.constant(1e3) == 0.0
    for c in (1.1, 0.1, 3.7, 1e-7):
        assert 0 < bounds.constant(c) <= abs(c) * 2.0 ** -53
        assert abs(mp.mpf(repr(c)) - _m(c)) <= _m(bounds.constant(c))


def test_the_discrete_operators_own_their_whole_range_on_noise():
    """`rank`, `sign`, a comparison and `ts_rank` of a row or window within its bounds may be anything: here
    rounding noise times 1e16 (values -3..3, each within 8 of the exact 0)."""
    x = np.random.default_rng(0).integers(-3, 4, (T, N)).astype(float)
    e = np.full((T, N), 8.0)
    assert (OPERATORS["rank"].bound([x], [e], KERNELS["rank"](x), Op("rank", (X,))) == 1.0).all()
    assert (OPERATORS["sign"].bound([x], [e], KERNELS["sign"](x), Op("sign", (X,))) >= 1.0).all()
    assert (OPERATORS["gt"].bound([x, 0.0], [e, 0.0], KERNELS["gt"](x, 0.0), Op("gt", (X, Num(0.0)))) == 1.0).all()
    tr = Op("ts_rank", (X,), window=5)
    assert (OPERATORS["ts_rank"].bound([x], [e], KERNELS["ts_rank"](x, 5), tr)[4:] == 1.0).all()
    assert bounds.noise_days(x, e).all()
    assert not bounds.noise_days(KERNELS["rank"](1.0 + x * 2.0 ** -52), 0.0).any()  # ties: a flat book


def test_below_the_tie_tolerance_the_language_rules_decide():
    """A row or window equal up to a few ulps, with bounds of a few ulps, is tied by rules 1 and 4 in exact
    arithmetic as in floats: its rank is 0.5, exactly; a comparison within rule 2's tolerance is decided."""
    x = 1.0 + np.random.default_rng(0).integers(-3, 4, (T, N)) * 2.0 ** -52
    e = np.full((T, N), 8 * 2.0 ** -52)
    r = KERNELS["rank"](x)
    assert (r == 0.5).all()
    assert np.all(OPERATORS["rank"].bound([x], [e], r, Op("rank", (X,))) < 1e-15)
    assert (OPERATORS["gt"].bound([x, 1.0], [e, 0.0], KERNELS["gt"](x, 1.0), Op("gt", (X, Num(1.0)))) == 0).all()
    tr = Op("ts_rank", (X,), window=5)
    assert np.all(OPERATORS["ts_rank"].bound([x], [e], KERNELS["ts_rank"](x, 5), tr)[4:] < 1e-15)


def test_a_signal_with_a_real_spread_is_never_noise():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (T, N))
    assert not bounds.noise_days(x, 1e-9 * np.abs(x)).any()
    assert not bounds.noise_days(x, 0.0).any()
    assert math.isinf(bounds.NOISE_SHARE) is False and 0 < bounds.NOISE_SHARE <= 1


@pytest.mark.filterwarnings("error")
def test_constant_rows_near_the_largest_float_is_quiet_and_still_a_bound():
    """v + e past the largest float is +inf: an upper end still, and no overflow warning reaches the caller (seen
    in a 10,000-call search on us46)."""
    from alpha_gym.language.bounds import constant_rows
    v = np.array([[1e308, 1e308, np.nan], [1.0, 2.0, 3.0], [-1e308, -1e308, -1e308]])
    e = np.array([[1e308, 1e308, 0.0], [0.0, 0.0, 0.0], [1e308, 0.0, 1e308]])
    assert constant_rows(v, e).tolist() == [True, False, True]
