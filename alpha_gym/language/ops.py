"""Vectorised numpy kernels of the alpha formula language.

Every panel is a float64 array of shape ``(T, N)`` = (days, stocks).  Every kernel

* is pure: it never writes into its inputs and always returns a freshly allocated
  float64 array;
* is causal, bit for bit: row ``t`` of the result depends only on input rows ``<= t``;
* never returns ``+-inf`` (mapped to NaN) and never lets a numpy ``RuntimeWarning``
  escape.  Time-series and cross-sectional kernels treat a ``+-inf`` input as missing.

The conventions (strict NaN rule, ``ddof=0``, rank scales, argmax direction and ties,
decay weights, finite-window EMA, zero-variance handling) and the differences from
the peer implementation ``alpha101v`` are documented in ``docs/operators.md``. The operator
registry (``operators.py``) names each kernel under its language name (``KERNELS`` there).

Time-series kernels expect 2-D arrays and an integer window ``1 <= d <= 252``;
element-wise kernels also accept Python / numpy scalars (constants) and broadcast.

Algorithms (pure numpy; no Python loop over rows or stocks):

* Rolling sums, products, max/min, linearly weighted sums, EMA, argmax and moments
  use the van Herk / Gil-Werman block decomposition: the time axis is cut into blocks
  of ``d`` rows, and every window is "suffix of the previous block" (+) "prefix of the
  current block".  Blocks are stored position-major, ``(d, n_blocks, stocks)``, so a
  scan is ``d`` numpy calls over contiguous slabs: O(T*N) work whatever ``d``.
  Nothing is ever subtracted from a running total (no cumulative-sum drift), and a
  NaN reaches exactly the windows that contain it (the strict rule for free).
* Moments (std, cov, corr, skew, kurt, slope, decay) are accumulated on values centred
  on the first row of each block, which is a member of every window ending in that
  block: constant windows give exact zeros, and ``E[c^2] - E[c]^2`` loses at most
  ``log10(d)`` digits (Samuelson's inequality), whatever the price level.
* Work is done on column chunks whose temporaries stay cache-sized.
* ``ts_rank`` counts, for each of the ``d - 1`` lags, the cells below / not above
  today (uint8 counters over cache-sized row chunks): O(T*N*d) but branch-free.
* ``rank`` is one sort per row (packed int64 keys, see :func:`_rank_packed`),
  ties and near-ties handled only where they are, and a flat scatter.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import operator
import os
import threading
from typing import Callable

import numpy as np

__all__ = [
    "MAX_WINDOW",
    "delay", "ts_delta", "ts_sum", "ts_mean", "ts_std", "ts_max", "ts_min", "ts_product",
    "ts_rank", "ts_corr", "ts_cov", "ts_decay_linear", "ts_ema", "ts_skew", "ts_kurt",
    "ts_slope", "ts_argmax", "ts_argmin",
    "rank", "scale", "ind_neutralize",
    "add", "sub", "mul", "div", "neg", "abs_", "log", "sign", "power", "signed_power",
    "minimum", "maximum", "lt", "gt", "le", "ge", "eq", "ne", "logical_or", "logical_and", "where",
]

#: Largest accepted window (one trading year).
MAX_WINDOW = 252

#: corr / skew / kurt are NaN where a window's variance is at most this fraction of its
#: second moment about the block reference.  A constant window gives an exact 0 (the
#: reference is one of its values); for any other window the variance is at least
#: 1/d of that moment (Samuelson), while rounding noise is below ~3*d*eps (< 1e-13),
#: so this threshold only guards against float noise, never a real window.
ZERO_VAR_RTOL = 1e-11

#: ``rank`` ties values whose float64 bit patterns are at most this many units in the last
#: place apart (a relative tolerance of 2**-30 to 2**-31, about 1e-9), chained along the
#: sorted row: rounding noise is not an order (docs/operators.md, "Constants up to rounding").
TIE_ULPS = 1 << 22

#: ``x + y`` (and ``x - y``, ``ts_delta``, the comparisons) is exactly 0 where it is at most this
#: fraction of the larger operand: a difference of equal quantities computed two ways is
#: rounding noise, whatever the operands' size.
CANCEL_RTOL = 1e-9

#: Shortest window with a non-degenerate statistic: skewness is identically 0 on 2 values,
#: excess kurtosis is -2 on 2 and -1.5 on 3; shorter windows give NaN.
MIN_MOMENT_WINDOW = {"ts_skew": 3, "ts_kurt": 4}


# ---------------------------------------------------------------------------
# plumbing
# ---------------------------------------------------------------------------


#: Threads the heavy kernels split their independent parts over (column chunks of the time-series kernels,
#: row segments of ``rank`` and ``ts_rank``): 1 unless `kernel_threads` says otherwise. numpy drops the GIL in
#: its loops, so two threads share one kernel's slabs; each part is computed exactly as on one thread, so
#: results are bit-identical whatever the count.
_THREADS = {"n": 1, "pool": None, "size": 0, "pid": None}
_MAX_THREADS_PER_CORE = 8      # kernel_threads' bound: threads past the cores only wait their turn
_IN_PART = threading.local()   # a part running on the pool does not split again (no nested waits on the pool)


@contextlib.contextmanager
def kernel_threads(n: int):
    """Inside the block, the heavy kernels split their work over `n` threads (1 = no pool). Not itself
    thread-safe: set it around a whole computation, not from several threads at once."""
    from alpha_gym.ranges import usable_cores
    most = _MAX_THREADS_PER_CORE * usable_cores()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= most:
        raise ValueError(f"kernel threads must be an integer from 1 to {most} ({_MAX_THREADS_PER_CORE} a usable core: "
                         f"more only queue on the pool), got {n!r}")
    before = _THREADS["n"]
    _THREADS["n"] = n
    try:
        yield
    finally:
        _THREADS["n"] = before


def _split_threads() -> int:
    """How many threads a kernel may split over here (1 inside a part already running on the pool)."""
    return 1 if getattr(_IN_PART, "on", False) else _THREADS["n"]


def _run_parts(work: Callable[[int, int], None], bounds: list[tuple[int, int]]) -> None:
    """``work(lo, hi)`` for every bound pair: on the pool when the kernel threads are > 1, else in turn."""
    n = _split_threads()
    if n <= 1 or len(bounds) <= 1:
        for lo, hi in bounds:
            work(lo, hi)
        return
    pool = _THREADS["pool"]
    # grown once to the largest count asked for, then kept; made anew in a forked child (its threads did not
    # survive the fork, and a pool that thinks it has them would never run a part)
    if pool is None or _THREADS["size"] < n or _THREADS["pid"] != os.getpid():
        from concurrent.futures import ThreadPoolExecutor
        if pool is not None and _THREADS["pid"] == os.getpid():
            pool.shutdown(wait=False)
        pool = _THREADS["pool"] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="alpha-gym-kernel")
        _THREADS["size"], _THREADS["pid"] = n, os.getpid()

    def part(b):
        _IN_PART.on = True
        try:
            work(*b)
        finally:
            _IN_PART.on = False
    # each part runs in a copy of the caller's context: numpy's error state (the kernels' silenced warnings)
    # lives in a context variable, which a pool thread would not otherwise see
    for f in [pool.submit(contextvars.copy_context().run, part, b) for b in bounds]:
        f.result()                      # in order: the first error is raised, as on one thread


#: A kernel splits over threads only above this much work (cells x quantities): below it the hand-off to the
#: pool costs more than the second thread gives back (us46's ts_sum: 0.39 ms on one thread, 0.59 ms split).
_MIN_SPLIT_CELLS = 1 << 19


def _segments(size: int, parts: int, step: int = 1) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges covering ``range(size)`` in `parts` near-equal pieces, cut at multiples of `step`."""
    units = -(-size // step)
    parts = max(1, min(parts, units))
    cuts = [min(size, (units * i // parts) * step) for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:]) if hi > lo]


def _kernel(fn: Callable[..., np.ndarray] | None = None, *, sweep_inf: bool = True):
    """Decorator: run with floating-point warnings silenced and map +-inf to NaN.

    ``sweep_inf=False`` marks kernels that already guarantee a finite-or-NaN result
    (the chunked time-series kernels clean each chunk while it is in cache; max, min,
    delay and the ranks only return input values or bounded statistics).
    """

    def deco(f: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            with np.errstate(all="ignore"):
                out = np.asarray(f(*args, **kwargs), dtype=np.float64)
                if sweep_inf:
                    np.copyto(out, np.nan, where=np.isinf(out))
            return out

        return wrapper

    return deco(fn) if fn is not None else deco


def _panel(x: object, clean: bool = True) -> np.ndarray:
    """float64 (T, N) view of ``x`` (never written to).

    With ``clean`` +-inf is replaced by NaN (inf is treated as missing everywhere);
    the chunked kernels pass ``clean=False`` and clean each chunk in :func:`_blocks`.
    """
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"expected a (T, N) panel, got an array of shape {a.shape}")
    if clean and np.isinf(a).any():
        a = np.where(np.isinf(a), np.nan, a)
    return a


def _pair(x: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    a = _panel(x, clean=False)
    b = _panel(y, clean=False)
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


#: Time-series kernels work on column chunks: a chunk's stacked temporaries (k
#: quantities x T rows x w columns) should stay around this many cells, so that they
#: are cache-sized and recycled by the allocator ...
_CHUNK_CELLS = 1 << 19
#: ... but each scan step (one numpy call over all blocks of a chunk) should still see
#: at least this many cells, or the per-call overhead dominates (large windows).
_MIN_STEP_CELLS = 1 << 11
_MIN_CHUNK_COLS = 16


def _by_columns(core: Callable[..., None], arrays: tuple[np.ndarray, ...], d: int,
                dtype: type = np.float64, k: int = 1) -> np.ndarray:
    """Run ``core(*column_chunks, d, dest)`` over column chunks (stocks are independent).

    ``core`` writes its (T, w) result into ``dest``, a view of the returned array; ``k``
    is the number of stacked quantities the core scans at once (sizes the chunks).
    """
    T, N = arrays[0].shape
    if T < d or N == 0:
        return np.full((T, N), np.nan if dtype is np.float64 else True, dtype=dtype)
    out = np.empty((T, N), dtype=dtype)
    nb = -(-T // d)
    w = max(_MIN_CHUNK_COLS, _CHUNK_CELLS // (k * T), -(-_MIN_STEP_CELLS // (k * nb)))
    threads = _split_threads() if T * N * k >= _MIN_SPLIT_CELLS else 1
    if threads > 1:   # at least one chunk a thread, of near-equal widths (columns are independent: same bits)
        w = min(w, -(-N // threads))
        n_chunks = -(-N // w)
        n_chunks += -n_chunks % threads
        bounds = _segments(N, n_chunks)
    else:
        bounds = [(c0, min(N, c0 + w)) for c0 in range(0, N, w)]
    _run_parts(lambda lo, hi: core(*[a[:, lo:hi] for a in arrays], d, out[:, lo:hi]), bounds)
    return out


# -- van Herk / Gil-Werman block machinery ----------------------------------
#
# The time axis is cut into nb blocks of d rows, stored POSITION-MAJOR as (d, nb, w):
# y[j, b] is row b*d + j, so every scan step y[j] is one contiguous slab.  The tail
# block is padded with NaN.  The window ending at position j of block b is
#     suffix_{b-1}[j+1]  (+)  prefix_b[j]        (just prefix_b[d-1] when j = d-1)
# for any associative (+): O(1) work per cell whatever d, and nothing is ever
# subtracted from a running total (no drift; a NaN reaches exactly its windows).


def _blocks(a: np.ndarray, d: int) -> np.ndarray:
    """Owned (d, nb, w) position-major copy of ``a`` (T, w); NaN padding, inf -> NaN."""
    T, w = a.shape
    nb = -(-T // d)
    nf, r = divmod(T, d)
    b = np.empty((d, nb, w))
    if nf:
        b[:, :nf] = a[: nf * d].reshape(nf, d, w).transpose(1, 0, 2)
    if r:
        b[:r, nf] = a[nf * d:]
        b[r:, nf] = np.nan
    inf = np.isinf(b)
    if inf.any():
        b[inf] = np.nan
    return b


def _unblock(b: np.ndarray, dest: np.ndarray, sweep_inf: bool = True) -> None:
    """Write the (d, nb, w) block array back to ``dest`` (T, w), mapping +-inf to NaN."""
    if sweep_inf:
        np.copyto(b, np.nan, where=np.isinf(b))
    d = b.shape[0]
    T, w = dest.shape
    nf, r = divmod(T, d)
    if nf:
        np.reshape(dest[: nf * d], (nf, d, w), copy=False)[...] = b[:, :nf].transpose(1, 0, 2)
    if r:
        dest[nf * d:] = b[:r, nf]


def _scan(y: np.ndarray, uf: np.ufunc, reverse: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """Inclusive prefix (or suffix) ``uf``-scan along axis 0; in place unless ``out``.

    One ufunc call per block position, each over a contiguous slab of all blocks.
    """
    dst = y if out is None else out
    d = y.shape[0]
    if reverse:
        if out is not None:
            dst[d - 1] = y[d - 1]
        for j in range(d - 2, -1, -1):
            uf(dst[j + 1], y[j], out=dst[j])
    else:
        if out is not None:
            dst[0] = y[0]
        for j in range(1, d):
            uf(dst[j - 1], y[j], out=dst[j])
    return dst


def _combine(pre: np.ndarray, suf: np.ndarray, uf: np.ufunc, warmup=np.nan) -> np.ndarray:
    """Window aggregates, in place in ``pre``.

    ``pre`` (d, ..., nb, w): prefix aggregates of every block; ``suf`` (d, ..., nb-1, w):
    suffix aggregates of blocks 0..nb-2.  Warm-up cells get ``warmup``.
    """
    d, nb = pre.shape[0], pre.shape[-2]
    if d > 1:
        if nb > 1:
            tgt = pre[: d - 1, ..., 1:, :]
            uf(suf[1:], tgt, out=tgt)
        pre[: d - 1, ..., 0, :] = warmup
    return pre


def _sliding_core(uf: np.ufunc, sweep_inf: bool) -> Callable[..., None]:
    def core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
        y = _blocks(a, d)
        pre = _scan(y, uf, out=np.empty_like(y))
        suf = y[:, :-1]
        _scan(suf, uf, reverse=True)
        _unblock(_combine(pre, suf, uf), dest, sweep_inf)

    return core


_SUM_CORE = _sliding_core(np.add, True)
_PROD_CORE = _sliding_core(np.multiply, True)
_MAX_CORE = _sliding_core(np.maximum, False)
_MIN_CORE = _sliding_core(np.minimum, False)


def _range_core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
    """``ts_max - ts_min`` from one block copy: both scans, one subtraction, one write back."""
    y = _blocks(a, d)
    hi = _scan(y, np.maximum, out=np.empty_like(y))
    lo = _scan(y, np.minimum, out=np.empty_like(y))
    suf = y[:, :-1]
    suf_lo = _scan(suf, np.minimum, reverse=True, out=np.empty_like(suf))
    _scan(suf, np.maximum, reverse=True)
    _combine(hi, suf, np.maximum)
    _combine(lo, suf_lo, np.minimum)
    np.subtract(hi, lo, out=hi)
    _unblock(hi, dest, sweep_inf=False)


def _centred(arrays: tuple[np.ndarray, ...], d: int, k: int):
    """Stacks of block values centred on a block-local reference.

    Returns ``(C, P, refs)``: ``C`` (d, k, nb, w) with ``C[:, i] = block_b - ref_b`` for
    the i-th input (slots ``len(arrays)..k-1`` are left for the caller), ``P`` (d, k,
    nb-1, w) the same for block b-1 centred on ``ref_b`` (the part of the windows
    ending in block b that lies in the previous block), ``refs`` the (nb, w) references.

    The reference of block b is its first row.  That row belongs to every window
    ending in block b, so it is a member of the window: a constant window centres to
    exact zeros, and by Samuelson's inequality E[c^2] <= d * var, so ``E[c^2] - E[c]^2``
    loses at most log10(d) digits.  It is never a future row (bit-exact causality).
    Where it is NaN all those windows are NaN anyway and the reference is 0.
    """
    ys = [_blocks(a, d) for a in arrays]
    _, nb, w = ys[0].shape
    C = np.empty((d, k, nb, w))
    P = np.empty((d, k, nb - 1, w))
    refs = []
    for i, y in enumerate(ys):
        ref = y[0].copy()
        np.copyto(ref, 0.0, where=np.isnan(ref))
        np.subtract(y, ref, out=C[:, i])
        np.subtract(y[:, :-1], ref[1:], out=P[:, i])
        refs.append(ref)
    return C, P, refs


def _window_sums(C: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Window sums of every stacked quantity (consumes ``C`` and ``P``)."""
    _scan(C, np.add)
    _scan(P, np.add, reverse=True)
    return _combine(C, P, np.add)


def _powers(C: np.ndarray, P: np.ndarray, kmax: int) -> None:
    """Fill slots 1..kmax-1 of the stacks with powers 2..kmax of slot 0."""
    for X in (C, P):
        c = X[:, 0]
        if kmax >= 2:
            np.multiply(c, c, out=X[:, 1])
        if kmax >= 3:
            np.multiply(X[:, 1], c, out=X[:, 2])
        if kmax >= 4:
            np.multiply(X[:, 1], X[:, 1], out=X[:, 3])


def _std_core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
    C, P, _ = _centred((a,), d, 2)
    _powers(C, P, 2)
    S = _window_sums(C, P)
    s1, s2 = S[:, 0], S[:, 1]
    # d^2 var = d S2 - S1^2  (>= 0 up to rounding; exactly 0 on a constant window)
    np.multiply(s1, s1, out=s1)
    s2 *= d
    s2 -= s1
    np.maximum(s2, 0.0, out=s2)
    np.sqrt(s2, out=s2)
    s2 *= 1.0 / d
    _unblock(s2, dest)


def _moments(S: np.ndarray, d: int, kmax: int):
    """Central moments from stacked window power sums: ``(delta, m2, zero, raws)``."""
    inv = 1.0 / d
    raws = [S[:, i] for i in range(kmax)]
    for r in raws:
        r *= inv
    delta, raw2 = raws[0], raws[1]
    m2 = delta * delta
    np.subtract(raw2, m2, out=m2)
    zero = m2 <= ZERO_VAR_RTOL * raw2
    return delta, m2, zero, raws


def _skew_core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
    C, P, _ = _centred((a,), d, 3)
    _powers(C, P, 3)
    delta, m2, zero, (_, raw2, raw3) = _moments(_window_sums(C, P), d, 3)
    # m3 = raw3 - delta * (3 raw2 - 2 delta^2)
    t = delta * delta
    t *= -2.0
    raw2 *= 3.0
    t += raw2
    t *= delta
    raw3 -= t
    np.sqrt(m2, out=t)
    t *= m2
    raw3 /= t
    np.copyto(raw3, np.nan, where=zero)
    _unblock(raw3, dest)


def _kurt_core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
    C, P, _ = _centred((a,), d, 4)
    _powers(C, P, 4)
    delta, m2, zero, (_, raw2, raw3, raw4) = _moments(_window_sums(C, P), d, 4)
    # m4 = raw4 - delta * (4 raw3 - delta * (6 raw2 - 3 delta^2))
    u = delta * delta
    u *= -3.0
    raw2 *= 6.0
    u += raw2
    u *= delta
    raw3 *= 4.0
    np.subtract(raw3, u, out=u)
    u *= delta
    raw4 -= u
    m2 *= m2
    raw4 /= m2
    raw4 -= 3.0
    np.copyto(raw4, np.nan, where=zero)
    _unblock(raw4, dest)


def _cov_core(a: np.ndarray, b: np.ndarray, d: int, dest: np.ndarray) -> None:
    C, P, _ = _centred((a, b), d, 3)
    for X in (C, P):
        np.multiply(X[:, 0], X[:, 1], out=X[:, 2])
    S = _window_sums(C, P)
    sx, sy, sxy = S[:, 0], S[:, 1], S[:, 2]
    # d^2 cov = d Sxy - Sx Sy   (exactly 0 when either window is constant)
    sx *= sy
    sxy *= d
    sxy -= sx
    sxy *= 1.0 / (d * d)
    _unblock(sxy, dest)


def _corr_core(a: np.ndarray, b: np.ndarray, d: int, dest: np.ndarray) -> None:
    C, P, _ = _centred((a, b), d, 5)
    for X in (C, P):
        np.multiply(X[:, 0], X[:, 0], out=X[:, 2])
        np.multiply(X[:, 1], X[:, 1], out=X[:, 3])
        np.multiply(X[:, 0], X[:, 1], out=X[:, 4])
    S = _window_sums(C, P)
    sx, sy, sxx, syy, sxy = (S[:, i] for i in range(5))
    # d^2 var = d Sxx - Sx^2, d^2 cov = d Sxy - Sx Sy
    sxx *= d
    syy *= d
    sxy *= d
    t = sx * sy
    sxy -= t
    np.multiply(sx, sx, out=t)
    np.subtract(sxx, t, out=sx)  # sx <- d^2 var_x
    np.multiply(sy, sy, out=t)
    np.subtract(syy, t, out=sy)  # sy <- d^2 var_y
    zero = sx <= ZERO_VAR_RTOL * sxx
    zero |= sy <= ZERO_VAR_RTOL * syy
    sx *= sy
    np.sqrt(sx, out=sx)
    sxy /= sx
    np.copyto(sxy, np.nan, where=zero)
    np.clip(sxy, -1.0, 1.0, out=sxy)
    _unblock(sxy, dest, sweep_inf=False)


def _linear_weight_core(alpha: Callable[[np.ndarray, int], np.ndarray],
                        gamma: Callable[[np.ndarray, int], np.ndarray],
                        scale_: Callable[[int], float], add_ref: bool) -> Callable[..., None]:
    """Window sums with weights linear in the row index.

    For the window ending at position j_t of block b, the weight of row i of block b
    (i <= j_t) is ``alpha(j_t) + i`` and that of row i of block b-1 (i > j_t) is
    ``gamma(j_t) + i``; the result is ``scale * sum + (ref if add_ref)``.  Prefix part:
    ``alpha * P(c) + P(i c)``; suffix part: ``gamma * Q(c) + Q(i c)``.
    """

    def core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
        C, P, (ref,) = _centred((a,), d, 2)
        jw = np.arange(d, dtype=np.float64)[:, None, None]
        np.multiply(C[:, 0], jw, out=C[:, 1])
        np.multiply(P[:, 0], jw, out=P[:, 1])
        _scan(C, np.add)
        _scan(P, np.add, reverse=True)
        r = C[:, 0]
        r *= alpha(jw, d)
        r += C[:, 1]
        if d > 1:
            if r.shape[1] > 1:
                q = P[1:, 0]
                q *= gamma(jw[: d - 1], d)  # Q at i = j_t + 1 gets gamma(j_t)
                q += P[1:, 1]
                r[: d - 1, 1:] += q
            r[: d - 1, 0] = np.nan
        r *= scale_(d)
        if add_ref:
            r += ref
        _unblock(r, dest)

    return core


# decay: weight d - age = (d - j_t) + i (prefix), i - j_t (suffix); sum of weights d(d+1)/2
_DECAY_CORE = _linear_weight_core(lambda j, d: d - j, lambda j, d: -j,
                                  lambda d: 2.0 / (d * (d + 1.0)), True)
# slope: centred time index (d-1)/2 - age; sum of squares d(d^2-1)/12
_SLOPE_CORE = _linear_weight_core(lambda j, d: 0.5 * (d - 1) - j, lambda j, d: 0.5 * (d - 1) - d - j,
                                  lambda d: 12.0 / (d * (d * d - 1.0)), False)


def _ema_core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
    q = (d - 1.0) / (d + 1.0)
    j = np.arange(d, dtype=np.float64)
    total = (q ** j).sum()
    y = _blocks(a, d)
    # prefix part: sum_{i <= j_t} q^(j_t - i) x_i = q^j_t * P(q^-i x)     (q^-i <= e^2)
    pre = np.multiply(y, (q ** -j)[:, None, None])
    _scan(pre, np.add)
    pre *= (q ** j / total)[:, None, None]
    if y.shape[1] > 1:
        # suffix part: sum_{i > j_t} q^(d + j_t - i) x_i = q^(j_t+1) * Q(q^(d-1-i) x)
        suf = y[:, :-1]
        suf *= (q ** (d - 1 - j))[:, None, None]
        _scan(suf, np.add, reverse=True)
        tail = suf[1:]
        tail *= (q ** j[1:] / total)[:, None, None]  # index i = j_t + 1 -> q^i
        pre[: d - 1, 1:] += tail
    pre[: d - 1, 0] = np.nan
    _unblock(pre, dest)


def _argmax_core(a: np.ndarray, d: int, dest: np.ndarray, negate: bool = False) -> None:
    """Days ago (today = 0) of the window maximum (of ``-a`` if ``negate``); ties -> the oldest."""
    y = _blocks(a, d)
    if negate:
        np.negative(y, out=y)
    nb = y.shape[1]
    jw = np.arange(d, dtype=np.int16)[:, None, None]
    # prefix: running max; its earliest position = last strict increase (max-scan)
    pm = _scan(y, np.maximum, out=np.empty_like(y))
    pp = np.zeros(y.shape, dtype=np.int16)
    np.multiply(pm[1:] > pm[:-1], jw[1:], out=pp[1:])
    _scan(pp, np.maximum)
    out = np.subtract(jw, pp, dtype=np.float64)
    bad = np.isnan(pm)
    if d > 1 and nb > 1:
        z = y[:, :-1]
        sm = _scan(z, np.maximum, reverse=True, out=np.empty_like(z))
        # suffix: earliest position i >= j with z[i] == sm[i] (older wins ties): min-scan
        sp = np.equal(z, sm).astype(np.int16)
        sp *= jw - d
        sp += d
        _scan(sp, np.minimum, reverse=True)
        sv = sm[1:]
        use_suf = sv >= pm[: d - 1, 1:]  # tie -> the suffix (older) part
        tgt = out[: d - 1, 1:]
        delta = np.subtract(d + jw[: d - 1], sp[1:], dtype=np.float64)  # suffix days ago
        delta -= tgt
        delta *= use_suf  # branch-free select (use_suf is a dense random mask)
        tgt += delta
        bad[: d - 1, 1:] |= np.isnan(sv)
    np.copyto(out, np.nan, where=bad)
    out[: d - 1, 0] = np.nan
    _unblock(out, dest, sweep_inf=False)


def _argmin_core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
    _argmax_core(a, d, dest, negate=True)


def _nan_window_core(a: np.ndarray, d: int, dest: np.ndarray) -> None:
    """bool: the window ending at t holds a NaN (or t < d - 1)."""
    T, w = a.shape
    nb = -(-T // d)
    nf, r = divmod(T, d)
    y = np.empty((d, nb, w), dtype=bool)
    if nf:
        np.isnan(a[: nf * d].reshape(nf, d, w).transpose(1, 0, 2), out=y[:, :nf])
    if r:
        np.isnan(a[nf * d:], out=y[:r, nf])
        y[r:, nf] = True
    pre = _scan(y, np.logical_or, out=np.empty_like(y))
    suf = y[:, :-1]
    _scan(suf, np.logical_or, reverse=True)
    _unblock(_combine(pre, suf, np.logical_or, warmup=True), dest, sweep_inf=False)


# ---------------------------------------------------------------------------
# time-series kernels
# ---------------------------------------------------------------------------


@_kernel(sweep_inf=False)
def delay(x, d):
    """``x[t - d]``; NaN for ``t < d``."""
    a = _panel(x)
    d = _window(d)
    out = np.empty(a.shape)
    out[:d] = np.nan
    out[d:] = a[: max(a.shape[0] - d, 0)]
    return out


@_kernel
def ts_delta(x, d):
    """``x[t] - x[t - d]``; NaN for ``t < d``; exactly 0 where the two cancel (CANCEL_RTOL)."""
    a = _panel(x)
    d = _window(d)
    out = np.empty(a.shape)
    out[:d] = np.nan
    now, then = a[d:], a[: max(a.shape[0] - d, 0)]
    np.subtract(now, then, out=out[d:])
    _fill_cancelled(out[d:], 0.0, now, then, out[d:])
    return out


@_kernel(sweep_inf=False)
def ts_sum(x, d):
    """Sum of the last ``d`` rows (today included)."""
    return _by_columns(_SUM_CORE, (_panel(x, clean=False),), _window(d))


@_kernel(sweep_inf=False)
def ts_mean(x, d):
    """Mean of the last ``d`` rows."""
    d = _window(d)
    out = _by_columns(_SUM_CORE, (_panel(x, clean=False),), d)
    out /= d  # a division, as pandas' rolling mean: ties between stocks survive bit for bit
    return out


@_kernel(sweep_inf=False)
def ts_max(x, d):
    """Maximum of the last ``d`` rows."""
    return _by_columns(_MAX_CORE, (_panel(x, clean=False),), _window(d))


@_kernel(sweep_inf=False)
def ts_min(x, d):
    """Minimum of the last ``d`` rows."""
    return _by_columns(_MIN_CORE, (_panel(x, clean=False),), _window(d))


@_kernel(sweep_inf=False)
def window_range(x, d):
    """``ts_max(x, d) - ts_min(x, d)`` bit for bit (inf where it overflows), in one pass: the spread that the
    rounding-error bounds (`bounds.py`) read; not an operator of the language."""
    return _by_columns(_range_core, (_panel(x, clean=False),), _window(d), k=4)


@_kernel(sweep_inf=False)
def ts_product(x, d):
    """Product of the last ``d`` rows (exact zeros and signs; overflow -> NaN)."""
    return _by_columns(_PROD_CORE, (_panel(x, clean=False),), _window(d))


@_kernel(sweep_inf=False)
def ts_std(x, d):
    """Population (ddof=0) standard deviation of the last ``d`` rows; 0 on a constant window."""
    return _by_columns(_std_core, (_panel(x, clean=False),), _window(d), k=2)


@_kernel(sweep_inf=False)
def ts_skew(x, d):
    """Population skewness ``m3 / m2**1.5`` of the last ``d`` rows; NaN on zero variance, and
    for ``d < 3`` (two values have skewness 0: only its rounding noise would be left)."""
    a, d = _panel(x, clean=False), _window(d)
    if d < MIN_MOMENT_WINDOW.get("ts_skew", 0):
        return _nan_panel(a.shape)
    return _by_columns(_skew_core, (a,), d, k=3)


@_kernel(sweep_inf=False)
def ts_kurt(x, d):
    """Population excess kurtosis ``m4 / m2**2 - 3``; NaN on zero variance, and for ``d < 4``
    (-2 on every 2 values, -1.5 on every 3: a constant whose rounding noise would be ranked)."""
    a, d = _panel(x, clean=False), _window(d)
    if d < MIN_MOMENT_WINDOW.get("ts_kurt", 0):
        return _nan_panel(a.shape)
    return _by_columns(_kurt_core, (a,), d, k=4)


@_kernel(sweep_inf=False)
def ts_cov(x, y, d):
    """Population (ddof=0) covariance of the last ``d`` rows; 0 if either window is constant."""
    return _by_columns(_cov_core, _pair(x, y), _window(d), k=3)


@_kernel(sweep_inf=False)
def ts_corr(x, y, d):
    """Pearson correlation of the last ``d`` rows; NaN if either window has zero variance."""
    return _by_columns(_corr_core, _pair(x, y), _window(d), k=5)


@_kernel(sweep_inf=False)
def ts_decay_linear(x, d):
    """Linearly decaying weighted mean: weights d (today), d-1, ..., 1 (oldest), summing to 1."""
    return _by_columns(_DECAY_CORE, (_panel(x, clean=False),), _window(d), k=2)


@_kernel(sweep_inf=False)
def ts_slope(x, d):
    """OLS slope (per day) of the last ``d`` rows on the time index 0..d-1; NaN for d == 1."""
    a = _panel(x, clean=False)
    d = _window(d)
    if d == 1:
        return _nan_panel(a.shape)
    return _by_columns(_SLOPE_CORE, (a,), d, k=2)


@_kernel
def ts_ema(x, d):
    """Finite-window EMA: weight (1-alpha)**k on the row k days ago (k < d), alpha = 2/(d+1), normalised."""
    a = _panel(x, clean=False)
    d = _window(d)
    if d == 1:
        return a.copy()
    return _by_columns(_ema_core, (a,), d)


@_kernel(sweep_inf=False)
def ts_argmax(x, d):
    """Days since the window maximum (today = 0, in [0, d-1]); ties -> the oldest (largest)."""
    return _by_columns(_argmax_core, (_panel(x, clean=False),), _window(d), k=2)


@_kernel(sweep_inf=False)
def ts_argmin(x, d):
    """Days since the window minimum (today = 0, in [0, d-1]); ties -> the oldest (largest)."""
    return _by_columns(_argmin_core, (_panel(x, clean=False),), _window(d), k=2)


#: cells per row chunk of ``ts_rank`` (its working set stays in cache)
_RANK_CHUNK_CELLS = 1 << 15


@_kernel(sweep_inf=False)
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
    threads = _split_threads() if T * N * d >= _MIN_SPLIT_CELLS * 4 else 1
    # split over threads, a chunk of 4x the cells: fewer numpy calls, so the threads wait less on the GIL
    rows = max(1, (_RANK_CHUNK_CELLS * (4 if threads > 1 else 1)) // max(N, 1))
    den = float(d - 1)

    def segment(s0: int, s1: int) -> None:   # rows s0..s1-1 of the result, in cache-sized chunks
        less = np.empty((rows, N), dtype=np.uint8)
        leq = np.empty((rows, N), dtype=np.uint8)
        buf = np.empty((rows, N), dtype=bool)
        for r0 in range(s0, s1, rows):
            r1 = min(s1, r0 + rows)
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
            blk *= 0.5  # exact: the 0-based average-tie rank
            blk /= den  # a division (not * 1/den): bit-identical to alpha101v's (r - 1) / (d - 1)
    _run_parts(lambda s0, s1: segment(d - 1 + s0, d - 1 + s1), _segments(T - d + 1, threads, rows))
    np.copyto(out, np.nan, where=_by_columns(_nan_window_core, (a,), d, dtype=np.bool_))
    return out


# ---------------------------------------------------------------------------
# cross-sectional kernels
# ---------------------------------------------------------------------------


#: cells per row chunk of ``rank`` (its temporaries stay in cache)
_CS_CHUNK_CELLS = 1 << 16


#: xor mask that reverses the order of negative float64 bit patterns read as int64
_NEGATIVE_FLIP = np.int64(0x7FFF_FFFF_FFFF_FFFF)
#: the order key of +inf: the NaN cells of a row (`rank` sorts them last as +inf)
_INF_KEY = np.int64(0x7FF0_0000_0000_0000)


def _order_keys(key: np.ndarray) -> np.ndarray:
    """int64 keys in the same order as the finite-or-+inf float64 ``key``: its IEEE-754 bits,
    negatives reversed (a new array; ``+ 0.0`` gives -0.0 and 0.0 one key)."""
    full = (key + 0.0).view(np.int64)
    flip = full >> 63  # -1 on negative values (arithmetic shift), else 0
    flip &= _NEGATIVE_FLIP
    full ^= flip
    return full


def _far(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Sorted neighbours ``prev <= cur`` (order keys) that are two values to `rank`: more than
    TIE_ULPS apart, or a finite value before the row's NaN cells (+inf keys)."""
    gap = cur.view(np.uint64) - prev.view(np.uint64)  # exact: 0 <= cur - prev < 2**64
    far = gap > TIE_ULPS
    far |= (cur == _INF_KEY) & (prev != _INF_KEY)
    return far


def _rank_packed(key: np.ndarray, den: np.ndarray, out: np.ndarray) -> bool:
    """`rank` of a block from one int64 sort per row; False (``out`` untouched) where it does not pay.

    numpy sorts int64 with x86-simd-sort but argsorts float64 with a scalar loop (3-4x
    slower), so each value becomes an int64 of the same order (:func:`_order_keys`) whose
    lowest bits are replaced by its column, and those packed keys are sorted.  Cells within
    TIE_ULPS of a neighbour above the column bits form *groups*: only there can two cells be
    tied (equal, or within TIE_ULPS: rounding noise) or out of order (values a few ulps apart,
    as the same price difference computed from other prices).  Everything else is read off the sorted keys without
    gathering the values: a cell's rank is its place / den.  The groups' cells are then put
    in exact order by one more sort on (equal high bits, low bits, place), and their runs of
    values each within TIE_ULPS of the previous get their average place.  Where out-of-order groups cover most of the block that
    second sort does not pay (``rank(a) - rank(b)``): False, and the caller argsorts.
    Bit-identical to ranking from an argsort: the same places, the same divisions.
    """
    T, N = key.shape
    bits = max(1, int(N - 1).bit_length())
    n_place = max(1, int(T * N - 1).bit_length())
    if bits + 2 * n_place > 62:  # (too many cells for the keys of the second sort)
        return False
    full = _order_keys(key)
    low_mask = np.int64((1 << bits) - 1)
    srt = full & ~low_mask
    srt |= np.arange(N, dtype=np.int64)
    srt.sort(axis=1)
    link = np.zeros((T, N + 1), dtype=bool)  # link[:, j]: sorted cell j may tie cell j-1 (close above the low bits)
    high = srt >> bits
    gap = high[:, 1:] - high[:, :-1]  # >= 0: sorted (no overflow: high has lost `bits` >= 1 bits)
    np.less_equal(gap, (TIE_ULPS >> bits) + 1, out=link[:, 1:N])
    del gap
    order = np.bitwise_and(srt, low_mask, out=high)  # the column of each sorted cell
    order += (np.arange(T, dtype=np.int64) * N)[:, None]  # ... as a flat index into the block
    flat = order.reshape(-1)
    if (den == N - 1).all():  # no NaN: every row's ranks are the places / (N - 1), divided once
        pos = _places_over(N, T)
    else:
        pos = np.empty((T, N))
        np.divide(np.arange(N, dtype=np.float64), den[:, None], out=pos)
    if not link.any():  # no ties, nothing out of order: the common block
        out.reshape(-1)[flat] = pos.reshape(-1)
        return True
    member = link[:, :N] | link[:, 1:]  # the cells of groups
    if 4 * np.count_nonzero(member) > T * N:  # groups everywhere (ties, as a rank of a few values): whole rows
        exact = full.reshape(-1).take(flat).reshape(T, N)
        if (exact[:, 1:] < exact[:, :-1]).any():  # and some out of order: argsort instead
            return False
        run = np.empty((T, N), dtype=bool)  # the first cell of each run of tied values (every row starts one)
        run[:, 0] = True
        run[:, 1:] = _far(exact[:, :-1], exact[:, 1:])
        first = np.flatnonzero(run.reshape(-1))
        lengths = _run_lengths(first, T * N)
        avg = first - (first // N) * N + 0.5 * (lengths - 1)
        pos = np.repeat(avg, lengths).reshape(T, N)
        pos /= den[:, None]
        out.reshape(-1)[flat] = pos.reshape(-1)
        return True
    cells = np.flatnonzero(member)  # few: put them in exact order, then average their ties
    starts = ~link[:, :N].reshape(-1)[cells]  # the first cell of each group
    exact = full.reshape(-1)[flat[cells]]
    if (exact[1:] < exact[:-1])[~starts[1:]].any():  # a group out of order: sort those cells exactly
        place = max(1, int(cells.size - 1).bit_length())
        hc = srt.reshape(-1)[cells] >> bits  # within a run of equal high bits the low bits give the order
        equal_high = starts.copy()
        equal_high[1:] |= hc[1:] != hc[:-1]
        group = np.cumsum(equal_high, dtype=np.int64)
        group <<= bits + place
        group |= (exact & low_mask) << place
        group |= np.arange(cells.size, dtype=np.int64)
        group.sort()
        group &= np.int64((1 << place) - 1)  # each cell's place among `cells`, now in exact order
        flat[cells] = flat[cells[group]]
        exact = exact[group]
    out.reshape(-1)[flat] = pos.reshape(-1)
    run = np.ones(cells.size, dtype=bool)  # the first cell of each run of tied values
    run[1:] = _far(exact[:-1], exact[1:])
    run[1:] |= starts[1:]
    if not run.all():  # ties: each run of equal values gets its average place
        first = np.flatnonzero(run)
        lengths = _run_lengths(first, cells.size)
        tied = lengths > 1
        first, lengths = first[tied], lengths[tied]
        at = cells[first]
        rows = at // N
        avg = (at - rows * N) + 0.5 * (lengths - 1)
        members = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        out.reshape(-1)[flat[cells[members]]] = np.repeat(avg / den[rows], lengths)
    return True


@functools.lru_cache(maxsize=8)
def _places_over(N: int, T: int) -> np.ndarray:
    """(T, N) rows of arange(N) / (N - 1), read-only: the ranks of sorted rows without NaN or ties."""
    pos = np.empty((T, N))
    np.divide(np.arange(N, dtype=np.float64), np.full((T, 1), N - 1.0), out=pos)
    pos.setflags(write=False)
    return pos


def _run_lengths(first: np.ndarray, size: int) -> np.ndarray:
    """Lengths of the runs that start at the sorted indices ``first`` of a sequence of ``size`` items."""
    lengths = np.empty_like(first)
    np.subtract(first[1:], first[:-1], out=lengths[:-1])
    lengths[-1:] = size - first[-1:]
    return lengths


def _rank_rows(a: np.ndarray, out: np.ndarray, packed: bool = True) -> bool:
    """`rank` of a block of rows, written into ``out``; True where the packed sort was tried and
    did not pay (see :func:`_rank_packed`), so the rows were argsorted."""
    T, N = a.shape
    nan = np.isfinite(a)  # +-inf is missing, as everywhere (`rank` reads the panel uncleaned)
    np.logical_not(nan, out=nan)
    has_nan = nan.any()
    den = np.full(T, N - 1.0)
    if has_nan:
        n_nan = np.count_nonzero(nan, axis=1)
        den -= n_nan  # n - 1: 0 for n = 1 -> 0 / 0 = NaN
    key = np.where(nan, np.inf, a) if has_nan else a  # NaN sorted last (the kernel read +-inf as NaN)
    unpaid = not (packed and _rank_packed(key, den, out))
    if unpaid:
        order = np.argsort(key, axis=1) + (np.arange(T, dtype=np.int64) * N)[:, None]
        srt = key.reshape(-1).take(order)
        is_start = np.empty((T, N), dtype=bool)  # first cell of a run of tied sorted values
        is_start[:, 0] = True
        keys = _order_keys(srt)
        is_start[:, 1:] = _far(keys[:, :-1], keys[:, 1:])
        del keys
        pos = srt  # reuse: 0-based average position of every sorted cell
        starts = np.flatnonzero(is_start.reshape(-1))  # runs never cross rows (every row starts one)
        lengths = _run_lengths(starts, T * N)
        avg = starts - (starts // N) * N + 0.5 * (lengths - 1)
        pos.reshape(-1)[...] = np.repeat(avg, lengths)
        pos /= den[:, None]  # a division (not * 1/(n-1)): bit-identical to pandas' (r - 1) / (n - 1)
        out.reshape(-1)[order.reshape(-1)] = pos.reshape(-1)
    if has_nan:  # NaN cells (last, as +inf, tied among themselves) are written NaN
        np.copyto(out, np.nan, where=nan)
    return packed and unpaid


@_kernel(sweep_inf=False)
def rank(x):
    """Per-row average-tie rank of the non-NaN cells scaled to [0, 1] as (r-1)/(n-1).

    NaN cells stay NaN; a row with a single valid cell is NaN (0/0, as alpha101v).
    Values within TIE_ULPS of their sorted neighbour are ties (chained): rounding noise is
    not an order, so a cross-section constant up to rounding is all ties (a flat book).
    One sort per row (:func:`_rank_packed`), the runs of equal values in rows that have them
    get their average position (run starts and lengths, one ``np.repeat``), and a flat
    scatter writes the ranks back; all of it on cache-sized blocks of rows.
    """
    a = _panel(x, clean=False)  # +-inf is read as NaN block by block (_rank_rows)
    T, N = a.shape
    if T == 0 or N == 0:
        return _nan_panel(a.shape)
    out = np.empty((T, N))
    rows = max(1, _CS_CHUNK_CELLS // N)

    def segment(s0: int, s1: int) -> None:
        skip = 0  # blocks left to argsort directly: neighbouring days are alike, so after a block
        for r0 in range(s0, s1, rows):  # where the packed sort did not pay, the next few skip it
            r1 = min(s1, r0 + rows)
            if _rank_rows(a[r0:r1], out[r0:r1], packed=skip == 0):
                skip = 4
            elif skip:
                skip -= 1
    _run_parts(segment, _segments(T, _split_threads(), rows))
    return out


@_kernel(sweep_inf=False)
def ind_neutralize(x, groups):
    """``x`` minus the mean of its group per row (NaN cells skipped); the paper's IndNeutralize.

    ``groups`` gives each column's group (any hashable labels, one per column); a column
    labelled ``None`` is in no group and gives NaN.  NaN cells stay NaN; a group with a
    single valid cell gives 0 (the OLS residual on group dummies, as alpha101v).
    """
    v = _panel(x)
    T, N = v.shape
    labels = list(groups)
    if len(labels) != N:
        raise ValueError(f"groups has {len(labels)} labels for {N} columns")
    codes: dict = {}
    code = np.array([-1 if g is None else codes.setdefault(g, len(codes)) for g in labels], dtype=np.int64)
    out = np.full((T, N), np.nan)
    if not codes or T == 0:
        return out
    member = code >= 0
    order = np.argsort(code[member], kind="stable")
    cols = np.flatnonzero(member)[order]          # columns sorted by group
    starts = np.flatnonzero(np.r_[True, np.diff(code[cols]) != 0])
    vs = v[:, cols]
    nan = np.isnan(vs)
    sums = np.add.reduceat(np.where(nan, 0.0, vs), starts, axis=1)
    counts = np.add.reduceat((~nan).astype(np.float64), starts, axis=1)
    means = sums / counts                          # 0 valid cells -> NaN
    sizes = np.diff(np.r_[starts, len(cols)])
    out[:, cols] = vs - np.repeat(means, sizes, axis=1)
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


def _cancelled(xa: np.ndarray, ya: np.ndarray, diff: np.ndarray) -> np.ndarray:
    """Where ``diff`` (``xa - ya`` or ``xa + ya``) is below CANCEL_RTOL of the larger operand:
    the operands cancel and ``diff`` is their rounding noise."""
    tol = np.maximum(np.abs(xa), np.abs(ya))
    tol *= CANCEL_RTOL
    return np.abs(diff) < tol  # strict: +-inf operands (tol = inf) never cancel


def _fill_cancelled(out: np.ndarray, fill: float, xa: np.ndarray, ya: np.ndarray,
                    diff: np.ndarray | None = None) -> None:
    """Write ``fill`` into ``out`` where ``diff`` (``xa - ya`` when None) cancelled (:func:`_cancelled`),
    a cache-sized block of rows at a time: the same cells as one whole-panel pass, without its temporaries."""
    if out.ndim != 2:
        np.copyto(out, fill, where=_cancelled(xa, ya, np.subtract(xa, ya) if diff is None else diff))
        return
    xa, ya = np.broadcast_to(xa, out.shape), np.broadcast_to(ya, out.shape)
    rows = max(1, _CS_CHUNK_CELLS // max(out.shape[1], 1))
    for r0 in range(0, out.shape[0], rows):
        s = slice(r0, r0 + rows)
        d = np.subtract(xa[s], ya[s]) if diff is None else diff[s]
        np.copyto(out[s], fill, where=_cancelled(xa[s], ya[s], d))


def _exact_zero_where_cancelled(op: np.ufunc, x, y) -> np.ndarray:
    xa, ya = _scalar_or_array(x), _scalar_or_array(y)
    out = op(xa, ya, out=np.empty(np.broadcast_shapes(xa.shape, ya.shape)))
    _fill_cancelled(out, 0.0, xa, ya, out)
    return out


@_kernel
def add(x, y):
    """``x + y``; exactly 0 where the operands cancel (CANCEL_RTOL)."""
    return _exact_zero_where_cancelled(np.add, x, y)


@_kernel
def sub(x, y):
    """``x - y``; exactly 0 where the operands cancel (CANCEL_RTOL)."""
    return _exact_zero_where_cancelled(np.subtract, x, y)


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


def _pow(xa: np.ndarray, ya: np.ndarray) -> np.ndarray:
    """``xa ** ya`` with NaN in -> NaN out, and fast paths for common constant exponents
    (``np.power`` with a general exponent costs ~40 ns per cell)."""
    if ya.ndim == 0 and not np.isnan(ya):
        e = float(ya)
        if e == 1.0:
            return xa.copy()
        if e == 2.0:
            return xa * xa
        if e == 0.5:
            return np.sqrt(xa)
        if e == 3.0:
            return xa * xa * xa
        if e == -1.0:
            return 1.0 / xa
        if e == 4.0:
            sq = xa * xa
            return sq * sq
        if e == -2.0:
            return 1.0 / (xa * xa)
        if e == -0.5:
            return 1.0 / np.sqrt(xa)
        if e == 0.0:
            return np.where(np.isnan(xa), np.nan, 1.0)
        return np.power(xa, e)
    out = np.power(xa, ya)
    return np.where(np.isnan(xa) | np.isnan(ya), np.nan, out)


@_kernel
def power(x, y):
    """``x ** y``; NaN where undefined (negative base with non-integer exponent, 0**-k)
    and wherever either argument is NaN (also ``NaN ** 0`` and ``1 ** NaN``)."""
    return _pow(_scalar_or_array(x), _scalar_or_array(y))


@_kernel
def signed_power(x, y):
    """``sign(x) * |x| ** y`` (NaN if either argument is NaN; ``0 ** -k`` -> NaN)."""
    xa = _scalar_or_array(x)
    r = _pow(np.abs(xa), _scalar_or_array(y))
    r *= np.sign(xa)
    return r


@_kernel
def minimum(x, y):
    """Element-wise minimum (NaN if either is NaN)."""
    return np.minimum(_scalar_or_array(x), _scalar_or_array(y))


@_kernel
def maximum(x, y):
    """Element-wise maximum (NaN if either is NaN)."""
    return np.maximum(_scalar_or_array(x), _scalar_or_array(y))


def _nan_mask(*arrays: np.ndarray) -> np.ndarray:
    nan = np.isnan(arrays[0])
    for a in arrays[1:]:
        nan = nan | np.isnan(a)
    return nan


def _as_float_out(op: np.ufunc, xa: np.ndarray, ya: np.ndarray) -> np.ndarray:
    """``op(xa, ya)`` (boolean) written straight into a new float64 array, NaN-propagating."""
    out = np.empty(np.broadcast_shapes(xa.shape, ya.shape))
    op(xa, ya, out=out, casting="unsafe")
    np.copyto(out, np.nan, where=_nan_mask(xa, ya))
    return out


def _compare(op: np.ufunc, x, y) -> np.ndarray:
    """``op(x, y)`` as 0.0 / 1.0, with x and y equal where their difference cancels (CANCEL_RTOL):
    a comparison of rounding noise is not a signal."""
    xa, ya = _scalar_or_array(x), _scalar_or_array(y)
    out = _as_float_out(op, xa, ya)
    _fill_cancelled(out, float(op(0.0, 0.0)), xa, ya)  # what op says of two equal values
    return out


@_kernel(sweep_inf=False)
def lt(x, y):
    """1.0 where x < y else 0.0 (NaN if either is NaN)."""
    return _compare(np.less, x, y)


@_kernel(sweep_inf=False)
def gt(x, y):
    """1.0 where x > y else 0.0 (NaN if either is NaN)."""
    return _compare(np.greater, x, y)


@_kernel(sweep_inf=False)
def le(x, y):
    """1.0 where x <= y else 0.0 (NaN if either is NaN)."""
    return _compare(np.less_equal, x, y)


@_kernel(sweep_inf=False)
def ge(x, y):
    """1.0 where x >= y else 0.0 (NaN if either is NaN)."""
    return _compare(np.greater_equal, x, y)


@_kernel(sweep_inf=False)
def eq(x, y):
    """1.0 where x == y else 0.0 (NaN if either is NaN)."""
    return _compare(np.equal, x, y)


@_kernel(sweep_inf=False)
def ne(x, y):
    """1.0 where x != y else 0.0 (NaN if either is NaN)."""
    return _compare(np.not_equal, x, y)


def _truthy(op: np.ufunc, x, y) -> np.ndarray:
    xa = _scalar_or_array(x)
    ya = _scalar_or_array(y)
    out = np.empty(np.broadcast_shapes(xa.shape, ya.shape))
    op(xa != 0, ya != 0, out=out, casting="unsafe")
    np.copyto(out, np.nan, where=_nan_mask(xa, ya))
    return out


@_kernel(sweep_inf=False)
def logical_or(x, y):
    """1.0 if x != 0 or y != 0 else 0.0 (NaN if either is NaN)."""
    return _truthy(np.logical_or, x, y)


@_kernel(sweep_inf=False)
def logical_and(x, y):
    """1.0 if x != 0 and y != 0 else 0.0 (NaN if either is NaN)."""
    return _truthy(np.logical_and, x, y)


@_kernel
def where(c, a, b):
    """``a`` where ``c != 0`` else ``b``; NaN where ``c`` is NaN."""
    ca = _scalar_or_array(c)
    aa = _scalar_or_array(a)
    ba = _scalar_or_array(b)
    if ca.ndim and ca.shape == aa.shape == ba.shape:
        # branch-free bit blend: np.where is branchy on a dense random condition
        m = (ca != 0).view(np.uint8).astype(np.uint64)
        np.negative(m, out=m)  # all ones where c != 0
        out = np.bitwise_and(np.ascontiguousarray(aa).view(np.uint64), m)
        np.invert(m, out=m)
        m &= np.ascontiguousarray(ba).view(np.uint64)
        out |= m
        out = out.view(np.float64)
    else:
        out = np.where(ca != 0, aa, ba)
    if out.shape != ca.shape:
        out = np.array(np.broadcast_to(out, np.broadcast_shapes(out.shape, ca.shape)))
    np.copyto(out, np.nan, where=np.isnan(ca))
    return out


# ---------------------------------------------------------------------------
# compiled kernels (numba, `compiled.py`): the heaviest operators in one fused pass
# ---------------------------------------------------------------------------

#: Today's numpy kernels of the operators `compiled.py` runs: the test oracle (tests/test_compiled_kernels.py holds
#: the compiled kernels to them), never called by the product. Wrapped below like the product's kernels.
NUMPY_REFERENCE: dict[str, Callable[..., np.ndarray]] = {
    "ts_std": ts_std, "ts_cov": ts_cov, "ts_corr": ts_corr, "ts_decay_linear": ts_decay_linear, "ts_rank": ts_rank,
    "rank": rank,
}
_NUMPY_KERNEL = dict(NUMPY_REFERENCE)   # as they are here: the near-constant rule is applied around either


def _contiguous(x: object) -> np.ndarray:
    """The float64 (T, N) panel a compiled kernel reads (C order: one compiled signature, rows streamed)."""
    return np.ascontiguousarray(_panel(x, clean=False))


def _compiled_rules_hold(compiled) -> bool:
    """Whether this module's tie and zero-variance tolerances are the ones compiled into `compiled.py`'s kernels.
    A caller that changes them (tests/test_alpha101.py sets TIE_ULPS to 0 to compare with alpha101v cell by cell)
    gets the numpy kernels, which read them at each call; the compiled ones would silently keep the defaults."""
    return TIE_ULPS == compiled.TIE_ULPS and ZERO_VAR_RTOL == compiled.ZERO_VAR_RTOL


def _compiled_window(name: str, kernel_name: str, k: int):
    """``f(x, d)`` or ``f(x, y, d)`` running the window kernel `kernel_name` of `compiled.py` over column parts:
    one part, or one a kernel thread where the work (cells x k quantities) is large enough. Columns are
    independent, so the bits never depend on the thread count."""
    def kernel(*args):
        from alpha_gym.language import compiled
        *xs, d = args
        arrays = [_contiguous(a) for a in xs]
        if len(arrays) == 2 and arrays[0].shape != arrays[1].shape:
            raise ValueError(f"shape mismatch: {arrays[0].shape} vs {arrays[1].shape}")
        d = _window(d)
        run = getattr(compiled, kernel_name)
        if not _compiled_rules_hold(compiled) or not compiled.ready(run):   # not compiled yet: numpy, the same bits
            return _NUMPY_KERNEL[name](*arrays, d)
        T, N = arrays[0].shape
        out = np.empty((T, N))
        if T == 0 or N == 0:
            return out
        threads = _split_threads() if T * N * k >= _MIN_SPLIT_CELLS else 1
        _run_parts(lambda lo, hi: run(*arrays, d, lo, hi, out), _segments(N, threads))
        return out
    return kernel


@_kernel(sweep_inf=False)
def ts_std(x, d):
    """Population (ddof=0) standard deviation of the last ``d`` rows; 0 on a constant window."""
    return _compiled_window("ts_std", "window_std", 2)(x, d)


@_kernel(sweep_inf=False)
def ts_cov(x, y, d):
    """Population (ddof=0) covariance of the last ``d`` rows; 0 if either window is constant."""
    return _compiled_window("ts_cov", "window_cov", 3)(x, y, d)


@_kernel(sweep_inf=False)
def ts_corr(x, y, d):
    """Pearson correlation of the last ``d`` rows; NaN if either window has zero variance."""
    return _compiled_window("ts_corr", "window_corr", 5)(x, y, d)


@_kernel(sweep_inf=False)
def ts_decay_linear(x, d):
    """Linearly decaying weighted mean: weights d (today), d-1, ..., 1 (oldest), summing to 1."""
    return _compiled_window("ts_decay_linear", "decay_linear", 2)(x, d)


@_kernel(sweep_inf=False)
def ts_rank(x, d):
    """Rank of today within the last ``d`` rows, in [0, 1].

    ``(count below + 0.5 * count of other equal values) / (d - 1)`` = (average-tie
    1-based rank - 1) / (d - 1).  NaN for ``d == 1`` (0/0, as alpha101v).
    """
    if _window(d) == 1:
        return _nan_panel(np.shape(x))
    return _compiled_window("ts_rank", "window_rank", _window(d))(x, d)


# ---------------------------------------------------------------------------
# windows constant up to rounding
# ---------------------------------------------------------------------------

#: Ulps between neighbouring days (float64 bits read as integers) at most which a step may lie inside a window
#: constant up to rounding: such a window's values share a sign and lie within 2**-30 of its largest magnitude,
#: and an ulp is at least 2**-53 of a value, so two of them are at most 2 TIE_ULPS ulps apart; twice that, as margin.
_NEAR_STEP_ULPS = 4 * TIE_ULPS


def _may_be_near_constant(a: np.ndarray, d: int) -> bool:
    """Whether some window of ``a`` may be constant up to rounding: a False is a proof there is none.

    Such a window holds no NaN or inf, is not bit-constant, and its neighbouring values are within
    _NEAR_STEP_ULPS ulps: it has a step of 1 to _NEAR_STEP_ULPS ulps. Steps of real data are far larger
    (a price tick, a share of volume) or exactly 0, so this integer pass over cache-sized row chunks,
    stopping at the first such step, replaces the two window scans of `_near_constant_windows` on them."""
    T, N = a.shape
    if d < 2 or T < 2 or N == 0:
        return False  # a window of one value is bit-constant
    bits = a.view(np.int64)
    rows = max(1, _CS_CHUNK_CELLS // N)
    for r0 in range(1, T, rows):
        r1 = min(T, r0 + rows)
        step = np.subtract(bits[r0:r1], bits[r0 - 1:r1 - 1])  # wraps on sign changes: far, as it should be
        step += _NEAR_STEP_ULPS
        near = step.view(np.uint64) <= 2 * _NEAR_STEP_ULPS  # |step| <= _NEAR_STEP_ULPS
        near &= step != _NEAR_STEP_ULPS  # ... and not 0
        if near.any():
            return True
    return False


def _near_constant_windows(a: np.ndarray, d: int) -> np.ndarray:
    """Windows whose values are one value up to rounding but not bit for bit: their spread is
    positive and at most _TIE_RTOL of their largest magnitude (as `rank` ties them)."""
    a = _panel(a, clean=False)
    if not _may_be_near_constant(a, d):
        return np.zeros(a.shape, dtype=bool)
    hi, lo = ts_max(a, d), ts_min(a, d)
    spread = hi - lo
    np.maximum(np.abs(hi), np.abs(lo), out=hi)
    hi *= TIE_ULPS * 2.0 ** -52  # the relative spread of TIE_ULPS ulps (its upper end)
    return (spread > 0) & (spread <= hi)


def _constant_up_to_rounding(value: Callable[[int], float]):
    """A time-series kernel that gives, on a window constant up to rounding (in any of its inputs),
    what it gives on an exactly constant window, `value(d)`: the order, the position of the maximum
    and the spread of rounding noise are not a signal."""
    def deco(f: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        @functools.wraps(f)
        def wrapper(*args):
            *arrays, d = args
            out = f(*args)
            d = _window(d)
            arrays = [b for b in (_panel(a, clean=False) for a in arrays) if _may_be_near_constant(b, d)]
            if arrays:  # else no window is constant up to rounding (the common case: one integer pass each)
                with np.errstate(all="ignore"):
                    near = functools.reduce(np.logical_or, (_near_constant_windows(a, d) for a in arrays))
                np.copyto(out, value(d), where=near)
            return out
        return wrapper
    return deco


#: Column bits of `rank`'s packed keys at most this: a group of keys equal above them then spans under TIE_ULPS
#: (`compiled.rank_sorted`); wider rows (over 4 million stocks) take the numpy kernel.
_RANK_MAX_BITS = TIE_ULPS.bit_length() - 1


@_kernel(sweep_inf=False)
def rank(x):
    """Per-row average-tie rank of the non-NaN cells scaled to [0, 1] as (r-1)/(n-1).

    NaN cells stay NaN; a row with a single valid cell is NaN (0/0, as alpha101v).
    Values within TIE_ULPS of their sorted neighbour are ties (chained): rounding noise is
    not an order, so a cross-section constant up to rounding is all ties (a flat book).
    Each cache-sized block of rows: packed int64 keys (value order, column in the low bits) made
    and read back compiled (`compiled.rank_keys`, `rank_sorted`), sorted by numpy (its SIMD sort).
    """
    a = _contiguous(x)   # +-inf is read as NaN by the kernels
    T, N = a.shape
    bits = max(1, int(N - 1).bit_length())
    from alpha_gym.language import compiled
    if T == 0 or N == 0 or bits > _RANK_MAX_BITS or not _compiled_rules_hold(compiled) \
            or not (compiled.ready(compiled.rank_keys) and compiled.ready(compiled.rank_sorted)):
        return _NUMPY_KERNEL["rank"](a)
    out = np.empty((T, N))
    rows = max(1, _CS_CHUNK_CELLS // N)

    def segment(s0: int, s1: int) -> None:
        keys = np.empty((min(rows, s1 - s0), N), dtype=np.int64)
        for r0 in range(s0, s1, rows):
            r1 = min(s1, r0 + rows)
            block = keys[: r1 - r0]
            compiled.rank_keys(a, r0, r1, bits, block)
            block.sort(axis=1)
            compiled.rank_sorted(a, r0, r1, bits, block, out)
    _run_parts(segment, _segments(T, _split_threads(), rows))
    return out


_NEAR_CONSTANT_VALUE = {
    "ts_std": lambda d: 0.0, "ts_cov": lambda d: 0.0, "ts_corr": lambda d: np.nan,   # zero variance
    "ts_rank": lambda d: 0.5 if d > 1 else np.nan,                                     # all ties
}
NUMPY_REFERENCE.update({name: _constant_up_to_rounding(value)(NUMPY_REFERENCE[name])
                        for name, value in _NEAR_CONSTANT_VALUE.items()})
ts_std = _constant_up_to_rounding(_NEAR_CONSTANT_VALUE["ts_std"])(ts_std)
ts_cov = _constant_up_to_rounding(_NEAR_CONSTANT_VALUE["ts_cov"])(ts_cov)
ts_slope = _constant_up_to_rounding(lambda d: 0.0 if d > 1 else np.nan)(ts_slope)
ts_corr = _constant_up_to_rounding(_NEAR_CONSTANT_VALUE["ts_corr"])(ts_corr)
ts_skew = _constant_up_to_rounding(lambda d: np.nan)(ts_skew)
ts_kurt = _constant_up_to_rounding(lambda d: np.nan)(ts_kurt)
ts_rank = _constant_up_to_rounding(_NEAR_CONSTANT_VALUE["ts_rank"])(ts_rank)
ts_argmax = _constant_up_to_rounding(lambda d: d - 1.0)(ts_argmax)  # ties -> the oldest
ts_argmin = _constant_up_to_rounding(lambda d: d - 1.0)(ts_argmin)
