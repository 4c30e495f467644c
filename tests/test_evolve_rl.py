"""RL on the mutation operator (issue 40.3): the real SmolLM2-135M with LoRA adapters as `evolve`'s mutator.

The run spends exactly its budget (training makes no call) and its history records each update; the adapters
change at an update with a learning signal and only then; a run stopped and resumed ends as the uninterrupted
one (database, history, adapters); a bad setting is a typed clear error, and a resume with other settings is
refused. The start model at 12 tokens writes no parseable answer, so every group of a tiny run is all invalid
and its advantages are 0 (the validity projection): the adapters' move is shown on one group given rewards
that differ, through the same `observe` the run calls.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from alpha_gym.search.database import DatabaseConfig
from alpha_gym.search.evolution import STATE_FILE, EvolutionError, evolve
from trainers.mutators import make_mutator

from test_controls import CountingVerifier  # the real verifier, counting every answer it scores

torch = pytest.importorskip("torch")
from trainers.evolve_rl import EvolveRLError, TrainedMutator  # noqa: E402
from trainers.models import adapter_state, load_base  # noqa: E402

SEEDS = ["rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))",
         "-1 * ts_corr(rank(open), rank(volume), 10)", "rank(-returns)"]
TINY = dict(answers_per_set=2, max_new_tokens=12, learning_rate=1e-3, lora_r=4, lora_alpha=8, beta=0.0)  # no ref pass


@pytest.fixture(scope="module")
def smollm2():
    return load_base(None)


def _mutator(smollm2, **kw) -> TrainedMutator:
    torch.set_num_threads(1)                 # one thread: the resumed run must repeat the float sums
    return TrainedMutator(loaded=copy.deepcopy(smollm2), **{**TINY, **kw})


def _run(v, m, budget, out, progress=None):
    return evolve(v, m, DatabaseConfig(n_islands=1), budget, seed=3, seed_formulas=SEEDS, group_size=4,
                  max_rounds=1, out_dir=out, progress=progress)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_update_moves_the_adapters_when_rewards_differ_and_a_reloaded_learner_goes_on_alike(smollm2, tmp_path):
    from alpha_gym.language import parse
    from alpha_gym.search.database import ProgramDatabase
    db = ProgramDatabase(DatabaseConfig(n_islands=1))
    db.add(SEEDS[0], parse(SEEDS[0]), 0.3, 0.1, 0.5, 0.2, 0.01, 0.1)
    a, b = _mutator(smollm2, train_every=1), _mutator(smollm2, train_every=1)
    rng = np.random.default_rng(0)
    start = adapter_state(a.policy)
    assert len(a.propose([db.programs] * 2, rng)) == 2
    assert a.observe([(-22.0, False), (-23.0, False)])["nonzero_adv"] == 0.0      # all invalid: no signal
    assert _same(start, adapter_state(a.policy))
    a.propose([db.programs] * 2, rng)
    rec = a.observe([(0.4, True), (-1.0, True)])                                # two valid, rewards differ
    assert rec["nonzero_adv"] == 1.0 and rec["update"] == 2 and rec["loss"] != 0.0
    assert not _same(start, adapter_state(a.policy))
    a.propose([db.programs] * 2, rng)                       # an answer awaiting its reward travels in the state
    a.save_state(tmp_path / "s.pt")
    b.load_state(tmp_path / "s.pt")
    assert _same(adapter_state(a.policy), adapter_state(b.policy)) and b.updates == 2
    for m in (a, b):
        m.observe([(0.1, True), (-0.5, True)])
    assert _same(adapter_state(a.policy), adapter_state(b.policy))
    with pytest.raises(EvolveRLError, match="another trained mutator"):
        _mutator(smollm2, train_every=3).load_state(tmp_path / "s.pt")


def test_the_run_spends_its_exact_budget_logs_each_update_and_resumes_as_the_uninterrupted_one(
        smollm2, small_synthetic, tmp_path):
    v = CountingVerifier(small_synthetic)
    straight = _mutator(smollm2, train_every=2)
    seen = []                                 # the adapters after each group, beside the group's updates
    a = _run(v, straight, 12, tmp_path / "a",
             lambda row: seen.append((adapter_state(straight.policy), row["updates"])))
    assert v.counted[0] == a.calls == 12                            # training makes no verifier call
    done = [r["updates"]["rl"] for r in a.history if r["updates"]]
    assert len(done) == straight.updates == 1 and straight.observed == len(a.history) - 1 == 2  # group 1: seeds
    assert {"loss", "mean_reward", "nonzero_adv", "answers", "duplicates", "valid", "kl"} <= set(done[0])
    assert 0.0 <= done[0]["nonzero_adv"] <= 1.0 and done[0]["answers"] == straight.stats["answers"] == 8
    for (before, _), (after, upd) in zip(seen, seen[1:]):         # a move exactly at an update with a signal
        assert _same(before, after) == (not upd or upd["rl"]["nonzero_adv"] == 0.0)
    log = [json.loads(x) for x in (tmp_path / "a" / "proposals.jsonl").read_text().splitlines()]
    assert sum(r["origin"] == "rl" for r in log) == 8

    _run(CountingVerifier(small_synthetic), _mutator(smollm2, train_every=2), 8, tmp_path / "b")   # stopped at 8
    resumed = _mutator(smollm2, train_every=2)                      # a fresh one; group 2's answers await an update
    b = _run(CountingVerifier(small_synthetic), resumed, 12, tmp_path / "b")
    drop = lambda rows: [{k: v for k, v in r.items() if k != "budget"} for r in rows]   # noqa: E731 (the run's ask)
    assert a.calls == b.calls == 12 and drop(a.history) == drop(b.history)
    assert a.database.to_dict() == b.database.to_dict()
    assert _same(adapter_state(straight.policy), adapter_state(resumed.policy)) and straight.updates == resumed.updates
    assert json.loads((tmp_path / "b" / STATE_FILE).read_text())["learners"]["rl"].startswith("learner-rl-")
    with pytest.raises(EvolutionError, match="other settings"):       # another train_every: refused
        _run(CountingVerifier(small_synthetic), _mutator(smollm2, train_every=1), 20, tmp_path / "b")


@pytest.mark.parametrize("kw, match", [
    ({"train_every": 0}, "train_every must be an integer >= 1"),
    ({"recipe": "nope"}, "unknown recipe 'nope'"),
    ({"recipe": "cispo_repo_r"}, "REPO-R or ADAPO"),
    ({"answers_per_set": 1}, "answers_per_set must be an integer >= 2"),
])
def test_a_bad_setting_is_a_typed_clear_error(kw, match):
    with pytest.raises(EvolveRLError, match=match):
        TrainedMutator(loaded=(None, None), **kw)


def test_the_spec_names_its_settings_and_refuses_what_it_cannot_read():
    for spec, match in (("rl:every=0", "train_every"), ("rl:speed=3", "reads recipe=, group="),
                        ("rl:group=x", "group must be an integer"), ("rl:recipe=zz", "unknown recipe")):
        with pytest.raises(EvolveRLError, match=match):
            make_mutator(spec, verifier=None, limits=None, seed=0)


def test_the_command_names_a_bad_rl_setting_and_exits_2(tmp_path, capsys):
    from alpha_gym.commands.main import main
    assert main(["evolve", "--mutator", "rl:every=0", "--budget", "8", "--out", str(tmp_path / "run"),
                 "--pseudo-holdout", "120", "--probe", "2"]) == 2
    assert "train_every must be an integer >= 1, got 0" in capsys.readouterr().err
