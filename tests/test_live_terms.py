"""R13 (the brief) and R9 (the duplicate form) count only live terms (`alpha_gym.scoring.live_terms`).

A term that cannot move the book (a constant branch of `?:`, a zero or negligible multiplier, a term added and
subtracted, a dominated min/max operand) is taken out before the brief's checks and the canonical form read the
formula: `1 ? H : T` and `H + 0 * T` meet the brief as H does and are duplicates of H. Each dead spelling has a
live twin (the same shape, the term made to count): T's checks still count there, and its form is not H's.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from alpha_gym.language import canonical, parse, to_text
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.live_terms import DEAD_DISTANCE, countable, drop_options, has_terms, live_tree, negligible
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.tasks.compliance import brief_compliance
from alpha_gym.tasks.sets import brief_by_id

#: The issue's brief: co-movement of returns and volume changes, ~63-day windows, nested time-series operators,
#: no comparison or ternary. H meets 2 of its 8 checks; each T meets all 8.
BRIEF = brief_by_id("g0-0044")
HS = ("rank(-ts_delta(close, 5))", "sign(ts_delta(close, 3))")  # the second has exact zeros: ties to break
TS = ("ts_mean(ts_corr(returns, ts_delta(volume, 1), 63), 5)", "rank(ts_cov(returns, ts_delta(volume, 1), 63))")

ALWAYS = ("1", "2.5", "-1", "close > 0", "volume >= 0", "high >= low", "low <= high", "close == close",
          "abs(returns) < 1000000000", "close > 0 && volume > 0", "close != -1", "vwap > 0 || {T} > 0")
NEVER = ("0", "0.0", "close < 0", "1 > 2", "volume < 0", "high < low", "close == -1")
VARYING = ("returns > 0", "close > delay(close, 1)", "volume > ts_mean(volume, 20)", "open > vwap")
ZEROS = ("0", "0.0", "1e-300", "(close - close)", "(volume - volume)", "(1 - 1)", "0 * close")
WEIGHTS = ("0.5", "2", "rank(volume)")
SHAPES = ("{H} + {z} * {T}", "{H} + {T} * {z}", "{z} * {T} + {H}", "{H} - {z} * {T}", "{H} * (1 + {z} * {T})",
          "{H} / (1 + {z} * {T})")
CANCELLED = ("{H} + {T} - {T}", "{H} - {T} + {T}", "{T} + {H} - {T}", "{H} + ({T} - {T})", "-{T} + {H} + {T}",
             "{H} * (2 + {T}) / (2 + {T})", "{H} + {T} / 1e300", "{H} + 1e-12 * {T}")
CANCELLED_TWINS = ("{H} + {T} - 0.5 * {T}", "{H} - {T} + 0.5 * {T}", "{H} * (2 + {T}) / (3 + {T})")
WRAPPERS = ("{}", "rank({})", "-({})", "ts_decay_linear({}, 5)")


def family() -> list[tuple[str, str]]:
    """(dead spelling, its live twin) templates over {H} and {T}: every dead spelling's live tree is {H}'s."""
    pairs = [(f"{c} ? {{H}} : {{T}}", f"{VARYING[i % len(VARYING)]} ? {{H}} : {{T}}") for i, c in enumerate(ALWAYS)]
    pairs += [(f"{c} ? {{T}} : {{H}}", f"{VARYING[i % len(VARYING)]} ? {{T}} : {{H}}") for i, c in enumerate(NEVER)]
    pairs += [(s.format(H="{H}", T="{T}", z=z), s.format(H="{H}", T="{T}", z=WEIGHTS[i % len(WEIGHTS)]))
              for s in SHAPES for i, z in enumerate(ZEROS)]
    pairs += list(zip(CANCELLED, CANCELLED_TWINS * 3))
    pairs += [("min({H}, abs({T}) + 1000000000000)", "min({H}, {T})"),
              ("max({H}, -abs({T}) - 1000000000000)", "max({H}, {T})"),
              ("{T} > 0.5 ? {H} : {H}", "{T} > 0.5 ? {H} : -{H}"),
              ("{H} + 0 * {T} + 1e-300 * {T}", "{H} + 0.5 * {T} + 0.25 * {T}")]
    return [(w.format(d), w.format(t)) for d, t in pairs for w in WRAPPERS[:1]] + \
        [(w.format(d), w.format(t)) for d, t in pairs[::5] for w in WRAPPERS[1:]]


def spell(template: str, h: str, t: str) -> str:
    return template.replace("{H}", f"({h})").replace("{T}", f"({t})")


def expected(template: str, h: str) -> str:
    """The dead spelling's live tree: {H} inside the same wrapper (WRAPPERS), as written."""
    for w in WRAPPERS[1:]:
        head, tail = w.split("{}")
        if template.startswith(head) and template.endswith(tail):
            return w.format(f"({h})")
    return h


