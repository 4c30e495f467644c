"""The reward channels, declared once: name, priority, function, inputs, config fields, minimum.

The verifier measures each tradable answer once (`Measures`: its CPCV score, Sharpe, turnover,
IC, correlation with the archive, ...); a channel turns some of those measurements and some
`VerifierConfig` fields into one raw value. `CHANNEL_TABLE` is the one list of channels, in
order R1..R14: the config's default priorities (`DEFAULT_PRIORITIES`), the channel order of
every reward matrix (`CHANNELS`), the lowest valid value of each channel
(`VerifierConfig.channel_minima`) and the verifier's channel loop (`channels.channel_values`)
all read it. Adding a channel is one entry here, its function in `channels.py` and its tests.

Functions are named, not imported: `channels.py` takes its defaults from `VerifierConfig`,
which reads this table, so the table sits below both (`channels.py` checks every name at import).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np

from alpha_gym.language.nodes import Node


@dataclass(frozen=True, eq=False)
class Measures:
    """What the verifier measures of one tradable answer in its group: the inputs channels name."""

    node: Node                  # the parsed formula
    cpcv: float                 # mean - 0.5 std of the CPCV slice Sharpes (before any clip)
    sharpe: float               # Sharpe of the daily net P&L
    residual_sharpe: float      # ... after regressing out the five known factors
    turnover: float             # mean daily turnover, fraction of the book
    ic: float                   # mean daily rank IC
    max_corr: float             # largest |P&L correlation| with the archive and the rest of the group
    form_duplicates: int        # archive entries and other answers with the same bucketed form
    nodes: int                  # expression nodes
    has_reasoning: bool         # a non-empty <think> block came before the answer
    stress: float               # R3's value from the world model (0 when it is off)
    stress_state: str           # which world model, or why R3 is off
    gate: dict | None           # the diversity gate's verdict (`refused`, by which entry), None while it is off
    brief: Any = None           # the brief the answer was written for (None: not given); R13 reads it (priority 0)
    book_gain: float = 0.0      # R14: what the answer adds to the run's book (`Verifier._book_gains`; 0 while R14 is 0)
    live: Node | None = None    # the formula without its dead terms (`live_terms.live_tree`; None: `node`); R13 reads it


@dataclass(frozen=True, eq=False)
class GroupMeasures:
    """The measures of a group's tradable answers, and what channels that compare answers read."""

    answers: tuple[Measures, ...]
    train_sharpes: np.ndarray                       # (G, S) in-sample Sharpe per CPCV slice
    test_sharpes: np.ndarray                        # (G, S) out-of-sample Sharpe per slice
    reference_train_sharpes: np.ndarray | None      # archive rows R2 ranks a lone answer against (else None)
    reference_test_sharpes: np.ndarray | None


@dataclass(frozen=True)
class Channel:
    """One reward channel.

    name        its key in `Score.channels` and in `VerifierConfig.priorities`
    priority    its default GDPO priority (the reference's best run)
    function    its function in `alpha_gym/scoring/channels.py`, called as
                `function(*inputs, *(config.<field> for field in fields))`
    inputs      the `Measures` fields it takes (per answer), or, with `per_group`, `GroupMeasures` fields
                (then it returns one value per answer)
    fields      the `VerifierConfig` fields it takes after its inputs, in order
    minimum     its lowest value for a VALID answer, given the config (`VerifierConfig.channel_minima`)
    doc         one line: what it pays for and what it closes
    per_group   it compares the answers of a group (R2 ranks them against each other)
    also_reads  other `VerifierConfig` fields its value depends on (through a measurement or its minimum)
    settle      a function of (raw value, weighted rest of the reward, priority) giving its final value,
                applied after every other channel (R10: its clamp cancels a positive rest)
    fired_note  the `channel_state` text when its raw value is below 0
    """

    name: str
    priority: float
    function: str
    inputs: tuple[str, ...]
    fields: tuple[str, ...]
    minimum: Callable[[Any], float]
    doc: str
    per_group: bool = False
    also_reads: tuple[str, ...] = ()
    settle: str | None = None
    fired_note: str | None = None

    def __post_init__(self):
        known = {f.name for f in fields(GroupMeasures if self.per_group else Measures)}
        unknown = set(self.inputs) - known
        if unknown:
            raise ValueError(f"channel {self.name}: unknown inputs {sorted(unknown)}; measures are {sorted(known)}")

    @property
    def config_fields(self) -> tuple[str, ...]:
        """Every `VerifierConfig` field this channel reads."""
        return self.fields + self.also_reads


_INF = float("inf")

