"""Market data, the ground floor: the `Panel`, loaders for real data, the embedded synthetic market, the
trading calendar (`calendar`) and which panel a run trains on (`resolve`). It imports nothing above it."""

from alpha_gym.market.panel import DataError, Panel
from alpha_gym.market.loader import load_panel, load_universe
from alpha_gym.market.synthetic import synthetic_panel

__all__ = ["DataError", "Panel", "load_panel", "load_universe", "synthetic_panel"]
