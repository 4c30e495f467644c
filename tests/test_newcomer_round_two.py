"""The newcomer's path, round two: the docs' blocks run as written (the scoring service's waits until it is ready;
the re-scoring example runs on the shipped train file), a holdout start outside the data says what to pass, each
command's synthetic-market note names its own data flag, the docs' counts agree with the code; `export-gguf` names
every need at once, `serve` returns the brief object `score --json` prints, and score-batch's refusal of a changed
output names --restart."""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest

from conftest import _require_real_data

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: README and the pages it links: the blocks a newcomer copies live in both.
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))


def _cli(*args, prelude="", timeout=300):
    code = f"import sys; {prelude}from alpha_gym.commands.main import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _require_readme_data():
    """The docs' blocks name the data as ../shared/data/us_equities/ beside the checkout: run them where it is."""
    _require_real_data()
    if not (ROOT.parent / "shared" / "data" / "us_equities" / "us_daily_train.csv.gz").is_file():
        pytest.skip("the docs' blocks read ../shared/data/us_equities/, which is not beside this checkout")


def _bash_block(containing: str) -> str:
    """The one ```bash block of README or a docs page holding `containing`."""
    blocks = [b for page in PAGES
              for b in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)]
    found = [b for b in blocks if containing in b]
    assert len(found) == 1, f"README and docs/ hold {len(found)} bash blocks with {containing!r}"
    return found[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------ the docs as written
@pytest.mark.real_data
def test_the_readme_serve_block_waits_for_the_server_and_runs_as_written():
    pytest.importorskip("starlette", reason="starlette (alpha-gym[serve]) is not installed")
    pytest.importorskip("uvicorn", reason="uvicorn (alpha-gym[serve]) is not installed")
    _require_readme_data()
    block = _bash_block("alpha-gym serve --port 8000")
    assert "seq 120" in block.split("curl -s localhost:8000/health")[0]   # it waits before asking anything
    assert block.rstrip().endswith("kill $SERVER")
    # the block as written, on a free port (another server may hold 8000 on a shared machine)
    port = str(_free_port())
    done = subprocess.run(["bash", "-c", block.replace("8000", port)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    replies, at, decoder = [], 0, json.JSONDecoder()
    while done.stdout[at:].strip():     # curl prints each reply without a newline: one JSON value after another
        value, at = decoder.raw_decode(done.stdout, len(done.stdout) - len(done.stdout[at:].lstrip()))
        replies.append(value)
    assert len(replies) == 4, done.stdout[-2000:]
    health, one, group, with_brief = replies
    assert health["status"] == "ready"
    assert one["valid"] and "reward" in one and "brief" not in one
    assert [g["valid"] for g in group] == [True, False]
    assert with_brief["brief"]["id"] == "g0-0008" and len(with_brief["brief"]["described"]) == with_brief["brief"]["n"]


@pytest.mark.real_data
def test_the_readme_rescoring_example_runs_on_the_shipped_train_file():
    _require_readme_data()
    block = _bash_block("alpha-gym holdout-formulas --data")
    command = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("#"))
    assert "YOUR_FILE" not in command and "2025-08-21" not in command
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "holdout 2024-08-19..2025-08-20" in done.stdout and re.search(r"valid \d+/50", done.stdout)


#: Holdout starts that leave one side of the cut without a session, on a file of the small synthetic market.
def _outside_starts(first, last):
    import numpy as np
    day = np.timedelta64(1, "D")
    return [str(last + day), str(last + 30 * day), "2099-12-31", str(first), str(first - day), "1990-01-02"]


def test_a_holdout_start_outside_the_data_names_the_span_and_a_start_that_works(tmp_path, small_synthetic,
                                                                                 write_market_csv):
    data = write_market_csv(small_synthetic, tmp_path / "m.csv.gz")
    formulas = tmp_path / "f.txt"
    formulas.write_text("rank(volume)\n")
    first, last = small_synthetic.dates[0], small_synthetic.dates[-1]
    bad = []
    for start in _outside_starts(first, last):
        for command in (["holdout-formulas", "--data", str(data), "--formulas", str(formulas), "--no-baselines"],
                        ["eval", "--report-only", "--model", "m", "--out", str(tmp_path / "none"), "--data", str(data)]):
            if command[0] == "eval":
                (tmp_path / "none").mkdir(exist_ok=True)
                (tmp_path / "none" / "endpoint.jsonl").write_text("")
            done = _cli(*command, "--holdout-start", start)
            lines = done.stderr.strip().splitlines()
            ok = (done.returncode == 2 and len(lines) == 1 and f"--holdout-start {start}" in lines[0]
                  and f"{first}" in lines[0] + str(first) and "pass a date inside the data" in lines[0]
                  and "Traceback" not in done.stderr)
            if not ok:
                bad.append((command[0], start, done.returncode, done.stderr[-300:]))
    assert bad == []


def test_the_synthetic_note_names_the_flag_each_command_reads_prices_from(capsys):
    """Every command that reads market data: the note's flag is one its parser has, the market-data one."""
    from alpha_gym.commands.main import _show_warning, build_parser, market_data_flag
    from alpha_gym.market.synthetic import SyntheticDataNotice
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    checked, bad = [], []
    for name, command in sub.choices.items():
        actions = {o: a for a in command._actions for o in a.option_strings}
        if "--data" not in actions and "--market-data" not in actions:
            continue
        required = [a for a in command._actions if a.required and a.option_strings]
        argv = [name] + [x for a in required for x in (a.option_strings[0], "2024-01-02")]  # a date fits any
        if any(not a.option_strings and a.nargs in (None, "+") for a in command._actions):
            argv.append("X")  # a positional the command requires
        flag = market_data_flag(parser.parse_args(argv))
        _show_warning(SyntheticDataNotice("alpha-gym: using the embedded SYNTHETIC market; load real data with "
                                          "alpha_gym.market.load_panel"), SyntheticDataNotice, "x.py", 1)
        plain = capsys.readouterr().err
        _show_warning(SyntheticDataNotice("load real data with alpha_gym.market.load_panel"), SyntheticDataNotice,
                      "x.py", 1, data_flag=flag)
        note = capsys.readouterr().err
        checked.append(name)
        help_text = actions[flag].help or ""
        if f"give {flag} FILE for real prices" not in note or not re.search(r"long.format|market data", help_text):
            bad.append((name, flag, help_text))
        assert "give --data FILE for real prices" in plain      # the default stays what it was
    assert "sft" in checked and len(checked) >= 10 and bad == []


def test_the_integrations_page_counts_the_verifiers_rewards_the_integration_registers():
    from alpha_gym.scoring.config import CHANNELS
    readme = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    counted = re.search(r"carry (\d+) `@vf\.reward` async methods, one per channel", readme)
    assert counted and int(counted.group(1)) == len(CHANNELS) == 14
    source = (ROOT / "alpha_gym" / "integrations" / "verifiers.py").read_text(encoding="utf-8")
    assert re.search(r"Its rewards are (\d+) `@vf\.reward` methods", source).group(1) == str(len(CHANNELS))
    try:
        from alpha_gym.integrations.verifiers import AlphaTask
    except ImportError:
        return  # verifiers is not installed: the count is the channels' (one reward a channel)
    rewards = [name for name in CHANNELS if callable(getattr(AlphaTask, name, None))]
    assert rewards == list(CHANNELS)


def test_sft_help_the_training_page_and_the_kept_improve_rows_agree_on_max_length():
    from alpha_gym.commands.sft import IMPROVE_MAX_LENGTH
    done = _cli("sft", "--help")
    assert f"--max-length {IMPROVE_MAX_LENGTH}" in " ".join(done.stdout.split()) and "1,500" not in done.stdout
    page = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    line = next(ln for ln in page.splitlines() if ln.startswith("alpha-gym sft --data runs/improve.jsonl"))
    assert f"--max-length {IMPROVE_MAX_LENGTH}" in line
    # the longest templated row of every kept improve warm start fits (benchmarks/notes/sft-warm-start.md)
    kept = sorted((ROOT / "benchmarks" / "results").glob("improve-warm*/answers.json"))
    longest = [json.loads(path.read_text())["sft"]["longest_row"] for path in kept]
    assert len(longest) >= 2 and max(longest) > 768 and max(longest) < IMPROVE_MAX_LENGTH


# ------------------------------------------------------------------------------ small ones
NEEDS = ("torch", "transformers", "sentencepiece")


@pytest.mark.parametrize("missing", [m for k in (1, 2, 3) for m in combinations(NEEDS, k)], ids="-".join)
def test_export_gguf_names_every_need_at_once(missing, tmp_path):
    prelude = "".join(f"sys.modules[{m!r}] = None; " for m in missing)   # as an install without them
    done = _cli("export-gguf", str(tmp_path / "model"), "--out", str(tmp_path / "m.gguf"), prelude=prelude)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "`train` extra (torch, transformers) and sentencepiece" in lines[0]
    assert "pip install -e '.[train]' sentencepiece" in lines[0]
    assert all(m in lines[0].split("missing here: ")[1] for m in missing)


def test_export_gguf_without_the_train_extra_at_all_and_its_help_name_both_needs():
    gone = _cli("export-gguf", "x", "--out", "y.gguf", prelude="sys.modules['trainers.config'] = None; ")
    assert gone.returncode == 2 and len(gone.stderr.strip().splitlines()) == 1
    assert "`train` extra" in gone.stderr and "sentencepiece" in gone.stderr
    for prelude in ("", "sys.modules['trainers.config'] = None; "):
        listed = _cli("--help", prelude=prelude)
        entry = " ".join(listed.stdout.split()).split(" export-gguf ")[-1][:300]   # its line of the listing
        assert "train extra" in entry and "sentencepiece" in entry
    own = _cli("export-gguf", "--help")
    assert "sentencepiece" in own.stdout and "pip install -e '.[train]' sentencepiece" in " ".join(own.stdout.split())


def test_serve_with_a_brief_id_returns_the_brief_object_score_json_prints():
    pytest.importorskip("starlette", reason="starlette (alpha-gym[serve]) is not installed")
    pytest.importorskip("uvicorn", reason="uvicorn (alpha-gym[serve]) is not installed")
    from alpha_gym.market.resolve import default_panel
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.service.client import ScoringClient
    from alpha_gym.service.server import BackgroundServer
    cases = [("rank(ts_std(volume, 5) / ts_mean(volume, 20))", "g0-0008"), ("rank(-ts_delta(close, 5))", "fixed-003"),
             ("ts_mean(close, 250)", "g0-0012"), ("rank(close -", "g0-0025")]
    with BackgroundServer(lambda: Verifier(default_panel()), workers=1) as url:
        client = ScoringClient(url)
        client.wait_ready(240)
        for formula, brief_id in cases:
            done = _cli("score", formula, "--brief", brief_id, "--json")
            printed = json.loads(done.stdout)
            served = client.score_formula(formula, brief_id=brief_id)
            assert served["brief"] == printed["brief"], (formula, brief_id)
            assert {k: v for k, v in served.items()} == {k: v for k, v in printed.items() if k != "alpha_tests"}
        group = client.score_group([f"<alpha>{f}</alpha>" for f, _ in cases], brief_id="g0-0008")
        assert all(g["brief"]["id"] == "g0-0008" for g in group)
        assert "brief" not in client.score_formula(cases[0][0])


def test_score_batch_refusing_a_changed_output_names_restart(tmp_path):
    pool = tmp_path / "pool.txt"
    pool.write_text("rank(volume)\nrank(-ts_delta(close, 5))\n")
    out = tmp_path / "out.jsonl"
    base = ("score-batch", "--formulas", str(pool), "--out", str(out), "--workers", "0", "--quiet")
    assert _cli(*base).returncode == 0
    changes = [("--set", "verifier.turnover_cap=0.4"), ("--end", "2016-12-30")]
    bad = []
    for change in changes:
        done = _cli(*base, *change)
        lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("alpha-gym: note: ")]  # the synthetic's
        if done.returncode != 2 or "--restart" not in done.stderr or len(lines) != 1:
            bad.append((change, done.returncode, done.stderr[-300:]))
    pool.write_text("rank(volume)\nrank(-ts_delta(close, 5))\nrank(close)\n")   # another number of items
    more = _cli(*base)
    if more.returncode != 2 or "--restart" not in more.stderr:
        bad.append(("items", more.returncode, more.stderr[-300:]))
    assert bad == []
    assert _cli(*base, *changes[0], "--restart").returncode == 0   # what the refusal says works
