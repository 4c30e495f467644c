"""The channel table: every channel declared once, and the config, the verifier and the minima read it."""

from __future__ import annotations

import inspect
from dataclasses import fields

import numpy as np
import pytest

from alpha_gym.language import parse
from alpha_gym.scoring import channels
from alpha_gym.scoring.channel_table import (CHANNEL_TABLE, CHANNELS, DEFAULT_PRIORITIES, Channel, GroupMeasures,
                                             Measures)
from alpha_gym.scoring.config import VerifierConfig

#: VerifierConfig fields no channel reads: the book, CPCV, validity, invalid rewards and the archive.
NOT_CHANNEL_FIELDS = {"priorities", "costs", "cpcv", "min_valid_stocks", "invalid_rewards", "reward_missing_tag",
                      "reward_unparseable", "reward_invalid_book", "archive_capacity", "archive_min_core",
                      "archive_admit_corr", "archive_seed", "max_price_level_corr", "min_recent_turnover"}

#: Where a channel function's default deliberately differs from the config's: called alone, R1 is unclipped
#: and R12 is on (the verifier always passes the config's values).
FUNCTION_DEFAULTS = {"cpcv_clip": None, "format_enabled": True}


@pytest.mark.parametrize("channel", CHANNEL_TABLE, ids=lambda c: c.name)
def test_each_entry_names_a_function_taking_its_inputs_then_its_fields(channel):
    fn = getattr(channels, channel.function)
    params = list(inspect.signature(fn).parameters.values())
    assert len(params) == len(channel.inputs) + len(channel.fields), [p.name for p in params]
    defaults = VerifierConfig()
    for param, name in zip(params[len(channel.inputs):], channel.fields):  # the defaults are the config's
        want = FUNCTION_DEFAULTS.get(name, getattr(defaults, name))
        assert param.default == want, (param.name, name)
    assert channel.doc and "\n" not in channel.doc and channel.priority == DEFAULT_PRIORITIES[channel.name]
    if channel.settle is not None:
        assert callable(getattr(channels, channel.settle))


def test_every_config_field_belongs_to_a_channel_or_is_not_a_channel_setting():
    names = {f.name for f in fields(VerifierConfig)}
    claimed = {f for c in CHANNEL_TABLE for f in c.config_fields}
    assert claimed <= names, sorted(claimed - names)
    assert names - claimed == NOT_CHANNEL_FIELDS


def test_the_config_reads_the_table():
    assert CHANNELS == tuple(c.name for c in CHANNEL_TABLE) and len(set(CHANNELS)) == len(CHANNELS)
    assert VerifierConfig().priorities == DEFAULT_PRIORITIES
    assert list(VerifierConfig().channel_minima()) == list(CHANNELS)
    assert VerifierConfig(neutrality_weight=2.0).channel_minima()["factor_neutrality"] == -2.0 * 3.0


def test_an_entry_with_an_unknown_input_is_refused():
    with pytest.raises(ValueError, match="unknown inputs"):
        Channel("x", 1.0, "turnover_channel", ("turnover_share",), (), lambda c: 0.0, "doc")
    with pytest.raises(ValueError, match="unknown inputs"):  # a per-answer input is not a group one
        Channel("x", 1.0, "pbo_channel", ("turnover",), (), lambda c: 0.0, "doc", per_group=True)


def _measures(rng, config) -> GroupMeasures:
    nodes = ("rank(close)", "ts_corr(close, volume, 10)", "rank(ts_mean(returns, 5)) - rank(volume)")
    answers = tuple(Measures(
        node=parse(str(rng.choice(nodes))), cpcv=float(rng.normal(0, 20)), sharpe=float(rng.normal(0, 5)),
        residual_sharpe=float(rng.normal(0, 5)), turnover=float(rng.uniform(config.min_turnover_invalid, 2.0)),
        ic=float(rng.uniform(-1, 1)), max_corr=float(rng.uniform(0, 1)), form_duplicates=int(rng.integers(0, 12)),
        nodes=int(rng.integers(1, config.limits.max_tokens + 1)), has_reasoning=bool(rng.random() < 0.5),
        stress=float(rng.uniform(-1, 0)), stress_state="test",
        gate=(None, {"refused": False}, {"refused": True})[int(rng.integers(0, 3))]) for _ in range(6))
    return GroupMeasures(answers, rng.normal(0, 2, (6, 15)), rng.normal(0, 2, (6, 15)), None, None)


@pytest.mark.parametrize("config", [VerifierConfig(), VerifierConfig(format_enabled=True, turnover_cap=0.1,
                                                                     complexity_free_nodes=0, pbo_floor=-2.0)])
def test_no_channel_goes_below_its_declared_minimum(config):
    rng = np.random.default_rng(7)
    lows = config.channel_minima()
    for _ in range(40):
        values, notes = channels.channel_values(_measures(rng, config), config)
        for ch in values:
            for c in CHANNEL_TABLE:
                if c.settle is None:
                    assert ch[c.name] >= lows[c.name], (c.name, ch[c.name], lows[c.name])
        for ch, note in zip(values, notes):
            assert ("motif_guard" in note) == (ch["motif_guard"] < 0)


def test_the_settling_channel_sees_the_rest_of_the_reward():
    config = VerifierConfig()
    group = _measures(np.random.default_rng(3), config)
    values, _ = channels.channel_values(group, config)
    for ch in values:
        rest = sum(config.priorities[c] * ch[c] for c in CHANNELS if c != "motif_guard")
        if ch["motif_guard"] < 0:
            assert rest + config.priorities["motif_guard"] * ch["motif_guard"] <= 0
