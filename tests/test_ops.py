"""Tests of the numpy kernels in ``alpha_gym.language.ops``.

Every kernel is checked against a slow, independent reference (explicit loops over
windows, two-pass statistics), for causality (bit-exact), purity, the strict NaN rule,
edge cases, warnings, and against the peer implementation ``alpha101v``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from alpha_gym.language import ops
from alpha_gym.language.operators import KERNELS

WINDOWS = (1, 2, 3, 5, 7, 20)

TS_UNARY = ["ts_sum", "ts_mean", "ts_std", "ts_max", "ts_min", "ts_product", "ts_rank",
            "ts_decay_linear", "ts_ema", "ts_skew", "ts_kurt", "ts_slope", "ts_argmax",
            "ts_argmin", "delay", "ts_delta"]
TS_BINARY = ["ts_corr", "ts_cov"]
CS = ["rank", "scale"]
EW_UNARY = ["neg", "abs", "log", "sign"]
EW_BINARY = ["add", "sub", "mul", "div", "power", "signed_power", "min", "max",
             "lt", "gt", "le", "ge", "eq", "ne", "or", "and"]


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------


def _with_nans(a: np.ndarray, rng: np.random.Generator, frac: float = 0.05) -> np.ndarray:
    a = a.copy()
    a[rng.random(a.shape) < frac] = np.nan
    return a


def normal_panel(seed: int = 0, T: int = 67, N: int = 9, nan: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return _with_nans(rng.normal(size=(T, N)), rng, nan)


def price_panel(seed: int = 1, T: int = 90, N: int = 8, nan: float = 0.05) -> np.ndarray:
    """Random-walk prices between ~100 and ~500 (calm and volatile stocks)."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(100, 500, size=N)
    vol = rng.uniform(0.001, 0.03, size=N)
    p = level * np.exp(np.cumsum(rng.normal(0, 1, (T, N)) * vol, axis=0))
    return _with_nans(p, rng, nan)


def volume_panel(seed: int = 2, T: int = 90, N: int = 8, nan: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return _with_nans(np.exp(rng.uniform(np.log(1e6), np.log(1e8), size=(T, N))), rng, nan)


def int_panel(seed: int = 3, T: int = 60, N: int = 7, nan: float = 0.05, hi: int = 4) -> np.ndarray:
    """Small integers: many ties."""
    rng = np.random.default_rng(seed)
    return _with_nans(rng.integers(0, hi, size=(T, N)).astype(float), rng, nan)


# ---------------------------------------------------------------------------
# slow references (explicit loops over windows, two-pass statistics)
# ---------------------------------------------------------------------------


def _ts_ref(stat, *arrays: np.ndarray, d: int) -> np.ndarray:
    T, N = arrays[0].shape
    out = np.full((T, N), np.nan)
    for t in range(d - 1, T):
        for n in range(N):
            wins = [a[t - d + 1: t + 1, n] for a in arrays]
            if any(np.isnan(w).any() for w in wins):
                continue
            out[t, n] = stat(*wins)
    return out


def _var(w):
    m = w.sum() / len(w)
    return ((w - m) ** 2).sum() / len(w)


def _moment(w, k):
    m = w.sum() / len(w)
    return ((w - m) ** k).sum() / len(w)


def _ref_corr(a, b):
    ma, mb = a.mean(), b.mean()
    va, vb = ((a - ma) ** 2).mean(), ((b - mb) ** 2).mean()
    if va == 0 or vb == 0:
        return np.nan
    return ((a - ma) * (b - mb)).mean() / np.sqrt(va * vb)


def _ref_cov(a, b):
    return ((a - a.mean()) * (b - b.mean())).mean()


def _ref_ts_rank(w):
    d = len(w)
    if d == 1:
        return np.nan
    below = sum(1 for v in w[:-1] if v < w[-1])
    equal = sum(1 for v in w[:-1] if v == w[-1])
    return (below + 0.5 * equal) / (d - 1)


def _ref_decay(w):
    wt = np.arange(1, len(w) + 1, dtype=float)  # oldest 1 ... today d
    return float(np.dot(wt, w) / wt.sum())


def _ref_ema(w):
    d = len(w)
    q = 1.0 - 2.0 / (d + 1.0)
    wt = q ** np.arange(d - 1, -1, -1, dtype=float)  # today: q^0
    return float(np.dot(wt, w) / wt.sum())


def _ref_skew(w):
    m2 = _moment(w, 2)
    return np.nan if m2 == 0 else _moment(w, 3) / m2 ** 1.5


def _ref_kurt(w):
    m2 = _moment(w, 2)
    return np.nan if m2 == 0 else _moment(w, 4) / m2 ** 2 - 3.0


def _ref_slope(w):
    d = len(w)
    if d == 1:
        return np.nan
    i = np.arange(d, dtype=float)
    return float(((i - i.mean()) * (w - w.mean())).sum() / ((i - i.mean()) ** 2).sum())


def _ref_argmax(w):
    best = 0
    for i in range(1, len(w)):
        if w[i] > w[best]:  # strict: ties keep the oldest
            best = i
    return float(len(w) - 1 - best)


def _ref_argmin(w):
    best = 0
    for i in range(1, len(w)):
        if w[i] < w[best]:
            best = i
    return float(len(w) - 1 - best)


def _ref_product(w):
    p = 1.0
    for v in w:
        p *= v
    return p


TS_REFS = {
    "ts_sum": lambda w: float(np.sum(w)),
    "ts_mean": lambda w: float(np.sum(w) / len(w)),
    "ts_std": lambda w: float(np.sqrt(_var(w))),
    "ts_max": lambda w: float(max(w)),
    "ts_min": lambda w: float(min(w)),
    "ts_product": _ref_product,
    "ts_rank": _ref_ts_rank,
    "ts_decay_linear": _ref_decay,
    "ts_ema": _ref_ema,
    "ts_skew": _ref_skew,
    "ts_kurt": _ref_kurt,
    "ts_slope": _ref_slope,
    "ts_argmax": _ref_argmax,
    "ts_argmin": _ref_argmin,
}


def ref_ts(name: str, *arrays: np.ndarray, d: int) -> np.ndarray:
    if name == "delay":
        (a,) = arrays
        out = np.full(a.shape, np.nan)
        for t in range(d, a.shape[0]):
            out[t] = a[t - d]
        return out
    if name == "ts_delta":
        (a,) = arrays
        out = np.full(a.shape, np.nan)
        for t in range(d, a.shape[0]):
            out[t] = a[t] - a[t - d]
        return out
    if d < ops.MIN_MOMENT_WINDOW.get(name, 0):  # degenerate statistic: a constant (or 0) up to rounding
        return np.full(arrays[0].shape, np.nan)
    if name == "ts_corr":
        return _ts_ref(_ref_corr, *arrays, d=d)
    if name == "ts_cov":
        return _ts_ref(_ref_cov, *arrays, d=d)
    return _ts_ref(TS_REFS[name], *arrays, d=d)


def ref_rank(a: np.ndarray) -> np.ndarray:
    out = np.full(a.shape, np.nan)
    for t in range(a.shape[0]):
        row = a[t]
        ok = np.flatnonzero(~np.isnan(row))
        n = len(ok)
        if n < 2:
            continue
        for i in ok:
            below = sum(1 for j in ok if row[j] < row[i])
            equal = sum(1 for j in ok if row[j] == row[i])
            r = below + (equal + 1) / 2.0  # average 1-based rank
            out[t, i] = (r - 1) / (n - 1)
    return out


def ref_scale(a: np.ndarray, k: float = 1.0) -> np.ndarray:
    out = np.full(a.shape, np.nan)
    for t in range(a.shape[0]):
        s = sum(abs(v) for v in a[t] if not np.isnan(v))
        if s == 0:
            continue
        out[t] = a[t] * k / s
    return out


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float = 1e-9, atol: float = 0.0) -> None:
    assert got.shape == want.shape
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN masks differ")
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=atol)


