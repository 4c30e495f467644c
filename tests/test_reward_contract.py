"""One reward contract for every consumer (README, "The reward contract").

For every answer, valid or not: reward == sum_c priority[c] * channels[c]; no invalid answer outranks a
valid one; the motif guard (R10) and the invalid penalties live in channel values; the same answers to
one prompt get the same channels through env.step, Verifier.score_group and the TRL reward functions
(the native loop's parity is in tests/test_training.py). The novelty archive grows and persists.
"""

from __future__ import annotations

import multiprocessing
import math

import gymnasium as gym
import numpy as np
import pytest

from alpha_gym import CHANNELS, Verifier, VerifierConfig
from alpha_gym.alpha101 import formulas as alpha101_formulas
from alpha_gym.env import AlphaFormulaEnv, AlphaFormulaEvolveEnv, make_vector_env
from alpha_gym.language.sample import random_formula
from alpha_gym.scoring import channels as ch
from alpha_gym.scoring.archive import Archive, ArchiveError
from alpha_gym.scoring.config import ConfigError, weighted_sum
from alpha_gym.tasks.sets import brief_by_id

NOTHING = "scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))"
INVALID = ["no tag at all", "<alpha>rank(close -)</alpha>", "<alpha>ts_mean(delay(close, 200), 100)</alpha>",
           f"<alpha>{NOTHING}</alpha>", "<alpha>rank(ts_mean(close, 250))</alpha>", "<alpha></alpha>", ""]


@pytest.fixture(scope="module")
def verifier(small_synthetic):
    return Verifier(small_synthetic)


def _random_answers(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"<alpha>{random_formula(rng, depth=int(rng.integers(2, 5)))}</alpha>" for _ in range(n)]


def _check_contract(scores, priorities):
    for s in scores:
        assert s.reward == weighted_sum(s.channels, priorities), (s.formula, s.reason)
    valid = [s.reward for s in scores if s.valid]
    invalid = [s.reward for s in scores if not s.valid]
    assert valid and invalid
    assert max(invalid) < min(valid), (max(invalid), min(valid))


# ----------------------------------------------------------------------------------- the contract
def test_reward_is_the_weighted_sum_and_invalid_never_outranks_valid(verifier):
    answers = INVALID + _random_answers(150)
    group = verifier.score_group(answers)
    _check_contract(group.scores, verifier.config.priorities)
    singles = [verifier.score(a) for a in answers[:40]]
    _check_contract(singles, verifier.config.priorities)
    bound = verifier.config.valid_reward_bound()
    assert all(s.reward >= bound for s in group.scores if s.valid)
    assert all(s.reward < bound for s in group.scores if not s.valid)


def test_the_invalid_penalties_keep_their_order(verifier):
    missing, unparseable, static = (verifier.score(a).reward for a in INVALID[:2] + [f"<alpha>{NOTHING}</alpha>"])
    assert missing < unparseable < static < verifier.config.valid_reward_bound()


def test_grpo_mode_and_weighted_channels_rebuild_the_scalar(verifier):
    torch = pytest.importorskip("torch")
    from trainers.advantages import compute_advantages, grpo_advantages
    g = verifier.score_group(INVALID[:3] + _random_answers(9, seed=1))
    w = torch.tensor([verifier.config.priorities[c] for c in CHANNELS], dtype=torch.float64)
    rebuilt = (torch.as_tensor(g.matrix) * w).sum(-1)
    torch.testing.assert_close(rebuilt, torch.as_tensor(g.rewards), rtol=0, atol=1e-12)
    adv = compute_advantages(torch.as_tensor(g.matrix)[None], w, torch.as_tensor(g.valid)[None],
                             torch.as_tensor(g.core)[None], mode="grpo")
    plain = grpo_advantages(torch.as_tensor(g.rewards)[None])
    assert ((adv - plain).abs()[torch.as_tensor(g.may_win)[None]] < 1e-6).all() or not g.may_win.any()


