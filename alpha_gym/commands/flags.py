"""The flags every `alpha-gym` command shares: market data, dates, universe, and the settings file.

Declared once here so that each command reads `--data/--universe/--start/--end` and `--config/--set`
the same way and reports a bad value with the flag's name.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: Suffixes that mark a --universe value as a file name, never a ticker list.
_UNIVERSE_FILE_SUFFIXES = (".txt", ".csv", ".lst", ".tsv", ".list")
#: What a long flag looks like (`--max-bytes`, `--set=K=V`); any other word that starts with "--" is a value.
_LONG_FLAG = re.compile(r"--[A-Za-z][A-Za-z0-9_-]*(=.*)?", re.S)


class Parser(argparse.ArgumentParser):
    """argparse that reads a word starting with "-" as a value (`alpha-gym score "-rank(close)"`) unless it is
    one of the parser's flags (`-h`) or shaped like a long flag (`--json`, `--typo`: still an error).

    Every flag but -h is long, so a single-dash word is never a flag misread; `--` still ends the flags.
    """

    def _parse_optional(self, arg_string):
        if arg_string.startswith("-") and arg_string != "--":
            single = not arg_string.startswith("--") and arg_string.split("=", 1)[0] not in self._option_string_actions
            if single or (arg_string.startswith("--") and not _LONG_FLAG.fullmatch(arg_string)):
                return None  # a positional value or an option's value
        return super()._parse_optional(arg_string)

    def error(self, message):
        if "unrecognized arguments: --" in message:
            message += " (a formula shaped like a flag goes after --, e.g. alpha-gym score -- --close)"
        super().error(message)


def iso_date(value: str) -> str:
    """argparse type of a date flag: YYYY-MM-DD, a real calendar day (argparse names the flag in its error)."""
    text = value.strip()
    try:
        if not _ISO_DATE.fullmatch(text):
            raise ValueError
        import numpy as np
        np.datetime64(text, "D")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (use YYYY-MM-DD, e.g. 2024-08-20)") from None
    return text


def port_arg(value: str) -> int:
    """argparse type of a --port flag: a TCP port 1-65535 (argparse names the flag in its error)."""
    try:
        port = int(value.strip())
    except ValueError:
        port = None
    if port is None or not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TCP port (use 1-65535, e.g. 8000)")
    return port


def fold_arg(allow_all: bool = False):
    """argparse type of --fold: a walk-forward fold number, 1..5 as ASCII digits (`alpha_gym.market.folds`), or
    `all` where `allow_all`. A number is kept as text: whether its windows fit is known once the data is read."""
    from alpha_gym.market.folds import ALL_FOLDS, FoldError, FoldPlan, fold_number

    def parse(value: str) -> str:
        if allow_all and value == ALL_FOLDS:
            return value
        try:
            return str(fold_number(value, FoldPlan().n_folds))
        except FoldError as err:
            raise argparse.ArgumentTypeError(f"{err}{'; or all: every fold' if allow_all else ''}") from None
    parse.__name__ = "fold"
    return parse


def universe_arg(value):
    """--universe: an existing ticker file (returned as an absolute path), or tickers separated by commas.

    A value that looks like a path (a slash or a file suffix) but names no file is an error:
    read as a ticker list it would fail later with a confusing "ticker not found".
    """
    if value is None or isinstance(value, list):
        return value
    if Path(value).is_file():
        return str(Path(value).resolve())
    if "/" in value or os.sep in value or value.lower().endswith(_UNIVERSE_FILE_SUFFIXES):
        raise FileNotFoundError(f"--universe {value}: no such file (give a ticker file, or tickers separated "
                                "by commas)")
    return [t.strip() for t in value.split(",") if t.strip()]


def add_data_args(p: argparse.ArgumentParser, dates: bool = True, data_flag: str = "--data") -> None:
    """--data, --universe and (with `dates`) --start/--end: the training window a command reads."""
    p.add_argument(data_flag, dest=data_flag.lstrip("-").replace("-", "_"),
                   help="CSV/CSV.gz/Parquet in the long format date,ticker,open,high,low,close,volume "
                        "(default: the embedded synthetic market)")
    p.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    if dates:
        p.add_argument("--start", type=iso_date, help="first session (YYYY-MM-DD)")
        p.add_argument("--end", type=iso_date, help="last session (YYYY-MM-DD); nothing after it is read")


def panel_from_args(args, data_attr: str = "data"):
    """The training panel the data flags name (the embedded synthetic market without --data)."""
    from alpha_gym.market.resolve import resolve_panel
    return resolve_panel(data=getattr(args, data_attr), universe=universe_arg(args.universe),
                         train_start=getattr(args, "start", None), train_end=getattr(args, "end", None))


def add_settings_args(p: argparse.ArgumentParser) -> None:
    """--config FILE and --set KEY=VALUE (repeatable): the settings file (`alpha-gym config show`)."""
    p.add_argument("--config", metavar="FILE", help="settings TOML (alpha-gym config show prints every default)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="settings",
                   help="change one setting, e.g. --set verifier.turnover_cap=0.4 (repeatable; after --config)")


def settings_from_args(args, overrides=None):
    """The effective settings: defaults, --config, each --set, then what the command's own flags say."""
    from alpha_gym.settings import load
    return load(getattr(args, "config", None), getattr(args, "settings", ()) or (), overrides)


def add_task_arg(p: argparse.ArgumentParser) -> None:
    """--task NAME: the settings' [train] task given on the command line (the prompts a model answers)."""
    from alpha_gym.tasks.task import DEFAULT_TASK, TASKS
    p.add_argument("--task", metavar="NAME",
                   help=f"the task whose prompts the model answers: {', '.join(TASKS)} (default: the settings' "
                        f"train.task, {DEFAULT_TASK}); the same setting as --set train.task=NAME")


def task_overrides(args) -> dict:
    """--task as the setting it stands for, {"train": {"task": NAME}} (applied after --config and --set; {} without
    the flag). A name the task table does not hold is a ConfigError naming the flag and the tasks."""
    from alpha_gym.errors import ConfigError
    from alpha_gym.ranges import shown
    from alpha_gym.tasks.task import TASKS
    task = getattr(args, "task", None)
    if task is None:
        return {}
    if task not in TASKS:
        raise ConfigError(f"--task {shown(task)}: not a task; the tasks: {', '.join(TASKS)}")
    return {"train": {"task": task}}


def settings_task(settings) -> str:
    """The task the settings name ([train] task from --config, --set or --task), the default task where none."""
    from alpha_gym.tasks.prompts import check_task
    from alpha_gym.tasks.task import DEFAULT_TASK
    return check_task("train", settings.given.get("train", {}).get("task", DEFAULT_TASK))


def task_prompts_of(settings, verifier, briefs) -> list[str]:
    """The prompts of a command that answers briefs without a training loop (holdout, eval, the SFT probe): the
    settings' task under the verifier's limits, brief i's the Gym env's after `reset(seed=prompt_seed(i))`, as the
    comparison's probe renders them."""
    from alpha_gym.search.task_prompts import task_prompts
    return task_prompts(settings_task(settings), verifier, owner="train").prompts(briefs)
