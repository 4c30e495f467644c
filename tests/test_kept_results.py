"""The answers kept under benchmarks/results/ are what the trainer tables of the benchmark notes rest on
(benchmarks/notes/, linked from BENCHMARKS.md): compare-cpu (30 steps a rung) and compare-long (100 steps, the
RL rungs against their controls).

Three checks, from cheap to thorough: each run's numbers agree with its kept answers; the note shows the kept
table; and rebuilding the table from the kept answers on the real panel gives it back exactly.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REAL_DATA_DIR, _require_real_data

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


#: A kept comparison: its folder, the steps each run trained (a control spends as many steps' verifier calls),
#: how many runs it keeps at least, the benchmark note and its section whose first table is its table, a rung its
#: page names.
@dataclass(frozen=True)
class Kept:
    name: str
    steps: int
    runs: int
    note: str
    section: str
    rung: str

    @property
    def folder(self) -> Path:
        return RESULTS / self.name

    @property
    def runs_kept(self) -> list[Path]:  # rungs and controls
        return sorted(p for p in self.folder.glob("seed-*/*.json") if not p.name.endswith(".book.json"))


COMPARISONS = [
    Kept("compare-cpu", 30, 15, "trainer-comparison.md", "## Trainer comparison under the reward contract",
         "cispo_repo_r_dora_filtered"),
    Kept("compare-long", 100, 12, "long-runs.md", "## Long runs against the controls", "cispo_repo_r_gate"),
]
each_comparison = pytest.mark.parametrize("kept", COMPARISONS, ids=[k.name for k in COMPARISONS])


def _assert_same_numbers(a, b, where: str) -> None:
    """The same JSON tree: keys, strings, booleans and nulls equal; floats to 1e-12 relative (1e-15 absolute)."""
    import math
    if isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            _assert_same_numbers(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_numbers(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), f"{where}: {a!r} != {b!r}"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def _table(text: str) -> list[str]:
    """The rung table's rows (the lines that start with '| ' between the title and the footnote)."""
    start = text.index("| rung | seeds |")
    rows = []
    for line in text[start:].splitlines():
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


@each_comparison
def test_every_kept_run_matches_its_answers(kept):
    runs = kept.runs_kept
    assert len(runs) >= kept.runs, f"{kept.name} keeps at least {kept.runs} runs (rungs and controls x seeds)"
    settings = json.loads((kept.folder / "settings.json").read_text())
    n_probe = len(settings["probe_briefs"])
    assert settings["scale_settings"]["steps"] == kept.steps
    for path in runs:
        run = json.loads(path.read_text())
        rows = [json.loads(line) for line in path.with_suffix(".jsonl").read_text().splitlines()]
        assert [r["brief_id"] for r in rows] == settings["probe_briefs"][:n_probe], path
        assert {r["step"] for r in rows} == {run["selected_step"]}, path
        shipped = {c["step"]: c for c in run["checkpoints"]}[run["selected_step"]]
        valid = [r["train_cpcv"] for r in rows if r["train_valid"]]
        assert len(valid) == shipped["train_valid"], path
        assert sum(valid) / len(valid) == pytest.approx(shipped["train_cpcv"], abs=1e-9), path
        # the shipped checkpoint is the one train CPCV prefers (ties go to the earlier step)
        assert shipped["train_cpcv"] == max(c["train_cpcv"] for c in run["checkpoints"]), path
        if run["prompts"] == "none":  # a control: a rung's verifier calls (steps x 2 prompts x 8), no training
            assert run["verifier_calls"] <= run["budget"] == kept.steps * 2 * 8, path
            assert run["selected_step"] == kept.steps, path
        elif run["config"].get("refill_rounds"):  # refills are paid for with steps: the calls are the budget's
            assert run["train_seconds"] > 0 and run["steps"] <= kept.steps, path
            assert run["steps"] * 2 * 8 <= run["verifier_calls"] <= kept.steps * 2 * 8, path
        else:
            assert run["train_seconds"] > 0 and run["steps"] == kept.steps, path


@each_comparison
def test_every_kept_run_book_is_chosen_from_its_admitted_formulas(kept):
    books = sorted(kept.folder.glob("seed-*/*.book.json"))
    assert books, "the controls keep their own books"
    for path in books:
        book = json.loads(path.read_text())
        admitted = [json.loads(x) for x in path.with_name(path.name.replace(".book.json", ".archive.jsonl"))
                    .read_text().splitlines()]
        assert book["n_admitted"] == len({a["formula"] for a in admitted}) or book["n_admitted"] == len(admitted)
        assert set(book["members"]) <= {a["formula"] for a in admitted} and book["n_members"] == len(book["members"])


@each_comparison
def test_the_benchmark_note_shows_the_kept_table(kept):
    table = _table((kept.folder / "comparison.md").read_text())
    note = (ROOT / "benchmarks" / "notes" / kept.note).read_text()
    section = note[note.index(kept.section):]
    assert _table(section) == table


@pytest.mark.slow
@each_comparison
def test_the_kept_table_is_rebuilt_from_the_kept_answers(tmp_path, kept):
    _require_real_data()
    from alpha_gym.commands.main import main
    results = tmp_path / "results"
    shutil.copytree(kept.folder, results)
    (results / "comparison.md").unlink()
    (results / "seeds.png").unlink(missing_ok=True)
    out = tmp_path / "out"
    assert main(["compare", "--scale", "cpu", "--report-only", "--results", str(results), "--out",
                 str(out), "--data", str(REAL_DATA_DIR / "us_daily_train.csv.gz"),
                 "--universe", str(REAL_DATA_DIR / "universe_us46.txt")]) == 0
    assert (out / "comparison.md").read_text() == (kept.folder / "comparison.md").read_text()
    # every number of the report, not only those the table rounds: byte for byte on the kind of machine that
    # wrote it; another CPU's vector units sum in another order, so numbers agree there to 1e-12 relative
    rebuilt, before = (out / "report.json").read_text(), (kept.folder / "report.json").read_text()
    if rebuilt != before:
        _assert_same_numbers(json.loads(rebuilt), json.loads(before), "report.json")
    assert (out / "seeds.png").stat().st_size > 10_000
    # --report-only writes into --out: the kept folder changes only with --update-results
    assert not (results / "comparison.md").exists() and not (results / "seeds.png").exists()


@each_comparison
def test_the_kept_folder_opens_as_a_comparison_page(tmp_path, kept):
    """`alpha-gym report` on the kept answers alone: the table, the baselines and the seeds plot, no empty runs."""
    from alpha_gym.evaluation.report import write_report
    folder = tmp_path / kept.name
    shutil.copytree(kept.folder, folder)
    page = write_report(folder).read_text()
    assert "alpha-gym trainer comparison" in page and kept.rung in page
    assert "<h3>Seeds</h3>" in page and page.count("data:image/png") >= 2
    assert "<h2>Checkpoints</h2>" not in page and "<h2>Training</h2>" not in page
    assert 'src="http' not in page