@pytest.mark.real_data
def test_on_real_us46_a_losing_book_scores_above_one_that_trades_nothing(real_us46):
    v = Verifier(real_us46)
    answers = [f"<alpha>{f}</alpha>" for f in alpha101_formulas(industry_free=True).values()]
    answers += INVALID + _random_answers(60, seed=2)
    scores = [v.score(a) for a in answers]
    _check_contract(scores, v.config.priorities)
    alpha101 = v.score(answers[-1 - 60 - len(INVALID)])
    nothing = v.score(f"<alpha>{NOTHING}</alpha>")
    assert not nothing.valid and nothing.reward < alpha101.reward


def test_reference_values_still_satisfy_the_contract(small_synthetic):
    v = Verifier(small_synthetic, VerifierConfig.reference())
    for s in v.score_group(INVALID + _random_answers(20, seed=3)).scores:
        assert s.reward == weighted_sum(s.channels, v.config.priorities)


def test_config_refuses_a_contract_it_cannot_keep():
    with pytest.raises(ConfigError, match="cpcv_clip"):
        VerifierConfig(cpcv_clip=None)
    with pytest.raises(ConfigError, match="order"):
        VerifierConfig(reward_missing_tag=-0.5)
    with pytest.raises(ConfigError, match=r"priorities.pbo = -1.0: must be 0 or \[1e-06, 1000\]"):
        VerifierConfig(priorities={"pbo": -1.0})
    with pytest.raises(ConfigError, match="invalid_rewards"):
        VerifierConfig(invalid_rewards="lenient")


# ------------------------------------------------------------------------------------- R10
def test_motif_guard_value_takes_away_exactly_the_positive_reward():
    assert ch.motif_guard_value(False, 2.5, 0.3) == 0.0
    for rest in (2.5, 0.31, 0.3, 1e-9, 0.0, -1.0, -7.3):
        value = ch.motif_guard_value(True, rest, 0.3)
        total = rest + 0.3 * value
        assert value <= -1.0 and total <= 0.0
        assert total == pytest.approx(min(rest - 0.3, 0.0), abs=1e-12)


def test_guarded_answers_never_get_a_positive_reward_or_advantage(verifier):
    torch = pytest.importorskip("torch")
    from trainers.advantages import compute_advantages
    answers = _random_answers(120, seed=4)
    g = verifier.score_group(answers)
    assert g.guarded.any(), "no random formula tripped the motif guard"
    assert all(s.reward <= 0.0 and s.channels["motif_guard"] <= -1.0 for s, hit in zip(g.scores, g.guarded) if hit)
    assert not (g.may_win & g.guarded).any()
    for start in range(0, 120, 12):  # groups of 12, as in training
        sl = slice(start, start + 12)
        w = [verifier.config.priorities[c] for c in CHANNELS]
        adv = compute_advantages(torch.as_tensor(g.matrix[sl])[None], w, torch.as_tensor(g.valid[sl])[None],
                                 torch.as_tensor(g.core[sl])[None], guarded=torch.as_tensor(g.guarded[sl])[None])[0]
        assert (adv[torch.as_tensor(g.guarded[sl])] <= 1e-12).all()
        assert abs(adv.sum().item()) < 1e-9


# ------------------------------------------------------------------------------------ parity
EVOLVE_DATABASE = ["rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))", "rank(-returns)"]


@pytest.mark.parametrize("task", ["write", "improve"])
def test_env_step_equals_a_group_of_one(small_synthetic, task):
    """AlphaFormula-v0 and AlphaFormulaEvolve-v0 (parents in the prompt): the reward of score_group([answer])."""
    env = (AlphaFormulaEnv(panel=small_synthetic, archive="frozen") if task == "write" else
           AlphaFormulaEvolveEnv(panel=small_synthetic, archive="frozen", database=EVOLVE_DATABASE))
    reference = Verifier(small_synthetic)
    for answer in INVALID[:4] + _random_answers(8, seed=5):
        _, start = env.reset(seed=0)
        _, reward, _, _, info = env.step(answer)
        direct = reference.score_group([answer], brief=brief_by_id(start["brief_id"])).scores[0]
        assert reward == direct.reward and info["channels"] == direct.channels


