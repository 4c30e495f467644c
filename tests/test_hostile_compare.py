"""Hostile inputs to `alpha-gym compare` (issue 41, items 6 and 8's compare part; issue 43, item 5).

Each `probe_*` function builds the cases of one class, tries them and returns `(tried, misbehaved)`, as in
`test_hostile_inputs.py`; the tests assert nothing misbehaves. Run this file as a script to print the counts
(`PYTHONPATH=<checkout> python tests/test_hostile_compare.py`).

    class                   a case misbehaves when                                            before    after
    kept files              `--report-only` builds a table from a kept folder edited by       20 of 20  0 of 20
                            hand (a formula swapped, train_cpcv 9.9, a number, book or
                            stamp changed), torn, damaged or short of a row, or answers
                            anything but one line (exit 2) naming the file
    compare flags           a count out of range (`--seeds abc`, `''`, `-1`, 2**32, 5,000     20 of 24  0 of 24
                            digits, Arabic-Indic digits, twice the same, 101 seeds;
                            `--steps 0`, -3, 10**6; `--rungs ''`) is accepted or a
                            traceback; `--out` naming a file, or holding a torn stamp, is
                            a traceback
    eval folders            `--eval DIR` with a torn or damaged eval.json or answers.jsonl     7 of 7    0 of 7
                            (a list, samples "two" or 0, a row without brief_id) is a
                            traceback or an empty row
    report-only, no torch   `--report-only` (with and without `--eval DIR`) fails where        3 of 4    0 of 4
                            torch cannot be imported, or rewrites the kept results; the
                            README's example asks to rewrite them
    total                                                                                      50 of 55  0 of 55

"Before" is 1606f8c (main when this work began), "after" this branch, counted by running this script against
each (2026-12-05). On the old code the kept folder is written unsealed (it had no hashes to check), so its
edits, and a row without a hash, are read as they are; a kept folder short of a step-0 row, or with an
empty rung file, was refused there but blamed on the rung (not naming the file that is short), counted as
misbehaving; `--steps nan`, `abc`, 5,000 digits and 2.5 were already refused (argparse's int). README's
example passed its text check there too (it named --out, yet the command rewrote the kept table: the second
no-torch case counts that); `--update-results` did not exist (the third case).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_inputs import _assert_none, run_probes  # noqa: E402,I001

try:
    from alpha_gym.evaluation.kept import sealed
except ImportError:  # a checkout from before kept files carried hashes (the "before" count)
    def sealed(obj):
        return obj

STEP0 = ["rank(-ts_delta(close, 5))", "rank(ts_std(returns, 20))"]
RUNG = ["rank(ts_mean(volume, 10))", "rank(-ts_std(close, 10))"]


def _write_rows(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(sealed(r)) + "\n" for r in rows), encoding="utf-8")


def _write_object(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sealed(obj), indent=1), encoding="utf-8")


def kept_folder(results: Path) -> Path:
    """A small kept comparison for the smoke scale: step 0, settings.json, seed 42's cispo (answers, numbers, book)."""
    from alpha_gym.tasks.sets import brief_set
    probe = [b.id for b in list(brief_set("probe"))[:2]]

    def rows(step, formulas):
        return [{"brief_id": b, "step": step, "answer": f"<alpha>{f}</alpha>", "formula": f, "train_cpcv": 0.25,
                 "train_valid": True} for b, f in zip(probe, formulas)]
    _write_rows(results / "step-0.jsonl", rows(0, STEP0))
    _write_rows(results / "seed-42" / "cispo.jsonl", rows(20, RUNG))
    _write_object(results / "seed-42" / "cispo.json", {
        "rung": "cispo", "recipe": "cispo", "prompts": "all", "seed": 42, "selected_step": 20, "clipped_share": 0.1,
        "checkpoints": [{"step": 20, "train_cpcv": 0.25}]})
    _write_object(results / "seed-42" / "cispo.book.json", {
        "rung": "cispo", "seed": 42, "n_admitted": 2, "n_members": 2, "members": RUNG, "effective_bets": 1.5})
    _write_object(results / "settings.json", {"scale": "smoke", "model": "runs/sft/model", "probe_briefs": probe})
    return results


