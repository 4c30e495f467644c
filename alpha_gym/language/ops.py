"""Vectorised numpy kernels of the alpha formula language.

Every panel is a float64 array of shape ``(T, N)`` = (days, stocks).  Every kernel

* is pure: it never writes into its inputs and always returns a freshly allocated
  float64 array;
* is causal: row ``t`` of the result depends only on input rows ``<= t``;
* never returns ``+-inf`` (they are mapped to NaN on the way out) and never lets a
  numpy ``RuntimeWarning`` escape.

The conventions (strict NaN rule, ``ddof=0``, rank scales, argmax direction and ties,
decay weights, finite-window EMA, zero-variance handling) are documented, with the
differences from the peer implementation ``alpha101v``, in ``docs/operators.md``.

Time-series kernels expect 2-D arrays and an integer window ``1 <= d <= 252``;
element-wise kernels also accept Python / numpy scalars (constants) and broadcast.

Algorithms (all pure numpy, no Python loop over rows or stocks):

* Rolling sums, products, max/min, weighted sums and moments use the van Herk /
  Gil-Werman block decomposition: the time axis is cut into blocks of ``d`` rows, and
  every window is "suffix of the previous block" + "prefix of the current block".  The
  prefix/suffix scans loop over the ``d`` positions of a block, each step being one
  vectorised operation over all blocks and stocks (O(T*N) work, O(d) numpy calls).
  Nothing is ever subtracted from a running total, so there is no cumulative-sum
  drift, and a NaN anywhere in a window propagates to that window (the strict rule)
  for free.
* Moments (std, cov, corr, skew, kurt, slope, decay) are accumulated on values centred
  on a block-local reference (the mean of the current block), which keeps the
  ``E[x^2] - E[x]^2`` cancellation harmless on price/volume scale data.
* ``ts_rank`` counts, for each of the ``d - 1`` lags, the cells below / equal to today
  (uint8 counters, row chunks that stay in cache): O(T*N*d) but branch-free.
* ``rank`` is one ``argsort`` per row plus vectorised tie groups.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable

import numpy as np

__all__ = [
    "KERNELS",
    "MAX_WINDOW",
    "delay", "ts_delta", "ts_sum", "ts_mean", "ts_std", "ts_max", "ts_min", "ts_product",
    "ts_rank", "ts_corr", "ts_cov", "ts_decay_linear", "ts_ema", "ts_skew", "ts_kurt",
    "ts_slope", "ts_argmax", "ts_argmin",
    "rank", "scale",
    "add", "sub", "mul", "div", "neg", "abs_", "log", "sign", "power", "signed_power",
    "minimum", "maximum", "lt", "gt", "le", "ge", "eq", "logical_or", "logical_and", "where",
]

#: Largest accepted window (one trading year).
MAX_WINDOW = 252

#: A window's variance counts as zero when it is below this fraction of its second
#: moment about the block reference.  The rounding noise of a constant window is at
#: most ~3*d*eps (< 1e-13 for d <= 252) of that moment, so 1e-11 leaves a 100x margin;
#: a real window below it would have lost all significant digits anyway.
ZERO_VAR_RTOL = 1e-11


# ---------------------------------------------------------------------------
# plumbing
# ---------------------------------------------------------------------------


def _kernel(fn: Callable[..., np.ndarray] | None = None, *, may_overflow: bool = True):
    """Decorator: run with floating-point warnings silenced and map +-inf to NaN.

    ``may_overflow=False`` marks kernels whose result is always an input value or a
    bounded statistic (max, min, delay, ranks, argmax): the final inf sweep is skipped.
    """

    def deco(f: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            with np.errstate(all="ignore"):
                out = np.asarray(f(*args, **kwargs), dtype=np.float64)
                if may_overflow:
                    np.copyto(out, np.nan, where=np.isinf(out))
            return out

        return wrapper

    return deco(fn) if fn is not None else deco


def _panel(x: object) -> np.ndarray:
    """float64 (T, N) view of ``x`` (never written to); +-inf is treated as missing."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"expected a (T, N) panel, got an array of shape {a.shape}")
    if np.isinf(a).any():
        a = np.where(np.isinf(a), np.nan, a)
    return a


