"""The market panel: daily OHLCV of a set of stocks, as (days x stocks) arrays.

A `Panel` is immutable: its arrays are read-only copies, and every cut
(`window`, `select`) returns a new panel holding copies of the selected
sessions only. That is what keeps the holdout away from training: a panel cut
at a date holds no array that reaches past it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from alpha_gym.errors import InputError

PRICE_FIELDS = ("open", "high", "low", "close")
BASE_FIELDS = PRICE_FIELDS + ("volume",)
#: Fields a panel may carry beyond OHLCV.
OPTIONAL_FIELDS = ("vwap", "cap")


class DataError(InputError):
    """Market data that cannot be used: missing columns, bad values, gaps."""


@dataclass(frozen=True, eq=False)
class Panel:
    """Daily bars of `n_stocks` stocks over `n_days` sessions.

    `data` maps a field name (`open high low close volume`, optionally `vwap`
    and `cap`) to a float64 array of shape (n_days, n_stocks). `dates` is a
    strictly increasing `datetime64[D]` array; `tickers` names the columns.
    `sectors`, when known, gives each stock's sector label (for
    `IndNeutralize`). `source` says where the data came from.
    """

    data: Mapping[str, np.ndarray]
    dates: np.ndarray
    tickers: tuple[str, ...]
    source: str = "unknown"
    sectors: tuple[str, ...] | None = None
    _derived: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        dates = np.asarray(self.dates, dtype="datetime64[D]")
        tickers = tuple(str(t) for t in self.tickers)
        missing = [f for f in BASE_FIELDS if f not in self.data]
        if missing:
            raise DataError(f"panel is missing fields {missing}")
        shape = (len(dates), len(tickers))
        frozen = {}
        for name, arr in self.data.items():
            a = np.array(arr, dtype=np.float64, copy=True, order="C")  # row-major: kernels slice by rows
            if a.shape != shape:
                raise DataError(f"field {name!r} has shape {a.shape}, expected {shape} (days x stocks)")
            a.setflags(write=False)
            frozen[name] = a
        if len(dates) > 1 and not np.all(dates[1:] > dates[:-1]):
            raise DataError("panel dates must be strictly increasing")
        if len(set(tickers)) != len(tickers):
            raise DataError("panel tickers must be unique")
        if self.sectors is not None and len(self.sectors) != len(tickers):
            raise DataError("sectors must give one label per ticker")
        dates = dates.copy()
        dates.setflags(write=False)
        object.__setattr__(self, "data", frozen)
        object.__setattr__(self, "dates", dates)
        object.__setattr__(self, "tickers", tickers)
        if self.sectors is not None:
            object.__setattr__(self, "sectors", tuple(str(s) for s in self.sectors))

    # ------------------------------------------------------------------ shape
    @property
    def n_days(self) -> int:
        return len(self.dates)

    @property
    def n_stocks(self) -> int:
        return len(self.tickers)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_days, self.n_stocks)

    def __repr__(self) -> str:
        span = f"{self.dates[0]}..{self.dates[-1]}" if self.n_days else "empty"
        return f"Panel({self.n_stocks} stocks x {self.n_days} sessions, {span}, source={self.source!r})"

    # ----------------------------------------------------------------- fields
    def has(self, name: str) -> bool:
        return name in self.data or name in ("returns", "vwap", "dollar_volume")

    def field(self, name: str) -> np.ndarray:
        """A raw or derived field as a read-only (days x stocks) array.

        Derived fields: `returns` (close-to-close, NaN on the first session)
        and `vwap` ((high + low + close) / 3 when the data has no vwap).
        """
        if name in self.data:
            return self.data[name]
        if name in self._derived:
            return self._derived[name]
        # a panel built directly (the loader refuses prices outside PRICE_RANGE) may hold extreme values: an
        # overflow is inf in the field, which the kernels treat as missing, never a warning from here
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            if name == "returns":
                close = self.data["close"]
                out = np.full_like(close, np.nan)
                out[1:] = close[1:] / close[:-1] - 1.0
            elif name == "vwap":
                out = (self.data["high"] + self.data["low"] + self.data["close"]) / 3.0
            elif name == "dollar_volume":
                out = self.field("vwap") * self.data["volume"]
            else:
                raise KeyError(f"panel has no field {name!r}")
        out.setflags(write=False)
        self._derived[name] = out
        return out

    def memo(self, key, compute):
        """A read-only array computed from this panel's fields alone (the rank of a field, say), kept
        with the panel like its derived fields: formulas on the panel compute it once."""
        value = self._derived.get(key)
        if value is None:
            value = compute()
            value.setflags(write=False)
            self._derived[key] = value
        return value

    # ------------------------------------------------------------------- cuts
    def window(self, start=None, end=None) -> "Panel":
        """Sessions with start <= date <= end, as a new panel of copies.

        Nothing after `end` survives in the result: this is the holdout cut.
        """
        mask = np.ones(self.n_days, dtype=bool)
        if start is not None:
            mask &= self.dates >= np.datetime64(start, "D")
        if end is not None:
            mask &= self.dates <= np.datetime64(end, "D")
        if not mask.any():
            raise DataError(f"no sessions between {start} and {end} (panel spans {self.dates[0]}..{self.dates[-1]})")
        return Panel({k: v[mask] for k, v in self.data.items()}, self.dates[mask], self.tickers,
                     source=self.source, sectors=self.sectors)

    def head(self, n_days: int) -> "Panel":
        """The first `n_days` sessions (copies)."""
        if not 0 < n_days <= self.n_days:
            raise DataError(f"head({n_days}) of a panel with {self.n_days} sessions")
        return Panel({k: v[:n_days] for k, v in self.data.items()}, self.dates[:n_days], self.tickers,
                     source=self.source, sectors=self.sectors)

    def select(self, tickers: Iterable[str]) -> "Panel":
        """A universe: the given tickers, in the given order."""
        wanted = list(dict.fromkeys(str(t) for t in tickers))
        index = {t: i for i, t in enumerate(self.tickers)}
        unknown = [t for t in wanted if t not in index]
        if unknown:
            raise DataError(f"{len(unknown)} tickers not in the panel: {unknown[:10]}")
        if not wanted:
            raise DataError("empty universe")
        cols = np.array([index[t] for t in wanted])
        sectors = None if self.sectors is None else tuple(self.sectors[i] for i in cols)
        return Panel({k: v[:, cols] for k, v in self.data.items()}, self.dates, tuple(wanted),
                     source=self.source, sectors=sectors)

    # --------------------------------------------------------------- identity
    def fingerprint(self) -> str:
        """SHA-256 of dates, tickers and every field: archives and world models are tied to it."""
        cached = self._derived.get("__fingerprint__")
        if cached is not None:
            return cached
        h = hashlib.sha256()
        h.update(self.dates.astype("int64").tobytes())
        h.update("\n".join(self.tickers).encode())
        for name in sorted(self.data):
            h.update(name.encode())
            h.update(np.ascontiguousarray(self.data[name]).tobytes())
        digest = h.hexdigest()
        self._derived["__fingerprint__"] = digest
        return digest