def _compare(*argv) -> tuple[int, str]:
    """`alpha-gym compare ...` in this process: (exit status, stderr); an exception is returned as a traceback."""
    from alpha_gym.commands.main import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["compare", "--scale", "smoke", *argv])
        except SystemExit as exc:  # argparse
            code = exc.code
        except Exception as exc:  # noqa: BLE001 - what the probe counts
            return -1, f"Traceback: {type(exc).__name__}: {exc}"
    return code, err.getvalue()


def _one_line_refusal(code, err: str, *names: str) -> str | None:
    """Why an answer is not a refusal: exit 2, no traceback, one error line naming each of `names`."""
    # argparse's usage lines come before its one error line; a warning (the synthetic market's notice) is no error
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))
             and not re.match(r"\S+:\d+: \w+(Warning|Notice): ", ln)]
    if code != 2 or "Traceback" in err or len(lines) != 1:
        return f"exit {code}: {err.strip()[-300:]!r}"
    missing = [n for n in names if n not in lines[0]]
    return f"the error does not name {missing}: {lines[0][:300]!r}" if missing else None


# ------------------------------------------------------------------------------------------ kept files
def _edit_row(path: Path, line: int, **changes):
    """A row edited by hand: the value changed, the rest of the line (its old hash included) kept."""
    rows = path.read_text(encoding="utf-8").splitlines()
    rows[line - 1] = json.dumps({**json.loads(rows[line - 1]), **changes})
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def _edit_object(path: Path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **changes}, indent=1))


def _cut(path: Path, keep: float = 0.6):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _drop_last_row(path: Path):
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))


def _unhash(path: Path):
    row = json.loads(path.read_text().splitlines()[0])
    row.pop("sha256", None)
    path.write_text(json.dumps(row) + "\n" + "".join(path.read_text().splitlines(keepends=True)[1:]))


KEPT_EDITS = [  # (case, file under the results folder, damage, what the error names besides the file)
    ("formula swapped", "seed-42/cispo.jsonl", lambda p: _edit_row(p, 1, formula="rank(close - 2 * open)"), "line 1"),
    ("train_cpcv 9.9", "seed-42/cispo.jsonl", lambda p: _edit_row(p, 2, train_cpcv=9.9), "line 2"),
    ("train_valid flipped", "step-0.jsonl", lambda p: _edit_row(p, 2, train_valid=False), "line 2"),
    ("answer edited", "step-0.jsonl", lambda p: _edit_row(p, 1, answer="<alpha>rank(close)</alpha>"), "line 1"),
    ("rung torn mid-line", "seed-42/cispo.jsonl", _cut, "line"),
    ("step-0 torn mid-line", "step-0.jsonl", _cut, "line"),
    ("step-0 short of its last row", "step-0.jsonl", _drop_last_row, "settings.json"),
    ("rung empty", "seed-42/cispo.jsonl", lambda p: p.write_text(""), ""),
    ("row without a hash", "seed-42/cispo.jsonl", _unhash, "line 1"),
    ("row a JSON list", "seed-42/cispo.jsonl", lambda p: p.write_text("[1, 2]\n" + p.read_text()), "line 1"),
    ("row nested 100,000 deep", "seed-42/cispo.jsonl", lambda p: p.write_text("[" * 100_000 + "\n"), "line 1"),
    ("not UTF-8", "seed-42/cispo.jsonl", lambda p: p.write_bytes(p.read_bytes() + b"\xff\xfe\n"), ""),
    ("numbers edited", "seed-42/cispo.json", lambda p: _edit_object(p, clipped_share=0.9), ""),
    ("numbers torn", "seed-42/cispo.json", _cut, ""),
    ("book edited", "seed-42/cispo.book.json", lambda p: _edit_object(p, members=["rank(close)"]), ""),
    ("settings torn", "settings.json", _cut, ""),
    ("settings not an object", "settings.json", lambda p: p.write_text("[]"), ""),
    ("settings edited", "settings.json", lambda p: _edit_object(p, model="another/model"), ""),
    ("settings name other briefs", "settings.json", lambda p: _edit_object(p, probe_briefs=["g0-0001"]), ""),
    ("settings empty", "settings.json", lambda p: p.write_text(""), ""),
]


