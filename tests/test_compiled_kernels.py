"""The compiled kernels (`alpha_gym/language/compiled.py`, numba) held to today's numpy kernels, their oracle
(`ops.NUMPY_REFERENCE`): every compiled operator and all 82 industry-free Alpha101s agree within 1e-12 relative
with equal NaN cells, on hostile synthetic panels and on the real us46 panel; the bits do not depend on the
process or the thread count; the compiled code is cached in the user's cache folder, never beside the package,
and works where that folder cannot be written."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.alpha101 import formulas, parse_alpha
from alpha_gym.language import compiled, ops, operators
from alpha_gym.language.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def _compiled_now():
    """The kernels compiled (or loaded) before any comparison: else a process runs the numpy kernels until the
    background compiler has filled the cache (`compiled.ready`), and the oracle would be compared with itself."""
    compiled.compile_all()
    assert all(compiled.ready(kernel) for kernel in compiled._signatures())
COMPILED = sorted(ops.NUMPY_REFERENCE)
PAIRS = ("ts_corr", "ts_cov")
RTOL = 1e-12


def assert_agrees(got: np.ndarray, want: np.ndarray, what) -> None:
    """Equal NaN cells, and every other cell within RTOL of the oracle's (relative to the larger magnitude); and
    the same bits: a process runs the numpy kernel until the compiled one is ready, so the two must not differ."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.tobytes() == want.tobytes() or _close(got, want, what), what


def _close(got, want, what) -> bool:
    assert got.shape == want.shape, what
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    assert (nan_got == nan_want).all(), (what, "NaN cells differ", int((nan_got != nan_want).sum()))
    ok = ~nan_got
    gap = np.abs(got[ok] - want[ok])
    size = np.maximum(np.abs(got[ok]), np.abs(want[ok]))
    assert (gap <= RTOL * size).all(), (what, "largest relative gap", float(np.max(gap / np.maximum(size, 1e-300))))
    return False   # within RTOL but not bit for bit: a process would change its answer when the kernels load


def hostile_panel(rng, T=300, N=41, level=50.0) -> np.ndarray:
    """A random walk with what the kernels must get right: missing runs, +-inf, a row of ties, constant and zero
    columns, signed zeros, a column constant up to rounding, huge and tiny magnitudes, sign changes."""
    a = rng.standard_normal((T, N)).cumsum(axis=0) + level
    a[7:12, 3] = np.nan
    a[::17, 4] = np.nan
    a[200, 10], a[150, 11] = np.inf, -np.inf
    a[100, :] = 1.25
    a[:, 20] = 3.0
    a[:, 21] = 0.0
    a[40:60, 22] = -0.0
    a[:, 23] = 7.0 * (1.0 + rng.integers(-3, 4, T) * 2.0 ** -50)   # one value up to rounding
    a[:, 24] *= 1e150
    a[:, 25] *= 1e-150
    a[:, 26] -= level                                                  # crosses zero
    a[:, 27] = np.round(a[:, 27], 2)                                   # price ticks: exact ties in windows
    return a


def _call(name, x, y, d):
    """The kernel's arguments: `rank` takes no window."""
    args = (x, y) if name in PAIRS else (x,)
    return args + (() if name == "rank" else (d,))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", COMPILED)
def test_every_compiled_kernel_agrees_with_its_numpy_oracle(name, seed):
    rng = np.random.default_rng(seed)
    x, y = hostile_panel(rng), hostile_panel(rng, level=-20.0)
    kernel, oracle = getattr(ops, name), ops.NUMPY_REFERENCE[name]
    for d in (1, 2, 3, 4, 5, 7, 10, 16, 23, 60, 251, 252):
        assert_agrees(kernel(*_call(name, x, y, d)), oracle(*_call(name, x, y, d)), (name, d))


