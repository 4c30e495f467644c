"""Compiled (numba) kernels of the heaviest operators: one fused pass where numpy made dozens.

`ops.py` calls these for `ts_std`, `ts_cov`, `ts_corr`, `ts_decay_linear`, `ts_rank` and `rank`; its numpy kernels
of the same operators stay as the test oracle (`ops.NUMPY_REFERENCE`, tests/test_compiled_kernels.py holds these
to them). Each kernel here runs the numpy kernel's own algorithm cell by cell, in the same order of operations:
the window moments are van Herk / Gil-Werman block sums of values centred on the first row of their block (see
`ops._centred`), `ts_rank` counts the lags below / not above today, `rank` sorts each row's order keys and gives
runs of values within `ops.TIE_ULPS` of their neighbour their average place.

Determinism: no fastmath (no reassociation, no fused multiply-add), no parallel reductions; every cell's sums run
in one fixed order, so the same data give the same bits in every process and on any number of kernel threads
(the threads take whole columns or whole rows; `nogil` lets them run at once). `error_model="numpy"`: a division
by zero gives inf / NaN as in numpy, never an exception.

Compiled once per machine and kept in the user's cache folder (`user_cache.cache_dir()/numba`), never beside the
package: an install on a read-only disk caches there too. Where that folder is off (`ALPHA_GYM_CACHE=off`) or cannot
be written, the kernels compile in memory at their first call in each process instead.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np

#: `ops.TIE_ULPS` and `ops.ZERO_VAR_RTOL`, repeated (ops imports this module): tests/test_compiled_kernels.py
#: checks they agree.
TIE_ULPS = 1 << 22
ZERO_VAR_RTOL = 1e-11


def cache_folder() -> str | None:
    """The folder numba's compiled kernels are kept in, or None where caching is off or the folder cannot be
    written (then each process compiles them in memory)."""
    from alpha_gym.user_cache import cache_dir
    base = cache_dir()
    if base is None:
        return None
    path = os.path.join(str(base), "numba")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):   # what numba's own locator checks: a file can be made here
            pass
    except OSError:
        return None
    return path


@contextlib.contextmanager
def _numba_cache_dir(path: str | None):
    """numba's cache folder set to `path` while the kernels below are decorated (their cache locator is chosen
    then), and restored after: other numba users in the process keep their own setting."""
    from numba.core import config
    before = config.CACHE_DIR
    if path is not None:
        config.CACHE_DIR = path
    try:
        yield
    finally:
        config.CACHE_DIR = before


_CACHE_FOLDER = cache_folder()

with _numba_cache_dir(_CACHE_FOLDER):
    import numba

    def _compiled(fn):
        return numba.njit(cache=_CACHE_FOLDER is not None, nogil=True, error_model="numpy", fastmath=False)(fn)

    @_compiled
    def _clean(v):
        """+-inf is missing, as everywhere in the language."""
        return np.nan if np.isinf(v) else v

    @_compiled
    def _references(x, t0, lo, width, ref):
        """Block references: row t0 of columns lo.. (0 where missing: all those windows are NaN anyway)."""
        for n in range(width):
            r = _clean(x[t0, lo + n])
            ref[n] = 0.0 if np.isnan(r) else r

    # The three moment kernels below share one scheme. Block b holds rows b*d .. b*d+d-1; its reference is its
    # first row. The window ending at place j of block b is the suffix j+1.. of block b-1 plus the prefix ..j of
    # block b, both centred on block b's reference: `ops._window_sums` on `ops._centred` stacks, the same
    # additions in the same order (a suffix starts with its last value, a prefix with its first).

    @_compiled
    def window_std(x, d, lo, hi, out):
        """`ts_std` of columns lo..hi-1 into `out` (`ops._std_core`): sqrt(d S2 - S1^2) / d."""
        T = x.shape[0]
        width = hi - lo
        s1, s2 = np.empty((d, width)), np.empty((d, width))
        p1, p2, ref = np.empty(width), np.empty(width), np.empty(width)
        for t0 in range(0, T, d):
            _references(x, t0, lo, width, ref)
            if t0 > 0:
                for j in range(d - 1, 0, -1):
                    for n in range(width):
                        c = _clean(x[t0 - d + j, lo + n]) - ref[n]
                        if j == d - 1:
                            s1[j, n], s2[j, n] = c, c * c
                        else:
                            s1[j, n], s2[j, n] = s1[j + 1, n] + c, s2[j + 1, n] + c * c
            for j in range(min(d, T - t0)):
                t = t0 + j
                for n in range(width):
                    c = _clean(x[t, lo + n]) - ref[n]
                    if j == 0:
                        p1[n], p2[n] = c, c * c
                    else:
                        p1[n], p2[n] = p1[n] + c, p2[n] + c * c
                    if j < d - 1:
                        if t0 == 0:
                            out[t, lo + n] = np.nan   # warm-up: the window reaches before the first row
                            continue
                        a1, a2 = s1[j + 1, n] + p1[n], s2[j + 1, n] + p2[n]
                    else:
                        a1, a2 = p1[n], p2[n]
                    v = a2 * d - a1 * a1     # d^2 var (>= 0 up to rounding; exactly 0 on a constant window)
                    if v < 0.0:
                        v = 0.0
                    r = np.sqrt(v) * (1.0 / d)
                    out[t, lo + n] = np.nan if np.isinf(r) else r
        return out

    @_compiled
    def window_cov(x, y, d, lo, hi, out):
        """`ts_cov` of columns lo..hi-1 into `out` (`ops._cov_core`): (d Sxy - Sx Sy) / d^2."""
        T = x.shape[0]
        width = hi - lo
        sx, sy, sxy = np.empty((d, width)), np.empty((d, width)), np.empty((d, width))
        px, py, pxy = np.empty(width), np.empty(width), np.empty(width)
        rx, ry = np.empty(width), np.empty(width)
        for t0 in range(0, T, d):
            _references(x, t0, lo, width, rx)
            _references(y, t0, lo, width, ry)
            if t0 > 0:
                for j in range(d - 1, 0, -1):
                    for n in range(width):
                        cx = _clean(x[t0 - d + j, lo + n]) - rx[n]
                        cy = _clean(y[t0 - d + j, lo + n]) - ry[n]
                        if j == d - 1:
                            sx[j, n], sy[j, n], sxy[j, n] = cx, cy, cx * cy
                        else:
                            sx[j, n], sy[j, n], sxy[j, n] = sx[j + 1, n] + cx, sy[j + 1, n] + cy, sxy[j + 1, n] + cx * cy
            for j in range(min(d, T - t0)):
                t = t0 + j
                for n in range(width):
                    cx = _clean(x[t, lo + n]) - rx[n]
                    cy = _clean(y[t, lo + n]) - ry[n]
                    if j == 0:
                        px[n], py[n], pxy[n] = cx, cy, cx * cy
                    else:
                        px[n], py[n], pxy[n] = px[n] + cx, py[n] + cy, pxy[n] + cx * cy
                    if j < d - 1:
                        if t0 == 0:
                            out[t, lo + n] = np.nan
                            continue
                        ax, ay, axy = sx[j + 1, n] + px[n], sy[j + 1, n] + py[n], sxy[j + 1, n] + pxy[n]
                    else:
                        ax, ay, axy = px[n], py[n], pxy[n]
                    r = (axy * d - ax * ay) * (1.0 / (d * d))
                    out[t, lo + n] = np.nan if np.isinf(r) else r
        return out

    @_compiled
    def window_corr(x, y, d, lo, hi, out):
        """`ts_corr` of columns lo..hi-1 into `out` (`ops._corr_core`): NaN where either window's variance is at
        most `ZERO_VAR_RTOL` of its second moment, else clipped to [-1, 1]."""
        T = x.shape[0]
        width = hi - lo
        sx, sy = np.empty((d, width)), np.empty((d, width))
        sxx, syy, sxy = np.empty((d, width)), np.empty((d, width)), np.empty((d, width))
        px, py, pxx, pyy, pxy = np.empty(width), np.empty(width), np.empty(width), np.empty(width), np.empty(width)
        rx, ry = np.empty(width), np.empty(width)
        for t0 in range(0, T, d):
            _references(x, t0, lo, width, rx)
            _references(y, t0, lo, width, ry)
            if t0 > 0:
                for j in range(d - 1, 0, -1):
                    for n in range(width):
                        cx = _clean(x[t0 - d + j, lo + n]) - rx[n]
                        cy = _clean(y[t0 - d + j, lo + n]) - ry[n]
                        if j == d - 1:
                            sx[j, n], sy[j, n] = cx, cy
                            sxx[j, n], syy[j, n], sxy[j, n] = cx * cx, cy * cy, cx * cy
                        else:
                            sx[j, n], sy[j, n] = sx[j + 1, n] + cx, sy[j + 1, n] + cy
                            sxx[j, n] = sxx[j + 1, n] + cx * cx
                            syy[j, n] = syy[j + 1, n] + cy * cy
                            sxy[j, n] = sxy[j + 1, n] + cx * cy
            for j in range(min(d, T - t0)):
                t = t0 + j
                for n in range(width):
                    cx = _clean(x[t, lo + n]) - rx[n]
                    cy = _clean(y[t, lo + n]) - ry[n]
                    if j == 0:
                        px[n], py[n], pxx[n], pyy[n], pxy[n] = cx, cy, cx * cx, cy * cy, cx * cy
                    else:
                        px[n], py[n] = px[n] + cx, py[n] + cy
                        pxx[n], pyy[n], pxy[n] = pxx[n] + cx * cx, pyy[n] + cy * cy, pxy[n] + cx * cy
                    if j < d - 1:
                        if t0 == 0:
                            out[t, lo + n] = np.nan
                            continue
                        ax, ay = sx[j + 1, n] + px[n], sy[j + 1, n] + py[n]
                        axx, ayy, axy = sxx[j + 1, n] + pxx[n], syy[j + 1, n] + pyy[n], sxy[j + 1, n] + pxy[n]
                    else:
                        ax, ay, axx, ayy, axy = px[n], py[n], pxx[n], pyy[n], pxy[n]
                    axx, ayy = axx * d, ayy * d          # d^2 var = d Sxx - Sx^2, d^2 cov = d Sxy - Sx Sy
                    cov = axy * d - ax * ay
                    vx, vy = axx - ax * ax, ayy - ay * ay
                    if vx <= ZERO_VAR_RTOL * axx or vy <= ZERO_VAR_RTOL * ayy:
                        out[t, lo + n] = np.nan
                        continue
                    r = cov / np.sqrt(vx * vy)
                    out[t, lo + n] = -1.0 if r < -1.0 else (1.0 if r > 1.0 else r)
        return out

    @_compiled
    def decay_linear(x, d, lo, hi, out):
        """`ts_decay_linear` of columns lo..hi-1 into `out`: `ops._DECAY_CORE`'s prefix / suffix sums of `c` and
        `i c` (i the row's place in its block), weighted `d - j` and `-j` for the window ending at place j."""
        T = x.shape[0]
        width = hi - lo
        s0 = np.empty((d, width))
        s1 = np.empty((d, width))
        p0 = np.empty(width)
        p1 = np.empty(width)
        ref = np.empty(width)
        scale = 2.0 / (d * (d + 1.0))
        for t0 in range(0, T, d):
            _references(x, t0, lo, width, ref)
            if t0 > 0:
                for j in range(d - 1, 0, -1):
                    fj = float(j)
                    for n in range(width):
                        c = _clean(x[t0 - d + j, lo + n]) - ref[n]
                        ci = c * fj
                        if j == d - 1:
                            s0[j, n] = c
                            s1[j, n] = ci
                        else:
                            s0[j, n] = s0[j + 1, n] + c
                            s1[j, n] = s1[j + 1, n] + ci
            for j in range(min(d, T - t0)):
                t = t0 + j
                fj = float(j)
                for n in range(width):
                    c = _clean(x[t, lo + n]) - ref[n]
                    ci = c * fj
                    if j == 0:
                        p0[n] = c
                        p1[n] = ci
                    else:
                        p0[n] = p0[n] + c
                        p1[n] = p1[n] + ci
                    if j < d - 1 and t0 == 0:
                        out[t, lo + n] = np.nan
                        continue
                    r = p0[n] * (d - fj) + p1[n]
                    if j < d - 1:
                        r = r + (s0[j + 1, n] * (-fj) + s1[j + 1, n])
                    r = r * scale + ref[n]
                    out[t, lo + n] = np.nan if np.isinf(r) else r
        return out

    @_compiled
    def window_rank(x, d, lo, hi, out):
        """`ts_rank` of columns lo..hi-1 into `out`: (lags below + lags not above today) / 2 / (d - 1), NaN where
        the window holds a missing value or reaches before the first row (d >= 2)."""
        T = x.shape[0]
        width = hi - lo
        last_missing = np.full(width, -1 << 40)   # the latest row with a missing value, per column
        below = np.empty(width, dtype=np.int64)
        not_above = np.empty(width, dtype=np.int64)
        today = np.empty(width)
        den = float(d - 1)
        for t in range(T):
            for n in range(width):
                v = _clean(x[t, lo + n])
                today[n] = v
                if np.isnan(v):
                    last_missing[n] = t
                below[n] = 0
                not_above[n] = 0
            if t < d - 1:
                for n in range(width):
                    out[t, lo + n] = np.nan
                continue
            for k in range(1, d):
                for n in range(width):
                    past = x[t - k, lo + n]   # +-inf or NaN compares False, like the oracle's cleaned NaN
                    below[n] += past < today[n]
                    not_above[n] += past <= today[n]
            for n in range(width):
                if last_missing[n] > t - d:
                    out[t, lo + n] = np.nan
                else:
                    r = float(below[n]) + float(not_above[n])
                    out[t, lo + n] = r * 0.5 / den
        return out

    @_compiled
    def _order_key(bits):
        """An int64 in the order of the finite float64 whose bits are `bits`: negatives reversed
        (`ops._order_keys`); -0.0 is 0.0's key."""
        if bits == np.int64(-0x8000_0000_0000_0000):
            return np.int64(0)
        return bits ^ 0x7FFF_FFFF_FFFF_FFFF if bits < 0 else bits

    @_compiled
    def rank_keys(x, lo, hi, bits, keys):
        """Rows lo..hi-1 of `x` as packed sort keys into `keys`: the order key with its lowest `bits` bits
        replaced by the column (missing cells: +inf's key, so they sort last)."""
        high = ~np.int64((1 << bits) - 1)
        for t in range(lo, hi):
            raw = x[t].view(np.int64)
            for n in range(x.shape[1]):
                k = _order_key(raw[n]) if np.isfinite(x[t, n]) else np.int64(0x7FF0_0000_0000_0000)
                keys[t - lo, n] = (k & high) | n

    @_compiled
    def rank_sorted(x, lo, hi, bits, keys, out):
        """`rank` of rows lo..hi-1 from their sorted packed keys (`rank_keys`, each row sorted).

        Cells whose keys share the bits above the column bits (a *group*) lie within 2**bits <= TIE_ULPS ulps of
        each other: in exact order they are neighbours and one run, in whatever order the column bits put them.
        So runs break only between groups, where the gap from the previous group's largest exact key to this
        group's smallest is above TIE_ULPS; each run's cells get its average place / (valid cells - 1)."""
        N = x.shape[1]
        missing = np.int64(0x7FF0_0000_0000_0000) >> bits
        low = np.int64((1 << bits) - 1)
        for t in range(lo, hi):
            row = keys[t - lo]
            raw = x[t].view(np.int64)
            m = N
            while m > 0 and (row[m - 1] >> bits) == missing:
                m -= 1
                out[t, row[m] & low] = np.nan
            den = float(m - 1)
            start = 0
            previous_max = np.int64(0)
            i = 0
            while i < m:
                group = row[i] >> bits
                smallest = largest = _order_key(raw[row[i] & low])
                j = i + 1
                while j < m and (row[j] >> bits) == group:
                    k = _order_key(raw[row[j] & low])
                    smallest = min(smallest, k)
                    largest = max(largest, k)
                    j += 1
                if i > 0 and smallest - TIE_ULPS > previous_max:   # a gap above TIE_ULPS: a new run
                    _place_run(row, start, i, den, low, out[t])
                    start = i
                previous_max = largest
                i = j
            if m > 0:
                _place_run(row, start, m, den, low, out[t])
        return out

    @_compiled
    def _place_run(row, first, end, den, low, out_row):
        """The run of sorted places first..end-1 gets its average place / den (`ops._rank_rows`' arithmetic)."""
        r = (float(first) + 0.5 * (end - first - 1)) / den
        for p in range(first, end):
            out_row[row[p] & low] = r

    @_compiled
    def rounding_runs_rows(xs, es, rs, out):
        """`bounds.rounding_runs` on the rows of `xs` (values), `es` (their bounds) and `rs` (their ranks): each
        row of `out` is its ranks with every run whose order rounding decides given the run's mean rank. Returns
        how many rows had such a run (0: `out` is `rs`).

        Per row, as the numpy rule: the valid ranked cells in value order (a stable sort: equal values by column),
        neighbours linked where their gap is at most the sum of their bounds (or a bound is NaN), chained into runs;
        a run in which two linked neighbours' ranks differ gets its mean rank (summed in sorted order)."""
        R, N = xs.shape
        key = np.empty(N)
        run_of = np.empty(N, dtype=np.int64)
        total = np.empty(N)
        size = np.empty(N)
        differs = np.empty(N, dtype=np.bool_)
        changed = 0
        for t in range(R):
            for n in range(N):
                out[t, n] = rs[t, n]
                ok = not np.isnan(xs[t, n]) and not np.isnan(rs[t, n])
                key[n] = xs[t, n] if ok else np.inf
            order = np.argsort(key, kind="mergesort")
            runs = -1
            decided = False
            for i in range(N):
                c = order[i]
                k = not np.isnan(xs[t, c]) and not np.isnan(rs[t, c])
                link = False
                if i > 0 and k:
                    p = order[i - 1]
                    if not np.isnan(xs[t, p]) and not np.isnan(rs[t, p]):
                        link = (xs[t, c] - xs[t, p]) <= (es[t, c] + es[t, p]) or np.isnan(es[t, c]) or np.isnan(es[t, p])
                if not link:
                    runs += 1
                    total[runs] = 0.0
                    size[runs] = 0.0
                    differs[runs] = False
                elif rs[t, c] != rs[t, order[i - 1]]:
                    differs[runs] = True
                    decided = True
                run_of[i] = runs
                total[runs] += rs[t, c] if k else 0.0
                size[runs] += 1.0 if k else 0.0
            if not decided:
                continue
            changed += 1
            for i in range(N):
                c = order[i]
                r = run_of[i]
                if differs[r] and not np.isnan(xs[t, c]) and not np.isnan(rs[t, c]):
                    out[t, c] = total[r] / max(size[r], 1.0)
        return changed



# ------------------------------------------------------------------------------------- compiling without waiting
#: Compiling every kernel takes seconds of CPU (numba's type inference: about 9 s on a busy 2-core machine), once a
#: machine. A process never waits for it where the kernels can be cached: until the cache holds a kernel, `ready`
#: says no and the caller runs the numpy kernel (the same algorithm, the same bits: tests/test_compiled_kernels.py),
#: while one background process (`compile_all`) compiles them all into the cache; the
#: caller loads them from there as soon as they are written. Without a cache, each process compiles at first use.
_RETRY_S = 1.0
_READY: set = set()
_LAST_LOOK: dict = {}
_STARTED = [False]


def _signatures() -> dict:
    """The one signature each kernel is called with (C-order float64 panels, int64 sizes): the one compiled."""
    from numba import types
    panel, keys, i = types.Array(types.float64, 2, "C"), types.Array(types.int64, 2, "C"), types.int64
    return {window_std: (panel, i, i, i, panel), window_cov: (panel, panel, i, i, i, panel),
            window_corr: (panel, panel, i, i, i, panel), decay_linear: (panel, i, i, i, panel),
            window_rank: (panel, i, i, i, panel), rank_keys: (panel, i, i, i, keys),
            rank_sorted: (panel, i, i, i, keys, panel), rounding_runs_rows: (panel, panel, panel, panel)}


def _load_cached(kernel) -> bool:
    """Load `kernel`'s compiled code from the cache if it is there (never compiles): numba's own
    `Dispatcher.compile` up to its cache look-up."""
    from numba.core.compiler_lock import global_compiler_lock
    sig = _signatures()[kernel]
    with global_compiler_lock:
        if kernel.overloads.get(tuple(sig)) is not None:
            return True
        cres = kernel._cache.load_overload(sig, kernel.targetctx)
        if cres is None:
            return False
        kernel._cache_hits[sig] += 1
        kernel.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        kernel.add_overload(cres)
    return True


def compile_all() -> None:
    """Compile (or load from the cache) every kernel now: what the background process runs, and what a caller that
    must have the compiled kernels (a benchmark, a test) calls first."""
    for kernel, sig in _signatures().items():
        kernel.compile(sig)
        _READY.add(kernel)


def _start_compiling() -> None:
    """Start the background compiler once a process: detached, quiet, on whatever core is free."""
    if _STARTED[0]:
        return
    _STARTED[0] = True
    import subprocess
    import sys
    try:
        # imported, not run as __main__: numba names a kernel's cache files after its module
        subprocess.Popen([sys.executable, "-c", "from alpha_gym.language.compiled import compile_all; compile_all()"],
                         stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, "ALPHA_GYM_CACHE": os.path.dirname(_CACHE_FOLDER)})
    except OSError:   # no process to start (a sandbox): compile here instead, at the next call
        _COMPILE_HERE[0] = True


_COMPILE_HERE = [False]


def ready(kernel) -> bool:
    """Whether `kernel` runs compiled now (else the caller runs its numpy kernel: the same bits)."""
    if kernel in _READY:
        return True
    if _CACHE_FOLDER is None or _COMPILE_HERE[0]:
        kernel.compile(_signatures()[kernel])   # no cache to fill in the background: compile here, once
        _READY.add(kernel)
        return True
    import time
    now = time.monotonic()
    if now - _LAST_LOOK.get(kernel, -_RETRY_S) < _RETRY_S:
        return False
    _LAST_LOOK[kernel] = now
    if _load_cached(kernel):
        _READY.add(kernel)
        return True
    _start_compiling()
    return False

