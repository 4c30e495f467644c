"""pandas and polars DataFrames as market data for `load_panel`.

A DataFrame in the long format (`date,ticker,open,high,low,close,volume`, optional
`vwap`, `cap`; one row per (date, ticker), any order) goes through the same
checks as a file: this module only turns it into the loader's column table.
A frame indexed by `date` and/or `ticker` (e.g. a MultiIndex) is reset first.
Rows are named by their position from 1 in error messages.
"""

from __future__ import annotations

from alpha_gym.market.panel import DataError


def is_frame(obj) -> bool:
    """True for a pandas or polars DataFrame (checked by type name: neither library is imported here)."""
    kind = type(obj)
    return kind.__name__ in ("DataFrame", "LazyFrame") and kind.__module__.split(".")[0] in ("pandas", "polars")


def frame_label(obj) -> str:
    """How messages and `Panel.source` name a frame: `pandas.DataFrame` or `polars.DataFrame`."""
    return f"{type(obj).__module__.split('.')[0]}.DataFrame"


def to_pandas(df):
    """The frame as a pandas DataFrame with `date` and `ticker` as columns (a copy for polars)."""
    import pandas as pd
    root = type(df).__module__.split(".")[0]
    if root == "polars":
        if type(df).__name__ == "LazyFrame":
            df = df.collect()
        # column by column through numpy: no pyarrow needed; polars nulls become NaN / None
        return pd.DataFrame({name: df.get_column(name).to_numpy() for name in df.columns})
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas or polars DataFrame, got {type(df).__name__}")
    df = index_to_columns(df, frame_label(df))
    if len(set(map(str, df.columns))) != len(df.columns) or not all(isinstance(c, str) for c in df.columns):
        raise DataError(f"the DataFrame's columns must be unique strings, got {list(df.columns)[:10]}")
    return df


def index_to_columns(df, where: str):
    """`df` with its `date` / `ticker` index levels as columns (a pandas frame, or a Parquet file written from one).

    A level that is also a column (`set_index("date", drop=False)`) is dropped when both hold the same values,
    and is a `DataError` naming it when they differ: which of the two is the date is not ours to guess.
    """
    names = [n for n in (df.index.names or []) if n is not None]
    keys = [n for n in names if str(n).strip().lower() in ("date", "ticker")]
    if not keys:
        return df
    columns = {str(c).strip().lower(): c for c in df.columns}
    twice = []
    for level in keys:
        column = columns.get(str(level).strip().lower())
        if column is None:
            continue
        index_values = df.index.get_level_values(level)
        if not _same_values(index_values, df[column]):
            raise DataError(f"{where}: the index level {level!r} and the column {column!r} both name the "
                            f"{str(level).strip().lower()} with different values (e.g. index {index_values[0]!r}, "
                            f"column {df[column].iloc[0]!r}); drop one: df.reset_index(drop=True) keeps the column")
        twice.append(level)
    if twice:
        df = df.reset_index(level=twice, drop=True) if len(twice) < len(df.index.names) else df.reset_index(drop=True)
    if any(str(n).strip().lower() in ("date", "ticker") for n in (df.index.names or []) if n is not None):
        df = df.reset_index()
    return df


def _same_values(index_values, column) -> bool:
    """True when an index level and a column hold the same values row for row (as text where the types differ)."""
    import numpy as np
    a, b = np.asarray(index_values), np.asarray(column)
    if len(a) != len(b):
        return False
    try:
        if np.array_equal(a, b):
            return True
    except (TypeError, ValueError):
        pass
    return bool(np.array_equal(a.astype(str), b.astype(str)))
