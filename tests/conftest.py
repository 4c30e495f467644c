"""Shared fixtures. Real-data tests read ../shared/data/us_equities and skip when it is absent."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (CI passes or fails on the code, not on the draw);
# HYPOTHESIS_PROFILE=explore draws fresh ones.
settings.register_profile("deterministic", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

# The verifier caches seed books on disk (alpha_gym/scoring/seed_cache.py): keep the tests' files
# out of the user's cache folder, in a folder removed when the session ends.
if "ALPHA_GYM_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile
    _CACHE = tempfile.mkdtemp(prefix="alpha_gym_test_cache_")
    os.environ["ALPHA_GYM_CACHE"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

ROOT = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Record what this session collected before any -m/-k deselection: (tests, real_data tests), which the
    terminal summary prints."""
    config._alpha_gym_collected = (len(items), sum(1 for i in items if i.get_closest_marker("real_data")))


def pytest_terminal_summary(terminalreporter):
    """The suite's size, printed at the end of every run: CI's log shows it, and no document pins it."""
    got = getattr(terminalreporter.config, "_alpha_gym_collected", None)
    if got is not None:
        total, real = got
        terminalreporter.write_line(f"alpha-gym: {total:,} tests collected, {real:,} marked real_data, "
                                    f"{total - real:,} without the panel")


REAL_DATA_DIR = Path(os.environ.get("ALPHA_GYM_REAL_DATA", ROOT.parent / "shared" / "data" / "us_equities"))
REAL_TRAIN_FILE = REAL_DATA_DIR / "us_daily_train.csv.gz"
SKIP_REASON = (f"real US equity panel not found at {REAL_TRAIN_FILE} "
               "(set ALPHA_GYM_REAL_DATA to the folder holding us_daily_train.csv.gz)")


def _require_real_data():
    if not REAL_TRAIN_FILE.exists():
        pytest.skip(SKIP_REASON)


@pytest.fixture(scope="session")
def real_all():
    """All 496 stocks of the real train window (skips when the data is absent)."""
    _require_real_data()
    from alpha_gym.market import load_panel
    return load_panel(REAL_TRAIN_FILE)


@pytest.fixture(scope="session")
def real_us46(real_all):
    """The reference universe: 46 US large caps, 2012-06-29..2025-08-20."""
    from alpha_gym.market import load_universe
    return real_all.select(load_universe(REAL_DATA_DIR / "universe_us46.txt"))


@pytest.fixture(scope="session")
def synthetic46():
    """The embedded synthetic market at its default size."""
    from alpha_gym.market import synthetic_panel
    return synthetic_panel()


@pytest.fixture(scope="session")
def small_synthetic():
    """A small synthetic market (12 stocks x 400 sessions) for fast tests."""
    from alpha_gym.market import synthetic_panel
    return synthetic_panel(n_stocks=12, n_days=400, seed=3)


#: A non-default setting for the integrations' parity tests: changed priorities and a changed threshold. R13
#: (`brief`, priority 0 by default) is on, so a path that scores without its brief (or with another) differs; R14
#: (`book`, priority 0 by default) is on, so every path also computes what an answer adds to the run's book.
CHANGED_SETTINGS = "[verifier]\nturnover_cap = 0.4\n\n[verifier.priorities]\ncpcv = 1.0\nbrief = 1.0\nbook = 3.0\n"
CHANGED_SETS = ("verifier.turnover_cap=0.4", "verifier.priorities.cpcv=1.0", "verifier.priorities.brief=1.0",
                "verifier.priorities.book=3.0")


@pytest.fixture(scope="session")
def changed_settings(tmp_path_factory):
    """(a settings TOML, the same as --set items, the VerifierConfig both give): every path must score with it."""
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.settings import load
    path = tmp_path_factory.mktemp("settings") / "changed.toml"
    path.write_text(CHANGED_SETTINGS)
    config = load(path).verifier
    assert config == load(None, CHANGED_SETS).verifier != VerifierConfig()
    return path, CHANGED_SETS, config


@pytest.fixture(scope="session")
def write_market_csv():
    """A function that writes a panel as the long-format CSV (date,ticker,OHLCV) the loaders read."""
    def write(panel, path: Path) -> Path:
        with gzip.open(path, "wt") as f:
            f.write("date,ticker,open,high,low,close,volume\n")
            for t in range(panel.n_days):
                for i, tk in enumerate(panel.tickers):
                    f.write(f"{panel.dates[t]},{tk}," + ",".join(repr(float(panel.field(k)[t, i]))
                                                                 for k in ("open", "high", "low", "close", "volume"))
                            + "\n")
        return path
    return write


@pytest.fixture
def two_cores():
    """Skip a test that runs two scoring workers where this process may use fewer than two cores (`taskset -c 0`,
    a one-core container): the commands refuse more workers than cores by design (tests/test_score_batch.py
    checks that refusal), so there the test could only fail on the refusal."""
    from alpha_gym.ranges import usable_cores
    if usable_cores() < 2:
        pytest.skip(f"needs 2 usable cores for two workers; this process may run on {usable_cores()}")
