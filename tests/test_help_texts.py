"""Help texts are for users: every command's and subcommand's `--help` (description, epilog, every flag's help)
names no issue number and carries no note on how the code is built, and what it lists comes from the tables."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_gym.commands.main import build_parser

ROOT = Path(__file__).resolve().parents[1]

#: What a user should never read in a help text: an issue number in any spelling, and notes addressed to the
#: developer of the module (how its flags are declared, what "this module" does, a to-do).
DEVELOPER_TEXT = re.compile(r"\(\s*issues?\s+\d|\bissues?\s*#?\s*\d+|\badd_arguments\b|\bthis module\b|"
                            r"\bTODO\b|\bFIXME\b|\bXXX\b|\bregister\(|\bcmd_\w+", re.IGNORECASE)


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("alpha-gym",)):
    """(path, parser) for the parser and every subcommand below it, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


PARSERS = list(_parsers(build_parser()))
#: Commands run as modules, with parsers of their own.
MODULE_COMMANDS = ("trainers.compare.floor_trap", "alpha_gym.evaluation.kept", "alpha_gym.scoring.archive",
                   "alpha_gym.commands.openenv_server")


def _offending(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if DEVELOPER_TEXT.search(line)]


def test_every_subcommand_is_walked():
    names = {" ".join(path) for path, _ in PARSERS}
    assert len(PARSERS) >= 20 and {"alpha-gym score", "alpha-gym evolve", "alpha-gym stress fit"} <= names


@pytest.mark.parametrize("path,parser", PARSERS, ids=[" ".join(p) for p, _ in PARSERS])
def test_a_help_text_names_no_issue_and_no_developer_note(path, parser):
    assert _offending(parser.format_help()) == []


@pytest.mark.parametrize("module", MODULE_COMMANDS)
def test_a_module_commands_help_names_no_issue_and_no_developer_note(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-500:]
    assert _offending(done.stdout) == []


@pytest.mark.parametrize("text", [
    "(issue 40)", "(issue 40.2)", "( issues 2 and 3)", "issue 39 item 3", "Issue 42", "ISSUE #12", "issues 11 and 16",
    "see issue#7", "`add_arguments(parser)` declares the flags", "this module only reads the flags",
    "TODO: say more", "FIXME", "register(sub) adds it", "cmd_compare reads them"])
def test_the_rule_catches_each_spelling(text):
    assert _offending(f"--flag  {text}") != []


@pytest.mark.parametrize("text", [
    "an issuer's 40 stocks", "the 14 channels (R1..R14)", "tissue 5", "registers the world model",
    "--register-only 3", "the module's 2 threads"])
def test_the_rule_leaves_ordinary_words_alone(text):
    assert _offending(text) == []


def test_the_comparison_help_names_every_arm_of_the_table():
    pytest.importorskip("torch", reason="`compare` needs the train extra (torch)")
    from trainers.compare.arms import ARMS
    compare = dict((" ".join(p), parser) for p, parser in PARSERS)["alpha-gym compare"]
    text = " ".join(compare.format_help().split())
    assert [a.name for a in ARMS if a.name not in text] == []
    controls = re.search(r"controls, no training and the same verifier calls: ([\w, ]+)\)", text)
    assert controls and controls.group(1).split(", ") == [a.name for a in ARMS if a.kind == "control"]