def probe_kept_files(tmp: Path) -> tuple[int, list[str]]:
    """Each damage of KEPT_EDITS to a fresh kept folder: `--report-only` must refuse it in one line naming the file."""
    good = kept_folder(tmp / "good")
    code, err = _compare("--report-only", "--results", str(good), "--out", str(tmp / "good-out"))
    assert code == 0, f"the undamaged kept folder must build its table: {err[-500:]}"
    bad = []
    for n, (case, name, damage, named) in enumerate(KEPT_EDITS):
        results = tmp / f"kept-{n}"
        shutil.copytree(good, results)
        damage(results / name)
        code, err = _compare("--report-only", "--results", str(results), "--out", str(tmp / f"kept-{n}-out"))
        why = _one_line_refusal(code, err, name.rsplit("/", 1)[-1], named)
        if why:
            bad.append(f"{case}: {why}")
    return len(KEPT_EDITS), bad


def test_edited_torn_or_damaged_kept_files_are_refused_in_one_line(tmp_path):
    _assert_none(probe_kept_files(tmp_path), len(KEPT_EDITS))


def test_an_intentional_edit_is_sealed_again_by_the_rehash_command(tmp_path):
    """`python -m alpha_gym.evaluation.kept --rehash FOLDER` after an edit: the table is built from the edit; a
    torn file is refused by it, not sealed."""
    from alpha_gym.evaluation.kept import main as kept_main
    results = kept_folder(tmp_path / "results")
    _edit_row(results / "seed-42" / "cispo.jsonl", 1, formula=STEP0[0], answer=f"<alpha>{STEP0[0]}</alpha>")
    code, err = _compare("--report-only", "--results", str(results), "--out", str(tmp_path / "o1"))
    assert code == 2 and f"python -m alpha_gym.evaluation.kept --rehash {results}" in err
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert kept_main(["--rehash", str(results)]) == 0
    assert "sealed 5 kept files" in out.getvalue()
    code, err = _compare("--report-only", "--results", str(results), "--out", str(tmp_path / "o2"))
    assert code == 0, err
    assert json.loads((results / "seed-42" / "cispo.jsonl").read_text().splitlines()[0])["formula"] == STEP0[0]
    _cut(results / "step-0.jsonl")
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert kept_main(["--rehash", str(results)]) == 2
    assert "step-0.jsonl: line" in err.getvalue() and "not JSON" in err.getvalue()


def test_batch_records_and_kept_files_share_one_hash():
    """The kept files' hash is the score-batch records' (one helper, `jsonable.content_hash`)."""
    from alpha_gym.batch import records
    from alpha_gym.jsonable import content_hash
    row = {"brief_id": "g0-0001", "formula": "rank(close)", "train_cpcv": 0.5}
    assert sealed(row)["sha256"] == content_hash(row) == content_hash({**row, "sha256": "x"})
    assert records.content_hash is content_hash
    assert content_hash({**row, "train_cpcv": 9.9}) != content_hash(row)


