"""Market data: the long-format loader, the embedded synthetic market, and the real US panel."""

from __future__ import annotations

import csv
import gzip
import time
import warnings

import numpy as np
import pytest

from alpha_gym.market import DataError, Panel, load_panel, load_universe, synthetic_panel
from alpha_gym.market import loader as loader_mod
from alpha_gym.market import synthetic as synthetic_mod
from alpha_gym.market.synthetic import SyntheticDataNotice

from conftest import REAL_DATA_DIR, REAL_TRAIN_FILE

HEADER = ["date", "ticker", "open", "high", "low", "close", "volume"]


# ============================================================================ helpers
def long_rows(panel: Panel, extra=()) -> list[list]:
    """A panel as long-format rows (date-major), values written exactly (repr)."""
    rows = []
    for t, d in enumerate(panel.dates):
        for j, tick in enumerate(panel.tickers):
            row = [str(d), tick] + [repr(float(panel.data[f][t, j])) for f in HEADER[2:]]
            row += [repr(float(panel.data[f][t, j])) for f in extra]
            rows.append(row)
    return rows


def write_csv(path, rows, header=HEADER):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def write_parquet(path, rows, header=HEADER):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame(rows, columns=header)
    for c in header[2:]:
        df[c] = df[c].astype(float)
    df.to_parquet(path, index=False)
    return path


def assert_same_panel(a: Panel, b: Panel):
    assert a.tickers == b.tickers
    np.testing.assert_array_equal(a.dates, b.dates)
    assert sorted(a.data) == sorted(b.data)
    for name in a.data:
        np.testing.assert_array_equal(a.data[name], b.data[name], err_msg=name)


@pytest.fixture(params=["pandas", "stdlib"])
def backend(request, monkeypatch):
    """Run a loader test with pandas and with the standard-library CSV fallback."""
    if request.param == "pandas":
        pytest.importorskip("pandas")
    else:
        monkeypatch.setattr(loader_mod, "_pd", None)
    return request.param


# A tiny hand-made good file: 3 tickers x 4 sessions.
GOOD = [
    ["2024-01-02", "AAA", "10", "11", "9.5", "10.5", "1000"],
    ["2024-01-02", "BBB", "20", "21", "19", "20.5", "2000"],
    ["2024-01-02", "CCC", "30", "31", "29", "30.5", "3000"],
    ["2024-01-03", "AAA", "10.5", "11.2", "10.1", "11", "1100"],
    ["2024-01-03", "BBB", "20.5", "21.5", "20", "21", "2100"],
    ["2024-01-03", "CCC", "30.5", "31.5", "30", "31", "3100"],
    ["2024-01-04", "AAA", "11", "11.5", "10.8", "11.1", "1200"],
    ["2024-01-04", "BBB", "21", "21.8", "20.9", "21.7", "2200"],
    ["2024-01-04", "CCC", "31", "31.2", "30.1", "30.2", "3200"],
    ["2024-01-05", "AAA", "11.1", "11.9", "11", "11.8", "1300"],
    ["2024-01-05", "BBB", "21.7", "22", "21.5", "21.9", "2300"],
    ["2024-01-05", "CCC", "30.2", "30.9", "30", "30.7", "0"],
]


def edited(row_index, column, value):
    rows = [list(r) for r in GOOD]
    rows[row_index][HEADER.index(column)] = value
    return rows


# ============================================================================ loader
@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
def test_round_trip(tmp_path, small_synthetic, suffix):
    path = tmp_path / f"panel{suffix}"
    rows = long_rows(small_synthetic)
    (write_parquet if suffix == ".parquet" else write_csv)(path, rows)
    panel = load_panel(path)
    assert_same_panel(panel, small_synthetic)
    assert str(path) in panel.source and panel.source.endswith("all")


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_round_trip_without_pandas(tmp_path, small_synthetic, suffix, monkeypatch):
    path = write_csv(tmp_path / f"panel{suffix}", long_rows(small_synthetic))
    monkeypatch.setattr(loader_mod, "_pd", None)
    assert_same_panel(load_panel(path), small_synthetic)


