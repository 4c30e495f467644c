"""Formulas composed from the parts a brief asks for, kept when they meet every check the brief channel pays for.

A random formula pool rarely meets a generated brief (its six parts ask for a mechanism, a horizon band, an input
rule, a shape, a ban and a size), so a warm start paired from one shows answers that ignore their brief. Here each
brief gets its own search: a formula is composed slot by slot from the brief's parts,

    core       a small expression of the mechanism (`MECHANISM_CORES`), over a price field and a window of the band
    inner      what the structure asks inside the signal (a ratio, a short-versus-long contrast, a nesting, an extreme)
    input      a second term for the input rule (`INPUT_TERMS`), combined with the core, or none
    outer      what the structure asks outermost (sign, rank, a smoothing), or none
    sign       the composed formula as it is, or negated (`-(...)`) when the first has train CPCV <= 0 and its
               mirrored book (gross P&L negated, the same costs) earns a positive mean net P&L

drawn with a generator seeded by (seed, brief id), so briefs that share their parts get different formulas. A draw
is kept when, in this order, it meets every extended check of its brief on its parsed tree (free), the verifier
admits it (`valid_book`: every validity rule), it still meets every check on its live tree (what R13 reads: a term
that cannot move the book meets nothing) and its train CPCV is above `min_cpcv`. A formula answers at most
`max_briefs` briefs (briefs earlier in the list get it first), so no single formula stands for many briefs.

Bounded: at most `max_draws` draws and `max_verify` verifier calls per brief; formulas already traded are not
traded again (a cache by text). Deterministic for (briefs, verifier, seed, the bounds).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from alpha_gym.language import FormulaError, parse
from alpha_gym.tasks.compliance import (MaxWindow, WindowInRange, check_compliance, compliance_share,
                                        extended_constraints)

#: Mechanism id -> core expressions; {p}: a price level field, {d}: a window of the horizon band.
MECHANISM_CORES: dict[str, tuple[str, ...]] = {
    "m_reversal": ("ts_sum(returns, {d})", "ts_delta({p}, {d})", "{p} / delay({p}, {d})", "ts_mean(returns, {d})",
                   "ts_rank(returns, {d})"),
    "m_reversal_gap": ("{p} / ts_mean({p}, {d})", "{p} - ts_decay_linear({p}, {d})", "close / ts_ema(vwap, {d})",
                       "({p} - ts_mean({p}, {d})) / ts_std({p}, {d})", "ts_rank({p} / ts_mean({p}, {e}), {d})"),
    "m_momentum": ("ts_sum(returns, {d})", "ts_delta({p}, {d}) / {p}", "{p} / delay({p}, {d})",
                   "ts_mean(returns, {d}) / ts_std(returns, {d})"),
    "m_rel_strength": ("rank(ts_sum(returns, {d}))", "ts_sum(returns, {d}) - ts_std(returns, {d})",
                       "{p} / delay({p}, {d})", "ts_delta(log({p}), {d})"),
    "m_volume_surprise": ("volume / ts_mean(volume, {d})", "volume / adv{d}", "log(volume / ts_mean(volume, {d}))",
                          "returns * volume / ts_mean(volume, {d})"),
    "m_volume_drought": ("volume / ts_mean(volume, {d})", "ts_mean(volume, {d}) - volume", "volume / adv{d}",
                         "ts_sum(returns, {d}) * volume / ts_mean(volume, {d})"),
    "m_volume_var": ("ts_std(volume, {d}) / ts_mean(volume, {d})", "ts_std(volume, {d}) / adv{d}",
                     "ts_max(volume, {d}) / ts_mean(volume, {d})", "ts_min(volume, {d}) / volume"),
    "m_pv_corr": ("ts_corr({p}, volume, {d})", "ts_corr(rank({p}), rank(volume), {d})",
                  "ts_cov({p}, volume, {d}) / adv{d}", "ts_corr(vwap, volume, {d})"),
    "m_pv_comove": ("ts_corr(returns, volume, {d})", "ts_corr(returns, ts_delta(volume, 1), {d})",
                    "ts_corr(ts_delta({p}, 1), ts_delta(volume, 1), {d})", "ts_cov(returns, volume, {d}) / adv{d}"),
    "m_extremes": ("ts_max({p} * volume, {d}) / adv{d}", "ts_min(returns * volume, {d})",
                   "ts_max(rank(volume) * rank({p}), {d})", "ts_max(returns * volume, {d}) / ts_mean(volume, {d})"),
    "m_low_vol": ("ts_std(returns, {d})", "ts_std({p}, {d}) / {p}", "ts_std(returns, {d}) * sign(returns)"),
    "m_vol_change": ("ts_std(returns, {e}) / ts_std(returns, {d})", "ts_std(returns, {e}) - ts_std(returns, {d})",
                     "ts_std({p}, {e}) / ts_std({p}, {d})"),
    "m_close_in_range": ("ts_mean((close - low) / (high - low), {d})", "ts_rank((close - low) / (high - low), {d})",
                         "(close - low) / (high - low) - ts_mean(returns, {d})",
                         "ts_decay_linear((close - low) / (high - low), {d})"),
    "m_vwap_gap": ("ts_mean(close / vwap, {d})", "ts_sum(close - vwap, {d}) / close", "ts_rank(close / vwap, {d})",
                   "ts_decay_linear(close / vwap, {d})"),
    "m_vwap_trend": ("ts_mean(open / vwap, {d})", "ts_rank(close - vwap, {d})", "ts_sum(high - vwap, {d}) / close",
                     "ts_decay_linear(low / vwap, {d})"),
    "m_overnight": ("ts_mean(open / delay(close, 1), {d})", "ts_sum(open / delay(close, 1) - 1, {d})",
                    "ts_rank(open - delay(close, 1), {d})", "ts_decay_linear(open / delay(close, 1), {d})"),
    "m_slope": ("ts_slope({p}, {d}) / {p}", "ts_delta(ts_mean({p}, {e}), {d}) / {p}", "ts_slope(log({p}), {d})",
                "ts_delta(log({p}), {d})"),
    "m_skew": ("ts_skew(returns, {d})", "ts_kurt(returns, {d})", "ts_skew({p}, {d})", "ts_kurt({p}, {d})"),
    "m_liquidity": ("log(adv{d})", "ts_mean({p} * volume, {d})", "adv{d} / ts_std({p} * volume, {d})",
                    "log({p} * volume) - log(adv{d})"),
    "m_range_vol": ("ts_mean((high - low) / close, {d})", "ts_mean(high / low, {d})", "ts_rank(high / low, {d})",
                    "ts_std(high - low, {d}) / close"),
    "m_extreme_timing": ("ts_argmax({p}, {d})", "ts_argmin({p}, {d})", "ts_argmax({p}, {d}) - ts_argmin({p}, {d})",
                         "ts_argmax(returns, {d})"),
    "m_ts_rank": ("ts_rank({p}, {d})", "ts_rank(returns, {d})", "ts_rank(volume, {d})", "ts_rank(close / vwap, {d})"),
    "m_pv_divergence": ("rank(ts_delta({p}, {d})) - rank(ts_delta(volume, {d}))",
                        "ts_corr(returns, volume, {d})", "rank(returns) - rank(volume / ts_mean(volume, {d}))",
                        "ts_sum(returns, {d}) / (volume / adv{d})"),
    "m_decayed": ("ts_decay_linear(returns, {d})", "ts_ema(returns, {d})", "ts_decay_linear(ts_delta({p}, 1), {d})",
                  "ts_ema(ts_delta({p}, 1), {d}) / {p}", "ts_rank(ts_decay_linear(returns, {e}), {d})"),
    "m_intraday": ("ts_mean(close / open, {d})", "ts_sum(close - open, {d}) / close",
                   "ts_decay_linear(close / open - 1, {d})", "ts_rank(close / open, {d})"),
}
#: Input rule id -> second terms combined with the core ({p}, {d}, {e} as in the cores).
INPUT_TERMS: dict[str, tuple[str, ...]] = {
    "in_volume": ("volume / ts_mean(volume, {d})", "adv{d}", "ts_std(volume, {d}) / adv{d}"),
    "in_corr1": ("ts_corr({p}, volume, {d})", "ts_corr(returns, volume, {d})", "ts_corr(close, open, {d})"),
    "in_vwap": ("close / vwap", "ts_mean(close / vwap, {e})"),
    "in_high_low": ("(high - low) / close", "ts_mean(high / low, {e})"),
    "in_returns": ("ts_std(returns, {d})", "ts_sum(returns, {e})"),
    "in_two_fields": ("volume / ts_mean(volume, {d})", "(high - low) / close", "ts_std(returns, {d})"),
    "in_tsrank1": ("ts_rank({p}, {d})", "ts_rank(volume, {d})"),
}
#: How a second term joins the core ({X}: the core, {A}: the term).
COMBINE = ("{X} * rank({A})", "rank({X}) + rank({A})", "rank({X}) - rank({A})")
#: Structure id -> inner shapes ({X}: the signal so far; {X@e}: the core at the short window).
INNER: dict[str, tuple[str, ...]] = {
    "st_ratio": ("{X} / ts_std(returns, {d})", "{X} / ts_mean(abs(returns), {d})", "{X} / adv{d}"),
    "st_contrast": ("{X@e} - {X}", "{X@e} / {X}"),
    "st_nest": ("{X}", "ts_mean({X}, {e})", "ts_rank({X}, {e})", "ts_max({X}, {e})", "ts_rank({X}, {d})"),
    "st_extreme": ("ts_max({X}, {e})", "ts_min({X}, {e})", "{X} - ts_min({X}, {e})", "ts_max({X}, {d})"),
}
#: Structure id -> outer shapes; other structures draw from `OUTER_ANY`.
OUTER: dict[str, tuple[str, ...]] = {
    "st_sign": ("sign({X})", "sign(ts_decay_linear({X}, {e}))"),
    "st_rank": ("rank({X})", "rank(ts_decay_linear({X}, {e}))"),
    "st_smooth": ("ts_decay_linear({X}, {e})", "ts_ema({X}, {e})", "ts_decay_linear({X}, {d})"),
}
#: A smoothing twice as often as not: the train CPCV is net of costs, and a fast signal rarely pays them.
OUTER_ANY = ("{X}", "ts_decay_linear({X}, {e})", "rank({X})", "ts_decay_linear({X}, {d})")
PRICE_LEVELS = ("close", "vwap", "open")


@dataclass
class SearchBounds:
    """The search's bounds and the shared-answer cap (module docstring)."""

    per_brief: int = 3           # distinct formulas kept per brief
    max_briefs: int = 3          # briefs one formula may answer
    max_draws: int = 400         # compositions drawn per brief
    max_verify: int = 40         # verifier calls per brief (a negation retry counts)
    min_cpcv: float = 0.0        # train CPCV must be above this


