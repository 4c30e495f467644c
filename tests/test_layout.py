"""The layout a reader relies on: no import cycles, each package's `__init__` states its idea.

Imports are read from the source (every `import`, also inside functions: a lazy import is still a
dependency a reader has to follow; and every module loaded by name, `importlib.import_module("...")`,
`__import__("...")` or a "module:function" string of a table, which is one too). The command-line modules (`alpha_gym/commands/`) are a floor of their
own, the top one: they wire packages together, so they may import any of them and none imports them. No
module is exempt from the floors.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("alpha_gym", "trainers")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path) -> set[str]:
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        deps.update(r for r in map(_resolve, names) if r)
    return deps | _string_imports(path.read_text())


#: A module named in a string: "alpha_gym.x.y", or an entry point "trainers.mutator:from_spec".
_MODULE_STRING = re.compile(r"(?:%s)(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?" % "|".join(PACKAGES))
_LOADERS = {"import_module", "__import__"}


def _string_imports(source: str) -> set[str]:
    """The modules a source loads by name at run time: the literal argument of `importlib.import_module(...)` or
    `__import__(...)`, and any "module:function" entry point of the packages (a table row loaded on use). A
    dependency all the same, so it counts toward floors and cycles. A plain module name elsewhere (a package's
    data read with `resources.files("alpha_gym.language")`, a logger's name) loads no code and is none."""
    found, loaded = set(), set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in _LOADERS:
                loaded.add(id(node.args[0]))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and _MODULE_STRING.fullmatch(node.value) and (id(node) in loaded or ":" in node.value)):
            continue
        text = node.value
        if text:
            module = text.partition(":")[0]
            if module in MODULES or (module.rpartition(".")[0] in MODULES and "." in module.rpartition(".")[0]):
                found.add(_resolve(module))
    return found


def _graph() -> dict[str, set[str]]:
    """Library modules -> the library modules they import (the package roots, which only re-export, left out)."""
    roots = set(PACKAGES)
    g = {}
    for m, path in MODULES.items():
        if m in roots:
            continue
        g[m] = {d for d in _imports(path) if d != m and d not in roots}
    return g


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package(module: str) -> str:
    """alpha_gym.scoring.verifier -> alpha_gym.scoring; a top-level module (alpha_gym.env) is its own unit."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "alpha_gym" else parts[0]


def test_no_import_cycle_between_modules():
    assert _cycles(_graph()) == []


def test_no_import_cycle_between_packages():
    packages: dict[str, set[str]] = {}
    for m, deps in _graph().items():
        packages.setdefault(_package(m), set()).update(_package(d) for d in deps if _package(d) != _package(m))
    assert _cycles(packages) == []


def test_the_environment_does_not_import_the_trainers():
    """alpha_gym's library (every floor below the commands: the env imports without torch) imports no trainer;
    the commands (`alpha-gym train`, `compare`) do, one floor above both."""
    offenders = {m: sorted(d for d in deps if d.startswith("trainers"))
                 for m, deps in _graph().items() if m.startswith("alpha_gym") and not _is_command(m)}
    assert {m: d for m, d in offenders.items() if d} == {}


#: The floors, lowest first. A module imports from its own floor and the floors below, never from one
#: above: the market knows nothing of books, a book nothing of scores, the scoring nothing of the holdout
#: evaluation, the settings nothing of evaluation or the trainers, and the training loop gets its briefs
#: and panels without the Gym env (nothing but the commands is built on it). The commands are the top
#: floor: they read flags, call any package and print; nothing below imports them. The package roots,
#: which only re-export, are left out (see the module docstring).
FLOORS = (
    ("alpha_gym.errors", "alpha_gym.ranges", "alpha_gym.jsonable", "alpha_gym._version", "alpha_gym.user_cache",
     "alpha_gym.threads", "alpha_gym.folder_stamp"),                                            # the basement: utilities every floor uses
    ("alpha_gym.language", "alpha_gym.market"),                       # the ground: formulas, market data
    ("alpha_gym.alpha101", "alpha_gym.book"),                         # formulas as data; weights, P&L, costs
    ("alpha_gym.tasks",),                                             # the briefs
    ("alpha_gym.stress",),                                            # the world model (R3)
    ("alpha_gym.scoring",),                                           # the verifier and its configs
    ("alpha_gym.settings", "alpha_gym.pool"),                         # the settings file; the verifier pool
    ("alpha_gym.evaluation", "alpha_gym.service", "alpha_gym.batch"),  # holdout and reports; serving scores
    ("alpha_gym.search",),                                            # the model-free search control
    ("alpha_gym.integrations", "trainers"),                           # other libraries' glue; the trainers
    ("alpha_gym.env",),                                               # the Gym env
    ("alpha_gym.commands", "alpha_gym.__main__"),                     # the `alpha-gym` command line
)
_FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}


def _is_command(module: str) -> bool:
    return _package(module) in FLOORS[-1]


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module from a higher floor than its own, as "importer -> imported (floor i -> j)"."""
    return sorted(f"{m} -> {d} (floor {_FLOOR[_package(m)]} -> {_FLOOR[_package(d)]})"
                  for m, deps in graph.items() for d in deps
                  if _package(m) in _FLOOR and _package(d) in _FLOOR and _FLOOR[_package(d)] > _FLOOR[_package(m)])


