"""A seeded generator of six-part design briefs, the family split, and JSONL storage.

A brief names six things, each drawn from a documented vocabulary below:

    mechanism   the PRIMARY idea                       MECHANISMS   (family = the template family)
    horizon     the target window length               HORIZONS
    input       a rule on fields or operators          INPUT_RULES
    structure   a hint on the formula's shape          STRUCTURES
    forbidden   a pattern the answer must not use      FORBIDDEN
    risk        a risk preference                      RISK_PREFERENCES

Every vocabulary entry has an id, a template family id, its text and the
machine-checkable constraints it implies (`alpha_gym.tasks.compliance`).
Entries carry tags and excluded tags so no brief asks for two things that
cannot both hold ("must use exactly one ts_corr" never meets "do NOT use
ts_corr"; "do NOT use windows longer than 63 sessions" never meets a 168-day
horizon). Risk preferences are mostly advice a formula's text cannot show;
only the ones that are structural carry a constraint.

Generation is deterministic for a seed (`random.Random(seed)`): mechanism
families are dealt in shuffled rounds so each family gets n / F briefs
(+-1), and the other five parts are drawn uniformly among the entries
compatible with what was drawn before. `split_briefs` holds out whole
mechanism families, so the probe briefs test skill on unseen ideas, not
memory of near-identical training prompts (split by template family, never
by shuffling rows).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field, fields as dc_fields
from pathlib import Path
from typing import Iterable, Sequence

from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from alpha_gym.language.parser import DEFAULT_LIMITS, Limits
from alpha_gym.tasks.briefs import Brief
from alpha_gym.tasks.compliance import (AVERAGING_OPS, COMPARISON_OPS, PRICE_FIELDS, TS_OPS, Constraint,
                                        DistinctFields, ForbidOpOnFields, MaxNodes, MaxWindow, OpCount, RootOp,
                                        UsesFields, WindowContrast, WindowInRange, Wraps)
from alpha_gym.tasks.task import render_prompt

MARKET_LINE = "Market: US-listed stocks trading on weekday sessions."
MAX_PROMPT_CHARS = 4096
PRINTABLE = frozenset(string.printable)
PART_NAMES = ("mechanism", "horizon", "input", "structure", "forbidden", "risk")


@dataclass(frozen=True)
class Entry:
    """One vocabulary entry: id, template family, text, implied constraints, tags and excluded tags."""

    id: str
    family: str
    text: str
    constraints: tuple[Constraint, ...] = ()
    tags: frozenset = field(default_factory=frozenset)
    excludes: frozenset = field(default_factory=frozenset)


def _e(id, family, text, *constraints, tags=(), excludes=()):
    return Entry(id, family, text, tuple(constraints), frozenset(tags), frozenset(excludes))


def _uses(*fields_, mode="all", desc=None):
    return UsesFields(description=desc or f"uses {' and '.join(fields_) if mode == 'all' else ' or '.join(fields_)}",
                      fields=tuple(fields_), mode=mode)


def _ops(ops, lo=1, hi=None, desc=None):
    ops = tuple(ops) if not isinstance(ops, str) else (ops,)
    return OpCount(description=desc or f"calls {' or '.join(ops)} at least {lo} time(s)", ops=ops, lo=lo, hi=hi)


# Tags: "volume" needs volume; "corr" uses ts_corr; "delta_close" naturally uses delay/ts_delta of close;
# "long" needs a window over 63 sessions.
MECHANISMS: tuple[Entry, ...] = (
    _e("m_reversal", "reversal", "price reversal (recent losers bounce back, recent winners give back)",
       _uses(*PRICE_FIELDS, mode="any", desc="uses a price field"), tags={"delta_close"}),
    _e("m_reversal_gap", "reversal", "mean reversion of the price toward its own recent average",
       _uses(*PRICE_FIELDS, mode="any", desc="uses a price field"), tags={"delta_close"}),
    _e("m_momentum", "momentum", "price momentum (trend continuation)",
       _uses(*PRICE_FIELDS, mode="any", desc="uses a price field"), tags={"delta_close"}),
    _e("m_rel_strength", "momentum", "relative strength: stocks that beat their peers keep beating them",
       _uses(*PRICE_FIELDS, mode="any", desc="uses a price field"), tags={"delta_close"}),
    _e("m_volume_surprise", "volume_surprise", "abnormal trading volume relative to its recent average",
       _uses("volume"), tags={"volume"}),
    _e("m_volume_drought", "volume_surprise", "a sudden surge or drought in trading volume",
       _uses("volume"), tags={"volume"}),
    _e("m_volume_var", "volume_variability", "the variability of trading volume relative to its level",
       _uses("volume"), _ops(("ts_std", "ts_max", "ts_min", "ts_kurt", "ts_skew"),
                             desc="measures dispersion (ts_std, ts_max, ts_min, ts_skew or ts_kurt)"),
       tags={"volume"}),
    _e("m_pv_corr", "price_volume_corr", "the rolling correlation between price and volume",
       _ops(("ts_corr", "ts_cov"), desc="calls ts_corr or ts_cov"), _uses("volume"), tags={"corr", "volume"}),
    _e("m_pv_comove", "price_volume_corr", "co-movement of returns and changes in volume",
       _ops(("ts_corr", "ts_cov"), desc="calls ts_corr or ts_cov"), _uses("volume"), tags={"corr", "volume"}),
    _e("m_extremes", "extremes", "mixed-signal extremes (rolling max or min of a price-volume composite)",
       _ops(("ts_max", "ts_min"), desc="calls ts_max or ts_min"), _uses("volume"), tags={"volume"}),
    _e("m_low_vol", "low_volatility", "low realised volatility (calm stocks beat jumpy ones)"),
    _e("m_vol_change", "volatility_change", "a change of volatility regime (short versus long realised volatility)",
       _ops("ts_std", desc="calls ts_std")),
    _e("m_close_in_range", "intraday_range", "where the close sits inside the day's high-low range",
       _uses("high", "low", "close")),
    _e("m_vwap_gap", "vwap_gap", "the gap between the close and the day's vwap", _uses("vwap")),
    _e("m_vwap_trend", "vwap_gap", "whether trading happened above or below the volume-weighted price (vwap)",
       _uses("vwap")),
    _e("m_overnight", "overnight_gap", "the overnight gap between yesterday's close and today's open",
       _uses("open", "close"), tags={"delta_close"}),
    _e("m_slope", "trend_shape", "the slope of a smoothed price path",
       _ops(("ts_slope", "ts_delta"), desc="calls ts_slope or ts_delta")),
    _e("m_skew", "return_shape", "the skewness or tail shape of recent returns",
       _ops(("ts_skew", "ts_kurt"), desc="calls ts_skew or ts_kurt")),
    _e("m_liquidity", "liquidity", "dollar volume and liquidity (price times volume)", _uses("volume"),
       tags={"volume"}),
    _e("m_range_vol", "range_volatility", "the day's high-low range as a volatility estimate", _uses("high", "low")),
    _e("m_extreme_timing", "extreme_timing", "how recently the price set its rolling high or low",
       _ops(("ts_argmax", "ts_argmin"), desc="calls ts_argmax or ts_argmin")),
    _e("m_ts_rank", "history_rank", "where today's value sits within its own history (time-series rank)",
       _ops("ts_rank", desc="calls ts_rank")),
    _e("m_pv_divergence", "pv_divergence", "divergence between price moves and volume moves",
       _uses("volume"), _uses(*PRICE_FIELDS, mode="any", desc="uses a price field"), tags={"volume"}),
    _e("m_decayed", "decayed_moves", "a linearly decayed average of daily moves",
       _ops(("ts_decay_linear", "ts_ema"), desc="calls ts_decay_linear or ts_ema")),
    _e("m_intraday", "intraday_move", "the intraday move from open to close", _uses("open", "close")),
)


def _roughly(n: int) -> Entry:
    lo, hi = max(1, round(n / 1.5)), min(252, round(n * 1.5))
    family = "short" if n <= 10 else "medium" if n <= 63 else "long"
    return _e(f"h_{n}d", family, f"roughly {n}-day windows",
              WindowInRange(description=f"has a window between {lo} and {hi} sessions", lo=lo, hi=hi),
              tags={"long"} if lo > 63 else ())


HORIZONS: tuple[Entry, ...] = (
    _e("h_1d", "short", "one day", MaxWindow(description="no window longer than 5 sessions", hi=5)),
    _e("h_few", "short", "a few days", WindowInRange(description="has a window between 2 and 7 sessions",
                                                     lo=2, hi=7)),
) + tuple(_roughly(n) for n in (5, 10, 21, 42, 63, 126, 168, 252))

INPUT_RULES: tuple[Entry, ...] = (
    _e("in_volume", "fields", "must use volume", _uses("volume"), tags={"volume"}),
    _e("in_corr1", "operators", "must use exactly one ts_corr",
       _ops("ts_corr", 1, 1, desc="calls ts_corr exactly once"), tags={"corr"}),
    _e("in_vwap", "fields", "must use vwap", _uses("vwap")),
    _e("in_high_low", "fields", "must use both high and low", _uses("high", "low")),
    _e("in_no_volume", "fields", "price fields only (open, high, low, close, vwap, returns): no volume",
       _uses("volume", mode="none", desc="does not use volume"), excludes={"volume"}),
    _e("in_returns", "fields", "must use returns", _uses("returns")),
    _e("in_two_fields", "fields", "must combine at least two different fields",
       DistinctFields(description="uses at least two different fields", min_fields=2)),
    _e("in_tsrank1", "operators", "must use exactly one ts_rank",
       _ops("ts_rank", 1, 1, desc="calls ts_rank exactly once")),
)

STRUCTURES: tuple[Entry, ...] = (
    _e("st_sign", "transform", "take the sign of a time-series relationship",
       Wraps(description="applies sign to a time-series expression", outer=("sign",), inner=TS_OPS)),
    _e("st_rank", "transform", "take the cross-sectional rank of the final signal",
       RootOp(description="the outermost operation is rank", ops=("rank",))),
    _e("st_ratio", "composition", "divide one rolling statistic by another",
       Wraps(description="divides two time-series expressions", outer=("div",), inner=TS_OPS, every_arg=True)),
    _e("st_smooth", "composition", "smooth the signal with ts_decay_linear or ts_ema",
       _ops(("ts_decay_linear", "ts_ema"), desc="calls ts_decay_linear or ts_ema")),
    _e("st_contrast", "composition", "compare a short window with a long window of the same statistic",
       WindowContrast(description="the same time-series operator at two windows at least 2x apart", factor=2.0)),
    _e("st_small", "size", "keep it to at most 12 nodes",
       MaxNodes(description="at most 12 nodes", max_nodes=12)),
    _e("st_nest", "composition", "nest one time-series operator inside another",
       Wraps(description="a time-series operator inside another", outer=TS_OPS, inner=TS_OPS)),
    _e("st_extreme", "composition", "use a rolling max or min",
       _ops(("ts_max", "ts_min"), desc="calls ts_max or ts_min")),
)

FORBIDDEN: tuple[Entry, ...] = (
    _e("fb_long_sums", "beta_proxy", "do NOT lean on long-horizon price sums - they proxy market beta",
       ForbidOpOnFields(description="no ts_sum/ts_mean/ts_decay_linear/ts_ema of price fields alone over "
                                    ">= 63 sessions", ops=AVERAGING_OPS, fields=PRICE_FIELDS, min_window=63)),
    _e("fb_no_corr", "operator_ban", "do NOT use ts_corr or ts_cov",
       _ops(("ts_corr", "ts_cov"), 0, 0, desc="no ts_corr or ts_cov"), excludes={"corr"}),
    _e("fb_no_close_delta", "beta_proxy", "do NOT use delay or ts_delta of close (no plain price momentum "
       "or reversal)", ForbidOpOnFields(description="no delay/ts_delta of close alone", ops=("delay", "ts_delta"),
                                        fields=("close",), min_window=1), excludes={"delta_close"}),
    _e("fb_max_63", "window_ban", "do NOT use windows longer than 63 sessions",
       MaxWindow(description="no window longer than 63 sessions", hi=63), excludes={"long"}),
    _e("fb_no_compare", "operator_ban", "do NOT use comparisons or the ternary operator",
       _ops(COMPARISON_OPS, 0, 0, desc="no comparison, logic or ternary operator")),
    _e("fb_no_power", "operator_ban", "do NOT use power or signed_power",
       _ops(("power", "signed_power"), 0, 0, desc="no power or signed_power")),
)

RISK_PREFERENCES: tuple[Entry, ...] = (
    _e("rk_regime", "robustness", "make it robust to a volatility-regime change"),
    _e("rk_turnover", "cost", "keep turnover moderate"),
    _e("rk_beta", "neutrality", "avoid signals that simply buy the high-beta names"),
    _e("rk_short", "simplicity", "keep the formula short and readable",
       MaxNodes(description="at most 16 nodes", max_nodes=16)),
    _e("rk_slow", "cost", "prefer a slow, smooth signal that trades a few percent of the book a day"),
    _e("rk_selloff", "robustness", "avoid losing heavily on days the market sells off"),
)

VOCABULARIES: dict[str, tuple[Entry, ...]] = {
    "mechanism": MECHANISMS, "horizon": HORIZONS, "input": INPUT_RULES, "structure": STRUCTURES,
    "forbidden": FORBIDDEN, "risk": RISK_PREFERENCES,
}


def mechanism_families() -> tuple[str, ...]:
    """The template families of the mechanisms, in vocabulary order."""
    return tuple(dict.fromkeys(e.family for e in MECHANISMS))


def _compatible(entry: Entry, chosen: Sequence[Entry]) -> bool:
    tags = set().union(*(c.tags for c in chosen)) if chosen else set()
    excl = set().union(*(c.excludes for c in chosen)) if chosen else set()
    return not (entry.excludes & tags) and not (entry.tags & excl)


def compose_request(parts: dict[str, Entry]) -> str:
    """The request text of a brief from its six drawn entries."""
    p = parts
    return (f"{MARKET_LINE} Design an alpha whose PRIMARY mechanism is: {p['mechanism'].text}. "
            f"Target horizon: {p['horizon'].text}. Inputs: {p['input'].text}. Structure: {p['structure'].text}. "
            f"Constraint: {p['forbidden'].text}. Risk preference: {p['risk'].text}.")


def brief_from_entries(brief_id: str, parts: dict[str, Entry]) -> Brief:
    """Assemble a Brief from one entry per part (the generator's last step; also handy for hand-made briefs)."""
    constraints = []
    for name in PART_NAMES:
        for c in parts[name].constraints:
            constraints.append(c if c.part else type(c)(**{**_fields(c), "part": name}))
    brief = Brief(id=brief_id, family=parts["mechanism"].family, request=compose_request(parts),
                  parts={name: {"id": parts[name].id, "family": parts[name].family, "text": parts[name].text}
                         for name in PART_NAMES},
                  constraints=tuple(constraints))
    check_prompt(brief)
    return brief


def _fields(c: Constraint) -> dict:
    return {f.name: getattr(c, f.name) for f in dc_fields(c)}


def check_prompt(brief: Brief, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise ValueError unless the brief's prompt under `limits` is printable ASCII of at most 4096 characters.

    The seeded sets are generated once, before any verifier exists, so `generate_briefs` checks them under the
    default limits; the env checks every prompt again under its verifier's limits, and every consumer renders
    under those (`alpha_gym.tasks.prompts`)."""
    text = render_prompt(brief, limits)
    bad = sorted(set(text) - PRINTABLE)
    if bad or len(text) > MAX_PROMPT_CHARS:
        raise ValueError(f"brief {brief.id}: prompt has {len(text)} characters (limit {MAX_PROMPT_CHARS}) "
                         f"and non-printable-ASCII characters {bad[:5]}")


def generate_briefs(n: int = 500, seed: int = 0) -> list[Brief]:
    """`n` six-part briefs, deterministic for `seed`, with ids `g{seed}-{i:04d}`.

    Mechanism families are dealt in rounds (each round a fresh shuffle of all
    families), so every family gets n // F or n // F + 1 briefs; the
    mechanism phrasing within a family and the other five parts are drawn
    uniformly among the entries compatible with the parts already drawn.
    Exact duplicate requests are redrawn (up to 100 tries).
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    rng = random.Random(seed)
    families = list(mechanism_families())
    deal: list[str] = []
    while len(deal) < n:
        round_ = families[:]
        rng.shuffle(round_)
        deal.extend(round_)
    out, seen = [], set()
    for i in range(n):
        fam = deal[i]
        for _ in range(100):
            chosen: dict[str, Entry] = {}
            chosen["mechanism"] = rng.choice([e for e in MECHANISMS if e.family == fam])
            for name in PART_NAMES[1:]:
                options = [e for e in VOCABULARIES[name] if _compatible(e, list(chosen.values()))]
                chosen[name] = rng.choice(options)
            request = compose_request(chosen)
            if request not in seen:
                break
        seen.add(request)
        out.append(brief_from_entries(f"g{seed}-{i:04d}", chosen))
    return out


@dataclass(frozen=True)
class BriefSplit:
    """Train and probe briefs with disjoint template families.

    probe_families: the held-out families; unused: briefs of those families beyond `n_probe`
    (in neither set, so no probe family ever reaches training).
    """

    train: tuple[Brief, ...]
    probe: tuple[Brief, ...]
    probe_families: tuple[str, ...]
    unused: tuple[Brief, ...] = ()

    def to_dict(self) -> dict:
        return {"n_train": len(self.train), "n_probe": len(self.probe), "n_unused": len(self.unused),
                "probe_families": list(self.probe_families),
                "train_families": sorted({b.family for b in self.train})}


def split_briefs(briefs: Sequence[Brief], n_probe: int = 50, seed: int = 0) -> BriefSplit:
    """Hold out whole template families (`Brief.family`) until they hold at least `n_probe` briefs.

    Families are visited in a seeded shuffle of their sorted names; the probe
    is the first `n_probe` briefs (input order) of the held-out families, the
    rest of those families is `unused`, and every other brief is train.
    Deterministic for (briefs, n_probe, seed). Raises ValueError when the
    held-out families would leave no training family.
    """
    briefs = list(briefs)
    if n_probe < 0:
        raise ValueError("n_probe must be >= 0")
    ids = [b.id for b in briefs]
    if len(set(ids)) != len(ids):
        raise ValueError("brief ids must be unique")
    families = sorted({b.family for b in briefs})
    random.Random(seed).shuffle(families)
    held: list[str] = []
    count = 0
    for fam in families:
        if count >= n_probe:
            break
        held.append(fam)
        count += sum(1 for b in briefs if b.family == fam)
    if count < n_probe or len(held) == len(families) and n_probe > 0:
        raise ValueError(f"cannot hold out {n_probe} briefs by family and keep a training family "
                         f"({len(briefs)} briefs in {len(families)} families)")
    held_set = set(held)
    in_held = [b for b in briefs if b.family in held_set]
    return BriefSplit(train=tuple(b for b in briefs if b.family not in held_set), probe=tuple(in_held[:n_probe]),
                      probe_families=tuple(sorted(held)), unused=tuple(in_held[n_probe:]))


def part_ids(brief: Brief) -> tuple[str, ...]:
    """The vocabulary ids of a generated brief's six parts, in `PART_NAMES` order (they decide its request)."""
    return tuple((brief.parts or {}).get(name, {}).get("id", "") for name in PART_NAMES)


def unseen_briefs_of_seen_families(train: Sequence[Brief], n: int = 50, seed: int = 1,
                                   pool: int | None = None) -> tuple[Brief, ...]:
    """`n` briefs of `train`'s families that are not in `train`: new combinations of the parts training shows.

    The held-out probe asks whether brief-following transfers to unseen mechanisms; these ask whether it holds on
    the mechanisms training shows, on briefs it never saw. They are `generate_briefs(pool, seed)` (ids
    `g{seed}-...`; `pool` defaults to 4n) in its order, keeping a brief when its family is a training family,
    each of its six parts is an entry some training brief shows and its parts are neither a training brief's nor
    an earlier kept brief's. Families are dealt in rounds there, so the kept briefs spread over the training
    families. Deterministic for (train, n, seed, pool); ValueError when the pool holds fewer than `n`."""
    if n < 0:
        raise ValueError("n must be >= 0")
    families = {b.family for b in train}
    shown = [{ids[k] for ids in map(part_ids, train)} for k in range(len(PART_NAMES))]
    taken = {part_ids(b) for b in train}
    kept: list[Brief] = []
    for brief in generate_briefs(4 * n if pool is None else pool, seed=seed):
        if len(kept) == n:
            break
        ids = part_ids(brief)
        if brief.family in families and ids not in taken and all(i in s for i, s in zip(ids, shown)):
            taken.add(ids)
            kept.append(brief)
    if len(kept) < n:
        raise ValueError(f"only {len(kept)} of {n} unseen briefs of the training families among "
                         f"{4 * n if pool is None else pool} drawn with seed {seed}: draw a larger pool")
    return tuple(kept)


# ------------------------------------------------------------------------------- JSONL
def save_briefs(briefs: Iterable[Brief], path) -> Path:
    """Write briefs as JSONL (one `Brief.to_dict()` per line, ASCII). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        for b in briefs:
            f.write(json_dumps(b.to_dict(), ensure_ascii=True) + "\n")
    tmp.replace(path)
    return path


def load_briefs(path) -> list[Brief]:
    """Read a briefs JSONL file written by `save_briefs` (blank lines are skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Brief.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError) as err:
                raise InputError(f"{path}:{k}: not a brief: {err}") from None
    return out
