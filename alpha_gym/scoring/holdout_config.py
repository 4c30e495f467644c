"""HoldoutConfig: how the holdout is scored, beside the VerifierConfig whose shared rules it copies.

The rules the holdout shares with training (CPCV blocks, turnover cap and penalty, R1's clip, the
stock floor, the formula limits) default to `VerifierConfig`'s and take its ranges. The config sits
with the verifier's so the settings file reads both without reaching up to `evaluation/`, which
scores the holdout (`alpha_gym.evaluation.holdout`, the definition in its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

from alpha_gym.language import Limits
from alpha_gym.ranges import Range, check_fields, closed, ints
from alpha_gym.scoring.config import VERIFIER_RANGES, ConfigError, VerifierConfig
from alpha_gym.scoring.cpcv import CPCVConfig

_V = VerifierConfig  # the rules the holdout shares with training default to the verifier's


@dataclass(frozen=True)
class HoldoutConfig:
    """How the holdout is scored. Defaults are the definition in `alpha_gym.evaluation.holdout`'s docstring.

    The book and score rules shared with training (CPCV blocks, turnover cap and penalty, R1's clip,
    the minimum stock count, the formula size limits) default to `VerifierConfig`'s; `from_verifier`
    copies a given verifier's, so a formula the training verifier refuses for its size the holdout refuses too.
    """

    context: int = 252             # training sessions prepended for the lookback
    cpcv: CPCVConfig = _V.cpcv
    turnover_cap: float = _V.turnover_cap          # free turnover per day
    turnover_penalty: float = _V.turnover_penalty  # score points per unit of turnover above the cap
    clip: float = _V.cpcv_clip
    min_valid_stocks: int = _V.min_valid_stocks
    min_turnover: float = 0.0      # validity floor on holdout turnover (the reference probe applies none)
    crash_threshold: float = -0.015  # "market fell more than 1.5%" for the book's down-day return
    limits: Limits = _V.limits     # formula size limits (the parser's)

    def __post_init__(self):
        if self.clip is None:
            raise ConfigError("holdout clip must be a number > 0, got None")
        check_fields(self, HOLDOUT_RANGES)

    @classmethod
    def from_verifier(cls, verifier_config: VerifierConfig, **changes) -> "HoldoutConfig":
        """The holdout rules of a training verifier: its CPCV, turnover cap and penalty, clip, stock floor and limits.

        A verifier with R1 unclipped (`VerifierConfig.reference()`) keeps the holdout's default clip."""
        v = verifier_config
        return cls(**{"cpcv": v.cpcv, "turnover_cap": v.turnover_cap, "turnover_penalty": v.turnover_penalty,
                      "clip": v.cpcv_clip if v.cpcv_clip is not None else cls.clip,
                      "min_valid_stocks": v.min_valid_stocks, "limits": v.limits, **changes})


#: Shared rules take the verifier's ranges, so a value the verifier accepts the holdout accepts too.
HOLDOUT_RANGES = {
    "context": ints(1, 100_000),
    "turnover_cap": VERIFIER_RANGES["turnover_cap"],
    "turnover_penalty": VERIFIER_RANGES["turnover_penalty"],
    "clip": VERIFIER_RANGES["cpcv_clip"],
    "min_valid_stocks": VERIFIER_RANGES["min_valid_stocks"],
    "min_turnover": Range(0.0, 1.0, hi_open=True),
    "crash_threshold": closed(-1.0, 0.0),
}
