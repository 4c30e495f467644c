"""verl integration: compute_score through verl's own loader, and the GDPO invalid-answer guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl.trainer.ppo.core_algos",
                    reason="verl is not installed (CI: pip install --no-deps verl tensordict pyvers omegaconf codetiming)")
torch = pytest.importorskip("torch")

from alpha_gym.integrations import verl as av  # noqa: E402
from alpha_gym.market import synthetic_panel  # noqa: E402
from alpha_gym.scoring.advantage_rule import project_advantages  # noqa: E402
from alpha_gym.scoring.config import CHANNELS  # noqa: E402
from alpha_gym.scoring.verifier import Verifier  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ANSWERS = ["<alpha>rank(-ts_delta(close, 5))</alpha>",
           "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>rank(ts_mean(close, 250))</alpha>",   # static book: invalid
           "<alpha>rank(close -)</alpha>",                # syntax error: invalid
           "momentum, I think"]                           # no tag: invalid


@pytest.fixture(scope="module")
def market(tmp_path_factory):
    """A small synthetic market written as a CSV (verl passes reward_kwargs as plain values)."""
    pd = pytest.importorskip("pandas")
    panel = synthetic_panel(n_stocks=12, n_days=400, seed=3)
    n_days, n_stocks = panel.shape
    frame = pd.DataFrame({"date": np.repeat(panel.dates.astype(str), n_stocks),
                          "ticker": np.tile(np.array(panel.tickers), n_days),
                          **{f: panel.field(f).reshape(-1) for f in ("open", "high", "low", "close", "volume")}})
    path = tmp_path_factory.mktemp("verl") / "bars.csv"
    frame.to_csv(path, index=False)
    return panel, str(path)


def test_compute_score_through_verls_loader_equals_the_verifier(market):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn
    panel, path = market
    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": str(ROOT / "alpha_gym" / "integrations" / "verl.py"), "name": "compute_score",
        "reward_kwargs": {"data": path}}}})
    fn = get_custom_reward_fn(config)
    direct = Verifier(panel)
    for answer in ANSWERS:
        got = fn(data_source="alpha_gym", solution_str=answer, ground_truth="", extra_info={"index": 0})
        want = direct.score(answer)
        guarded = want.valid and want.channels["motif_guard"] < 0
        assert got == {"score": want.reward, "valid": want.valid, **want.channels,
                       "may_win": want.valid and not guarded}
        assert list(got)[2:2 + len(CHANNELS)] == av.GDPO_KEYS == list(CHANNELS)
    assert av.gdpo_weights()[0] == 3.0 and len(av.gdpo_weights()) == 14 and av.gdpo_weights()[-1] == 0.0


def test_dataset_rows_carry_the_briefs():
    rows = av.dataset_rows("probe")
    assert len(rows) == 50
    assert rows[0]["prompt"][0]["role"] == "user" and "<alpha>" in rows[0]["prompt"][0]["content"]
    assert rows[0]["data_source"] == av.DATA_SOURCE and rows[3]["extra_info"]["index"] == 3


def _gdpo_batch(scores, group_size):
    """verl's GDPO inputs for responses of 4 tokens each, rewards on the last token."""
    n = len(scores)
    response_mask = torch.ones(n, 4)
    rewards = torch.zeros(n, 4)
    rewards[:, -1] = torch.tensor([s["score"] for s in scores])
    batch = {"prompts": torch.zeros(n, 2, dtype=torch.long), "attention_mask": torch.ones(n, 6, dtype=torch.long)}
    non_tensor = {k: np.array([s[k] for s in scores]) for k in scores[0]}
    index = np.array([f"g{i // group_size}" for i in range(n)], dtype=object)
    return dict(token_level_rewards=rewards, response_mask=response_mask, index=index, batch=batch,
                non_tensor_batch=non_tensor)