#: Why a brief was left with fewer formulas than `per_brief`: how far its best draw got; past the CPCV floor, the
#: cap refused one of them, or the draws or verifier calls ran out first.
REASONS = ("no composition meets every check", "no composition the verifier admits",
           "no admitted composition keeps every check live", "no admitted composition with train CPCV above the floor",
           "every compliant formula already answers the most briefs allowed", "the search's budget ran out")
CAPPED, BUDGET = REASONS[4], REASONS[5]
NOTHING_TO_CHECK = "the brief has nothing to check (the brief channel pays nothing for it)"
NO_TEMPLATE = "no template for the brief's mechanism"


@dataclass
class BriefResult:
    brief_id: str
    found: list[dict] = field(default_factory=list)
    reason: str | None = None     # set when fewer than per_brief were found
    draws: int = 0
    verified: int = 0


def window_band(brief) -> tuple[int, int]:
    """(lo, hi): some window must lie in [lo, hi] and none above hi, from the brief's horizon and window bans."""
    lo, hi = 2, 252
    for c in extended_constraints(brief):
        if isinstance(c, WindowInRange):
            lo, hi = max(lo, c.lo), min(hi, c.hi)
        elif isinstance(c, MaxWindow):
            hi = min(hi, c.hi)
    return min(lo, hi), hi