def call(name: str, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = KERNELS[name](*args)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    assert not np.isinf(out).any()
    return out


# tolerances: (rtol, atol) per kernel on standard-normal data (values can be ~0)
NORMAL_TOL = {
    "ts_skew": (1e-9, 1e-10),
    "ts_kurt": (1e-9, 1e-10),
    "ts_corr": (1e-9, 1e-12),
    "ts_slope": (1e-9, 1e-12),
}


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------


def test_registry_names():
    expected = {"delay", "ts_delta", "ts_sum", "ts_mean", "ts_std", "ts_max", "ts_min",
                "ts_product", "ts_rank", "ts_corr", "ts_cov", "ts_decay_linear", "ts_ema",
                "ts_skew", "ts_kurt", "ts_slope", "ts_argmax", "ts_argmin", "rank", "scale",
                "ind_neutralize", "add", "sub", "mul", "div", "neg", "abs", "log", "sign", "power",
                "signed_power", "min", "max", "lt", "gt", "le", "ge", "eq", "ne", "or", "and", "where"}
    assert set(KERNELS) == expected
    assert all(callable(f) for f in KERNELS.values())


def test_registry_covers_the_language():
    """Every operator of the formula language has a kernel (``adv`` is ts_mean of dollar volume)."""
    from alpha_gym.language.operators import OPERATORS
    assert set(OPERATORS) - {"adv"} <= set(KERNELS)


# ---------------------------------------------------------------------------
# time-series kernels vs slow references
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", WINDOWS)
@pytest.mark.parametrize("name", TS_UNARY)
def test_ts_unary_normal(name, d):
    x = normal_panel(seed=d)
    rtol, atol = NORMAL_TOL.get(name, (1e-9, 1e-12))
    assert_same(call(name, x, d), ref_ts(name, x, d=d), rtol, atol)


@pytest.mark.parametrize("d", (1, 2, 5, 20, 60))
@pytest.mark.parametrize("name", TS_UNARY)
def test_ts_unary_prices(name, d):
    """Realistic price levels (100..500, calm stocks): no catastrophic cancellation."""
    x = price_panel(seed=d, T=90)
    atol = {"ts_skew": 1e-8, "ts_kurt": 1e-8, "ts_slope": 1e-12}.get(name, 0.0)
    if name == "ts_delta":
        atol = 1e-12 * 500
    assert_same(call(name, x, d), ref_ts(name, x, d=d), 1e-9, atol)


@pytest.mark.parametrize("d", (1, 2, 5, 20))
@pytest.mark.parametrize("name", ["ts_sum", "ts_mean", "ts_std", "ts_decay_linear", "ts_ema",
                                  "ts_slope", "ts_skew", "ts_kurt"])
def test_ts_unary_volumes(name, d):
    x = volume_panel(seed=d)
    atol = {"ts_skew": 1e-9, "ts_kurt": 1e-9, "ts_slope": 1e-3}.get(name, 0.0)
    assert_same(call(name, x, d), ref_ts(name, x, d=d), 1e-9, atol)


@pytest.mark.parametrize("d", (1, 2, 3, 5, 9))
@pytest.mark.parametrize("name", TS_UNARY)
def test_ts_unary_ties(name, d):
    """Integer data: ties everywhere (rank, argmax/argmin tie rules, constant windows)."""
    x = int_panel(seed=d)
    rtol, atol = NORMAL_TOL.get(name, (1e-9, 1e-12))
    assert_same(call(name, x, d), ref_ts(name, x, d=d), rtol, atol)


@pytest.mark.parametrize("d", WINDOWS)
@pytest.mark.parametrize("name", TS_BINARY)
def test_ts_binary(name, d):
    x = normal_panel(seed=10 + d)
    y = 0.5 * x + normal_panel(seed=20 + d)
    assert_same(call(name, x, y, d), ref_ts(name, x, y, d=d), 1e-9, 1e-12)
    p, v = price_panel(seed=d), volume_panel(seed=d)
    assert_same(call(name, p, v, d), ref_ts(name, p, v, d=d), 1e-9, 1e-12)
    i, j = int_panel(seed=d), int_panel(seed=d + 100)
    assert_same(call(name, i, j, d), ref_ts(name, i, j, d=d), 1e-9, 1e-12)


@pytest.mark.parametrize("name", TS_UNARY + TS_BINARY)
def test_ts_long_and_wide(name):
    """Panels larger than one column chunk and windows close to the maximum."""
    rng = np.random.default_rng(7)
    T, N = 300, 40
    x = _with_nans(100 + np.cumsum(rng.normal(size=(T, N)), axis=0), rng, 0.002)
    args = (x, x[::-1].copy()) if name in TS_BINARY else (x,)
    old = ops._CHUNK_CELLS
    try:
        ops._CHUNK_CELLS = 16 * T  # force several column chunks
        for d in (13, 252):
            rtol, atol = (1e-9, 1e-9) if name in ("ts_skew", "ts_kurt", "ts_corr", "ts_slope") else (1e-9, 1e-10)
            if name == "ts_product":
                x_small = 1 + 0.001 * np.nan_to_num(x - 100)
                x_small[np.isnan(x)] = np.nan
                args = (x_small,)
            assert_same(call(name, *args, d), ref_ts(name, *args, d=d), rtol, atol)
    finally:
        ops._CHUNK_CELLS = old


def test_short_panel_all_nan():
    x = normal_panel(T=4, nan=0.0)
    for name in TS_UNARY:
        out = call(name, x, 5)
        assert out.shape == x.shape and np.isnan(out).all(), name
    for name in TS_BINARY:
        assert np.isnan(call(name, x, x, 5)).all()


def test_window_validation():
    x = normal_panel()
    for bad in (0, 253, -1):
        with pytest.raises(ValueError):
            ops.ts_mean(x, bad)
    with pytest.raises(TypeError):
        ops.ts_mean(x, 2.5)
    with pytest.raises(ValueError):
        ops.ts_mean(x[0], 3)


# ---------------------------------------------------------------------------
# cross-sectional kernels
# ---------------------------------------------------------------------------


def test_rank_matches_reference():
    for x in (normal_panel(seed=4, N=13), int_panel(seed=5, N=11), int_panel(seed=6, N=6, nan=0.4)):
        assert_same(call("rank", x), ref_rank(x), 1e-12, 1e-15)


def test_rank_edge_rows():
    x = np.array([[np.nan, np.nan, np.nan],
                  [np.nan, 5.0, np.nan],
                  [2.0, 2.0, 2.0],
                  [1.0, np.nan, 3.0],
                  [4.0, 3.0, 6.0]])
    out = call("rank", x)
    assert np.isnan(out[0]).all()
    assert np.isnan(out[1]).all()  # single valid value -> NaN (alpha101v)
    np.testing.assert_array_equal(out[2], [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(out[3], [0.0, np.nan, 1.0])
    np.testing.assert_array_equal(out[4], [0.5, 0.0, 1.0])
    # the official BRAIN example: (4, 3, 6, 10, 2) -> (0.5, 0.25, 0.75, 1, 0)
    np.testing.assert_allclose(call("rank", np.array([[4.0, 3, 6, 10, 2]]))[0],
                               [0.5, 0.25, 0.75, 1.0, 0.0])


def test_scale_matches_reference():
    x = normal_panel(seed=8)
    x[3] = np.nan
    x[4] = 0.0
    x[5, :] = np.nan
    x[5, 2] = 0.0
    assert_same(call("scale", x), ref_scale(x), 1e-12)
    assert_same(ops.scale(x, 3.0), ref_scale(x, 3.0), 1e-12)
    s = np.nansum(np.abs(ops.scale(x, 2.0)), axis=1)
    np.testing.assert_allclose(s[~np.isnan(ops.scale(x)).all(axis=1)], 2.0)


# ---------------------------------------------------------------------------
# element-wise kernels
# ---------------------------------------------------------------------------


def _ew_ref(name, x, y=None):
    def one(a, b):
        if name == "neg":
            return -a
        if name == "abs":
            return abs(a)
        if name == "log":
            return np.log(a) if a > 0 else np.nan
        if name == "sign":
            return float(np.sign(a))
        if np.isnan(a) or (b is not None and np.isnan(b)):
            return np.nan
        if name == "add":
            return a + b
        if name == "sub":
            return a - b
        if name == "mul":
            return a * b
        if name == "div":
            return a / b if b != 0 else np.nan
        if name == "power":
            if a < 0 and b != int(b):
                return np.nan
            if a == 0 and b < 0:
                return np.nan
            return float(a ** b)
        if name == "signed_power":
            if a == 0 and b < 0:
                return np.nan
            return float(np.sign(a) * abs(a) ** b)
        if name == "min":
            return min(a, b)
        if name == "max":
            return max(a, b)
        if name in ("lt", "gt", "le", "ge", "eq", "ne"):
            return float({"lt": a < b, "gt": a > b, "le": a <= b, "ge": a >= b, "eq": a == b,
                          "ne": a != b}[name])
        if name == "or":
            return float(a != 0 or b != 0)
        if name == "and":
            return float(a != 0 and b != 0)
        raise KeyError(name)

    out = np.empty(x.shape)
    for idx in np.ndindex(x.shape):
        out[idx] = one(x[idx], None if y is None else y[idx])
    return out


@pytest.mark.parametrize("name", EW_UNARY)
def test_elementwise_unary(name):
    x = int_panel(seed=1, hi=5) - 2.0
    x[0, 0] = 0.0
    assert_same(call(name, x), _ew_ref(name, x), 1e-15)
    z = normal_panel(seed=2)
    assert_same(call(name, z), _ew_ref(name, z), 1e-15)


@pytest.mark.parametrize("name", EW_BINARY)
def test_elementwise_binary(name):
    x = int_panel(seed=1, hi=5) - 2.0
    y = int_panel(seed=2, hi=5) - 2.0
    assert_same(call(name, x, y), _ew_ref(name, x, y), 1e-12)
    u = normal_panel(seed=3)
    v = normal_panel(seed=4)
    assert_same(call(name, u, v), _ew_ref(name, u, v), 1e-12)
    for c in (0.0, 2.0, -1.5, 0.5, 3.0, -1.0):  # scalar constants on either side
        cc = np.full(u.shape, c)
        assert_same(call(name, u, c), _ew_ref(name, u, cc), 1e-12)
        assert_same(call(name, c, v), _ew_ref(name, cc, v), 1e-12)


def test_where():
    c = int_panel(seed=9, hi=3, T=67, N=9)
    a = normal_panel(seed=10)
    b = normal_panel(seed=11)
    out = call("where", c, a, b)
    want = np.where(c != 0, a, b)
    want[np.isnan(c)] = np.nan
    assert_same(out, want, 0.0)
    out2 = call("where", c, 1.0, -1.0)
    want2 = np.where(c != 0, 1.0, -1.0)
    want2[np.isnan(c)] = np.nan
    assert_same(out2, want2, 0.0)


def test_scalar_only_elementwise():
    assert float(ops.add(1.0, 2.0)) == 3.0
    assert np.isnan(ops.div(1.0, 0.0))
    assert np.isnan(ops.log(0.0))


# ---------------------------------------------------------------------------
# causality, purity, NaN rule
# ---------------------------------------------------------------------------


def _all_calls(x, y, c):
    for name in TS_UNARY:
        for d in (1, 2, 5, 16):
            yield f"{name}/{d}", (lambda a, b, cc, n=name, d=d: KERNELS[n](a, d))
    for name in TS_BINARY:
        for d in (1, 2, 5, 16):
            yield f"{name}/{d}", (lambda a, b, cc, n=name, d=d: KERNELS[n](a, b, d))
    for name in CS + EW_UNARY:
        yield name, (lambda a, b, cc, n=name: KERNELS[n](a))
    for name in EW_BINARY:
        yield name, (lambda a, b, cc, n=name: KERNELS[n](a, b))
    yield "where", (lambda a, b, cc: ops.where(cc, a, b))


def test_causality_bit_exact():
    rng = np.random.default_rng(42)
    T, N = 70, 6
    x = _with_nans(100 + np.cumsum(rng.normal(size=(T, N)), axis=0), rng)
    y = _with_nans(rng.lognormal(10, 1, size=(T, N)), rng)
    c = int_panel(seed=5, T=T, N=N, hi=2)
    for label, fn in _all_calls(x, y, c):
        base = fn(x, y, c)
        for t in (0, 3, 16, 17, 31, 32, 45, 68):
            x2, y2, c2 = x.copy(), y.copy(), c.copy()
            for arr in (x2, y2, c2):
                arr[t + 1:] = rng.normal(size=arr[t + 1:].shape) * 1e3
                arr[t + 1:][rng.random(arr[t + 1:].shape) < 0.3] = np.nan
            got = fn(x2, y2, c2)
            assert np.array_equal(base[: t + 1], got[: t + 1], equal_nan=True), (label, t)
            assert np.array_equal(np.signbit(base[: t + 1]), np.signbit(got[: t + 1])), (label, t)


def test_purity_inputs_untouched():
    x = price_panel(seed=3)
    y = volume_panel(seed=3)
    c = int_panel(seed=3, T=x.shape[0], N=x.shape[1], hi=2)
    xs, ys, cs = x.copy(), y.copy(), c.copy()
    for label, fn in _all_calls(x, y, c):
        out = fn(x, y, c)
        assert not np.shares_memory(out, x) and not np.shares_memory(out, y), label
        np.testing.assert_array_equal(x, xs, err_msg=label)
        np.testing.assert_array_equal(y, ys, err_msg=label)
        np.testing.assert_array_equal(c, cs, err_msg=label)


@pytest.mark.parametrize("name", TS_UNARY + TS_BINARY)
def test_strict_nan_rule(name):
    T, N, d = 40, 5, 6
    x = price_panel(seed=5, T=T, N=N, nan=0.0)
    x[20, 1] = np.nan
    args = (x, volume_panel(seed=5, T=T, N=N, nan=0.0)) if name in TS_BINARY else (x,)
    out = call(name, *args, d)
    lag = d if name in ("delay", "ts_delta") else d - 1
    assert np.isnan(out[:lag]).all()
    if name == "delay":
        assert np.isnan(out[20 + d, 1]) and not np.isnan(out[20 + d - 1:20 + d + 2, [0, 2]]).any()
    elif name == "ts_delta":
        assert np.isnan(out[[20, 20 + d], 1]).all()
    else:
        assert np.isnan(out[20:20 + d, 1]).all()
        assert not np.isnan(out[20 + d:, 1]).any()
        assert not np.isnan(out[lag:20, 1]).any()


# ---------------------------------------------------------------------------
# edge cases
# ---------------------------------------------------------------------------


def test_constant_windows():
    T, N = 30, 4
    x = np.full((T, N), 123.456)
    x[:, 1] = 1e8 / 3
    x[:, 2] = 0.0
    x[:, 3] = np.linspace(1, 2, T)
    y = np.random.default_rng(0).normal(size=(T, N))
    for d in (2, 5, 20):
        corr = call("ts_corr", x, y, d)
        assert np.isnan(corr[:, :3]).all()
        assert not np.isnan(corr[d - 1:, 3]).any()
        np.testing.assert_array_equal(call("ts_std", x, d)[d - 1:, :3], 0.0)
        np.testing.assert_array_equal(call("ts_cov", x, y, d)[d - 1:, :3], 0.0)
        assert np.isnan(call("ts_skew", x, d)[:, :3]).all()
        assert np.isnan(call("ts_kurt", x, d)[:, :3]).all()
        np.testing.assert_allclose(call("ts_slope", x, d)[d - 1:, 3], 1.0 / (T - 1), rtol=1e-9)
        np.testing.assert_allclose(call("ts_slope", x, d)[d - 1:, :3], 0.0, atol=1e-9)
        np.testing.assert_allclose(call("ts_mean", x, d)[d - 1:, :3], x[d - 1:, :3], rtol=1e-15)


def test_division_log_power_edges():
    x = np.array([[1.0, -1.0, 0.0, np.nan, 4.0]])
    z = np.zeros_like(x)
    assert np.isnan(call("div", x, z)).all()
    np.testing.assert_array_equal(call("log", x), [[0.0, np.nan, np.nan, np.nan, np.log(4.0)]])
    np.testing.assert_array_equal(call("power", x, 0.5), [[1.0, np.nan, 0.0, np.nan, 2.0]])
    np.testing.assert_array_equal(call("power", x, -1.0), [[1.0, -1.0, np.nan, np.nan, 0.25]])
    np.testing.assert_array_equal(call("power", x, 0.0), [[1.0, 1.0, 1.0, np.nan, 1.0]])
    np.testing.assert_array_equal(call("signed_power", x, 0.5), [[1.0, -1.0, 0.0, np.nan, 2.0]])
    np.testing.assert_array_equal(call("signed_power", x, 2.0), [[1.0, -1.0, 0.0, np.nan, 16.0]])
    big = np.full((1, 3), 1e300)
    assert np.isnan(call("mul", big, big)).all()  # overflow -> NaN, never inf
    assert np.isnan(call("ts_product", np.full((3, 2), 1e200), 2)).all()
    assert np.isnan(call("ts_sum", np.full((3, 2), 1e308), 2)[1:]).all()


def test_inf_input_is_missing():
    x = normal_panel(seed=12, nan=0.0)
    x[10, 2] = np.inf
    x[30, 4] = -np.inf
    for name in TS_UNARY:
        out = call(name, x, 3)
        clean = x.copy()
        clean[np.isinf(clean)] = np.nan
        np.testing.assert_array_equal(out, call(name, clean, 3))


def test_product_zeros_and_signs():
    x = np.array([[2.0], [-3.0], [0.0], [-0.5], [4.0], [-1.0], [7.0]])
    np.testing.assert_array_equal(ops.ts_product(x, 3)[:, 0],
                                  [np.nan, np.nan, 0.0, 0.0, 0.0, 2.0, -28.0])


def test_argmax_ties_oldest():
    x = np.array([[1.0], [5.0], [5.0], [2.0], [5.0], [1.0]])
    np.testing.assert_array_equal(ops.ts_argmax(x, 3)[:, 0], [np.nan, np.nan, 1.0, 2.0, 2.0, 1.0])
    np.testing.assert_array_equal(ops.ts_argmin(-x, 3)[:, 0], [np.nan, np.nan, 1.0, 2.0, 2.0, 1.0])
    np.testing.assert_array_equal(ops.ts_argmax(x, 1)[:, 0], np.zeros(6))


def test_ts_rank_values():
    x = np.array([[10.0], [12.0], [11.0], [15.0], [13.0]])  # BRAIN example: 3/4
    assert ops.ts_rank(x, 5)[4, 0] == 0.75
    assert np.isnan(ops.ts_rank(x, 1)).all()
    y = np.array([[1.0], [1.0], [1.0]])
    assert ops.ts_rank(y, 3)[2, 0] == 0.5


def test_no_warnings_anywhere():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 6))
    x[rng.random(x.shape) < 0.2] = np.nan
    x[:, 0] = 0.0
    x[:, 1] = np.nan
    x[5] = np.nan
    y = x[::-1].copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for label, fn in _all_calls(x, y, x):
            out = fn(x, y, x)
            assert not np.isinf(out).any(), label


# ---------------------------------------------------------------------------
# agreement with alpha101v (the peer implementation)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def a101():
    try:
        from alpha101v import operators
    except Exception as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"alpha101v not importable: {exc}")
    return operators


