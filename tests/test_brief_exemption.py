"""The brief exemption from the advantage floor (`TrainConfig.brief_floor`): an answer that meets every check of its
brief (R13 = 1), valid and not caught by R10's guard, may win above a lower core score than the floor's.

Off (the default) the advantages are bit-identical to the rule before the option; on, invalid and guarded answers
still never win and every group still sums to zero; the loop, the TRL adapter's projection and the offline
benchmark give the same advantages on scored groups; the named recipe resolves; bad values are clear errors."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from alpha_gym.errors import ConfigError
from alpha_gym.scoring.advantage_rule import answers_may_win, project_advantages
from alpha_gym.scoring.config import CHANNELS, REWARD_RECIPES, VerifierConfig
from trainers.advantages import compute_advantages, gdpo_advantages
from trainers.config import BRIEF_FOLLOW, RECIPES, TrainConfig, train_config_from_table

f64 = torch.float64


def _old_rule(channels, priorities, valid, core, floor, guarded):
    """The projection as it was before the option: GDPO, then valid & ~guarded & (core > floor), in torch."""
    may_win = valid & ~guarded
    if floor is not None:
        may_win = may_win & (core > floor)
    adv = gdpo_advantages(channels, priorities)
    return torch.from_numpy(project_advantages(adv.numpy(), may_win.numpy()))


# ------------------------------------------------------------------------------------------- planted groups
#: Two channels, R1 (cpcv) at 3 and R13 (brief) at 4: answers [profitable, profitable and half-compliant,
#: compliant under the floor, invalid and compliant, guarded and compliant, invalid].
PLANTED = dict(
    channels=torch.tensor([[[0.5, 0.0], [0.3, 0.5], [-0.05, 1.0], [-12.0, 1.0], [-0.05, 1.0], [-12.0, 0.0]]], dtype=f64),
    valid=torch.tensor([[True, True, True, False, True, False]]),
    guarded=torch.tensor([[False, False, False, False, True, False]]),
)


def _planted(floor=0.0, brief_floor=None, cpcv_of_compliant=-0.05):
    channels = PLANTED["channels"].clone()
    channels[0, 2, 0] = cpcv_of_compliant
    valid, guarded = PLANTED["valid"], PLANTED["guarded"]
    meets = valid & (channels[..., 1] == 1.0)
    return compute_advantages(channels, [3.0, 4.0], valid, channels[..., 0], floor=floor, guarded=guarded,
                              meets_brief=meets, brief_floor=brief_floor)[0]


def test_a_compliant_valid_answer_under_the_floor_wins_only_with_the_exemption():
    off, on = _planted(brief_floor=None), _planted(brief_floor=-0.5)
    assert off[2] <= 0 < on[2]                       # barred by the floor at 0, let win by the exemption
    for adv in (off, on):
        assert adv[3] <= 0 and adv[5] <= 0           # invalid answers never win, compliant or not
        assert adv[4] <= 0                           # nor does a guarded compliant answer
        assert abs(float(adv.sum())) < 1e-12         # the group still sums to zero
    # below the exemption's own floor it is barred again, and without a floor there is nothing to exempt from
    assert _planted(brief_floor=-0.5, cpcv_of_compliant=-0.6)[2] <= 0
    assert _planted(floor=None)[2] > 0


def test_the_exemption_needs_to_know_who_meets_the_brief():
    with pytest.raises(ValueError, match="meets_brief"):
        answers_may_win([True], [False], [0.0], None, floor=0.0, brief_floor=-1.0)


# ------------------------------------------------------------------------------------------- random groups
@pytest.mark.parametrize("seed", range(120))
def test_option_off_is_bit_identical_and_on_keeps_both_rules(seed):
    g = torch.Generator().manual_seed(seed)
    P, G, K = 5, 8, 14
    channels = torch.randn(P, G, K, generator=g, dtype=f64) * torch.rand(K, generator=g, dtype=f64) * 5
    priorities = (torch.rand(K, generator=g, dtype=f64) * 4).tolist()
    channels[..., CHANNELS.index("brief")] = torch.where(torch.rand(P, G, generator=g) < 0.4, 1.0,
                                                         torch.rand(P, G, generator=g, dtype=f64))
    valid = torch.rand(P, G, generator=g) < torch.rand(P, 1, generator=g)
    guarded = valid & (torch.rand(P, G, generator=g) < 0.15)
    core = channels[..., 0]
    meets = valid & (channels[..., CHANNELS.index("brief")] == 1.0)
    floor = [None, 0.0, float(torch.randn(1, generator=g))][seed % 3]
    old = _old_rule(channels, priorities, valid, core, floor, guarded)
    today = compute_advantages(channels, priorities, valid, core, floor=floor, guarded=guarded)
    off = compute_advantages(channels, priorities, valid, core, floor=floor, guarded=guarded, meets_brief=meets,
                             brief_floor=None)
    assert torch.equal(old, today) and torch.equal(old, off)   # bit for bit, not within a tolerance
    if floor is None:
        return
    brief_floor = floor - float(torch.rand(1, generator=g)) * 2
    on = compute_advantages(channels, priorities, valid, core, floor=floor, guarded=guarded, meets_brief=meets,
                            brief_floor=brief_floor)
    may_win = valid & ~guarded & ((core > floor) | (meets & (core > brief_floor)))
    assert (on[~may_win] <= 0).all()                           # exact: invalid, guarded, under both floors
    assert (on[~valid | guarded] <= 0).all()
    torch.testing.assert_close(on.sum(1), torch.zeros(P, dtype=f64), atol=1e-9, rtol=0)
    assert (on[~may_win.any(1)] == 0).all()
    # the exemption only widens who may win: every answer the floor alone let win may still win
    assert not ((old > 0) & ~may_win).any()


# ------------------------------------------------------------------------ the paths agree on scored groups
@pytest.fixture(scope="module")
def scored(small_synthetic):
    """One brief's group on the small market: its formulas that meet every check (template search, any CPCV) next
    to ones that do not and invalid answers, scored together under the named recipe's reward."""
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.tasks.template_search import SearchBounds, search_briefs
    verifier = Verifier(small_synthetic, VerifierConfig(priorities={**VerifierConfig().priorities,
                                                                    **BRIEF_FOLLOW["verifier"]["priorities"]}))
    brief = brief_set("train")[0]
    found = search_briefs(verifier, [brief], SearchBounds(per_brief=3, min_cpcv=-5.0))[0][0].found
    answers = [f["formula"] for f in found] + ["rank(-ts_delta(close, 5))", "ts_rank(volume, 10)",
                                               "rank(close + )", "rank(ts_mean(returns, 20))"]
    group = verifier.score_group([f"<alpha>{a}</alpha>" for a in answers] + ["no tag"], brief=brief)
    return verifier, group


