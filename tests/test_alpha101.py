"""The 101 Formulaic Alphas: transcription, paper syntax, evaluation, and differential tests against alpha101v.

The differential tests evaluate every alpha that both engines compute without industry data
on the real us46 panel (46 x 3,304) with alpha_gym and with alpha101v's `run_factor_raw`
(float64), and assert agreement. Every difference found is a documented convention
(docs/operators.md, "Differences from alpha101v"): where one applies, the test plugs
alpha101v's convention into our evaluator (element-wise min/max, `^`) or checks the exact
cells it explains (x / (y / 0)), and asserts agreement on the rest. Where the paper's
formula ranks values that are mathematically tied but differ by float noise (sums of
ranks, correlations of rank series, constant-window covariances), the two engines break
the tie differently: those alphas are held to the same NaN cells, a bounded share of
differing cells and a per-day rank correlation near 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from alpha_gym.alpha101 import ALPHAS, PAPER_LIMITS, formula, formulas, parse_alpha
from alpha_gym.language import DEFAULT_LIMITS, FormulaError, Op, canonical, lookback, parse, to_text, walk
from alpha_gym.language import ops
from alpha_gym.language.evaluate import DataUnavailableError, evaluate
from alpha_gym.language.operators import KERNELS
from alpha_gym.market import Panel

INDUSTRY = (48, 58, 59, 63, 67, 69, 70, 76, 79, 80, 82, 87, 89, 90, 91, 93, 97, 100)
CAP = (56,)
FREE = tuple(n for n in range(1, 102) if n not in INDUSTRY + CAP)


# ------------------------------------------------------------------ the data set
def test_the_set_has_101_alphas_with_their_data_needs():
    assert [a.n for a in ALPHAS] == list(range(1, 102))
    assert tuple(a.n for a in ALPHAS if a.industry) == INDUSTRY
    assert tuple(a.n for a in ALPHAS if a.cap) == CAP
    assert tuple(formulas()) == FREE and len(FREE) == 82
    assert len(formulas(industry_free=False)) == 101
    assert formula(101) == "((close - open) / ((high - low) + .001))"
    assert ALPHAS[66].industry_levels == ("sector", "subindustry")  # #67 names two levels
    for n in (0, 102):
        with pytest.raises(KeyError):
            formula(n)


def test_transcription_spot_checks():
    """A few formulas exactly as printed (window decimals, `2.`, the paper's own capitalisation)."""
    assert formula(1) == ("(rank(Ts_ArgMax(SignedPower(((returns < 0) ? stddev(returns, 20) : close), 2.), 5))"
                          " - 0.5)")
    assert formula(84) == "SignedPower(Ts_Rank((vwap - ts_max(vwap, 15.3217)), 20.7127), delta(close, 4.96796))"
    assert "Sign(delta(IndNeutralize(" in formula(80) and "rank(Log(product(" in formula(81)
    assert formula(48).startswith("(indneutralize(") and "Ts_ArgMin(correlation(" in formula(98)


@pytest.mark.parametrize("n", range(1, 102))
def test_every_alpha_parses_and_prints_back(n):
    node = parse_alpha(n)
    assert parse(formula(n), DEFAULT_LIMITS) == node  # all 101 also fit the answers' default limits
    assert parse(formula(n), PAPER_LIMITS) == node
    assert parse(to_text(node)) == node
    assert parse(canonical(node)) is not None


def test_paper_limits_are_only_headroom():
    worst_lookback = max(lookback(parse_alpha(n)) for n in range(1, 102))
    assert worst_lookback == lookback(parse_alpha(48)) == 251 <= DEFAULT_LIMITS.max_lookback
    assert PAPER_LIMITS.max_lookback > DEFAULT_LIMITS.max_lookback and PAPER_LIMITS.max_depth > DEFAULT_LIMITS.max_depth


def _ops(n):
    return [x for x in walk(parse_alpha(n)) if isinstance(x, Op)]


def test_paper_conventions_inside_the_set():
    # min(x, 5) with an integer literal is the paper's ts_min (Alpha#29) ...
    assert any(o.name == "ts_min" and o.window == 5 and o.args[0].name == "ts_product" for o in _ops(29))
    # ... min/max of two expressions are element-wise (Alpha#71, #77)
    assert _ops(71)[0].name == "max" and _ops(77)[0].name == "min"
    # non-integer windows are floored (Alpha#58 needs industry data but parses)
    wins = {(o.name, o.window) for o in _ops(58)}
    assert {("ts_corr", 3), ("ts_decay_linear", 7), ("ts_rank", 5)} <= wins
    assert any(o.name == "ind_neutralize" for o in _ops(58))
    # adv{d} is its own node; SignedPower takes an expression exponent (Alpha#84)
    assert any(o.name == "adv" and o.window == 180 for o in _ops(61))
    assert _ops(84)[0].name == "signed_power" and isinstance(_ops(84)[0].args[1], Op)
    # `^` is power, `||` is or, `?:` is where
    assert _ops(41)[1].name == "power" and _ops(24)[0].name == "where" and _ops(24)[1].name == "or"


def test_seed_formulas_are_the_industry_free_paper_alphas():
    from alpha_gym.scoring.seeds import SEED_FORMULAS, SEED_NUMBERS
    assert SEED_NUMBERS == FREE
    assert SEED_FORMULAS == tuple(formula(n) for n in FREE)
    for f in SEED_FORMULAS:
        parse(f, DEFAULT_LIMITS)


# ------------------------------------------------- industry and cap data (synthetic)
def _with_cap(panel):
    data = dict(panel.data)
    shares = np.linspace(1e8, 5e9, panel.n_stocks)
    data["cap"] = panel.field("close") * shares
    return Panel(data, panel.dates, panel.tickers, source=panel.source, sectors=panel.sectors)


def _bare(panel):
    return Panel({k: v for k, v in panel.data.items() if k != "cap"}, panel.dates, panel.tickers)


@pytest.mark.parametrize("n", INDUSTRY + CAP)
def test_industry_and_cap_alphas_need_their_data(small_synthetic, n):
    rich = _with_cap(small_synthetic)
    assert rich.sectors is not None
    out = evaluate(parse_alpha(n), rich)
    assert np.isfinite(out).any()
    with pytest.raises(DataUnavailableError) as info:
        evaluate(parse_alpha(n), _bare(small_synthetic))
    assert isinstance(info.value, FormulaError) and info.value.kind == "missing_data"
    assert ("sector map" in str(info.value)) == (n in INDUSTRY)


def test_verifier_rejects_industry_alphas_without_sectors(small_synthetic):
    from alpha_gym import Verifier, VerifierConfig
    v = Verifier(_bare(small_synthetic), VerifierConfig(archive_seed=False))
    s = v.score_formula(formula(58))
    assert not s.valid and "industry" in s.reason and s.diagnostics["error"] == "missing_data"
    s = v.score_formula(formula(56))
    assert not s.valid and "cap" in s.reason
    assert v.score_formula(formula(101)).valid


def test_ind_neutralize_removes_sector_means(small_synthetic):
    x = evaluate(parse("IndNeutralize(close, IndClass.industry)"), small_synthetic)
    close = small_synthetic.field("close")
    labels = np.array(small_synthetic.sectors)
    for g in set(labels):
        cols = labels == g
        np.testing.assert_allclose(x[:, cols], close[:, cols] - close[:, cols].mean(axis=1, keepdims=True),
                                   rtol=1e-12, atol=1e-9)
    same = [evaluate(parse(f"IndNeutralize(close, IndClass.{lv})"), small_synthetic)
            for lv in ("sector", "subindustry")]
    assert all(np.array_equal(x, s, equal_nan=True) for s in same)  # every level reads the one sector map


# ------------------------------------------------------------- real us46: coverage
#: Alphas whose NaN share after warm-up is high on us46, and why (alpha101v has the same NaN
#: cells: see the differential tests). Value: the lowest finite share accepted.
LOW_COVERAGE = {
    3: 0.5,    # correlation(rank(open), rank(volume), 10): a stock's price rank is often constant for 10 days
    15: 0.05,  # 3-day correlation of ranks, then a 3-day sum: one constant window blanks 3 days
    27: 0.3,   # 6-day correlation of ranks (constant windows)
    50: 0.1,   # 5-day correlation of ranks, then a 5-day ts_max
    68: 0.1,   # 8-day correlation of rank(high) and rank(adv15), then a 13-day Ts_Rank
    74: 0.5,   # 11-day correlation of ranks
    75: 0.4,   # 12-day correlation of rank(low) and rank(adv50)
    78: 0.3,   # 5-day correlation of ranks as the exponent; NaN exponent -> NaN
    81: 0.25,  # 5-day correlation of ranks
    88: 0.7,   # min(a, b) is NaN where either is: b rests on an 8-day correlation of two Ts_Ranks
    92: 0.05,  # min(a, b) is NaN where either is: b rests on a 7-day correlation of rank(low), rank(adv30)
    96: 0.0,   # both branches rest on 3-day correlations of ranks / ts_ranks through decay and Ts_Rank
    98: 0.4,   # 20-day correlation of rank(open) and rank(adv15), then Ts_ArgMin 8, Ts_Rank 6, decay 8
}


@pytest.fixture(scope="module")
def ours_us46(real_us46):
    cache = {}

    def get(n):
        if n not in cache:
            cache[n] = evaluate(parse_alpha(n), real_us46)
        return cache[n]
    return get


@pytest.mark.real_data
@pytest.mark.parametrize("n", FREE)
def test_industry_free_alpha_evaluates_on_us46(ours_us46, n):
    out = ours_us46(n)
    assert out.shape == (3304, 46) and not np.isinf(out).any()
    share = np.isfinite(out[lookback(parse_alpha(n)) + 1:]).mean()
    assert share >= LOW_COVERAGE.get(n, 0.8), f"Alpha#{n}: only {share:.1%} finite after warm-up"


# ---------------------------------------------------- real us46: against alpha101v
def _exact_float_rules(monkeypatch):
    """Our kernels without the rules that make constants up to rounding constant (docs/operators.md,
    "Constants up to rounding"): alpha101v orders rounding noise, so the cell-by-cell comparisons
    check the kernels with those tolerances at 0."""
    monkeypatch.setattr(ops, "TIE_ULPS", 0)
    monkeypatch.setattr(ops, "CANCEL_RTOL", 0.0)
    monkeypatch.setattr(ops, "MIN_MOMENT_WINDOW", {})


def _unmemoised(p: Panel) -> Panel:
    """The panel without the field ranks it memoises (`Panel.memo`): those were ranked with the rules on."""
    return Panel(dict(p.data), p.dates, p.tickers, sectors=p.sectors)


@pytest.fixture(scope="module")
def peer(real_us46):
    """alpha101v's panel built from ours (same dates, tickers and values) and a cached runner."""
    try:
        import pandas as pd
        from alpha101v.operators import research_mode
        from alpha101v.registry import run_factor_raw
    except Exception as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"alpha101v not importable: {exc}")
    p = real_us46
    idx = pd.DatetimeIndex(p.dates.astype("datetime64[ns]"))

    def frame(name):
        return pd.DataFrame(np.array(p.field(name)), index=idx, columns=list(p.tickers))

    # `Open` is capitalised; alpha101v's adv{d} is the mean of `amount`: give it dollar volume
    # (vwap * volume, our adv's input); vwap and returns are ours ((h+l+c)/3, close-to-close).
    fields = {"close": frame("close"), "Open": frame("open"), "high": frame("high"), "low": frame("low"),
              "volume": frame("volume"), "vwap": frame("vwap"), "returns": frame("returns"),
              "amount": frame("dollar_volume")}
    cache = {}

    def run(n):
        if n not in cache:
            # research_mode: decay_linear with the strict NaN rule (its default counts NaN as 0)
            with research_mode(decay_dense=True):
                raw = run_factor_raw(f"alpha{n}", fields).to_numpy(dtype=np.float64)
            cache[n] = np.where(np.isfinite(raw), raw, np.nan)  # raw output may hold +-inf: never ours
        return cache[n]
    return run