def _df(a):
    import pandas as pd
    return pd.DataFrame(a, index=pd.RangeIndex(a.shape[0]), columns=[f"s{i}" for i in range(a.shape[1])])


A101_PAIRS = [
    # (our kernel, alpha101v call, data kind)
    ("ts_sum", lambda m, x, d: m.ts_sum(x, d)),
    ("ts_mean", lambda m, x, d: m.sma(x, d)),
    ("ts_std", lambda m, x, d: m.stddev(x, d)),
    ("ts_rank", lambda m, x, d: m.ts_rank(x, d)),
    ("ts_product", lambda m, x, d: m.product(x, d)),
    ("ts_min", lambda m, x, d: m.ts_min(x, d)),
    ("ts_max", lambda m, x, d: m.ts_max(x, d)),
    ("ts_delta", lambda m, x, d: m.delta(x, d)),
    ("delay", lambda m, x, d: m.delay(x, d)),
    ("ts_argmax", lambda m, x, d: m.ts_argmax(x, d)),
    ("ts_argmin", lambda m, x, d: m.ts_argmin(x, d)),
    # alpha101v's default decay is "sparse" (NaN counted as 0); dense=True is the strict rule
    ("ts_decay_linear", lambda m, x, d: m.decay_linear(x, d, dense=True)),
]


