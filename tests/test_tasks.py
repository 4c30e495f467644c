"""Design briefs: the seeded generator, the family split, JSONL storage and brief compliance."""

from __future__ import annotations

import string
from collections import Counter

import pytest

from alpha_gym.language import parse
from alpha_gym.tasks import ANSWER_CONTRACT, DSL_REFERENCE, FIXED_BRIEFS, Brief
from alpha_gym.tasks.compliance import (AVERAGING_OPS, PRICE_FIELDS, TS_OPS, ForbidOpOnFields, MaxNodes, MaxWindow,
                                        OpCount, RootOp, UsesFields, WindowContrast, WindowInRange, Wraps,
                                        brief_compliance, check_compliance, compliance_share, constraint_from_dict)
from alpha_gym.tasks.generator import (FORBIDDEN, HORIZONS, INPUT_RULES, MECHANISMS, PART_NAMES, RISK_PREFERENCES,
                                       STRUCTURES, VOCABULARIES, brief_from_entries, generate_briefs, load_briefs,
                                       mechanism_families, save_briefs, split_briefs)


@pytest.fixture(scope="module")
def briefs500():
    return generate_briefs(500, seed=0)


def _entry(vocab, id_):
    return next(e for e in vocab if e.id == id_)


def reference_brief() -> Brief:
    """The reference's real brief, assembled from the vocabularies."""
    return brief_from_entries("ref", {
        "mechanism": _entry(MECHANISMS, "m_extremes"), "horizon": _entry(HORIZONS, "h_168d"),
        "input": _entry(INPUT_RULES, "in_corr1"), "structure": _entry(STRUCTURES, "st_sign"),
        "forbidden": _entry(FORBIDDEN, "fb_long_sums"), "risk": _entry(RISK_PREFERENCES, "rk_regime")})


# ------------------------------------------------------------------------------ generator
def test_vocabularies_have_unique_ids_and_families():
    ids = [e.id for v in VOCABULARIES.values() for e in v]
    assert len(ids) == len(set(ids))
    for name, vocab in VOCABULARIES.items():
        assert name in PART_NAMES and vocab
        assert all(e.family and e.text and set(e.text) <= set(string.printable) for e in vocab)
    assert len(mechanism_families()) >= 10


def test_briefs_are_deterministic_for_a_seed():
    a, b = generate_briefs(80, seed=7), generate_briefs(80, seed=7)
    assert [x.to_dict() for x in a] == [x.to_dict() for x in b]
    assert a == b
    c = generate_briefs(80, seed=8)
    assert [x.request for x in a] != [x.request for x in c]


def test_briefs_have_six_parts_balanced_families_and_no_duplicates(briefs500):
    assert len(briefs500) == 500
    assert len({b.id for b in briefs500}) == 500
    assert len({b.request for b in briefs500}) == 500
    counts = Counter(b.family for b in briefs500)
    assert set(counts) == set(mechanism_families())
    assert max(counts.values()) - min(counts.values()) <= 1
    for b in briefs500:
        assert tuple(b.parts) == PART_NAMES
        assert b.parts["mechanism"]["family"] == b.family
        for name in PART_NAMES:
            assert b.parts[name]["text"] in b.request
        assert b.request.startswith("Market: US-listed stocks")
        assert b.constraints and all(c.part in PART_NAMES for c in b.constraints)


def test_no_brief_combines_contradictory_parts(briefs500):
    by_id = {e.id: e for v in VOCABULARIES.values() for e in v}
    for b in briefs500:
        entries = [by_id[p["id"]] for p in b.parts.values()]
        tags = set().union(*(e.tags for e in entries))
        excl = set().union(*(e.excludes for e in entries))
        assert not tags & excl, b.request
    pairs = {(b.parts["input"]["id"], b.parts["forbidden"]["id"]) for b in briefs500}
    assert ("in_corr1", "fb_no_corr") not in pairs
    assert not any(b.parts["forbidden"]["id"] == "fb_max_63" and b.parts["horizon"]["id"] in
                   ("h_126d", "h_168d", "h_252d") for b in briefs500)