def _rel_diff(a, b):
    return np.abs(a - b) / np.maximum(1.0, np.abs(b))


def _daily_rank_corr(a, b):
    """Mean over days of the Spearman correlation of a and b on the cells finite in both."""
    import pandas as pd
    both = np.isfinite(a) & np.isfinite(b)
    ra = pd.DataFrame(np.where(both, a, np.nan)).rank(axis=1).to_numpy()
    rb = pd.DataFrame(np.where(both, b, np.nan)).rank(axis=1).to_numpy()
    ok = both.sum(axis=1) >= 5
    ra, rb = ra[ok], rb[ok]
    ra = ra - np.nanmean(ra, axis=1, keepdims=True)
    rb = rb - np.nanmean(rb, axis=1, keepdims=True)
    num = np.nansum(ra * rb, axis=1)
    den = np.sqrt(np.nansum(ra * ra, axis=1) * np.nansum(rb * rb, axis=1))
    corr = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)  # a day of all ties on both sides: equal
    return float(corr.mean())


#: Alphas that rank (or Ts_Rank, Ts_ArgMax) values that are mathematically tied but carry
#: float noise: the engines break such ties differently. Value: (largest share of differing
#: cells, smallest mean daily rank correlation). Measured on us46 and loosened by ~2x.
TIE_NOISE = {
    5: (1e-3, 0.999),     # open - sum(vwap, 10)/10 equal for two stocks (6-digit prices)
    13: (0.2, 0.99),      # covariance of rank series over a constant window: exact 0 here, +-1e-17 there
    15: (0.8, 0.95),      # 3-day correlations of ranks: +-1 and repeated values, then rank
    16: (0.2, 0.99),      # as 13
    23: (1e-3, 0.999),    # sum(high, 20)/20 == high on one cell (comparison at the tie)
    27: (1e-3, 0.999),    # rank of mean correlations of ranks
    31: (0.05, 0.999),    # decay_linear of rank(rank(.)) tied across stocks, then rank
    45: (0.9, 0.97),      # 2-day correlation is +-1 or NaN (a flat 2-day window of 5-day sums), then rank
    50: (0.05, 0.995),    # rank of 5-day correlations of ranks
    68: (0.01, 0.99),     # Ts_Rank of 8-day correlations of ranks
    71: (0.01, 0.999),    # + element-wise max convention
    72: (1e-3, 0.999),
    73: (1e-3, 0.999),    # + element-wise max convention
    75: (0.01, 0.995),
    78: (0.05, 0.998),    # + power convention
    81: (0.01, 0.995),
    85: (0.02, 0.999),    # + power convention
    88: (0.05, 0.999),    # + element-wise min convention
    92: (0.3, 0.995),     # + element-wise min convention
    94: (0.03, 0.98),     # + power convention: Ts_Rank(corr, 2) compares two equal correlations
    98: (0.25, 0.99),     # Ts_ArgMin of 20-day correlations of ranks (tied minima)
}
#: Alphas that use an element-wise operator whose convention differs: evaluated here with
#: alpha101v's convention plugged into our evaluator (docs/operators.md).
MINMAX = (71, 73, 77, 88, 92, 96)   # min/max skip a NaN argument there (np.fmin/np.fmax)
POWER = (78, 85, 94)                # `^`: 0^y = 0 for every y (NaN too), 1^NaN = 1 there
#: NaN cells allowed on one side only (tie noise on a 2-day correlation's constant test).
NAN_SLACK = {45: 0.002}


