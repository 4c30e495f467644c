"""OpenEnv integration: the environment, and a session server whose steps see their resets."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("openenv.core.env_server.interfaces", reason="openenv-core (and fastapi, fastmcp) not installed")
pytest.importorskip("uvicorn", reason="uvicorn is not installed")

from alpha_gym.integrations.openenv import AlphaAction, AlphaEnvironment, AlphaObservation  # noqa: E402
from alpha_gym.integrations.openenv_server import AlphaEnvClient, create_app  # noqa: E402
from alpha_gym.pool import shared_verifier  # noqa: E402
from alpha_gym.scoring.verifier import Verifier  # noqa: E402
from alpha_gym.service.client import ServiceError  # noqa: E402
from alpha_gym.service.server import BackgroundServer  # noqa: E402

GOOD = "<alpha>rank(-ts_delta(close, 5))</alpha>"
ANSWERS = [GOOD, "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>", "<alpha>rank(close -)</alpha>",
           "no tag"]


@pytest.fixture(scope="module")
def direct():
    from alpha_gym.market.resolve import default_panel
    return Verifier(default_panel())


def test_environment_episode_equals_the_verifier(direct):
    env = AlphaEnvironment(briefs="probe")
    assert env.verifier is shared_verifier()  # one verifier per process, not per environment
    with pytest.raises(RuntimeError, match="reset"):
        env.step(AlphaAction(answer=GOOD))
    first = env.reset(seed=3)
    assert isinstance(first, AlphaObservation) and not first.done and "<alpha>" in first.prompt
    assert env.reset(seed=3).brief_id == first.brief_id  # seeded
    from alpha_gym.tasks.sets import brief_by_id
    brief = brief_by_id(first.brief_id)  # the episode's brief goes to the scoring (R13 reads it)
    for answer in ANSWERS:
        env.reset(seed=3)
        obs = env.step(AlphaAction(answer=answer))
        want = direct.score(answer, brief=brief)
        assert obs.done and obs.reward == want.reward and obs.valid == want.valid and obs.channels == want.channels
        assert env.state.step_count == 1
    with pytest.raises(RuntimeError, match="over"):
        env.step(AlphaAction(answer=GOOD))


@pytest.fixture(scope="module")
def server():
    with BackgroundServer(app=create_app(lambda: AlphaEnvironment(briefs="probe"), max_sessions=3)) as url:
        yield url


def test_sessions_keep_their_episode_across_reset_and_step(server, direct):
    a, b = AlphaEnvClient(server), AlphaEnvClient(server)
    ra, rb = a.reset(seed=1), b.reset(seed=2, brief_id="g0-0008")
    assert a.session_id != b.session_id and rb.observation.brief_id == "g0-0008"
    sb = b.step(ANSWERS[2])  # interleaved: each session steps its own episode
    sa = a.step(GOOD)
    assert sa.observation.brief_id == ra.observation.brief_id and sa.done
    from alpha_gym.tasks.sets import brief_by_id
    want = direct.score(GOOD, brief=brief_by_id(ra.observation.brief_id))  # each episode's brief reaches R13
    assert sa.reward == want.reward and sa.observation.channels == want.channels
    assert sb.reward == direct.score(ANSWERS[2], brief=brief_by_id("g0-0008")).reward and sb.observation.valid is False
    assert a.state()["step_count"] == 1
    with pytest.raises(ServiceError) as err:
        a.step(GOOD)
    assert err.value.status == 409 and "over" in str(err.value)
    assert a.reset(seed=1).observation.brief_id == ra.observation.brief_id  # the same session, reset
    assert a.step(AlphaAction(answer=GOOD)).reward == sa.reward
    a.close()
    with pytest.raises(ServiceError) as err:
        a._call("POST", "/step", {"session_id": "nope", "action": {"answer": GOOD}})
    assert err.value.status == 404 and "POST /reset first" in str(err.value)


@pytest.mark.parametrize("payload, status", [({"session_id": None, "action": {"answer": GOOD}}, 404),
                                             ("new", 422), ({"action": {"answer": 5}}, 422)])
def test_bad_steps_are_clear_errors(server, payload, status):
    client = AlphaEnvClient(server)
    client.reset(seed=0)
    if payload == "new":
        payload = {"session_id": client.session_id, "action": "text"}
    elif "session_id" not in payload:
        payload = {**payload, "session_id": client.session_id}
    with pytest.raises(ServiceError) as err:
        client._call("POST", "/step", payload)
    assert err.value.status == status


def test_least_recently_used_sessions_are_dropped(server):
    clients = [AlphaEnvClient(server) for _ in range(4)]
    for c in clients:
        c.reset(seed=0)
    with pytest.raises(ServiceError) as err:  # max_sessions=3: the first is gone
        clients[0].step(GOOD)
    assert err.value.status == 404
    assert clients[3].step(GOOD).done


def test_a_failed_reset_opens_no_session(server):
    clients = [AlphaEnvClient(server) for _ in range(3)]  # max_sessions=3: the server is full
    for c in clients:
        c.reset(seed=0)
    for _ in range(2):  # were these to open sessions, they would push the first client out
        with pytest.raises(ServiceError) as err:
            AlphaEnvClient(server).reset(brief_id="no-such-brief")
        assert err.value.status == 422 and "no-such-brief" in str(err.value)
    assert all(c.step(GOOD).done for c in clients)


def test_concurrent_sessions(server, direct):
    results, errors = [], []

    def episode(k):
        try:
            c = AlphaEnvClient(server)
            c.reset(seed=k)
            results.append(c.step(ANSWERS[k % 2]).reward == direct.score(ANSWERS[k % 2]).reward)
        except Exception as err:  # collected for the assertion below
            errors.append(err)

    threads = [threading.Thread(target=episode, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and results == [True] * 3


def test_settings_reach_the_environment_and_the_server(changed_settings):
    from alpha_gym.commands.openenv_server import main
    from alpha_gym.market.resolve import default_panel
    from alpha_gym.tasks.sets import brief_by_id
    toml, sets, config = changed_settings
    brief = brief_by_id(AlphaEnvironment(briefs="probe").reset(seed=1).brief_id)
    want = Verifier(default_panel(), config).score(GOOD, brief=brief)
    assert want.reward != Verifier(default_panel()).score(GOOD, brief=brief).reward
    assert want.channels["brief"] > 0  # R13 is on in the changed settings: the episode's brief reaches it
    for env in (AlphaEnvironment(briefs="probe", config=str(toml)), AlphaEnvironment(briefs="probe", settings=sets),
                AlphaEnvironment(briefs="probe", config=config)):
        env.reset(seed=1)
        obs = env.step(AlphaAction(answer=GOOD))
        assert obs.reward == want.reward and obs.channels == want.channels
    with BackgroundServer(app=create_app(lambda: AlphaEnvironment(briefs="probe", config=str(toml)))) as url:
        with AlphaEnvClient(url) as client:
            client.reset(seed=1)
            assert client.step(GOOD).reward == want.reward
    # the server's own --config/--set: a bad one is one clear line before anything listens
    assert main(["--set", "verifier.nope=1"]) == 2


def test_parallel_steps_on_one_session_score_one_answer(server, direct):
    """Issue 41.3: eight parallel POST /step on one episode scored 3-8 answers (each 200) while /state said
    step_count 1, so a client could keep the best of N. Now exactly one is scored, the rest are 409."""
    import http.client
    import json
    host, port = server.removeprefix("http://").split(":")
    for trial in range(4):
        client = AlphaEnvClient(server)
        client.reset(seed=trial)
        start = threading.Barrier(8)
        statuses, rewards = [], []

        def step(k):
            conn = http.client.HTTPConnection(host, int(port), timeout=120)  # one real connection per step
            body = json.dumps({"session_id": client.session_id, "action": {"answer": ANSWERS[k % 2]}})
            start.wait()
            conn.request("POST", "/step", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = json.loads(response.read())
            statuses.append(response.status)
            if response.status == 200:
                rewards.append((payload["reward"], ANSWERS[k % 2]))
            conn.close()

        threads = [threading.Thread(target=step, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(statuses) == [200] + [409] * 7, statuses
        [(reward, answer)] = rewards
        assert reward == direct.score(answer).reward
        assert client.state()["step_count"] == 1


def test_parallel_steps_on_one_environment_score_one_answer():
    env = AlphaEnvironment(briefs="probe")
    env.reset(seed=0)
    start, outcomes = threading.Barrier(6), []

    def step():
        start.wait()
        try:
            outcomes.append(env.step(AlphaAction(answer=GOOD)).done)
        except RuntimeError as err:
            outcomes.append(str(err))

    threads = [threading.Thread(target=step) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert outcomes.count(True) == 1 and sum("over" in str(o) for o in outcomes) == 5


def test_a_lone_surrogate_is_scored_as_the_scoring_service_scores_it(server, direct):
    """Issue 41.8: a lone surrogate in an answer was an HTTP 500 (pydantic refuses the text, then fails to
    serialise its own error); `serve` scores it. Now the reward and channels equal the direct call's."""
    from alpha_gym.tasks.sets import brief_by_id
    for answer in ("\ud800", GOOD + " \udc80", "<alpha>rank(close\ud800)</alpha>"):
        with AlphaEnvClient(server) as client:
            brief = brief_by_id(client.reset(seed=0).observation.brief_id)
            result = client.step(answer)
            want = direct.score(answer, brief=brief)
            assert result.reward == want.reward and result.observation.channels == want.channels
    with AlphaEnvClient(server) as client:
        client.reset(seed=0)
        with pytest.raises(ServiceError) as err:  # a refused action holding one: a 422 naming the problem
            client._call("POST", "/step", {"session_id": client.session_id,
                                           "action": {"answer": "x", "metadata": {"\ud800": 1}, "\ud800": 2}})
        assert err.value.status == 422
