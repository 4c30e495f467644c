"""`alpha-gym eval` against misbehaving endpoints (issues 41.4, 41.6, 41.8 and 43.1).

Each test starts a real stdlib HTTP server on 127.0.0.1 in a thread (bounded: it shuts itself down after
`LIFETIME_S` seconds at the latest) that plays one misbehaving endpoint: nothing listening, a host that does
not resolve, 401/403/404 with the server's own error body, a base URL without /v1, a `/v1/models` that lists
other models, a redirect to another host, a reply trickled a byte at a time, `Retry-After: nan` or a huge
one, an API key with a CR/LF in it, `user:password@` in the URL, Ctrl-C with requests in flight, a rerun into
the same folder with other data, prompts or endpoint, and the page of an eval folder without a holdout.
They assert exit codes, elapsed seconds, the one-line message and that no secret reaches any output or file.

Misbehaving cases, measured by running this file against main's code before the change (1606f8c, the
file copied into a `git archive` of it): 35 of 41 cases failed (the 6 that passed: 503/429/502 retried,
Retry-After -3 and 1e400, --timeout 0 and -1, --retries -1); after the change: 0 of 41.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import alpha_gym
from alpha_gym.commands.main import main
from alpha_gym.evaluation.endpoint import EndpointClient, EndpointConfig

ROOT = Path(alpha_gym.__file__).resolve().parents[1]   # the checkout whose code runs (also in subprocesses)
LIFETIME_S = 30.0
KEY = "sk-hostile-7f3a"


def _completion(text="<alpha>rank(-ts_delta(close, 5))</alpha>") -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()


class Endpoint:
    """A bounded 127.0.0.1 server: `route(handler, method, path, body) -> (status, headers, body)` or None
    (the route wrote its own reply). Records (time, method, path, headers) of every request."""

    def __init__(self, route):
        self.requests, self.route, outer = [], route, self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.requests.append((time.monotonic(), method, self.path, dict(self.headers)))
                try:
                    reply = outer.route(self, method, self.path, body)
                    if reply is None:
                        return
                    status, headers, data = reply
                    self.send_response(status)
                    for k, v in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up

            def do_POST(self):
                self._serve("POST")

            def do_GET(self):
                self._serve("GET")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._stopper = threading.Timer(LIFETIME_S, self.close)
        self._stopper.daemon = True
        self._stopper.start()

    def chats(self):
        return [r for r in self.requests if r[2].endswith("/chat/completions")]

    def close(self):
        self._stopper.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def endpoint():
    made = []

    def make(route):
        made.append(Endpoint(route))
        return made[-1]
    yield make
    for e in made:
        e.close()


def good(h, method, path, body, models=("m",)):
    if path.endswith("/models"):
        return 200, {}, json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in models]}).encode()
    return 200, {}, _completion()


def _args(url, out, *more):
    return ["eval", "--base-url", url, "--model", "m", "--out", str(out), "--no-progress", "--concurrency", "1",
            "--end", "2016-12-30", *more]


def _run(argv, capsys):
    t0 = time.monotonic()
    rc = main(argv)
    seconds = time.monotonic() - t0
    out, err = capsys.readouterr()
    return rc, seconds, out, err


def _error_line(err: str, *needles: str) -> str:
    """The one stderr line holding every needle (so the message is one line, not spread over a traceback)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if all(n in ln for n in needles)]
    assert lines, f"no line with {needles} in: {err!r}"
    return lines[0]


def _written(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()) if folder.exists() else ""


# ------------------------------------------------------------------------------ fail fast, say why
def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_nothing_listening_stops_in_seconds_naming_the_url(tmp_path, capsys):
    url = _dead_url()
    rc, seconds, out, err = _run(_args(url, tmp_path / "o", "--limit", "3"), capsys)
    assert rc == 3 and seconds < 5, (rc, seconds)
    assert "refused" in _error_line(err, url).lower()


def test_a_host_that_does_not_resolve_stops_in_seconds(tmp_path, capsys):
    url = "http://no-such-host.invalid:8000/v1"
    rc, seconds, out, err = _run(_args(url, tmp_path / "o", "--limit", "3"), capsys)
    assert rc == 3 and seconds < 5, (rc, seconds)
    _error_line(err, "no-such-host.invalid")


