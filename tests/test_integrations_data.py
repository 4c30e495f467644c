"""pandas/polars in and out, the alphalens export and the process-wide Verifier cache (issue 12, part a)."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_gym.market import DataError, load_panel, synthetic_panel
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier

pd = pytest.importorskip("pandas", reason="pandas (alpha-gym[data]) is needed for DataFrame input and output")

FORMULA = "rank(-ts_delta(close, 5))"
FIELDS = ("open", "high", "low", "close", "volume")


@pytest.fixture(scope="module")
def panel():
    return synthetic_panel(n_stocks=10, n_days=300, seed=5)


@pytest.fixture(scope="module")
def long_frame(panel):
    """The panel in the long format, rows shuffled, dates as ISO strings."""
    n_days, n_stocks = panel.shape
    df = pd.DataFrame({"date": np.repeat(panel.dates.astype(str), n_stocks),
                       "ticker": np.tile(np.array(panel.tickers), n_days),
                       **{f: panel.field(f).reshape(-1) for f in FIELDS}})
    return df.sample(frac=1.0, random_state=0).reset_index(drop=True)


@pytest.fixture(scope="module")
def verifier(panel):
    from alpha_gym.pool import shared_verifier
    return shared_verifier(panel)


# ------------------------------------------------------------------ DataFrame input
def test_pandas_frame_loads_like_its_csv(panel, long_frame, tmp_path):
    path = tmp_path / "bars.csv"
    long_frame.to_csv(path, index=False)
    from_file = load_panel(path, universe=list(panel.tickers))
    from_frame = load_panel(long_frame, universe=list(panel.tickers))
    assert from_frame.fingerprint() == from_file.fingerprint() == panel.fingerprint()
    assert from_frame.source == "pandas.DataFrame#custom10"
    # datetime dates, a (date, ticker) MultiIndex and a window give the same arrays
    dated = long_frame.assign(date=pd.to_datetime(long_frame["date"]))
    assert load_panel(dated.set_index(["date", "ticker"]), universe=list(panel.tickers)).fingerprint() == \
        panel.fingerprint()
    cut = load_panel(dated, universe=list(panel.tickers[:4]), start=str(panel.dates[10]), end=str(panel.dates[99]))
    assert cut.fingerprint() == panel.select(panel.tickers[:4]).window(panel.dates[10], panel.dates[99]).fingerprint()


def test_polars_frame_loads_like_pandas(panel, long_frame):
    pl = pytest.importorskip("polars", reason="polars is not installed")
    frame = pl.DataFrame({c: long_frame[c].to_numpy() for c in long_frame.columns})
    universe = list(panel.tickers)
    assert load_panel(frame, universe=universe).fingerprint() == panel.fingerprint()
    as_dates = frame.with_columns(pl.col("date").str.to_date())
    assert load_panel(as_dates, universe=universe).fingerprint() == panel.fingerprint()
    assert load_panel(as_dates.lazy(), universe=universe).source == "polars.DataFrame#custom10"


@pytest.mark.parametrize("break_it, message", [
    (lambda df: df.drop(columns="volume"), "missing required column(s) ['volume']"),
    (lambda df: df.assign(open=np.where(df.index == 3, -1.0, df["open"])), "non-positive price in 'open': row 4"),
    (lambda df: pd.concat([df, df.iloc[[7]]], ignore_index=True), "duplicate (date, ticker) pair"),
    (lambda df: df.drop(index=[11]), "have missing sessions"),
    (lambda df: df.assign(close=df["close"].astype(object).where(df.index != 2, "abc")), "non-numeric value"),
    (lambda df: df.assign(date=df["date"].where(df.index != 5, "not a date")), "unparseable date"),
])
def test_bad_frames_get_the_files_data_errors(long_frame, break_it, message):
    with pytest.raises(DataError) as err:
        load_panel(break_it(long_frame.copy()))
    assert message in str(err.value) and str(err.value).startswith("pandas.DataFrame")


def test_real_data_through_pandas_equals_the_file(real_us46):
    from conftest import REAL_DATA_DIR, REAL_TRAIN_FILE
    from alpha_gym.market import load_universe
    universe = load_universe(REAL_DATA_DIR / "universe_us46.txt")
    frame = pd.read_csv(REAL_TRAIN_FILE)
    frame = frame[frame["ticker"].isin(universe)]
    assert load_panel(frame, universe=universe).fingerprint() == real_us46.fingerprint()


# ------------------------------------------------------------------ book output
def test_book_frames_are_the_verifiers_book(verifier):
    from alpha_gym.integrations.frames import book_frames
    frames = book_frames(verifier, FORMULA)
    ev = verifier.evaluate(FORMULA)
    book = ev.book
    weights = verifier.book(ev.node).weights  # the full book (a verifier may keep evaluate's book light)
    assert frames.weights.shape == weights.shape
    assert list(frames.weights.columns) == list(verifier.panel.tickers)
    assert (frames.weights.index.values.astype("datetime64[D]") == book.dates).all()
    np.testing.assert_array_equal(frames.weights.to_numpy(), weights)
    for name in ("gross", "cost", "net", "turnover"):
        np.testing.assert_array_equal(getattr(frames, name).to_numpy(), getattr(book, name))
    daily = frames.daily()
    np.testing.assert_array_equal((daily["gross"] - daily["cost"]).to_numpy(), daily["net"].to_numpy())
    # the P&L is the weights times the open(t+1)->open(t+2) returns
    np.testing.assert_allclose((frames.weights * frames.returns.fillna(0.0)).sum(axis=1), frames.gross, atol=1e-15)
    # the verifier's reported Sharpe is the Sharpe of this net series
    from alpha_gym.book.metrics import sharpe
    assert verifier.score_formula(FORMULA).diagnostics["sharpe"] == pytest.approx(sharpe(frames.net.to_numpy()))


def test_book_frames_to_polars(verifier):
    pytest.importorskip("polars", reason="polars is not installed")
    from alpha_gym.integrations.frames import book_frames
    frames = book_frames(verifier, FORMULA)
    out = frames.to_polars()
    assert out["daily"].columns == ["date", "gross", "cost", "net", "turnover"]
    np.testing.assert_array_equal(out["daily"]["net"].to_numpy(), frames.net.to_numpy())
    assert out["weights"].height == frames.weights.size
    assert out["weights"]["weight"].sum() == pytest.approx(frames.weights.to_numpy().sum(), abs=1e-12)


def test_book_frames_bad_formula_is_a_formula_error(verifier):
    from alpha_gym.integrations.frames import book_frames
    from alpha_gym.language import FormulaError
    with pytest.raises(FormulaError):
        book_frames(verifier, "rank(close -)")


# ------------------------------------------------------------------ alphalens
def test_alphalens_factor_returns_equal_alpha_gym_gross_pnl(verifier):
    pytest.importorskip("alphalens", reason="alphalens-reloaded is not installed")
    from alphalens.performance import factor_returns
    from alpha_gym.integrations.alphalens import alphalens_inputs, factor_data
    from alpha_gym.integrations.frames import book_frames
    gross = book_frames(verifier, FORMULA).gross
    data = factor_data(verifier, FORMULA)
    ours = factor_returns(data)["1D"]
    traded = gross[verifier.evaluate(FORMULA).book.turnover.cumsum() > 0]
    assert len(ours) > 250
    np.testing.assert_allclose(ours.to_numpy(), gross.reindex(ours.index.tz_localize(None)).to_numpy(), atol=1e-12)
    assert set(ours.index.tz_localize(None)) <= set(traded.index)
    # handing alphalens the open prices unshifted (the trap the export avoids) does not match
    factor, _ = alphalens_inputs(verifier, FORMULA)
    import pandas as pd_
    from alphalens.utils import get_clean_factor_and_forward_returns
    raw_open = pd_.DataFrame(verifier.panel.field("open"),
                             index=pd_.DatetimeIndex(verifier.panel.dates.astype("datetime64[ns]")),
                             columns=list(verifier.panel.tickers))
    naive = factor_returns(get_clean_factor_and_forward_returns(factor, raw_open, periods=(1,), max_loss=1.0))["1D"]
    assert np.abs(naive.to_numpy() - gross.reindex(naive.index.tz_localize(None)).to_numpy()).max() > 1e-4


# ------------------------------------------------------------------ the verifier pool
def test_shared_verifier_is_one_per_panel_and_config(panel):
    from alpha_gym import pool
    a = pool.shared_verifier(panel)
    assert pool.shared_verifier(panel, VerifierConfig()) is a
    assert pool.shared_verifier(synthetic_panel(n_stocks=10, n_days=300, seed=5)) is a  # same data, new object
    other = pool.shared_verifier(panel, VerifierConfig(turnover_cap=0.4))
    assert other is not a and other.config.turnover_cap == 0.4
    assert pool.shared_verifier(panel, fresh=True) is not a
    assert a._archive is not None  # warmed before it was handed out
    # it scores exactly as a verifier built by hand
    for answer in ("<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(close -)</alpha>", "no tag"):
        assert a.score(answer).to_dict() == Verifier(panel).score(answer).to_dict()


def test_cached_panel_loads_a_file_once(panel, long_frame, tmp_path):
    from alpha_gym import pool
    path = tmp_path / "bars.csv"
    long_frame.to_csv(path, index=False)
    first = pool.cached_panel(path, universe=list(panel.tickers))
    assert pool.cached_panel(str(path), universe=list(panel.tickers)) is first
    assert first.fingerprint() == panel.fingerprint()
    assert pool.shared_verifier(data=path, universe=list(panel.tickers)) is pool.shared_verifier(panel)
    with pytest.raises(ValueError):
        pool.shared_verifier(panel, data=path)