@pytest.mark.parametrize("name", COMPILED)
def test_edge_shapes_agree_with_the_oracle(name):
    """Panels shorter than the window, one row, one column, no stocks, no days, all missing, all constant."""
    rng = np.random.default_rng(5)
    shapes = [(3, 4), (1, 6), (40, 1), (0, 5), (5, 0), (9, 3)]
    for T, N in shapes:
        x, y = rng.standard_normal((T, N)), rng.standard_normal((T, N))
        for d in (1, 2, 5, 9, 10):
            assert_agrees(getattr(ops, name)(*_call(name, x, y, d)), ops.NUMPY_REFERENCE[name](*_call(name, x, y, d)),
                          (name, T, N, d))
    for x in (np.full((30, 5), np.nan), np.full((30, 5), 2.5), np.full((30, 5), np.inf)):
        assert_agrees(getattr(ops, name)(*_call(name, x, x, 6)), ops.NUMPY_REFERENCE[name](*_call(name, x, x, 6)),
                      (name, float(x[0, 0])))


def test_bad_arguments_raise_the_kernels_errors():
    x = np.ones((20, 3))
    for name in COMPILED:
        for bad in (0, 253, -1) if name != "rank" else ():
            with pytest.raises(ValueError, match="window"):
                getattr(ops, name)(*_call(name, x, x, bad))
        with pytest.raises(ValueError, match="panel"):
            getattr(ops, name)(*_call(name, np.ones(5), np.ones(5), 3))
    for name in PAIRS:
        with pytest.raises(ValueError, match="shape mismatch"):
            getattr(ops, name)(x, np.ones((20, 4)), 3)


def test_the_compiled_module_repeats_the_constants_of_ops():
    assert compiled.TIE_ULPS == ops.TIE_ULPS and compiled.ZERO_VAR_RTOL == ops.ZERO_VAR_RTOL


@pytest.mark.parametrize("constant, value", [("TIE_ULPS", 0), ("TIE_ULPS", 1 << 10)])
def test_changed_tolerances_reach_every_kernel_compiled_or_not(monkeypatch, constant, value):
    """A caller that changes ops' tolerances (tests/test_alpha101.py: TIE_ULPS 0, to compare with alpha101v cell
    by cell) gets what the numpy kernels give under them, whether or not the compiled kernels are ready: the
    compiled code holds the defaults, so it must not run then. (It did: the result depended on whether the cache
    was warm.)"""
    compiled.compile_all()                      # the compiled kernels are ready: the case that went wrong
    rng = np.random.default_rng(11)
    x, y = hostile_panel(rng), hostile_panel(rng, level=-20.0)
    x[:, 30] = x[:, 31] * (1.0 + 2.0 ** -40)    # 4096 ulps apart: tied by the default TIE_ULPS only
    default = {name: getattr(ops, name)(*_call(name, x, y, 10)) for name in COMPILED}
    expected = {}
    with monkeypatch.context() as m:
        m.setattr(ops, constant, value)
        m.setattr(compiled, "ready", lambda kernel: False)   # the numpy kernels, under the changed value
        for name in COMPILED:
            expected[name] = getattr(ops, name)(*_call(name, x, y, 10))
    monkeypatch.setattr(ops, constant, value)
    for name in COMPILED:
        assert_agrees(getattr(ops, name)(*_call(name, x, y, 10)), expected[name], (name, constant, value))
    # the changed tolerance does change some kernel's answer on this panel (else the check above checks nothing)
    assert any(not np.array_equal(expected[n], default[n], equal_nan=True) for n in COMPILED)


@contextlib.contextmanager
def numpy_kernels():
    """The evaluator (and every `ops.NAME` reader, the bounds among them) on today's numpy kernels."""
    saved = {name: (operators.KERNELS[name], getattr(ops, name)) for name in COMPILED}
    try:
        for name in COMPILED:
            operators.KERNELS[name] = ops.NUMPY_REFERENCE[name]
            setattr(ops, name, ops.NUMPY_REFERENCE[name])
        yield
    finally:
        for name, (kernel, attribute) in saved.items():
            operators.KERNELS[name] = kernel
            setattr(ops, name, attribute)


