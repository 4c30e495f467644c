"""Bad inputs end in a clear, typed error that names the file, the flag or the value (issue 13).

Every case here used to escape as a library traceback (EOFError, BadGzipFile, UnicodeDecodeError,
ArrowInvalid, BrokenPipeError) or to be silently misread (a BOM in a universe file, UTC offsets in
dates, a mistyped universe path read as a ticker, a string scored character by character).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from alpha_gym.commands.flags import iso_date, universe_arg
from alpha_gym.commands.main import main as cli_main
from alpha_gym.market import DataError, load_panel, load_universe, synthetic_panel
from alpha_gym.market import loader as loader_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = "date,ticker,open,high,low,close,volume"


@pytest.fixture(scope="module")
def small():
    return synthetic_panel(n_stocks=6, n_days=80, seed=1)


def csv_text(panel, extra=None, date_suffix="") -> str:
    """The panel as long-format CSV text; `extra` maps a column name to a (days x stocks) array."""
    header = HEADER + "".join(f",{k}" for k in (extra or {}))
    lines = [header]
    for t, d in enumerate(panel.dates):
        for j, tick in enumerate(panel.tickers):
            vals = [repr(float(panel.data[f][t, j])) for f in ("open", "high", "low", "close", "volume")]
            vals += [repr(float(a[t, j])) for a in (extra or {}).values()]
            lines.append(",".join([f"{d}{date_suffix}", tick] + vals))
    return "\n".join(lines) + "\n"


@pytest.fixture(params=["pandas", "stdlib"])
def backend(request, monkeypatch):
    """Run with pandas and with the standard-library CSV fallback."""
    if request.param == "pandas":
        pytest.importorskip("pandas")
    else:
        monkeypatch.setattr(loader_mod, "_pd", None)
    return request.param


def load_strict(path, **kw):
    """load_panel with every warning an error: a bad file must fail loudly, not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_panel(path, **kw)


# ============================================================================ broken files
def test_truncated_csv_gz_names_the_file(tmp_path, small, backend):
    data = gzip.compress(csv_text(small).encode())
    path = tmp_path / "prices.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"prices\.csv\.gz is truncated or damaged"):
        load_strict(path)


def test_plain_text_named_csv_gz(tmp_path, small, backend):
    path = tmp_path / "prices.csv.gz"
    path.write_text(csv_text(small))
    with pytest.raises(DataError, match=r"prices\.csv\.gz is not gzip-compressed .* starts with b'date,tic'"):
        load_strict(path)


def test_latin1_csv_names_the_byte(tmp_path, small, backend):
    path = tmp_path / "prices.csv"
    path.write_bytes(csv_text(small).replace("SYN001", "S\xe90001").encode("latin-1"))
    with pytest.raises(DataError, match=r"prices\.csv is not UTF-8 text \(byte 0xe9 at position \d+"):
        load_strict(path)


def test_binary_csv(tmp_path, backend):
    path = tmp_path / "prices.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    with pytest.raises(DataError, match=r"prices\.csv is binary data, not text"):
        load_strict(path)


def test_truncated_parquet(tmp_path, small):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    full = tmp_path / "full.parquet"
    lines = csv_text(small).splitlines()
    df = pd.DataFrame([ln.split(",") for ln in lines[1:]], columns=lines[0].split(","))
    for c in ("open", "high", "low", "close", "volume"):
        df[c] = df[c].astype(float)
    df.to_parquet(full, index=False)
    assert load_strict(full).shape == small.shape  # the intact file loads
    path = tmp_path / "prices.parquet"
    data = full.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"prices\.parquet is a damaged or truncated Parquet file"):
        load_strict(path)


def test_csv_named_parquet(tmp_path, small):
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "prices.parquet"
    path.write_text(csv_text(small))
    with pytest.raises(DataError, match=r"prices\.parquet is not a Parquet file \(it starts with b'date,tic'"):
        load_strict(path)


# ============================================================================ bad values
def test_dates_with_utc_offset_are_refused(tmp_path, small, backend):
    path = tmp_path / "prices.csv"
    path.write_text(csv_text(small, date_suffix=" 00:00:00-04:00"))
    with pytest.raises(DataError, match=r"prices\.csv: 80 date value\(s\) carry a time zone offset \['2012-06-29 00:00:00-04:00'"):
        load_strict(path)
    path.write_text(csv_text(small, date_suffix="T00:00:00Z"))
    with pytest.raises(DataError, match=r"time zone offset"):
        load_strict(path)
    path.write_text(csv_text(small, date_suffix=" 00:00:00"))  # a plain time without zone stays readable
    np.testing.assert_array_equal(load_strict(path).dates, small.dates)