@pytest.mark.parametrize("d", (1, 2, 5, 10))
@pytest.mark.parametrize("name,peer", A101_PAIRS, ids=[p[0] for p in A101_PAIRS])
def test_alpha101v_unary(a101, name, peer, d):
    for x in (price_panel(seed=d, T=60, N=6), int_panel(seed=d, T=60, N=6)):
        want = peer(a101, _df(x), d).to_numpy(dtype=float)
        assert_same(call(name, x, d), want, 1e-9, 1e-12)


@pytest.mark.parametrize("d", (2, 5, 10))
def test_alpha101v_binary(a101, d):
    x, y = price_panel(seed=d, T=60, N=6), volume_panel(seed=d, T=60, N=6)
    assert_same(call("ts_corr", x, y, d), a101.correlation(_df(x), _df(y), d).to_numpy(), 1e-9, 1e-12)
    assert_same(call("ts_cov", x, y, d), a101.covariance(_df(x), _df(y), d).to_numpy(), 1e-9, 1e-12)


def test_alpha101v_cross_section(a101):
    for x in (price_panel(seed=4, T=30, N=9), int_panel(seed=4, T=30, N=9, nan=0.3)):
        assert_same(call("rank", x), a101.rank(_df(x)).to_numpy(), 1e-12, 1e-15)
        assert_same(call("scale", x), a101.scale(_df(x)).to_numpy(), 1e-12)
        assert_same(ops.scale(x, 2.5), a101.scale(_df(x), 2.5).to_numpy(), 1e-12)