def _alphas_agree(panel) -> int:
    nodes = {n: parse_alpha(n) for n in formulas(industry_free=True)}
    got = {n: evaluate(node, panel) for n, node in nodes.items()}
    with numpy_kernels():
        want = {n: evaluate(node, panel) for n, node in nodes.items()}
    assert operators.KERNELS["ts_corr"] is ops.ts_corr is not ops.NUMPY_REFERENCE["ts_corr"]   # restored
    for n in nodes:
        assert_agrees(got[n], want[n], f"Alpha#{n}")
    return len(nodes)


def test_the_82_alphas_agree_with_the_numpy_kernels_on_a_synthetic_market(synthetic46):
    assert _alphas_agree(synthetic46) == 82


@pytest.mark.real_data
def test_the_82_alphas_agree_with_the_numpy_kernels_on_us46(real_us46):
    assert _alphas_agree(real_us46) == 82


# ------------------------------------------------------------------------ determinism: processes, threads
_DIGEST = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    from alpha_gym.language import ops
    sys.path.insert(0, {tests!r})
    from test_compiled_kernels import hostile_panel, _call, COMPILED
    rng = np.random.default_rng(11)
    x, y = hostile_panel(rng, T=700, N=90), hostile_panel(rng, T=700, N=90)
    h = hashlib.sha256()
    with ops.kernel_threads({threads}):
        for name in COMPILED:
            for d in (2, 9, 30):
                h.update(getattr(ops, name)(*_call(name, x, y, d)).tobytes())
    print(h.hexdigest())
""")


def _digest_here(threads: int) -> str:
    rng = np.random.default_rng(11)
    x, y = hostile_panel(rng, T=700, N=90), hostile_panel(rng, T=700, N=90)
    h = hashlib.sha256()
    with ops.kernel_threads(threads):
        for name in COMPILED:
            for d in (2, 9, 30):
                h.update(getattr(ops, name)(*_call(name, x, y, d)).tobytes())
    return h.hexdigest()


def _run(code: str, env_extra: dict, pythonpath: str = str(ROOT)) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1", **env_extra}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)


def test_the_bits_are_the_same_in_another_process_and_on_more_threads():
    here = _digest_here(1)
    assert _digest_here(2) == here and _digest_here(3) == here
    done = _run(_DIGEST.format(tests=str(ROOT / "tests"), threads=2), {})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == here


# ------------------------------------------------------------------------------------------------ the cache
_STD_ONCE = textwrap.dedent("""
    import numpy as np
    from alpha_gym.language import compiled, ops
    x = np.arange(60.0).reshape(20, 3) ** 1.5
    compiled.compile_all()
    print(compiled.cache_folder(), float(np.nansum(ops.ts_std(x, 4))), sum(compiled.window_std.stats.cache_hits.values()))