def test_every_package_stands_on_one_floor():
    units = {_package(m) for m in _graph()}
    listed = [u for floor in FLOORS for u in floor]
    assert len(listed) == len(set(listed)), "a package is on two floors"
    assert sorted(units - set(listed)) == [], "place each new package on a floor of FLOORS"
    assert sorted(set(listed) - units) == [], "FLOORS names a package that is not in the tree"


def test_no_module_imports_from_a_higher_floor():
    assert _upward_imports(_graph()) == []


def test_the_floor_rule_catches_what_it_forbids():
    graph = {"alpha_gym.market.synthetic": {"alpha_gym.book.metrics", "alpha_gym.market.panel"},
             "trainers.loop": {"alpha_gym.env", "alpha_gym.tasks.sets"},
             "alpha_gym.settings": {"alpha_gym.scoring.config"},
             "alpha_gym.integrations.openenv_server": {"alpha_gym.commands.flags"},
             "alpha_gym.commands.train": {"trainers.loop", "alpha_gym.commands.flags"}}
    assert _upward_imports(graph) == ["alpha_gym.integrations.openenv_server -> alpha_gym.commands.flags "
                                      "(floor 9 -> 11)",
                                      "alpha_gym.market.synthetic -> alpha_gym.book.metrics (floor 1 -> 2)",
                                      "trainers.loop -> alpha_gym.env (floor 9 -> 10)"]


@pytest.mark.parametrize("package", sorted(p for p in MODULES if MODULES[p].name == "__init__.py"))
def test_each_package_states_its_idea(package):
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text()))
    assert doc and len(doc.split()) >= 5, f"{package}/__init__.py needs a docstring saying what the folder is for"


def test_string_imports_are_read_as_imports():
    """importlib and __import__ with a literal name, and entry-point strings of a table, are arrows like `import`;
    a docstring that names a module in prose, a variable name or another package's module is none."""
    source = '\n'.join([
        'import importlib',
        'a = importlib.import_module("alpha_gym.scoring.verifier")',
        'b = __import__("alpha_gym.language")',
        'ROW = ("model", "trainers.mutator:from_spec")',
        'c = importlib.import_module(name)',                     # not a literal: cannot be read
        'd = importlib.import_module("numpy.linalg")',           # not ours
        'e = "see alpha_gym.book.metrics for the costs"',         # prose
        'f = importlib.import_module("alpha_gym.no_such_module")',
        'g = resources.files("alpha_gym.book").joinpath("x")',    # data, not code
        'h = "alpha_gym.book.metrics"',                           # a name that nothing here loads
    ])
    assert _string_imports(source) == {"alpha_gym.scoring.verifier", "alpha_gym.language", "trainers.mutator"}
    for spelling in ('import_module("trainers.loop")', 'importlib.import_module("trainers.loop")',
                     '__import__("trainers.loop")', 'x = "trainers.loop:train"', 'f("a", "trainers.loop:train")',
                     'ROWS = {"x": "trainers.loop:train"}', 'importlib.import_module("trainers.loop", package=None)',
                     'importlib.import_module("trainers.loop.train")', "lib.import_module('trainers.loop')"):
        assert _string_imports(spelling) == {"trainers.loop"}, spelling


def test_a_string_import_upward_or_in_a_loop_is_caught():
    """The rules see a string import: one from a lower floor to a higher is upward, and one that closes a loop with
    plain imports makes a cycle (a search table loading a trainer that imports the table back)."""
    graph = {"alpha_gym.search.mutators": _string_imports('ROW = "trainers.mutator:from_spec"'),
             "trainers.mutator": {"alpha_gym.search.mutators"}}
    assert _upward_imports(graph) == ["alpha_gym.search.mutators -> trainers.mutator (floor 8 -> 9)"]
    assert _cycles(graph) == [["alpha_gym.search.mutators", "trainers.mutator"]]



