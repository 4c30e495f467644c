"""Hostile inputs, round four: the smaller classes (eval's request fields, kept results, data-file numbers and
volume, and leftovers: reasoning blocks, a missing world model, gzip tails, the OpenEnv server's exit).

Each `probe_*` function builds the cases of one class, tries them through the real code and returns
`(tried, misbehaved)`, as in `test_hostile_inputs.py`; the tests assert nothing misbehaves. A class marked
"control" holds inputs that must keep working (a rule that refused them would be wrong too). Run this file as a
script to print the counts (`PYTHONPATH=<checkout>:<checkout>/tests python tests/test_hostile_round4_small.py`).

    class                         a case misbehaves when                                       before    after
    extra-body numbers            NaN/Infinity/1e400 anywhere in --extra-body is sent as null, 45 of 45  0 of 45
                                  or a 5,000-digit integer or deep nesting is a traceback
    token-limit fields            another spelling of the token limit (max_completion_tokens, 18 of 18  0 of 18
                                  n_predict, options.num_predict, maxTokens, ...) is accepted
    model names                   `eval --model` with a control/format character is not exit  48 of 48  0 of 48
                                  2 with one line naming --model, or the character is printed
    kept validity                 a kept row edited (and resealed) counts in the valid column  14 of 14  0 of 14
                                  or brief compliance by its flag, not by re-scoring
    rehash foreign files          `kept --rehash` rewrites a JSON file no comparison wrote     10 of 10  0 of 10
    report-only mutator model     `compare --report-only --mutator-model X` is accepted        6 of 6    0 of 6
    number spellings              `1_000`, other scripts' digits or a no-break space in a      104 of 104 0 of 104
                                  volume/close cell loads (pandas, stdlib, frame, Parquet)
    boolean columns               a boolean volume or cap column loads as 0/1                  14 of 14  0 of 14
    volume scale                  volume x 1e-300 ... 1e-12 loads (x 1e-3, 1e-6 and 0 must)   12 of 18  0 of 18
    think-only answers            an answer whose only <alpha> block is inside <think> scores 15 of 15  0 of 15
    missing stress checkpoint     `score --stress-checkpoint P` (P no folder) scores, R3 off   8 of 10   0 of 10
    gzip tails                    bytes after a whole gzip stream are called "not gzip-        20 of 26  0 of 26
                                  compressed" (control: a plain CSV named .gz still is)
    OpenEnv server exit           SIGTERM exits -15, or a missing module ends in a traceback   6 of 7    0 of 7
    controls (extra fields, model names, ASCII numbers, answers outside reasoning)           1 of 50   0 of 50
    total                                                                                      321 of 385 0 of 385

"Before" is commit fcea88a (main when this work began), "after" this change, counted by running this script
against each (the one control case that failed before: a draft `<alpha>` inside `<think>` followed by the
answer's block was refused as two blocks). Cost of the new rules: answer extraction takes 16-18 us instead of
8-9 us per answer (reasoning spans found first), against 38 ms for `Verifier.score` of one answer on the default
panel; loading us_daily_train.csv.gz (pandas) and a 152,000-row CSV (standard library) take the same time within
noise; the comparison table re-scores each distinct kept formula on the train window (compare-cpu: 950 rows, 155
formulas, 8.3 s beside a 37 s `--report-only` run, every kept flag confirmed).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_inputs import _assert_none, run_probes  # noqa: E402,I001

import alpha_gym  # noqa: E402

ROOT = Path(alpha_gym.__file__).resolve().parents[1]   # the checkout whose code runs (also in subprocesses)
GOOD_FORMULA = "rank(-ts_delta(close, 5))"


def _cli(argv) -> tuple[int, str, str]:
    """`alpha-gym ARGV` in this process: (exit status, stdout, stderr); a traceback is (1, ..., the traceback)."""
    import traceback
    from alpha_gym.commands.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rc = main(argv)
        except SystemExit as stop:
            rc = stop.code if isinstance(stop.code, int) else 2
        except Exception:  # noqa: BLE001 - a crash is what the probes count
            traceback.print_exc(file=err)
            rc = 1
    return rc, out.getvalue(), err.getvalue()


def _one_line_error(rc: int, err: str, *needles: str) -> str | None:
    """None when the command failed with status 2 and one stderr line naming every needle; else why not."""
    if "Traceback" in err:
        return f"a traceback: {err.strip().splitlines()[-1][:120]!r}"
    if rc != 2:
        return f"exit {rc}, not 2 ({err.strip()[:120]!r})"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1 or not all(n in lines[0] for n in needles):
        return f"not one line naming {needles}: {err[:160]!r}"
    return None


def _dead_url() -> str:
    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


# ============================================================================ 8. eval request fields
#: Numbers JSON cannot carry: Python's json reads NaN and Infinity, and a literal past the float range as inf.
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "1E+309", "123456789e999"]
#: Where a non-finite number can sit in a request field.
NUMBER_PLACES = ['{{"repeat_penalty": {x}}}', '{{"top_p": 0.9, "min_p": {x}}}', '{{"stop": ["a"], "x": [1, {x}]}}',
                 '{{"logit_bias": {{"50256": {x}}}}}', '{{"options": {{"mirostat_tau": {x}}}}}',
                 '{{"a": [[[{{"b": {x}}}]]]}}']
#: The answer's token limit under the names servers read it by (OpenAI's newer one, TGI and transformers',
#: llama.cpp's, Ollama's, Anthropic's, Gemini's), in other cases and separators, and nested in an options table.
TOKEN_LIMITS = ['{"max_completion_tokens": 64}', '{"max_new_tokens": 64}', '{"n_predict": 64}', '{"num_predict": 64}',
                '{"max_output_tokens": 64}', '{"max_tokens_to_sample": 64}', '{"maxTokens": 64}',
                '{"maxCompletionTokens": 64}', '{"maxOutputTokens": 64}', '{"Max_Tokens": 64}', '{"max-tokens": 64}',
                '{"MAX_COMPLETION_TOKENS": 64}', '{"max completion tokens": 64}', '{"options": {"num_predict": 64}}',
                '{"generation_config": {"max_new_tokens": 64}}', '{"repeat_penalty": 1.0, "max_completion_tokens": 8}',
                '{"parameters": {"max_new_tokens": 64}}', '{"max_length": 300}']
#: Ordinary request fields, which must pass unchanged.
ORDINARY_FIELDS = ['{"repeat_penalty": 1.0}', '{"top_p": 0.95, "top_k": 40, "min_p": 0.05}', '{"stop": ["</alpha>"]}',
                   '{"logit_bias": {"50256": -100}}', '{"presence_penalty": 0.5, "frequency_penalty": 0.2}',
                   '{"response_format": {"type": "text"}}', '{"min_tokens": 4}', '{"cache_prompt": true}',
                   '{"options": {"num_ctx": 4096}}', '{"chat_template_kwargs": {"enable_thinking": false}}', '{}']
#: Characters no model name holds: C0 and C1 controls, DEL, line and paragraph separators, format characters
#: (zero-width, bidirectional overrides, the BOM) and a lone surrogate.
MODEL_CHARACTERS = ["\r", "\n", "\r\n", "\t", "\x00", "\x0b", "\x0c", "\x1b[31m", "\x7f", "\x85", "\u2028", "\u2029",
                    "\u200b", "\u202e", "\ufeff", "\ud800"]
#: Model names servers do list (a Hub id, Ollama's tag, a GGUF file, non-Latin letters, a space).
ORDINARY_MODELS = ["m", "Qwen/Qwen2.5-7B-Instruct", "llama3.1:8b", "SmolLM2-135M-Instruct.Q4_1.gguf", "модель-7b",
                   "名前", "gpt-4o mini"]


def _extra_body_refusal(text: str, *needles: str) -> str | None:
    """None when `extra_body(text)` is an InputError naming every needle; else why the case misbehaves."""
    from alpha_gym.errors import InputError
    from alpha_gym.evaluation.endpoint import extra_body
    try:
        got = extra_body(text)
    except InputError as err:
        missing = [n for n in needles if n not in str(err)]
        return f"refused without naming {missing}: {err}" if missing else None
    except Exception as err:  # noqa: BLE001 - what the probe looks for
        return f"{type(err).__name__}: {str(err)[:100]}"
    sent = None
    with contextlib.suppress(Exception):
        from alpha_gym.jsonable import json_dumps
        sent = json_dumps(got)
    return f"accepted, sent as {sent}"


def probe_extra_body_numbers() -> tuple[int, list[str]]:
    """A non-finite number anywhere in --extra-body, and JSON the decoder cannot take (an integer of 5,000 digits,
    nesting 100,000 deep): an InputError naming --extra-body, never a null sent or a traceback."""
    cases = [(place.format(x=x), ("--extra-body", "finite")) for x in NON_FINITE for place in NUMBER_PLACES]
    cases += [('{"seed_offset": 1' + "0" * 5000 + "}", ("--extra-body",)),
              ("[" * 100_000 + "]" * 100_000, ("--extra-body",)), ('{"a": ' + "[" * 5000 + "]" * 5000 + "}",
                                                                  ("--extra-body",))]
    bad = [f"{text[:60]!r}: {why}" for text, needles in cases if (why := _extra_body_refusal(text, *needles))]
    return len(cases), bad


def probe_token_limit_fields() -> tuple[int, list[str]]:
    """Another spelling of the answer's token limit in --extra-body: refused naming --max-tokens (the stamp
    records --max-tokens; a second limit beside it would make that record untrue)."""
    bad = [f"{text!r}: {why}" for text in TOKEN_LIMITS if (why := _extra_body_refusal(text, "--max-tokens"))]
    return len(TOKEN_LIMITS), bad


def probe_ordinary_extra_fields() -> tuple[int, list[str]]:
    """Control: ordinary request fields pass unchanged (an empty object: None)."""
    from alpha_gym.evaluation.endpoint import extra_body
    bad = []
    for text in ORDINARY_FIELDS:
        try:
            got = extra_body(text)
        except Exception as err:  # noqa: BLE001
            bad.append(f"{text!r} refused: {err}")
            continue
        if got != (json.loads(text) or None):
            bad.append(f"{text!r} read as {got!r}")
    return len(ORDINARY_FIELDS), bad


def probe_model_names(tmp: Path) -> tuple[int, list[str]]:
    """`eval --model NAME` with a control or format character at its start, middle or end: exit 2 with one line
    naming --model before anything is asked, and the character never printed raw."""
    bad, tried = [], 0
    url = _dead_url()
    for ch in MODEL_CHARACTERS:
        for name in (f"{ch}m", f"m{ch}Injected: yes", f"model{ch}"):
            tried += 1
            rc, out, err = _cli(["eval", "--base-url", url, "--model", name, "--out", str(tmp / f"m{tried}"),
                                 "--no-progress"])
            why = _one_line_error(rc, err, "--model")
            if why is None and (ch in out or ch in err.rstrip("\n")):
                why = "the character is printed raw"
            if why is None and (tmp / f"m{tried}").exists():
                why = "the out folder was made"
            if why:
                bad.append(f"--model {name!r}: {why}")
    return tried, bad


def probe_ordinary_model_names(tmp: Path) -> tuple[int, list[str]]:
    """Control: ordinary model names pass the name check and reach the endpoint (here: nothing listening, exit 3)."""
    bad = []
    url = _dead_url()
    for k, name in enumerate(ORDINARY_MODELS):
        rc, _out, err = _cli(["eval", "--base-url", url, "--model", name, "--out", str(tmp / f"o{k}"), "--no-progress"])
        if rc != 3 or "cannot reach" not in err:
            bad.append(f"--model {name!r}: exit {rc}: {err.strip()[:120]!r}")
    return len(ORDINARY_MODELS), bad


def test_non_finite_and_undecodable_extra_body_numbers_are_refused():
    _assert_none(probe_extra_body_numbers(), 40)


def test_every_spelling_of_the_token_limit_is_refused_beside_max_tokens():
    _assert_none(probe_token_limit_fields(), 15)


def test_ordinary_extra_fields_pass_unchanged():
    _assert_none(probe_ordinary_extra_fields(), 10)


def test_a_model_name_with_a_control_character_is_refused_without_printing_it(tmp_path):
    _assert_none(probe_model_names(tmp_path), 40)


def test_ordinary_model_names_reach_the_endpoint(tmp_path):
    _assert_none(probe_ordinary_model_names(tmp_path), 7)


def test_the_extra_body_refusal_through_the_command_is_one_line(tmp_path):
    """The command's own line names the field's place (a NaN two tables down) and the token-limit flag."""
    rc, _out, err = _cli(["eval", "--base-url", _dead_url(), "--model", "m", "--out", str(tmp_path / "e"),
                          "--extra-body", '{"options": {"x": [1, NaN]}}'])
    assert _one_line_error(rc, err, "--extra-body", "options.x[1]", "finite") is None, err
    rc, _out, err = _cli(["eval", "--base-url", _dead_url(), "--model", "m", "--out", str(tmp_path / "e"),
                          "--extra-body", '{"options": {"num_predict": 5}}'])
    assert _one_line_error(rc, err, "options.num_predict", "--max-tokens") is None, err
    assert not (tmp_path / "e").exists()


# ============================================================================ 9. kept results
#: Valid answers, one per probe brief, as a rung keeps them.
KEPT_FORMULAS = ["rank(-ts_delta(close, 5))", "rank(volume)", "-rank(ts_std(returns, 20))", "ts_rank(volume, 10)"]
#: Formulas the train verifier refuses, written into a kept row whose `train_valid` stays true (then resealed).
INVALID_EDITS = ["rank(close)", "close", "rank(open)", "-close", "rank(close", "nosuchop(close)", "rank(nosuch)",
                 "ts_delta(close, 99999)", "rank(close) * 1", "", None]
#: Valid formulas written into a kept row whose `train_valid` says false.
VALID_EDITS = ["rank(-ts_delta(close, 5))", "rank(volume / adv20)", "-rank(ts_std(returns, 20))"]


def _kept_setup():
    from trainers.compare.ladder import panels
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train, holdout = panels("smoke")
        return train, holdout, Verifier(train, VerifierConfig()), list(brief_set("probe"))[: len(KEPT_FORMULAS)]


def _rung_rows(probe, formulas, flags):
    from alpha_gym.evaluation.kept import answer_row
    rows = [answer_row(b.id, 2, f"<alpha>{f}</alpha>", f, 0.4 if ok else None) for b, f, ok in zip(probe, formulas, flags)]
    return [{**r, "train_valid": ok} for r, ok in zip(rows, flags)]


def probe_kept_validity(tmp: Path) -> tuple[int, list[str]]:
    """One kept row edited (formula and answer) and the folder resealed with `--rehash`: the table's valid column
    and its brief compliance must be those of the formulas re-scored by the train verifier, whatever the row's
    `train_valid` says (an invalid formula kept as valid, a valid one kept as invalid)."""
    from alpha_gym.evaluation import kept
    from alpha_gym.tasks.compliance import compliance_record, compliance_summary
    from trainers.compare.report import build_report
    train, holdout, verifier, probe = _kept_setup()
    cases = [(f, True) for f in INVALID_EDITS] + [(f, False) for f in VALID_EDITS]
    bad = []
    for k, (formula, flag) in enumerate(cases):
        results = tmp / f"kept-{k}"
        at = k % len(probe)
        formulas = list(KEPT_FORMULAS)
        formulas[at] = formula
        flags = [True] * len(probe)
        flags[at] = flag
        kept.write_rows(results / "seed-1" / "cispo.jsonl", _rung_rows(probe, formulas, flags))
        kept.write_object(results / "seed-1" / "cispo.json",
                          kept.control_numbers("cispo", "cispo", 1, 0.0, 2, {}, {}, steps=0))
        with contextlib.redirect_stdout(io.StringIO()):
            kept.main(["--rehash", str(results)])
        truth = [f is not None and verifier.score_formula(f).valid for f in formulas]
        want = compliance_summary(compliance_record(b, f, ok) for b, f, ok in zip(probe, formulas, truth))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row = build_report(results, [("cispo", "cispo", "")], train, holdout, n_boot=20,
                                   brief_ids=[b.id for b in probe])["rows"]["cispo"]
        except Exception as exc:  # noqa: BLE001 - a table that cannot be built from a resealed row misbehaves
            bad.append(f"{formula!r} kept as train_valid={flag}: {type(exc).__name__}: {str(exc)[:100]}")
            continue
        if row["valid"] != sum(truth):
            bad.append(f"{formula!r} kept as train_valid={flag}: valid column {row['valid']}, re-scored {sum(truth)}")
        elif (row["brief_met_all"], round(row["brief_share"], 12)) != (want["brief_met_all"],
                                                                       round(want["brief_share"], 12)):
            bad.append(f"{formula!r} kept as train_valid={flag}: brief compliance {row['brief_share']:.3f}/"
                       f"{row['brief_met_all']}, re-scored {want['brief_share']:.3f}/{want['brief_met_all']}")
    return len(cases), bad


#: Files a `--rehash` folder may hold that no comparison wrote: (relative path, text).
FOREIGN_FILES = [("settings.json", '{"theme": "dark", "fontSize": 12}\n'),
                 ("settings.json", '{"sha256": "0f3a", "url": "https://example.com/data.csv"}\n'),
                 ("settings.json", '{"scale": "smoke", "scale_settings": {}, "model": null, "data": null, '
                                   '"universe": null, "verifier": {}}\n'),   # a compare --out folder's stamp
                 ("settings.json", '{"verifier": {"priorities": {}}}\n'),
                 ("settings.json", "[1, 2, 3]\n"),
                 ("step-0.jsonl", '{"prompt": "p", "completion": "c"}\n'),
                 ("seed-1/notes.json", '{"note": "seed 1 looked odd"}\n'),
                 ("seed-1/sft.jsonl", '{"messages": [{"role": "user", "content": "x"}]}\n'),
                 ("seed-1/cispo.json", '{"learning_rate": 1e-5}\n'),
                 ("seed-1/data.json", '{"rows": [1, 2]}\n')]


def probe_rehash_foreign_files(tmp: Path) -> tuple[int, list[str]]:
    """`python -m alpha_gym.evaluation.kept --rehash FOLDER` over a folder holding a file no comparison wrote
    (beside a kept rung): that file is left byte for byte, and the kept rung is sealed."""
    from alpha_gym.evaluation import kept
    _train, _holdout, _verifier, probe = _kept_setup()
    bad = []
    for k, (relative, text) in enumerate(FOREIGN_FILES):
        folder = tmp / f"rehash-{k}"
        rows = folder / "seed-1" / "cispo.jsonl"
        if relative != "seed-1/cispo.json":
            kept.write_rows(rows, _rung_rows(probe, KEPT_FORMULAS, [True] * len(probe)))
            rows.write_text(rows.read_text().replace("rank(volume)", "rank(volume + 1)"))  # an edit to seal
        foreign = folder / relative
        foreign.parent.mkdir(parents=True, exist_ok=True)
        foreign.write_text(text)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                kept.main(["--rehash", str(folder)])
            except Exception as exc:  # noqa: BLE001
                bad.append(f"{relative} {text[:40]!r}: {type(exc).__name__}: {exc}")
                continue
        if foreign.read_text() != text:
            bad.append(f"{relative} {text[:40]!r} rewritten: {foreign.read_text()[:80]!r}")
        elif rows.exists():
            try:
                kept.read_rows(rows)
            except kept.KeptError as exc:
                bad.append(f"{relative}: the kept rung beside it was not sealed ({err.getvalue().strip()[:80]}): {exc}")
    return len(FOREIGN_FILES), bad


#: --mutator-model values for a --report-only run, which trains nothing with any of them.
MUTATOR_MODELS = ["/nonexistent", "/nonexistent/model-folder", "no-such-model-folder", "~/no-such-model", ""]


def _report_only_results(tmp: Path) -> Path:
    """A --results folder a smoke-scale `compare --report-only` reads: step 0 and one rung for the probe briefs."""
    from alpha_gym.evaluation import kept
    from trainers.compare.ladder import SCALES
    train, holdout, verifier, probe = _kept_setup()
    probe = probe[: SCALES["smoke"].probe]
    results = tmp / "results"
    formulas = KEPT_FORMULAS[: len(probe)]
    flags = [verifier.score_formula(f).valid for f in formulas]
    kept.write_rows(results / "step-0.jsonl", [{**r, "step": 0} for r in _rung_rows(probe, formulas, flags)])
    kept.write_rows(results / "seed-42" / "cispo.jsonl", _rung_rows(probe, formulas, flags))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = kept.checkpoint_row(2, kept.probe_scores(verifier, formulas), train, holdout, verifier, formulas,
                                         None, label="cispo")
    kept.write_object(results / "seed-42" / "cispo.json", kept.control_numbers("cispo", "cispo", 42, 0.0, 2,
                                                                                checkpoint, {}, steps=0))
    return results


def probe_report_only_mutator_model(tmp: Path) -> tuple[int, list[str]]:
    """`compare --report-only --mutator-model X`: refused in one line naming --mutator-model (a report trains
    nothing, so the flag would be silently ignored); without the flag the same report is made (exit 0)."""
    results = _report_only_results(tmp)
    argv = ["compare", "--scale", "smoke", "--report-only", "--results", str(results), "--out", str(tmp / "out")]
    rc, _out, err = _cli(argv)
    if rc != 0:
        return 1, [f"the report itself fails (exit {rc}): {err.strip()[-200:]}"]
    bad = []
    for k, model in enumerate(MUTATOR_MODELS + [str(tmp)]):
        rc, _out, err = _cli(argv[:-1] + [str(tmp / f"out{k}"), "--mutator-model", model])
        if why := _one_line_error(rc, err, "--mutator-model"):
            bad.append(f"--mutator-model {model!r}: {why}")
    return len(MUTATOR_MODELS) + 1, bad


def test_the_valid_column_and_brief_compliance_rescore_the_kept_formulas(tmp_path):
    _assert_none(probe_kept_validity(tmp_path), 14)


def test_rehash_leaves_files_no_comparison_wrote(tmp_path):
    _assert_none(probe_rehash_foreign_files(tmp_path), 10)


def test_report_only_refuses_a_mutator_model(tmp_path):
    pytest.importorskip("torch")  # `compare` is registered with the train extra
    _assert_none(probe_report_only_mutator_model(tmp_path), 6)


def test_a_missing_mutator_model_folder_is_refused_before_any_run(tmp_path):
    """A path that is neither a folder, a packaged model nor a Hub id is refused at once (it used to fail only
    once the evolve arm loaded it, after step 0 had run)."""
    pytest.importorskip("torch")
    t0 = time.monotonic()
    rc, _out, err = _cli(["compare", "--scale", "smoke", "--rungs", "evolve_model", "--seeds", "42",
                          "--out", str(tmp_path / "out"), "--mutator-model", str(tmp_path / "missing")])
    assert _one_line_error(rc, err, "--mutator-model", str(tmp_path / "missing")) is None, err
    assert time.monotonic() - t0 < 60 and not (tmp_path / "out").exists()


# ============================================================================ 10. data files
#: The zero of each decimal-digit script tried (Arabic-Indic, Extended Arabic-Indic, Devanagari, Bengali, Thai,
#: fullwidth, mathematical bold and monospace): `float()` reads all of them.
DIGIT_ZEROS = ["\u0660", "\u06f0", "\u0966", "\u09e6", "\u0e50", "\uff10", "\U0001d7ce", "\U0001d7f6"]
READERS = ("pandas csv", "stdlib csv", "frame", "parquet")


def _market_frame():
    from alpha_gym.market import synthetic_panel
    import pandas as pd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        panel = synthetic_panel(n_stocks=6, n_days=60, seed=3)
    dates = np.repeat(np.asarray(panel.dates).astype(str), len(panel.tickers))
    tickers = np.tile(np.asarray(panel.tickers), len(panel.dates))
    fields = {f: panel.data[f].reshape(-1) for f in ("open", "high", "low", "close", "volume")}
    fields["volume"] = np.round(fields["volume"])
    return pd.DataFrame({"date": dates, "ticker": tickers, **fields})


def _spelled(text: str, zero: str, every: bool = True) -> str:
    """`text` with its ASCII digits written in the script whose zero is `zero` (only the last one unless `every`)."""
    last = max(i for i, c in enumerate(text) if c.isdigit())
    return "".join(chr(ord(zero) + int(c)) if c.isdigit() and c.isascii() and (every or i == last) else c
                    for i, c in enumerate(text))


def _load(frame, column: str, cell: str | None, reader: str, tmp: Path, row: int = 7):
    """Load `frame` with one cell of `column` written as `cell` (as text) through `reader`: (panel, None) or
    (None, the exception)."""
    from alpha_gym.market import loader
    frame = frame.copy()
    if cell is not None:
        frame[column] = frame[column].astype(object)
        frame.loc[row, column] = cell
        if reader != "frame":  # a file holds text: the whole column as text, as a CSV or string Parquet column has it
            frame[column] = frame[column].map(lambda v: v if isinstance(v, str) else repr(float(v)))
    saved = loader._pd
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if reader == "frame":
                source = frame
            elif reader == "parquet":
                source = tmp / "cells.parquet"
                frame.to_parquet(source, index=False)
            else:
                source = tmp / "cells.csv"
                source.write_text(frame.to_csv(index=False), encoding="utf-8")
                if reader == "stdlib csv":
                    loader._pd = None
            panel = loader.load_panel(source)
        if caught:
            return None, RuntimeError(f"{caught[0].category.__name__} escaped: {caught[0].message}")
        return panel, None
    except Exception as exc:  # noqa: BLE001 - the probes judge it
        return None, exc
    finally:
        loader._pd = saved


def _refused(frame, column, cell, reader, tmp, *needles) -> str | None:
    from alpha_gym.market.panel import DataError
    panel, err = _load(frame, column, cell, reader, tmp)
    if err is None:
        return f"loaded ({column} = {float(panel.data[column].reshape(-1)[7]):g})"
    if not isinstance(err, DataError):
        return f"{type(err).__name__}: {str(err)[:100]}"
    missing = [n for n in needles if n not in str(err)]
    return f"DataError not naming {missing}: {str(err)[:140]}" if missing else None


def probe_number_spellings(tmp: Path) -> tuple[int, list[str]]:
    """A volume or close cell written with `_` separators, another script's digits (all of them or the last
    one) or a no-break space: a DataError naming the column and ASCII notation, in every reader."""
    frame = _market_frame()
    bad, tried = [], 0
    for column in ("volume", "close"):
        value = frame.loc[7, column]
        text = f"{int(value)}" if column == "volume" else f"{value:.4f}"
        spellings = [text[:1] + "_" + text[1:], "_".join(text), text + "\u00a0", "\u2007" + text]
        spellings += [_spelled(text, zero, every) for zero in DIGIT_ZEROS for every in (True, False)]
        if column == "close":
            spellings = spellings[:2] + spellings[4:8]
        for cell in spellings:
            for reader in READERS:
                tried += 1
                if why := _refused(frame, column, cell, reader, tmp, repr(column), "ASCII"):
                    bad.append(f"{column} {cell!r} [{reader}]: {why}")
    return tried, bad


def probe_ascii_numbers(tmp: Path) -> tuple[int, list[str]]:
    """Control: the same cell in ordinary ASCII notations loads, to the same value, in every reader."""
    frame = _market_frame()
    value = frame.loc[7, "volume"]
    n = int(value)
    cells = [f"{n}", f"{n}.0", f"+{n}", f"{value:.6e}", f"{value:.6E}", f" {n} "]
    bad, tried = [], 0
    for cell in cells:
        for reader in READERS:
            tried += 1
            panel, err = _load(frame, "volume", cell, reader, tmp)
            if err is not None:
                bad.append(f"{cell!r} [{reader}]: {type(err).__name__}: {str(err)[:100]}")
            elif panel.data["volume"].reshape(-1)[7] != float(cell):
                bad.append(f"{cell!r} [{reader}]: read as {panel.data['volume'].reshape(-1)[7]!r}")
    return tried, bad


def probe_boolean_columns(tmp: Path) -> tuple[int, list[str]]:
    """A boolean volume (or cap) column, as Parquet's bool, numpy's, pandas' nullable `boolean`, Arrow's
    `bool[pyarrow]` or Python bools in an object column: a DataError naming the column, never 0/1 shares."""
    import pandas as pd
    from alpha_gym.market import loader
    from alpha_gym.market.panel import DataError
    frame = _market_frame()
    flags = np.arange(len(frame)) % 2 == 0
    kinds = {"numpy bool": flags, "nullable boolean": pd.array(flags, dtype="boolean"),
             "bool[pyarrow]": pd.array(flags, dtype="bool[pyarrow]"), "object bools": flags.astype(object)}
    bad, tried = [], 0
    for column in ("volume", "cap"):
        for kind, values in kinds.items():
            for source in ("frame", "parquet"):
                if source == "parquet" and kind == "object bools":
                    continue
                tried += 1
                edited = frame.assign(**{column: values})
                where = edited
                if source == "parquet":
                    where = tmp / "bools.parquet"
                    edited.to_parquet(where, index=False)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        panel = loader.load_panel(where)
                except DataError as err:
                    if column not in str(err) or "boolean" not in str(err):
                        bad.append(f"{column} as {kind} [{source}]: DataError not naming it: {str(err)[:120]}")
                    continue
                except Exception as err:  # noqa: BLE001
                    bad.append(f"{column} as {kind} [{source}]: {type(err).__name__}: {str(err)[:100]}")
                    continue
                bad.append(f"{column} as {kind} [{source}]: loaded as {np.unique(panel.data[column]).tolist()}")
    return tried, bad


#: Factors no unit change explains: the smallest synthetic volume (about 1e5 shares) times each is under 1e-6.
VOLUME_FACTORS = [1e-300, 1e-200, 1e-100, 1e-30, 1e-15, 1e-12]


def probe_volume_scale(tmp: Path) -> tuple[int, list[str]]:
    """Every volume multiplied by a factor no unit explains: a DataError naming volume and its range (CSV and
    frame); control: volumes in thousands or millions of shares, and a day with no trade, load."""
    from alpha_gym.market import loader
    from alpha_gym.market.panel import DataError
    frame = _market_frame()
    bad, tried = [], 0
    cases = [(f"x {f:g}", frame.assign(volume=frame["volume"] * f), False) for f in VOLUME_FACTORS]
    zero = frame.copy()
    zero.loc[3, "volume"] = 0.0
    cases += [("x 1e-3", frame.assign(volume=frame["volume"] * 1e-3), True),
              ("x 1e-6", frame.assign(volume=frame["volume"] * 1e-6), True), ("a zero", zero, True)]
    for label, scaled, loads in cases:
        path = tmp / "volume.csv"
        scaled.to_csv(path, index=False)
        for source, how in ((path, "csv"), (scaled, "frame")):
            tried += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    loader.load_panel(source)
            except DataError as err:
                if loads:
                    bad.append(f"volume {label} ({how}) refused: {str(err)[:120]}")
                elif "volume" not in str(err) or "1e-06" not in str(err):
                    bad.append(f"volume {label} ({how}): DataError not naming volume's range: {str(err)[:120]}")
                continue
            except Exception as err:  # noqa: BLE001
                bad.append(f"volume {label} ({how}): {type(err).__name__}: {str(err)[:100]}")
                continue
            if not loads:
                bad.append(f"volume {label} ({how}) loads")
    return tried, bad


def test_number_cells_take_ascii_decimal_notation_only(tmp_path):
    _assert_none(probe_number_spellings(tmp_path), 100)


def test_ascii_number_cells_load_as_before(tmp_path):
    _assert_none(probe_ascii_numbers(tmp_path), 24)


def test_boolean_volume_and_cap_columns_are_refused(tmp_path):
    pytest.importorskip("pyarrow")
    _assert_none(probe_boolean_columns(tmp_path), 14)


def test_volume_has_a_range_like_prices(tmp_path):
    _assert_none(probe_volume_scale(tmp_path), 18)


# ============================================================================ 11. leftovers
#: Answers whose only `<alpha>` blocks sit in reasoning: closed, unclosed, in other cases, nested, after a
#: reasoning block that began in the prompt (the answer's first tag a `</think>`), several of them.
F = GOOD_FORMULA
THINK_ONLY = [f"<think><alpha>{F}</alpha></think>", f"<think>momentum <alpha>{F}</alpha> looks good</think>",
              f"<THINK><alpha>{F}</alpha></THINK>", f"<Think> <ALPHA>{F}</Alpha> </tHiNk>",
              f"<think>\n<alpha>{F}</alpha>\n</think>\nThe formula is above.", f"<think><alpha>{F}</alpha>",
              f"<think>draft <alpha>{F}</alpha> then more thoughts", f"Reversal. <alpha>{F}</alpha></think> Done.",
              f"<think>a</think><think><alpha>{F}</alpha></think>", f"<think><think><alpha>{F}</alpha></think></think>",
              f"<think><alpha>{F}</alpha><alpha>rank(volume)</alpha></think>", f"<think><alpha>{F}</ALPHA></think> ok",
              f"intro <think>x <alpha>{F}</alpha> y</think> outro", f"<alpha>{F}</alpha></think><alpha>",
              "<think>" * 50 + f"<alpha>{F}</alpha>"]
#: Control: (answer, the formula scored) where a block stands outside reasoning.
ANSWERED = [(f"<think>reversal</think><alpha>{F}</alpha>", F), (f"<alpha>{F}</alpha>", F),
            (f"<think>draft <alpha>rank(volume)</alpha></think><alpha>{F}</alpha>", F),
            (f"Reversal.</think><alpha>{F}</alpha>", F), (f"<alpha>{F}</alpha><think>afterwards</think>", F),
            (f"I think <alpha>{F}</alpha>", F), (f"<think></think> <alpha>{F}</alpha>", F),
            (f"<think>a</think> b </think><alpha>{F}</alpha>", F)]


def _verifier():
    from alpha_gym.market import synthetic_panel
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Verifier(synthetic_panel(n_stocks=20, n_days=200, seed=3), VerifierConfig(archive_seed=False))


def probe_think_only_answers(verifier=None) -> tuple[int, list[str]]:
    """An answer whose only `<alpha>` blocks are inside `<think>`: an invalid answer whose reason says so."""
    verifier = verifier or _verifier()
    bad = []
    for answer in THINK_ONLY:
        score = verifier.score(answer)
        if score.valid:
            bad.append(f"{answer[:70]!r} scored valid as {score.formula!r}")
        elif "<think>" not in score.reason:
            bad.append(f"{answer[:70]!r}: refused without saying why: {score.reason}")
    return len(THINK_ONLY), bad


def probe_answers_outside_reasoning(verifier=None) -> tuple[int, list[str]]:
    """Control: a block outside reasoning is the answer (a draft inside `<think>` is not a second block)."""
    verifier = verifier or _verifier()
    bad = []
    for answer, formula in ANSWERED:
        score = verifier.score(answer)
        if not score.valid or score.formula != formula:
            bad.append(f"{answer[:70]!r}: valid={score.valid} formula={score.formula!r} ({score.reason})")
    return len(ANSWERED), bad


def probe_missing_stress_checkpoint(tmp: Path) -> tuple[int, list[str]]:
    """`score --stress-checkpoint P` (or `--set verifier.stress_checkpoint=P`) for a P that is no folder: exit 2
    with one line naming P, never a score with R3 quietly off; control: `none` and an existing folder without a
    model still score (R3 off, with its reason)."""
    (tmp / "a-file.txt").write_text("not a model\n")
    (tmp / "empty").mkdir(exist_ok=True)
    missing = [str(tmp / "nonexistent"), "/nonexistent-alpha-gym-world-model", "no-such-dir/world-model",
               str(tmp / "a" / "b" / "c"), str(tmp / "a-file.txt"), str(tmp / "nonexistent") + "/"]
    cases = [(["--stress-checkpoint", p], p, False) for p in missing]
    cases += [(["--set", f"verifier.stress_checkpoint={p!r}"], p, False) for p in missing[:2]]
    cases += [(["--stress-checkpoint", "none"], "none", True), (["--stress-checkpoint", str(tmp / "empty")], "", True)]
    bad = []
    for flags, path, scores in cases:
        rc, out, err = _cli(["score", F, *flags])
        if scores:
            if rc != 0:
                bad.append(f"{flags}: exit {rc}: {err.strip()[:120]!r}")
        elif why := _one_line_error(rc, err, path.rstrip("/")):
            bad.append(f"{flags}: {why}")
    return len(cases), bad


def _gzipped_csv() -> bytes:
    return gzip.compress(_market_frame().head(60).to_csv(index=False).encode(), mtime=0)


#: What follows a complete gzip stream: text, a newline, one byte, gzip's magic alone or with a damaged member,
#: zero padding then text, random bytes, a zip header, a bz2 stream.
GZIP_TAILS = [b"hello world\n", b"\n", b"x", b"\x1f", b"\x1f\x8b", b"\x1f\x8b\x08\x00garbage!", b"\x00\x00\x00junk",
              bytes([0x42]) + random.Random(3).randbytes(63), b"PK\x03\x04" + bytes(26), b"BZh91AY&SY" + bytes(20)]


def probe_gzip_tails(tmp: Path) -> tuple[int, list[str]]:
    """A gzip file with bytes after its compressed data: a DataError saying the gzip data ends at its byte
    offset and what follows, never "not gzip-compressed" (quoting gzip's own magic bytes); control: a CSV
    named .gz is "not gzip-compressed", a cut stream is "truncated", zero padding loads (gzip allows it)."""
    from alpha_gym.market import loader
    from alpha_gym.market.panel import DataError
    data = _gzipped_csv()
    cases = [(data + tail, str(len(data)), "not gzip-compressed") for tail in GZIP_TAILS]
    cases += [(gzip.decompress(data), "not gzip-compressed", None), (data[:-5], "truncated", None),
              (data + bytes(16), None, None)]
    bad, tried = [], 0
    for blob, needle, never in cases:
        path = tmp / "tail.csv.gz"
        path.write_bytes(blob)
        for stdlib in (False, True):
            tried += 1
            saved = loader._pd
            if stdlib:
                loader._pd = None
            try:
                loader.load_panel(path)
                if needle is not None:
                    bad.append(f"{blob[-12:]!r} at the end [{'stdlib' if stdlib else 'pandas'}]: loaded")
            except DataError as err:
                if needle is None or needle not in str(err) or (never and never in str(err)):
                    bad.append(f"{blob[-12:]!r} at the end [{'stdlib' if stdlib else 'pandas'}]: {str(err)[:150]}")
            except Exception as err:  # noqa: BLE001
                bad.append(f"{blob[-12:]!r}: {type(err).__name__}: {str(err)[:100]}")
            finally:
                loader._pd = saved
    return tried, bad


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openenv_stop(sig: int) -> str | None:
    """Start the OpenEnv server, wait for /health, send `sig`: None when it exits 0 without a traceback."""
    import urllib.request
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "alpha_gym.commands.openenv_server", "--port", str(port)],
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    return f"never answered /health (exit {proc.poll()}): {proc.stderr.read()[-200:]!r}"
                time.sleep(0.2)
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    if rc != 0 or "Traceback" in err:
        return f"exit {rc}: {err.strip()[-160:]!r}"
    return None


#: Modules the OpenEnv server needs that a base install lacks, and what the one line must name.
SERVER_MODULES = {"openenv": "openenv-core", "openenv.core.env_server.interfaces": "openenv-core",
                  "uvicorn": "uvicorn", "starlette": "starlette", "pydantic": "pydantic"}


def _openenv_without(module: str) -> tuple[int, str]:
    """Run the OpenEnv server's command where `module` cannot be imported: (exit status, stderr)."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from alpha_gym.commands.openenv_server import main\n"
            f"sys.exit(main(['--port', '{_free_port()}']))")
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return -1, "still running after 60 s (it served without the module?)"
    return done.returncode, done.stderr