def test_trl_reward_functions_score_each_prompt_as_one_group(small_synthetic):
    pytest.importorskip("trl")
    from trainers.trl_adapter import reward_funcs, reward_weights
    v = Verifier(small_synthetic)
    funcs = reward_funcs(v, group_size=3)
    same = "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>"
    completions = [same, same, same, "<alpha>rank(-ts_delta(close, 5))</alpha>", "no tag", same]
    prompts = ["brief a"] * 3 + ["brief b"] * 3
    columns = np.array([f(prompts=prompts, completions=completions) for f in funcs]).T  # (6, 12)
    fresh = Verifier(small_synthetic)
    expected = [s for k in (0, 3) for s in fresh.score_group(completions[k:k + 3]).scores]
    assert columns.tolist() == [[s.channels[c] for c in CHANNELS] for s in expected]
    weights = np.array(reward_weights(v))
    assert [weighted_sum(dict(zip(CHANNELS, row)), v.config.priorities) for row in columns] == \
           [s.reward for s in expected]
    # three identical answers to one prompt are duplicates of each other, as through score_group
    assert columns[0, CHANNELS.index("novelty_pnl")] == pytest.approx(-0.4)
    assert np.allclose(columns @ weights, [s.reward for s in expected], rtol=0, atol=1e-12)
    assert funcs[0].scorer.calls == 2  # two groups, scored once for all 12 channels


# ----------------------------------------------------------------------------------- archive
def _good_answer(verifier) -> str:
    for formula in ("rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))",
                    "rank(-ts_corr(close, volume, 10))", "rank(ts_delta(close, 5))", "rank(-returns)"):
        s = verifier.score_formula(formula)
        if s.valid and s.diagnostics["cpcv"] > verifier.config.archive_min_core:
            return f"<alpha>{formula}</alpha>"
    pytest.fail("no candidate formula clears the archive threshold on this panel")


def test_env_grows_the_archive_across_episodes_unless_frozen(small_synthetic):
    env = AlphaFormulaEnv(panel=small_synthetic)
    answer = _good_answer(env.verifier)
    env.reset(seed=0)
    _, first, _, _, info1 = env.step(answer)
    env.reset()
    _, second, _, _, info2 = env.step(answer)
    assert info2["archive_size"] == info1["archive_size"]  # nothing new the second time
    assert info1["channels"]["novelty_syntax"] >= 0 > info2["channels"]["novelty_syntax"]
    assert info2["channels"]["novelty_pnl"] == pytest.approx(-0.4)  # its own book is now in the archive
    assert second < first

    frozen = AlphaFormulaEnv(panel=small_synthetic, archive="frozen")
    frozen.reset(seed=0)
    a = frozen.step(answer)
    frozen.reset()
    b = frozen.step(answer)
    assert a[1] == b[1] and a[4]["archive_size"] == b[4]["archive_size"]
    with pytest.raises(ValueError, match="archive"):
        AlphaFormulaEnv(panel=small_synthetic, archive="sometimes")


def test_update_archive_takes_valid_answers_above_the_threshold(small_synthetic):
    v = Verifier(small_synthetic, VerifierConfig(archive_min_core=0.0))
    before = len(v.archive)
    g = v.score_group(INVALID + _random_answers(24, seed=6))
    eligible = {ev.form for ev, s in zip(g.evaluated, g.scores) if s.valid and ev.cpcv > 0}
    joined = v.update_archive(g)
    assert 0 < joined <= len(eligible) and len(v.archive) == before + joined
    assert set(v.archive.forms[before:]) <= eligible
    strict = Verifier(small_synthetic, VerifierConfig(archive_min_core=1e9), archive=v.archive.copy())
    assert strict.update_archive(strict.score_group(_random_answers(12, seed=7))) == 0


