"""The task reaches its consumers: for each task and each consumer (the training loop, best-of-N, the probe, SFT
data, the verl / skyrl / verifiers dataset rows, OpenEnv), the prompt the consumer renders is the Gym env's for the
same task, brief, seed and verifier, and a non-default verifier limit shows up in it; an unknown task name is a
SettingError (a typed ConfigError) naming the consumer's setting."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.env import AlphaFormulaEnv, AlphaFormulaEvolveEnv
from alpha_gym.errors import ConfigError
from alpha_gym.language.parser import Limits
from alpha_gym.ranges import SettingError
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.task_prompts import task_prompts
from alpha_gym.tasks.prompts import TaskPrompts, prompt_seed
from alpha_gym.tasks.sets import brief_set

ROOT = Path(__file__).resolve().parents[1]
#: Limits no default prompt states: each number appears in the DSL reference's lines.
NARROW = Limits(max_window=60, max_lookback=120, max_tokens=64, max_depth=9)
NARROW_SETS = ("verifier.limits.max_window=60", "verifier.limits.max_lookback=120", "verifier.limits.max_tokens=64",
               "verifier.limits.max_depth=9")
NARROW_LINES = ("1..60)", "lookback <= 120 sessions, <= 64 tokens, depth <= 9.")
TASK_NAMES = ("write", "improve")
BRIEFS = tuple(brief_set("train")[:3])


@pytest.fixture(scope="module")
def market_csv(small_synthetic, write_market_csv, tmp_path_factory):
    return str(write_market_csv(small_synthetic, tmp_path_factory.mktemp("market") / "market.csv.gz"))


@pytest.fixture(scope="module")
def narrow(market_csv):
    """The integrations' shared verifier under NARROW limits (the one their reward functions score with)."""
    from alpha_gym.pool import shared_verifier
    return shared_verifier(data=market_csv, settings=NARROW_SETS)


@pytest.fixture(scope="module")
def envs(narrow):
    """The reference: each task's Gym env on the narrow verifier."""
    return {"write": AlphaFormulaEnv(verifier=narrow, briefs=list(BRIEFS), archive="frozen"),
            "improve": AlphaFormulaEvolveEnv(verifier=narrow, briefs=list(BRIEFS), archive="frozen")}


def env_prompt(envs, task: str, brief, seed: int) -> str:
    return envs[task].reset(seed=seed, options={"brief_id": brief.id})[0]


def shows_narrow_limits(prompt: str) -> bool:
    return all(line in prompt for line in NARROW_LINES)


def test_the_narrow_limits_are_what_the_verifier_holds_answers_to(narrow, envs):
    assert narrow.config.limits == NARROW
    for task in TASK_NAMES:
        prompt = env_prompt(envs, task, BRIEFS[0], 0)
        assert shows_narrow_limits(prompt) and not shows_narrow_limits(TaskPrompts().prompt(BRIEFS[0]))


@pytest.mark.parametrize("task", TASK_NAMES)
def test_the_training_loop_renders_the_envs_prompts(task, narrow, envs):
    from trainers.config import TrainConfig
    from trainers.loop import briefs_for_step
    config = TrainConfig(task=task, prompts_per_step=3, seed=7)
    source = task_prompts(config.task, narrow, owner="TrainConfig")   # what `train` builds
    for step in (1, 2):
        chosen = briefs_for_step(list(BRIEFS), config, step)
        got = source.prompts(chosen, config.seed, step)                 # what step `step` templates
        want = [env_prompt(envs, task, b, prompt_seed(config.seed, step, i)) for i, b in enumerate(chosen)]
        assert got == want and all(map(shows_narrow_limits, got))
    if task == "improve":  # the seed reaches the parents: two steps' prompts of one brief differ
        assert source.prompt(BRIEFS[0], 1) != source.prompt(BRIEFS[0], 2)


