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
    # Channel thresholds (each channel's docstring in channels.py gives its formula).
    pbo_floor: float = -0.48             # R2: the most a formula can lose for ranking worse out of sample
    turnover_cap: float = 0.5            # R5: free up to 50% of the book a day
    min_turnover_free: float = 0.06      # R6: free above 6% a day
    ic_cap_when_unprofitable: float = 0.05  # R7: IC bonus cap while CPCV <= 0
    duplicate_corr: float = 0.98         # R8: a book this correlated with another is a duplicate
    syntax_duplicate_penalty: float = -0.3  # R9: per duplicate of the bucketed canonical form
    motif_min_ic: float = 0.005          # R10: a bare motif or price-only formula needs this IC
    complexity_free_nodes: int = 24      # R11: nodes beyond this cost 0.02 each
    format_enabled: bool = True          # R12: +0.05 for a reasoning block (the reference run had it off)
    # Novelty archive (R8, R9, and R2 for single answers).
    archive_capacity: int = 1024
    archive_seed: bool = True            # seed with Alpha101-style formulas on first use
    # R3: a directory holding a fitted world model; None -> the channel is off (0, reported).
    stress_checkpoint: str | None = None

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
