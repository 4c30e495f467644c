"""benchmarks/shortlist_rules.py's shortlist rules: the diverse rule admits by train reward but never two formulas
whose search-window P&L correlate at or above the cap, skips formulas the search window refuses, and stops at the
size; the form of a formula ignores its constants and spacing only."""

from __future__ import annotations

import numpy as np
import pytest

import benchmarks.shortlist_rules as rules    # the repo root is on pytest's pythonpath
from alpha_gym.evaluation.holdout import TrainVerdict


def _verdicts(nets):
    return {f: TrainVerdict(net is not None, "ok" if net is not None else "refused", 1.0, 0.1, net)
            for f, net in nets.items()}


@pytest.mark.parametrize("cap", [0.3, 0.5, 0.7, 0.9])
def test_the_diverse_shortlist_admits_no_pair_correlated_at_the_cap(cap):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 400))
    # 40 formulas: noisy copies of 5 bets at several noise levels, in a shuffled reward order
    nets = {f"f{i}": base[i % 5] + (0.2 + i / 20) * rng.standard_normal(400) for i in range(40)}
    verdicts = _verdicts(nets)
    listed = rules.diverse_shortlist(list(nets), verdicts.__getitem__, 100, cap)
    corr = np.corrcoef(np.stack([nets[f] for f in listed]))
    assert np.all(np.abs(corr[~np.eye(len(listed), dtype=bool)]) < cap)
    assert listed[0] == "f0" and len(listed) >= 5
    if cap <= 0.7:                  # the noisy copies of one bet correlate above these caps: some are left out
        assert len(listed) < 40
    # greedy by the given order: each formula left out correlates at the cap with one admitted before it
    for f in nets:
        if f not in listed:
            earlier = [g for g in listed if list(nets).index(g) < list(nets).index(f)]
            assert max(abs(np.corrcoef(nets[f], nets[g])[0, 1]) for g in earlier) >= cap - 1e-12


def test_the_diverse_shortlist_skips_refused_formulas_and_stops_at_its_size():
    rng = np.random.default_rng(1)
    nets = {f"f{i}": (None if i % 3 == 0 else rng.standard_normal(300)) for i in range(30)}
    listed = rules.diverse_shortlist(list(nets), _verdicts(nets).__getitem__, 4, 0.5)
    assert listed == [f for f in nets if nets[f] is not None][:4]


@pytest.mark.parametrize("a,b,same", [
    ("-1 * ts_cov(rank(close), rank(high + low), 24)", "-1.25 * ts_cov(rank(close),  rank(high + low), 15)", True),
    ("rank(ts_delta(close, 5))", "rank(ts_delta(close, 10.5))", True),
    ("-1 * ts_cov(rank(close), rank(high + low), 24)", "-1 * ts_cov(rank(close), rank(open + low), 24)", False),
    ("rank(close)", "rank(rank(close))", False),
    ("ts_max(close, 100)", "ts_min(close, 100)", False),
])
def test_a_form_ignores_constants_and_spacing_only(a, b, same):
    assert (rules.form_of(a) == rules.form_of(b)) is same