def _their_conventions(monkeypatch, n):
    import pandas as pd
    from alpha101v import elemwise

    def wrap(fn):
        def kernel(x, y):
            xa = np.asarray(x, dtype=np.float64)
            ya = np.asarray(y, dtype=np.float64)
            shape = np.broadcast_shapes(xa.shape, ya.shape)
            xf = pd.DataFrame(np.broadcast_to(xa, shape if len(shape) == 2 else (1, 1)).copy())
            yv = float(ya) if ya.ndim == 0 else pd.DataFrame(np.broadcast_to(ya, shape).copy())
            out = fn(xf, yv).to_numpy(dtype=np.float64)
            return np.where(np.isfinite(out), out, np.nan)
        return kernel

    if n in MINMAX:
        monkeypatch.setitem(KERNELS, "min", wrap(elemwise.minimum))
        monkeypatch.setitem(KERNELS, "max", wrap(elemwise.maximum))
    if n in POWER:
        monkeypatch.setitem(KERNELS, "power", wrap(elemwise.power))


@pytest.mark.real_data
@pytest.mark.parametrize("n", FREE)
def test_alpha_agrees_with_alpha101v(real_us46, peer, monkeypatch, n):
    theirs = peer(n)
    _exact_float_rules(monkeypatch)
    if n in MINMAX + POWER:
        _their_conventions(monkeypatch, n)
    ours = evaluate(parse_alpha(n), _unmemoised(real_us46))
    a, b = np.isnan(ours), np.isnan(theirs)
    if n == 83:
        # x / (y / 0): IEEE gives x / inf = 0 there; here every inf is NaN, so the quotient is NaN.
        # Those cells are exactly where vwap == close (the inner denominator).
        zero = real_us46.field("vwap") == real_us46.field("close")
        assert np.array_equal(a & ~b, zero & ~b) and (a & ~b).any()
        ours, theirs = np.where(zero, np.nan, ours), np.where(zero, np.nan, theirs)
        a, b = np.isnan(ours), np.isnan(theirs)
    mismatch = (a != b).mean()
    assert mismatch <= NAN_SLACK.get(n, 0.0), f"Alpha#{n}: NaN cells differ on {mismatch:.3%}"
    both = ~a & ~b
    assert both.mean() > 0 or n == 96
    diff = _rel_diff(ours[both], theirs[both])
    if n in TIE_NOISE:
        max_share, min_corr = TIE_NOISE[n]
        share = float((diff > 1e-7).mean()) if diff.size else 0.0
        assert share <= max_share, f"Alpha#{n}: {share:.3%} of cells differ"
        corr = _daily_rank_corr(ours, theirs)
        assert corr >= min_corr, f"Alpha#{n}: mean daily rank correlation {corr:.5f}"
    else:
        # alpha101v's rolling correlation (pandas' online algorithm) is off by up to ~1e-8 on
        # large-level inputs (test_ops_on_real_data_against_alpha101v): hence 1e-7, not 1e-12
        assert diff.size == 0 or diff.max() <= 1e-7, f"Alpha#{n}: max relative difference {diff.max():.2e}"