# ------------------------------------------------------------------------------------------ flags
FLAG_CASES = [
    ["--seeds", "abc"], ["--seeds", ""], ["--seeds", ","], ["--seeds", "42,,43"], ["--seeds", "-1"],
    ["--seeds", "4294967296"], ["--seeds", "9" * 5000], ["--seeds", "\u0664\u0662"], ["--seeds", "42,42"],
    ["--seeds", ",".join(map(str, range(101)))], ["--seeds", "1e3"], ["--seeds", "42.0"],
    ["--steps", "0"], ["--steps", "-3"], ["--steps", "1000000"], ["--steps", "nan"], ["--steps", "abc"],
    ["--steps", "9" * 5000], ["--steps", "2.5"],
    ["--rungs", ""], ["--rungs", ","], ["--rungs", "cispo,"],
]


def probe_compare_flags(tmp: Path) -> tuple[int, list[str]]:
    """Each flag of FLAG_CASES (on `--report-only`, so the old code could not start a long run): one-line refusal
    naming the flag; `--out` naming a file likewise."""
    results = kept_folder(tmp / "flags")
    bad = []
    for n, flag in enumerate(FLAG_CASES):
        code, err = _compare("--report-only", "--results", str(results), "--out", str(tmp / f"flags-{n}"), *flag)
        why = _one_line_refusal(code, err, flag[0])
        if why:
            bad.append(f"{flag[0]} {flag[1][:20]!r}: {why}")
    (tmp / "a-file").write_text("")
    code, err = _compare("--report-only", "--results", str(results), "--out", str(tmp / "a-file"))
    why = _one_line_refusal(code, err, "--out")
    if why:
        bad.append(f"--out a file: {why}")
    (tmp / "torn-out").mkdir()
    (tmp / "torn-out" / "settings.json").write_text('{"scale": "smo')  # the run folder's stamp, cut off
    code, err = _compare("--report-only", "--results", str(results), "--out", str(tmp / "torn-out"))
    why = _one_line_refusal(code, err, "settings.json")
    if why:
        bad.append(f"--out with a torn stamp: {why}")
    return len(FLAG_CASES) + 2, bad


def test_compare_counts_are_range_checked_in_one_line(tmp_path):
    _assert_none(probe_compare_flags(tmp_path), len(FLAG_CASES) + 2)


# ------------------------------------------------------------------------------------------ eval folders
EVAL_EDITS = [  # (case, file in the eval folder, damage)
    ("eval.json torn", "eval.json", _cut),
    ("eval.json a list", "eval.json", lambda p: p.write_text("[]")),
    ("samples a string", "eval.json", lambda p: _edit_object(p, samples="two")),
    ("samples 0", "eval.json", lambda p: _edit_object(p, samples=0)),
    ("answers torn mid-line", "answers.jsonl", lambda p: _cut(p, 0.3)),
    ("an answer row a JSON list", "answers.jsonl", lambda p: p.write_text("[1]\n" + p.read_text())),
    ("an answer row without brief_id", "answers.jsonl",
     lambda p: p.write_text(json.dumps({"sample": 0, "answer": "x"}) + "\n" + p.read_text())),
]


def probe_eval_folders(tmp: Path) -> tuple[int, list[str]]:
    """Each damage of EVAL_EDITS to a real `alpha-gym eval` folder given as `--eval`: one line naming the folder."""
    evals = _eval_folder(tmp / "eval-source")
    results = kept_folder(tmp / "eval-kept")
    bad = []
    for n, (case, name, damage) in enumerate(EVAL_EDITS):
        folder = tmp / f"eval-{n}"
        shutil.copytree(evals, folder)
        damage(folder / name)
        code, err = _compare("--report-only", "--results", str(results), "--out", str(tmp / f"eval-{n}-out"),
                             "--eval", str(folder))
        why = _one_line_refusal(code, err, f"eval-{n}")
        if why:
            bad.append(f"{case}: {why}")
    return len(EVAL_EDITS), bad


def test_damaged_eval_folders_are_refused_in_one_line(tmp_path):
    _assert_none(probe_eval_folders(tmp_path), len(EVAL_EDITS))


