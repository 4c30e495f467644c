"""Hostile inputs, round three (issue 41, item 7's data part and item 8's indexed Parquet): market files and
pools that used to load into silent nonsense, a warning or a traceback.

Each `probe_*` function builds the cases of one class, tries them and returns `(tried, misbehaved)`, as in
`test_hostile_inputs.py`; the tests assert nothing misbehaves. Run this file as a script to print the counts
(`PYTHONPATH=<checkout> python tests/test_hostile_data.py`).

    class                       a case misbehaves when                                     before    after
    duplicate columns           a file or frame with two `close` / `date` / `ticker` /     12 of 20  0 of 20
                                ... columns (pandas' `close.1` included) loads, or the
                                error is not a DataError naming the column
    price scale                 prices x 1e300, 1e200, 1e-200, 1e-300 (or 1e10, 1e-9)     13 of 14  0 of 14
                                load, or any warning escapes the loader or the panel
    indexed Parquet and frames  a (date[, ticker])-indexed file or frame that also has    6 of 6    0 of 6
                                the column ends in anything but the right panel or a
                                DataError naming the column
    byte-order mark             a pool file starting with a UTF-8 BOM reads a first item   2 of 2    0 of 2
                                other than the file's first formula
    total                                                                                  33 of 42  0 of 42

"Before" is commit 1606f8c (main when this work began), "after" this branch, counted by running this script
against each (2026-12-05). The one price case that passed before is a Panel built directly from prices x 1e-300
(its derived fields underflow without a warning).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_inputs import _assert_none, run_probes  # noqa: E402,I001

FIELDS = ("open", "high", "low", "close", "volume")


def _panel():
    from alpha_gym.market import synthetic_panel
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_panel(n_stocks=6, n_days=60, seed=3)


def _frame(panel=None):
    import pandas as pd
    panel = panel or _panel()
    dates = np.repeat(np.asarray(panel.dates).astype(str), len(panel.tickers))
    tickers = np.tile(np.asarray(panel.tickers), len(panel.dates))
    return pd.DataFrame({"date": dates, "ticker": tickers, **{f: panel.data[f].reshape(-1) for f in FIELDS}})


def _loads(source, expect_in_message: tuple[str, ...], stdlib: bool = False):
    """None when loading `source` is a DataError naming every string of `expect_in_message` with no warning;
    otherwise why the case misbehaves."""
    from alpha_gym.market import loader
    from alpha_gym.market.panel import DataError
    saved = loader._pd
    if stdlib:
        loader._pd = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                panel = loader.load_panel(source)
            except DataError as exc:
                missing = [s for s in expect_in_message if s not in str(exc)]
                if missing:
                    return f"DataError not naming {missing}: {str(exc)[:160]}"
                outcome = None
            except Exception as exc:  # noqa: BLE001 - what the probe looks for
                return f"{type(exc).__name__}: {str(exc)[:160]}"
            else:
                _ = panel.field("dollar_volume"), panel.field("returns")
                outcome = f"loaded {panel}"
        if caught:
            return f"{caught[0].category.__name__} escaped: {str(caught[0].message)[:120]}"
        return outcome
    finally:
        loader._pd = saved


def probe_duplicate_columns() -> tuple[int, list[str]]:
    """Two columns that mean the same field, in a CSV (pandas' reader and the standard library's), a Parquet file
    and a DataFrame (pandas renames a CSV's second `close` to `close.1`)."""
    import tempfile
    frame = _frame()
    body = frame.to_csv(index=False).splitlines()
    rows = [line.split(",") for line in body[1:]]
    header = body[0].split(",")
    cases = []
    for name, extra in (("close", "x2"), ("close", "same"), ("date", "same"), ("ticker", "same"), ("Close", "x2")):
        j = header.index(name.lower())
        cols = header + [name]
        vals = [r + [str(float(r[j]) * 2) if extra == "x2" else r[j]] for r in rows]
        cases.append((f"csv +{name} ({extra})", cols, vals, name.lower()))
    bad, tried = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, cols, vals, column in cases:
            path = Path(tmp) / "dup.csv"
            path.write_text("\n".join(",".join(r) for r in [cols] + vals) + "\n")
            for stdlib in (False, True):
                tried += 1
                why = _loads(path, (column,), stdlib=stdlib)
                if why:
                    bad.append(f"{label} [{'stdlib' if stdlib else 'pandas'}]: {why}")
        import pandas as pd
        for column in ("close", "date", "ticker", "volume"):
            renamed = frame.assign(**{f"{column}.1": frame[column]})  # what pd.read_csv makes of a second column
            tried += 1
            if why := _loads(renamed, (f"{column}.1",)):
                bad.append(f"frame with {column}.1: {why}")
            path = Path(tmp) / f"dup-{column}.csv"
            renamed.rename(columns={f"{column}.1": column}).to_csv(path, index=False)
            tried += 1
            if why := _loads(pd.read_csv(path), (f"{column}.1",)):
                bad.append(f"pd.read_csv of a file with two {column}: {why}")
        for column in ("close", "date"):
            import pyarrow as pa
            import pyarrow.parquet as pq
            table = pa.Table.from_pandas(frame, preserve_index=False)
            table = table.append_column(column, table.column(column))
            path = Path(tmp) / "dup.parquet"
            pq.write_table(table, path)
            tried += 1
            if why := _loads(path, (column,)):
                bad.append(f"parquet with two {column}: {why}")
    return tried, bad


def probe_price_scale() -> tuple[int, list[str]]:
    """Every price multiplied by a factor that no market quotes: refused with a DataError, with no warning from the
    loader or the panel; and a Panel built directly from such prices warns nothing when its fields are derived."""
    import tempfile
    from alpha_gym.market.panel import Panel
    panel = _panel()
    bad, tried = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for factor in (1e300, 1e200, 1e10, 1e-9, 1e-200, 1e-300):
            scaled = _frame(panel)
            for f in ("open", "high", "low", "close"):
                scaled[f] = scaled[f] * factor
            path = Path(tmp) / "scaled.csv"
            scaled.to_csv(path, index=False)
            for source, how in ((path, "csv"), (scaled, "frame")):
                tried += 1
                if why := _loads(source, ("price",)):
                    bad.append(f"prices x {factor:g} ({how}): {why}")
        for factor in (1e300, 1e-300):
            tried += 1
            data = {k: (v * factor if k != "volume" else v) for k, v in panel.data.items()}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                direct = Panel(data, panel.dates, panel.tickers)
                for name in ("vwap", "dollar_volume", "returns"):
                    direct.field(name)
            if caught:
                bad.append(f"Panel(prices x {factor:g}).field: {caught[0].category.__name__} escaped: "
                           f"{str(caught[0].message)[:100]}")
    return tried, bad


def probe_indexed_with_column() -> tuple[int, list[str]]:
    """A frame indexed by date (and ticker) that also keeps the column, as a Parquet file and as a frame: the right
    panel when index and column agree, a DataError naming the column when they do not."""
    import tempfile
    import pandas as pd
    panel = _panel()
    frame = _frame(panel)
    cases = [("set_index('date', drop=False)", frame.set_index("date", drop=False), None),
             ("set_index(['date', 'ticker'], drop=False)", frame.set_index(["date", "ticker"], drop=False), None),
             ("a RangeIndex named date beside the date column",
              frame.set_index(pd.RangeIndex(len(frame), name="date")), "date")]
    bad, tried = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, df, refused_for in cases:
            path = Path(tmp) / "indexed.parquet"
            df.to_parquet(path)
            for source, how in ((path, "parquet"), (df, "frame")):
                tried += 1
                from alpha_gym.market import loader
                from alpha_gym.market.panel import DataError
                try:
                    got = loader.load_panel(source)
                except DataError as exc:
                    if refused_for is None or refused_for not in str(exc):
                        bad.append(f"{label} ({how}): DataError {str(exc)[:140]}")
                    continue
                except Exception as exc:  # noqa: BLE001
                    bad.append(f"{label} ({how}): {type(exc).__name__}: {str(exc)[:140]}")
                    continue
                if refused_for is not None:
                    bad.append(f"{label} ({how}): loaded although index and column differ")
                elif got.tickers != panel.tickers or not all(np.array_equal(got.data[f], panel.data[f]) for f in FIELDS):
                    bad.append(f"{label} ({how}): loaded another panel")
    return tried, bad


def probe_pool_bom() -> tuple[int, list[str]]:
    """A score-batch pool saved by an editor that writes a UTF-8 byte-order mark: the first item is the file's
    first formula, not '\\ufeff' + it (which the verifier calls invalid)."""
    import json
    import tempfile
    from alpha_gym.batch.records import read_items
    first = "rank(-ts_delta(close, 5))"
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("pool.txt", f"{first}\nrank(volume)\n"),
                           ("pool.jsonl", json.dumps({"formula": first}) + "\n")):
            path = Path(tmp) / name
            path.write_bytes(b"\xef\xbb\xbf" + text.encode())
            try:
                got = read_items(path)[0][1]
            except Exception as exc:  # noqa: BLE001
                bad.append(f"{name}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            if got != first:
                bad.append(f"{name}: first item {got!r}")
    return 2, bad


PROBES = [("duplicate columns", probe_duplicate_columns), ("price scale", probe_price_scale),
          ("indexed Parquet and frames", probe_indexed_with_column), ("byte-order mark", probe_pool_bom)]


def test_duplicate_columns_are_a_data_error_naming_the_column():
    pytest.importorskip("pyarrow")
    _assert_none(probe_duplicate_columns(), 20)


def test_prices_outside_a_sane_range_are_refused_without_a_warning():
    _assert_none(probe_price_scale(), 14)


def test_an_index_beside_its_column_loads_the_right_panel_or_names_the_column():
    pytest.importorskip("pyarrow")
    _assert_none(probe_indexed_with_column(), 6)


def test_a_byte_order_mark_is_not_part_of_the_first_pool_item():
    _assert_none(probe_pool_bom(), 2)


if __name__ == "__main__":
    run_probes(PROBES)