def test_every_prompt_is_printable_ascii_within_4096(briefs500):
    allowed = set(string.printable)
    for b in list(briefs500) + list(FIXED_BRIEFS):
        p = b.prompt()
        assert set(p) <= allowed, b.id
        assert len(p) <= 4096
        assert ANSWER_CONTRACT in p and DSL_REFERENCE in p


def test_generated_briefs_plug_into_the_environment(small_synthetic, briefs500):
    from alpha_gym.env import AlphaFormulaEnv
    env = AlphaFormulaEnv(panel=small_synthetic, briefs=briefs500[:50])
    prompt, info = env.reset(seed=0)
    assert env.observation_space.contains(prompt)
    assert info["family"] in mechanism_families()


def test_split_holds_out_whole_families(briefs500):
    split = split_briefs(briefs500, n_probe=50)
    assert len(split.probe) == 50
    train_fams = {b.family for b in split.train}
    probe_fams = {b.family for b in split.probe}
    assert not train_fams & probe_fams
    assert probe_fams == set(split.probe_families)
    assert len(split.train) + len(split.probe) + len(split.unused) == 500
    assert not {b.family for b in split.unused} - probe_fams
    again = split_briefs(briefs500, n_probe=50)
    assert [b.id for b in again.probe] == [b.id for b in split.probe]
    assert [b.id for b in again.train] == [b.id for b in split.train]


def test_split_with_uneven_families_never_leaks_a_probe_family():
    briefs = generate_briefs(130, seed=2)   # 6 or 7 briefs per family
    split = split_briefs(briefs, n_probe=20, seed=5)
    assert len(split.probe) == 20
    assert not {b.family for b in split.train} & {b.family for b in split.probe + split.unused}
    assert len(split.train) + len(split.probe) + len(split.unused) == 130
    with pytest.raises(ValueError):
        split_briefs(briefs, n_probe=200)


def test_jsonl_round_trip(tmp_path, briefs500):
    path = save_briefs(briefs500[:40], tmp_path / "b.jsonl")
    assert path.read_text().isascii()
    back = load_briefs(path)
    assert back == briefs500[:40]
    f = parse("rank(ts_std(volume, 20) / ts_mean(volume, 20))")
    assert [check_compliance(b, f) for b in back] == [check_compliance(b, f) for b in briefs500[:40]]
    assert load_briefs(save_briefs(FIXED_BRIEFS, tmp_path / "fixed.jsonl")) == list(FIXED_BRIEFS)


# ------------------------------------------------------------------------------ compliance
@pytest.mark.parametrize("formula, ok", [
    ("rank(ts_corr(close, volume, 10))", True),
    ("rank(ts_corr(close, volume, 10) + ts_corr(open, volume, 5))", False),
    ("rank(ts_cov(close, volume, 10))", False),
])
def test_exactly_one_ts_corr(formula, ok):
    c = OpCount(description="exactly one ts_corr", ops=("ts_corr",), lo=1, hi=1)
    assert c.check(parse(formula)) is ok


def test_field_rules():
    vol = UsesFields(description="uses volume", fields=("volume",))
    novol = UsesFields(description="no volume", fields=("volume",), mode="none")
    hl = UsesFields(description="high and low", fields=("high", "low"))
    assert vol.check(parse("rank(volume / adv20)")) and vol.check(parse("adv20"))
    assert not vol.check(parse("rank(close)"))
    assert novol.check(parse("rank(close / open)")) and not novol.check(parse("volume"))
    assert hl.check(parse("(close - low) / (high - low)")) and not hl.check(parse("high - close"))


@pytest.mark.parametrize("formula, ok", [
    ("rank(ts_mean(close, 126))", False),
    ("rank(ts_sum(returns, 63))", False),
    ("rank(-ts_decay_linear(log(close), 100))", False),
    ("rank(ts_mean(close, 21))", True),
    ("rank(ts_sum(returns, 62))", True),
    ("rank(ts_mean(volume / close, 126))", True),
    ("rank(ts_std(close, 200))", True),
])
def test_no_long_horizon_price_sums(formula, ok):
    c = ForbidOpOnFields(description="no long price sums", ops=AVERAGING_OPS, fields=PRICE_FIELDS, min_window=63)
    assert c.check(parse(formula)) is ok


