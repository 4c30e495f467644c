"""alphalens-reloaded input with alpha-gym's trade timing.

alphalens computes the forward return of date t as price(t+1)/price(t) - 1. alpha-gym
decides at close(t) and earns open(t+1) -> open(t+2). Handing alphalens the open
price as it is would credit the factor with open(t) -> open(t+1), a day early and
partly before the decision. `alphalens_inputs` shifts the price frame so that the
row of date t holds open(t+1): alphalens' 1-period forward return is then exactly
the return alpha-gym's book earns.

The factor is, by default, the cross-sectional rank the book is built from, so
alphalens' demeaned factor-weighted portfolio (`performance.factor_returns`) is
alpha-gym's gross P&L; `values="raw"` exports the formula's own values instead
(the same quantiles, other weights). Days alpha-gym leaves flat are not exported.
"""

from __future__ import annotations

import numpy as np

from alpha_gym.language import parse
from alpha_gym.language.evaluate import evaluate
from alpha_gym.language.operators import KERNELS


def alphalens_inputs(verifier, formula: str, values: str = "rank"):
    """(factor, prices) for `alphalens.utils.get_clean_factor_and_forward_returns`.

    factor: Series on a (date, asset) MultiIndex over the book's traded decision days;
    prices: DataFrame, dates x assets, where the row of date t is open(t+1).
    """
    import pandas as pd
    if values not in ("rank", "raw"):
        raise ValueError(f"values must be 'rank' or 'raw', got {values!r}")
    from alpha_gym.integrations.frames import full_book
    panel = verifier.panel
    ev, book = full_book(verifier, formula)
    signal = evaluate(parse(ev.text, verifier.config.limits), panel)[:-2]
    if values == "rank":
        signal = KERNELS["rank"](np.asarray(signal, dtype=np.float64))
    traded = np.abs(book.weights).sum(axis=1) > 0
    signal = np.where(traded[:, None], signal, np.nan)
    dates = pd.DatetimeIndex(panel.dates.astype("datetime64[ns]"), name="date")
    assets = pd.Index(list(panel.tickers), name="asset")
    factor = pd.DataFrame(signal, index=dates[:-2], columns=assets).stack().dropna().rename("factor")
    prices = pd.DataFrame(panel.field("open")[1:], index=dates[:-1], columns=assets)
    return factor, prices


def factor_data(verifier, formula: str, values: str = "rank", quantiles: int = 5, **kwargs):
    """alphalens' clean factor data for `formula`, 1-period forward returns aligned to alpha-gym.

    Extra keyword arguments go to `get_clean_factor_and_forward_returns` (`max_loss` defaults to 1:
    keep every row, so the analysis covers the days alpha-gym trades).
    """
    from alphalens.utils import get_clean_factor_and_forward_returns
    factor, prices = alphalens_inputs(verifier, formula, values)
    kwargs.setdefault("max_loss", 1.0)
    return get_clean_factor_and_forward_returns(factor, prices, periods=(1,), quantiles=quantiles, **kwargs)