def test_alpha101v_decay_sparse_difference(a101):
    """Documented difference: alpha101v's default decay_linear counts NaN as 0."""
    x = price_panel(seed=3, T=30, N=4)
    ours = ops.ts_decay_linear(x, 5)
    theirs = a101.decay_linear(_df(x), 5).to_numpy()
    assert np.isnan(ours).sum() > np.isnan(theirs).sum()
    both = ~np.isnan(ours)
    np.testing.assert_allclose(ours[both], theirs[both], rtol=1e-9)


# ---------------------------------------------------------------------------
# ind_neutralize (the paper's IndNeutralize)
# ---------------------------------------------------------------------------


def _ref_ind_neutralize(a, groups):
    out = np.full(a.shape, np.nan)
    labels = np.array([None if g is None else str(g) for g in groups], dtype=object)
    for t in range(a.shape[0]):
        for g in set(labels) - {None}:
            cols = np.flatnonzero(labels == g)
            vals = a[t, cols]
            ok = ~np.isnan(vals)
            if ok.any():
                out[t, cols[ok]] = vals[ok] - vals[ok].sum() / ok.sum()
    return out


def test_ind_neutralize_matches_reference():
    x = normal_panel(seed=31, N=9, nan=0.2)
    groups = ["a", "b", "a", "c", "b", "a", None, "c", "d"]  # "d": a single member -> 0
    out = call("ind_neutralize", x, groups)
    assert_same(out, _ref_ind_neutralize(x, groups), 1e-12, 1e-12)
    assert np.isnan(out[:, 6]).all()
    np.testing.assert_array_equal(out[~np.isnan(x[:, 8]), 8], 0.0)
    with pytest.raises(ValueError):
        ops.ind_neutralize(x, groups[:-1])