def test_guard_keeps_invalid_answers_from_positive_advantage(market):
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos
    panel, path = market
    scores = [av.compute_score("alpha_gym", a, data=path) for a in ANSWERS + ANSWERS[2:][::-1]]  # 2 groups
    config = OmegaConf.create({"gdpo_reward_keys": av.GDPO_KEYS, "gdpo_reward_weights": av.gdpo_weights()})
    valid = np.array([s["valid"] for s in scores])
    estimator = core_algos.get_adv_estimator_fn("gdpo")
    original = getattr(estimator, "__wrapped__", estimator)
    unguarded, _ = original(config=config, **_gdpo_batch(scores, 5))
    assert (unguarded[~valid][:, -1] > 0).any(), "the case must show the problem the guard fixes"
    assert av.install_guard() in (True, False) and not av.install_guard()  # idempotent
    guarded, _ = core_algos.get_adv_estimator_fn("gdpo")(config=config, **_gdpo_batch(scores, 5))
    assert (guarded[~valid] <= 0).all()
    # the one rule (issue 38.5): the answers that may win move by one shift per group, so each group sums to 0
    shift = (unguarded - guarded)[valid].reshape(-1, 4)
    groups = np.arange(len(scores)) // 5
    rows = shift[groups[valid] == 0]  # group 0 holds the two valid answers
    assert len(rows) == 2 and torch.allclose(rows, rows[0, 0].expand_as(rows), atol=1e-6)
    assert abs(float(guarded[groups == 0, -1].sum())) < 1e-5
    assert torch.equal(guarded[groups == 1], torch.zeros(3, 4))  # no answer of group 1 may win: no signal
    # an R10-guarded answer (valid, may not win) is held at <= 0 too: mark the best valid answer guarded
    batch = _gdpo_batch(scores, 5)
    best = int(np.argmax(np.where(valid, unguarded[:, -1].numpy(), -np.inf)))
    assert unguarded[best, -1] > 0
    batch["non_tensor_batch"]["may_win"] = batch["non_tensor_batch"]["may_win"].copy()
    batch["non_tensor_batch"]["may_win"][best] = False
    held, _ = core_algos.get_adv_estimator_fn("gdpo")(config=config, **batch)
    assert (held[best] <= 0).all()
    # batches from before the may_win key fall back to "valid"; without both the guard refuses
    batch = _gdpo_batch(scores, 5)
    del batch["non_tensor_batch"]["may_win"]
    assert torch.equal(core_algos.get_adv_estimator_fn("gdpo")(config=config, **batch)[0], guarded)
    del batch["non_tensor_batch"]["valid"]
    with pytest.raises(KeyError, match="may_win"):
        core_algos.get_adv_estimator_fn("gdpo")(config=config, **batch)


def test_guard_advantages_on_numpy():
    """By hand: one group; the invalid 0.3 is clamped to 0, the one answer that may win absorbs the sum 0.3."""
    adv = np.array([[0.5, 0.5], [-0.2, -0.2], [0.3, 0.3]])
    out = av.guard_advantages(adv, [True, False, False])
    np.testing.assert_allclose(out, [[0.2, 0.2], [-0.2, -0.2], [0.0, 0.0]], rtol=0, atol=1e-12)
    # two groups by verl's uid index, and a response mask: tokens outside it stay 0
    # group a: 0.3 (may not win) -> 0, the sum 0.4 shared by 2; group b: the sum 0.2 shared by 2
    adv = np.array([[0.5, 0.5], [0.3, 0.3], [-0.2, 0.0], [-0.1, -0.1], [0.4, 0.4]])
    out = av.guard_advantages(adv, [True, False, True, True, True], index=["a", "a", "b", "a", "b"],
                              response_mask=[[1, 1], [1, 1], [1, 0], [1, 1], [1, 1]])
    np.testing.assert_allclose(out, [[0.3, 0.3], [0.0, 0.0], [-0.3, 0.0], [-0.3, -0.3], [0.3, 0.3]],
                               rtol=0, atol=1e-12)


