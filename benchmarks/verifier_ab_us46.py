"""One process scoring README's four examples and the 82 Alpha101s on us46 (`Verifier.evaluate`, one thread): the
whole-process command a before/after of the verifier times, a checkout against another.

    farm-bench -n 5 --pin 0 --vs "python benchmarks/verifier_ab_us46.py OTHER_CHECKOUT" -- python benchmarks/verifier_ab_us46.py .
"""
import sys, os, warnings
os.environ["OMP_NUM_THREADS"] = "1"
tree = os.path.abspath(sys.argv[1]); sys.path.insert(0, tree)
warnings.simplefilter("ignore")
from alpha_gym.market import load_panel, load_universe
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.alpha101 import formulas
import alpha_gym; assert alpha_gym.__file__.startswith(tree)
D = "/work/shared/data/us_equities/"
p = load_panel(D + "us_daily_train.csv.gz").select(load_universe(D + "universe_us46.txt"))
v = Verifier(p, VerifierConfig(stress_checkpoint=None, archive_seed=False))
fs = ["rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))", "((close - open) / ((high - low) + .001))",
      "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))"] + list(formulas(industry_free=True).values())
for f in fs: v.evaluate(f)
