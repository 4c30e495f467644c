"""Which panel a run trains on: an explicit panel, a data file, or the embedded synthetic market.

The env, the trainers, the integrations and the command line all turn the same options into a panel;
the rule sits with the market so none of them needs the Gym env for it.
"""

from __future__ import annotations

from functools import lru_cache

from alpha_gym.market.loader import load_panel, load_universe
from alpha_gym.market.panel import Panel
from alpha_gym.market.synthetic import synthetic_panel


@lru_cache(maxsize=4)
def default_panel(n_stocks: int = 46, n_days: int = 3304, seed: int = 0) -> Panel:
    """The embedded synthetic market, built once per process."""
    return synthetic_panel(n_stocks=n_stocks, n_days=n_days, seed=seed)


def resolve_panel(panel: Panel | None = None, data: str | None = None, universe=None,
                  train_start=None, train_end=None) -> Panel:
    """The training panel from the env's options: an explicit panel, a data file, or the synthetic default.

    `train_end` cuts the panel: sessions after it are not reachable from the result.
    """
    if panel is not None and data is not None:
        raise ValueError("pass either panel= or data=, not both")
    if data is not None:
        return load_panel(data, universe=universe, start=train_start, end=train_end)
    base = panel if panel is not None else default_panel()
    if universe is not None:
        base = base.select(load_universe(universe))
    if train_start is not None or train_end is not None:
        base = base.window(train_start, train_end)
    return base
