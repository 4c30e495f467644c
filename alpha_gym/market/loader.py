"""Load a real market panel from a long-format file (CSV, CSV.gz, Parquet).

The file holds one row per (date, ticker): `date,ticker,open,high,low,close,volume`,
optionally `vwap` and `cap`. Rows may come in any order. `load_panel` checks
the data, cuts it to a universe and a date window, and pivots it into a
`Panel` of (days x stocks) arrays.

pandas (a base dependency) reads CSV files (the us46 panel in about 1 s) and, with
pyarrow (`pip install alpha-gym[data]`), Parquet; an install without pandas reads CSV
files with the standard library's `csv` module, about 10x slower but with the same
result and the same checks.

Every problem is a `DataError` saying what is wrong and showing up to five of
the offending rows, tickers or dates. Rows are named by their line in a CSV
file (the header is line 1) and by their position (from 1) in a Parquet file.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import lzma
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, Union

import numpy as np

from alpha_gym.market.frames import frame_label, index_to_columns, is_frame, to_pandas
from alpha_gym.market.panel import BASE_FIELDS, OPTIONAL_FIELDS, PRICE_FIELDS, DataError, Panel

try:  # optional dependency: alpha-gym[data]
    import pandas as _pd
except ImportError:  # pragma: no cover - exercised by monkeypatching in tests
    _pd = None

REQUIRED_COLUMNS = ("date", "ticker") + BASE_FIELDS
NUMERIC_COLUMNS = BASE_FIELDS + OPTIONAL_FIELDS
KNOWN_COLUMNS = frozenset(REQUIRED_COLUMNS + OPTIONAL_FIELDS)
#: pandas' name for the second of two columns called X: `X.1` (and `X.2`, ... for more).
_RENAMED_TWIN = re.compile(r"^(.+)\.(\d+)$")
#: The prices a file may hold, in its currency per share: outside them a price is a unit or parsing error
#: (a price scaled by 1e300 overflows vwap x volume; one scaled by 1e-300 flips comparisons within rounding),
#: never a quote (Berkshire A trades near 7e5, penny stocks at 1e-4).
PRICE_RANGE = (1e-6, 1e9)
#: Relative tolerance for the OHLC consistency checks (prices rounded to a few digits).
OHLC_RTOL = 1e-6
#: Relative tolerance of the vwap sanity check: a vendor's vwap may include trades just outside
#: the regular session's [low, high], and is rounded, but never by more than this.
VWAP_RTOL = 1e-3
#: The shares a stock can trade in a day, 0 (no trade) aside: above the most (the record is a few billion) a
#: value is a unit or parsing error, and vwap x volume would overflow long before any kernel could flag it;
#: below the least it is one too (split-adjusted volumes run to fractions of a share, and one share counted
#: in millions is 1e-6, never less), and volume x volume or its averages underflow to zero in formulas.
VOLUME_RANGE = (1e-6, 1e12)
class _ValueError(DataError):
    """A bad value found while converting a column, before the message can name the file (`_read` adds it)."""


#: How many offending rows, tickers or dates an error message shows.
SHOW = 5
#: A date string carrying a time zone offset or "Z" (e.g. `2012-06-29 00:00:00-04:00`).
_TZ_DATE = re.compile(r"\d[T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*(Z|[+-]\d{2}(:?\d{2})?)$", re.IGNORECASE)

_NA_STRINGS = frozenset({"", "nan", "NaN", "NAN", "NA", "N/A", "n/a", "null", "NULL", "None", "none", "-"})
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".gz")
_INSTALL_HINT = "pip install alpha-gym[data]"

PathLike = Union[str, "os.PathLike[str]"]


# --------------------------------------------------------------------------- universe
def load_universe(path_or_list) -> list[str]:
    """The tickers of a universe, in order.

    `path_or_list` is a path to a text file with one ticker per line (blank
    lines and `#` comments are ignored), or a list of tickers. An empty
    universe or a duplicated ticker is a `DataError`.
    """
    if isinstance(path_or_list, (str, os.PathLike)):
        path = Path(path_or_list)
        if not path.is_file():
            raise FileNotFoundError(f"universe file not found: {path}")
        try:  # utf-8-sig: a byte-order mark (Windows editors) is not part of the first ticker
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as err:
            raise DataError(f"universe file {path} is not UTF-8 text ({_decode_detail(err)}); "
                            "expected one ticker per line") from None
        tickers = []
        for number, line in enumerate(text.splitlines(), 1):
            ticker = line.split("#", 1)[0].strip()
            if ticker and not ticker.isprintable():
                raise DataError(f"universe file {path} line {number}: ticker {ticker!r} holds an invisible or "
                                "control character")
            if ticker:
                tickers.append(ticker)
        where = f"universe file {path}"
    else:
        try:
            tickers = [str(t).strip() for t in path_or_list]
        except TypeError:
            raise TypeError(f"a universe is a path or a list of tickers, not {type(path_or_list).__name__}") from None
        if any(not t for t in tickers):
            raise DataError("universe list holds an empty ticker")
        where = "universe list"
    if not tickers:
        raise DataError(f"{where} is empty (no tickers)")
    seen, dups = set(), []
    for t in tickers:
        if t in seen and t not in dups:
            dups.append(t)
        seen.add(t)
    if dups:
        raise DataError(f"{where} lists {len(dups)} ticker(s) more than once: {_show(dups)}")
    return tickers


def _universe_name(universe) -> str:
    if universe is None:
        return "all"
    if isinstance(universe, (str, os.PathLike)):
        stem = Path(universe).name
        for suffix in (".txt", ".csv", ".lst"):
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
        return stem[len("universe_"):] if stem.startswith("universe_") and len(stem) > 9 else stem
    return f"custom{len(list(universe))}"


# --------------------------------------------------------------------------- raw table
@dataclass
class _Raw:
    """The file's columns, factorised: codes index into the unique values (-1: missing)."""

    n_rows: int
    date_codes: np.ndarray
    date_values: Sequence
    ticker_codes: np.ndarray
    ticker_values: list
    numeric: dict
    label: Callable[[int], str]