def test_ind_neutralize_against_alpha101v(a101):
    import pandas as pd
    from alpha101v.neutralize import ind_neutralize
    x = price_panel(seed=9, T=40, N=10, nan=0.1)
    groups = ["s1", "s2", "s1", "s3", "s2", "s1", "s3", "s3", "s4", "s1"]
    want = ind_neutralize(_df(x), pd.Series(groups, index=_df(x).columns)).to_numpy()
    assert_same(call("ind_neutralize", x, groups), want, 1e-12, 1e-9)


def test_ind_neutralize_is_causal_and_pure():
    x = normal_panel(seed=32, N=6)
    xs = x.copy()
    groups = ["a", "a", "b", "b", "b", "c"]
    base = ops.ind_neutralize(x, groups)
    np.testing.assert_array_equal(x, xs)
    y = x.copy()
    y[40:] = 1e6
    assert np.array_equal(ops.ind_neutralize(y, groups)[:40], base[:40], equal_nan=True)


# ---------------------------------------------------------------------------
# operator conventions (docs/operators.md), one named test each
# ---------------------------------------------------------------------------


def test_convention_rank_ties_share_the_average_and_scale_to_0_1():
    x = np.array([[3.0, 1.0, 3.0, 2.0, np.nan]])
    # sorted 1, 2, 3, 3: 0-based positions 0, 1, 2.5, 2.5 over n - 1 = 3
    np.testing.assert_array_equal(ops.rank(x)[0], [2.5 / 3, 0.0, 2.5 / 3, 1 / 3, np.nan])
    assert ops.rank(np.array([[7.0, 7.0]]))[0].tolist() == [0.5, 0.5]


def test_convention_rank_is_bit_identical_to_the_pandas_formula():
    import pandas as pd
    x = np.round(normal_panel(seed=33, T=200, N=45, nan=0.05) * 3)
    df = pd.DataFrame(x)
    want = ((df.rank(axis=1) - 1.0).div(df.notna().sum(axis=1) - 1.0, axis=0)).to_numpy()
    assert np.array_equal(ops.rank(x), want, equal_nan=True)  # (r - 1) / (n - 1), a division


def _tie_snapped(x: np.ndarray) -> np.ndarray:
    """Each row with every value replaced by the smallest of its chain of sorted neighbours at most
    `ops.TIE_ULPS` apart (as float64 bit patterns): what `rank` reads as one value, ranked by pandas."""
    out = x.copy()
    for t, row in enumerate(x):
        ok = np.flatnonzero(~np.isnan(row))
        order = ok[np.argsort(row[ok], kind="stable")]
        keys = [int(v) for v in ops._order_keys(row[order])]
        for i in range(1, len(order)):
            if keys[i] - keys[i - 1] <= ops.TIE_ULPS:
                out[t, order[i]] = out[t, order[i - 1]]
    return out


@pytest.mark.parametrize("case", ["ulps", "ulps_everywhere", "zeros_and_signs", "ties_and_nan", "extremes",
                                  "distinct", "missing_stock", "few_values", "tie_tolerance_edge",
                                  "tie_tolerance_edge_everywhere"])