def test_no_consumer_renders_a_prompt_of_its_own():
    """Each consumer asks its TaskPrompts: none calls `render_prompt` beside it (which would state other limits)."""
    for path in ("trainers/loop.py", "trainers/compare/arms/best_of_n.py", "trainers/sft.py",
                 "trainers/compare/runner.py", "alpha_gym/tasks/sft_data.py", "alpha_gym/integrations/verl.py",
                 "alpha_gym/integrations/skyrl.py", "alpha_gym/integrations/verifiers.py",
                 "alpha_gym/integrations/openenv.py"):
        names = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(ast.parse((ROOT / path).read_text()))
                 if isinstance(n, (ast.Name, ast.Attribute))}
        assert "render_prompt" not in names, f"{path} renders a prompt outside the task's prompts"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_best_of_n_renders_the_envs_prompts(task, narrow, envs):
    source = task_prompts(task, narrow, owner="TrainConfig")            # what run_best_of_n_rung passes
    got = source.prompts(BRIEFS, 42)                                  # what sample_and_pick templates
    assert got == [env_prompt(envs, task, b, prompt_seed(42, i)) for i, b in enumerate(BRIEFS)]
    assert all(map(shows_narrow_limits, got))
    default = TaskPrompts(limits=narrow.config.limits).prompts(BRIEFS, 42)   # sample_and_pick without a task
    assert default == [env_prompt(envs, "write", b, 0) for b in BRIEFS]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_the_probe_renders_the_envs_prompts(task, narrow, envs):
    from trainers.compare.runner import probe_prompts
    got = probe_prompts(narrow, BRIEFS, task)
    assert got == [env_prompt(envs, task, b, prompt_seed(i)) for i, b in enumerate(BRIEFS)]
    assert all(map(shows_narrow_limits, got))


@pytest.mark.parametrize("task", TASK_NAMES)
def test_sft_pairs_carry_the_envs_prompts(task, narrow, envs):
    from alpha_gym.tasks.sft_data import pair_rows
    found = {b.id: [{"formula": "rank(ts_delta(close, 5))", "cpcv": 0.1, "turnover": 0.2, "compliance": 1.0,
                     "checks": 1}] for b in BRIEFS}
    rows = pair_rows(BRIEFS, found, prompts=task_prompts(task, narrow))
    assert [r["brief_id"] for r in rows] == [b.id for b in BRIEFS]
    got = [r["prompt"][0]["content"] for r in rows]
    assert got == [env_prompt(envs, task, b, prompt_seed(i)) for i, b in enumerate(BRIEFS)]
    assert all(map(shows_narrow_limits, got))


def test_sft_data_renders_under_the_verifiers_limits_by_default(small_synthetic, tmp_path):
    from alpha_gym.tasks.sft_data import build_sft_dataset
    import json
    verifier = Verifier(small_synthetic, VerifierConfig(limits=NARROW))
    out = tmp_path / "pairs.jsonl"
    summary = build_sft_dataset(verifier, BRIEFS, out, pool_size=60, per_brief=1)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["rows"] == len(rows) > 0
    for row in rows:
        brief = next(b for b in BRIEFS if b.id == row["brief_id"])
        assert row["prompt"][0]["content"] == AlphaFormulaEnv(verifier=verifier, briefs=[brief]).reset(seed=0)[0]
        assert shows_narrow_limits(row["prompt"][0]["content"])


def _verl(task, market_csv):
    from alpha_gym.integrations.verl import dataset_rows
    return [r["prompt"][0]["content"] for r in dataset_rows(list(BRIEFS), task, 3, data=market_csv,
                                                            settings=NARROW_SETS)]


def _skyrl(task, market_csv):
    from alpha_gym.integrations.skyrl import dataset_rows
    return [r["prompt"][0]["content"] for r in dataset_rows(list(BRIEFS), task, 3, data=market_csv,
                                                            settings=NARROW_SETS)]


def _verifiers(task, market_csv):
    from alpha_gym.integrations.verifiers import load_environment
    taskset = load_environment(briefs="train", data=market_csv, settings=NARROW_SETS, task=task, seed=3)
    tasks = list(taskset.load())[: len(BRIEFS)]
    assert [t.data.brief_id for t in tasks] == [b.id for b in BRIEFS]
    return [t.data.prompt for t in tasks]