def _pair(x: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    a = _panel(x)
    b = _panel(y)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    return a, b


def _window(d: object) -> int:
    d = operator.index(d)
    if not 1 <= d <= MAX_WINDOW:
        raise ValueError(f"window must be in [1, {MAX_WINDOW}], got {d}")
    return d


def _scalar_or_array(x: object) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _nan_panel(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, np.nan)


#: Time-series kernels work on column chunks of about this many cells so that their
#: temporaries stay cache-sized (2-3x faster on 3304 x 496 than one big pass).
_CHUNK_CELLS = 1 << 17
_MIN_CHUNK_COLS = 16


def _by_columns(core: Callable[..., np.ndarray], arrays: tuple[np.ndarray, ...], d: int,
                dtype: type = np.float64) -> np.ndarray:
    """Apply ``core(*column_chunks, d)`` chunk by chunk (each stock is independent)."""
    T, N = arrays[0].shape
    if T < d or N == 0:
        return np.full((T, N), np.nan if dtype is np.float64 else True, dtype=dtype)
    w = max(_MIN_CHUNK_COLS, _CHUNK_CELLS // T)
    if w >= N:
        return core(*arrays, d)
    out = np.empty((T, N), dtype=dtype)
    for c0 in range(0, N, w):
        out[:, c0:c0 + w] = core(*[a[:, c0:c0 + w] for a in arrays], d)
    return out


# -- van Herk / Gil-Werman block machinery ----------------------------------
#
# The time axis is cut into blocks of d rows (the tail padded with NaN).  The window
# ending at position j of block b is  suffix_{b-1}[j+1]  (+)  prefix_b[j]  (just
# prefix_b[d-1] when j = d-1), for any associative (+).  Scans loop over the d
# positions of a block, each step one ufunc call over all blocks x stocks.


def _blocks(a: np.ndarray, d: int) -> np.ndarray:
    """Owned (nb, d, N) copy of ``a``, tail rows padded with NaN."""
    T, N = a.shape
    nb = -(-T // d)
    b = np.empty((nb, d, N))
    flat = b.reshape(nb * d, N)
    flat[:T] = a
    flat[T:] = np.nan
    return b


def _from_blocks(b: np.ndarray, T: int) -> np.ndarray:
    nb, d, N = b.shape
    return b.reshape(nb * d, N)[:T]


def _scan(y: np.ndarray, uf: np.ufunc, reverse: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """Inclusive prefix (or suffix) ``uf``-scan along axis 1; in place unless ``out``."""
    dst = y if out is None else out
    d = y.shape[1]
    if reverse:
        if out is not None:
            dst[:, d - 1] = y[:, d - 1]
        for j in range(d - 2, -1, -1):
            uf(dst[:, j + 1], y[:, j], out=dst[:, j])
    else:
        if out is not None:
            dst[:, 0] = y[:, 0]
        for j in range(1, d):
            uf(dst[:, j - 1], y[:, j], out=dst[:, j])
    return dst


def _combine(pre: np.ndarray, suf_prev: np.ndarray, uf: np.ufunc) -> np.ndarray:
    """Window aggregates from block prefixes ``pre`` (nb, d, N) and the suffixes of the
    previous blocks ``suf_prev`` (nb-1, d, N).  Warm-up cells are NaN; overwrites ``pre``.
    """
    nb, d, _ = pre.shape
    if d > 1:
        if nb > 1:
            uf(suf_prev[:, 1:], pre[1:, : d - 1], out=pre[1:, : d - 1])
        pre[0, : d - 1] = np.nan
    return pre


def _window_sum(cur: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Window sums from block values ``cur`` and previous-block values ``prev`` (consumed)."""
    _scan(cur, np.add)
    _scan(prev, np.add, reverse=True)
    return _combine(cur, prev, np.add)


def _sliding_core(uf: np.ufunc) -> Callable[[np.ndarray, int], np.ndarray]:
    def core(a: np.ndarray, d: int) -> np.ndarray:
        y = _blocks(a, d)
        pre = _scan(y, uf, out=np.empty_like(y))
        _scan(y[:-1], uf, reverse=True)
        return _from_blocks(_combine(pre, y[:-1], uf), a.shape[0])

    return core


_SUM_CORE = _sliding_core(np.add)
_PROD_CORE = _sliding_core(np.multiply)
_MAX_CORE = _sliding_core(np.maximum)
_MIN_CORE = _sliding_core(np.minimum)


def _centre(a: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks centred on a block-local reference.

    Returns ``(cur, prev, ref)``: ``cur[b] = block_b - ref_b``; ``prev[b-1] = block_{b-1}
    - ref_b`` (the part of the windows ending in block b that lies in block b-1, centred
    on the *same* reference); ``ref`` (nb, 1, N) = the first row of each block.

    That row belongs to every window ending in its block, so the reference is always a
    member of the window (no cancellation in ``E[c^2] - E[c]^2``) and never a future
    row (bit-exact causality).  Where it is NaN every such window is NaN anyway, and
    the reference is set to 0.
    """
    y = _blocks(a, d)
    ref = y[:, :1].copy()
    np.copyto(ref, 0.0, where=np.isnan(ref))
    prev = y[:-1] - ref[1:]
    y -= ref
    return y, prev, ref


def _power_sums(cur: np.ndarray, prev: np.ndarray, kmax: int) -> list[np.ndarray]:
    """Window sums of c, c^2, ..., c^kmax (consumes ``cur`` and ``prev``)."""
    cs, ps = [cur], [prev]
    if kmax >= 2:
        cs.append(cur * cur)
        ps.append(prev * prev)
    if kmax >= 3:
        cs.append(cs[1] * cur)
        ps.append(ps[1] * prev)
    if kmax >= 4:
        cs.append(cs[1] * cs[1])
        ps.append(ps[1] * ps[1])
    return [_window_sum(c, p) for c, p in zip(cs, ps)]


def _central(sums: list[np.ndarray], d: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(delta, zero, raw) -> central moments.  Consumes ``sums``.

    Returns ``(m2, zero, [raw1, raw2, ...])`` where raw_k = E[c^k] (c = x - ref), m2 the
    population variance clipped at 0 and snapped to exactly 0 where ``zero`` (the
    window is constant up to rounding noise).
    """
    inv = 1.0 / d
    for s in sums:
        s *= inv
    delta, raw2 = sums[0], sums[1]
    m2 = delta * delta
    np.subtract(raw2, m2, out=m2)
    zero = m2 <= ZERO_VAR_RTOL * raw2
    np.maximum(m2, 0.0, out=m2)
    np.copyto(m2, 0.0, where=zero)
    return m2, zero, sums


def _std_core(a: np.ndarray, d: int) -> np.ndarray:
    m2, _, _ = _central(_power_sums(*_centre(a, d)[:2], 2), d)
    return _from_blocks(np.sqrt(m2, out=m2), a.shape[0])


def _skew_core(a: np.ndarray, d: int) -> np.ndarray:
    m2, zero, (delta, raw2, raw3) = _central(_power_sums(*_centre(a, d)[:2], 3), d)
    # m3 = raw3 - delta * (3 raw2 - 2 delta^2)
    t = delta * delta
    t *= -2.0
    raw2 *= 3.0
    t += raw2
    t *= delta
    np.subtract(raw3, t, out=raw3)
    t = np.sqrt(m2, out=t)
    t *= m2
    raw3 /= t
    np.copyto(raw3, np.nan, where=zero)
    return _from_blocks(raw3, a.shape[0])


def _kurt_core(a: np.ndarray, d: int) -> np.ndarray:
    m2, zero, (delta, raw2, raw3, raw4) = _central(_power_sums(*_centre(a, d)[:2], 4), d)
    # m4 = raw4 - delta * (4 raw3 - delta * (6 raw2 - 3 delta^2))
    u = delta * delta
    u *= -3.0
    raw2 *= 6.0
    u += raw2
    u *= delta
    raw3 *= 4.0
    np.subtract(raw3, u, out=u)
    u *= delta
    np.subtract(raw4, u, out=raw4)
    m2 *= m2
    raw4 /= m2
    raw4 -= 3.0
    np.copyto(raw4, np.nan, where=zero)
    return _from_blocks(raw4, a.shape[0])


def _cov_core_parts(a: np.ndarray, b: np.ndarray, d: int):
    cx, px, _ = _centre(a, d)
    cy, py, _ = _centre(b, d)
    sxy = _window_sum(cx * cy, px * py)
    vx, zx, (dx, _) = _central(_power_sums(cx, px, 2), d)
    vy, zy, (dy, _) = _central(_power_sums(cy, py, 2), d)
    sxy *= 1.0 / d
    dx *= dy
    sxy -= dx  # cov = E[cx cy] - E[cx] E[cy]
    zx |= zy
    return sxy, vx, vy, zx


def _cov_core(a: np.ndarray, b: np.ndarray, d: int) -> np.ndarray:
    cov, _, _, zero = _cov_core_parts(a, b, d)
    zero &= ~np.isnan(cov)
    np.copyto(cov, 0.0, where=zero)
    return _from_blocks(cov, a.shape[0])


def _corr_core(a: np.ndarray, b: np.ndarray, d: int) -> np.ndarray:
    cov, vx, vy, zero = _cov_core_parts(a, b, d)
    vx *= vy
    np.sqrt(vx, out=vx)
    cov /= vx
    np.copyto(cov, np.nan, where=zero)
    np.clip(cov, -1.0, 1.0, out=cov)
    return _from_blocks(cov, a.shape[0])


def _sum_and_age_sum(cur: np.ndarray, prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Window sums ``S = sum c`` and ``A = sum age * c`` (age = days ago, today = 0).

    Prefix part (block b, j <= j_t): age = j_t - j       -> j_t * P(c) - P(j c)
    Suffix part (block b-1, j > j_t): age = d + j_t - j  -> (d + j_t) * Q(c) - Q(j c)
    Consumes ``cur`` and ``prev``.
    """
    nb, d, _ = cur.shape
    jw = np.arange(d, dtype=np.float64)[None, :, None]
    p1 = _scan(cur * jw, np.add)
    p0 = _scan(cur, np.add)
    np.negative(p1, out=p1)
    p1 += p0 * jw  # age sums of the prefix part
    age = p1
    if d > 1 and nb > 1:
        q1 = _scan(prev * jw, np.add, reverse=True)
        q0 = _scan(prev, np.add, reverse=True)
        t = q0[:, 1:] * (d + jw[:, : d - 1])
        t -= q1[:, 1:]
        age[1:, : d - 1] += t
    else:
        q0 = prev
    age[0, : d - 1] = np.nan
    return _combine(p0, q0, np.add), age


def _decay_core(a: np.ndarray, d: int) -> np.ndarray:
    cur, prev, ref = _centre(a, d)
    s, age = _sum_and_age_sum(cur, prev)
    # sum (d - age) x / W,  W = d (d + 1) / 2,  x = c + ref
    s *= d
    s -= age
    s *= 2.0 / (d * (d + 1.0))
    s += ref
    return _from_blocks(s, a.shape[0])


def _slope_core(a: np.ndarray, d: int) -> np.ndarray:
    cur, prev, _ = _centre(a, d)
    s, age = _sum_and_age_sum(cur, prev)
    # time index i = d - 1 - age:  sum (i - (d-1)/2) x = (d-1)/2 * S - A
    s *= 0.5 * (d - 1)
    s -= age
    s *= 12.0 / (d * (d * d - 1.0))
    return _from_blocks(s, a.shape[0])


def _ema_core(a: np.ndarray, d: int) -> np.ndarray:
    q = (d - 1.0) / (d + 1.0)
    j = np.arange(d, dtype=np.float64)
    total = (q ** j).sum()
    qj = (q ** j)[None, :, None]
    y = _blocks(a, d)
    # prefix part: sum_{i <= j_t} q^(j_t - i) x_i = q^j_t * P(q^-i x)   (q^-i <= e^2)
    pre = y * (q ** -j)[None, :, None]
    _scan(pre, np.add)
    pre *= qj
    if y.shape[0] > 1:
        # suffix part: sum_{i > j_t} q^(d + j_t - i) x_i = q^(j_t + 1) * Q(q^(d-1-i) x)
        suf = y[:-1]
        suf *= (q ** (d - 1 - j))[None, :, None]
        _scan(suf, np.add, reverse=True)
        t = suf[:, 1:]
        t *= q * qj[:, : d - 1]
        pre[1:, : d - 1] += t
    pre[0, : d - 1] = np.nan
    pre *= 1.0 / total
    return _from_blocks(pre, a.shape[0])


def _argmax_core(a: np.ndarray, d: int) -> np.ndarray:
    """Days ago (today = 0) of the window maximum; ties -> the oldest occurrence."""
    y = _blocks(a, d)
    nb = y.shape[0]
    # prefix: running max + position of its earliest occurrence in the block
    pm = np.empty_like(y)
    pp = np.empty(y.shape, dtype=np.int16)
    pm[:, 0] = y[:, 0]
    pp[:, 0] = 0
    for j in range(1, d):
        newer = y[:, j] > pm[:, j - 1]  # strict: a tie keeps the older position
        np.maximum(pm[:, j - 1], y[:, j], out=pm[:, j])
        np.copyto(pp[:, j], pp[:, j - 1])
        np.copyto(pp[:, j], j, where=newer)
    jt = np.arange(d, dtype=np.float64)[None, :, None]
    out = jt - pp
    bad = np.isnan(pm)
    if d > 1 and nb > 1:
        z = y[:-1]
        sp = np.empty(z.shape, dtype=np.int16)
        sp[:, d - 1] = d - 1
        for j in range(d - 2, -1, -1):
            older = z[:, j] >= z[:, j + 1]  # z[:, j+1] already holds the suffix max
            np.maximum(z[:, j + 1], z[:, j], out=z[:, j])  # non-strict: older wins ties
            np.copyto(sp[:, j], sp[:, j + 1])
            np.copyto(sp[:, j], j, where=older)
        sv = z[:, 1:]
        use_suf = sv >= pm[1:, : d - 1]  # tie -> the suffix (older) part
        suf_days = (d + jt[:, : d - 1]) - sp[:, 1:]
        np.copyto(out[1:, : d - 1], suf_days, where=use_suf)
        bad[1:, : d - 1] |= np.isnan(sv)
    np.copyto(out, np.nan, where=bad)
    out[0, : d - 1] = np.nan
    return _from_blocks(out, a.shape[0])


def _nan_window_core(a: np.ndarray, d: int) -> np.ndarray:
    """bool: the window ending at t holds a NaN (or t < d - 1)."""
    T, N = a.shape
    nb = -(-T // d)
    y = np.empty((nb, d, N), dtype=bool)
    flat = y.reshape(nb * d, N)
    np.isnan(a, out=flat[:T])
    flat[T:] = True
    pre = _scan(y, np.logical_or, out=np.empty_like(y))
    _scan(y[:-1], np.logical_or, reverse=True)
    if d > 1:
        if nb > 1:
            np.logical_or(y[:-1, 1:], pre[1:, : d - 1], out=pre[1:, : d - 1])
        pre[0, : d - 1] = True
    return _from_blocks(pre, T)


# ---------------------------------------------------------------------------
# time-series kernels
# ---------------------------------------------------------------------------


@_kernel(may_overflow=False)
def delay(x, d):
    """``x[t - d]``; NaN for ``t < d``."""
    a = _panel(x)
    d = _window(d)
    out = np.empty(a.shape)
    out[:d] = np.nan
    out[d:] = a[: a.shape[0] - d]
    return out


@_kernel
def ts_delta(x, d):
    """``x[t] - x[t - d]``; NaN for ``t < d``."""
    a = _panel(x)
    d = _window(d)
    out = np.empty(a.shape)
    out[:d] = np.nan
    np.subtract(a[d:], a[: a.shape[0] - d], out=out[d:])
    return out


@_kernel
def ts_sum(x, d):
    """Sum of the last ``d`` rows (today included)."""
    return _by_columns(_SUM_CORE, (_panel(x),), _window(d))


@_kernel
def ts_mean(x, d):
    """Mean of the last ``d`` rows."""
    d = _window(d)
    out = _by_columns(_SUM_CORE, (_panel(x),), d)
    out *= 1.0 / d
    return out


@_kernel(may_overflow=False)
def ts_max(x, d):
    """Maximum of the last ``d`` rows."""
    return _by_columns(_MAX_CORE, (_panel(x),), _window(d))


@_kernel(may_overflow=False)
def ts_min(x, d):
    """Minimum of the last ``d`` rows."""
    return _by_columns(_MIN_CORE, (_panel(x),), _window(d))


@_kernel
def ts_product(x, d):
    """Product of the last ``d`` rows (exact zeros and signs; overflow -> NaN)."""
    return _by_columns(_PROD_CORE, (_panel(x),), _window(d))


@_kernel
def ts_std(x, d):
    """Population (ddof=0) standard deviation of the last ``d`` rows; 0 on a constant window."""
    return _by_columns(_std_core, (_panel(x),), _window(d))


@_kernel
def ts_skew(x, d):
    """Population skewness ``m3 / m2**1.5`` of the last ``d`` rows; NaN on zero variance."""
    return _by_columns(_skew_core, (_panel(x),), _window(d))


@_kernel
def ts_kurt(x, d):
    """Population excess kurtosis ``m4 / m2**2 - 3``; NaN on zero variance."""
    return _by_columns(_kurt_core, (_panel(x),), _window(d))


@_kernel
def ts_cov(x, y, d):
    """Population (ddof=0) covariance of the last ``d`` rows; 0 if either window is constant."""
    return _by_columns(_cov_core, _pair(x, y), _window(d))


@_kernel
def ts_corr(x, y, d):
    """Pearson correlation of the last ``d`` rows; NaN if either window has zero variance."""
    return _by_columns(_corr_core, _pair(x, y), _window(d))


@_kernel
def ts_decay_linear(x, d):
    """Linearly decaying weighted mean: weights d (today), d-1, ..., 1 (oldest), summing to 1."""
    return _by_columns(_decay_core, (_panel(x),), _window(d))


@_kernel
def ts_slope(x, d):
    """OLS slope (per day) of the last ``d`` rows on the time index 0..d-1; NaN for d == 1."""
    a = _panel(x)
    d = _window(d)
    if d == 1:
        return _nan_panel(a.shape)
    return _by_columns(_slope_core, (a,), d)


@_kernel
def ts_ema(x, d):
    """Finite-window EMA: weight (1-alpha)**k on the row k days ago (k < d), alpha = 2/(d+1), normalised."""
    a = _panel(x)
    d = _window(d)
    if d == 1:
        return a.copy()
    return _by_columns(_ema_core, (a,), d)


@_kernel(may_overflow=False)
def ts_argmax(x, d):
    """Days since the window maximum (today = 0, in [0, d-1]); ties -> the oldest (largest)."""
    return _by_columns(_argmax_core, (_panel(x),), _window(d))


@_kernel(may_overflow=False)
def ts_argmin(x, d):
    """Days since the window minimum (today = 0, in [0, d-1]); ties -> the oldest (largest)."""
    return _by_columns(_argmax_core, (np.negative(_panel(x)),), _window(d))


#: cells per row chunk of ``ts_rank`` (its working set stays in cache)
_RANK_CHUNK_CELLS = 1 << 15


@_kernel(may_overflow=False)
def ts_rank(x, d):
    """Rank of today within the last ``d`` rows, in [0, 1].

    ``(count below + 0.5 * count of other equal values) / (d - 1)`` = (average-tie
    1-based rank - 1) / (d - 1).  NaN for ``d == 1`` (0/0, as alpha101v).
    """
    a = _panel(x)
    d = _window(d)
    T, N = a.shape
    if d == 1 or T < d:
        return _nan_panel(a.shape)
    out = np.empty(a.shape)
    out[: d - 1] = np.nan
    rows = max(1, _RANK_CHUNK_CELLS // max(N, 1))
    scale_ = 0.5 / (d - 1)
    less = np.empty((rows, N), dtype=np.uint8)
    leq = np.empty((rows, N), dtype=np.uint8)
    buf = np.empty((rows, N), dtype=bool)
    for r0 in range(d - 1, T, rows):
        r1 = min(T, r0 + rows)
        n = r1 - r0
        last = a[r0:r1]
        lo, le_, bf = less[:n], leq[:n], buf[:n]
        lo.fill(0)
        le_.fill(0)
        bu8 = bf.view(np.uint8)
        for k in range(1, d):
            cur = a[r0 - k: r1 - k]
            np.less(cur, last, out=bf)
            np.add(lo, bu8, out=lo)
            np.less_equal(cur, last, out=bf)
            np.add(le_, bu8, out=le_)
        # (below + 0.5 * other equal) / (d-1) = 0.5 * (less + leq) / (d-1)
        blk = out[r0:r1]
        np.add(lo, le_, out=blk, dtype=np.float64)
        blk *= scale_
    np.copyto(out, np.nan, where=_by_columns(_nan_window_core, (a,), d, dtype=np.bool_))
    return out


# ---------------------------------------------------------------------------
# cross-sectional kernels
# ---------------------------------------------------------------------------


@_kernel
def rank(x):
    """Per-row average-tie rank of the non-NaN cells scaled to [0, 1] as (r-1)/(n-1).

    NaN cells stay NaN; a row with a single valid cell is NaN (0/0, as alpha101v).
    """
    a = _panel(x)
    T, N = a.shape
    out = _nan_panel(a.shape)
    if T == 0 or N == 0:
        return out
    valid = ~np.isnan(a)
    n = valid.sum(axis=1)
    key = np.where(valid, a, np.inf)
    order = np.argsort(key, axis=1)
    flat = order + (np.arange(T, dtype=order.dtype) * N)[:, None]
    flat = flat.ravel()
    s = key.ravel().take(flat).reshape(T, N)
    idx = np.arange(N, dtype=np.float64)
    eq_prev = s[:, 1:] == s[:, :-1]  # tie with the previous sorted cell
    if (eq_prev & (s[:, 1:] != np.inf)).any():  # a tie between valid cells (NaN -> +inf)
        ipos = np.arange(N, dtype=np.int64)
        is_start = np.ones((T, N), dtype=bool)
        is_start[:, 1:] = ~eq_prev
        is_end = np.ones((T, N), dtype=bool)
        is_end[:, :-1] = ~eq_prev
        start = np.maximum.accumulate(np.where(is_start, ipos, 0), axis=1)
        end = np.minimum.accumulate(np.where(is_end, ipos, N)[:, ::-1], axis=1)[:, ::-1]
        pos = (start + end) * 0.5
    else:
        pos = np.broadcast_to(idx, (T, N))
    r = pos / (n - 1.0)[:, None]
    out.ravel()[flat] = r.ravel()
    out[~valid] = np.nan
    return out


@_kernel
def scale(x, a=1.0):
    """``x * a / sum(|x|)`` per row (NaN cells skipped); NaN where the row's sum |x| is 0."""
    v = _panel(x)
    total = np.sum(np.abs(v), axis=1, where=~np.isnan(v), keepdims=True)
    return v * (float(a) / total)


# ---------------------------------------------------------------------------
# element-wise kernels (scalars accepted, numpy broadcasting)
# ---------------------------------------------------------------------------


@_kernel
def add(x, y):
    return np.add(_scalar_or_array(x), _scalar_or_array(y))


@_kernel
def sub(x, y):
    return np.subtract(_scalar_or_array(x), _scalar_or_array(y))


@_kernel
def mul(x, y):
    return np.multiply(_scalar_or_array(x), _scalar_or_array(y))


@_kernel
def div(x, y):
    """``x / y``; division by zero -> NaN."""
    return np.divide(_scalar_or_array(x), _scalar_or_array(y))  # +-inf -> NaN in _kernel


@_kernel
def neg(x):
    return np.negative(_scalar_or_array(x))


@_kernel
def abs_(x):
    return np.abs(_scalar_or_array(x))


@_kernel
def log(x):
    """Natural log; NaN for x <= 0."""
    return np.log(_scalar_or_array(x))  # log(0) = -inf -> NaN, log(<0) = NaN


@_kernel
def sign(x):
    return np.sign(_scalar_or_array(x))


@_kernel
def power(x, y):
    """``x ** y``; NaN where undefined (negative base with non-integer exponent, 0**-k)."""
    return np.power(_scalar_or_array(x), _scalar_or_array(y))


@_kernel
def signed_power(x, y):
    """``sign(x) * |x| ** y``."""
    xa = _scalar_or_array(x)
    return np.sign(xa) * np.power(np.abs(xa), _scalar_or_array(y))


@_kernel
def minimum(x, y):
    """Element-wise minimum (NaN if either is NaN)."""
    return np.minimum(_scalar_or_array(x), _scalar_or_array(y))


@_kernel
def maximum(x, y):
    """Element-wise maximum (NaN if either is NaN)."""
    return np.maximum(_scalar_or_array(x), _scalar_or_array(y))


def _nan_either(xa: np.ndarray, ya: np.ndarray) -> np.ndarray:
    return np.isnan(xa) | np.isnan(ya)


def _compare(op: np.ufunc, x, y) -> np.ndarray:
    xa = _scalar_or_array(x)
    ya = _scalar_or_array(y)
    return np.where(_nan_either(xa, ya), np.nan, op(xa, ya).astype(np.float64))


@_kernel
def lt(x, y):
    """1.0 where x < y else 0.0 (NaN if either is NaN)."""
    return _compare(np.less, x, y)


@_kernel
def gt(x, y):
    """1.0 where x > y else 0.0 (NaN if either is NaN)."""
    return _compare(np.greater, x, y)


@_kernel
def le(x, y):
    """1.0 where x <= y else 0.0 (NaN if either is NaN)."""
    return _compare(np.less_equal, x, y)


@_kernel
def ge(x, y):
    """1.0 where x >= y else 0.0 (NaN if either is NaN)."""
    return _compare(np.greater_equal, x, y)


@_kernel
def eq(x, y):
    """1.0 where x == y else 0.0 (NaN if either is NaN)."""
    return _compare(np.equal, x, y)


def _truthy(op: np.ufunc, x, y) -> np.ndarray:
    xa = _scalar_or_array(x)
    ya = _scalar_or_array(y)
    res = op(xa != 0, ya != 0).astype(np.float64)
    return np.where(_nan_either(xa, ya), np.nan, res)


@_kernel
def logical_or(x, y):
    """1.0 if x != 0 or y != 0 else 0.0 (NaN if either is NaN)."""
    return _truthy(np.logical_or, x, y)


@_kernel
def logical_and(x, y):
    """1.0 if x != 0 and y != 0 else 0.0 (NaN if either is NaN)."""
    return _truthy(np.logical_and, x, y)


@_kernel
def where(c, a, b):
    """``a`` where ``c != 0`` else ``b``; NaN where ``c`` is NaN."""
    ca = _scalar_or_array(c)
    res = np.where(ca != 0, _scalar_or_array(a), _scalar_or_array(b))
    return np.where(np.isnan(ca), np.nan, res)


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------

KERNELS: dict[str, Callable[..., np.ndarray]] = {
    "delay": delay,
    "ts_delta": ts_delta,
    "ts_sum": ts_sum,
    "ts_mean": ts_mean,
    "ts_std": ts_std,
    "ts_max": ts_max,
    "ts_min": ts_min,
    "ts_product": ts_product,
    "ts_rank": ts_rank,
    "ts_corr": ts_corr,
    "ts_cov": ts_cov,
    "ts_decay_linear": ts_decay_linear,
    "ts_ema": ts_ema,
    "ts_skew": ts_skew,
    "ts_kurt": ts_kurt,
    "ts_slope": ts_slope,
    "ts_argmax": ts_argmax,
    "ts_argmin": ts_argmin,
    "rank": rank,
    "scale": scale,
    "add": add,
    "sub": sub,
    "mul": mul,
    "div": div,
    "neg": neg,
    "abs": abs_,
    "log": log,
    "sign": sign,
    "power": power,
    "signed_power": signed_power,
    "min": minimum,
    "max": maximum,
    "lt": lt,
    "gt": gt,
    "le": le,
    "ge": ge,
    "eq": eq,
    "or": logical_or,
    "and": logical_and,
    "where": where,
}