def test_vwap_outside_low_high(tmp_path, small, backend):
    vwap = (small.data["high"] + small.data["low"] + small.data["close"]) / 3
    path = tmp_path / "prices.csv"
    path.write_text(csv_text(small, {"vwap": vwap}))
    assert np.allclose(load_strict(path).field("vwap"), vwap)
    bad = vwap.copy()
    bad[10, 2] = small.data["close"][10, 2] * 1000
    path.write_text(csv_text(small, {"vwap": bad}))
    with pytest.raises(DataError, match=r"1 row\(s\) with vwap outside \[low, high\].*2012-07-13 SYN002"):
        load_strict(path)


def test_absurd_volume(tmp_path, small, backend):
    panel_text = csv_text(small).splitlines()
    fields = panel_text[5].split(",")
    fields[-1] = "1e308"
    panel_text[5] = ",".join(fields)
    path = tmp_path / "prices.csv"
    path.write_text("\n".join(panel_text) + "\n")
    with pytest.raises(DataError, match=r"1 row\(s\) with a volume over 1e\+12 shares a day.*line 6.*volume=1e\+308"):
        load_strict(path)


# ============================================================================ universes
def test_universe_file_with_bom(tmp_path, small, backend):
    ufile = tmp_path / "universe.txt"
    ufile.write_bytes("\ufeffSYN003\nSYN001\n".encode("utf-8"))
    assert load_universe(ufile) == ["SYN003", "SYN001"]
    path = tmp_path / "prices.csv"
    path.write_text(csv_text(small))
    assert load_strict(path, universe=ufile).tickers == ("SYN003", "SYN001")


def test_universe_invisible_characters_are_shown(tmp_path, small):
    ufile = tmp_path / "universe.txt"
    ufile.write_text("SYN003\nSYN\u200b001\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: ticker 'SYN\\u200b001' holds an invisible"):
        load_universe(ufile)
    path = tmp_path / "prices.csv"
    path.write_text(csv_text(small))
    with pytest.raises(DataError, match=r"not in .*\['SYN\\u200b001'\]"):
        load_panel(path, universe=["SYN\u200b001"])


def test_universe_file_not_utf8(tmp_path):
    ufile = tmp_path / "universe.txt"
    ufile.write_bytes(b"SYN003\nS\xe9\n")
    with pytest.raises(DataError, match=r"universe\.txt is not UTF-8 text"):
        load_universe(ufile)


# ============================================================================ the CLI
def test_mistyped_universe_path_is_not_a_ticker(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--universe data/us46\.txt: no such file"):
        universe_arg("data/us46.txt")
    with pytest.raises(FileNotFoundError, match=r"--universe us46\.txt: no such file"):
        universe_arg("us46.txt")
    assert universe_arg("AAPL, MSFT,BRK.B") == ["AAPL", "MSFT", "BRK.B"]
    real = tmp_path / "u.txt"
    real.write_text("AAPL\n")
    assert universe_arg(str(real)) == str(real)


def test_cli_mistyped_universe_exits_with_message(capsys):
    assert cli_main(["score", "rank(close)", "--universe", "no/such/universe.txt"]) == 2
    err = capsys.readouterr().err
    assert "--universe no/such/universe.txt: no such file" in err and "Traceback" not in err


def test_bad_date_flag_is_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["holdout-formulas", "--data", "x.csv", "--holdout-start", "2024-13-01", "--formulas", "f.txt"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --holdout-start: '2024-13-01' is not a date" in err
    with pytest.raises(SystemExit):
        cli_main(["score", "rank(close)", "--end", "20/08/2024"])
    assert "argument --end: '20/08/2024' is not a date" in capsys.readouterr().err
    assert iso_date(" 2024-02-29 ") == "2024-02-29"
    with pytest.raises(Exception, match="not a date"):
        iso_date("2023-02-29")


def test_cli_broken_pipe_ends_quietly(tmp_path, small):
    """`alpha-gym score ... | head -c 20`: the reader is gone before the score is printed."""
    path = tmp_path / "prices.csv"
    path.write_text(csv_text(synthetic_panel(n_stocks=8, n_days=200, seed=2)))
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "alpha_gym", "score", "rank(-ts_delta(close, 5))",
                           "--data", str(path), "--json"], stdout=write_end, stderr=subprocess.PIPE,
                          text=True, timeout=300, cwd=ROOT, env=env)
    os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


# ============================================================================ the verifier API
def test_score_group_refuses_a_bare_string(small):
    from alpha_gym.scoring.verifier import Verifier
    v = Verifier(synthetic_panel(n_stocks=8, n_days=200, seed=2))
    with pytest.raises(TypeError, match="not one string"):
        v.score_group("<alpha>rank(close)</alpha>")
    with pytest.raises(TypeError, match="not one string"):
        v.score_group(b"<alpha>rank(close)</alpha>")
    assert len(v.score_group(["<alpha>rank(close)</alpha>"]).scores) == 1
