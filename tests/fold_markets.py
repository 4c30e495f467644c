"""Markets for the walk-forward tests: a panel whose later sessions are shuffled, so a test can show that what a
run on a fold's search window computes never reads the windows after it."""

from __future__ import annotations

import numpy as np

from alpha_gym.market import Panel, synthetic_panel
from alpha_gym.market.folds import FoldPlan, fold_panels, make_fold


def scrambled(panel: Panel, first: int, seed: int = 7) -> Panel:
    """The panel with its sessions from `first` on shuffled as whole days (each day's bars stay a valid bar, the
    dates stay in order): every window before `first` is bit for bit the same, every one after holds other prices."""
    order = np.arange(panel.n_days)
    order[first:] = first + np.random.default_rng(seed).permutation(panel.n_days - first)
    return Panel({k: v[order] for k, v in panel.data.items()}, panel.dates, panel.tickers, source="scrambled")


def scrambled_market_files(folder, write_market_csv, sessions: int) -> dict:
    """The 20-stock x 800-session synthetic market as data files, with fold 5's windows `sessions` long: as it is
    ("plain"), with its test window shuffled ("test") and from its validation window on ("validation+test"),
    beside the panel, fold 5 and its panels."""
    panel = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    fold = make_fold(panel.dates, 5, FoldPlan(test=sessions, validation=sessions))
    return {"fold": fold, "panel": panel, "panels": fold_panels(panel, "5", sessions),
            "plain": write_market_csv(panel, folder / "plain.csv.gz"),
            "test": write_market_csv(scrambled(panel, fold.test.first), folder / "test.csv.gz"),
            "validation+test": write_market_csv(scrambled(panel, fold.validation.first), folder / "later.csv.gz")}
