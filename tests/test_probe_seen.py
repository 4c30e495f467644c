"""The second probe set, `probe_seen`: 50 unseen briefs of the training families (new combinations of the parts
training shows), beside the held-out `probe` (two families training never shows). Each brief is checked against the
training set part by part, the draw is seeded, and the template search shows the briefs can be met."""

from __future__ import annotations

from collections import Counter

import pytest

from alpha_gym import Verifier
from alpha_gym.commands.train import briefs_from_args
from alpha_gym.errors import InputError
from alpha_gym.tasks.generator import PART_NAMES, part_ids, unseen_briefs_of_seen_families
from alpha_gym.tasks.sets import SET_NAMES, brief_by_id, brief_set, require_brief
from alpha_gym.tasks.template_search import SearchBounds, search_briefs

#: Measured on the small synthetic market (12 stocks x 400 sessions), the search's default bounds and one formula
#: a brief: 50 of 50 briefs get a formula meeting every check, valid, with train CPCV above 0
#: (benchmarks/notes/compliant-warm-start.md); the floor leaves room for a change of the market's generator.
MEETABLE_AT_LEAST = 45


@pytest.fixture(scope="module")
def seen():
    return brief_set("probe_seen")


def test_fifty_briefs_with_their_own_ids(seen):
    assert len(seen) == 50
    ids = [b.id for b in seen]
    assert len(set(ids)) == 50 and all(i.startswith("g1-") for i in ids)
    others = {b.id for name in ("train", "probe", "fixed") for b in brief_set(name)}
    assert not others & set(ids)


def test_no_brief_equals_a_training_brief_or_another(seen):
    train = brief_set("train")
    assert not {part_ids(b) for b in seen} & {part_ids(b) for b in train}
    assert not {b.request for b in seen} & {b.request for b in train}
    assert len({part_ids(b) for b in seen}) == len({b.request for b in seen}) == 50


def test_every_family_and_every_part_is_one_training_shows(seen):
    train = brief_set("train")
    train_families = {b.family for b in train}
    assert {b.family for b in seen} <= train_families
    assert not {b.family for b in seen} & {b.family for b in brief_set("probe")}
    for k, name in enumerate(PART_NAMES):
        shown = {part_ids(b)[k] for b in train}
        assert {part_ids(b)[k] for b in seen} <= shown, name
    # dealt in rounds: every training family appears, none more than three times
    per_family = Counter(b.family for b in seen)
    assert set(per_family) == train_families and max(per_family.values()) <= 3


def test_the_set_is_deterministic_and_its_seed_matters(seen):
    again = unseen_briefs_of_seen_families(brief_set("train"), n=50, seed=1)
    assert [b.to_dict() for b in again] == [b.to_dict() for b in seen]
    other = unseen_briefs_of_seen_families(brief_set("train"), n=50, seed=2)
    assert {part_ids(b) for b in other} != {part_ids(b) for b in seen}


def test_a_pool_too_small_is_refused_by_name():
    with pytest.raises(ValueError, match="only .* of 50 unseen briefs"):
        unseen_briefs_of_seen_families(brief_set("train"), n=50, seed=1, pool=20)
    with pytest.raises(ValueError, match="n must be >= 0"):
        unseen_briefs_of_seen_families(brief_set("train"), n=-1)


def test_users_pick_it_by_name(seen):
    assert "probe_seen" in SET_NAMES
    assert brief_by_id(seen[7].id) is seen[7] and require_brief(seen[0].id) is seen[0]
    assert briefs_from_args("probe_seen") == list(seen)
    with pytest.raises(ValueError, match="'probe_seen'"):
        brief_set("probe_unseen")
    with pytest.raises(InputError, match="'probe_seen'"):
        briefs_from_args("probe-seen")


def test_the_environment_draws_from_it(small_synthetic, seen):
    from alpha_gym.env import AlphaFormulaEnv
    env = AlphaFormulaEnv(panel=small_synthetic, briefs="probe_seen")
    prompt, info = env.reset(seed=0)
    assert env.observation_space.contains(prompt) and brief_by_id(info["brief_id"]) in seen


def test_almost_every_brief_can_be_met(small_synthetic, seen):
    """The template search finds, for most briefs, a formula meeting every check R13 pays for on its live tree,
    valid and with train CPCV above 0; each is scored again with its brief: R13 = 1."""
    verifier = Verifier(small_synthetic)
    results, _ = search_briefs(verifier, seen, SearchBounds(per_brief=1))
    met = [r for r in results if r.found]
    assert len(met) >= MEETABLE_AT_LEAST, Counter(r.reason for r in results if not r.found)
    for r in met:
        score = verifier.score(f"<alpha>{r.found[0]['formula']}</alpha>", brief=brief_by_id(r.brief_id))
        assert score.valid and score.channels["brief"] == 1.0 and score.channels["cpcv"] > 0, r.found[0]


@pytest.mark.real_data
def test_on_us46_every_brief_has_a_valid_answer_meeting_every_check(real_us46, seen):
    """Measured on us46's train window to 2024-08-20: for all 50 briefs the search reaches a formula meeting every
    check on its live tree that the verifier admits; for 44 one with train CPCV above 0 as well (the other 6 stop at
    the CPCV floor)."""
    from alpha_gym.tasks.template_search import REASONS
    verifier = Verifier(real_us46.window(end="2024-08-20"))
    results, _ = search_briefs(verifier, seen, SearchBounds(per_brief=1))
    assert all(r.found or r.reason == REASONS[3] for r in results), Counter(r.reason for r in results if not r.found)
    assert sum(bool(r.found) for r in results) >= 40