def _show(items: Sequence, n: int = SHOW) -> str:
    items = list(items)
    shown = ", ".join(str(x) for x in items[:n])
    more = f", ... ({len(items) - n} more)" if len(items) > n else ""
    return f"[{shown}{more}]"


def _file_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(_CSV_SUFFIXES):
        return "csv"
    raise DataError(f"cannot tell the format of {path}: use a .csv, .csv.gz or .parquet file")


def _normalise_header(names: Sequence[str], path: Path) -> dict[str, str]:
    """Map canonical lower-case names to the file's column names; check the required ones.

    A column named twice is an error, never "the first one wins": so is pandas' spelling of it, `close.1` beside
    `close` (what `pd.read_csv` makes of a second `close` column).
    """
    mapping: dict[str, str] = {}
    for name in names:
        key = str(name).strip().lower()
        if key in mapping:
            raise DataError(f"{path}: column {key!r} appears more than once in the header ({mapping[key]!r} and "
                            f"{name!r}); keep one")
        mapping[key] = name
    for key, name in mapping.items():
        renamed = _RENAMED_TWIN.match(key)
        if renamed and renamed.group(1) in KNOWN_COLUMNS and renamed.group(1) in mapping:
            raise DataError(f"{path}: column {renamed.group(1)!r} appears more than once (pandas reads a second "
                            f"{renamed.group(1)!r} as {name!r}); keep one")
    missing = [c for c in REQUIRED_COLUMNS if c not in mapping]
    if missing:
        raise DataError(f"{path}: missing required column(s) {missing}; the header has {list(names)} "
                        f"(expected long format {','.join(REQUIRED_COLUMNS)})")
    return {c: mapping[c] for c in REQUIRED_COLUMNS + OPTIONAL_FIELDS if c in mapping}


def _cell_problem(value) -> str | None:
    """Why a cell `float()` reads is still no number a market file holds (None when it is one): a boolean (True
    would be one share), or text outside ASCII decimal notation, which `float()` reads too: `1_000` (a digit
    separator), another script's digits (`١٠٠`, fullwidth `１００`: float reads every Unicode digit) or a
    space that is not ASCII (a no-break space)."""
    if isinstance(value, (bool, np.bool_)):
        return "a boolean, not a number"
    if isinstance(value, str) and (not value.isascii() or "_" in value):
        return "not in ASCII decimal notation: digits 0-9, with a sign, point or exponent, and no '_'"
    return None