def test_parquet_without_pandas_says_how_to_install(tmp_path, small_synthetic, monkeypatch):
    path = write_parquet(tmp_path / "p.parquet", long_rows(small_synthetic))
    monkeypatch.setattr(loader_mod, "_pd", None)
    with pytest.raises(DataError, match=r"pip install alpha-gym\[data\]"):
        load_panel(path)


def test_unsorted_input_is_sorted(tmp_path, small_synthetic, backend):
    rows = long_rows(small_synthetic)
    order = np.random.default_rng(0).permutation(len(rows))
    path = write_csv(tmp_path / "shuffled.csv", [rows[i] for i in order])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        panel = load_panel(path, universe=list(small_synthetic.tickers))
    assert_same_panel(panel, small_synthetic)


def test_optional_columns_are_carried(tmp_path, backend):
    header = HEADER + ["vwap", "cap"]
    rows = [r + [repr((float(r[3]) + float(r[4])) / 2), "1e9"] for r in GOOD]
    panel = load_panel(write_csv(tmp_path / "x.csv", rows, header))
    assert set(panel.data) == {"open", "high", "low", "close", "volume", "vwap", "cap"}
    assert panel.field("vwap")[0, 0] == pytest.approx(10.25)
    assert np.all(panel.data["cap"] == 1e9)


def test_optional_column_must_be_complete(tmp_path, backend):
    header = HEADER + ["vwap"]
    rows = [r + ["10"] for r in GOOD]
    rows[4][-1] = ""
    with pytest.raises(DataError, match=r"vwap"):
        load_panel(write_csv(tmp_path / "x.csv", rows, header))


def test_good_file_layout(tmp_path, backend):
    panel = load_panel(write_csv(tmp_path / "good.csv", GOOD))
    assert panel.shape == (4, 3)
    assert panel.tickers == ("AAA", "BBB", "CCC")
    assert str(panel.dates[0]) == "2024-01-02" and str(panel.dates[-1]) == "2024-01-05"
    assert panel.data["close"][1, 2] == 31.0 and panel.data["volume"][3, 2] == 0.0


BAD_FILES = {
    "missing column": (lambda: ([r[:6] for r in GOOD], HEADER[:6]), r"missing required column.*volume"),
    "duplicate row": (lambda: (GOOD + [GOOD[4]], HEADER), r"duplicate \(date, ticker\).*2024-01-03 BBB"),
    "non-positive price": (lambda: (edited(5, "close", "0"), HEADER), r"non-positive price.*close.*CCC"),
    "negative price": (lambda: (edited(0, "low", "-1"), HEADER), r"non-positive price.*low"),
    "negative volume": (lambda: (edited(2, "volume", "-5"), HEADER), r"negative volume.*CCC"),
    "high < low": (lambda: (edited(7, "high", "20.8"), HEADER), r"high < low.*2024-01-04 BBB"),
    "close above high": (lambda: (edited(9, "close", "12"), HEADER), r"close outside \[low, high\].*AAA"),
    "open below low": (lambda: (edited(9, "open", "10.9"), HEADER), r"open outside \[low, high\].*AAA"),
    "NaN value": (lambda: (edited(3, "high", "NaN"), HEADER), r"missing \(NaN/empty\).*high"),
    "empty value": (lambda: (edited(6, "open", ""), HEADER), r"missing \(NaN/empty\).*open.*line 8"),
    "non-numeric value": (lambda: (edited(1, "close", "abc"), HEADER), r"non-numeric.*close.*'abc'"),
    "unparseable date": (lambda: (edited(4, "date", "2024-13-45"), HEADER), r"unparseable date.*2024-13-45"),
    "empty ticker": (lambda: (edited(4, "ticker", ""), HEADER), r"empty ticker.*line 6"),
    "missing session": (lambda: (GOOD[:7] + GOOD[8:], HEADER),
                        r"missing sessions.*BBB: 1 of 4 \(e\.g\. 2024-01-04\)"),
}


