"""Every threshold and priority of the verifier, in one dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from alpha_gym.book.costs import TrainingCosts
from alpha_gym.errors import ConfigError  # noqa: F401  (defined there so every config dataclass can raise it)
from alpha_gym.language.parser import Limits
from alpha_gym.language.printer import WINDOW_BUCKETS
from alpha_gym.ranges import Range, SettingError, above, check_fields, check_value, closed, ints
# The channels, their default priorities and minima are declared once, in the channel table.
from alpha_gym.scoring.channel_table import CHANNEL_TABLE, CHANNELS, DEFAULT_PRIORITIES
from alpha_gym.scoring.cpcv import CPCVConfig

#: A priority's range: 0 (the channel off) or in [1e-6, 1e3]. Bounded above so that the weighted sum of 12
#: bounded channels stays finite, and below because R1 carries an invalid answer's reward divided by its
#: priority (`invalid_cpcv`): 1e-320 made that -inf; at 1e-6 it is at most 1e9 and the reward stays exact.
PRIORITY = Range(1e-6, 1e3, or_zero=True)

INVALID_REWARDS = ("below_valid", "reference")

#: Named rewards: VerifierConfig changes on top of the defaults (the reference's reward, "reference"), one row
#: each; `VerifierConfig.recipe(name)` builds one (a settings file or `--set` items give the same config:
#: `--set verifier.priorities.brief=1` is the "brief" row). A recipe's priorities are merged into the defaults.
REWARD_RECIPES: dict[str, dict[str, Any]] = {
    "reference": {},
    # R13 on (issue 39): the share of the brief's checkable constraints met, at the weight of R5 or R12
    "brief": {"priorities": {"brief": 1.0}},
    # R14 on (issue 39): what an answer adds to the run's correlation-capped book, in CPCV units at R1's weight (a
    # CPCV point added to the book pays what a point of the answer's own CPCV does)
    "book": {"priorities": {"book": 3.0}},
    "brief_book": {"priorities": {"brief": 1.0, "book": 3.0}},
}


def weighted_sum(channels: Mapping[str, float], priorities: Mapping[str, float]) -> float:
    """The scalar reward: sum over the channels (R1..R14) of priority x value, in CHANNELS order.

    The one place the sum is taken, so the verifier, the loop, GRPO mode and every adapter agree bit for bit.
    """
    return float(sum(priorities[c] * channels[c] for c in CHANNELS))


@dataclass(frozen=True)
class VerifierConfig:
    """Scoring rules. The defaults are the reference system's.

    The diversity gate (`self_corr_gate`, off by default) is the field's rule for a pool of alphas:
    WorldQuant BRAIN refuses a new alpha whose daily P&L correlates >= 0.7 with an existing one unless its
    Sharpe is at least 10% higher, and AlphaForge admits a factor to its zoo only below 0.7. With it set, an
    answer whose train-window daily P&L has |corr| >= self_corr_gate with an archive entry scores as an R8
    duplicate (`duplicate_pnl_penalty`) and does not join the archive, unless its CPCV is at least
    `self_corr_margin` (10%) of that entry's |CPCV| above the entry's (`channels.diversity_gate`).
    """

    priorities: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PRIORITIES))
    costs: TrainingCosts = TrainingCosts()
    cpcv: CPCVConfig = CPCVConfig()
    limits: Limits = Limits()
    min_valid_stocks: int = 5          # fewer valid stocks on a day -> flat that day
    # Invalid answers. The reference's rewards are -1.0 / -0.8 / -0.6, so a valid book that loses money
    # (Alpha#101: R1 -5.5, reward -16.6) scored far BELOW an answer that trades nothing. With
    # "below_valid" (default) R1 is clipped to +-cpcv_clip, which bounds every valid reward from below
    # (`valid_reward_bound`), and the three penalties sit that far beneath the bound, in the same order:
    # no invalid answer ever outranks a valid one. "reference" keeps the reference's exact R1 values.
    invalid_rewards: str = "below_valid"  # "below_valid" | "reference"
    cpcv_clip: float | None = 5.0      # R1 clipped to [-5, 5], as the holdout score; None: unclipped
    reward_missing_tag: float = -1.0   # no <alpha>...</alpha> block
    reward_unparseable: float = -0.8   # syntax error, unknown name or over a limit
    reward_invalid_book: float = -0.6  # parses, but trades under the floor or never
    min_turnover_invalid: float = 0.02  # below 2% of the book a day: invalid (R6)
    # ... and below 1% a day over the window's last CPCV block: invalid too. The 2% floor is a mean over the
    # whole window, so a book that traded in its first years and has been flat since passed it; on walk-forward
    # fold 5 (us46) all 20 of the search control's best by train reward were such books, and none traded on the
    # validation or test window. 0: off
    min_recent_turnover: float = 0.01
    # A static price-level ranking nudged over the turnover floor (`rank(close - 2 * open)`): invalid when the
    # mean over days of |rank correlation of the signal with the close| is above this (`price_level.py`); 1: off
    max_price_level_corr: float = 0.96
    # Channel constants: every number a channel uses (each channel's docstring in channels.py gives its
    # formula; the functions there take their defaults from these fields).
    pbo_floor: float = -0.48             # R2: the most a formula can lose for ranking worse out of sample
    neutrality_weight: float = 0.4       # R4: -weight x clip(raw Sharpe - residual Sharpe, 0, max_gap)
    neutrality_max_gap: float = 3.0      # R4: Sharpe lost to the known factors counted at most this much
    turnover_cap: float = 0.5            # R5: free up to 50% of the book a day
    turnover_penalty: float = 2.0        # R5: per unit of daily turnover above the cap (also the holdout's)
    # R6: free above 3% a day. The reference started at 6% and on Jul 26 (hack log) moved the band after it
    # charged its own best formulas (2.3-3.1% a day) -0.36 to -0.46; at 3% that top decile pays about -0.09.
    min_turnover_free: float = 0.03
    ic_weight: float = 0.2               # R7: weight x clip(ic_scale x IC, -1, 1)
    ic_scale: float = 20.0               # R7: an IC of 1/20 = 0.05 earns the full weight
    ic_cap_when_unprofitable: float = 0.05  # R7: IC bonus cap while CPCV <= 0
    novelty_pnl_weight: float = 0.4      # R8: weight x (1 - max |P&L corr|)
    duplicate_corr: float = 0.98         # R8: a book this correlated with another is a duplicate
    duplicate_pnl_penalty: float = -0.4  # R8: what a duplicate book gets
    novelty_syntax_weight: float = 0.2   # R9: weight x (1 - max |P&L corr|) for an unseen form
    syntax_duplicate_penalty: float = -0.3  # R9: per duplicate of the bucketed canonical form
    syntax_duplicates_counted: int = 4   # R9: duplicates counted at most
    # R9: windows snap to the nearest of these (log distance) before forms are compared: ts_mean(close, 20)
    # and ts_mean(close, 21) are one idea
    syntax_window_buckets: tuple[int, ...] = WINDOW_BUCKETS
    motif_min_ic: float = 0.005          # R10: a bare motif or price-only formula needs this IC
    complexity_free_nodes: int = 24      # R11: nodes beyond this cost complexity_per_node each
    complexity_per_node: float = -0.02   # R11
    format_enabled: bool = False         # R12: a bonus for a reasoning block; off, as in the reference run
    format_bonus: float = 0.05           # R12
    # Novelty archive (R8, R9, and R2 for single answers).
    archive_capacity: int = 1024         # oldest non-seed entry leaves beyond this
    archive_min_core: float = 0.0        # valid answers with R1 above this enter the archive after each step
    # ... and whose bucketed form is new. Below 1, a book correlating this much with an entry is also refused,
    # but then its form never reaches the syntax archive and R9 pays for repeating it forever: keep 1.
    archive_admit_corr: float = 1.0
    archive_seed: bool = True            # seed with Alpha101-style formulas on first use
    # Diversity gate (off by default: the reference's reward). WorldQuant BRAIN refuses a new alpha whose daily
    # P&L correlates >= 0.7 with one already submitted unless its Sharpe is at least 10% higher; AlphaForge
    # admits a factor to its zoo only below 0.7. Here: an answer whose train-window daily P&L has
    # |corr| >= self_corr_gate with an archive entry is a DUPLICATE (R8 = duplicate_pnl_penalty, and it does
    # not join the archive) unless its CPCV >= entry CPCV + self_corr_margin x |entry CPCV|. How hard the gate
    # bites is R8's duplicate penalty times R8's priority (-0.16 with the defaults; see channels.diversity_gate).
    self_corr_gate: float | None = None  # e.g. 0.7; None: off
    self_corr_margin: float = 0.10       # the CPCV an answer needs above a correlated entry's, as a fraction
    # R3's world model: "auto" -> the one `alpha-gym stress fit` registered for this panel (off when none),
    # a directory -> that one, None ("none" in a settings file) -> off. Off contributes 0 and says why.
    # Every score names the model used (`Score.world_model`: its content hash, or "off"); README says why
    # "auto" stays the default and how to pin rewards across machines ("none").
    stress_checkpoint: str | None = "auto"
    stress_weight: float = 0.4           # R3 = -min(1, stress_weight x log(1 + mean scenario CPCV drop))

    def __post_init__(self):
        check_fields(self, VERIFIER_RANGES)
        if not isinstance(self.priorities, Mapping):
            raise SettingError("VerifierConfig", "priorities", self.priorities, f"a table of channel -> {PRIORITY}")
        unknown = set(self.priorities) - set(CHANNELS)
        if unknown:
            raise ConfigError(f"unknown channels in priorities: {sorted(unknown)}; channels are {CHANNELS}")
        for k, v in self.priorities.items():
            check_value("VerifierConfig", f"priorities.{k}", v, PRIORITY)
        prios = dict(DEFAULT_PRIORITIES)
        prios.update({k: float(v) for k, v in self.priorities.items()})
        object.__setattr__(self, "priorities", prios)
        if not self.min_turnover_free > self.min_turnover_invalid:
            raise ConfigError(f"min_turnover_free ({self.min_turnover_free}) must be above min_turnover_invalid "
                              f"({self.min_turnover_invalid})")
        if self.invalid_rewards not in INVALID_REWARDS:
            raise ConfigError(f"invalid_rewards must be one of {INVALID_REWARDS}, got {self.invalid_rewards!r}")
        if not (self.reward_missing_tag < self.reward_unparseable < self.reward_invalid_book <= 0):
            raise ConfigError("invalid rewards must keep their order: reward_missing_tag < reward_unparseable < "
                              f"reward_invalid_book <= 0, got {self.reward_missing_tag}, {self.reward_unparseable}, "
                              f"{self.reward_invalid_book}")
        if self.invalid_rewards == "below_valid":
            if self.cpcv_clip is None:
                raise ConfigError("invalid_rewards='below_valid' needs a finite cpcv_clip (R1 unbounded has no "
                                  "lowest valid reward to sit beneath)")
            if prios["cpcv"] <= 0:
                raise ConfigError("invalid_rewards='below_valid' puts the penalty in R1: priorities['cpcv'] must be > 0")
        b = self.syntax_window_buckets
        increasing = isinstance(b, tuple) and b and list(b) == sorted(set(b))
        if not (increasing and all(isinstance(x, int) and x >= 1 for x in b)):
            raise ConfigError(f"syntax_window_buckets must be increasing positive integers, got {b!r}")

    @classmethod
    def reference(cls, **changes: Any) -> "VerifierConfig":
        """The reference system's exact invalid-answer values: R1 = -1.0 / -0.8 / -0.6, R1 unclipped."""
        return cls(invalid_rewards="reference", cpcv_clip=None, **changes)

    @classmethod
    def recipe(cls, name: str, **changes: Any) -> "VerifierConfig":
        """The named reward `REWARD_RECIPES[name]`, then `changes` (priorities merged, not replaced).
        Unknown names raise ConfigError naming the recipes."""
        if name not in REWARD_RECIPES:
            raise ConfigError(f"unknown reward recipe {name!r}; choose from {sorted(REWARD_RECIPES)}")
        row = dict(REWARD_RECIPES[name])
        prios = {**row.pop("priorities", {}), **changes.pop("priorities", {})}
        return cls(**{**row, **changes, **({"priorities": prios} if prios else {})})

    def channel_minima(self) -> dict[str, float]:
        """The lowest value each channel can take for a VALID answer (each entry's `minimum` in the channel table).

        R10 is -1 here: when the guard fires with a lower value, the whole reward is min(rest - priority, 0),
        never below the bound. Turnover is at most 2 a day (a gross-1 book that flips every position).
        Unseen books and forms earn >= 0 in R8/R9; their minima are the duplicate penalties.
        """
        return {c.name: c.minimum(self) for c in CHANNEL_TABLE}

    def valid_reward_bound(self) -> float:
        """The lowest scalar reward a valid answer can get: sum of priority x each channel's minimum."""
        lows = self.channel_minima()
        return float(sum(self.priorities[c] * lows[c] for c in CHANNELS))

    def invalid_reward(self, kind: str) -> float:
        """The scalar reward of an invalid answer: kind "missing_tag" | "unparseable" | "invalid_book"."""
        base = {"missing_tag": self.reward_missing_tag, "unparseable": self.reward_unparseable,
                "invalid_book": self.reward_invalid_book}[kind]
        if self.invalid_rewards == "reference":
            return self.priorities["cpcv"] * base  # R1 takes the reference's value; the scalar is its weight
        return self.valid_reward_bound() + base

    def invalid_cpcv(self, kind: str) -> float:
        """The R1 value of an invalid answer (every other channel is 0), so that sum p x channels = the reward."""
        if self.invalid_rewards == "reference":
            return {"missing_tag": self.reward_missing_tag, "unparseable": self.reward_unparseable,
                    "invalid_book": self.reward_invalid_book}[kind]
        return self.invalid_reward(kind) / self.priorities["cpcv"]

    def with_(self, **changes: Any) -> "VerifierConfig":
        """A copy with some fields changed (unknown names raise ConfigError)."""
        names = {f.name for f in fields(self)}
        bad = set(changes) - names
        if bad:
            raise ConfigError(f"unknown config fields {sorted(bad)}")
        return replace(self, **changes)