def test_window_rules():
    roughly168 = WindowInRange(description="roughly 168", lo=112, hi=252)
    assert roughly168.check(parse("rank(ts_max(volume / vwap, 168))"))
    assert not roughly168.check(parse("rank(ts_max(volume / vwap, 21))"))
    assert not roughly168.check(parse("rank(close)"))
    short = MaxWindow(description="<= 5", hi=5)
    assert short.check(parse("(close - open) / (high - low)")) and short.check(parse("ts_delta(close, 5)"))
    assert not short.check(parse("ts_delta(ts_mean(close, 3), 6)"))
    contrast = WindowContrast(description="short vs long", factor=2.0)
    assert contrast.check(parse("ts_mean(close, 5) / ts_mean(close, 21)"))
    assert not contrast.check(parse("ts_mean(close, 5) / ts_std(close, 21)"))
    assert not contrast.check(parse("ts_mean(close, 15) / ts_mean(close, 21)"))


def test_structure_rules():
    sign = Wraps(description="sign of a ts relationship", outer=("sign",), inner=TS_OPS)
    assert sign.check(parse("sign(ts_corr(close, volume, 20))"))
    assert sign.check(parse("rank(sign(close - ts_mean(close, 5)))"))
    assert not sign.check(parse("sign(close - open)"))
    ratio = Wraps(description="ratio", outer=("div",), inner=TS_OPS, every_arg=True)
    assert ratio.check(parse("rank(ts_std(volume, 20) / ts_mean(volume, 20))"))
    assert not ratio.check(parse("volume / ts_mean(volume, 20)"))
    nest = Wraps(description="nest", outer=TS_OPS, inner=TS_OPS)
    assert nest.check(parse("ts_rank(ts_std(returns, 5), 21)")) and not nest.check(parse("ts_rank(returns, 21)"))
    root = RootOp(description="rank last", ops=("rank",))
    assert root.check(parse("rank(close)")) and root.check(parse("-rank(close)"))
    assert root.check(parse("-1 * rank(open)"))
    assert not root.check(parse("rank(close) + 1")) and not root.check(parse("close"))
    small = MaxNodes(description="<= 4 nodes", max_nodes=4)
    assert small.check(parse("rank(ts_mean(close, 5))")) and not small.check(parse("rank(close / open - 1)"))


def test_reference_brief_compliance():
    brief = reference_brief()
    assert brief.request.startswith("Market: US-listed stocks trading on weekday sessions. Design an alpha whose "
                                    "PRIMARY mechanism is: mixed-signal extremes")
    assert "roughly 168-day windows" in brief.request and "must use exactly one ts_corr" in brief.request
    good = check_compliance(brief, "sign(ts_max(ts_corr(close, volume, 10), 168))")
    assert all(good.values()) and compliance_share(good) == 1.0
    assert set(good) == {"mechanism", "mechanism_2", "horizon", "input", "structure", "forbidden"}
    bad = check_compliance(brief, parse("rank(ts_mean(close, 168))"))
    assert bad == {"mechanism": False, "mechanism_2": False, "horizon": True, "input": False, "structure": False,
                   "forbidden": False}
    d = brief_compliance(brief, "rank(ts_mean(close, 168))")
    assert d["n"] == 6 and d["share"] == pytest.approx(1 / 6)


def test_fixed_briefs_have_no_constraints_and_share_one():
    d = brief_compliance(FIXED_BRIEFS[0], "rank(close)")
    assert d == {"checks": {}, "share": 1.0, "n": 0}


def test_constraints_round_trip_through_dicts(briefs500):
    for b in briefs500[:60]:
        for c in b.constraints:
            assert constraint_from_dict(c.to_dict()) == c
    with pytest.raises(ValueError):
        constraint_from_dict({"kind": "nope", "description": "x"})