def test_verls_estimator_keeps_every_group_zero_sum_and_no_invalid_answer_positive():
    """verl's GDPO with the guard installed, on random batches: groups of several sizes in shuffled order, random
    validity (whole groups invalid too), responses of random length. Every group's answers sum to 0, no answer
    that may not win has a positive advantage, and each answer's tokens share one value."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos
    av.install_guard()
    estimator = core_algos.get_adv_estimator_fn("gdpo")
    config = OmegaConf.create({"gdpo_reward_keys": av.GDPO_KEYS, "gdpo_reward_weights": av.gdpo_weights()})
    rng = np.random.default_rng(38)
    for trial in range(20):
        sizes = rng.integers(2, 9, size=rng.integers(1, 6))
        index = rng.permutation(np.repeat([f"uid-{k}" for k in range(len(sizes))], sizes)).astype(object)
        n, length = len(index), 6
        may_win = rng.random(n) < rng.choice([0.0, 0.5, 0.9])
        lengths = rng.integers(1, length + 1, size=n)
        mask = torch.as_tensor(np.arange(length)[None, :] < lengths[:, None], dtype=torch.float32)
        non_tensor = {k: rng.normal(size=n) for k in av.GDPO_KEYS}
        non_tensor["may_win"] = may_win
        batch = {"prompts": torch.zeros(n, 2, dtype=torch.long),
                 "attention_mask": torch.cat([torch.ones(n, 2, dtype=torch.long), mask.long()], dim=1)}
        adv, _ = estimator(token_level_rewards=torch.zeros(n, length), response_mask=mask, index=index,
                           config=config, non_tensor_batch=non_tensor, batch=batch)
        value = adv[:, 0].numpy()
        assert torch.equal(adv, adv[:, :1] * mask), trial  # one value per answer, on its tokens only
        assert (value[~may_win] <= 0).all(), trial
        for uid in set(index):
            assert abs(value[index == uid].sum()) < 1e-5, (trial, uid)
        np.testing.assert_allclose(project_advantages(value, may_win, index), value, rtol=0, atol=1e-6)  # a fixed point


def test_verls_external_module_hook_installs_the_guard():
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES="alpha_gym.integrations.verl_guard", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", "import verl\nfrom verl.trainer.ppo import core_algos\n"
                          "print(getattr(core_algos.get_adv_estimator_fn('gdpo'), 'alpha_gym_guard', False))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # importing verl is slow on a busy machine
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("True")


def test_settings_reach_compute_score_through_reward_kwargs(market, changed_settings):
    """A settings file, or --set items, in reward_kwargs: the changed reward, and GDPO weights that match it."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn
    panel, path = market
    toml, sets, config = changed_settings
    from alpha_gym.tasks.sets import brief_set
    direct, default = Verifier(panel, config), Verifier(panel)
    brief = brief_set("probe")[0]  # R13, on in the changed settings, reads the row's brief
    for kwargs in ({"data": path, "config": str(toml)}, {"data": path, "settings": list(sets)}):
        fn = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": {
            "path": str(ROOT / "alpha_gym" / "integrations" / "verl.py"), "name": "compute_score",
            "reward_kwargs": kwargs}}}))
        for answer in ANSWERS[:2]:
            got = fn(data_source="alpha_gym", solution_str=answer, ground_truth="",
                     extra_info={"index": 0, "brief_id": brief.id})
            want = direct.score(answer, brief=brief)
            assert got["score"] == want.reward != default.score(answer, brief=brief).reward
            assert {k: got[k] for k in CHANNELS} == want.channels and want.channels["brief"] > 0
    assert av.gdpo_weights(config=str(toml)) == av.gdpo_weights(settings=sets) == [config.priorities[k] for k in CHANNELS]
    assert av.gdpo_weights(config=str(toml))[0] == 1.0
