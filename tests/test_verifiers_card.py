"""docs/verifiers-environment.md, the verifiers environment's card in the Prime Environments Hub's layout (issue 43.4):
its sections, its arguments table against `load_environment`'s signature, its metrics table against the rewards the
tasks carry, and its quickstart run as written."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "docs" / "verifiers-environment.md"
SOURCE = ROOT / "alpha_gym" / "integrations" / "verifiers.py"
SECTIONS = ["Overview", "Datasets", "Task", "Quickstart", "Environment Arguments", "Metrics", "Example outputs"]


def _table(heading: str) -> list[list[str]]:
    """The rows (cells, code ticks and escapes removed) of the first table under `### heading`."""
    text = CARD.read_text(encoding="utf-8").split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
    rows = [ln for ln in text.splitlines() if ln.startswith("|")][2:]
    return [[c.strip().replace("\\|", "|").strip("`") for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def _signature() -> list[tuple[str, str | None, str]]:
    """(name, annotation or None, default's source) of every argument of `load_environment`, read from the source
    (no verifiers import needed)."""
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "load_environment")
    args = fn.args.args + fn.args.kwonlyargs
    defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + fn.args.defaults + fn.args.kw_defaults
    return [(a.arg, None if a.annotation is None else ast.unparse(a.annotation), ast.unparse(d))
            for a, d in zip(args, defaults)]


def test_the_card_has_the_hubs_sections_in_order():
    headings = re.findall(r"^### (.+)$", CARD.read_text(encoding="utf-8"), flags=re.M)
    assert headings == SECTIONS


def test_the_arguments_table_is_load_environments_signature():
    rows = _table("Environment Arguments")
    signature = _signature()
    assert [r[0] for r in rows] == [name for name, _, _ in signature]
    for (name, annotation, default), (_, typ, shown, description) in zip(signature, rows):
        assert shown.replace('"', "'") == default.replace('"', "'"), f"{name}: default {shown} != {default}"
        if annotation is not None:
            assert typ == annotation, f"{name}: type {typ} != {annotation}"
        assert typ and description, name


def test_the_metrics_table_is_what_each_task_reports():
    rows = {r[0]: r[1] for r in _table("Metrics")}
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    task = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AlphaTask")
    decorated = {f.name: ast.unparse(f.decorator_list[0]) for f in task.body
                 if isinstance(f, ast.AsyncFunctionDef) and f.decorator_list}
    metrics = {k for k, d in decorated.items() if d == "vf.metric"}
    rewards = {k for k, d in decorated.items() if d.startswith("vf.reward")}
    assert set(rows) == {"reward"} | set(CHANNELS) | metrics | rewards
    assert {k: float(rows[k]) for k in CHANNELS} == DEFAULT_PRIORITIES
    assert all(rows[k] == "metric" for k in metrics) and all(float(rows[k]) == 1.0 for k in rewards)


def test_the_example_outputs_are_the_kept_baseline_eval():
    """The card's example outputs quote a kept eval folder, and its numbers and answers are that folder's."""
    text = CARD.read_text(encoding="utf-8").split("### Example outputs", 1)[1].split("\n## ", 1)[0]
    named = re.search(r"Kept in\s+`(benchmarks/results/[\w.-]+)/`", text)
    assert named, "the example outputs name no kept folder under benchmarks/results/"
    folder = CARD.parents[1] / named.group(1)
    summary = json.loads((folder / "eval.json").read_text())
    train = summary["train"]
    row = f"| {summary['answered']}/{summary['items']} | {train['n_valid']}/{summary['items']} "
    assert row in text, f"the card's counts differ from {folder}/eval.json"
    assert f"| {train['mean_reward']:.2f} | {train['mean_cpcv']:.2f} |" in text
    held = summary["holdout"]   # one validity on every window: holdout valid never above train valid
    assert f"| {held['n_valid']}/{summary['items']} | {held['mean_score']:+.2f} |" in text
    assert held["n_valid"] <= train["n_valid"]
    answers = {r["answer"]: r for r in map(json.loads, (folder / "answers.jsonl").read_text().splitlines())}
    quoted = re.findall(r"\| `(<alpha>.*?</alpha>)` \| ([+-]?[\d.]+) \|", text)
    assert len(quoted) >= 3
    for answer, reward in quoted:
        assert answer in answers and float(reward) == pytest.approx(answers[answer]["reward"], abs=0.005)


def test_the_quickstart_runs_as_written(capsys):
    pytest.importorskip("verifiers.v1", reason="verifiers (verifiers.v1) is not installed")
    block = re.search(r"```python\n(.*?)```", CARD.read_text(encoding="utf-8"), flags=re.S).group(1)
    exec(compile(block, str(CARD), "exec"), {})  # noqa: S102 - the card's own example
    brief_id, reward, valid, exact = capsys.readouterr().out.split()
    from alpha_gym.market.resolve import default_panel
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    want = Verifier(default_panel()).score("<alpha>rank(-ts_delta(close, 5))</alpha>")
    assert brief_id == brief_set("probe")[0].id and float(exact) == want.reward and float(valid) == 1.0
    assert float(reward) == pytest.approx(want.reward, abs=1e-12)