#: The experiment's wing: the comparison's arms, the files each keeps and the stamps that guard its folders.
WING = "trainers.compare.arms"
#: What only the wing does: write an arm's kept files (the writers of `alpha_gym.evaluation.kept`, the format one
#: floor down that `alpha-gym eval` and `holdout-formulas` read too), define how an arm keeps them, define the
#: stamps of a comparison's folders. Calling a keeper or a stamp (the run does) is not writing one.
_WING_DEFS = ("keep_answers", "keep_evolve", "keep_run_book", "answer_rows", "claim_out_dir", "out_settings",
              "check_kept_model")
_WING_CODE = re.compile(r"^\s*(?!def\b).*\b(write_kept|control_numbers)\(|^\s*def (%s)\(" % "|".join(_WING_DEFS), re.M)


def _wing_offenders(sources: dict[str, str]) -> list[str]:
    """The modules outside the wing that do what only the wing does (the kept format's own module aside)."""
    return sorted(m for m, text in sources.items()
                  if m != "alpha_gym.evaluation.kept" and not m.startswith(WING + ".") and _WING_CODE.search(text))


def test_the_arms_keep_their_files_and_stamps_in_one_wing():
    """Every module that writes an arm's kept files or defines a comparison folder's stamp is in
    trainers/compare/arms/; the evolution run (`alpha_gym.search.evolve_arm`) is handed its arm's keeper and
    imports no trainer."""
    sources = {m: path.read_text() for m, path in MODULES.items()}
    assert _wing_offenders(sources) == []
    assert [m for m, text in sources.items() if m.startswith(WING + ".") and _WING_CODE.search(text)], \
        "the wing writes the kept files: the rule would pass on a tree that has none"
    assert _wing_offenders({"trainers.best_of_n": "    write_kept(results, seed, name, rows, numbers)",
                            "alpha_gym.search.evolve_arm": "numbers = control_numbers(name, 'evolve', seed)",
                            "trainers.compare.runner": "def claim_out_dir(out, settings):",
                            "trainers.compare.run": "claim_out_dir(out, stamp)\nkept = check_kept_model(r, i)",
                            "trainers.compare.arms.kept": "write_kept(results, seed, name, rows, numbers)",
                            "alpha_gym.evaluation.kept": "def write_kept(results, seed, name, rows, numbers):"}) == [
        "alpha_gym.search.evolve_arm", "trainers.best_of_n", "trainers.compare.runner"]

def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_layout_table_matches_the_tree():
    """Every package folder (and top-level package) has a row in docs/architecture.md's Layout table, and every
    row exists."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Layout"):]
    table = table[: table.index("\n## ", 1)] if "\n## " in table[1:] else table
    named = set(re.findall(r"`([a-z_][a-z0-9_/.]*)`", table))
    folders = {f"{p.parent.relative_to(ROOT).as_posix()}/" for p in ROOT.glob("alpha_gym/*/__init__.py")}
    folders |= {"trainers/", "benchmarks/"}
    assert folders <= named, f"docs/architecture.md's Layout table misses {sorted(folders - named)}"
    for entry in named:
        if "/" in entry or entry.endswith(".py"):
            assert (ROOT / entry.rstrip("/")).exists(), f"the Layout table names {entry}, which is not in the tree"


# the names are split so this file does not match its own rule
_LOAD_BY_PATH = re.compile("|".join(("spec_from_" + "file_location", r"\brun" + r"py\b", "SourceFile" + "Loader",
                                     r"exec\(\s*open\(", r"module_from_" + "spec")))


def test_tests_import_modules_never_files_by_path():
    """A test imports what it tests by module name (`alpha_gym...`, `trainers...`, `benchmarks.NAME`)."""
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "tests").rglob("*.py"))
                 if _LOAD_BY_PATH.search(p.read_text())]
    assert offenders == []


def test_no_benchmark_or_package_module_edits_sys_path():
    """Benchmark scripts import the installed package; a helper they share is imported from the script's folder."""
    files = [*ROOT.glob("benchmarks/*.py"), *(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))]
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted(files) if re.search(r"\bsys\.path\b", p.read_text())]
    assert offenders == []


def test_the_layout_rules_catch_what_they_forbid():
    assert _LOAD_BY_PATH.search('spec = importlib.util.spec_from_' + 'file_location("m", ROOT / "b.py")')
    assert _LOAD_BY_PATH.search("import run" + "py") and not _LOAD_BY_PATH.search("import json")
