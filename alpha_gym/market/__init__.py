"""Market data: the `Panel`, loaders for real data, and the embedded synthetic market."""

from alpha_gym.market.panel import DataError, Panel
from alpha_gym.market.loader import load_panel, load_universe
from alpha_gym.market.synthetic import synthetic_panel

__all__ = ["DataError", "Panel", "load_panel", "load_universe", "synthetic_panel"]
