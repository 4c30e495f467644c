"""Count the constant-up-to-rounding formulas (issue 27, item 1) that score valid on a synthetic panel.

    PYTHONPATH=$PWD python tests/count_constant_formulas.py    # one line per valid one, then the total
"""
import sys
from alpha_gym.market import synthetic_panel
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.scoring.config import VerifierConfig
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from test_hostile_constants import constant_formulas
v = Verifier(synthetic_panel(n_stocks=20, n_days=600, seed=5), VerifierConfig(archive_seed=False))
fs = constant_formulas()
valid = [f for f in fs if v.score_formula(f).valid]
print(f"{len(valid)} of {len(fs)} constant formulas score valid")
for f in valid: print("  VALID", f)