@pytest.mark.parametrize("task", TASK_NAMES)
@pytest.mark.parametrize("rows", [_verl, _skyrl, _verifiers], ids=["verl", "skyrl", "verifiers"])
def test_the_integrations_dataset_rows_carry_the_envs_prompts(rows, task, market_csv, envs):
    got = rows(task, market_csv)
    assert got == [env_prompt(envs, task, b, prompt_seed(3, i)) for i, b in enumerate(BRIEFS)]
    assert all(map(shows_narrow_limits, got))


@pytest.mark.parametrize("task", TASK_NAMES)
def test_openenv_resets_to_the_envs_prompts(task, market_csv, narrow):
    from alpha_gym.integrations.openenv import AlphaAction, AlphaEnvironment
    env = AlphaEnvironment(briefs="train", data=market_csv, settings=NARROW_SETS, task=task)
    gym_env = (AlphaFormulaEnv if task == "write" else AlphaFormulaEvolveEnv)(verifier=narrow, briefs="train",
                                                                             archive="frozen")
    for seed in (0, 5):
        obs = env.reset(seed=seed)
        want, info = gym_env.reset(seed=seed)
        assert (obs.brief_id, obs.prompt) == (info["brief_id"], want) and shows_narrow_limits(obs.prompt)
        assert env.step(AlphaAction(answer="<alpha>rank(close)</alpha>")).prompt == want
    obs = env.reset(seed=9, brief_id=BRIEFS[1].id)
    assert obs.prompt == gym_env.reset(seed=9, options={"brief_id": BRIEFS[1].id})[0]


# ------------------------------------------------------------------------------- with the model: what it is asked
@pytest.fixture(scope="module")
def smollm():
    from trainers.models import load_base
    return load_base(None)


@pytest.fixture
def asked(monkeypatch):
    """Every text the local-model paths chat-template (`trainers.rollout.chat_prompt`, the one template), in order:
    the real function runs; the list records what it was given."""
    import trainers.rollout as rollout
    texts, template = [], rollout.chat_prompt

    def recording(tokenizer, text):
        texts.append(text)
        return template(tokenizer, text)
    monkeypatch.setattr(rollout, "chat_prompt", recording)
    return texts


@pytest.mark.parametrize("task", TASK_NAMES)
def test_a_training_step_asks_the_envs_prompts(task, narrow, envs, smollm, asked, tmp_path):
    import copy
    from trainers.config import TrainConfig
    from trainers.loop import briefs_for_step, train
    config = TrainConfig(task=task, prompts_per_step=3, num_generations=2, steps_per_generation=1, num_iterations=1,
                         max_completion_length=4, beta=0.0, seed=11, log_completions=False)
    train(config, narrow.fork(), list(BRIEFS), tmp_path / "run", model=(copy.deepcopy(smollm[0]), smollm[1]),
          steps=1, progress=False)
    chosen = briefs_for_step(list(BRIEFS), config, 1)
    assert asked == [env_prompt(envs, task, b, prompt_seed(11, 1, i)) for i, b in enumerate(chosen)]
    assert all(map(shows_narrow_limits, asked))


@pytest.mark.parametrize("task", TASK_NAMES)
def test_best_of_n_samples_the_envs_prompts(task, narrow, envs, smollm, asked):
    from trainers.compare.arms.best_of_n import Sampling, sample_and_pick
    grown = narrow.fork()
    picked = sample_and_pick(smollm[0], smollm[1], grown, BRIEFS, Sampling(2, 1.0, 4), seed=42,
                             task=task_prompts(task, grown, owner="TrainConfig"))
    assert [p["brief_id"] for p in picked] == [b.id for b in BRIEFS]
    assert asked == [env_prompt(envs, task, b, prompt_seed(42, i)) for i, b in enumerate(BRIEFS)]
    assert all(map(shows_narrow_limits, asked))