# ------------------------------------------------------------------------------------------ no torch
#: `alpha-gym ARGV` in a fresh interpreter where `import torch` fails as where torch is not installed (a finder
#: that refuses it: `sys.modules["torch"] = None` would trip scipy's own check for torch tensors).
NO_TORCH = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
from alpha_gym.commands.main import main
code = main(sys.argv[1:])
print("torch was imported" if "torch" in sys.modules else "", file=sys.stderr)
sys.exit(code)
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _eval_folder(tmp: Path) -> Path:
    """A real `alpha-gym eval` folder: two probe briefs answered by an endpoint on 127.0.0.1."""
    from alpha_gym.tasks.sets import brief_set
    from chat_endpoint import ChatEndpoint
    from test_compare_trainers import _eval
    probe = list(brief_set("probe"))[:2]
    answers = {probe[0].prompt(): f"<alpha>{STEP0[0]}</alpha>", probe[1].prompt(): "no idea"}
    server = ChatEndpoint(lambda body: answers.get(body["messages"][-1]["content"], "no idea"))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert _eval(server.url, tmp / "eval", "--limit", "2") == 0
    finally:
        server.close()
    return tmp / "eval"


def probe_report_only_without_torch(tmp: Path) -> tuple[int, list[str]]:
    """`--report-only` with and without `--eval DIR`, torch not importable: the table in --out, kept results
    untouched, torch never imported; and `--update-results` asked explicitly rewrites the kept table."""
    import alpha_gym
    root = Path(alpha_gym.__file__).resolve().parents[1]  # the checkout whose code runs (PYTHONPATH or cwd)
    results = kept_folder(tmp / "kept-no-torch")
    before = _files(results)
    evals = _eval_folder(tmp)
    bad = []
    cases = [("report-only", []), ("report-only --eval", ["--eval", str(evals)]),
             ("report-only --eval --update-results", ["--eval", str(evals), "--update-results"])]
    for n, (case, more) in enumerate(cases):
        out = tmp / f"no-torch-{n}"
        run = subprocess.run([sys.executable, "-c", NO_TORCH, "compare", "--scale", "smoke", "--report-only",
                              "--results", str(results), "--out", str(out), *more], cwd=root, capture_output=True,
                             text=True, timeout=600)
        wanted_change = "--update-results" in more
        if run.returncode != 0 or "torch was imported" in run.stderr:
            bad.append(f"{case}: exit {run.returncode}: {run.stderr.strip()[-300:]!r}")
        elif not (out / "comparison.md").is_file():
            bad.append(f"{case}: no comparison.md in --out")
        elif (_files(results) != before) != wanted_change:
            bad.append(f"{case}: the kept results were {'not ' if wanted_change else ''}rewritten")
        elif more and "eval: tiny-model" not in (out / "comparison.md").read_text():
            bad.append(f"{case}: no eval row")
        if wanted_change:
            for name in ("comparison.md", "report.json", "seeds.png"):
                (results / name).unlink(missing_ok=True)
    # the docs' own examples (README and docs/): --report-only into --out, nothing asking to rewrite the kept results
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    examples = [c for page in pages for c in page.read_text().split("```")[1::2]
                if "compare" in c and "--report-only" in c]
    if not examples or any("--out" not in c or "--update-results" in c for c in examples):
        bad.append("docs: a --report-only example without --out, or rewriting the kept results")
    return len(cases) + 1, bad


def test_report_only_runs_without_torch_and_leaves_kept_results_alone(tmp_path):
    _assert_none(probe_report_only_without_torch(tmp_path), 4)


# ------------------------------------------------------------------------------------------ script
def main() -> int:
    """Print, per class, how many cases were tried and how many misbehaved (each of them)."""
    tmp = Path(tempfile.mkdtemp(prefix="hostile_compare_"))
    run_probes([("kept files", lambda: probe_kept_files(tmp)), ("compare flags", lambda: probe_compare_flags(tmp)),
                ("eval folders", lambda: probe_eval_folders(tmp)),
                ("report-only, no torch", lambda: probe_report_only_without_torch(tmp))], shown=100)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