def probe_openenv_server(signals=(signal.SIGTERM, signal.SIGINT)) -> tuple[int, list[str]]:
    """The OpenEnv server stops with exit 0 on SIGTERM and SIGINT (as `serve` does); without openenv-core (or
    another module it needs) it prints one line with the command that installs it, exit 2, no traceback."""
    bad = []
    for sig in signals:
        if why := _openenv_stop(sig):
            bad.append(f"{signal.Signals(sig).name}: {why}")
    for module, named in SERVER_MODULES.items():
        rc, err = _openenv_without(module)
        if why := _one_line_error(rc, err, named, "pip install"):
            bad.append(f"without {module}: {why}")
    return len(signals) + len(SERVER_MODULES), bad


def test_an_alpha_block_only_inside_think_is_not_the_answer():
    _assert_none(probe_think_only_answers(), 15)


def test_a_block_outside_reasoning_is_the_answer():
    _assert_none(probe_answers_outside_reasoning(), 8)


def test_a_stress_checkpoint_that_is_no_folder_is_an_error(tmp_path):
    _assert_none(probe_missing_stress_checkpoint(tmp_path), 10)


def test_bytes_after_a_gzip_stream_are_named_as_such(tmp_path):
    _assert_none(probe_gzip_tails(tmp_path), 26)