def _plain_numbers(values: Sequence) -> bool:
    """Whether every value can go to float64 as it is: numbers (no booleans), or strings that are all ASCII and
    hold no `_` (float() then reads exactly the decimal notation, `inf` and `nan`). One pass in C for strings."""
    try:
        text = "".join(values)
    except TypeError:  # not all strings: numbers pass as they are, booleans and mixtures cell by cell
        return not any(issubclass(k, (str, bool, np.bool_)) for k in set(map(type, values)))
    return text.isascii() and "_" not in text


def _floats(values: Sequence, name: str, label) -> np.ndarray:
    """Strings (or numbers) to float64; empty / NA strings become NaN; anything else that is not a number in ASCII
    decimal notation (`_cell_problem`: booleans, `1_000`, other scripts' digits) or does not parse is an error."""
    if _plain_numbers(values):
        try:
            return np.array(values, dtype=np.float64)
        except (ValueError, TypeError):
            pass
    out = np.empty(len(values), dtype=np.float64)
    bad = []
    for i, v in enumerate(values):
        if v is None:
            out[i] = np.nan
            continue
        problem = _cell_problem(v)
        if problem is not None:
            bad.append(f"{label(i)}: {v!r} ({problem})")
            continue
        s = str(v).strip()
        if s in _NA_STRINGS:
            out[i] = np.nan
            continue
        try:
            out[i] = float(s)
        except ValueError:
            bad.append(f"{label(i)}: {s!r}")
    if bad:
        raise _ValueError(f"{len(bad)} non-numeric value(s) in column {name!r}: {_show(bad)}")
    return out


def _column_floats(col, name: str, label) -> np.ndarray:
    """A frame's numeric column as float64. A boolean column (numpy's, pandas' nullable, Arrow's) is refused: it
    would load as 0/1 shares or dollars; a date or duration column likewise. Text and mixed objects go cell by
    cell through `_floats` (pandas' own conversion reads any Unicode digit, as float() does)."""
    kind = col.dtype.kind
    if kind == "b":
        raise _ValueError(f"column {name!r} holds booleans (true/false), not numbers")
    if kind in "mM":
        raise _ValueError(f"column {name!r} holds {'durations' if kind == 'm' else 'dates'}, not numbers")
    if kind in "iuf":
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    return _floats(col.astype(object).where(col.notna(), None).to_numpy(), name, label)


def _factorize_py(values: Iterable) -> tuple[np.ndarray, list]:
    """pandas.factorize in plain Python: codes in first-appearance order, -1 for missing."""
    index: dict = {}
    codes = []
    for v in values:
        if v is None or (isinstance(v, float) and v != v):
            codes.append(-1)
            continue
        if isinstance(v, str):
            v = v.strip()
            if not v:
                codes.append(-1)
                continue
        code = index.get(v)
        if code is None:
            code = index[v] = len(index)
        codes.append(code)
    return np.array(codes, dtype=np.int64), list(index)


def _open_text(path: Path):
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    if name.endswith(".bz2"):
        return bz2.open(path, "rt", encoding="utf-8-sig", newline="")
    if name.endswith(".xz"):
        return lzma.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, "r", encoding="utf-8-sig", newline="")


def _line_label(i: int) -> str:
    return f"line {i + 2}"


def _row_label(i: int) -> str:
    return f"row {i + 1}"


def _read_csv_stdlib(path: Path) -> _Raw:
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(f"{path} is empty (no header)") from None
        columns = _normalise_header(header, path)
        position = {c: header.index(orig) for c, orig in columns.items()}
        width = len(header)
        rows = []
        ragged = []
        for i, row in enumerate(reader):
            if len(row) != width:
                if not row:  # blank line
                    continue
                ragged.append(f"line {i + 2} has {len(row)} fields")
                continue
            rows.append(row)
    if ragged:
        raise DataError(f"{path}: {len(ragged)} row(s) do not have {width} fields: {_show(ragged)}")
    cols = list(zip(*rows)) if rows else [()] * width
    date_codes, date_values = _factorize_py(cols[position["date"]])
    ticker_codes, ticker_values = _factorize_py(cols[position["ticker"]])
    numeric = {c: _floats(cols[position[c]], c, _line_label) for c in NUMERIC_COLUMNS if c in columns}
    return _Raw(len(rows), date_codes, date_values, ticker_codes, ticker_values, numeric, _line_label)