""")


def test_the_compiled_code_is_cached_in_the_user_cache_folder_not_beside_a_read_only_package(tmp_path):
    """A copy of the package made read-only: the first process compiles into ALPHA_GYM_CACHE/numba and writes
    nothing into the package; the second loads from that cache."""
    install = tmp_path / "install"
    shutil.copytree(ROOT / "alpha_gym", install / "alpha_gym", ignore=shutil.ignore_patterns("__pycache__"))
    for path in sorted(install.rglob("*"), reverse=True) + [install]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        cache = tmp_path / "cache"
        env = {"ALPHA_GYM_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
        first = _run(_STD_ONCE, env, pythonpath=str(install))
        assert first.returncode == 0, first.stderr[-2000:]
        folder, total, hits = first.stdout.split()
        assert folder == str(cache / "numba") and hits == "0"
        assert any((cache / "numba").rglob("compiled.window_std-*.nbi"))
        assert not [p for p in install.rglob("*") if p.suffix in (".nbi", ".nbc")]
        second = _run(_STD_ONCE, env, pythonpath=str(install))
        assert second.returncode == 0, second.stderr[-2000:]
        folder2, total2, hits2 = second.stdout.split()
        assert total2 == total and int(hits2) >= 1          # loaded from the cache, the same answer
    finally:
        for path in [install] + sorted(install.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.mark.parametrize("setting", ["unwritable", "off"])
def test_the_kernels_work_where_the_cache_folder_cannot_be_written_or_is_off(tmp_path, setting):
    """A cache path below a regular file (no folder can be made there, whoever runs the test) or caching off:
    no cache, the kernels compile in memory and give the cached process's answer."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    value = str(blocker / "cache") if setting == "unwritable" else "off"
    done = _run(_STD_ONCE, {"ALPHA_GYM_CACHE": value})
    assert done.returncode == 0, done.stderr[-2000:]
    folder, total, hits = done.stdout.split()
    assert folder == "None" and hits == "0"
    x = np.arange(60.0).reshape(20, 3) ** 1.5
    assert float(total) == float(np.nansum(ops.ts_std(x, 4)))
    assert not (blocker.parent / "numba").exists()


# ------------------------------------------------------------------------ rule 5's rounding runs
def numpy_rounding_runs(x, ex, ranks=None):
    """`bounds.rounding_runs` as numpy computed it before `compiled.rounding_runs_rows` (its oracle): the rows
    with a cell whose bound reaches rule 1's tie tolerance, sorted, linked, chained into runs, block by block."""
    from alpha_gym.language import bounds
    if bounds._exact(ex) or isinstance(ex, bounds.Relative) and ex.k <= bounds.TIE_REL / 2:
        return None
    ex = bounds._array(bounds.absolute(ex, x), x.shape)
    valid = ~np.isnan(x)
    with np.errstate(invalid="ignore"):
        wide = valid & ~(ex <= (bounds.TIE_REL / 2) * np.abs(x))
    rows = np.flatnonzero(wide.any(axis=1))
    if rows.size == 0:
        return None
    tied = None
    for s in bounds._row_blocks((rows.size, x.shape[1])):
        r_ids = rows[s]
        rs = ops.NUMPY_REFERENCE["rank"](x[r_ids]) if ranks is None else ranks[r_ids]
        xs, es, ok = x[r_ids], ex[r_ids], valid[r_ids] & ~np.isnan(rs)
        order = np.argsort(np.where(ok, xs, np.inf), axis=1, kind="stable")
        v, e, r, k = (np.take_along_axis(a, order, axis=1) for a in (xs, es, rs, ok))
        with np.errstate(invalid="ignore", over="ignore"):
            link = (v[:, 1:] - v[:, :-1]) <= (e[:, 1:] + e[:, :-1])
        link |= np.isnan(e[:, 1:]) | np.isnan(e[:, :-1])
        link &= k[:, 1:] & k[:, :-1]
        decided_by_rounding = link & (r[:, 1:] != r[:, :-1])
        if not decided_by_rounding.any():
            continue
        n_rows, n = v.shape
        starts = np.ones((n_rows, n), dtype=bool)
        starts[:, 1:] = ~link
        run = np.cumsum(starts.reshape(-1)).reshape(n_rows, n) - 1
        flat_r = np.where(k, r, 0.0).reshape(-1)
        ids = run.reshape(-1)
        size = np.bincount(ids, weights=k.reshape(-1).astype(float))
        mean = np.bincount(ids, weights=flat_r) / np.maximum(size, 1.0)
        if tied is None:
            tied = (ops.NUMPY_REFERENCE["rank"](x) if ranks is None else ranks).copy()
        back = np.empty_like(order)
        np.put_along_axis(back, order, np.arange(n)[None, :].repeat(n_rows, axis=0), axis=1)
        differs = np.zeros(size.shape, dtype=bool)
        differs[run[:, 1:][decided_by_rounding]] = True
        tied[r_ids] = np.take_along_axis(np.where(k & differs[run], mean[run], r), back, axis=1)
    return tied