def test_the_openenv_server_exits_0_on_sigterm_and_names_what_to_install():
    pytest.importorskip("openenv.core.env_server.interfaces")
    pytest.importorskip("uvicorn")
    _assert_none(probe_openenv_server(), 7)


def main() -> int:
    """Print, per class, how many cases were tried and how many misbehaved."""
    tmp = Path(tempfile.mkdtemp(prefix="hostile4_"))
    verifier = _verifier()

    def sub(name):
        (tmp / name).mkdir(exist_ok=True)
        return tmp / name
    run_probes([("extra-body numbers", probe_extra_body_numbers), ("token-limit fields", probe_token_limit_fields),
                ("control: ordinary extra fields", probe_ordinary_extra_fields),
                ("model names", lambda: probe_model_names(sub("models"))),
                ("control: ordinary model names", lambda: probe_ordinary_model_names(sub("ordinary"))),
                ("kept validity", lambda: probe_kept_validity(sub("kept"))),
                ("rehash foreign files", lambda: probe_rehash_foreign_files(sub("rehash"))),
                ("report-only mutator model", lambda: probe_report_only_mutator_model(sub("mutator"))),
                ("number spellings", lambda: probe_number_spellings(sub("cells"))),
                ("control: ASCII numbers", lambda: probe_ascii_numbers(sub("ascii"))),
                ("boolean columns", lambda: probe_boolean_columns(sub("bools"))),
                ("volume scale", lambda: probe_volume_scale(sub("volume"))),
                ("think-only answers", lambda: probe_think_only_answers(verifier)),
                ("control: answers outside reasoning", lambda: probe_answers_outside_reasoning(verifier)),
                ("missing stress checkpoint", lambda: probe_missing_stress_checkpoint(sub("stress"))),
                ("gzip tails", lambda: probe_gzip_tails(sub("gzip"))),
                ("OpenEnv server exit", probe_openenv_server)], shown=6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