def _from_frame(df, columns: Mapping[str, str], label) -> _Raw:
    date_codes, date_uniques = _pd.factorize(df[columns["date"]])
    tick = df[columns["ticker"]]
    ticker_codes, ticker_uniques = _pd.factorize(tick)
    ticker_values = [None if _pd.isna(t) else str(t) for t in ticker_uniques]
    numeric = {c: _column_floats(df[columns[c]], c, label) for c in NUMERIC_COLUMNS if c in columns}
    if isinstance(date_uniques, _pd.DatetimeIndex):
        if date_uniques.tz is not None:
            date_uniques = date_uniques.tz_localize(None)
        date_values = date_uniques.to_numpy().astype("datetime64[D]")
    else:
        date_values = list(np.asarray(date_uniques, dtype=object))
    raw = _Raw(len(df), np.asarray(date_codes, dtype=np.int64), date_values,
               np.asarray(ticker_codes, dtype=np.int64), ticker_values, numeric, label)
    return _clean_tickers(raw)


def _clean_tickers(raw: _Raw) -> _Raw:
    """Strip tickers; blanks become missing, tickers equal after stripping are merged."""
    index: dict = {}
    remap = np.empty(len(raw.ticker_values) + 1, dtype=np.int64)
    remap[-1] = -1
    for k, t in enumerate(raw.ticker_values):
        s = None if t is None else str(t).strip()
        if not s:
            remap[k] = -1
            continue
        code = index.get(s)
        if code is None:
            code = index[s] = len(index)
        remap[k] = code
    raw.ticker_codes = remap[raw.ticker_codes]
    raw.ticker_values = list(index)
    return raw


def _read_csv_pandas(path: Path) -> _Raw:
    try:
        header = list(_pd.read_csv(path, nrows=0).columns)
    except _pd.errors.EmptyDataError:
        raise DataError(f"{path} is empty (no header)") from None
    columns = _normalise_header(header, path)
    na = sorted(_NA_STRINGS)
    dtype = {columns["date"]: str, columns["ticker"]: str}
    na_values = {columns["date"]: [""], columns["ticker"]: [""]}
    for c in NUMERIC_COLUMNS:
        if c in columns:
            dtype[columns[c]] = np.float64
            na_values[columns[c]] = na
    try:
        try:
            df = _pd.read_csv(path, dtype=dtype, index_col=False, keep_default_na=False, na_values=na_values)
        except _pd.errors.ParserError:
            raise
        except ValueError:
            # A value that is not a number: read everything as text to say where.
            df = _pd.read_csv(path, dtype=str, index_col=False, keep_default_na=False, na_values=na_values)
    except _pd.errors.ParserError as exc:
        raise DataError(f"{path}: malformed CSV: {exc}") from None
    return _from_frame(df, columns, _line_label)


def _read_parquet(path: Path) -> _Raw:
    if _pd is None:
        raise DataError(f"reading Parquet ({path}) needs pandas and pyarrow: {_INSTALL_HINT}")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"reading Parquet ({path}) needs pyarrow: {_INSTALL_HINT}") from None
    header = pq.read_schema(path).names
    columns = _normalise_header(header, path)
    df = index_to_columns(_pd.read_parquet(path, columns=list(columns.values())), str(path))
    return _from_frame(df, columns, _row_label)


def _decode_detail(err: UnicodeDecodeError) -> str:
    return f"byte 0x{err.object[err.start]:02x} at position {err.start} is not valid UTF-8"


def _head(path: Path, n: int = 8) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


#: The first two bytes of every gzip member.
_GZIP_MAGIC = b"\x1f\x8b"