@pytest.mark.parametrize("problem", sorted(BAD_FILES))
def test_bad_file_raises_data_error(tmp_path, backend, problem):
    make, pattern = BAD_FILES[problem]
    rows, header = make()
    path = write_csv(tmp_path / "bad.csv", rows, header)
    with pytest.raises(DataError, match=pattern):
        load_panel(path)


def test_ragged_row(tmp_path, backend):
    rows = [list(r) for r in GOOD]
    rows[3].append("99")
    with pytest.raises(DataError, match=r"fields"):
        load_panel(write_csv(tmp_path / "ragged.csv", rows))


def test_lenient_header_timestamps_and_extra_columns(tmp_path, backend):
    header = [" Date", "TICKER ", "Open", "High", "Low", "Close", "Volume", "adj_note"]
    rows = [[r[0] + " 00:00:00", " " + r[1]] + r[2:] + ["x"] for r in GOOD]
    panel = load_panel(write_csv(tmp_path / "loose.csv", rows, header))
    assert_same_panel(panel, load_panel(write_csv(tmp_path / "good.csv", GOOD)))


def test_parquet_with_datetime_dates(tmp_path, small_synthetic):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame(long_rows(small_synthetic), columns=HEADER)
    df["date"] = pd.to_datetime(df["date"])
    for c in HEADER[2:]:
        df[c] = df[c].astype(float)
    df.to_parquet(tmp_path / "p.parquet", index=False)
    assert_same_panel(load_panel(tmp_path / "p.parquet"), small_synthetic)


def test_tolerance_allows_rounding(tmp_path, backend):
    rows = edited(0, "close", "11.000005")   # high is 11: within 1e-6 relative
    panel = load_panel(write_csv(tmp_path / "ok.csv", rows))
    assert panel.data["close"][0, 0] == 11.000005


def test_error_shows_at_most_five_offenders(tmp_path, backend):
    rows = [list(r) for r in GOOD]
    for r in rows:
        r[HEADER.index("volume")] = "-1"
    with pytest.raises(DataError) as info:
        load_panel(write_csv(tmp_path / "bad.csv", rows))
    message = str(info.value)
    assert "12 row(s) with a negative volume" in message
    assert message.count("volume=-1") == 5 and "7 more" in message


def test_unknown_universe_ticker(tmp_path, backend):
    path = write_csv(tmp_path / "good.csv", GOOD)
    with pytest.raises(DataError, match=r"2 universe ticker\(s\) not in .*\[ZZZ, YYY\]"):
        load_panel(path, universe=["AAA", "ZZZ", "YYY"])


def test_universe_from_list_and_file(tmp_path, backend):
    path = write_csv(tmp_path / "good.csv", GOOD)
    by_list = load_panel(path, universe=["CCC", "AAA"])
    assert by_list.tickers == ("CCC", "AAA") and by_list.shape == (4, 2)
    np.testing.assert_array_equal(by_list.data["close"][:, 1], load_panel(path).data["close"][:, 0])
    ufile = tmp_path / "universe_two.txt"
    ufile.write_text("# two tickers\nCCC\n\nAAA  # the first one\n")
    by_file = load_panel(path, universe=ufile)
    assert_same_panel(by_file, by_list)
    assert by_file.source.endswith("#two")


def test_end_cut_leaves_later_sessions_out(tmp_path, small_synthetic, backend):
    path = write_csv(tmp_path / "p.csv", long_rows(small_synthetic))
    end = small_synthetic.dates[299]
    cut = load_panel(path, end=str(end))
    assert cut.shape == (300, small_synthetic.n_stocks)
    assert cut.dates[-1] == end and np.all(cut.dates <= end)
    for name, arr in cut.data.items():
        assert arr.shape[0] == 300
        np.testing.assert_array_equal(arr, small_synthetic.data[name][:300])
    both = load_panel(path, start=small_synthetic.dates[100], end=end)
    assert both.n_days == 200 and both.dates[0] == small_synthetic.dates[100]