def test_rank_packed_sort_is_exact_on_values_a_few_ulps_apart(case):
    """`rank` sorts int64 keys whose low bits hold the column (see ops._rank_packed); values that differ
    only in those bits, ties, -0.0/0.0, NaN and +-inf must still rank exactly as pandas does (on the
    values with their near-ties within ops.TIE_ULPS made ties, `_tie_snapped`), in
    blocks with none of them, where they are rare, and where they are everywhere (whole-row ties;
    the argsort fallback)."""
    import pandas as pd
    rng = np.random.default_rng(len(case))
    T, N = 700, 496  # several row blocks of 496 stocks: 9 bits of column in every key
    if case == "ulps":  # a few cells per row equal but for their last bits, among ordinary values
        x = rng.standard_normal((T, N))
        x[:, :8] = 0.1 + rng.integers(-40, 40, (T, 8)) * np.spacing(0.1)
    elif case == "ulps_everywhere":  # as rank(a) - rank(b): most cells a few ulps from another
        x = 1.0 + rng.integers(0, 1 << 11, (T, N)) * np.spacing(1.0)
        x[rng.random((T, N)) < 0.5] *= -1.0
    elif case == "zeros_and_signs":
        x = rng.choice([0.0, -0.0, 1e-300, -1e-300, 5e-324, -5e-324, 2.0], (T, N))
    elif case == "ties_and_nan":
        x = np.round(rng.standard_normal((T, N)) * 3)
        x[rng.random((T, N)) < 0.1] = np.nan
        x[:50] = np.round(rng.standard_normal((50, N)), 12)  # untied rows next to tied ones
    elif case == "distinct":  # no two cells alike: the ranks are read off the sorted keys alone
        x = rng.standard_normal((T, N))
    elif case == "missing_stock":  # every row one stock short (a stock not listed yet), ulps here and there
        x = rng.standard_normal((T, N))
        x[:, 3] = np.nan
        x[::7, 10:14] = 0.1 + rng.integers(-3, 3, (len(x[::7]), 4)) * np.spacing(0.1)
    elif case.startswith("tie_tolerance_edge"):  # neighbours TIE_ULPS apart (one value) or one ulp more (two)
        steps = rng.integers(0, 6, (T, N)) * ops.TIE_ULPS + rng.integers(0, 6, (T, N))
        x = 0.1 + steps * np.spacing(0.1)
        if case == "tie_tolerance_edge":
            x[:, 16:] = rng.standard_normal((T, N - 16))
    elif case == "few_values":  # ties in most cells (as rank(ts_argmax(x, d))), NaN in some rows
        x = rng.integers(0, 30, (T, N)).astype(float)
        x[rng.random((T, N)) < 0.01] = np.nan
    else:
        x = rng.choice([np.inf, -np.inf, np.nan, 1e308, -1e308, 1.0, np.nextafter(1.0, 2.0)], (T, N))
    clean = _tie_snapped(np.where(np.isinf(x), np.nan, x))  # kernels read +-inf as missing
    df = pd.DataFrame(clean)
    want = ((df.rank(axis=1) - 1.0).div(df.notna().sum(axis=1) - 1.0, axis=0)).to_numpy()
    got = ops.rank(x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got.view(np.int64)[~np.isnan(got)], want.view(np.int64)[~np.isnan(want)])


def test_convention_ts_rank_window_includes_today():
    x = np.array([[10.0], [12.0], [11.0], [15.0], [13.0], [13.0]])
    out = ops.ts_rank(x, 5)[:, 0]
    # day 4: 13 among (10, 12, 11, 15, 13) is the 4th of 5 -> 3 / 4; day 5: (12, 11, 15, 13, 13):
    # below 2, one other equal -> (2 + 0.5) / 4
    assert np.isnan(out[:4]).all() and out[4] == 0.75 and out[5] == 2.5 / 4


def test_convention_decay_linear_weights_today_heaviest():
    d = 4
    for age in range(d):  # a unit impulse `age` days ago weighs (d - age) / (1 + ... + d)
        x = np.zeros((10, 1))
        x[9 - age] = 1.0
        assert ops.ts_decay_linear(x, d)[9, 0] == pytest.approx((d - age) / 10.0, rel=1e-15)


def test_convention_correlation_of_a_constant_window_is_nan():
    x = np.tile(np.array([[5.0], [5.0], [5.0], [6.0]]), (1, 2))
    y = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [5.0, 5.0]])
    out = ops.ts_corr(x, y, 3)
    assert np.isnan(out[2]).all() and np.isfinite(out[3]).all()
    assert (ops.ts_cov(x, y, 3)[2] == 0.0).all() and (ops.ts_std(x, 3)[2] == 0.0).all()


def test_convention_argmax_days_ago_ties_oldest():
    x = np.array([[1.0], [3.0], [2.0], [3.0]])
    assert ops.ts_argmax(x, 4)[3, 0] == 2.0  # the max 3 occurred 2 and 0 days ago: the oldest wins


def test_convention_power_and_nan():
    assert float(ops.power(0.0, 0.0)) == 1.0           # IEEE 0^0 (alpha101v: 0)
    assert np.isnan(ops.power(0.0, -1.0))               # 0^-1 is undefined (alpha101v: 0)
    assert np.isnan(ops.power(1.0, np.nan))             # NaN in -> NaN out (IEEE and alpha101v: 1)
    assert np.isnan(ops.power(-8.0, 1 / 3))             # negative base, non-integer exponent (alpha101v: 8^(1/3) = 2)
    assert float(ops.power(-2.0, 3.0)) == -8.0
    assert np.isnan(ops.maximum(1.0, np.nan)) and np.isnan(ops.minimum(np.nan, 1.0))  # alpha101v: 1 (fmax/fmin)
    assert np.isnan(ops.logical_or(1.0, np.nan))       # alpha101v: 1 (Kleene logic)


