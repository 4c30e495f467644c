"""The newcomer's path through `alpha-gym evolve`, round two: an endpoint that cannot answer is named in one line
before anything is scored; a model that writes no formula shows how its group fills and says when random formulas
fill it; the help shows every default; SIGINT and SIGTERM stop a run started in the background from a script and
the rerun says where it resumes; the run folder keeps one archive file and no lock file but its own, and has its
curve, archive list and book as its last checkpoint stood.

Each `probe_*` function builds the cases of one class, tries them through the real code (real HTTP servers on
127.0.0.1, each bounded: it shuts itself down after LIFETIME_S seconds at the latest; real processes and signals)
and returns `(tried, misbehaved)`, as in `test_hostile_inputs.py`; the tests assert nothing misbehaves. Run this
file as a script to print the counts (`PYTHONPATH=<checkout>:<checkout>/tests python tests/test_evolve_newcomer.py
[class ...]`).

    class                a case misbehaves when                                           before      after
    endpoint that        `evolve --mutator endpoint:...` at a dead port, an unresolvable  29 of 29    0 of 29
    cannot answer        host, a non-HTTP service, https to http, 401/403/404/405/400/
                         500/503, a redirect, HTML or JSON that is no completion, a
                         dropped connection, a wrong model or a base URL without /v1
                         scores anything, ends otherwise than rc 3 with one line (no
                         traceback, no password), or takes over 40 s
    no formula           a model whose every answer brings no new formula (15 spellings:   15 of 15    0 of 15
                         empty, prose, empty or broken blocks, reasoning only, two
                         blocks, a seed again, ...) is filled with random formulas
                         without a line saying so with the right counts
    silent fill          an endpoint group that takes 20 s to fill leaves stderr silent     1 of 1      0 of 1
                         over 9 s (a line while it fills: answers asked, new, refused)
    help                 a flag of evolve, sft, sft-data or serve has no help text or       24 of 72    0 of 73
                         hides its default, or a help page shows a developer note
    signals              `evolve ... &` from a script does not stop on SIGINT or SIGTERM    4 of 4      0 of 4
                         in 10 s with one line saying how to resume (also with a request
                         in flight), or its rerun does not say where it resumes and end
                         as the lone run
    run folder           a finished run keeps more than one archive file or a lock file     5 of 5      0 of 5
                         but evolve.lock; a run killed between its archive and its state
                         (checkpoints at groups of one parity) resumes to other bits or
                         lacks its archive list and book of a checkpoint
    total                                                                                  78 of 126   0 of 127

"Before" is commit 00f5ee3 (main when this work began), "after" the commit that added this file, counted by
running this script against each (a `git archive` of 00f5ee3 on PYTHONPATH; the help has one flag more after:
`evolve --fold`, added meanwhile). Before, SIGTERM did stop a run (the default action, exit 143) but silently,
and a kill between the archive and the state resumed to other bits only where two checkpoints in a row fell on
groups of one parity (`checkpoint_every` even, or by time), as the archive slot went by the group's parity.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_evolve_run import evolve_argv, market_csv  # noqa: E402,I001
from test_hostile_inputs import _assert_none, run_probes  # noqa: E402,I001

LIFETIME_S = 120.0
SEEDS = ["rank(close)", "rank(-ts_delta(close, 5))", "rank(volume)", "ts_rank(close, 10)", "rank(-returns)"]
PASSWORD = "pw-7f3a"


# ------------------------------------------------------------------------------------------ servers
class Endpoint:
    """A bounded 127.0.0.1 HTTP server: `route(method, path) -> (status, headers, body)`, or None to drop the
    connection without a reply; `delay` seconds before each chat reply. Records (method, path) of each request."""

    def __init__(self, route, delay: float = 0.0):
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                outer.requests.append((method, self.path))
                if delay and self.path.endswith("/chat/completions"):
                    time.sleep(delay)
                reply = route(method, self.path)
                try:
                    if reply is None:
                        self.close_connection = True
                        return
                    status, headers, body = reply
                    self.send_response(status)
                    for k, v in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass                      # the client gave up

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._stopper = threading.Timer(LIFETIME_S, self.close)
        self._stopper.daemon = True
        self._stopper.start()

    def chats(self) -> int:
        return sum(p.endswith("/chat/completions") for _m, p in self.requests)

    def close(self) -> None:
        self._stopper.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "Endpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Banner:
    """A bounded 127.0.0.1 service that does not speak HTTP (an SSH server's first line to every connection)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(LIFETIME_S)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            while True:
                conn, _ = self.sock.accept()
                with conn:
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        except OSError:
            pass                              # closed, or LIFETIME_S without a connection

    def __enter__(self) -> "Banner":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def completion(text) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()


def models(*names) -> bytes:
    return json.dumps({"object": "list", "data": [{"id": n, "object": "model"} for n in names]}).encode()


def answering(text, model_list=("m",)):
    """A server that lists `model_list` and answers every chat with `text`."""
    def route(method, path):
        return (200, {}, models(*model_list)) if path.endswith("/models") else (200, {}, completion(text))
    return route


def everywhere(status, body=b'{"error": {"message": "scripted"}}', headers=None):
    return lambda method, path: (status, headers or {}, body)


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _subprocess_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def run_cli(argv: list[str], timeout: float) -> tuple[int | None, str, float]:
    """(exit status or None when it ran past `timeout`, stderr, seconds) of `python -m alpha_gym ARGV`."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "alpha_gym", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=_subprocess_env())
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return None, err, time.monotonic() - t0
    return proc.returncode, err, time.monotonic() - t0


# ------------------------------------------------------------------------------------------ 1. a dead endpoint
def endpoint_cases():
    """(name, the server to start or None, spec from the server's URL): every way an endpoint cannot answer."""
    port = dead_port()
    not_found = json.dumps({"error": {"message": "The model `m` does not exist"}}).encode()
    v1_only = lambda m, p: (answering("<alpha>rank(close)</alpha>")(m, p)                             # noqa: E731
                            if p in ("/v1/models", "/v1/chat/completions") else (404, {}, b'{"detail": "Not Found"}'))
    dead = [("dead port", f"http://127.0.0.1:{port}/v1"), ("dead port, localhost", f"http://localhost:{port}/v1"),
            ("dead port, trailing slash", f"http://127.0.0.1:{port}/v1/"),
            ("dead port, no /v1", f"http://127.0.0.1:{port}"), ("dead port, port 9", "http://127.0.0.1:9/v1"),
            ("dead port, a password", f"http://user:{PASSWORD}@127.0.0.1:{port}/v1"),
            ("a host that does not resolve", "http://no-such-host.invalid:8000/v1")]
    cases = [(name, None, lambda url, u=url: f"endpoint:{u}#m") for name, url in dead]
    cases.append(("not HTTP (an SSH banner)", Banner, lambda url: f"endpoint:{url}/v1#m"))
    cases.append(("https to an http server", lambda: Endpoint(answering("<alpha>rank(close)</alpha>")),
                  lambda url: f"endpoint:{url.replace('http://', 'https://')}/v1#m"))
    routes = {
        "401 everywhere": everywhere(401, b'{"error": {"message": "Incorrect API key provided"}}'),
        "403 everywhere": everywhere(403), "404 everywhere": everywhere(404, not_found),
        "405 everywhere": everywhere(405), "400 everywhere": everywhere(400),
        "500 everywhere": everywhere(500, headers={"Retry-After": "0"}),
        "503 loading": everywhere(503, b'{"error": {"message": "Loading model"}}', {"Retry-After": "0"}),
        "a redirect": everywhere(302, b"", {"Location": "http://elsewhere.invalid/v1/chat/completions"}),
        "an HTML page": lambda m, p: (200, {"Content-Type": "text/html"}, b"<html><body>It works!</body></html>"),
        "JSON {}": everywhere(200, b"{}"), "no choices": everywhere(200, b'{"choices": []}'),
        "content null": lambda m, p: (200, {}, completion(None)),
        "not JSON": everywhere(200, b"hello"),
        "the connection dropped": lambda m, p: None,
        "other models listed, chat 404": lambda m, p: ((200, {}, models("other-a", "other-b")) if p.endswith("/models")
                                                       else (404, {}, not_found)),
        "one other model listed, chat 400": lambda m, p: ((200, {}, models("other")) if p.endswith("/models")
                                                          else (400, {}, b'{"error": {"message": "unknown model"}}')),
        "no /models, chat 404": lambda m, p: (404, {}, not_found),
    }
    for name, route in routes.items():
        cases.append((name, lambda r=route: Endpoint(r), lambda url: f"endpoint:{url}/v1#m"))
    cases.append(("a base URL without /v1", lambda: Endpoint(v1_only), lambda url: f"endpoint:{url}#m"))
    cases.append(("a base URL with /v1 twice", lambda: Endpoint(v1_only), lambda url: f"endpoint:{url}/v1/v1#m"))
    cases.append(("a tree mutator beside a dead endpoint", None,
                  lambda url, p=port: f"endpoint:http://127.0.0.1:{p}/v1#m"))
    return cases


def probe_dead_endpoints(tmp: Path) -> tuple[int, list[str]]:
    csv = market_csv(tmp)
    bad, tried = [], 0
    for k, (name, server, spec) in enumerate(endpoint_cases()):
        tried += 1
        out = tmp / f"dead-{k}"
        with (server() if server else contextlib.nullcontext()) as srv:
            more = ["--mutator", spec(srv.url if srv else "")]
            if name.startswith("a tree mutator"):
                more = ["--mutator", "tree", *more]
            rc, err, seconds = run_cli(evolve_argv(csv, out, 90, *more), timeout=60)
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        problems = []
        if rc != 3:
            problems.append(f"rc {rc}")
        if "Traceback" in err or len(lines) != 1 or not lines[0].startswith("alpha-gym evolve: error: "):
            problems.append(f"{len(lines)} lines: {' | '.join(lines)[-160:]}")
        if PASSWORD in err:
            problems.append("the password printed")
        if (out / "proposals.jsonl").exists() or (out / "state.json").exists():
            problems.append("scored before failing")
        if seconds > 40:
            problems.append(f"{seconds:.0f} s")
        if problems:
            bad.append(f"{name}: " + "; ".join(problems))
    return tried, bad


@pytest.mark.slow
def test_an_endpoint_that_cannot_answer_is_one_line_before_anything_is_scored(tmp_path):
    _assert_none(probe_dead_endpoints(tmp_path), 29)


def test_a_working_endpoint_passes_the_check_with_one_short_request():
    from alpha_gym.search.mutators import check_endpoints
    with Endpoint(answering("OK")) as ep:
        check_endpoints(["tree", f"endpoint:{ep.url}/v1#m", "random"])
        assert ep.requests == [("GET", "/v1/models"), ("POST", "/v1/chat/completions")]
    with Endpoint(answering("OK", model_list=("served-name",))) as ep:   # one model under another name: asked
        check_endpoints([f"endpoint:{ep.url}/v1#m"])                     # anyway, as llama.cpp answers any name
        assert ep.chats() == 1


# ------------------------------------------------------------------------------------------ 2. no formula
#: Answers that bring no new formula: (the answer, how the run refuses it).
NO_FORMULA = [("", "unparseable"), ("I'm sorry, I can't help with that.", "unparseable"),
              ("Sure! Buy low, sell high.", "unparseable"), ("<alpha></alpha>", "unparseable"),
              ("<alpha>rank(close</alpha>", "unparseable"), ("<think><alpha>rank(open)</alpha></think>", "unparseable"),
              ("<alpha>rank(open)</alpha> or <alpha>rank(high)</alpha>", "unparseable"),
              ("```\nrank(open)\n```", "unparseable"), ("<alpha>foo(close)</alpha>", "unparseable"),
              ("x" * 20_000, "unparseable"), ("ранг(close)", "unparseable"),
              ('{"formula": "rank(open)"}', "unparseable"),
              ("rank(close)", "duplicates"), ("<alpha>rank(close)</alpha>", "duplicates"),
              ("<alpha> rank( volume ) </alpha>", "duplicates")]
ROUNDS, PLACES = 3, 4


def _small_verifier():
    from alpha_gym import Verifier
    from alpha_gym.market import synthetic_panel
    return Verifier(synthetic_panel(n_stocks=12, n_days=400, seed=3))


def _no_formula_run(verifier, url: str, **more) -> tuple[object, str]:
    """An evolve run of the seeds and one group from the endpoint at `url`, and what it said on stderr."""
    from alpha_gym.search.database import DatabaseConfig
    from alpha_gym.search.evolution import evolve
    from alpha_gym.search.mutators import make_mutator
    grown = verifier.fork()
    mutator = make_mutator(f"endpoint:{url}/v1#m", verifier=grown, limits=grown.config.limits, seed=0)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        result = evolve(grown, mutator, DatabaseConfig(n_islands=2), len(SEEDS) + PLACES, seed_formulas=SEEDS,
                        group_size=PLACES, max_rounds=ROUNDS, progress=None, **more)
    return result, err.getvalue()


def probe_no_formula() -> tuple[int, list[str]]:
    verifier = _small_verifier()
    bad, tried = [], 0
    for answer, kind in NO_FORMULA:
        tried += 1
        with Endpoint(answering(answer)) as ep:
            try:
                result, err = _no_formula_run(verifier, ep.url)
            except Exception as exc:  # noqa: BLE001 - counted
                bad.append(f"{answer[:30]!r}: raised {type(exc).__name__}: {str(exc)[:100]}")
                continue
        asked = ROUNDS * PLACES
        said = [ln for ln in err.splitlines() if ln.startswith("evolve: falling back to random formulas")]
        want = f"{asked} answers asked: 0 new, " + (f"{asked} duplicates, 0 unparseable" if kind == "duplicates"
                                                   else f"0 duplicates, {asked} unparseable")
        if result.rejected != asked:
            bad.append(f"{answer[:30]!r}: {result.rejected} rejected, not {asked}")
        elif len(said) != 1 or want not in said[0] or f"{PLACES} of {PLACES} places of group 3" not in said[0]:
            bad.append(f"{answer[:30]!r}: said {said or 'nothing'} (wanted {want!r})")
    return tried, bad


def test_a_model_that_writes_no_formula_is_said_when_random_formulas_fill_its_group():
    _assert_none(probe_no_formula(), len(NO_FORMULA))


def test_each_round_of_a_filling_group_is_said_with_its_counts():
    """note_every_s=0: a line after every round that leaves the group short, with the running counts."""
    verifier = _small_verifier()
    said: list[str] = []
    answers = iter(["<alpha>rank(close)</alpha>", "no formula here"] * 100)
    lock = threading.Lock()

    def route(method, path):
        with lock:
            return (200, {}, models("m")) if path.endswith("/models") else (200, {}, completion(next(answers)))
    with Endpoint(route) as ep:
        result, err = _no_formula_run(verifier, ep.url, say=said.append, note_every_s=0)
    assert err == ""                                               # every line went to `say`
    filling = [ln for ln in said if ln.startswith("evolve: filling group 3")]
    assert len(filling) == ROUNDS
    for k, line in enumerate(filling, start=1):
        asked = k * PLACES
        assert f"round {k} of {ROUNDS}: {asked} answers asked: 0 new, " in line
        n = re.search(r"0 new, (\d+) duplicates, (\d+) unparseable; 4 of 4 places open", line)
        assert n and int(n[1]) + int(n[2]) == asked, line
    assert said[-1].startswith("evolve: falling back to random formulas for 4 of 4 places of group 3")
    assert "the last refused: 'unparseable: FormulaSyntaxError" in said[-1]
    assert result.calls == len(SEEDS) + PLACES and result.rejected == ROUNDS * PLACES


def test_a_tree_run_says_nothing_between_its_groups(tmp_path):
    """Control: the tree mutator's rounds take milliseconds, so a run of it prints its group lines only."""
    from alpha_gym.search.database import DatabaseConfig
    from alpha_gym.search.evolution import TreeMutator, evolve
    verifier = _small_verifier()
    said: list[str] = []
    evolve(verifier.fork(), TreeMutator(verifier.config.limits), DatabaseConfig(n_islands=2), 60, seed_formulas=SEEDS,
           group_size=4, progress=None, say=said.append)
    assert said == []
    with pytest.raises(Exception, match="note_every_s"):
        evolve(verifier.fork(), TreeMutator(), budget=4, progress=None, note_every_s=-1)


def probe_silent_fill(tmp: Path) -> tuple[int, list[str]]:
    """The command with an endpoint that answers no formula, a second a chat: stderr's longest silence while
    the endpoint's group fills (20 rounds of 4 answers at 4 at a time: about 20 s)."""
    csv = market_csv(tmp)
    with Endpoint(answering("I would rather not."), delay=1.0) as ep:
        proc = subprocess.Popen([sys.executable, "-m", "alpha_gym", *evolve_argv(
            csv, tmp / "silent", 86, "--mutator", f"endpoint:{ep.url}/v1#m")], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, env=_subprocess_env())
        stamped = []
        try:
            for line in proc.stderr:
                stamped.append((time.monotonic(), line.rstrip("\n")))
            proc.wait(timeout=LIFETIME_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    started = next((t for t, ln in stamped if ln.startswith("evolve: group ")), None)   # the first group
    if proc.returncode != 0 or started is None:
        return 1, [f"the run ended rc {proc.returncode}: {' | '.join(ln for _t, ln in stamped)[-200:]}"]
    times = [t for t, _ln in stamped if t >= started]
    gap = max(b - a for a, b in zip(times, times[1:]))
    said = [ln for _t, ln in stamped if ln.startswith(("evolve: filling group", "evolve: falling back"))]
    bad = []
    if gap > 9 or not said or not said[-1].startswith("evolve: falling back"):
        bad.append(f"{gap:.1f} s without a line while the group filled; said {len(said)} lines")
    return 1, bad


@pytest.mark.slow
def test_a_slow_endpoint_group_says_how_it_fills(tmp_path):
    _assert_none(probe_silent_fill(tmp_path), 1)


# ------------------------------------------------------------------------------------------ 3. help
HELPED = ("evolve", "sft", "sft-data", "serve")
DEVELOPER_NOTES = re.compile(r"\bissue \d|\(issue|add_arguments|register\(|main\(args\)")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from alpha_gym.commands.main import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: sub.choices[name] for name in HELPED}


def _shows_default(action: argparse.Action, text: str) -> bool:
    d = action.default
    if isinstance(action, argparse.BooleanOptionalAction):
        return f"default: --{'' if d else 'no-'}{action.dest.replace('_', '-')}" in text
    spelled = {str(d), format(d, "g") if isinstance(d, float) else str(d), format(d, ",") if isinstance(d, int) else ""}
    return "default" in text and any(s and s in text for s in spelled)


def probe_help() -> tuple[int, list[str]]:
    bad, tried = [], 0
    for name, parser in _subparsers().items():
        tried += 1
        page = parser.format_help()
        if DEVELOPER_NOTES.search(page):
            bad.append(f"{name}: a developer note: {DEVELOPER_NOTES.search(page)[0]!r}")
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            tried += 1
            text = " ".join((action.help or "").split()) % {"default": action.default, "prog": parser.prog}
            flag = action.option_strings[0]
            if not text:
                bad.append(f"{name} {flag}: no help text")
            elif not (action.default is None or action.default is False or action.default == []
                      or action.default == argparse.SUPPRESS or action.required) and not _shows_default(action, text):
                bad.append(f"{name} {flag}: the default {action.default!r} is not shown")
    return tried, bad


def test_the_help_shows_every_default_and_no_developer_note():
    _assert_none(probe_help(), 70)


# ------------------------------------------------------------------------------------------ 4. signals
def _background(argv: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    """`alpha-gym ARGV &` from a non-interactive bash script (which starts it with SIGINT ignored): the script
    and the command's pid; the command's stderr goes to `log`."""
    command = " ".join(f"'{a}'" for a in [sys.executable, "-m", "alpha_gym", *argv])
    script = subprocess.Popen(["bash", "-c", f"{command} >/dev/null 2>'{log}' & echo $!; wait $!; exit $?"],
                              stdout=subprocess.PIPE, text=True, env=_subprocess_env(),
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return script, int(script.stdout.readline())


def _wait_until(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _stop_in_background(argv: list[str], out: Path, sig: int, when) -> tuple[int | None, str, float]:
    """Start the command in the background, send `sig` once `when()` holds: (its exit status as the script's
    `wait` reports it, None when it did not end within 10 s; its stderr; seconds from the signal to its end)."""
    log = out.parent / f"{out.name}.log"
    script, pid = _background(argv, log)
    try:
        if not _wait_until(lambda: when() or script.poll() is not None, LIFETIME_S):
            return None, "never got to the point to stop it", 0.0
        os.kill(pid, sig)
        t0 = time.monotonic()
        try:
            rc = script.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None, log.read_text(), 10.0
        return rc, log.read_text(), time.monotonic() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        script.wait()


def _checkpointed_groups(out: Path) -> int:
    """The groups of the run's checkpoint so far (0 before its first; state.json is replaced whole)."""
    try:
        return json.loads((out / "state.json").read_text())["groups"]
    except (FileNotFoundError, ValueError, KeyError):
        return 0


def _outputs_of_a_checkpoint(out: Path) -> str | None:
    """Why the run folder's curve, archive list and book are not those of its checkpoint or an earlier one."""
    state = json.loads((out / "state.json").read_text())
    try:
        curve = [json.loads(x) for x in (out / "curve.jsonl").read_text().splitlines()]
        archive = [json.loads(x) for x in (out / "archive.jsonl").read_text().splitlines()]
        book = json.loads((out / "book.json").read_text())
    except FileNotFoundError as err:
        return f"no {Path(err.filename).name}"
    admitted = [v for _k, v in sorted(state["admitted"].items(), key=lambda kv: int(kv[0]))]
    calls = [h["calls"] for h in state["history"]]
    if not curve or [r["calls"] for r in curve] != calls[:len(curve)]:
        return "curve.jsonl is not the state's history"
    if archive != admitted[:len(archive)] or book.get("groups", 10**9) > state["groups"]:
        return "archive.jsonl or book.json is not of a checkpoint"
    return None


def probe_signals(tmp: Path) -> tuple[int, list[str]]:
    csv = market_csv(tmp)
    lone = tmp / "sig-lone"
    if not (lone / "state.json").exists():
        rc, err, _ = run_cli(evolve_argv(csv, lone, 160), timeout=LIFETIME_S)
        assert rc == 0, err
    bad, tried = [], 0
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        tried += 1
        name = signal.Signals(sig).name
        out = tmp / f"sig-{name}"
        argv = evolve_argv(csv, out, 160)
        rc, err, seconds = _stop_in_background(argv, out, sig, lambda: _checkpointed_groups(out) >= 3)
        lines = [ln for ln in err.strip().splitlines() if not ln.startswith("evolve: ")]
        if rc != code or len(lines) != 1 or "rerun the same command" not in lines[0]:
            bad.append(f"{name} in the background: rc {rc} after {seconds:.1f} s, {' | '.join(lines)[-160:]}")
            continue
        why = _outputs_of_a_checkpoint(out)
        if why:
            bad.append(f"{name}: the stopped run: {why}")
        calls = json.loads((out / "state.json").read_text())["calls"]
        rc, err, _ = run_cli(argv, timeout=LIFETIME_S)
        if rc != 0 or f"evolve: resuming at {calls} calls" not in err:
            bad.append(f"{name}: the rerun ended rc {rc} without 'resuming at {calls} calls'")
        elif (out / "proposals.jsonl").read_text() != (lone / "proposals.jsonl").read_text():
            bad.append(f"{name}: the resumed run is not the lone run")
    with Endpoint(answering("no formula"), delay=60.0) as ep:   # a model that takes a minute to answer
        for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            tried += 1
            name = signal.Signals(sig).name
            out = tmp / f"sig-endpoint-{name}"
            asked = ep.chats()
            rc, err, seconds = _stop_in_background(evolve_argv(csv, out, 90, "--mutator", f"endpoint:{ep.url}/v1#m"),
                                                   out, sig, lambda: ep.chats() > asked + 1)   # after the check's
            lines = [ln for ln in err.strip().splitlines() if not ln.startswith("evolve: ")]
            if rc != code or seconds > 5 or len(lines) != 1 or "rerun the same command" not in lines[0]:
                bad.append(f"{name} with a request in flight: rc {rc} after {seconds:.1f} s, "
                           f"{' | '.join(lines)[-160:]}")
    return tried, bad


@pytest.mark.slow
def test_a_background_run_stops_on_sigint_and_sigterm_and_its_rerun_resumes(tmp_path):
    _assert_none(probe_signals(tmp_path), 4)


def test_the_signal_handlers_are_restored_after_the_command():
    from alpha_gym.commands.evolve import Stopped, stopped_by_signals
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stopped_by_signals():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            with pytest.raises(Stopped) as stop:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
            assert stop.value.signum == signal.SIGTERM and isinstance(stop.value, KeyboardInterrupt)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)


# ------------------------------------------------------------------------------------------ 5. the run folder
KILL_BETWEEN = """
import json, os, signal, sys, warnings
warnings.simplefilter("ignore")
from alpha_gym import Verifier
from alpha_gym.market import synthetic_panel
from alpha_gym.search import evolution
from alpha_gym.search.database import DatabaseConfig
out, kill_at = sys.argv[1], int(sys.argv[2])
write = evolution._write_atomic

def dying(path, text):            # SIGKILL after the archive is written, before the state that names it
    if path.name == "state.json" and json.loads(text)["groups"] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    write(path, text)
evolution._write_atomic = dying
v = Verifier(synthetic_panel(n_stocks=12, n_days=400, seed=3))
evolution.evolve(v, evolution.TreeMutator(limits=v.config.limits), DatabaseConfig(n_islands=2), budget=40, seed=1,
                 out_dir=out, seed_formulas=%r, group_size=4, progress=None, checkpoint_every=2)
""" % (SEEDS,)


def _kill_between(out: Path, kill_at: int) -> int:
    return subprocess.run([sys.executable, "-c", KILL_BETWEEN, str(out), str(kill_at)], capture_output=True,
                          env=_subprocess_env(), timeout=LIFETIME_S).returncode


def probe_run_folder(tmp: Path) -> tuple[int, list[str]]:
    bad, tried = [], 1
    lone = tmp / "folder-lone"
    _kill_between(lone, 0)
    names = sorted(p.name for p in lone.iterdir())
    extra = [n for n in names if n.endswith(".npz")][1:] + [n for n in names if n.endswith(".lock") and
                                                           n != "evolve.lock"]
    if extra:
        bad.append(f"a finished run keeps {extra} beside what a resume reads")
    for kill_at in (4, 6, 8):    # checkpoints every second group: the same slot parity each time
        tried += 1
        out = tmp / f"folder-kill-{kill_at}"
        if _kill_between(out, kill_at) != -signal.SIGKILL:
            bad.append(f"killed at group {kill_at}: the run was not killed")
            continue
        problems = [_outputs_of_a_checkpoint_library(out) or ""]
        _kill_between(out, 0)
        if (out / "proposals.jsonl").read_text() != (lone / "proposals.jsonl").read_text():
            problems.append("resumed to other bits")
        if any(problems):
            bad.append(f"killed at group {kill_at} between its archive and its state: "
                       + "; ".join(p for p in problems if p))
    tried += 1
    csv = market_csv(tmp)
    out = tmp / "folder-cli"
    rc, err, _ = run_cli(evolve_argv(csv, out, 24), timeout=LIFETIME_S)
    leftovers = sorted(p.name for p in out.iterdir() if p.suffix in (".npz", ".lock", ".pt", ".tmp"))
    if rc != 0 or len([n for n in leftovers if n.endswith(".npz")]) != 1 or \
            [n for n in leftovers if not n.endswith(".npz")] != ["evolve.lock"]:
        bad.append(f"the command's run folder keeps {leftovers} (rc {rc})")
    return tried, bad


def _outputs_of_a_checkpoint_library(out: Path) -> str | None:
    """`_outputs_of_a_checkpoint` for a library run (no curve: the command writes it)."""
    state = json.loads((out / "state.json").read_text())
    try:
        archive = [json.loads(x) for x in (out / "archive.jsonl").read_text().splitlines()]
        book = json.loads((out / "book.json").read_text())
    except FileNotFoundError as err:
        return f"no {Path(err.filename).name}"
    admitted = [v for _k, v in sorted(state["admitted"].items(), key=lambda kv: int(kv[0]))]
    if archive != admitted or book.get("groups") != state["groups"] or book.get("calls") != state["calls"]:
        return "archive.jsonl or book.json is not the checkpoint's"
    return None


def test_the_run_folder_keeps_what_a_resume_needs_and_its_outputs_at_each_checkpoint(tmp_path):
    _assert_none(probe_run_folder(tmp_path), 5)


# ------------------------------------------------------------------------------------------ script
def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="evolve_newcomer_"))
    run_probes([("endpoint that cannot answer", lambda: probe_dead_endpoints(tmp)),
                ("no formula", probe_no_formula), ("silent fill", lambda: probe_silent_fill(tmp)),
                ("help", probe_help), ("signals", lambda: probe_signals(tmp)),
                ("run folder", lambda: probe_run_folder(tmp))], shown=40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