def test_window_with_no_sessions(tmp_path, backend):
    path = write_csv(tmp_path / "good.csv", GOOD)
    with pytest.raises(DataError, match=r"no sessions between 2030-01-01"):
        load_panel(path, start="2030-01-01")
    with pytest.raises(DataError, match=r"after end"):
        load_panel(path, start="2024-01-05", end="2024-01-02")


def test_bad_rows_outside_the_window_are_ignored(tmp_path, backend):
    rows = GOOD + [["2024-01-08", "AAA", "1", "0.5", "2", "1", "-3"]]  # broken row after the cut
    panel = load_panel(write_csv(tmp_path / "x.csv", rows), end="2024-01-05")
    assert panel.shape == (4, 3)


def test_sectors(tmp_path, backend):
    path = write_csv(tmp_path / "good.csv", GOOD)
    panel = load_panel(path, universe=["BBB", "AAA"], sectors={"AAA": "Tech", "BBB": "Energy", "CCC": "X"})
    assert panel.sectors == ("Energy", "Tech")
    sfile = tmp_path / "sectors.csv"
    sfile.write_text("ticker,sector\nAAA,Tech\nBBB,Energy\n")
    assert load_panel(path, universe=["AAA", "BBB"], sectors=sfile).sectors == ("Tech", "Energy")
    with pytest.raises(DataError, match=r"no sector for 1 ticker.*CCC"):
        load_panel(path, sectors=sfile)


def test_load_universe(tmp_path):
    f = tmp_path / "u.txt"
    f.write_text("# comment\nAAPL\n\n  MSFT \nNVDA # chips\n")
    assert load_universe(f) == ["AAPL", "MSFT", "NVDA"]
    assert load_universe(str(f)) == ["AAPL", "MSFT", "NVDA"]
    assert load_universe(["X", "Y"]) == ["X", "Y"]
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing here\n\n")
    with pytest.raises(DataError, match="empty"):
        load_universe(empty)
    dup = tmp_path / "dup.txt"
    dup.write_text("A\nB\nA\n")
    with pytest.raises(DataError, match=r"more than once.*\[A\]"):
        load_universe(dup)
    with pytest.raises(DataError, match="more than once"):
        load_universe(["A", "A"])
    with pytest.raises(FileNotFoundError):
        load_universe(tmp_path / "nope.txt")


def test_unknown_suffix(tmp_path):
    p = tmp_path / "data.xlsx"
    p.write_text("x")
    with pytest.raises(DataError, match="format"):
        load_panel(p)


# ============================================================================ stylised facts
def stylised_facts(panel: Panel) -> dict:
    """The statistics the synthetic market must share with real US large caps."""
    close, volume = panel.data["close"], panel.data["volume"]
    r = close[1:] / close[:-1] - 1.0
    a = np.abs(r)
    n = r.shape[1]
    acf = np.mean([np.corrcoef(a[:-1, j], a[1:, j])[0, 1] for j in range(n)])
    z = r - r.mean(axis=0)
    kurt = np.mean((z ** 4).mean(axis=0) / (z ** 2).mean(axis=0) ** 2 - 3.0)
    c = np.corrcoef(r.T)
    pair = (c.sum() - n) / (n * (n - 1))
    lv = np.log(np.maximum(volume, 1.0))
    vol_level = np.mean([np.corrcoef(a[:, j], lv[1:, j])[0, 1] for j in range(n)])
    dlv = np.diff(lv, axis=0)
    vol_change = np.mean([np.corrcoef(a[:, j], dlv[:, j])[0, 1] for j in range(n)])
    ann = r.std(axis=0) * np.sqrt(252.0)
    return {"acf_abs_r_lag1": acf, "excess_kurtosis": kurt, "mean_pair_corr": pair,
            "corr_abs_r_log_volume": vol_level, "corr_abs_r_dlog_volume": vol_change,
            "ann_vol_min": ann.min(), "ann_vol_median": float(np.median(ann)), "ann_vol_max": ann.max(),
            "market_daily_vol": r.mean(axis=1).std()}


