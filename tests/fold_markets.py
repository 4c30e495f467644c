"""Markets for the walk-forward tests: a panel whose later sessions are shuffled, so a test can show that what a
run on a fold's search window computes never reads the windows after it."""

from __future__ import annotations

import numpy as np

from alpha_gym.market import Panel


def scrambled(panel: Panel, first: int, seed: int = 7) -> Panel:
    """The panel with its sessions from `first` on shuffled as whole days (each day's bars stay a valid bar, the
    dates stay in order): every window before `first` is bit for bit the same, every one after holds other prices."""
    order = np.arange(panel.n_days)
    order[first:] = first + np.random.default_rng(seed).permutation(panel.n_days - first)
    return Panel({k: v[order] for k, v in panel.data.items()}, panel.dates, panel.tickers, source="scrambled")