@pytest.mark.parametrize("status,message", [
    (401, "Incorrect API key provided: sk-w***"),
    (403, "This key may not use this model"),
    (404, "The model `m` does not exist."),
])
def test_401_403_404_stop_at_once_with_the_servers_message(endpoint, tmp_path, capsys, status, message):
    server = endpoint(lambda h, m, p, b: (status, {}, json.dumps({"error": {"message": message,
                                                                           "type": "invalid_request_error"}}).encode()))
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "3"), capsys)
    assert rc == 3 and seconds < 5, (rc, seconds)
    line = _error_line(err, server.url, message)
    assert str(status) in line
    assert len(server.chats()) <= 1  # not retried, the other items not asked


def test_a_server_echoing_the_key_does_not_get_it_printed(endpoint, tmp_path, capsys, monkeypatch):
    server = endpoint(lambda h, m, p, b: (401, {}, json.dumps({"error": {"message": f"bad key {KEY}"}}).encode()))
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1", "--api-key-env", "HOSTILE_KEY"),
                                 capsys)
    assert rc == 3 and "bad key ***" in _error_line(err, server.url)
    assert KEY not in out + err + _written(tmp_path / "o")


def test_a_service_that_does_not_speak_http_stops_in_seconds(tmp_path, capsys):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(LIFETIME_S)

    def banner():  # what an SSH server says first; bounded: it ends with the test's socket
        try:
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        except OSError:
            pass
    threading.Thread(target=banner, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        rc, seconds, out, err = _run(_args(url, tmp_path / "o", "--limit", "3"), capsys)
    finally:
        listener.close()
    assert rc == 3 and seconds < 5, (rc, seconds)
    assert "does not answer in HTTP" in _error_line(err, url, "SSH-2.0")


def test_a_url_without_v1_gets_a_hint(endpoint, tmp_path, capsys):
    def route(h, m, path, b):
        return (good(h, m, path, b) if path.startswith("/v1/") else
                (404, {}, b'{"detail": "Not Found"}'))
    server = endpoint(route)
    bare = server.url[: -len("/v1")]
    rc, seconds, out, err = _run(_args(bare, tmp_path / "o", "--limit", "2"), capsys)
    assert rc == 3 and seconds < 5
    assert "/v1" in _error_line(err, bare, "404")


def test_only_timeouts_429_and_5xx_are_retried(endpoint, tmp_path, capsys):
    script = [503, 429, 502]

    def route(h, m, path, b):
        if path.endswith("/chat/completions") and script:
            return script.pop(0), {}, b'{"error": {"message": "busy"}}'
        return good(h, m, path, b)
    server = endpoint(route)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1", "--backoff", "0.01"), capsys)
    assert rc == 0 and len(server.chats()) == 4 and "Traceback" not in err


def test_a_400_fails_its_item_only_and_the_servers_message_is_shown(endpoint, tmp_path, capsys):
    def route(h, m, path, b):
        if path.endswith("/chat/completions"):
            return 400, {}, b'{"error": {"message": "This model\'s maximum context length is 2048 tokens"}}'
        return good(h, m, path, b)
    server = endpoint(route)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "2"), capsys)
    assert rc == 3 and len(server.chats()) == 2  # each item asked once: a 400 is this request's fault
    assert "maximum context length is 2048 tokens" in [ln for ln in out.splitlines() if "error" in ln][-1]


def test_models_listed_without_the_asked_one_are_refused(endpoint, tmp_path, capsys):
    server = endpoint(lambda h, m, p, b: good(h, m, p, b, models=("llama-3-8b", "qwen-2.5-7b")))
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "2"), capsys)
    assert rc == 2 and seconds < 5
    assert "qwen-2.5-7b" in _error_line(err, "--model", "llama-3-8b")
    assert server.chats() == []


def test_one_served_model_under_another_name_warns_and_goes_on(endpoint, tmp_path, capsys):
    # llama.cpp's servers answer for their one model whatever `model` a request names
    server = endpoint(lambda h, m, p, b: good(h, m, p, b, models=("SmolLM2-135M-Instruct.Q4_1.gguf",)))
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1"), capsys)
    assert rc == 0
    assert "warning" in _error_line(err, "SmolLM2-135M-Instruct.Q4_1.gguf").lower()