@pytest.mark.real_data
def test_minmax_and_power_conventions_do_matter(real_us46, peer, monkeypatch):
    """Without alpha101v's conventions these alphas differ in their NaN cells (documented)."""
    _exact_float_rules(monkeypatch)
    for n in (92, 78):
        a, b = np.isnan(evaluate(parse_alpha(n), _unmemoised(real_us46))), np.isnan(peer(n))
        assert (a & ~b).sum() > 1000 and not (~a & b).any()


@pytest.mark.real_data
def test_industry_alphas_agree_with_alpha101v_given_one_sector_map(real_us46, peer, monkeypatch):
    """IndNeutralize and cap against alpha101v's ind_neutralize: all 19, with one made-up
    sector map for every IndClass level and a synthetic cap."""
    import pandas as pd
    from alpha101v.operators import research_mode
    from alpha101v.registry import run_factor_raw
    p = real_us46
    sectors = tuple(f"S{sum(map(ord, t)) % 6}" for t in p.tickers)
    data = dict(p.data)
    data["cap"] = p.field("close") * np.linspace(1e8, 1e10, p.n_stocks)
    rich = Panel(data, p.dates, p.tickers, sectors=sectors)
    idx = pd.DatetimeIndex(p.dates.astype("datetime64[ns]"))
    cols = list(p.tickers)
    fields = {k: pd.DataFrame(np.array(rich.field(f)), index=idx, columns=cols) for k, f in
              (("close", "close"), ("Open", "open"), ("high", "high"), ("low", "low"), ("volume", "volume"),
               ("vwap", "vwap"), ("returns", "returns"), ("amount", "dollar_volume"), ("cap", "cap"))}
    labels = pd.Series(sectors, index=cols)
    fields.update(ind_sector=labels, ind_industry=labels, ind_subindustry=labels)
    minmax, power = (76, 82, 87), (67, 69, 70, 90)
    for n in INDUSTRY + CAP:
        _exact_float_rules(monkeypatch)
        if n in minmax + power:
            _their_conventions(monkeypatch, MINMAX[0] if n in minmax else POWER[0])
        ours = evaluate(parse_alpha(n), rich)
        monkeypatch.undo()
        with research_mode(decay_dense=True):
            theirs = run_factor_raw(f"alpha{n}", fields).to_numpy(dtype=np.float64)
        theirs = np.where(np.isfinite(theirs), theirs, np.nan)
        a, b = np.isnan(ours), np.isnan(theirs)
        assert (a != b).sum() <= (1 if n == 56 else 0), f"Alpha#{n}: NaN cells differ"  # #56: one x/0 by noise
        both = ~a & ~b
        diff = _rel_diff(ours[both], theirs[both])
        assert (diff > 1e-7).mean() <= 0.03, f"Alpha#{n}: {(diff > 1e-7).mean():.3%} of cells differ"
        assert _daily_rank_corr(ours, theirs) >= 0.99, f"Alpha#{n}"