#: The allowed range of every numeric field (`alpha_gym.ranges`). Weights, scales and penalties are bounded
#: by 1e3 so that every channel, times a priority of at most 1e3, stays finite.
_W = closed(0.0, 1e3)         # a weight or scale: >= 0
_P = closed(-1e3, 0.0)        # a penalty or an invalid reward: <= 0
VERIFIER_RANGES = {
    "min_valid_stocks": ints(2, 1_000_000),
    "cpcv_clip": above(0.0, 1e3),
    "reward_missing_tag": _P, "reward_unparseable": _P, "reward_invalid_book": _P,
    "min_turnover_invalid": Range(0.0, 1.0, hi_open=True),
    "min_recent_turnover": Range(0.0, 1.0, hi_open=True),
    "min_turnover_free": closed(0.0, 2.0),          # a book's daily turnover is at most 2
    "max_price_level_corr": closed(0.0, 1.0),       # a mean |correlation|; 1 turns the floor off
    "pbo_floor": _P,
    "neutrality_weight": _W, "neutrality_max_gap": _W,
    "turnover_cap": closed(0.0, 2.0),
    "turnover_penalty": _W,
    "ic_weight": _W, "ic_scale": closed(0.0, 1e6), "ic_cap_when_unprofitable": _W,
    "novelty_pnl_weight": _W,
    "duplicate_corr": above(0.0, 1.0),
    "duplicate_pnl_penalty": _P,
    "novelty_syntax_weight": _W,
    "syntax_duplicate_penalty": _P,
    "syntax_duplicates_counted": ints(1, 1_000),
    "motif_min_ic": closed(0.0, 1.0),               # an IC is a correlation
    "complexity_free_nodes": ints(0, 1_000_000),
    "complexity_per_node": _P,
    "format_bonus": _W,
    "archive_capacity": ints(1, 1_000_000),
    "archive_min_core": Range(),                    # any finite threshold (1e9: none enter)
    "archive_admit_corr": above(0.0, 1.0),
    "self_corr_gate": above(0.0, 1.0),              # a |correlation|; None (off) passes
    "self_corr_margin": closed(0.0, 1e3),           # a fraction of the entry's |CPCV|
    "stress_weight": _W,
}
