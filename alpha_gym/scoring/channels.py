"""The reward channels, one small pure function each, with its formula and the hack it closes.

Values are the RAW channel values (the reference's formulas include their own
scale, e.g. R7 = 0.2 * clip(20 * IC, -1, 1)); GDPO standardises each channel
within a group and multiplies it by its priority, and `Score.reward` is the
priority-weighted sum. Which function is which channel, with which inputs and
config fields, is the channel table's (`channel_table.CHANNEL_TABLE`);
`channel_values` runs it for the verifier.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from alpha_gym.language.nodes import Field, Node, Num, Op, walk
from alpha_gym.language.operators import OPERATORS
from alpha_gym.scoring.channel_table import CHANNEL_TABLE, Channel, GroupMeasures
from alpha_gym.scoring.config import VerifierConfig as _D  # every default below is a VerifierConfig field
from alpha_gym.scoring.config import weighted_sum
from alpha_gym.tasks.compliance import brief_compliance


def cpcv_channel(cpcv_score: float, clip: float | None = None) -> float:
    """R1 (priority 3.0): mean - 0.5 * std of the 15 CPCV slice Sharpes, clipped to [-clip, clip].

    The clip (5, as the holdout score) bounds a valid answer's reward from below, so the invalid
    penalties can sit beneath every valid answer. Closes: luck, fit to one period.
    """
    value = float(cpcv_score)
    return value if clip is None else float(np.clip(value, -clip, clip))


def _group_ranks(values: np.ndarray) -> np.ndarray:
    """Per column, the rank of each row as a fraction: 0 = best (highest), 1 = worst; ties averaged."""
    n = values.shape[0]
    if n < 2:
        return np.zeros_like(values)
    order = (-values).argsort(axis=0, kind="stable")
    ranks = np.empty_like(values)
    np.put_along_axis(ranks, order, np.arange(n, dtype=np.float64)[:, None].repeat(values.shape[1], 1), axis=0)
    # average ties so the result does not depend on the order of the rows
    for j in range(values.shape[1]):
        col = values[:, j]
        _, inverse, counts = np.unique(col, return_inverse=True, return_counts=True)
        if (counts > 1).any():
            sums = np.bincount(inverse, weights=ranks[:, j])
            ranks[:, j] = sums[inverse] / counts[inverse]
    return ranks / (n - 1)


def pbo_channel(in_sample: np.ndarray, out_of_sample: np.ndarray, ref_in: np.ndarray | None = None,
                ref_out: np.ndarray | None = None, floor: float = _D.pbo_floor) -> np.ndarray:
    """R2 (priority 1.0): penalise answers that rank far better in-sample than out of sample.

    For each CPCV slice s, answers (plus the reference rows, when given) are
    ranked by in-sample Sharpe (the slice's purged complement) and by
    out-of-sample Sharpe (its test blocks), as fractions 0 = best .. 1 = worst:

        drop_{i,s} = max(0, rank_oos_{i,s} - rank_is_{i,s})
        R2_i       = floor * mean_s(drop_{i,s})          (floor = -0.48)

    First in-sample and last out of sample on every slice pays the floor; first
    in-sample and tenth of twelve pays about -0.39. Closes: overfitting to a
    period (the probability of backtest overfitting of Bailey et al. 2016).
    `in_sample`, `out_of_sample`: (G, S). Fewer than two rows in all -> 0.
    """
    is_, oos = np.atleast_2d(in_sample), np.atleast_2d(out_of_sample)
    g = is_.shape[0]
    if ref_in is not None and len(ref_in):
        is_ = np.vstack([is_, ref_in])
        oos = np.vstack([oos, ref_out])
    if is_.shape[0] < 2:
        return np.zeros(g)
    drop = np.maximum(0.0, _group_ranks(oos) - _group_ranks(is_))[:g]
    return floor * drop.mean(axis=1)


def stress_channel(stress: float) -> float:
    """R3 (priority 0.4): -min(1, stress_weight x log(1 + mean scenario CPCV drop)) on world-model scenarios.

    `alpha_gym.stress` computes it (its provider reads `stress_checkpoint` and `stress_weight`); 0 when no
    world model is configured. Closes: books that only work in the regime they were fitted on.
    """
    return float(stress)


def factor_neutrality_channel(raw_sharpe: float, residual_sharpe: float, weight: float = _D.neutrality_weight,
                              max_gap: float = _D.neutrality_max_gap) -> float:
    """R4 (priority 0.4): -0.4 * clip(raw Sharpe - residual Sharpe, 0, 3) after the five known factors.

    A formula whose Sharpe falls from 1.5 to 0.3 pays -0.4 * 1.2 = -0.48.
    Closes: market beta and known factors in disguise.
    """
    return -weight * float(np.clip(raw_sharpe - residual_sharpe, 0.0, max_gap))


def turnover_channel(turnover: float, cap: float = _D.turnover_cap, penalty: float = _D.turnover_penalty) -> float:
    """R5 (priority 1.0): -2 * max(0, turnover - 0.5). Closes: books that pay their profit away in costs."""
    return -penalty * max(0.0, turnover - cap)


def min_turnover_channel(turnover: float, free_above: float = _D.min_turnover_free,
                         invalid_below: float = _D.min_turnover_invalid) -> float:
    """R6 (priority 0.5): 0 at or above 3% a day, falling linearly to -1 at the 2% validity floor.

        R6 = -clip((0.03 - turnover) / (0.03 - 0.02), 0, 1)

    The reference began with 6% and moved the band on Jul 26, when it charged the reference's own best
    formulas (2.3-3.1% a day) -0.36 to -0.46 after priority; `free_above=0.06` gives the old band.
    Below 2% the answer is invalid (handled by the verifier). Closes: static and empty books.
    """
    return -float(np.clip((free_above - turnover) / (free_above - invalid_below), 0.0, 1.0))


def ic_channel(ic: float, cpcv_score: float, cap_when_unprofitable: float = _D.ic_cap_when_unprofitable,
               weight: float = _D.ic_weight, scale: float = _D.ic_scale) -> float:
    """R7 (priority 0.2): 0.2 * clip(20 * IC, -1, 1), at most 0.05 while CPCV <= 0.

    An IC of 0.05 earns the full 0.2. Closes: profit without prediction.
    """
    value = weight * float(np.clip(scale * ic, -1.0, 1.0))
    return min(value, cap_when_unprofitable) if cpcv_score <= 0 else value


def novelty_pnl_channel(max_abs_corr: float, duplicate_corr: float = _D.duplicate_corr,
                        duplicate_penalty: float = _D.duplicate_pnl_penalty, weight: float = _D.novelty_pnl_weight
                        ) -> float:
    """R8 (priority 0.4): 0.4 * (1 - max |corr|) of the daily P&L against the archive and the group.

    A book that correlates >= 0.98 with one already there is a duplicate and
    pays -0.4. Closes: different code that trades an old book.
    """
    if max_abs_corr >= duplicate_corr:
        return duplicate_penalty
    return weight * (1.0 - max_abs_corr)


def gated_novelty_pnl_channel(max_abs_corr: float, gate: dict | None, duplicate_corr: float = _D.duplicate_corr,
                              duplicate_penalty: float = _D.duplicate_pnl_penalty,
                              weight: float = _D.novelty_pnl_weight) -> float:
    """R8 as the verifier scores it: a duplicate when the diversity gate refused the answer (`gate` is its
    verdict, None while the gate is off), else :func:`novelty_pnl_channel`."""
    if gate is not None and gate["refused"]:
        return duplicate_penalty
    return novelty_pnl_channel(max_abs_corr, duplicate_corr, duplicate_penalty, weight)


def diversity_gate(abs_corrs: np.ndarray, entry_cpcv, cpcv: float, gate: float | None = _D.self_corr_gate,
                   margin: float = _D.self_corr_margin) -> int | None:
    """The diversity gate (off by default): which archive entry refuses an answer as a duplicate, or None.

    An entry refuses the answer when their daily P&L correlate |corr| >= gate and the answer's CPCV does not
    beat the entry's by the margin:

        refused by entry j  <=>  |corr_j| >= gate  and  not  cpcv >= cpcv_j + margin * |cpcv_j|

    The most correlated refusing entry is returned (its index in `abs_corrs`). A refused answer scores as an
    R8 duplicate (`duplicate_pnl_penalty`) and does not join the archive. Source: WorldQuant BRAIN refuses a
    new alpha whose P&L correlates >= 0.7 with an existing one unless its Sharpe is at least 10% higher;
    AlphaForge admits a factor to its zoo only below 0.7. Closes: one idea resubmitted with small changes,
    which R8's bonus (at most +0.16 after priority) cannot outweigh against R1. gate None: off.
    """
    if gate is None:
        return None
    corrs = np.asarray(abs_corrs, dtype=np.float64)
    if not corrs.size:
        return None
    entry = np.asarray(entry_cpcv, dtype=np.float64)
    needed = entry + margin * np.abs(entry)
    refusing = (corrs >= gate) & ~(cpcv >= needed)   # written so that a NaN CPCV is refused
    if not refusing.any():
        return None
    return int(np.argmax(np.where(refusing, corrs, -np.inf)))


def novelty_syntax_channel(n_duplicates: int, max_abs_corr: float, per_duplicate: float = _D.syntax_duplicate_penalty,
                           max_counted: int = _D.syntax_duplicates_counted,
                           weight: float = _D.novelty_syntax_weight) -> float:
    """R9 (priority 0.2): a bonus for an unseen canonical form (windows bucketed to 5/21/63/126/252), the form of the
    formula without its dead terms (`alpha_gym.scoring.live_terms`: `H + 0 * T` is a duplicate of `H`).

        unseen:  0.2 * (1 - max |P&L corr|)
        seen:    -0.3 per duplicate (other group answers or archive entries with the same bucketed form),
                 counting at most 4

    `ts_mean(close, 20)` and `ts_mean(close, 21)` are the same idea. Closes: one template with jittered windows.
    """
    if n_duplicates <= 0:
        return weight * (1.0 - max_abs_corr)
    return per_duplicate * min(n_duplicates, max_counted)


# ------------------------------------------------------------------- R10 motif
#: Wrappers that do not change what a formula bets on.
_TRANSPARENT = {"rank", "scale", "neg", "sign", "abs"}
PRICE_FIELDS = {"open", "high", "low", "close", "vwap", "returns"}


def _strip(node: Node) -> Node:
    while isinstance(node, Op) and node.name in _TRANSPARENT:
        node = node.args[0]
    return node


def is_bare_motif(node: Node) -> bool:
    """A *motif* is one field seen through at most one time-series operator.

    A formula is a bare one-motif formula when, after removing wrappers that
    do not change the bet (rank, scale, unary minus, sign, abs) and constants
    it is multiplied, divided, added or subtracted by, what remains is:
      - a field (`close`), or
      - one time-series operator on one field (`ts_mean(close, 20)`), or
      - a field against its own lag (`close / delay(close, 5)`, `close - delay(close, 5)`).
    """
    core = _strip(node)
    while isinstance(core, Op) and core.name in ("add", "sub", "mul", "div") and \
            any(isinstance(a, Num) for a in core.args):
        core = _strip(next(a for a in core.args if not isinstance(a, Num)))
    if isinstance(core, Field):
        return True
    if isinstance(core, Op) and OPERATORS[core.name].kind == "ts" and len(core.args) == 1:
        return isinstance(_strip(core.args[0]), Field)
    if isinstance(core, Op) and core.name in ("sub", "div") and len(core.args) == 2:
        a, b = (_strip(x) for x in core.args)
        if isinstance(a, Field) and isinstance(b, Op) and b.name == "delay" and b.args == (a,):
            return True
    return False


def is_price_only(node: Node) -> bool:
    """Reads price fields only (open, high, low, close, vwap, returns): no volume, no adv."""
    fields = {n.name for n in walk(node) if isinstance(n, Field)}
    uses_adv = any(isinstance(n, Op) and n.name == "adv" for n in walk(node))
    return bool(fields) and fields <= PRICE_FIELDS and not uses_adv


def motif_guard_channel(node: Node, ic: float, min_ic: float = _D.motif_min_ic) -> float:
    """R10 (priority 0.3): -1 when a bare one-motif or price-only formula has IC < 0.005, else 0.

    When it fires the answer also loses its positive reward: see `motif_guard_value`.
    Closes: lazy single-motif formulas and slow tilts that ride a trend.
    """
    return -1.0 if (is_bare_motif(node) or is_price_only(node)) and ic < min_ic else 0.0


def motif_guard_value(fired: bool, rest: float, priority: float) -> float:
    """R10's value once the rest of the reward is known, so the guard's effect lives in the channel itself.

        not fired:  0
        fired:      min(-1, -rest / priority)    so that  rest + priority * R10 = min(rest - priority, 0)

    `rest` is the priority-weighted sum of the other channels. A guarded answer's scalar reward is
    therefore never positive, and any library that weights the 14 channels reproduces it. Priority 0
    switches the guard off (nothing could carry its effect).
    """
    if not fired:
        return 0.0
    if priority <= 0:
        return -1.0
    value = min(-1.0, -rest / priority)
    if not np.isfinite(value):  # a priority so small (1e-311) that cancelling `rest` overflows: it cannot act,
        return -1.0             # as with priority 0
    while rest + priority * value > 0:  # float rounding: step down until the sum is not positive
        value = float(np.nextafter(value, -np.inf))
    return value


def complexity_channel(n_nodes: int, free_nodes: int = _D.complexity_free_nodes,
                       per_node: float = _D.complexity_per_node) -> float:
    """R11 (priority 0.2): -0.02 per expression node beyond 24 (30 nodes cost -0.12). Closes: bloated formulas."""
    return per_node * max(0, n_nodes - free_nodes)


def format_channel(has_reasoning: bool, enabled: bool = True, bonus: float = _D.format_bonus) -> float:
    """R12 (priority 1.0): +0.05 for a non-empty <think>...</think> block before the answer (switchable)."""
    return bonus if (enabled and has_reasoning) else 0.0


def brief_channel(brief, node: Node, live: Node | None = None) -> float:
    """R13 (priority 0, off by default): the share of the brief's checkable constraints the answer meets.

        R13 = (constraints met) / (constraints checked)      in [0, 1]

    The checks are the brief's own constraints and the extended ones (`alpha_gym.tasks.compliance`,
    `brief_compliance(..., extended=True)`: the horizon band's top, what a mechanism or structure states beyond
    its own constraints). 0 with no brief, and 0 for a brief with nothing to check (the fixed briefs): nothing
    is paid for a check that was not made. Invalid answers get 0 (their penalty is in R1). Structural, read on
    `live` (the formula without the terms that cannot move its book, `alpha_gym.scoring.live_terms`; None: `node`
    as written), so deterministic and cheap. Closes: one formula shipped to every brief (issue 39: 0 of 50 probe
    answers met every constraint of its brief, the brief did not pay), and a brief met by dead terms
    (`1 ? H : T`, `H + 0 * T`: T meets the checks, H trades).
    """
    if brief is None:
        return 0.0
    got = brief_compliance(brief, node if live is None else live, extended=True)
    return float(got["share"]) if got["n"] else 0.0


def book_channel(book_gain: float, clip: float | None = None) -> float:
    """R14 (priority 0, off by default): what the answer adds to the run's correlation-capped book.

        R14 = clip(M(select(archive + [answer])) - M(select(archive)), -clip, clip)

    select: seed section 8's selector (by train CPCV; |P&L corr| < 0.5 with every member; turnover >= 2% a day),
    over the run's learned archive entries as they stand when the group is scored; M: the CPCV of the
    equal-weight book on the train window (`alpha_gym.scoring.book_gain`: the rule, its properties and sources).
    The verifier measures `book_gain` (`Verifier._book_gains`) only while R14's priority is not 0; at 0 it is 0.
    A copy of a member, or an answer the selector refuses, adds 0; an uncorrelated profitable answer adds what it
    diversifies; a better near-copy of a member adds the difference between the two books; an answer that enters
    and drags the book down is negative. Invalid answers get 0 (their penalty is in R1). Clipped to +-cpcv_clip,
    as R1 (CPCV units). Closes: one formula shipped to every brief, a book of one bet (issue 39).
    """
    return float(np.clip(book_gain, -clip, clip)) if clip is not None else float(book_gain)


def motif_guard_settle(raw: float, rest: float, priority: float) -> float:
    """R10's final value from its raw value (below 0: fired) and the rest of the reward (`motif_guard_value`)."""
    return motif_guard_value(raw < 0, rest, priority)