def test_the_family_is_generated_and_every_dead_spelling_holds_a_term_that_meets_the_brief():
    pairs = family()
    assert len(pairs) >= 90 and len({d for d, _ in pairs}) == len(pairs)
    for d, t in pairs:
        for h in HS[:1]:
            structural = brief_compliance(BRIEF, spell(d, h, TS[0]), extended=True)["share"]
            assert structural > brief_compliance(BRIEF, h, extended=True)["share"], d  # gamed as written


# ------------------------------------------------------------------------------------ structure, no data
def options(formula: str) -> list[str]:
    return [to_text(o) for o in drop_options(parse(formula))]


def test_only_what_a_check_could_count_is_a_term():
    assert options("rank(close) - 0.5") == ["-0.5"]  # the 0.5 is never taken out; rank(close) may be
    assert options("ts_sum(close, 8) / 8") == [] and options("(1 - 0.5) * close") == ["1 - 0.5"]
    assert options("close + volume") == ["close", "volume"]
    assert options("close - volume") == ["close", "-volume"]
    assert options("close / volume") == ["close"]
    assert options("close + 0 * ts_max(1, 5)") == ["close", "0 * ts_max(1, 5)"]  # a window is countable
    assert options("1 ? close : -1") == ["close", "-1"]  # the ternary itself is what a check counts
    assert options("close > 0 && 1") == ["close > 0", "1"]
    assert options("close + volume - volume")[-1] == "close"  # the pair cancels
    assert options("close * volume / volume")[-1] == "close"
    assert options("-volume + close + volume")[-1] == "close"
    assert options("close - 1 + 1") == ["1"]  # numbers are no terms: they neither go nor cancel
    assert not has_terms(parse("rank(ts_sum(close, 8) / 8)")) and has_terms(parse("close + 0 * volume"))
    assert has_terms(parse("1 ? close : 0")) and countable(parse("adv20 * 0"))
    assert countable(parse("ts_mean(1, 63)")) and not countable(parse("(1 - 1) * 3"))


def test_negligible_reads_the_days_scale_and_the_missing_cells():
    h = np.array([[1.0, 2.0, 0.0], [3.0, 0.0, 1.0]])
    assert negligible(h + 1e-300, h) and negligible(h * (1 + 1e-12), h)
    assert not negligible(h + 1e-6, h)
    masked = h.copy()
    masked[1, 1] = np.nan
    assert not negligible(masked, h)  # a term that removes a stock from a day is a filter, not padding
    late = h.copy()
    late[0] = np.nan
    assert negligible(late, h)  # a term whose window starts later: compared from the day both have values
    assert negligible(np.full((2, 3), np.nan), np.full((2, 3), np.nan))