# ------------------------------------------------------------------------------ credentials
def test_a_redirect_to_another_host_is_refused_and_the_key_stays_home(endpoint, tmp_path, capsys, monkeypatch):
    other = endpoint(good)
    target = f"http://localhost:{other.port}/v1/chat/completions"
    server = endpoint(lambda h, m, p, b: (302, {"Location": target}, b"") if p.endswith("/chat/completions")
                      else (404, {}, b"{}"))
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    out_dir = tmp_path / "o"
    rc, seconds, out, err = _run(_args(server.url, out_dir, "--limit", "2", "--api-key-env", "HOSTILE_KEY"), capsys)
    assert rc == 3 and seconds < 5
    assert other.requests == []  # nothing, let alone the key, reached the other host
    assert "redirect" in _error_line(err, "localhost").lower()
    assert KEY not in out + err + _written(out_dir)


@pytest.mark.parametrize("key", [KEY + "\r\nX-Injected: 1", KEY + "\n", "\x1b" + KEY, KEY + "\x7f"])
def test_a_key_with_control_characters_is_refused_without_printing_it(endpoint, tmp_path, capsys, monkeypatch, key):
    server = endpoint(good)
    monkeypatch.setenv("HOSTILE_KEY", key)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1", "--api-key-env", "HOSTILE_KEY"),
                                 capsys)
    assert rc == 2 and server.requests == []
    _error_line(err, "HOSTILE_KEY")
    assert KEY not in out + err + _written(tmp_path / "o")


def test_user_and_password_in_the_url_are_used_but_never_written(endpoint, tmp_path, capsys):
    server = endpoint(good)
    url = server.url.replace("http://", "http://alice:pw-secret-9@")
    out_dir = tmp_path / "o"
    rc, seconds, out, err = _run(_args(url, out_dir, "--limit", "1"), capsys)
    assert rc == 0, err
    assert server.chats()[0][3]["Authorization"] == "Basic " + base64.b64encode(b"alice:pw-secret-9").decode()
    assert "pw-secret-9" not in out + err + _written(out_dir)
    assert json.loads((out_dir / "eval.json").read_text())["base_url"].startswith("http://***@127.0.0.1")
    # and a refused run's message redacts it too
    url = _dead_url().replace("http://", "http://alice:pw-secret-9@")
    rc, seconds, out, err = _run(_args(url, tmp_path / "dead", "--limit", "1"), capsys)
    assert rc == 3 and "pw-secret-9" not in out + err + _written(tmp_path / "dead")


# ------------------------------------------------------------------------------ deadlines and odd numbers
def test_a_trickled_reply_is_cut_at_the_timeout(endpoint, tmp_path, capsys):
    def route(h, m, path, b):
        if path.endswith("/models"):
            return 404, {}, b"{}"
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", "100000")
        h.end_headers()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:  # a byte every 0.4 s: each read is quick, the reply never ends
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.4)
        return None
    server = endpoint(route)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1", "--timeout", "1.5",
                                       "--retries", "0"), capsys)
    assert rc == 3 and seconds < 4.5, (rc, seconds)
    assert json.loads((tmp_path / "o" / "eval.json").read_text())["failed_by_error"] == {"timeout": 1}


@pytest.mark.parametrize("value", ["nan", "-3", "1e400"])
def test_a_strange_retry_after_is_survived(endpoint, tmp_path, capsys, value):
    script = [429]

    def route(h, m, path, b):
        if path.endswith("/chat/completions") and script:
            return script.pop(0), {"Retry-After": value}, b"{}"
        return good(h, m, path, b)
    server = endpoint(route)
    waits = []
    client = EndpointClient(EndpointConfig(base_url=server.url, model="m", retries=2, backoff_s=0.01),
                            sleep=waits.append)
    c = client.complete([{"role": "user", "content": "x"}])
    assert c.ok and c.attempt_errors == ["http_429"]
    assert len(waits) == 1 and 0 <= waits[0] <= 60