def test_elementwise_differences_from_alpha101v_are_exactly_the_documented_ones(a101):
    """Element-wise functions on random data with NaN, zeros and ones: equal except where documented."""
    import pandas as pd
    from alpha101v import elemwise, factors
    rng = np.random.default_rng(5)
    x = rng.choice([0.0, 1.0, -1.0, 2.5, -0.5, np.nan], size=(40, 6))
    y = rng.choice([0.0, 1.0, 2.0, -1.0, 0.5, np.nan], size=(40, 6))
    X, Y = pd.DataFrame(x), pd.DataFrame(y)
    nan = np.isnan(x) | np.isnan(y)
    for ours, theirs in [(ops.log(x), elemwise.log(X)), (ops.sign(x), elemwise.sign(X)),
                         (ops.abs_(x), elemwise.abs_(X)),
                         (ops.lt(x, y), factors._lt(X, Y)), (ops.gt(x, y), factors._gt(X, Y)),
                         (ops.eq(x, y), factors._eq(X, Y))]:
        assert np.array_equal(ours, theirs.to_numpy(dtype=float), equal_nan=True)
    c = ops.lt(x, y)
    assert np.array_equal(ops.where(c, x, y), factors._if(pd.DataFrame(c), X, Y).to_numpy(dtype=float), equal_nan=True)
    # min / max: equal where neither is NaN; alpha101v returns the other argument where one is NaN
    for ours, theirs, fn in [(ops.minimum(x, y), elemwise.minimum(X, Y), np.fmin),
                             (ops.maximum(x, y), elemwise.maximum(X, Y), np.fmax)]:
        theirs = theirs.to_numpy(dtype=float)
        assert np.array_equal(ours[~nan], theirs[~nan]) and np.isnan(ours[nan]).all()
        assert np.array_equal(theirs, fn(x, y), equal_nan=True)
    # ||: alpha101v's Kleene logic gives 1 for (1 || NaN); here NaN
    theirs = factors._or(pd.DataFrame(ops.lt(x, 0.5)), pd.DataFrame(ops.lt(y, 0.5))).to_numpy(dtype=float)
    ours = ops.logical_or(ops.lt(x, 0.5), ops.lt(y, 0.5))
    assert np.array_equal(ours[~nan], theirs[~nan]) and np.isnan(ours[nan]).all()
    # SignedPower: equal except |x| = 1 with a NaN exponent (IEEE 1^NaN = 1 there, NaN here)
    theirs = elemwise.signedpower(X, Y).to_numpy(dtype=float)
    ours = ops.signed_power(x, y)
    special = (np.abs(x) == 1) & np.isnan(y)
    assert np.array_equal(ours[~special], theirs[~special], equal_nan=True) and np.isnan(ours[special]).all()
    # ^: equal except 0^y (0 there for every y, NaN too), (+-1)^NaN and NaN^0 (1 there, as
    # IEEE pow) and negative bases with non-integer exponents (|x|^y there: the sign is
    # dropped); here NaN wherever an argument is NaN, 0^0 = 1 and the rest NaN
    theirs = elemwise.power(X, Y).to_numpy(dtype=float)
    ours = ops.power(x, y)
    special = ((x == 0) | ((np.abs(x) == 1) & np.isnan(y)) | (np.isnan(x) & (y == 0))
               | ((x < 0) & ~(np.floor(y) == y)))
    assert np.array_equal(ours[~special], theirs[~special], equal_nan=True)
    assert ((x == 0) & ~np.isnan(theirs)).sum() > 0 and np.all(theirs[x == 0] == 0.0)


# ---------------------------------------------------------------------------
# the shortcuts of the constant-window rule and of the bounds (issue 42.1)
# ---------------------------------------------------------------------------


def _near_windows_reference(a: np.ndarray, d: int) -> np.ndarray:
    """Rule 4's windows from the two window scans, without the integer pre-pass."""
    hi, lo = ops.ts_max(a, d), ops.ts_min(a, d)
    with np.errstate(all="ignore"):
        spread = hi - lo
        size = np.maximum(np.abs(hi), np.abs(lo)) * (ops.TIE_ULPS * 2.0 ** -52)
        return (spread > 0) & (spread <= size)


@pytest.mark.parametrize("seed", range(6))
def test_the_integer_pass_misses_no_window_constant_up_to_rounding(seed):
    """Panels a few ulps to 2^25 ulps around one value (tiny, subnormal, huge, zero, with NaN, inf and sign
    flips): `_near_constant_windows` with its pre-pass flags exactly the windows the two scans flag."""
    rng = np.random.default_rng(seed)
    seen = 0
    for trial in range(300):
        T, N = int(rng.integers(2, 40)), int(rng.integers(1, 6))
        base = float(rng.choice([1.0, -3.7, 1e-300, 2.2250738585072014e-308, 5e-324, 1e300, 0.0, 123.456]))
        ulps = int(rng.choice([0, 1, 2**20, 2**22, 2**23, 2**23 + 2**21, 2**24, 2**25]))
        bits = np.full((T, N), base).view(np.int64) + rng.integers(-ulps, ulps + 1, size=(T, N))
        a = (np.abs(bits) if base == 0.0 else bits).view(np.float64).copy()
        kind = trial % 4
        if kind == 1:
            a[rng.random((T, N)) < 0.1] = np.nan
        elif kind == 2:
            a[rng.random((T, N)) < 0.1] = np.inf
        elif kind == 3:
            a *= np.where(rng.random((T, N)) < 0.5, 1.0, -1.0)
        d = int(rng.integers(1, min(T, 10) + 1))
        ref = _near_windows_reference(a, d)
        seen += int(ref.sum())
        np.testing.assert_array_equal(ops._near_constant_windows(a, d), ref)
    assert seen > 0  # the cases do reach windows constant up to rounding


def test_window_range_is_ts_max_minus_ts_min_bit_for_bit():
    rng = np.random.default_rng(7)
    for _ in range(100):
        T, N = int(rng.integers(1, 60)), int(rng.integers(1, 40))
        a = rng.normal(size=(T, N)) * 10.0 ** rng.integers(-3, 3)
        a[rng.random((T, N)) < 0.05] = np.nan
        a[rng.random((T, N)) < 0.02] = np.inf
        a[rng.random((T, N)) < 0.05] = 1.7e308 * rng.choice([-1.0, 1.0])  # ranges that overflow to inf
        d = int(rng.integers(1, 30))
        with np.errstate(all="ignore"):
            ref = ops.ts_max(a, d) - ops.ts_min(a, d)
        np.testing.assert_array_equal(ops.window_range(a, d), ref)
