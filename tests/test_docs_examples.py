"""The docs hold what the code holds: every Python block of docs/architecture.md and docs/extending.md runs as
written, the floors table is tests/test_layout.py's FLOORS, the extension recipes name the places the code
has, every relative link of the docs resolves, and README stays a short front page that pins no test count."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from test_layout import FLOORS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXECUTED = ("architecture.md", "extending.md")


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S)


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


BLOCKS = [(page, i, block) for page in EXECUTED for i, block in enumerate(_blocks(page))]


def _run(block: str, where: str) -> dict:
    if "trainers" in block or "torch" in block:
        pytest.importorskip("torch", reason="the trainers' examples need the train extra (torch)")
    # a module of its own, so that a dataclass declared in the block finds its module as it would in a file
    module = types.ModuleType(f"docs_example_{re.sub(r'[^a-z0-9]+', '_', where)}")
    sys.modules[module.__name__] = module
    try:
        exec(compile(block, where, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


@pytest.mark.parametrize("page,index,block", BLOCKS, ids=[f"{p}-{i}" for p, i, _ in BLOCKS])
def test_every_python_block_of_the_design_docs_runs_as_written(page, index, block):
    _run(block, f"docs/{page} block {index}")


def test_each_design_page_has_examples_to_run():
    assert len(_blocks("architecture.md")) >= 2 and len(_blocks("extending.md")) >= 5


def test_an_operator_entry_without_a_bound_is_refused_as_extending_says():
    from alpha_gym.language.operators import OperatorSpecError
    block = next(b for b in _blocks("extending.md") if "ts_zscore" in b)
    assert ",\n            bound=ts_zscore_bound)" in block
    _run(block, "the operator example")
    with pytest.raises(OperatorSpecError, match="rounding bound"):
        _run(block.replace(",\n            bound=ts_zscore_bound)", ")"), "the operator example without bound=")


def test_the_floors_table_is_the_layout_tests_floors():
    rows = re.findall(r"^\| (\d+) \| (.+?) \| .+ \|$", _section("architecture.md", "## Floors"), flags=re.M)
    assert [int(n) for n, _ in rows] == list(range(len(FLOORS)))
    assert [tuple(re.findall(r"`([\w.]+)`", units)) for _, units in rows] == [tuple(f) for f in FLOORS]


def test_every_path_the_architecture_page_names_exists():
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:alpha_gym|trainers|tests|benchmarks|docs)/[\w./]*)`", text))
    paths = {p for p in paths if "NAME" not in p}
    assert len(paths) >= 30
    assert sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists()) == []


def test_the_loss_recipe_names_every_place_the_code_branches_on_a_loss():
    """Each `name` in the loss table's rows is defined in the file of its row; and every trainer module that
    branches on a loss name is a row (a new module branching on `loss_type` makes the recipe incomplete)."""
    section = _section("extending.md", "## A policy loss")
    rows = re.findall(r"^\| `(trainers/[\w/]+\.py)` \| (.+) \|$", section, flags=re.M)
    assert len(rows) >= 3   # the row (config.py), the formula (losses.py), the TRL map (trl_adapter.py)
    for path, what in rows:
        source = (ROOT / path).read_text(encoding="utf-8")
        for name in re.findall(r"`(\w+)`", what):
            if name[0].isupper() or name.startswith("_"):
                assert re.search(rf"\b{name}\b", source), f"{path} has no {name}"
    branching = {p.relative_to(ROOT).as_posix() for p in (ROOT / "trainers").rglob("*.py")
                 if re.search(r"loss_type (==|in) ", p.read_text(encoding="utf-8"))}
    assert branching <= {path for path, _ in rows}, branching - {path for path, _ in rows}


def test_the_arm_recipe_names_every_control_and_rung_outside_the_ladder():
    pytest.importorskip("torch", reason="the arms table needs the train extra (torch)")
    from trainers.compare.arms import ARMS, LADDER
    section = _section("extending.md", "## A comparison arm")
    ladder = {rung for rung, _, _ in LADDER}
    named = [a.name for a in ARMS if a.name not in ladder]
    assert named and [n for n in named if f"`{n}`" not in section] == []


def test_the_mutator_recipe_names_every_row():
    from trainers.mutators import MUTATORS
    section = _section("extending.md", "## A mutator")
    assert [r.name for r in MUTATORS if f"`{r.name}`" not in section] == []


# ------------------------------------------------------------------------------ links and the front page
LINKED = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted(DOCS.glob("*.md")),
          *sorted((ROOT / "benchmarks" / "notes").glob("*.md"))]
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", LINKED, ids=[p.relative_to(ROOT).as_posix() for p in LINKED])
def test_every_relative_link_resolves(page):
    missing = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve()
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
            missing.append(target)
    assert missing == [], f"{page.relative_to(ROOT)} links to {missing}"


def test_the_link_check_sees_links_and_misses():
    page = ROOT / "README.md"
    links = _relative_links(page)
    assert "docs/architecture.md" in links and "BENCHMARKS.md" in links
    assert not (page.parent / "docs/no-such-page.md").exists()
    anchors = _anchors(DOCS / "evaluation.md")
    assert "a-trained-model-served-by-llamacpp" in anchors and "evaluate-a-model-behind-an-endpoint" in anchors
    assert "the-reward-contract" in _anchors(DOCS / "rewards.md") and "no-such-heading" not in anchors


def test_readme_is_a_front_page_that_links_every_doc_and_pins_no_test_count():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    linked = set(_relative_links(ROOT / "README.md"))
    assert sorted(p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md")
                  if p.relative_to(ROOT).as_posix() not in linked) == []
    assert not re.search(r"\b\d[\d,]* tests\b", text), "the suite's size is printed by every run, not pinned here"


@pytest.mark.parametrize("page", LINKED, ids=[p.relative_to(ROOT).as_posix() for p in LINKED])
def test_every_code_fence_is_closed(page):
    """An unclosed fence swallows the prose after it into the code block."""
    fences = re.findall(r"^\s*```", page.read_text(encoding="utf-8"), flags=re.M)
    assert len(fences) % 2 == 0


def test_the_readme_quickstart_runs_as_written():
    """README's first Python block: the env on the synthetic market, one brief, one scored answer."""
    block = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)[0]
    assert 'gym.make("AlphaFormula-v0")' in block and "env.step(" in block
    namespace = _run(block, "README quickstart")
    assert namespace["info"]["valid"] is True and namespace["terminated"] is True
    assert isinstance(namespace["reward"], float) and set(namespace["info"]["channels"]) >= {"cpcv", "turnover"}


def test_the_readme_commands_table_names_every_command():
    import argparse
    from alpha_gym.commands.main import build_parser
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Commands"):readme.index("\n## ", readme.index("## Commands") + 1)]
    first_cells = [row.split(" | ")[0] for row in table.splitlines() if row.startswith("| `alpha-gym")]
    listed = {name for cell in first_cells for name in re.findall(r"`alpha-gym ([a-z-]+)", cell)}
    assert len(commands) >= 15 and sorted(set(commands) - listed) == []
    long_form = (DOCS / "commands.md").read_text(encoding="utf-8")
    assert sorted(c for c in commands if f"`alpha-gym {c}" not in long_form) == []