def _gzip_tail(path: Path) -> str | None:
    """What follows the last whole gzip member of a file that starts as gzip, in words, at its byte offset: bytes
    that are not gzip (trailing garbage), or a member that is damaged or cut off. None when the first member is
    itself damaged (the generic message says that) or nothing follows. Zero padding after a member is gzip's
    own allowance (Python's gzip skips it). Reads the file again, on the error path only; output is discarded."""
    data = path.read_bytes()
    pos = complete = 0                     # where the next member would start; where the last whole one ended
    while True:
        while pos < len(data) and data[pos] == 0:
            pos += 1
        if pos == len(data):
            return None
        if not data.startswith(_GZIP_MAGIC[: len(data) - pos], pos):
            return None if not complete else (
                f"the gzip data ends at byte {complete}, followed by {len(data) - complete} byte(s) that are not "
                f"gzip (from byte {pos}: {data[pos:pos + 8]!r}): the file was appended to or damaged after it was "
                "compressed; cut them off or compress the CSV again")
        inflater, chunk = zlib.decompressobj(31), data[pos:]
        try:
            while not inflater.eof:
                out = inflater.decompress(chunk, 1 << 20)  # bounded output, thrown away: only where it ends counts
                chunk = inflater.unconsumed_tail
                if not chunk and not out:
                    break
        except zlib.error as err:
            return None if not complete else (
                f"the gzip data is whole up to byte {complete}; the gzip member that starts there is damaged "
                f"({err}): the file was appended to or damaged after it was compressed; compress the CSV again")
        if not inflater.eof:
            return None if not complete else (
                f"the gzip data is whole up to byte {complete}; the {len(data) - complete} byte(s) after it begin a "
                "gzip member that is cut off: the file was appended to or damaged after it was compressed; "
                "compress the CSV again")
        pos = complete = len(data) - len(inflater.unused_data)


def _unreadable(path: Path, kind: str, exc: BaseException) -> DataError:
    """A DataError naming the file for an exception a reader library raised on a broken or mislabelled file."""
    head = _head(path)
    if kind == "parquet":
        if not head.startswith(b"PAR1"):
            return DataError(f"{path} is not a Parquet file (it starts with {head!r}, not b'PAR1'); "
                             "a CSV file must be named .csv or .csv.gz")
        return DataError(f"{path} is a damaged or truncated Parquet file ({type(exc).__name__}: {exc})")
    if head.startswith(_GZIP_MAGIC) and path.name.lower().endswith(".gz"):
        tail = _gzip_tail(path)
        if tail is not None:
            return DataError(f"{path}: {tail}")
    if isinstance(exc, gzip.BadGzipFile) or (path.name.lower().endswith(".gz") and not head.startswith(_GZIP_MAGIC)):
        return DataError(f"{path} is not gzip-compressed although its name ends in .gz (it starts with {head!r}); "
                         "rename it to .csv or compress it")
    if isinstance(exc, (EOFError, zlib.error, lzma.LZMAError)) or (isinstance(exc, OSError) and exc.errno is None):
        return DataError(f"{path} is truncated or damaged: the compressed stream does not decompress "
                         f"({type(exc).__name__}: {exc})")
    if isinstance(exc, UnicodeDecodeError):
        what = "binary data, not text" if b"\x00" in head or not head[:1].isascii() else "not UTF-8 text"
        return DataError(f"{path} is {what} ({_decode_detail(exc)}); save it as a UTF-8 CSV file")
    return DataError(f"{path} cannot be read ({type(exc).__name__}: {exc})")


def _arrow_errors() -> tuple:
    try:
        import pyarrow
    except ImportError:
        return ()
    return (pyarrow.ArrowException,)


def _read(path: Path) -> _Raw:
    kind = _file_kind(path)
    try:
        if kind == "parquet":
            return _read_parquet(path)
        if _pd is not None:
            return _read_csv_pandas(path)
        return _read_csv_stdlib(path)
    except _ValueError as exc:  # the only reader error that does not name the file yet
        raise DataError(f"{path}: {exc}") from None
    except (EOFError, OSError, zlib.error, lzma.LZMAError, UnicodeDecodeError) + _arrow_errors() as exc:
        raise _unreadable(path, kind, exc) from None