#: R1..R14, in the order of every reward matrix and of the weighted sum.
CHANNEL_TABLE: tuple[Channel, ...] = (
    Channel("cpcv", 3.0, "cpcv_channel", ("cpcv",), ("cpcv_clip",),
            lambda c: -c.cpcv_clip if c.cpcv_clip is not None else -_INF,
            "mean - 0.5 std of the 15 CPCV slice Sharpes, clipped: closes luck and fit to one period"),
    Channel("pbo", 1.0, "pbo_channel", ("train_sharpes", "test_sharpes", "reference_train_sharpes",
                                        "reference_test_sharpes"), ("pbo_floor",),
            lambda c: min(0.0, c.pbo_floor),
            "ranking far better in sample than out of sample: closes overfitting to a period", per_group=True),
    Channel("jepa_stress", 0.4, "stress_channel", ("stress",), (), lambda c: -1.0,
            "CPCV lost on world-model scenarios (0 when off): closes fragility to regime change",
            also_reads=("stress_checkpoint", "stress_weight")),
    Channel("factor_neutrality", 0.4, "factor_neutrality_channel", ("sharpe", "residual_sharpe"),
            ("neutrality_weight", "neutrality_max_gap"), lambda c: -c.neutrality_weight * c.neutrality_max_gap,
            "Sharpe lost to the five known factors: closes market beta and known factors in disguise"),
    Channel("turnover", 1.0, "turnover_channel", ("turnover",), ("turnover_cap", "turnover_penalty"),
            lambda c: -c.turnover_penalty * max(0.0, 2.0 - c.turnover_cap),  # turnover is at most 2 a day
            "daily turnover above the cap: closes books that pay their profit away in costs"),
    Channel("min_turnover", 0.5, "min_turnover_channel", ("turnover",), ("min_turnover_free", "min_turnover_invalid"),
            lambda c: -1.0, "daily turnover below the free band: closes static and empty books"),
    Channel("ic", 0.2, "ic_channel", ("ic", "cpcv"), ("ic_cap_when_unprofitable", "ic_weight", "ic_scale"),
            lambda c: -c.ic_weight, "the rank IC, capped while CPCV <= 0: closes profit without prediction"),
    Channel("novelty_pnl", 0.4, "gated_novelty_pnl_channel", ("max_corr", "gate"),
            ("duplicate_corr", "duplicate_pnl_penalty", "novelty_pnl_weight"),
            lambda c: min(0.0, c.duplicate_pnl_penalty),  # an unseen book earns >= 0
            "1 - max |P&L corr| with the archive and the group (a duplicate below the diversity gate, when on): "
            "closes different code trading an old book", also_reads=("self_corr_gate", "self_corr_margin")),
    Channel("novelty_syntax", 0.2, "novelty_syntax_channel", ("form_duplicates", "max_corr"),
            ("syntax_duplicate_penalty", "syntax_duplicates_counted", "novelty_syntax_weight"),
            lambda c: c.syntax_duplicate_penalty * c.syntax_duplicates_counted,
            "a bonus for an unseen bucketed form: closes one template with jittered windows",
            also_reads=("syntax_window_buckets",)),
    # -1 is its raw minimum: when it fires with a lower value the reward is min(rest - priority, 0), never
    # below the bound the other channels give
    Channel("motif_guard", 0.3, "motif_guard_channel", ("node", "ic"), ("motif_min_ic",), lambda c: -1.0,
            "-1 for a bare motif or price-only formula with a low IC: closes lazy one-motif formulas",
            settle="motif_guard_settle",
            fired_note="fired: bare motif or price-only formula with IC below the minimum"),
    Channel("complexity", 0.2, "complexity_channel", ("nodes",), ("complexity_free_nodes", "complexity_per_node"),
            lambda c: c.complexity_per_node * max(0, c.limits.max_tokens - c.complexity_free_nodes),
            "a cost per node beyond the free ones: closes bloated formulas", also_reads=("limits",)),
    Channel("format", 1.0, "format_channel", ("has_reasoning",), ("format_enabled", "format_bonus"),
            lambda c: 0.0, "a bonus for a reasoning block before the answer (off by default)"),
    # priority 0: the reference's reward stays the default; the `brief` reward recipe turns it on
    Channel("brief", 0.0, "brief_channel", ("brief", "node", "live"), (), lambda c: 0.0,
            "the share of the brief's checkable constraints met (0 without a brief): closes ignoring the brief"),
    # priority 0: the reference's reward stays the default, and the verifier computes nothing for it (0); the
    # `book` and `brief_book` reward recipes turn it on. Clipped like R1, so its minimum is -cpcv_clip when on.
    Channel("book", 0.0, "book_channel", ("book_gain",), ("cpcv_clip",),
            lambda c: (-c.cpcv_clip if c.cpcv_clip is not None else -_INF) if c.priorities["book"] else 0.0,
            "the change in the train CPCV of the run's correlation-capped book when it is offered the answer: "
            "closes one idea shipped again and again"),
)

#: Channel names R1..R14.
CHANNELS: tuple[str, ...] = tuple(c.name for c in CHANNEL_TABLE)
#: GDPO priorities of the reference's best run, in channel order R1..R14 (R13 brief, R14 book: 0, off).
DEFAULT_PRIORITIES: dict[str, float] = {c.name: c.priority for c in CHANNEL_TABLE}
