"""An evaluated formula's book as pandas (or polars) objects.

`book_frames(verifier, formula)` trades the formula exactly as the verifier
does (`Verifier.evaluate(formula).book`) and labels the arrays:

    weights   DataFrame, decision dates x tickers: the position decided at close(t),
              filled at open(t+1), held to open(t+2)
    returns   DataFrame, the open(t+1)->open(t+2) return each weight earns
    gross, cost, net, turnover   Series indexed by decision date

Index = decision date t (the close the decision is made at), as everywhere in
alpha-gym; the last two sessions of the panel have no realised return and no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class BookFrames:
    """The labelled book of one formula (see the module docstring for each field)."""

    formula: str
    weights: Any
    returns: Any
    gross: Any
    cost: Any
    net: Any
    turnover: Any

    def daily(self):
        """gross, cost, net and turnover side by side (one DataFrame, decision date index)."""
        import pandas as pd
        return pd.DataFrame({"gross": self.gross, "cost": self.cost, "net": self.net, "turnover": self.turnover})

    def to_polars(self) -> dict:
        """{"daily": date,gross,cost,net,turnover; "weights": long date,ticker,weight} as polars DataFrames."""
        import polars as pl
        daily = pl.from_pandas(self.daily().rename_axis("date").reset_index()) if _has_pyarrow() else \
            pl.DataFrame({"date": self.net.index.to_numpy(), **{k: v.to_numpy() for k, v in self.daily().items()}})
        long = self.weights.stack().rename("weight").rename_axis(["date", "ticker"]).reset_index()
        weights = pl.DataFrame({"date": long["date"].to_numpy(), "ticker": long["ticker"].astype(str).to_list(),
                                "weight": long["weight"].to_numpy()})
        return {"daily": daily, "weights": weights}


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def full_book(verifier, formula: str):
    """(Evaluated, Book with its weights): `evaluate(formula).book`, rebuilt in full where the verifier keeps
    it light (no days x stocks weights, to bound a group's memory)."""
    ev = verifier.evaluate(formula)
    book = ev.book if ev.book.weights is not None else verifier.book(ev.node)
    return ev, book


def book_frames(verifier, formula: str) -> BookFrames:
    """Trade `formula` on the verifier's panel and return its book as pandas objects.

    Raises `FormulaError` for a formula that does not parse (as `Verifier.evaluate` does).
    """
    import pandas as pd
    ev, book = full_book(verifier, formula)
    index = pd.DatetimeIndex(book.dates.astype("datetime64[ns]"), name="date")
    columns = pd.Index(list(verifier.panel.tickers), name="ticker")

    def series(values, name):
        return pd.Series(values.copy(), index=index, name=name)

    return BookFrames(formula=ev.text,
                      weights=pd.DataFrame(book.weights.copy(), index=index, columns=columns),
                      returns=pd.DataFrame(book.returns.copy(), index=index, columns=columns),
                      gross=series(book.gross, "gross"), cost=series(book.cost, "cost"),
                      net=series(book.net, "net"), turnover=series(book.turnover, "turnover"))