def check_stylised_facts(panel: Panel, label: str) -> dict:
    f = stylised_facts(panel)
    print(f"\nstylised facts [{label}]: " + ", ".join(f"{k}={v:.4f}" for k, v in f.items()))
    assert f["acf_abs_r_lag1"] > 0.05, "volatility clustering"
    assert f["excess_kurtosis"] > 1.0, "fat tails"
    assert 0.1 <= f["mean_pair_corr"] <= 0.5, "co-movement"
    assert f["corr_abs_r_log_volume"] > 0.1 and f["corr_abs_r_dlog_volume"] > 0.1, "volume follows |return|"
    assert 0.1 <= f["ann_vol_min"] and f["ann_vol_max"] <= 0.7, "annualised volatility per stock"
    return f


def xs_ic(signal: np.ndarray, future: np.ndarray) -> tuple[float, float]:
    """Mean daily cross-sectional correlation and its t-statistic."""
    s = signal - signal.mean(axis=1, keepdims=True)
    f = future - future.mean(axis=1, keepdims=True)
    ic = (s * f).sum(axis=1) / np.sqrt((s * s).sum(axis=1) * (f * f).sum(axis=1))
    return float(ic.mean()), float(ic.mean() / ic.std() * np.sqrt(len(ic)))


# ============================================================================ synthetic
def test_synthetic_layout(synthetic46):
    p = synthetic46
    assert p.shape == (3304, 46)
    assert p.tickers[0] == "SYN000" and p.tickers[-1] == "SYN045"
    assert p.source == "synthetic(seed=0)"
    assert str(p.dates[0]) == "2012-06-29"
    assert np.all(np.is_busday(p.dates)) and np.all(np.diff(p.dates).astype(int) >= 1)
    gaps = np.diff(p.dates).astype(int)
    assert set(gaps) <= {1, 3}                     # weekdays only, no holidays
    assert 5 <= len(set(p.sectors)) <= 8
    assert all(np.isfinite(a).all() for a in p.data.values())


def test_synthetic_is_deterministic():
    a = synthetic_panel(n_stocks=10, n_days=300, seed=11)
    b = synthetic_panel(n_stocks=10, n_days=300, seed=11)
    c = synthetic_panel(n_stocks=10, n_days=300, seed=12)
    assert_same_panel(a, b)
    assert a.fingerprint() == b.fingerprint() and a.sectors == b.sectors
    assert a.fingerprint() != c.fingerprint()
    assert not np.array_equal(a.data["close"], c.data["close"])


def test_synthetic_golden_values():
    """The embedded market is pinned: archives are tied to panel fingerprints."""
    p = synthetic_panel(n_stocks=4, n_days=5, seed=0)
    assert p.fingerprint() == GOLDEN_FINGERPRINT, (
        "synthetic_panel(4, 5, seed=0) changed: every archive tied to the synthetic market is invalidated. "
        f"numpy {np.__version__}; closes {p.data['close'].tolist()}")


GOLDEN_FINGERPRINT = "a8b72d4166b6fa221a3e98dde98c1fa116ad28bbac5c0c2d735d43eeac8589c1"


def test_synthetic_ohlc_consistent(synthetic46, small_synthetic):
    for p in (synthetic46, small_synthetic):
        o, h, l, c, v = (p.data[k] for k in ("open", "high", "low", "close", "volume"))
        assert np.all(l > 0)
        assert np.all(h >= np.maximum(o, c)) and np.all(l <= np.minimum(o, c))
        assert np.all(v >= 1) and np.all(v == np.rint(v))
    first = synthetic46.data["close"][0]
    assert np.all((first >= 20) & (first <= 500))
    level = np.exp(np.log(synthetic46.data["volume"]).mean(axis=0))
    assert np.all((level > 3e4) & (level < 2e8))


def test_synthetic_stylised_facts(synthetic46):
    f = check_stylised_facts(synthetic46, "synthetic seed 0")
    assert 0.007 <= f["market_daily_vol"] <= 0.015