def _entry(archive: Archive, k: int, rng) -> None:
    archive.add(f"form-{k}", f"text-{k}", rng.standard_normal(archive.n_days), 0.1, np.zeros(15), np.zeros(15))


def test_archive_evicts_the_oldest_learned_entry_and_keeps_seeds():
    rng = np.random.default_rng(0)
    a = Archive("f" * 64, 50, capacity=4, admit_corr=1.0)
    a.add("seed-0", "s", rng.standard_normal(50), -3.0, np.zeros(15), np.zeros(15), seed=True)
    for k in range(6):
        _entry(a, k, rng)
    assert a.forms == ["seed-0", "form-3", "form-4", "form-5"]  # oldest out, whatever its CPCV


def test_archive_load_checks_consistency(tmp_path):
    rng = np.random.default_rng(1)
    a = Archive("f" * 64, 30, capacity=8)
    for k in range(3):
        _entry(a, k, rng)
    path = tmp_path / "a.npz"
    a.save(path)
    assert Archive.load(path, "f" * 64).forms == a.forms

    def tampered(**changes):
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        arrays.update(changes)
        bad = tmp_path / "bad.npz"
        np.savez(bad, **arrays)
        return bad

    z = a._z.copy()
    z[1, 4] = np.nan
    with pytest.raises(ArchiveError, match="non-finite"):
        Archive.load(tampered(z=z), "f" * 64)
    with pytest.raises(ArchiveError, match="shape"):
        Archive.load(tampered(z=a._z[:2]), "f" * 64)
    import json
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
    with pytest.raises(ArchiveError, match="capacity"):
        Archive.load(tampered(meta=np.array(json.dumps({**meta, "capacity": 2}))), "f" * 64)
    with pytest.raises(ArchiveError, match="twice"):
        Archive.load(tampered(meta=np.array(json.dumps({**meta, "forms": ["x", "x", "y"]}))), "f" * 64)


def _save_many(path, worker: int, n: int) -> None:
    rng = np.random.default_rng(100 + worker)
    for k in range(n):
        a = Archive("f" * 64, 40, capacity=1024, admit_corr=1.0)
        _entry(a, worker * 1000 + k, rng)
        a.save(path, merge=True)


def test_two_processes_saving_one_archive_lose_no_entries(tmp_path):
    path = tmp_path / "shared.npz"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_save_many, args=(path, w, 15)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    saved = Archive.load(path, "f" * 64)
    assert sorted(saved.forms) == sorted(f"form-{w * 1000 + k}" for w in (1, 2) for k in range(15))


def test_verifier_fork_keeps_archives_apart(small_synthetic):
    v = Verifier(small_synthetic)
    twin = v.fork()
    answer = _good_answer(v)
    before = len(v.archive)
    assert twin.update_archive(twin.score_group([answer])) == 1
    assert len(v.archive) == before and len(twin.archive) == before + 1
    assert twin.panel is v.panel


# ------------------------------------------------------------------------------ vector envs
ANSWERS = ("<alpha>rank(-ts_delta(close, 5))</alpha>", "no tag", "<alpha>rank(ts_std(volume, 20))</alpha>")


def _run_vector(envs, steps: int = 4):
    envs.reset(seed=0)
    seen = []
    for _ in range(steps):
        _, rewards, terminated, _, infos = envs.step(ANSWERS)
        assert terminated.all()
        seen.append(rewards)
        # every answer of every step was scored: its channels are there (SAME_STEP puts them in final_info)
        final = infos.get("final_info", infos)
        assert "channels" in final and final["_channels"].all() if "_channels" in final else "channels" in final
    envs.close()
    seen = np.array(seen)
    assert np.isfinite(seen).all() and (seen != 0.0).all()
    return seen


