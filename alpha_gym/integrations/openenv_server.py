"""An OpenEnv-style HTTP server for `AlphaEnvironment` whose episodes live in sessions, and its client.

    python -m alpha_gym.commands.openenv_server --port 8001 [--data ... --universe ...] [--config F --set K=V]

    POST /reset   {"seed"?, "episode_id"?, "brief_id"?, "session_id"?}
                  -> {"session_id", "observation", "reward", "done"}    (a new session, or that one reset)
    POST /step    {"session_id", "action": {"answer": TEXT}}
                  -> {"session_id", "observation", "reward", "done"}
    GET  /state?session_id=ID      the session's OpenEnv State
    DELETE /sessions/ID            end a session
    GET  /health

The bodies are OpenEnv's (`ResetRequest`, `StepRequest`, `serialize_observation`) plus a
`session_id`, so an episode's step sees its reset. Errors are JSON `{"error"}`: 400 bad
or too deeply nested JSON, 404 unknown session or path, 405 wrong method, 409 step before reset
or after the episode ended, 413 a body over 128 KiB, 422 a malformed action or reset. At most
`max_sessions` live at once; the least recently used goes first. Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import collections
import json
import threading
import uuid
from typing import Any

from alpha_gym.service.http_json import RequestError

MAX_SESSIONS = 1024
MAX_BYTES = 1 << 17


def _reset_kwargs(payload: dict) -> dict:
    """The keywords of `AlphaEnvironment.reset` a /reset body gives; RequestError 422 for a wrong type."""
    kwargs = {k: payload[k] for k in ("seed", "episode_id", "brief_id") if payload.get(k) is not None}
    seed = kwargs.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise RequestError(422, f'"seed" must be a non-negative integer, got {seed!r}')
    wrong = [k for k in ("episode_id", "brief_id") if k in kwargs and not isinstance(kwargs[k], str)]
    if wrong:
        raise RequestError(422, f"{wrong} must be strings")
    return kwargs


def _validation_errors(err) -> list:
    """pydantic's errors as JSON data; without the inputs they echo where one holds a lone surrogate (pydantic
    cannot serialise it as UTF-8, and the message says what is wrong without it)."""
    try:
        return json.loads(err.json(include_url=False))
    except ValueError:
        return json.loads(err.json(include_url=False, include_input=False))


def create_app(env_factory=None, *, max_sessions: int = MAX_SESSIONS):
    """The Starlette app; `env_factory()` makes one AlphaEnvironment per session (default: the synthetic market)."""
    import anyio
    from openenv.core.env_server.serialization import deserialize_action, serialize_observation
    from pydantic import ValidationError
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    from alpha_gym.integrations.openenv import AlphaAction, AlphaEnvironment
    from alpha_gym.service.http_json import json_error_handlers, json_response, parse_json, read_body
    factory = env_factory or AlphaEnvironment
    sessions: collections.OrderedDict[str, Any] = collections.OrderedDict()
    lock = threading.Lock()

    def session(session_id) -> Any:
        with lock:
            env = sessions.get(session_id) if isinstance(session_id, str) else None
            if env is None:
                raise RequestError(404, f"unknown session_id {session_id!r}: POST /reset first (sessions end on "
                                        "DELETE or when the least recently used of "
                                        f"{max_sessions} is dropped)")
            sessions.move_to_end(session_id)
            return env

    async def body(request: Request) -> dict:
        payload = parse_json(await read_body(request, MAX_BYTES) or b"{}")
        if not isinstance(payload, dict):
            raise RequestError(422, "the body must be a JSON object")
        return payload

    def errors(handler):
        # json_response writes ASCII JSON: text no UTF-8 can encode (a lone surrogate, in an episode_id or an
        # error's echo of the input) is sent as its escape, never a UnicodeEncodeError and a 500
        async def wrapped(request: Request):
            try:
                return json_response(await handler(request))
            except ValidationError as err:
                return json_response({"error": _validation_errors(err)}, 422)
            except ValueError as err:  # e.g. an unknown brief_id
                return json_response({"error": str(err)}, 422)
        return wrapped

    async def reset(request: Request):
        payload = await body(request)
        kwargs = _reset_kwargs(payload)  # checked first: a bad reset opens no session
        session_id = payload.pop("session_id", None)
        env = session(session_id) if session_id is not None else None
        if env is not None:
            obs = await anyio.to_thread.run_sync(lambda: env.reset(**kwargs))
            return {"session_id": session_id, **serialize_observation(obs)}
        env = await anyio.to_thread.run_sync(factory)
        # reset before registering: a reset that fails (an unknown brief_id) leaves no empty session behind
        obs = await anyio.to_thread.run_sync(lambda: env.reset(**kwargs))
        session_id = uuid.uuid4().hex
        with lock:
            sessions[session_id] = env
            while len(sessions) > max_sessions:
                sessions.popitem(last=False)
        return {"session_id": session_id, **serialize_observation(obs)}

    async def step(request: Request):
        payload = await body(request)
        env = session(payload.get("session_id"))
        if not isinstance(payload.get("action"), dict):
            raise RequestError(422, 'give "action": {"answer": TEXT}')
        action = deserialize_action(payload["action"], AlphaAction)
        try:
            obs = await anyio.to_thread.run_sync(env.step, action)
        except RuntimeError as err:  # step before reset, or after the episode ended
            raise RequestError(409, str(err)) from None
        return {"session_id": payload["session_id"], **serialize_observation(obs)}

    async def state(request: Request):
        return session(request.query_params.get("session_id")).state.model_dump()

    async def close(request: Request):
        session_id = request.path_params["session_id"]
        session(session_id)
        with lock:
            sessions.pop(session_id, None)
        return {"closed": session_id}

    async def health(request: Request):
        return {"status": "healthy", "sessions": len(sessions)}

    return Starlette(routes=[Route("/reset", errors(reset), methods=["POST"]),
                             Route("/step", errors(step), methods=["POST"]),
                             Route("/state", errors(state), methods=["GET"]),
                             Route("/sessions/{session_id}", errors(close), methods=["DELETE"]),
                             Route("/health", errors(health), methods=["GET"])],
                     exception_handlers=json_error_handlers())


class AlphaEnvClient:
    """A client of one session: `reset()` then `step(answer)`, returning OpenEnv `StepResult`s."""

    def __init__(self, base_url: str, timeout: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session_id: str | None = None

    def _call(self, method: str, path: str, payload=None) -> dict:
        from alpha_gym.service.client import request_json  # the scoring service's client, same errors
        return request_json(method, self.base_url + path, payload, self.timeout)

    def _result(self, payload: dict):
        from openenv.core.client_types import StepResult
        from alpha_gym.integrations.openenv import AlphaObservation
        obs = AlphaObservation(**payload["observation"], reward=payload["reward"], done=payload["done"])
        return StepResult(observation=obs, reward=payload["reward"], done=payload["done"])

    def reset(self, seed: int | None = None, brief_id: str | None = None):
        payload = {k: v for k, v in {"seed": seed, "brief_id": brief_id, "session_id": self.session_id}.items()
                   if v is not None}
        out = self._call("POST", "/reset", payload)
        self.session_id = out["session_id"]
        return self._result(out)

    def step(self, answer):
        action = answer.model_dump(exclude={"metadata"}) if hasattr(answer, "model_dump") else {"answer": answer}
        return self._result(self._call("POST", "/step", {"session_id": self.session_id, "action": action}))

    def state(self) -> dict:
        return self._call("GET", f"/state?session_id={self.session_id}")

    def close(self) -> None:
        if self.session_id is not None:
            self._call("DELETE", f"/sessions/{self.session_id}")
            self.session_id = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
