"""The ASGI app of the scoring service (Starlette).

    GET  /health                      {"status": "starting" | "ready" | "failed", ...}; 503 until ready
    POST /score {"answer": TEXT}      the same JSON object as `alpha-gym score --answer TEXT --json` (without
                                      its "alpha_tests", which trade the formula a second time)
    POST /score {"formula": TEXT}     the same as `alpha-gym score TEXT --json`
    POST /score {"answers": [TEXT...]} a list of those objects, scored as one group (`Verifier.score_group`)
                                      each may add "brief_id": the seeded or fixed brief the answers were written
                                      for, passed to the scoring (`score_group(..., brief=)`; 422 if unknown);
                                      each object then carries the "brief" object `score --brief ID --json` prints

The verifier is built (and its archive warmed, and with `workers` >= 2 its scoring processes started) in
a background thread at start-up, so /health answers at once and says when scoring is possible. Requests
are validated before any scoring: a body over `max_bytes` is 413, malformed or too deeply nested JSON 400,
a wrong shape 422, and scoring before the verifier is ready 503; every error, an unknown path (404) or
method (405) included, is JSON `{"error"}` (`http_json`). Anything a model wrote inside a valid request is
scored (an invalid answer gets the invalid-answer reward, never an error). Requests are handled in
threads, at most `concurrency` at a time; with `workers` >= 2 each answer is prepared (parsed, evaluated,
booked) on one of that many worker processes (`alpha_gym.pool`: every core, where threads alone kept
one core busy) and its channels scored here. The verifier is only read, never updated, so every
response equals a direct call, bit for bit, whatever the workers.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

from starlette.applications import Starlette  # first: without the serve extra, the error names starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
import anyio  # noqa: E402,I001  (starlette's own dependency)

from alpha_gym.service import MAX_ANSWERS, MAX_BYTES
from alpha_gym.service.http_json import RequestError, json_error_handlers, json_response, parse_json, read_body


def parse_request(body: bytes, max_answers: int = MAX_ANSWERS) -> tuple[str, object, object]:
    """("answer" | "formula", TEXT, brief) or ("answers", [TEXT, ...], brief), brief None without "brief_id";
    RequestError for anything else."""
    from alpha_gym.errors import InputError
    from alpha_gym.tasks.sets import require_brief
    payload = parse_json(body)
    if not isinstance(payload, dict):
        raise RequestError(422, f"the body must be a JSON object, got {type(payload).__name__}")
    keys = [k for k in ("answer", "formula", "answers") if k in payload]
    extra = sorted(set(payload) - {"answer", "formula", "answers", "brief_id"})
    if len(keys) != 1 or extra:
        raise RequestError(422, 'give exactly one of "answer" (text), "formula" (text) or "answers" '
                                f'(list of text), and optionally "brief_id"; got keys {sorted(payload)}')
    key, value = keys[0], payload[keys[0]]
    if key == "answers":
        if not isinstance(value, list) or not value:
            raise RequestError(422, '"answers" must be a non-empty list of strings')
        if len(value) > max_answers:
            raise RequestError(422, f'"answers" holds {len(value)} answers; the most in one group is {max_answers}')
        bad = [i for i, a in enumerate(value) if not isinstance(a, str)]
        if bad:
            raise RequestError(422, f'"answers" items must be strings; items {bad[:5]} are not')
    elif not isinstance(value, str):
        raise RequestError(422, f'"{key}" must be a string, got {type(value).__name__}')
    brief_id = payload.get("brief_id")
    if brief_id is not None and not isinstance(brief_id, str):
        raise RequestError(422, f'"brief_id" must be a string, got {type(brief_id).__name__}')
    try:
        brief = require_brief(brief_id)
    except InputError as err:
        raise RequestError(422, str(err)) from None
    return key, value, brief


def score_object(score, brief=None) -> dict:
    """A score as `alpha-gym score --json` prints it: with a brief, its "brief" object too (`brief_object`: the
    checks met, the brief's text, each check in words). The industry's tests are the command's alone: they trade
    the formula a second time."""
    from alpha_gym.scoring.report import brief_object
    out = score.to_dict()
    if brief is not None:
        out["brief"] = brief_object(brief, score.formula, score.valid)
    return out


def create_app(build_verifier: Callable[[], object], *, max_bytes: int = MAX_BYTES, max_answers: int = MAX_ANSWERS,
               concurrency: int = 2, workers: int | None = 1) -> Starlette:
    """The service for the verifier `build_verifier()` returns (called once, in a background thread).
    `workers`: scoring processes (1: score in the server's threads; None: `alpha_gym.pool.default_workers`)."""
    from alpha_gym import pool
    state = {"status": "starting", "verifier": None, "error": None, "workers": workers}
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    def build() -> None:
        try:
            verifier = build_verifier()
            _ = verifier.archive, verifier.factors  # warm the lazy state: later requests only read it
            started = pool.scoring_pool(verifier, workers)  # started now, not by the first request
            state.update(workers=1 if started is None else started.workers)
            state.update(verifier=verifier, status="ready")
        except Exception as err:  # reported by /health; the server stays up to say so
            state.update(status="failed", error=f"{type(err).__name__}: {err}")

    async def health(request: Request) -> Response:
        body = {"status": state["status"]}
        verifier = state["verifier"]
        if verifier is not None:
            panel = verifier.panel
            body.update(panel=repr(panel), fingerprint=panel.fingerprint(), max_answers=max_answers,
                        max_bytes=max_bytes, workers=state["workers"])
        if state["error"]:
            body["error"] = state["error"]
        return json_response(body, 200 if state["status"] == "ready" else 503)

    async def score(request: Request) -> Response:
        try:
            key, value, brief = parse_request(await read_body(request, max_bytes), max_answers)
            verifier = state["verifier"]
            if verifier is None:
                raise RequestError(503, f"the verifier is {state['status']}" +
                                   (f": {state['error']}" if state["error"] else "; retry when GET /health is 200"))
        except RequestError as err:
            return json_response({"error": str(err)}, err.status)
        items = [("answer", a) for a in value] if key == "answers" else [(key, value)]
        result = await anyio.to_thread.run_sync(score_items, verifier, items, brief, limiter=limiter)
        objects = [score_object(s, brief) for s in result.scores]
        return json_response(objects if key == "answers" else objects[0])

    def score_items(verifier, items, brief):
        """`score_group`, `score` or `score_formula` of the request, prepared on the scoring processes."""
        return pool.score_prepared(verifier, pool.prepare(verifier, items, state["workers"]), brief)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        threading.Thread(target=build, name="alpha-gym-verifier", daemon=True).start()
        yield

    app = Starlette(routes=[Route("/health", health, methods=["GET"]), Route("/score", score, methods=["POST"])],
                    lifespan=lifespan, exception_handlers=json_error_handlers())
    app.state.scoring = state
    return app
