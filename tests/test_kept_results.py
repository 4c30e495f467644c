"""The answers kept under benchmarks/results/compare-cpu are what BENCHMARKS.md's trainer table rests on.

Three checks, from cheap to thorough: each run's numbers agree with its kept answers; BENCHMARKS.md shows
the kept table; and rebuilding the table from the kept answers on the real panel gives it back exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REAL_DATA_DIR, _require_real_data

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "benchmarks" / "results" / "compare-cpu"
RUNS = sorted(p for p in KEPT.glob("seed-*/*.json") if not p.name.endswith(".book.json"))  # rungs and controls


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


def test_every_kept_run_matches_its_answers():
    assert len(RUNS) >= 15, "the cpu comparison keeps 5 rungs x 3 seeds"
    settings = json.loads((KEPT / "settings.json").read_text())
    n_probe = len(settings["probe_briefs"])
    for path in RUNS:
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
        if run["prompts"] == "none":  # a control: a rung's verifier calls (30 steps x 2 prompts x 8), no training
            assert run["verifier_calls"] <= run["budget"] == 30 * 2 * 8 and run["selected_step"] == 30, path
        else:
            assert run["train_seconds"] > 0 and run["steps"] == 30, path


def test_every_kept_run_book_is_chosen_from_its_admitted_formulas():
    books = sorted(KEPT.glob("seed-*/*.book.json"))
    assert books, "the controls keep their own books"
    for path in books:
        book = json.loads(path.read_text())
        admitted = [json.loads(x) for x in path.with_name(path.name.replace(".book.json", ".archive.jsonl"))
                    .read_text().splitlines()]
        assert book["n_admitted"] == len({a["formula"] for a in admitted}) or book["n_admitted"] == len(admitted)
        assert set(book["members"]) <= {a["formula"] for a in admitted} and book["n_members"] == len(book["members"])


def test_benchmarks_md_shows_the_kept_table():
    kept = _table((KEPT / "comparison.md").read_text())
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    section = benchmarks[benchmarks.index("## Trainer comparison under the reward contract"):]
    assert _table(section) == kept


@pytest.mark.slow
def test_the_kept_table_is_rebuilt_from_the_kept_answers(tmp_path):
    _require_real_data()
    from alpha_gym.cli import main
    results = tmp_path / "results"
    shutil.copytree(KEPT, results)
    (results / "comparison.md").unlink()
    (results / "seeds.png").unlink(missing_ok=True)
    assert main(["compare", "--scale", "cpu", "--report-only", "--results", str(results), "--out",
                 str(tmp_path / "out"), "--data", str(REAL_DATA_DIR / "us_daily_train.csv.gz"),
                 "--universe", str(REAL_DATA_DIR / "universe_us46.txt")]) == 0
    assert (results / "comparison.md").read_text() == (KEPT / "comparison.md").read_text()
    # every number of the report, not only those the table rounds: byte for byte on the kind of machine that
    # wrote it; another CPU's vector units sum in another order, so numbers agree there to 1e-12 relative
    rebuilt, kept = (results / "report.json").read_text(), (KEPT / "report.json").read_text()
    if rebuilt != kept:
        _assert_same_numbers(json.loads(rebuilt), json.loads(kept), "report.json")
    assert (results / "seeds.png").stat().st_size > 10_000


def test_the_kept_folder_opens_as_a_comparison_page(tmp_path):
    """`alpha-gym report` on the kept answers alone: the table, the baselines and the seeds plot, no empty runs."""
    from alpha_gym.evaluation.report import write_report
    folder = tmp_path / "compare-cpu"
    shutil.copytree(KEPT, folder)
    page = write_report(folder).read_text()
    assert "alpha-gym trainer comparison" in page and "cispo_repo_r_dora_filtered" in page
    assert "<h3>Seeds</h3>" in page and page.count("data:image/png") >= 2
    assert "<h2>Checkpoints</h2>" not in page and "<h2>Training</h2>" not in page
    assert 'src="http' not in page