def _offline_benchmark():
    import benchmarks.brief_advantage_offline as module    # the repo root is on pytest's pythonpath
    return module


@pytest.mark.parametrize("floor,brief_floor", [(0.0, None), (0.0, -0.5), (0.0, -5.0), (10.0, -5.0), (None, None)])
def test_the_loop_the_trl_adapter_and_the_benchmark_agree(scored, floor, brief_floor):
    from trainers.loop import _advantages
    from trainers.trl_adapter import may_win_of
    verifier, group = scored
    assert group.meets_brief.sum() >= 2 and (~group.valid).sum() >= 2   # the group holds both kinds
    priorities = [verifier.config.priorities[c] for c in CHANNELS]
    config = TrainConfig(advantage_floor=floor, brief_floor=brief_floor)
    loop = _advantages([group], priorities, config)[0].double()
    channels = torch.as_tensor(group.matrix)[None]
    trl = torch.from_numpy(project_advantages(gdpo_advantages(channels, priorities).numpy(),
                                              may_win_of(group.scores, floor, brief_floor).numpy()[None]))[0]
    bench = _offline_benchmark()
    rows = [{"valid": bool(s.valid), "channels": dict(s.channels)} for s in group.scores]
    names = list(CHANNELS)
    b_channels, b_valid, b_guarded = bench.tensors([rows], names)
    offline = bench.advantages(b_channels, b_valid, b_guarded, names, verifier.config.priorities, floor,
                               brief_floor)[0]
    torch.testing.assert_close(loop, trl, rtol=0, atol=1e-6)            # the loop casts to float32
    torch.testing.assert_close(offline, trl, rtol=0, atol=1e-12)
    assert torch.equal(may_win_of(group.scores, floor, brief_floor),
                       torch.from_numpy(answers_may_win(group.valid, group.guarded, group.core, group.meets_brief,
                                                        floor, brief_floor)))
    if floor == 10.0:  # every CPCV is under this floor: only the compliant answers may win, and some do
        assert (loop[~torch.as_tensor(group.meets_brief)] <= 0).all() and (loop > 0).any()