# --------------------------------------------------------------------------- dates
def _parse_dates(values) -> tuple[np.ndarray, list[int]]:
    """Unique date values to datetime64[D]; returns the positions that do not parse."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "M":
        out = values.astype("datetime64[D]")
        return out, [int(i) for i in np.flatnonzero(np.isnat(out))]
    out = np.empty(len(values), dtype="datetime64[D]")
    bad = []
    for i, v in enumerate(values):
        try:
            if isinstance(v, str):
                d = np.datetime64(v.strip())
            elif hasattr(v, "year") and hasattr(v, "month") and hasattr(v, "day"):
                d = np.datetime64(f"{v.year:04d}-{v.month:02d}-{v.day:02d}")
            else:
                d = np.datetime64(v)
            unit = np.datetime_data(d.dtype)[0]
            if np.isnat(d) or unit in ("Y", "M", "W", "generic"):
                raise ValueError(v)
            out[i] = d.astype("datetime64[D]")
        except (ValueError, TypeError, OverflowError):
            bad.append(i)
    return out, bad


def _as_day(value, name: str):
    if value is None:
        return None
    try:
        d = np.datetime64(value.strip() if isinstance(value, str) else value)
        if np.isnat(d):
            raise ValueError
        return d.astype("datetime64[D]")
    except (ValueError, TypeError):
        raise DataError(f"{name}={value!r} is not a date (use YYYY-MM-DD)") from None


# --------------------------------------------------------------------------- sectors
def _resolve_sectors(sectors, tickers: Sequence[str]) -> tuple[str, ...] | None:
    if sectors is None:
        return None
    if isinstance(sectors, (str, os.PathLike)):
        path = Path(sectors)
        if not path.is_file():
            raise FileNotFoundError(f"sector file not found: {path}")
        mapping = {}
        with open(path, encoding="utf-8-sig", newline="") as fh:
            for row in csv.reader(fh):
                if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                    continue
                if len(row) < 2:
                    raise DataError(f"sector file {path}: expected 'ticker,sector' rows, got {row}")
                t, s = row[0].strip(), row[1].strip()
                if t.lower() == "ticker" and s.lower() == "sector":
                    continue
                mapping[t] = s
        where = f"sector file {path}"
    elif isinstance(sectors, Mapping):
        mapping = {str(k): str(v) for k, v in sectors.items()}
        where = "sectors mapping"
    else:
        raise TypeError("sectors is a {ticker: sector} mapping or a path to a 'ticker,sector' CSV file")
    missing = [t for t in tickers if t not in mapping]
    if missing:
        raise DataError(f"{where} has no sector for {len(missing)} ticker(s): {_show(missing)}")
    return tuple(mapping[t] for t in tickers)


# --------------------------------------------------------------------------- loader
def _not_a_source(obj) -> str:
    """The message for a `load_panel` argument that is neither a path nor a DataFrame."""
    kind = f"{type(obj).__module__.split('.')[0]}.{type(obj).__name__}".removeprefix("builtins.")
    hint = ""
    if type(obj).__name__ == "Series":
        hint = " (a Series holds one column: build the long-format DataFrame, e.g. with series.reset_index())"
    elif type(obj).__name__ == "ndarray":
        hint = " (an array has no column names: wrap it in a DataFrame with the long-format columns)"
    return (f"load_panel takes a path to a CSV, CSV.gz or Parquet file, or a pandas or polars DataFrame, in the "
            f"long format {','.join(REQUIRED_COLUMNS)}; got {kind}{hint}")


def load_panel(path: PathLike, universe=None, start=None, end=None, *, sectors=None) -> Panel:
    """Load a long-format daily OHLCV file into a `Panel`.

    path      CSV (optionally .gz/.bz2/.xz compressed) or Parquet, chosen by suffix,
              or a pandas/polars DataFrame in the same long format (same checks),
              with columns `date,ticker,open,high,low,close,volume` and optionally
              `vwap` and `cap` (carried as panel fields when present).
    universe  None (every ticker in the file, in order of first appearance), a
              list of tickers, or a path to a universe file (`load_universe`);
              the panel's columns follow the universe's order.
    start,end inclusive date bounds. Rows outside them are dropped before any
              array is built, so nothing after `end` is reachable from the panel.
    sectors   optional {ticker: sector} mapping or 'ticker,sector' CSV path,
              stored as `Panel.sectors`.

    The session calendar is the union of the file's dates inside the window;
    every selected ticker must trade on every session of it. Any problem in
    the selected data raises `DataError`.
    """
    raw = None
    if is_frame(path):  # a pandas/polars DataFrame: the same checks below, rows named by position
        frame, path = to_pandas(path), frame_label(path)
        columns = _normalise_header(list(frame.columns), path)
        try:
            raw = _from_frame(frame, columns, _row_label)
        except _ValueError as exc:
            raise DataError(f"{path}: {exc}") from None
    elif not isinstance(path, (str, os.PathLike)):
        raise DataError(_not_a_source(path))
    else:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"market data file not found: {path}")
    wanted = None if universe is None else load_universe(universe)
    lo, hi = _as_day(start, "start"), _as_day(end, "end")
    if lo is not None and hi is not None and lo > hi:
        raise DataError(f"start {lo} is after end {hi}")

    raw = _read(path) if raw is None else raw
    if raw.n_rows == 0:
        raise DataError(f"{path} has a header but no rows")
    label = raw.label

    # -- dates and tickers: every row must have both (checked on the whole file)
    zoned = [v for v in raw.date_values if isinstance(v, str) and _TZ_DATE.search(v.strip())]
    if zoned:  # numpy would convert them to UTC and move every session by hours, often onto another day
        raise DataError(f"{path}: {len(zoned)} date value(s) carry a time zone offset {_show([repr(v) for v in zoned])}; "
                        "write the session's local date as YYYY-MM-DD")
    day_of_unique, bad = _parse_dates(raw.date_values)
    if bad:
        shown = [repr(raw.date_values[i]) for i in bad]
        first_rows = [label(int(np.flatnonzero(raw.date_codes == i)[0])) for i in bad[:SHOW]]
        raise DataError(f"{path}: {len(bad)} unparseable date value(s) {_show(shown)} "
                        f"(first at {', '.join(first_rows)}); expected ISO dates YYYY-MM-DD")
    for name, codes in (("date", raw.date_codes), ("ticker", raw.ticker_codes)):
        empty = np.flatnonzero(codes < 0)
        if len(empty):
            raise DataError(f"{path}: {len(empty)} row(s) with an empty {name}: "
                            f"{_show([label(int(i)) for i in empty])}")

    # -- the window (on unique dates, then rows)
    in_window = np.ones(len(day_of_unique), dtype=bool)
    if lo is not None:
        in_window &= day_of_unique >= lo
    if hi is not None:
        in_window &= day_of_unique <= hi
    calendar = np.unique(day_of_unique[in_window])
    if len(calendar) == 0:
        span = f"{day_of_unique.min()}..{day_of_unique.max()}"
        raise DataError(f"no sessions between {lo or 'the start'} and {hi or 'the end'} in {path} (the file spans {span})")

    # -- the universe
    file_tickers = raw.ticker_values
    if wanted is None:
        tickers = list(file_tickers)
    else:
        known = set(file_tickers)
        unknown = [t for t in wanted if t not in known]
        if unknown:
            shown = [t if t.isprintable() else repr(t) for t in unknown]  # make invisible characters visible
            raise DataError(f"{len(unknown)} universe ticker(s) not in {path}: {_show(shown)}")
        tickers = wanted
    column_of = {t: j for j, t in enumerate(tickers)}
    col_of_code = np.array([column_of.get(t, -1) for t in file_tickers], dtype=np.int64)
    session_of_unique = np.where(in_window, np.searchsorted(calendar, day_of_unique), -1)

    col = col_of_code[raw.ticker_codes]
    day = session_of_unique[raw.date_codes]
    rows = np.flatnonzero((col >= 0) & (day >= 0))
    col, day = col[rows], day[rows]
    values = {name: arr[rows] for name, arr in raw.numeric.items()}

    def fail(what: str, sel: np.ndarray, fields: Sequence[str]) -> None:
        shown = []
        for k in sel[:SHOW]:
            vals = " ".join(f"{f}={values[f][k]:g}" for f in fields)
            shown.append(f"{label(int(rows[k]))}: {calendar[day[k]]} {tickers[col[k]]} {vals}")
        more = f"; ... ({len(sel) - SHOW} more)" if len(sel) > SHOW else ""
        raise DataError(f"{path}: {len(sel)} row(s) {what}: " + "; ".join(shown) + more)

    # -- values
    for name, arr in values.items():
        bad_rows = np.flatnonzero(~np.isfinite(arr))
        if len(bad_rows):
            fail(f"with a missing (NaN/empty) or infinite {name!r}", bad_rows, [name])
    prices = [f for f in PRICE_FIELDS + ("vwap",) if f in values]
    for name in prices:
        bad_rows = np.flatnonzero(values[name] <= 0)
        if len(bad_rows):
            fail(f"with a non-positive price in {name!r}", bad_rows, [name])
    lo_price, hi_price = PRICE_RANGE
    for name in prices:
        bad_rows = np.flatnonzero((values[name] < lo_price) | (values[name] > hi_price))
        if len(bad_rows):
            fail(f"with a price in {name!r} outside [{lo_price:g}, {hi_price:g}] (a unit or parsing error)",
                 bad_rows, [name])
    bad_rows = np.flatnonzero(values["volume"] < 0)
    if len(bad_rows):
        fail("with a negative volume", bad_rows, ["volume"])
    lo_volume, hi_volume = VOLUME_RANGE
    bad_rows = np.flatnonzero(values["volume"] > hi_volume)
    if len(bad_rows):
        fail(f"with a volume over {hi_volume:g} shares a day (a unit or parsing error)", bad_rows, ["volume"])
    bad_rows = np.flatnonzero((values["volume"] > 0) & (values["volume"] < lo_volume))
    if len(bad_rows):
        fail(f"with a volume above 0 but under {lo_volume:g} shares a day (a unit or parsing error; a day "
             "without trades is 0)", bad_rows, ["volume"])
    if "cap" in values:
        bad_rows = np.flatnonzero(values["cap"] < 0)
        if len(bad_rows):
            fail("with a negative cap", bad_rows, ["cap"])
    o, h, l, c = (values[f] for f in PRICE_FIELDS)
    tol_h = h * (1.0 + OHLC_RTOL)
    tol_l = l * (1.0 - OHLC_RTOL)
    bad_rows = np.flatnonzero(h < tol_l)
    if len(bad_rows):
        fail("with high < low", bad_rows, ["high", "low"])
    for name, arr in (("open", o), ("close", c)):
        bad_rows = np.flatnonzero((arr > tol_h) | (arr < tol_l))
        if len(bad_rows):
            fail(f"with {name} outside [low, high]", bad_rows, ["low", "high", name])
    if "vwap" in values:
        v = values["vwap"]
        bad_rows = np.flatnonzero((v > h * (1.0 + VWAP_RTOL)) | (v < l * (1.0 - VWAP_RTOL)))
        if len(bad_rows):
            fail(f"with vwap outside [low, high] (by more than {VWAP_RTOL:.1%})", bad_rows, ["low", "high", "vwap"])

    # -- duplicates and gaps, then the pivot
    n_days, n_stocks = len(calendar), len(tickers)
    key = day * n_stocks + col
    counts = np.bincount(key, minlength=n_days * n_stocks)
    dup_keys = np.flatnonzero(counts > 1)
    if len(dup_keys):
        shown = [f"{calendar[k // n_stocks]} {tickers[k % n_stocks]} (x{counts[k]})" for k in dup_keys]
        raise DataError(f"{path}: {len(dup_keys)} duplicate (date, ticker) pair(s): {_show(shown)}")
    missing = (counts == 0).reshape(n_days, n_stocks)
    n_missing = missing.sum(axis=0)
    gappy = np.flatnonzero(n_missing)
    if len(gappy):
        order = gappy[np.argsort(-n_missing[gappy], kind="stable")]
        shown = []
        for j in order[:SHOW]:
            first = calendar[np.flatnonzero(missing[:, j])[:3]]
            shown.append(f"{tickers[j]}: {n_missing[j]} of {n_days} (e.g. {', '.join(str(d) for d in first)})")
        more = f"; ... ({len(order) - SHOW} more)" if len(order) > SHOW else ""
        raise DataError(f"{path}: {len(gappy)} ticker(s) have missing sessions (the calendar is the union of the "
                        f"file's dates, {n_days} sessions {calendar[0]}..{calendar[-1]}): " + "; ".join(shown) + more)

    data = {}
    for name in BASE_FIELDS + OPTIONAL_FIELDS:
        if name in values:
            arr = np.empty(n_days * n_stocks, dtype=np.float64)
            arr[key] = values[name]
            data[name] = arr.reshape(n_days, n_stocks)
    return Panel(data, calendar, tuple(tickers), source=f"{path}#{_universe_name(universe)}",
                 sectors=_resolve_sectors(sectors, tickers))
