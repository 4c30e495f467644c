"""Kernel threads (issue 42.2): the heavy kernels split their independent parts (column chunks, row segments)
over a thread pool inside `ops.kernel_threads(n)`, and every result is bit-identical to one thread's."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from alpha_gym.alpha101 import formulas, parse_alpha
from alpha_gym.language import ops
from alpha_gym.language.evaluate import evaluate
from alpha_gym.language.operators import KERNELS, OPERATORS


def _panel(rng, T=420, N=53):
    a = rng.standard_normal((T, N)).cumsum(axis=0) + 50.0
    a[7:12, 3] = np.nan
    a[200, 10] = np.inf
    a[300, :] = 1.25                  # a row of ties for the ranks
    a[:, 20] = 3.0                    # a constant column for the moments
    return a


@pytest.mark.filterwarnings("error")          # the kernels' silenced warnings stay silent on the pool's threads
@pytest.mark.parametrize("n", [2, 3, 5])
def test_every_window_and_cross_section_kernel_is_bit_identical_on_more_threads(n):
    rng = np.random.default_rng(7)
    x, y = _panel(rng), _panel(rng)
    checked = 0
    for name, spec in OPERATORS.items():
        if spec.kind == "elem" or name in ("adv", "ind_neutralize"):
            continue
        kernel = KERNELS[name]
        args = (x, y)[:2 if name in ("ts_corr", "ts_cov") else 1]
        calls = [args + (w,) for w in (1, 5, 23)] if spec.kind == "ts" else [args]
        for call in calls:
            one = kernel(*call)
            with ops.kernel_threads(n):
                many = kernel(*call)
            assert one.tobytes() == many.tobytes(), (name, call[-1])
            checked += 1
    assert checked >= 40


def test_the_alphas_are_bit_identical_and_the_setting_is_restored(small_synthetic):
    nodes = [parse_alpha(n) for n in list(formulas(industry_free=True))[:30]]
    one = [evaluate(node, small_synthetic).tobytes() for node in nodes]
    with ops.kernel_threads(2):
        assert ops._split_threads() == 2
        two = [evaluate(node, small_synthetic).tobytes() for node in nodes]
    assert ops._split_threads() == 1 and one == two


def test_a_part_on_the_pool_does_not_split_again_and_errors_reach_the_caller():
    seen = []

    def work(lo, hi):
        seen.append((lo, hi, ops._split_threads(), threading.current_thread().name.startswith("alpha-gym-kernel")))
    with ops.kernel_threads(2):
        ops._run_parts(work, ops._segments(10, 2))
    assert sorted(s[:2] for s in seen) == [(0, 5), (5, 10)] and all(s[2] == 1 and s[3] for s in seen)

    def fail(lo, hi):
        raise RuntimeError(f"part {lo}")
    with ops.kernel_threads(2), pytest.raises(RuntimeError, match="part 0"):
        ops._run_parts(fail, ops._segments(10, 2))
    from alpha_gym.ranges import usable_cores
    for bad in (0, -1, 1.5, True, "2", 8 * usable_cores() + 1, 10**6):
        with pytest.raises(ValueError, match="kernel threads"):
            with ops.kernel_threads(bad):
                pass
    assert ops._split_threads() == 1


def test_segments_cover_the_range_in_order_at_multiples_of_the_step():
    for size, parts, step in ((10, 3, 1), (100, 2, 16), (5, 8, 1), (1, 4, 3), (3304, 2, 1424)):
        segs = ops._segments(size, parts, step)
        assert segs[0][0] == 0 and segs[-1][1] == size
        assert all(a[1] == b[0] for a, b in zip(segs, segs[1:])) and all(hi > lo for lo, hi in segs)
        assert all(lo % step == 0 for lo, _ in segs) and len(segs) <= parts


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_pool_of_its_own():
    """A pool made before a fork has no threads in the child: the child makes its own rather than wait forever."""
    import os
    x = np.random.default_rng(3).standard_normal((1200, 120))    # above the split threshold
    with ops.kernel_threads(2):
        want = ops.ts_corr(x, x[::-1].copy(), 9).tobytes()     # the parent's pool exists now
    pid = os.fork()
    if pid == 0:                                               # the child: exit 0 only if the split run finishes
        code = 1
        try:
            import signal
            signal.alarm(20)
            with ops.kernel_threads(2):
                code = 0 if ops.ts_corr(x, x[::-1].copy(), 9).tobytes() == want else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