def _windows(lo: int, hi: int) -> list[tuple[int, int]]:
    """(d, e) pairs: d in the band, e a short window at most half of d where the band allows (else d // 2), and
    for long bands also a window of 10 (a smoothing or extreme over a long statistic stays under the lookback)."""
    mids = sorted({lo, round((lo * hi) ** 0.5), hi})
    pairs = [(d, max(2, min(lo, d // 2) if d >= 2 * lo else d // 2)) for d in mids if d >= 3]
    return pairs + [(d, 10) for d, e in pairs if e > 20] or [(2, 2)]


def _part(brief, name: str) -> str:
    return ((getattr(brief, "parts", None) or {}).get(name) or {}).get("id", "")


def draw_composition(brief, rng: random.Random, band: tuple[int, int]) -> str | None:
    """One composed formula text for `brief`, or None when its mechanism has no cores."""
    cores = MECHANISM_CORES.get(_part(brief, "mechanism"))
    if not cores:
        return None
    d, e = rng.choice(_windows(*band))
    p = rng.choice(PRICE_LEVELS)
    fill = {"p": p, "d": d, "e": e}
    core = rng.choice(cores)
    text = core.format(**fill)
    inner = rng.choice(INNER.get(_part(brief, "structure"), ("{X}",)))
    text = inner.replace("{X@e}", f"({core.format(**{**fill, 'd': e})})").replace("{X}", f"({text})").format(**fill)
    terms = INPUT_TERMS.get(_part(brief, "input"), ())
    if terms and rng.random() < 0.75:
        text = rng.choice(COMBINE).replace("{X}", f"({text})").replace("{A}", rng.choice(terms).format(**fill))
    outer = rng.choice(OUTER.get(_part(brief, "structure"), OUTER_ANY))
    return outer.replace("{X}", f"({text})").format(**fill)


def _meets_all(brief, node) -> bool:
    checks = check_compliance(brief, node, extended=True)
    return bool(checks) and all(checks.values())


def _mirror_may_pay(book) -> bool:
    """Whether the negated formula's book (the same positions mirrored: gross P&L negated, the same costs) earns
    a positive mean net P&L; when it does not, its CPCV is not worth a verifier call (a cheap screen only: what
    is kept is always traded and checked)."""
    mirrored = -np.asarray(book.gross) - np.asarray(book.cost)
    return bool(np.isfinite(mirrored).any() and np.nanmean(mirrored) > 0)


def _trade(verifier, text: str, cache: dict):
    if text not in cache:
        cache[text] = verifier.valid_book(text)
    return cache[text]


def search_brief(verifier, brief, bounds: SearchBounds, uses: Counter, seed: int = 0, cache: dict | None = None,
                 pool: Sequence[dict] = ()) -> BriefResult:
    """Up to `bounds.per_brief` distinct formulas for `brief` that meet every extended check on their live tree, are
    valid and have train CPCV above the floor; `uses` (formula -> briefs answered) is read and updated for the cap.

    `pool`: formulas already traded (`alpha_gym.tasks.sft_data.formula_pool` items with "live") tried first."""
    cache = {} if cache is None else cache
    out = BriefResult(brief.id)
    if not extended_constraints(brief):
        out.reason = NOTHING_TO_CHECK
        return out
    stage = 0  # the furthest a draw got: 1 structural checks, 2 admitted, 3 live checks, 4 CPCV
    capped = False
    taken: set[str] = set()

    def consider(text: str, cpcv: float, turnover: float, live) -> bool:
        nonlocal stage, capped
        checks = check_compliance(brief, live, extended=True)  # what R13 reads: the live tree, extended checks
        if not (checks and all(checks.values())):
            return False
        stage = max(stage, 3)
        if not cpcv > bounds.min_cpcv:
            return False
        stage = max(stage, 4)
        if text in taken:  # another spelling of a formula already kept for this brief
            return False
        if uses[text] >= bounds.max_briefs:
            capped = True
            return False
        taken.add(text)
        uses[text] += 1
        out.found.append({"formula": text, "cpcv": float(cpcv), "turnover": float(turnover),
                          "compliance": compliance_share(checks), "checks": len(checks)})
        return True

    for item in pool:
        if len(out.found) >= bounds.per_brief:
            break
        if _meets_all(brief, item["node"]):
            stage = max(stage, 2)
            consider(item["formula"], item["cpcv"], item["turnover"], item["live"])
    rng = random.Random(f"{seed}:{brief.id}")
    band = window_band(brief)
    seen: set[str] = set()
    while len(out.found) < bounds.per_brief and out.draws < bounds.max_draws and out.verified < bounds.max_verify:
        out.draws += 1
        text = draw_composition(brief, rng, band)
        if text is None:
            out.reason = NO_TEMPLATE
            return out
        if text in seen:
            continue
        seen.add(text)
        try:
            node = parse(text)
        except FormulaError:
            continue
        if not _meets_all(brief, node):
            continue
        stage = max(stage, 1)
        for signed in (text, f"-({text})"):
            if out.verified >= bounds.max_verify:
                break
            out.verified += signed not in cache
            ev = _trade(verifier, signed, cache)
            if ev is None:
                break  # the negation trades the same book mirrored: the same validity rules refuse it
            stage = max(stage, 2)
            if consider(ev.text, ev.cpcv, ev.turnover, ev.live) or ev.cpcv > bounds.min_cpcv \
                    or not _mirror_may_pay(ev.book):
                break  # kept; or the sign is right and the rest failed; or the mirrored book cannot pay its costs
    if len(out.found) < bounds.per_brief:
        out.reason = CAPPED if capped else BUDGET if stage >= 4 else REASONS[stage]
    return out


def search_briefs(verifier, briefs: Iterable, bounds: SearchBounds | None = None, seed: int = 0,
                  pool: Sequence[dict] = (), progress: Callable[[str], None] | None = None,
                  every: int = 25) -> tuple[list[BriefResult], Counter]:
    """`search_brief` over `briefs` in order with one cache and one cap; (results, formula -> briefs answered).
    `progress(line)` is called every `every` briefs and at the end."""
    bounds = bounds or SearchBounds()
    briefs = list(briefs)
    uses: Counter = Counter()
    cache: dict = {}
    results = []
    for k, brief in enumerate(briefs, 1):
        results.append(search_brief(verifier, brief, bounds, uses, seed, cache, pool))
        if progress is not None and (k % every == 0 or k == len(briefs)):
            covered = sum(bool(r.found) for r in results)
            progress(f"template search: {k}/{len(briefs)} briefs, {covered} covered, {len(cache)} formulas traded")
    return results, uses
