"""`--task NAME` on every command that renders prompts for a model (train, compare, holdout, eval, sft's probe): the
settings' [train] task given on the command line, so the command's consumer renders that task's prompts (the Gym env's
for the task, brief and seed, under the verifier's limits); a name that is no task is one line naming the flag and the
tasks, exit status 2. No model is loaded: each command's own settings function and the consumer it calls."""

from __future__ import annotations

import pytest

from alpha_gym.commands.main import build_parser, main
from alpha_gym.env import AlphaFormulaEnv, AlphaFormulaEvolveEnv
from alpha_gym.errors import ConfigError
from alpha_gym.search.task_prompts import task_prompts
from alpha_gym.tasks.prompts import TaskPrompts, prompt_seed
from alpha_gym.tasks.sets import brief_set
from alpha_gym.tasks.task import DEFAULT_TASK, TASKS

BRIEFS = tuple(brief_set("probe")[:3])
#: Each command with the flag and the arguments it needs to parse (nothing here is read before the task is checked).
COMMANDS = {
    "train": ["train"],
    "compare": ["compare"],
    "holdout": ["holdout", "--data", "market.csv", "--holdout-start", "2020-01-02"],
    "eval": ["eval", "--model", "m", "--out", "eval-out", "--report-only"],
    "sft": ["sft", "--data", "rows.jsonl", "--out", "sft-out"],
}


def _args(command: str, *more: str):
    return build_parser().parse_args([*COMMANDS[command], *more])


def _settings(command: str, args):
    """The settings the command renders its prompts from: its own settings function."""
    if command == "train":
        from alpha_gym.commands.train import settings_from_train_args
        return settings_from_train_args(args)
    if command == "compare":
        from alpha_gym.commands.compare import compare_settings
        return compare_settings(args)
    if command in ("holdout", "eval"):
        from alpha_gym.commands.evaluation import _holdout_settings
        return _holdout_settings(args)
    from alpha_gym.commands.sft import probe_settings_of
    return probe_settings_of(args)


def _consumer_task(command: str, args) -> str:
    """The task the command hands its consumer (the training loop, the comparison's scale, the prompts of the
    commands without a loop), read through the command's own functions."""
    settings = _settings(command, args)
    if command == "train":       # the loop renders task_prompts(config.task, verifier)
        from alpha_gym.commands.train import config_from_args
        return config_from_args(args).task
    if command == "compare":     # the probe and best-of-N render the scale's TrainConfig.task
        from alpha_gym.commands.compare import _scale
        return _scale(args, settings).train_config("dapo").task
    from alpha_gym.commands.flags import settings_task
    return settings_task(settings)


def _rendered(command: str, args, verifier) -> list[str]:
    """The prompts the command's consumer renders for BRIEFS (the consumer called with what the command hands it)."""
    task = _consumer_task(command, args)
    if command == "train":
        return task_prompts(task, verifier, owner="TrainConfig").prompts(BRIEFS)
    if command == "compare":
        from trainers.compare.runner import probe_prompts
        return probe_prompts(verifier, BRIEFS, task)
    if command == "sft":         # probe_valid_rate(task=)
        return task_prompts(task, verifier, owner="probe_valid_rate").prompts(BRIEFS)
    from alpha_gym.commands.flags import task_prompts_of
    return task_prompts_of(_settings(command, args), verifier, BRIEFS)


@pytest.fixture(scope="module")
def verifier(small_synthetic):
    from alpha_gym.scoring.verifier import Verifier
    return Verifier(small_synthetic)


@pytest.fixture(scope="module")
def envs(verifier):
    return {"write": AlphaFormulaEnv(verifier=verifier, briefs=list(BRIEFS), archive="frozen"),
            "improve": AlphaFormulaEvolveEnv(verifier=verifier, briefs=list(BRIEFS), archive="frozen")}


def test_every_command_that_answers_briefs_with_a_model_takes_the_flag():
    """The commands above have it, sft-data has its own --task (which pairs it builds), and no other has one."""
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    with_flag = {name for name, sub in subcommands.items() if "--task" in sub._option_string_actions}
    assert with_flag == set(COMMANDS) | {"sft-data"}
    for name in COMMANDS:
        text = subcommands[name].format_help()
        assert "--task NAME" in text and all(task in text for task in TASKS) and "train.task" in text


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_flag_renders_the_tasks_prompts(command, task, verifier, envs):
    got = _rendered(command, _args(command, "--task", task), verifier)
    seeds = [prompt_seed(i) for i in range(len(BRIEFS))]
    assert got == [envs[task].reset(seed=s, options={"brief_id": b.id})[0] for b, s in zip(BRIEFS, seeds)]
    if not TASKS[task].context:     # the write task: what a TaskPrompts under the verifier's limits gives
        assert got == TaskPrompts(task, verifier.config.limits).prompts(BRIEFS)
    assert _settings(command, _args(command, "--task", task)).given["train"]["task"] == task


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_flag_is_the_train_task_setting(command, verifier):
    """--task and --set train.task=NAME are one setting: the consumer gets the same task; the flag, given after,
    wins; without either, the default task's prompts."""
    for task in TASKS:
        assert _consumer_task(command, _args(command, "--set", f"train.task={task}")) == task
        assert _consumer_task(command, _args(command, "--task", task)) == task
        for other in TASKS:
            assert _consumer_task(command, _args(command, "--set", f"train.task={other}", "--task", task)) == task
    assert _consumer_task(command, _args(command)) == DEFAULT_TASK
    assert _rendered(command, _args(command), verifier) == TaskPrompts(limits=verifier.config.limits).prompts(BRIEFS)


#: Names that are no task: other cases, spaces, near misses, lists, numbers, markup, other scripts, empty.
BAD_NAMES = ("", " ", "WRITE", "Write", "IMPROVE", " write", "write ", "write\n", "writ", "writes", "improves",
             "improv", "write,improve", "write improve", "write;improve", "1", "0", "None", "null", "true", "*",
             "wr*te", "wrïte", "ｗｒｉｔｅ", "write\x00", "-write", "task=write", "train.task=write", "'write'",
             "<write>", "w" * 300)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_task_is_one_line_naming_the_tasks_and_exit_2(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # nothing a command might write lands in the checkout
    for name in BAD_NAMES:
        assert main([*COMMANDS[command], "--task", name]) == 2, repr(name)
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, (repr(name), err)
        assert "--task" in err and "the tasks: " + ", ".join(TASKS) in err and "Traceback" not in err, err
        with pytest.raises(ConfigError):
            _settings(command, _args(command, "--task", name))
