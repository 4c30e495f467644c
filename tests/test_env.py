"""AlphaFormula-v0 as a Gymnasium environment."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import alpha_gym
from alpha_gym.env import AlphaFormulaEnv


@pytest.fixture(scope="module")
def small_env_kwargs(small_synthetic):
    return {"panel": small_synthetic}


def test_registered_and_makes(small_env_kwargs):
    assert alpha_gym.ENV_ID in gym.registry
    env = gym.make("AlphaFormula-v0", **small_env_kwargs)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    assert "<alpha>" in obs and "brief_id" in info
    obs2, reward, terminated, truncated, info = env.step("<alpha>rank(-ts_delta(close, 5))</alpha>")
    assert terminated and not truncated
    assert isinstance(reward, float) and info["valid"]
    assert set(info) >= {"valid", "reason", "channels", "diagnostics", "formula"}
    assert len(info["diagnostics"]["cpcv_slices"]) == 15


def test_passes_gymnasium_env_checker(small_synthetic):
    env = AlphaFormulaEnv(panel=small_synthetic)
    check_env(env, skip_render_check=True)


def test_reset_is_seeded(small_env_kwargs):
    env = gym.make("AlphaFormula-v0", **small_env_kwargs)
    a = [env.reset(seed=7)[1]["brief_id"]] + [env.reset()[1]["brief_id"] for _ in range(5)]
    b = [env.reset(seed=7)[1]["brief_id"]] + [env.reset()[1]["brief_id"] for _ in range(5)]
    assert a == b


def test_reset_options_select_a_brief(small_env_kwargs):
    env = gym.make("AlphaFormula-v0", briefs="fixed", **small_env_kwargs)
    _, info = env.reset(options={"brief_id": "fixed-003"})
    assert info["brief_id"] == "fixed-003"
    with pytest.raises(ValueError):
        env.reset(options={"brief_id": "nope"})


def test_step_before_reset_raises(small_synthetic):
    env = AlphaFormulaEnv(panel=small_synthetic)
    with pytest.raises(RuntimeError):
        env.step("<alpha>close</alpha>")


def test_sync_vector_env(small_synthetic):
    envs = gym.vector.SyncVectorEnv([lambda: AlphaFormulaEnv(panel=small_synthetic) for _ in range(3)])
    obs, infos = envs.reset(seed=0)
    assert len(obs) == 3
    actions = ("<alpha>rank(-returns)</alpha>", "no tag", "<alpha>rank(close -)</alpha>")
    obs, rewards, terminated, truncated, infos = envs.step(actions)
    assert terminated.all()
    bound = envs.envs[0].unwrapped.verifier.config.valid_reward_bound()
    assert rewards[1] == pytest.approx(bound - 1.0) and rewards[2] == pytest.approx(bound - 0.8)
    assert np.isfinite(rewards).all()
    envs.close()


def test_train_end_cuts_the_panel(small_synthetic):
    end = small_synthetic.dates[199]
    env = AlphaFormulaEnv(panel=small_synthetic, train_end=str(end))
    assert env.verifier.panel.n_days == 200 and env.verifier.panel.dates[-1] == end


def test_render_ansi(small_synthetic):
    env = AlphaFormulaEnv(panel=small_synthetic, render_mode="ansi")
    env.reset(seed=0)
    env.step("<alpha>rank(-ts_delta(close, 5))</alpha>")
    text = env.render()
    assert "CPCV slices" in text and "cpcv" in text


def test_import_does_not_pull_torch():
    import subprocess
    import sys
    code = "import sys, alpha_gym, alpha_gym.env; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_default_briefs_are_the_training_split_and_report_compliance(small_synthetic):
    from alpha_gym.tasks.sets import brief_set
    train, probe = brief_set("train"), brief_set("probe")
    assert len(probe) == 50 and len(train) >= 400
    assert not {b.family for b in train} & {b.family for b in probe}
    env = AlphaFormulaEnv(panel=small_synthetic)
    assert env.briefs == train
    env.reset(options={"brief_id": train[0].id})
    _, _, _, _, info = env.step("<alpha>rank(ts_corr(close, volume, 20))</alpha>")
    compliance = info["diagnostics"]["brief_compliance"]
    assert 0.0 <= compliance["share"] <= 1.0 and compliance["n"] == len(train[0].constraints)


def test_cli_demo_runs_and_training_without_torch_says_which_extra():
    """The README's main job; and a missing extra is a clear message, not a traceback."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "alpha_gym", "demo"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Alpha#101" in out.stdout and "INVALID" in out.stdout and "CPCV slices" in out.stdout
    from alpha_gym.commands.extras import missing_extra
    assert missing_extra("train", ModuleNotFoundError("No module named 'torch'")) == 2


def test_environment_b_charges_about_19x_the_costs(small_synthetic):
    from alpha_gym.book.costs import TrainingCosts
    a = gym.make("AlphaFormula-v0", panel=small_synthetic, archive="frozen").unwrapped
    b = gym.make(alpha_gym.ENV_B_ID, panel=small_synthetic, archive="frozen").unwrapped
    assert b.verifier.config.costs.rate() == pytest.approx(19 * TrainingCosts().rate())
    answer = "<alpha>rank(-ts_delta(close, 5))</alpha>"
    sa, sb = a.verifier.score(answer), b.verifier.score(answer)
    assert sa.diagnostics["turnover"] == sb.diagnostics["turnover"]  # same book, dearer trades
    assert sb.diagnostics["sharpe"] < sa.diagnostics["sharpe"]
    with pytest.raises(ValueError):
        TrainingCosts().scaled(0)