# ------------------------------------------------------------- the channel table
def _function(name: str | None) -> Callable | None:
    if name is None:
        return None
    fn = globals().get(name)
    if not callable(fn):
        raise ImportError(f"the channel table names {name!r}, which alpha_gym/scoring/channels.py does not define")
    return fn


#: Each channel's function and settle function, resolved once (a misspelt name fails at import).
_FUNCTIONS: dict[str, tuple[Callable, Callable | None]] = {
    c.name: (_function(c.function), _function(c.settle)) for c in CHANNEL_TABLE}


def _raw(channel: Channel, group: GroupMeasures, config) -> list[float]:
    """One channel's raw value for each answer of the group."""
    fn = _FUNCTIONS[channel.name][0]
    constants = [getattr(config, f) for f in channel.fields]
    if channel.per_group:
        return [float(v) for v in fn(*(getattr(group, i) for i in channel.inputs), *constants)]
    return [fn(*(getattr(m, i) for i in channel.inputs), *constants) for m in group.answers]


def channel_values(group: GroupMeasures, config) -> tuple[list[dict[str, float]], list[dict[str, str]]]:
    """The channels of each answer of a group, R1..R14, and the notes of the channels that fired.

    Each channel's function runs on the measures (`config`, the verifier's `VerifierConfig`, gives its
    fields); then the settling channels (R10) get their final value from the weighted rest of the reward,
    the other channels' priority-weighted sum (every settling channel counted as 0 in it).
    """
    raw = {c.name: _raw(c, group, config) for c in CHANNEL_TABLE}
    settling = [c for c in CHANNEL_TABLE if c.settle is not None]
    values, notes = [], []
    for k in range(len(group.answers)):
        ch = {c.name: 0.0 if c.settle is not None else raw[c.name][k] for c in CHANNEL_TABLE}
        rest = weighted_sum(ch, config.priorities)
        for c in settling:
            ch[c.name] = _FUNCTIONS[c.name][1](raw[c.name][k], rest, config.priorities[c.name])
        values.append(ch)
        notes.append({c.name: c.fired_note for c in CHANNEL_TABLE if c.fired_note is not None and raw[c.name][k] < 0})
    return values, notes