def test_sync_and_async_vector_envs_score_every_step(small_synthetic):
    mode = AlphaFormulaEnv.metadata["autoreset_mode"]
    kwargs = dict(panel=small_synthetic, archive="frozen")
    sync = _run_vector(gym.vector.SyncVectorEnv([lambda: AlphaFormulaEnv(**kwargs)] * 3, autoreset_mode=mode))
    asyn = _run_vector(gym.vector.AsyncVectorEnv([lambda: AlphaFormulaEnv(**kwargs)] * 3, autoreset_mode=mode))
    np.testing.assert_array_equal(sync, asyn)
    assert (sync == sync[0]).all()  # frozen archive: the same answers score the same every step
    made = _run_vector(gym.make_vec("AlphaFormula-v0", num_envs=3, **kwargs))
    np.testing.assert_array_equal(made, sync)
    evolve = _run_vector(gym.make_vec("AlphaFormulaEvolve-v0", num_envs=3, database=EVOLVE_DATABASE, **kwargs))
    np.testing.assert_array_equal(evolve, sync)  # the parents change the prompt, never the reward
    envs = make_vector_env(2, "async", **kwargs)  # the prompts arrive whole (not through shared memory)
    assert [o.startswith("Market:") for o in envs.reset(seed=0)[0]] == [True, True]
    envs.close()


def test_no_render_fps_warning(small_synthetic):
    import warnings
    from gymnasium.utils.env_checker import check_env
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(AlphaFormulaEnv(panel=small_synthetic, render_mode="ansi"))
    assert not [w for w in caught if "render fps" in str(w.message)]
    assert math.isfinite(AlphaFormulaEnv.metadata["render_fps"])


def test_a_changed_setting_gives_the_same_changed_reward_on_every_in_process_path(small_synthetic, changed_settings,
                                                                                  tmp_path):
    """A settings file (or its --set items) through the env, the shared verifier and batch scoring: one reward."""
    from alpha_gym.batch.runner import score_batch
    from alpha_gym.pool import shared_verifier
    toml, sets, config = changed_settings
    answers = ["<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>"]
    direct, default = Verifier(small_synthetic, config), Verifier(small_synthetic)
    want = [direct.score(a) for a in answers]
    assert [w.reward for w in want] != [default.score(a).reward for a in answers]
    for w in want:  # the contract holds under the changed priorities too
        assert w.reward == weighted_sum(w.channels, config.priorities)
    env = AlphaFormulaEnv(panel=small_synthetic, config=str(toml), archive="frozen")
    evolve_env = AlphaFormulaEvolveEnv(panel=small_synthetic, config=str(toml), archive="frozen",
                                       database=EVOLVE_DATABASE)
    for a in answers:  # the env scores with its episode's brief: R13 (on in the changed settings) reads it
        for e in (env, evolve_env):
            _, info = e.reset(seed=0)
            w = direct.score(a, brief=brief_by_id(info["brief_id"]))
            _, reward, _, _, info = e.step(a)
            assert reward == w.reward and info["channels"] == w.channels and w.channels["brief"] > 0
    table = {"verifier": {"turnover_cap": 0.4, "priorities": {"cpcv": 1.0, "brief": 1.0, "book": 3.0}}}
    for v in (shared_verifier(small_synthetic, str(toml)), shared_verifier(small_synthetic, settings=sets),
              shared_verifier(small_synthetic, table)):
        assert [v.score(a).reward for a in answers] == [w.reward for w in want]
    pool = tmp_path / "pool.txt"
    pool.write_text("\n".join(a.removeprefix("<alpha>").removesuffix("</alpha>") for a in answers) + "\n")
    out = tmp_path / "scored.jsonl"
    score_batch(small_synthetic, pool, out, workers=0, progress=False, config=config)
    import json
    assert [json.loads(line)["score"]["reward"] for line in out.read_text().splitlines()] == [w.reward for w in want]
