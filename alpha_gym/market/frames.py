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
    names = [n for n in (df.index.names or []) if n is not None]
    if any(str(n).strip().lower() in ("date", "ticker") for n in names):
        df = df.reset_index()
    if len(set(map(str, df.columns))) != len(df.columns) or not all(isinstance(c, str) for c in df.columns):
        raise DataError(f"the DataFrame's columns must be unique strings, got {list(df.columns)[:10]}")
    return df
