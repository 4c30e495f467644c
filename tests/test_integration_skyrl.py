"""skyrl-gym integration: an env class that shares one Verifier per process and scores like it."""

from __future__ import annotations

import time

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed")

from alpha_gym.integrations.skyrl import AlphaSkyRLEnv, dataset_rows, register_env  # noqa: E402
from alpha_gym.market.resolve import default_panel  # noqa: E402
from alpha_gym.scoring.verifier import Verifier  # noqa: E402
from alpha_gym.tasks.sets import brief_set  # noqa: E402

ANSWERS = ["<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(ts_mean(close, 250))</alpha>",
           "<alpha>rank(close -)</alpha>", "nothing"]


def test_make_shares_the_verifier_and_scores_like_it():
    env_id = register_env()
    assert register_env() == env_id  # idempotent
    rows = dataset_rows("probe")
    first = skyrl_gym.make(env_id, env_config={}, extras=rows[0])  # builds (or reuses) the process's verifier
    t = time.perf_counter()
    envs = [skyrl_gym.make(env_id, env_config={"data": None}, extras=row) for row in rows[:20]]
    per_env = (time.perf_counter() - t) / 20
    assert per_env < 0.05, f"{per_env:.3f} s per env: the verifier is being rebuilt"
    assert all(e.verifier is first.verifier for e in envs)
    direct = Verifier(default_panel())
    for env, answer in zip(envs, ANSWERS):
        prompt, info = env.init(rows[0]["prompt"])
        assert prompt == rows[0]["prompt"] and info["brief_id"] == env.brief.id
        out = env.step(answer)
        want = direct.score(answer, brief=env.brief)  # the row's brief reaches R13
        assert out["done"] and out["reward"] == want.reward
        assert out["metadata"]["channels"] == want.channels and out["metadata"]["valid"] == want.valid


def test_rows_carry_the_briefs():
    rows = dataset_rows("probe")
    briefs = brief_set("probe")
    assert len(rows) == 50 and rows[4]["brief_id"] == briefs[4].id
    assert rows[4]["prompt"][0]["content"] == briefs[4].prompt() and rows[4]["env_class"] == "alpha_gym"
    assert AlphaSkyRLEnv(extras={"extra_info": {"brief_id": briefs[4].id}}).brief == briefs[4]


def test_env_config_settings_give_the_changed_reward(changed_settings):
    from omegaconf import OmegaConf
    toml, sets, config = changed_settings
    row = dataset_rows("probe")[0]
    brief = brief_set("probe")[0]  # the row's brief: R13, on in the changed settings, reads it
    direct, default = Verifier(default_panel(), config), Verifier(default_panel())
    assert direct.score(ANSWERS[0], brief=brief).channels["brief"] > 0
    for env_config in ({"config": str(toml)}, {"settings": list(sets)}, OmegaConf.create({"settings": list(sets)})):
        env = skyrl_gym.make(register_env(), env_config=env_config, extras=row)
        assert env.verifier.config == direct.config  # ("auto" R3 resolved, as the direct verifier does)
        env.init(row["prompt"])
        out = env.step(ANSWERS[0])
        assert out["reward"] == direct.score(ANSWERS[0], brief=brief).reward != default.score(ANSWERS[0], brief=brief).reward