@pytest.mark.real_data
def test_ops_on_real_data_against_alpha101v(real_us46, peer, monkeypatch):
    """Operators one by one on real fields (before whole alphas), and the precision finding."""
    _exact_float_rules(monkeypatch)
    import pandas as pd
    from fractions import Fraction
    from alpha101v import operators as O
    p = real_us46
    idx = pd.RangeIndex(p.n_days)

    def df(a):
        return pd.DataFrame(np.array(a), index=idx)

    vwap, volume, close = p.field("vwap"), p.field("volume"), p.field("close")
    adv20 = ops.ts_mean(p.field("dollar_volume"), 20)
    rv = ops.rank(volume)
    cases = [
        (ops.ts_corr(vwap, volume, 10), O.correlation(df(vwap), df(volume), 10), 1e-7),
        (ops.ts_corr(ops.rank(close), rv, 6), O.correlation(df(ops.rank(close)), df(rv), 6), 1e-9),
        (ops.ts_cov(close, volume, 5), O.covariance(df(close), df(volume), 5), 1e-7),
        (ops.ts_std(close, 20), O.stddev(df(close), 20), 1e-7),
        (ops.ts_rank(volume, 10), O.ts_rank(df(volume), 10), 0.0),
        (ops.rank(volume), O.rank(df(volume)), 0.0),
        (ops.ts_decay_linear(close, 9), O.decay_linear(df(close), 9, dense=True), 1e-12),
        (ops.ts_argmax(close, 30), O.ts_argmax(df(close), 30), 0.0),
        (ops.ts_argmin(close, 30), O.ts_argmin(df(close), 30), 0.0),
        (ops.ts_sum(adv20, 26), O.ts_sum(df(adv20), 26), 1e-12),
        (ops.ts_product(1 + p.field("returns"), 10), O.product(df(1 + p.field("returns")), 10), 1e-12),
        (ops.scale(close - vwap), O.scale(df(close - vwap)), 1e-12),
    ]
    for i, (ours, theirs, tol) in enumerate(cases):
        theirs = theirs.to_numpy(dtype=np.float64)
        assert np.array_equal(np.isnan(ours), np.isnan(theirs)), i
        ok = ~np.isnan(ours)
        assert _rel_diff(ours[ok], theirs[ok]).max() <= tol, i
    # the rolling correlation of a smooth large-level series: ours matches exact arithmetic,
    # pandas' online update in alpha101v is off by ~1e-9 here (the 1e-7 tolerance above)
    x = vwap[:, 4]
    y = ops.ts_sum(adv20, 26)[:, 4]
    ours = ops.ts_corr(vwap, ops.ts_sum(adv20, 26), 4)[:, 4]
    worst = 0.0
    for t in range(500, 560):
        xs = [Fraction(float(v)) for v in x[t - 3:t + 1]]
        ys = [Fraction(float(v)) for v in y[t - 3:t + 1]]
        mx, my = sum(xs) / 4, sum(ys) / 4
        cov = sum((a - mx) * (b - my) for a, b in zip(xs, ys))
        var = float(sum((a - mx) ** 2 for a in xs)) * float(sum((b - my) ** 2 for b in ys))
        worst = max(worst, abs(ours[t] - float(cov) / math.sqrt(var)))
    assert worst < 1e-13
