"""alpha-gym: a Gymnasium environment where language models write formulaic trading alphas.

`import alpha_gym` registers `AlphaFormula-v0` (the write task), `AlphaFormulaEnvB-v0` (its dearer costs) and
`AlphaFormulaEvolve-v0` (the improve task: parents and their numbers in the prompt). It needs no torch: training
(`trainers/`) and the world model are optional extras.
"""

from gymnasium.envs.registration import register, registry

from alpha_gym.language import FormulaError, canonical, parse
from alpha_gym.market import DataError, Panel, load_panel, load_universe, synthetic_panel
from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES, VerifierConfig
from alpha_gym.scoring.verifier import Score, Verifier

from alpha_gym._version import __version__  # noqa: E402,F401

ENV_ID = "AlphaFormula-v0"
#: Environment B of the reference: the same task and verifier with per-action costs about 19x higher.
ENV_B_ID = "AlphaFormulaEnvB-v0"
if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="alpha_gym.env:AlphaFormulaEnv", vector_entry_point="alpha_gym.env:make_vector_env")
#: The improve task: k parent formulas from a program database, with their train-window numbers, in the prompt.
EVOLVE_ENV_ID = "AlphaFormulaEvolve-v0"
if EVOLVE_ENV_ID not in registry:
    register(id=EVOLVE_ENV_ID, entry_point="alpha_gym.env:AlphaFormulaEvolveEnv",
             vector_entry_point="alpha_gym.env:make_evolve_vector_env")
if ENV_B_ID not in registry:
    from alpha_gym.book.costs import ENVIRONMENT_B_COSTS
    register(id=ENV_B_ID, entry_point="alpha_gym.env:AlphaFormulaEnv",
             vector_entry_point="alpha_gym.env:make_vector_env", kwargs={"cost_model": ENVIRONMENT_B_COSTS})

__all__ = ["CHANNELS", "DEFAULT_PRIORITIES", "DataError", "ENV_B_ID", "ENV_ID", "EVOLVE_ENV_ID", "FormulaError", "Panel", "Score", "Verifier",
           "VerifierConfig", "canonical", "load_panel", "load_universe", "parse", "synthetic_panel"]
