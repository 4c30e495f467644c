"""The scoring service (`alpha-gym serve`): parity with the verifier, request validation, start and stop."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="starlette (alpha-gym[serve]) is not installed")
pytest.importorskip("uvicorn", reason="uvicorn (alpha-gym[serve]) is not installed")

from alpha_gym.market import synthetic_panel  # noqa: E402
from alpha_gym.scoring.verifier import Verifier  # noqa: E402
from alpha_gym.service.client import ScoringClient, ServiceError  # noqa: E402
from alpha_gym.service.server import BackgroundServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ANSWERS = ["<alpha>rank(-ts_delta(close, 5))</alpha>",
           "<think>volume spikes fade</think><alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>rank(ts_mean(close, 250))</alpha>",     # static book: invalid
           "<alpha>rank(close -)</alpha>",                  # syntax error: invalid
           "no answer tag at all",
           "<alpha>rank(-ts_delta(close, 5))</alpha>"]      # a duplicate inside the group


def _roundtrip(obj):
    return json.loads(json.dumps(obj))


def _with_brief(score, brief) -> dict:
    """A score as `alpha-gym score --brief ID --json` prints it (without the alpha tests): with its brief object."""
    from alpha_gym.scoring.report import brief_object
    return {**score.to_dict(), "brief": brief_object(brief, score.formula, score.valid)}


@pytest.fixture(scope="module")
def panel():
    return synthetic_panel(n_stocks=12, n_days=400, seed=3)


@pytest.fixture(scope="module")
def served(panel):
    server = BackgroundServer(lambda: Verifier(panel), max_bytes=64 * 1024, max_answers=8)
    with server as url:
        client = ScoringClient(url)
        client.wait_ready(120)
        yield url, client


def _raw(url: str, method: str, path: str, body: bytes | None = None, headers=None):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_scores_equal_direct_verifier_calls(served, panel):
    _, client = served
    direct = Verifier(panel)
    for answer in ANSWERS:
        assert client.score(answer) == _roundtrip(direct.score(answer).to_dict())
    assert client.score_formula("rank(-ts_delta(close, 5))") == \
        _roundtrip(direct.score_formula("rank(-ts_delta(close, 5))").to_dict())
    group = client.score_group(ANSWERS)
    assert group == _roundtrip([s.to_dict() for s in direct.score_group(ANSWERS).scores])
    assert [g["valid"] for g in group] == [True, True, False, False, False, True]
    # the group sees its duplicate; single scores do not
    assert group[0]["channels"]["novelty_syntax"] < client.score(ANSWERS[0])["channels"]["novelty_syntax"]


def test_a_brief_id_reaches_the_scoring_and_leaves_the_reward(served, panel):
    """Issue 38.1: the brief the answers answer reaches `score_group(..., brief=)`; no channel reads it yet."""
    from alpha_gym.tasks.sets import brief_set
    _, client = served
    direct, brief = Verifier(panel), brief_set("train")[0]
    got = client.score_group(ANSWERS, brief_id=brief.id)
    assert got == _roundtrip([_with_brief(s, brief) for s in direct.score_group(ANSWERS, brief=brief).scores])
    assert [g["reward"] for g in got] == [s.reward for s in direct.score_group(ANSWERS).scores]
    assert "brief_compliance" in got[0]["diagnostics"]
    assert "brief_compliance" not in client.score(ANSWERS[0])["diagnostics"]
    assert client.score(ANSWERS[0], brief_id=brief.id) == _roundtrip(_with_brief(direct.score(ANSWERS[0], brief=brief),
                                                                                 brief))


def test_concurrent_requests_get_the_direct_answer(served, panel):
    _, client = served
    expected = {a: _roundtrip(Verifier(panel).score(a).to_dict()) for a in ANSWERS[:3]}
    results, errors = [], []

    def worker(k):
        try:
            answer = ANSWERS[k % 3]
            results.append(client.score(answer) == expected[answer])
        except Exception as err:  # collected: a thread cannot fail the test itself
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and results == [True] * 12


@pytest.mark.parametrize("method, path, body, status, says", [
    ("POST", "/score", b"{not json", 400, "not JSON"),
    ("POST", "/score", b"\xff\xfe", 400, "not JSON"),
    ("POST", "/score", b"[1, 2]", 422, "JSON object"),
    ("POST", "/score", b'{"answer": "a", "answers": ["b"]}', 422, "exactly one"),
    ("POST", "/score", b'{"prompt": "a"}', 422, "exactly one"),
    ("POST", "/score", b'{"answer": 3}', 422, "must be a string"),
    ("POST", "/score", b'{"answers": []}', 422, "non-empty list"),
    ("POST", "/score", b'{"answers": "text"}', 422, "non-empty list"),
    ("POST", "/score", b'{"answers": ["a", 2]}', 422, "items [1]"),
    ("POST", "/score", json.dumps({"answers": ["x"] * 9}).encode(), 422, "most in one group is 8"),
    ("POST", "/score", json.dumps({"answer": "x" * 70_000}).encode(), 413, "over 65536 bytes"),
    ("POST", "/score", b'{"answer": "a", "brief_id": 3}', 422, 'brief_id\\" must be a string'),
    ("POST", "/score", b'{"answer": "a", "brief_id": "nope"}', 422, "not a seeded or fixed brief"),
    ("GET", "/score", None, 405, ""),
    ("POST", "/health", b"{}", 405, ""),
    ("GET", "/nowhere", None, 404, ""),
])
def test_bad_requests_get_clear_4xx(served, method, path, body, status, says):
    url, _ = served
    code, text = _raw(url, method, path, body, {"Content-Type": "application/json"})
    assert code == status
    assert says in text.decode(errors="replace")


def test_a_false_content_length_is_no_way_round_the_size_limit(served):
    url, client = served
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:  # chunked: no Content-Length at all
        conn.request("POST", "/score", body=iter([b'{"answer": "', b"x" * 70_000, b'"}']),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        response = conn.getresponse()
        assert response.status == 413
    finally:
        conn.close()
    assert client.health()["status"] == "ready"  # and the server is still up


def test_health_says_starting_then_ready_and_score_waits(panel):
    gate = threading.Event()

    def build():
        gate.wait(60)
        return Verifier(panel)

    with BackgroundServer(build) as url:
        client = ScoringClient(url)
        with pytest.raises(ServiceError) as err:
            client.health()
        assert err.value.status == 503 and "starting" in str(err.value)
        with pytest.raises(ServiceError) as err:
            client.score(ANSWERS[0])
        assert err.value.status == 503 and "retry" in str(err.value)
        gate.set()
        assert client.wait_ready(60)["status"] == "ready"
        assert client.score(ANSWERS[0])["valid"] is True


def test_a_verifier_that_cannot_be_built_is_reported(panel):
    def build():
        return Verifier(panel.head(30))  # too few sessions: DataError

    with BackgroundServer(build) as url:
        client = ScoringClient(url)
        with pytest.raises(ServiceError) as err:
            client.wait_ready(30)
        assert err.value.status == 503 and "DataError" in str(err.value)
        with pytest.raises(ServiceError) as err:
            client.score(ANSWERS[0])
        assert err.value.status == 503 and "failed" in str(err.value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_serve_starts_scores_like_cli_score_and_stops_on_sigterm():
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "alpha_gym", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = ScoringClient(f"http://127.0.0.1:{port}")
        client.wait_ready(240)
        served = client.score(ANSWERS[1])
        printed = subprocess.run([sys.executable, "-m", "alpha_gym", "score", "--answer", ANSWERS[1], "--json"],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=True)
        printed = json.loads(printed.stdout)
        assert printed.pop("alpha_tests")["fitness"]["source"] == "docs/alpha_tests.md"  # the CLI's report only
        assert served == printed
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stderr.read()
    assert "Traceback" not in out
    with pytest.raises(OSError):  # nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_cli_serve_takes_the_settings_file(changed_settings):
    from alpha_gym.market.resolve import default_panel
    from alpha_gym.tasks.sets import brief_set
    toml, sets, config = changed_settings
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "alpha_gym", "serve", "--port", str(port), "--config", str(toml),
                             "--set", sets[0]], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        client = ScoringClient(f"http://127.0.0.1:{port}")
        client.wait_ready(240)
        want = Verifier(default_panel(), config).score(ANSWERS[0])
        assert client.score(ANSWERS[0]) == _roundtrip(want.to_dict())
        assert want.reward != Verifier(default_panel()).score(ANSWERS[0]).reward
        brief = brief_set("probe")[0]  # R13, on in the changed settings, reads the request's brief
        with_brief = Verifier(default_panel(), config).score(ANSWERS[0], brief=brief)
        assert client.score(ANSWERS[0], brief_id=brief.id) == _roundtrip(_with_brief(with_brief, brief))
        # R13 is not the last term of the sum (R14 `book` follows it): the same up to rounding
        assert with_brief.reward == pytest.approx(want.reward + with_brief.channels["brief"], abs=1e-12)
        assert with_brief.reward != want.reward
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
