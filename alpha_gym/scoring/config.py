"""Every threshold and priority of the verifier, in one dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from alpha_gym.book.costs import TrainingCosts
from alpha_gym.language.parser import Limits
from alpha_gym.scoring.cpcv import CPCVConfig

#: GDPO priorities of the reference's best run, in channel order R1..R12.
DEFAULT_PRIORITIES: dict[str, float] = {
    "cpcv": 3.0,
    "pbo": 1.0,
    "jepa_stress": 0.4,
    "factor_neutrality": 0.4,
    "turnover": 1.0,
    "min_turnover": 0.5,
    "ic": 0.2,
    "novelty_pnl": 0.4,
    "novelty_syntax": 0.2,
    "motif_guard": 0.3,
    "complexity": 0.2,
    "format": 1.0,
}
CHANNELS = tuple(DEFAULT_PRIORITIES)


class ConfigError(ValueError):
    """A configuration value that cannot work."""


@dataclass(frozen=True)
class VerifierConfig:
    """Scoring rules. The defaults are the reference system's."""

    priorities: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PRIORITIES))
    costs: TrainingCosts = TrainingCosts()
    cpcv: CPCVConfig = CPCVConfig()
    limits: Limits = Limits()
    min_valid_stocks: int = 5          # fewer valid stocks on a day -> flat that day
    # Validity and fixed rewards of invalid answers (R1 takes the same value).
    reward_missing_tag: float = -1.0   # no <alpha>...</alpha> block
    reward_unparseable: float = -0.8   # syntax error, unknown name or over a limit
    reward_invalid_book: float = -0.6  # parses, but trades under the floor or never
    min_turnover_invalid: float = 0.02  # below 2% of the book a day: invalid (R6)

    def __post_init__(self):
        unknown = set(self.priorities) - set(CHANNELS)
        if unknown:
            raise ConfigError(f"unknown channels in priorities: {sorted(unknown)}; channels are {CHANNELS}")
        prios = dict(DEFAULT_PRIORITIES)
        prios.update({k: float(v) for k, v in self.priorities.items()})
        object.__setattr__(self, "priorities", prios)
        if self.min_valid_stocks < 2:
            raise ConfigError("min_valid_stocks must be at least 2")
        if not 0 <= self.min_turnover_invalid < 1:
            raise ConfigError("min_turnover_invalid must be in [0, 1)")

    def with_(self, **changes: Any) -> "VerifierConfig":
        """A copy with some fields changed (unknown names raise ConfigError)."""
        names = {f.name for f in fields(self)}
        bad = set(changes) - names
        if bad:
            raise ConfigError(f"unknown config fields {sorted(bad)}")
        return replace(self, **changes)