def _bound_cases(rng):
    """Values with bounds from none to overlapping everything: ties, NaN values and bounds, +-inf bounds, rows
    with one valid cell, whole-panel bounds."""
    from alpha_gym.language import bounds
    for case in range(60):
        T, N = int(rng.integers(1, 40)), int(rng.integers(1, 70))
        x = rng.standard_normal((T, N)) * 10.0 ** rng.integers(-3, 4)
        if case % 3 == 0:
            x = np.round(x, 1)                                   # exact ties
        x[rng.random((T, N)) < 0.1] = np.nan
        scale = 10.0 ** rng.uniform(-16, 0, (T, N))
        ex = np.abs(x) * scale * rng.random((T, N))
        ex[rng.random((T, N)) < 0.03] = np.nan                   # "anything"
        ex[rng.random((T, N)) < 0.02] = np.inf
        if case % 7 == 0:
            ex = bounds.Relative(float(10.0 ** rng.uniform(-12, -6)))
        if case % 11 == 0:
            ex = float(10.0 ** rng.uniform(-6, 0))
        yield x, ex


def test_rounding_runs_agree_with_the_numpy_rule_bit_for_bit():
    from alpha_gym.language import bounds
    rng = np.random.default_rng(17)
    changed = 0
    for x, ex in _bound_cases(rng):
        for ranks in (None, ops.rank(x)):
            got, want = bounds.rounding_runs(x, ex, ranks), numpy_rounding_runs(x, ex, ranks)
            assert (got is None) == (want is None)
            if got is not None:
                assert got.tobytes() == want.tobytes()
                changed += 1
    assert changed >= 20          # the cases reach runs that rounding decides, not only the early exits


def test_the_numpy_fallback_of_rounding_runs_is_the_compiled_rule_bit_for_bit():
    from alpha_gym.language import bounds
    rng = np.random.default_rng(23)
    for x, ex in _bound_cases(rng):
        ex = bounds._array(bounds.absolute(ex, x), x.shape)
        rs = ops.rank(x)
        a, b = np.empty_like(rs), np.empty_like(rs)
        assert compiled.rounding_runs_rows(x, np.ascontiguousarray(ex), rs, a) == \
            bounds._rounding_runs_rows(x, ex, rs, b)
        assert a.tobytes() == b.tobytes()


_FIRST_USE = textwrap.dedent("""
    import numpy as np
    from alpha_gym.language import compiled, ops
    x = np.arange(600.0).reshape(200, 3) ** 1.5
    x[5, 1] = np.nan
    got = ops.ts_corr(x, x[::-1].copy(), 7)
    print(compiled.ready(compiled.window_corr), got.tobytes().hex()[:4000], sum(compiled.window_corr.stats.cache_hits.values()))
""")


def test_a_process_on_a_cold_cache_answers_with_numpy_while_the_compiler_fills_the_cache(tmp_path):
    """The first process does not wait for the compiler: it answers with the numpy kernel and starts the background
    compiler; once that has filled the cache, a new process loads the compiled kernel and gives the same bits."""
    import time
    env = {"ALPHA_GYM_CACHE": str(tmp_path / "cache")}
    first = _run(_FIRST_USE, env)
    assert first.returncode == 0, first.stderr[-2000:]
    ready, bits, hits = first.stdout.split()
    assert ready == "False" and hits == "0"
    index = tmp_path / "cache" / "numba"
    deadline = time.monotonic() + 900
    while not any(index.rglob("compiled.rounding_runs_rows-*.nbi")) and time.monotonic() < deadline:
        time.sleep(2)          # the compiler's last kernel written: all of them are in the cache
    time.sleep(2)
    second = _run(_FIRST_USE, env)
    assert second.returncode == 0, second.stderr[-2000:]
    ready2, bits2, hits2 = second.stdout.split()
    assert ready2 == "True" and int(hits2) >= 1 and bits2 == bits
