"""One process scoring README's four examples and the 82 Alpha101s on us46 (`Verifier.evaluate`, one thread): the
whole-process command a before/after of the verifier times. The checkout scored is the one Python imports
`alpha_gym` from (PYTHONPATH picks another); it is printed on stderr.

    farm-bench -n 5 --pin 0 --vs "sh -c 'PYTHONPATH=OTHER_CHECKOUT exec python benchmarks/verifier_ab_us46.py'" \
        -- sh -c 'PYTHONPATH=. exec python benchmarks/verifier_ab_us46.py'
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import sys  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "us_equities"


def main() -> None:
    warnings.simplefilter("ignore")
    import alpha_gym
    from alpha_gym.alpha101 import formulas
    from alpha_gym.market import load_panel, load_universe
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    print(f"alpha_gym from {Path(alpha_gym.__file__).parent}", file=sys.stderr)
    panel = load_panel(DATA / "us_daily_train.csv.gz").select(load_universe(DATA / "universe_us46.txt"))
    v = Verifier(panel, VerifierConfig(stress_checkpoint=None, archive_seed=False))
    readme = ["rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))",
              "((close - open) / ((high - low) + .001))", "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))"]
    for f in readme + list(formulas(industry_free=True).values()):
        v.evaluate(f)


if __name__ == "__main__":
    main()