def test_a_retry_after_nan_through_the_command(endpoint, tmp_path, capsys):
    script = [429, 429]

    def route(h, m, path, b):
        if path.endswith("/chat/completions") and script:
            return script.pop(0), {"Retry-After": "nan"}, b"{}"
        return good(h, m, path, b)
    server = endpoint(route)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1", "--backoff", "0.01"), capsys)
    assert rc == 0 and seconds < 5 and "Traceback" not in err


@pytest.mark.parametrize("flag,value", [("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "0"),
                                        ("--timeout", "-1"), ("--backoff", "-1"), ("--backoff", "nan"),
                                        ("--temperature", "nan"), ("--retries", "-1"), ("--limit", "-2")])
def test_odd_numbers_get_one_line(endpoint, tmp_path, capsys, flag, value):
    server = endpoint(good)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1", flag, value), capsys)
    assert rc == 2 and server.requests == []
    _error_line(err, flag)
    assert len(err.strip().splitlines()) == 1, err


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("default: 60", "default: 4", "default: 256", "default: 3", "default: 0.0", "default: 1"):
        assert default in text, default


def test_samples_at_temperature_zero_warn(endpoint, tmp_path, capsys):
    server = endpoint(good)
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o", "--limit", "1", "--samples", "2"), capsys)
    assert rc == 0
    assert "warning" in _error_line(err, "--samples 2", "temperature").lower()
    rc, seconds, out, err = _run(_args(server.url, tmp_path / "o2", "--limit", "1", "--samples", "2",
                                       "--temperature", "0.7"), capsys)
    assert rc == 0 and "warning" not in err


# ------------------------------------------------------------------------------ Ctrl-C
def _eval_with_two_requests_in_flight(endpoint, tmp_path, seconds: float, limit: int):
    """`alpha-gym eval` in a subprocess against a server that takes `seconds` a chat, once 2 chats are asked."""
    def route(h, m, path, b):
        if path.endswith("/chat/completions"):
            time.sleep(seconds)
        return good(h, m, path, b)
    server = endpoint(route)
    out_dir = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # SIGINT at its default in the child, as in a terminal: a suite started in the background (`cmd &` from a
    # script) hands its children an ignored SIGINT, and Python then never raises KeyboardInterrupt on Ctrl-C
    proc = subprocess.Popen([sys.executable, "-m", "alpha_gym", *_args(server.url, out_dir, "--limit", str(limit),
                                                                          "--concurrency", "2")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while len(server.chats()) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return server, out_dir, proc

def test_ctrl_c_keeps_the_answers_in_flight(endpoint, tmp_path):
    server, out_dir, proc = _eval_with_two_requests_in_flight(endpoint, tmp_path, 2.0, 6)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    seconds = time.monotonic() - t0
    assert proc.returncode == 130 and seconds < 5, (proc.returncode, seconds, stderr)
    assert "Traceback" not in stderr and "interrupted" in stderr
    rows = [json.loads(x) for x in (out_dir / "endpoint.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["ok"] for r in rows)  # the two in flight finished and were kept
    assert len(server.chats()) == 2  # nothing new was asked after Ctrl-C


# ------------------------------------------------------------------------------ the folder's stamp
def test_a_rerun_on_other_data_is_refused(endpoint, tmp_path, capsys):
    server = endpoint(good)
    out_dir = tmp_path / "o"
    assert _run(_args(server.url, out_dir, "--limit", "1"), capsys)[0] == 0
    before = (out_dir / "eval.json").read_text()
    for other in (["--start", "2015-06-01"], ["--universe", ",".join(f"SYN{k:03d}" for k in range(12))]):
        rc, seconds, out, err = _run(_args(server.url, out_dir, "--limit", "1", *other), capsys)
        assert rc == 2, (other, err)
        _error_line(err, str(out_dir))
    assert (out_dir / "eval.json").read_text() == before
    stamp = json.loads((out_dir / "eval-settings.json").read_text())
    assert {"endpoint", "model", "data", "universe", "panel", "briefs", "temperature", "max_tokens"} <= set(stamp)


def test_a_rerun_with_other_prompts_under_the_same_ids_is_refused(endpoint, tmp_path, capsys):
    from dataclasses import replace
    from alpha_gym.tasks.generator import save_briefs
    from alpha_gym.tasks.sets import brief_set
    server = endpoint(good)
    briefs = list(brief_set("probe"))[:2]
    save_briefs(briefs, tmp_path / "a.jsonl")
    save_briefs([briefs[0], replace(briefs[1], request="Write anything at all.")], tmp_path / "b.jsonl")
    out_dir = tmp_path / "o"
    assert _run(_args(server.url, out_dir, "--briefs", str(tmp_path / "a.jsonl")), capsys)[0] == 0
    rc, seconds, out, err = _run(_args(server.url, out_dir, "--briefs", str(tmp_path / "b.jsonl")), capsys)
    assert rc == 2
    _error_line(err, briefs[1].id)


def test_a_rerun_against_another_endpoint_is_refused_and_a_resume_works(endpoint, tmp_path, capsys):
    first, second = endpoint(good), endpoint(good)
    out_dir = tmp_path / "o"
    assert _run(_args(first.url, out_dir, "--limit", "1"), capsys)[0] == 0
    rc, seconds, out, err = _run(_args(second.url, out_dir, "--limit", "2"), capsys)
    assert rc == 2 and second.chats() == []
    _error_line(err, "endpoint")
    rc, seconds, out, err = _run(_args(first.url, out_dir, "--limit", "2"), capsys)  # same settings: resumes
    assert rc == 0 and len(first.chats()) == 2
    assert json.loads((out_dir / "eval.json").read_text())["reused"] == 1


# ------------------------------------------------------------------------------ the page
def test_the_page_of_an_eval_without_holdout_shows_every_invalid_answer(endpoint, tmp_path, capsys):
    texts = iter(["I think momentum works, buy the winners.", "<alpha>rank(close</alpha>",
                  "<alpha>rank(-ts_delta(close, 5))</alpha>"])

    def route(h, m, path, b):
        if path.endswith("/chat/completions"):
            return 200, {}, _completion(next(texts))
        return good(h, m, path, b)
    server = endpoint(route)
    out_dir = tmp_path / "o"
    assert _run(_args(server.url, out_dir, "--limit", "3"), capsys)[0] == 0
    assert main(["report", str(out_dir)]) == 0
    page = (out_dir / "report.html").read_text()
    rows = [json.loads(x) for x in (out_dir / "answers.jsonl").read_text().splitlines()]
    invalid = [r for r in rows if not r["train_valid"]]
    assert len(invalid) == 2
    import html
    for r in rows:
        assert r["brief_id"] in page
    for r in invalid:
        assert html.escape(r["answer"][:30]) in page and html.escape(r["reason"]) in page


def test_the_page_with_a_holdout_puts_the_holdout_verdict_beside_each_brief(endpoint, tmp_path, capsys):
    texts = iter(["no alpha here", "<alpha>rank(-ts_delta(close, 5))</alpha>"])

    def route(h, m, path, b):
        if path.endswith("/chat/completions"):
            return 200, {}, _completion(next(texts))
        return good(h, m, path, b)
    server = endpoint(route)
    out_dir = tmp_path / "o"
    argv = ["eval", "--base-url", server.url, "--model", "m", "--out", str(out_dir), "--no-progress",
            "--concurrency", "1", "--limit", "2", "--holdout-start", "2024-09-02", "--no-baselines"]
    assert _run(argv, capsys)[0] == 0
    assert main(["report", str(out_dir)]) == 0
    page = (out_dir / "report.html").read_text()
    rows = [json.loads(x) for x in (out_dir / "answers.jsonl").read_text().splitlines()]
    assert "holdout score or reason" in page and "<h3>Answers</h3>" not in page
    assert all(r["brief_id"] in page for r in rows) and "no alpha here" in page


def test_ctrl_c_twice_drops_the_requests_in_flight_at_once(endpoint, tmp_path):
    server, out_dir, proc = _eval_with_two_requests_in_flight(endpoint, tmp_path, 8.0, 4)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    seconds = time.monotonic() - t0
    assert proc.returncode == 130 and seconds < 4, (proc.returncode, seconds, stderr)
    assert "Traceback" not in stderr and "interrupted: 0 of 4 items answered" in stderr
    assert (out_dir / "endpoint.jsonl").read_text() == ""