def test_sft_probe_asks_the_envs_prompts(narrow, envs, asked):
    from trainers.sft import probe_valid_rate
    for task in TASK_NAMES:
        asked.clear()
        probe_valid_rate(None, narrow.fork(), BRIEFS, max_new_tokens=2, task=task)
        assert asked == [env_prompt(envs, task, b, prompt_seed(i)) for i, b in enumerate(BRIEFS)]
        assert all(map(shows_narrow_limits, asked))


# ------------------------------------------------------------------------------------------ unknown tasks
#: Spellings of a task that is not one: near misses, case, whitespace, types, containers.
BAD_TASKS = ("Write", "WRITE", "improve ", " write", "wrtie", "imporve", "rewrite", "", "write\n", "improve\x00",
             "évolve", "0", None, 0, 1, 1.5, True, False, ["write"], ("improve",), {"task": "write"}, b"write")


def _consumers(narrow, market_csv):
    """Each consumer's task setting, as a function of the value."""
    from trainers.compare.runner import probe_prompts
    from trainers.config import TrainConfig, train_config_from_table
    from alpha_gym.integrations.openenv import AlphaEnvironment
    from alpha_gym.integrations.skyrl import dataset_rows as skyrl_rows
    from alpha_gym.integrations.verifiers import load_environment
    from alpha_gym.integrations.verl import dataset_rows as verl_rows
    return {
        "TrainConfig (loop, best-of-N)": lambda v: TrainConfig(task=v),
        "[train] table": lambda v: train_config_from_table({"task": v}),
        "probe": lambda v: probe_prompts(narrow, BRIEFS, v),
        "TaskPrompts (SFT data)": lambda v: TaskPrompts(task=v),
        "task_prompts": lambda v: task_prompts(v, narrow),
        "verl.dataset_rows": lambda v: verl_rows(list(BRIEFS), v, data=market_csv),
        "skyrl.dataset_rows": lambda v: skyrl_rows(list(BRIEFS), v, data=market_csv),
        "verifiers.load_environment": lambda v: load_environment(data=market_csv, task=v),
        "AlphaEnvironment": lambda v: AlphaEnvironment(data=market_csv, task=v),
    }


def misbehaving(consumers) -> list[str]:
    """(consumer, value) pairs whose unknown task is not a one-line ConfigError (SettingError, or the settings
    file's type check) naming the task setting and what it must be."""
    bad = []
    for name, make in consumers.items():
        for value in BAD_TASKS:
            try:
                make(value)
            except ConfigError as err:
                msg = str(err)
                if "\n" in msg or "task" not in msg or not ("write, improve" in msg or "string" in msg):
                    bad.append(f"{name}: {value!r}: {msg}")
                continue
            except Exception as err:  # noqa: BLE001 - any other error is what this counts
                bad.append(f"{name}: {value!r}: {type(err).__name__}")
                continue
            bad.append(f"{name}: {value!r}: accepted")
    return bad


def test_an_unknown_task_is_a_typed_error_in_every_consumers_setting(narrow, market_csv):
    consumers = _consumers(narrow, market_csv)
    assert misbehaving(consumers) == []
    assert len(consumers) * len(BAD_TASKS) == 198
    assert issubclass(SettingError, ConfigError)
    with pytest.raises(SettingError, match=r"TrainConfig\.task = 'wrtie': must be one of write, improve"):
        consumers["TrainConfig (loop, best-of-N)"]("wrtie")
    with pytest.raises(SettingError, match=r"train\.task = 'imprve'"):
        consumers["[train] table"]("imprve")


def test_the_default_task_leaves_the_write_prompts_and_settings_as_they_were(narrow):
    """Default settings change nothing: the write task reads no seed, and best-of-N's kept settings gain no key."""
    from trainers.config import RECIPES, TrainConfig
    assert TrainConfig().task == "write" and all(r.task == "write" for r in RECIPES.values())
    source = task_prompts("write", narrow)
    assert {source.prompt(BRIEFS[0], s) for s in range(5)} == {BRIEFS[0].prompt(NARROW)}
    assert source.drawn(BRIEFS[0], np.random.default_rng(1)) == BRIEFS[0].prompt(NARROW)