# ------------------------------------------------------------------------------------ recipe and bad values
def test_the_named_recipe_resolves(tmp_path):
    """BRIEF_FOLLOW as a settings file loads to the reward and the training config it names; the flags it documents
    give the same; the default, every recipe and every reward recipe leave the exemption off."""
    from alpha_gym import settings as S
    from trainers.config import register_train_table
    register_train_table()
    path = tmp_path / "brief_follow.toml"
    path.write_text(S.dumps(BRIEF_FOLLOW))
    loaded = S.load(path)
    name, config = loaded["train"].recipe, loaded["train"].config
    assert name == "cispo_distinct_forms" and config.advantage_floor == 0.0 and config.brief_floor == -0.1
    assert config == RECIPES[name].with_(brief_floor=-0.1)
    assert loaded.verifier == VerifierConfig.recipe("brief_book", priorities={"brief": 3.0})
    flags = S.load(None, ["train.recipe=cispo_distinct_forms", "train.brief_floor=-0.1",
                          "verifier.priorities.brief=3", "verifier.priorities.book=3"])
    assert flags["train"].config == config and flags.verifier == loaded.verifier
    assert train_config_from_table(BRIEF_FOLLOW["train"]) == (name, config)
    assert TrainConfig().brief_floor is None and all(c.brief_floor is None for c in RECIPES.values())
    assert all("brief_floor" not in row for row in REWARD_RECIPES.values())


BAD = [dict(brief_floor=float("nan")), dict(brief_floor=float("inf")), dict(brief_floor=float("-inf")),
       dict(brief_floor="low"), dict(brief_floor="-0.1"), dict(brief_floor=True), dict(brief_floor=[-0.1]),
       dict(brief_floor=0.0), dict(brief_floor=0.5), dict(brief_floor=1e9),
       dict(advantage_floor=None, brief_floor=-0.1), dict(advantage_floor=-1.0, brief_floor=-1.0),
       dict(advantage_floor=-1.0, brief_floor=-0.5)]


@pytest.mark.parametrize("change", BAD, ids=[repr(c) for c in BAD])
def test_bad_values_are_a_clear_error(change):
    with pytest.raises(ConfigError, match="brief_floor"):
        TrainConfig(**change)


@pytest.mark.parametrize("item,message", [("train.brief_floor=0.2", "below advantage_floor"),
                                          ("train.brief_floor=nan", "brief_floor"),
                                          ("train.brief_floor=lowest", "brief_floor")])
def test_a_bad_setting_is_a_one_line_error_naming_the_key(item, message):
    from alpha_gym.settings import load
    from trainers.config import register_train_table
    register_train_table()
    with pytest.raises(ConfigError, match=message) as caught:
        load(None, [item])["train"]
    assert "\n" not in str(caught.value)


def test_the_trl_adapter_refuses_what_the_loop_refuses():
    pytest.importorskip("trl")
    from trainers.trl_adapter import AlphaGRPOTrainer
    with pytest.raises(ConfigError, match="brief_floor"):
        AlphaGRPOTrainer(None, None, brief_floor=-0.1)   # no floor: refused before anything loads


def test_the_rule_in_numpy_matches_its_formula():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = 9
        valid, guarded, meets = rng.random(n) < 0.7, rng.random(n) < 0.2, rng.random(n) < 0.4
        core = rng.normal(size=n).astype(rng.choice([np.float32, np.float64]))
        floor, brief_floor = float(rng.normal()), float(rng.normal()) - 2
        got = answers_may_win(valid, guarded, core, meets, floor, brief_floor)
        want = [v and not gd and (c > floor or (m and c > brief_floor))
                for v, gd, c, m in zip(valid, guarded, core, meets)]
        assert got.tolist() == want


#: Spellings of `--brief-floors` the offline benchmark must refuse (a floor at or above 0 exempts nothing, a
#: word or nan is no floor) and ones it takes.
BAD_SPELLINGS = ["0", "0.0", "-0", "0.5", "1e9", "inf", "+inf", "nan", "-nan", "NaN", "none", "OFF", "All", "", " ",
                 "-0.1.2", "0x10", "1/2", "-", "--0.1", "low"]


@pytest.mark.parametrize("text", BAD_SPELLINGS)
def test_the_benchmark_refuses_a_bad_brief_floor_with_one_line(text, capsys):
    bench = _offline_benchmark()
    import argparse
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        bench.parse_brief_floor(text)
    assert "\n" not in str(caught.value) and "brief floor" in str(caught.value)


def test_the_benchmark_reads_the_good_spellings():
    bench = _offline_benchmark()
    assert [bench.parse_brief_floor(t) for t in ("off", "all", "-0.1", "-5", "-1e-3", "-inf")] == \
        [None, -float("inf"), -0.1, -5.0, -1e-3, -float("inf")]