@pytest.mark.parametrize("seed", [1, 2])
def test_synthetic_stylised_facts_other_seeds(seed):
    check_stylised_facts(synthetic_panel(seed=seed), f"synthetic seed {seed}")


def test_synthetic_planted_signals(synthetic46):
    """Short-horizon reversal and the volume-shock premium are there, and weak."""
    close, volume = synthetic46.data["close"], synthetic46.data["volume"]
    r = close[1:] / close[:-1] - 1.0
    ic1, t1 = xs_ic(-r[:-1], r[1:])
    r5 = sum(r[k:len(r) - 5 + k] for k in range(5))
    ic5, t5 = xs_ic(-r5, r[5:])
    lv = np.log(volume)
    mean20 = np.lib.stride_tricks.sliding_window_view(lv, 20, axis=0).mean(axis=-1)
    shock = lv[20:] - mean20[:-1]
    icv, tv = xs_ic(shock[:-1], r[20:])
    print(f"\nplanted ICs: reversal 1d {ic1:.4f} (t={t1:.1f}), reversal 5d {ic5:.4f} (t={t5:.1f}), "
          f"volume shock {icv:.4f} (t={tv:.1f})")
    for ic, t in ((ic1, t1), (ic5, t5), (icv, tv)):
        assert 0.005 < ic < 0.1 and t > 3


def test_synthetic_notice_once_per_process(monkeypatch):
    monkeypatch.setattr(synthetic_mod, "_NOTICE_SHOWN", False)
    with pytest.warns(SyntheticDataNotice, match="SYNTHETIC"):
        synthetic_panel(n_stocks=3, n_days=5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        synthetic_panel(n_stocks=3, n_days=5)
    assert not [w for w in seen if issubclass(w.category, SyntheticDataNotice)]
    assert issubclass(SyntheticDataNotice, UserWarning)


def test_synthetic_speed():
    t0 = time.perf_counter()
    synthetic_panel(seed=5)
    assert time.perf_counter() - t0 < 1.5


def test_synthetic_odd_sizes():
    one = synthetic_panel(n_stocks=1, n_days=3)
    assert one.shape == (3, 1) and one.sectors is not None
    wide = synthetic_panel(n_stocks=1200, n_days=10)
    assert wide.tickers[0] == "SYN0000" and len(set(wide.sectors)) == 8
    with pytest.raises(ValueError):
        synthetic_panel(n_stocks=0)


# ============================================================================ real data
@pytest.mark.real_data
def test_real_all_shape(real_all):
    assert real_all.shape == (3304, 496)
    assert str(real_all.dates[0]) == "2012-06-29" and str(real_all.dates[-1]) == "2025-08-20"
    assert all(np.isfinite(a).all() for a in real_all.data.values())
    assert set(real_all.data) == {"open", "high", "low", "close", "volume"}
    assert set(real_all.tickers) == set(load_universe(REAL_DATA_DIR / "universe_all.txt"))


@pytest.mark.real_data
def test_real_us46(real_us46):
    assert real_us46.shape == (3304, 46)
    assert str(real_us46.dates[0]) == "2012-06-29" and str(real_us46.dates[-1]) == "2025-08-20"
    assert all(np.isfinite(a).all() for a in real_us46.data.values())
    assert real_us46.tickers == tuple(load_universe(REAL_DATA_DIR / "universe_us46.txt"))


@pytest.mark.real_data
def test_real_us46_stylised_facts(real_us46):
    check_stylised_facts(real_us46, "real us46")


@pytest.mark.real_data
def test_real_universe_file_and_end_cut(real_us46):
    if not REAL_TRAIN_FILE.exists():
        pytest.skip("real data absent")
    cut = load_panel(REAL_TRAIN_FILE, universe=REAL_DATA_DIR / "universe_us46.txt", end="2019-12-31")
    assert cut.tickers == real_us46.tickers and cut.source.endswith("#us46")
    assert str(cut.dates[-1]) == "2019-12-31" and cut.n_days < real_us46.n_days
    np.testing.assert_array_equal(cut.data["close"], real_us46.data["close"][:cut.n_days])