def test_a_difference_past_the_float_limit_is_not_negligible_and_warns_nothing():
    big = np.array([[1e308, -1e308, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # the 10,000-call runs printed an overflow RuntimeWarning here
        assert not negligible(big, -big)     # |a - b| overflows to inf: the term moves the values
        assert negligible(big, big.copy())


def test_a_formula_without_terms_is_its_own_live_tree(small_synthetic):
    for f in ("rank(-ts_delta(close, 5))", "ts_mean(ts_corr(returns, volume, 63), 5)", "rank(close) * 2 - 1"):
        node = parse(f)
        assert live_tree(node, small_synthetic, 5) is node


# ------------------------------------------------------------------------------------ the generated family
def _share(node) -> float:
    return brief_compliance(BRIEF, node, extended=True)["share"]


def _gamed(node, live, h_node) -> tuple[bool, bool]:
    """(R13 gamed: the brief share counts more than H's, R9 gamed: its form is not H's), as read on `live`."""
    return _share(live) > _share(h_node), canonical(live, True) != canonical(h_node, True)


def _run_family(panel, hs, ts, pairs):
    before = after = twins_cut = 0
    wrong = []
    for h in hs:
        for t in ts:
            for dead, twin in pairs:
                node, want = parse(spell(dead, h, t)), parse(expected(dead, h))
                live = live_tree(node, panel, 5)
                before += any(_gamed(node, node, want))
                after += any(_gamed(node, live, want))
                if live != want:
                    wrong.append((spell(dead, h, t), to_text(live)))
                twin_node = parse(spell(twin, h, t))
                twin_live = live_tree(twin_node, panel, 5)
                if _share(twin_live) != _share(twin_node) or not any(_gamed(twin_node, twin_live, want)):
                    twins_cut += 1  # the twin's term no longer counts, or it became a duplicate of H
                    wrong.append(("twin " + spell(twin, h, t), to_text(twin_live)))
    return before, after, twins_cut, wrong


def test_dead_spellings_lose_their_terms_and_live_twins_keep_them_on_a_small_market(small_synthetic):
    pairs = family()[::3]
    before, after, twins_cut, wrong = _run_family(small_synthetic, HS, TS[:1], pairs)
    assert before == len(pairs) * len(HS)  # every dead spelling raised the share or escaped the duplicate form
    assert (after, twins_cut) == (0, 0), wrong[:5]


@pytest.mark.real_data
def test_dead_spellings_lose_their_terms_and_live_twins_keep_them_on_us46(real_us46):
    pairs = family()
    first = _run_family(real_us46, HS, TS[:1], pairs)
    second = _run_family(real_us46, HS[:1], TS[1:], pairs[::4])
    before, after, twins_cut = (a + b for a, b in zip(first[:3], second[:3]))
    n = len(pairs) * len(HS) + len(pairs[::4])
    assert n >= 200 and before == n  # gamed as written: every one (the count before)
    assert (after, twins_cut) == (0, 0), (first[3] + second[3])[:5]  # the count after; no live twin loses a term


# ------------------------------------------------------------------------------------ through the verifier
@pytest.mark.real_data
def test_the_issue_example_pays_the_brief_as_h_and_is_a_duplicate_of_h(real_us46):
    """g0-0044: 0.375 -> 0.875 with a bit-identical book before; now every dead spelling pays H's share and its
    form is H's (R9's duplicate penalty), while each live twin keeps T's checks and a form of its own."""
    h, t = "rank(ts_std(returns, 20))", TS[0]  # the issue's H: 3 of 8 checks, and a CPCV that joins the archive
    verifier = Verifier(real_us46, VerifierConfig.recipe("brief", archive_seed=False))
    dead = [spell(d, h, t) for d in ("1 ? {H} : {T}", "close > 0 ? {H} : {T}", "{H} + 0 * {T}",
                                     "{H} + 1e-300 * {T}", "{H} + {T} - {T}")]
    twins = [spell(w, h, t) for w in ("returns > 0 ? {H} : {T}", "{H} + 0.5 * {T}", "{H} + {T} - 0.5 * {T}")]
    group = verifier.score_group([f"<alpha>{f}</alpha>" for f in [h] + dead + twins], brief=BRIEF)
    h_score, dead_scores, twin_scores = group.scores[0], group.scores[1:1 + len(dead)], group.scores[1 + len(dead):]
    for f, s in zip(dead, dead_scores):
        assert s.valid and s.channels["brief"] == h_score.channels["brief"] == 0.375, f
        assert brief_compliance(BRIEF, f, extended=True)["share"] > 0.8  # what R13 paid before
        assert s.diagnostics["live_formula"] == h and s.diagnostics["brief_compliance"]["share"] < 0.5
        assert s.diagnostics["form_duplicates"] >= 1 and s.channels["novelty_syntax"] < 0  # a duplicate of H
    for f, s in zip(twins, twin_scores):
        assert s.valid and s.channels["brief"] == brief_compliance(BRIEF, f, extended=True)["share"] > 0.8, f
        assert "live_formula" not in s.diagnostics and s.diagnostics["form_duplicates"] == 0
    # the archive remembers the live form: a dead spelling scored after H joined is its duplicate too
    verifier.update_archive(verifier.score_group([f"<alpha>{h}</alpha>"]))
    later = verifier.score(f"<alpha>{dead[2]}</alpha>", brief=BRIEF)
    assert later.diagnostics["form_duplicates"] >= 1 and later.channels["novelty_syntax"] < 0


def test_a_formula_without_dead_terms_scores_as_before(small_synthetic, monkeypatch):
    """The live tree of a formula without dead terms is the formula: every channel is what it was without the
    rule (the verifier with `live_tree` made the identity)."""
    import alpha_gym.scoring.verifier as verifier_module
    formulas = [spell(w, HS[0], TS[0]) for w in ("returns > 0 ? {H} : {T}", "{H} + 0.5 * {T}", "max({H}, {T})")] + \
        ["rank(ts_std(volume, 20) / ts_mean(volume, 20))", "rank(-ts_delta(close, 5)) - 0.5"]
    assert all(live_tree(parse(f), small_synthetic, 5) == parse(f) for f in formulas)
    answers = [f"<alpha>{f}</alpha>" for f in formulas]
    config = VerifierConfig.recipe("brief", archive_seed=False)
    now = Verifier(small_synthetic, config).score_group(answers, brief=BRIEF)
    monkeypatch.setattr(verifier_module, "live_tree", lambda node, *rest: node)
    before = Verifier(small_synthetic, config).score_group(answers, brief=BRIEF)
    assert [s.valid for s in now.scores] == [True] * len(answers)
    assert now.rewards.tolist() == before.rewards.tolist()
    assert [s.channels for s in now.scores] == [s.channels for s in before.scores]


def test_the_live_tree_is_deterministic_and_trades_the_original_book(small_synthetic):
    from alpha_gym.book.book import weights_from_signal
    from alpha_gym.language.evaluate import evaluate
    for dead, _ in family()[::7]:
        node = parse(spell(dead, HS[0], TS[0]))
        live = live_tree(node, small_synthetic, 5)
        assert live == live_tree(node, small_synthetic, 5)
        w = weights_from_signal(evaluate(node, small_synthetic), 5)[:-2]
        w_live = weights_from_signal(evaluate(live, small_synthetic), 5)[:-2]
        both = (np.abs(w).sum(axis=1) > 0) & (np.abs(w_live).sum(axis=1) > 0)
        assert np.abs(w - w_live)[both].sum(axis=1).mean() <= DEAD_DISTANCE, dead
