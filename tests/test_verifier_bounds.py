"""Bounded memory and time in the verifier, the disk cache of seed books (issue 13).

Peak memory is measured with tracemalloc (numpy reports its array allocations to it), in units of
one panel-sized array, so the assertions hold on any panel size. Timings are not asserted here:
they are in benchmarks/verifier_scale.py and BENCHMARKS.md.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from alpha_gym.book.book import build_book, weights_from_signal
from alpha_gym.language import Limits, parse
from alpha_gym.language.evaluate import evaluate, peak_arrays, uses
from alpha_gym.language.operators import KERNELS
from alpha_gym.market import synthetic_panel
from alpha_gym.scoring import seed_cache
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier


def balanced(leaves, ops):
    level = 0
    while len(leaves) > 1:
        op = ops[level % len(ops)]
        nxt = [f"({leaves[i]} {op} {leaves[i + 1]})" for i in range(0, len(leaves) - 1, 2)]
        if len(leaves) % 2:
            nxt.append(leaves[-1])
        leaves, level = nxt, level + 1
    return leaves[0]


def wide(n):
    """n distinct delayed fields multiplied and summed: 2n - 1 panel-sized intermediates."""
    return balanced([f"delay({f}, {1 + i // 6})" for i, f in
                     enumerate(["close", "open", "high", "low", "volume", "vwap"] * 20)][:n], ["*", "+"])


WIDE = wide(28)  # within every limit (about 250 tokens)


@pytest.fixture(scope="module")
def panel():
    p = synthetic_panel(n_stocks=40, n_days=500, seed=5)
    for name in ("vwap", "returns", "dollar_volume"):
        p.field(name)  # derived fields belong to the panel, not to a formula's peak
    return p


def peak_bytes(fn) -> int:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def test_intermediates_are_freed_after_their_last_use(panel):
    node = parse(wide(64), Limits(max_tokens=1024))  # 127 intermediates
    array = panel.n_days * panel.n_stocks * 8
    kept = evaluate(node, panel, cache={})  # the memoising path keeps every intermediate: the old peak
    fresh = evaluate(node, panel)
    np.testing.assert_array_equal(fresh, kept)  # same values, bit for bit
    memo_peak = peak_bytes(lambda: evaluate(node, panel, cache={})) / array
    peak = peak_bytes(lambda: evaluate(node, panel)) / array
    assert memo_peak > 100
    assert peak <= peak_arrays(node) + 3  # the Sethi-Ullman bound, plus a kernel's temporaries
    assert peak_arrays(node) <= 8


def test_shared_subexpressions_are_computed_once_and_kept_until_their_last_use(panel):
    text = "rank(ts_corr(close, volume, 10)) * ts_corr(close, volume, 10) + ts_mean(ts_corr(close, volume, 10), 5)"
    node = parse(text)
    shared = parse("ts_corr(close, volume, 10)")
    assert uses(node)[shared] == 3
    np.testing.assert_array_equal(evaluate(node, panel), evaluate(node, panel, cache={}))


def test_a_group_does_not_hold_one_answers_arrays_while_scoring_the_next(panel):
    v = Verifier(panel, VerifierConfig(archive_seed=False))
    v.archive, v.factors
    array = panel.n_days * panel.n_stocks * 8
    one = peak_bytes(lambda: v.score_group([f"<alpha>{WIDE}</alpha>"])) / array
    twelve = peak_bytes(lambda: v.score_group([f"<alpha>{WIDE}</alpha>"] * 12)) / array
    assert one > 2 and twelve < one + 3, (one, twelve)  # not 12x: books are kept without their weights
    group = v.score_group([f"<alpha>{WIDE}</alpha>"] * 2)
    assert all(ev.book.weights is None for ev in group.evaluated)
    assert group.scores[0].diagnostics["traded_days"] > 0


def test_rank_is_idempotent_bit_for_bit_so_the_book_skips_it():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 30))
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, :10] = np.round(x[:, :10], 1)  # ties
    x[5, 1:] = np.nan  # a row with one valid cell
    r = KERNELS["rank"](x)
    np.testing.assert_array_equal(KERNELS["rank"](r), r)
    np.testing.assert_array_equal(weights_from_signal(r, ranked=True), weights_from_signal(r))
    open_ = np.exp(np.cumsum(rng.standard_normal((300, 30)) * 0.01, axis=0))
    dates = np.arange(300).astype("datetime64[D]")
    a = build_book(r, open_, dates, lambda w, t: 0.001 * t, ranked=True)
    b = build_book(r, open_, dates, lambda w, t: 0.001 * t)
    np.testing.assert_array_equal(a.net, b.net)
    assert a.traded_days == b.traded_days == int((np.abs(b.weights).sum(axis=1) > 0).sum())


def test_over_the_cost_limit_is_an_invalid_answer_naming_the_limit(panel):
    v = Verifier(panel, VerifierConfig(archive_seed=False))
    text = "ts_rank(close, 252) + ts_rank(open, 252) + ts_rank(high, 252) + ts_rank(low, 252)"
    s = v.score(f"<alpha>{text}</alpha>")
    assert not s.valid and s.reward == pytest.approx(v.config.invalid_reward("unparseable"))
    assert "max_cost=500" in s.reason and s.diagnostics["error"] == "limit"
    loose = Verifier(panel, VerifierConfig(archive_seed=False, limits=VerifierConfig().limits.__class__(max_cost=1e4)))
    assert loose.score(f"<alpha>{text}</alpha>").valid


# ============================================================================ seed books on disk
def test_seed_books_are_cached_on_disk_and_read_back_identically(tmp_path, monkeypatch, panel):
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path))
    first = Verifier(panel)
    archive = first.archive
    files = list(tmp_path.glob("seeds-*.npz"))
    assert len(files) == 1 and len(archive) > 20
    second = Verifier(panel)  # a new process would do exactly this
    books = seed_cache._load(files[0], len(second._returns))
    assert books is not None and len(books) >= len(archive)
    assert second.archive.forms == archive.forms
    for a, b in zip(second.archive.sharpe_rows(), archive.sharpe_rows()):
        np.testing.assert_array_equal(a, b)
    answer = "<alpha>rank(-ts_delta(close, 3))</alpha>"
    assert second.score(answer).to_dict() == first.score(answer).to_dict()
    # another configuration is another key; a damaged file is recomputed, never an error
    Verifier(panel, VerifierConfig(min_turnover_invalid=0.025)).archive
    assert len(list(tmp_path.glob("seeds-*.npz"))) == 2
    files[0].write_bytes(b"not an npz")
    assert Verifier(panel).archive.forms == archive.forms
    assert seed_cache._load(files[0], len(second._returns)) is not None  # rewritten


def test_seed_cache_keeps_the_newest_files(tmp_path):
    import os
    for i in range(20):
        f = tmp_path / f"seeds-{i:02d}.npz"
        f.write_bytes(b"x")
        os.utime(f, (1000 + i, 1000 + i))
    seed_cache._prune(tmp_path, keep=16)
    assert sorted(f.name for f in tmp_path.glob("seeds-*.npz")) == [f"seeds-{i:02d}.npz" for i in range(4, 20)]


def test_seed_cache_off(tmp_path, monkeypatch, panel):
    monkeypatch.setenv("ALPHA_GYM_CACHE", "off")
    assert seed_cache.cache_dir() is None
    assert len(Verifier(panel).archive) > 20
    assert seed_cache.seed_key(panel.fingerprint(), VerifierConfig()) != \
        seed_cache.seed_key(panel.fingerprint(), VerifierConfig(min_turnover_invalid=0.025))


def test_panel_fields_are_row_major_after_select_and_window():
    """Kernels slice by rows: a column-major panel (what select() made) ran ts_rank 4x slower on us46."""
    p = synthetic_panel(n_stocks=10, n_days=80, seed=1)
    for cut in (p.select(p.tickers[::-2]), p.window(end=p.dates[50]), p.head(30)):
        assert all(a.flags.c_contiguous for a in cut.data.values())
    assert p.select(p.tickers[:3]).data["close"].flags.c_contiguous
