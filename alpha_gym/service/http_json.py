"""What both HTTP servers (the scoring service and the OpenEnv session server) share about requests and errors.

Every response is JSON. A request the server refuses raises `RequestError(status, message)`;
the handlers from `json_error_handlers` turn it, Starlette's own 404/405 and any other
exception into `{"error": TEXT}` with its status, so no client ever sees a plain-text page
or a traceback. A body is read counting its bytes as they arrive, and its JSON nesting is
bounded before it is decoded: a body of 100,000 `[` costs one linear scan, not a RecursionError.
"""

from __future__ import annotations

import json
import re

from alpha_gym.jsonable import json_dumps, nesting_depth

#: The deepest JSON nesting a request may have (the bodies both servers accept are 1-3 deep).
MAX_DEPTH = 32

# A JSON string (escapes included): brackets inside one do not nest. Unrolled, so a long string is one pass.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


class RequestError(Exception):
    """A request the server refuses, with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (0 for a scalar); linear time, no recursion."""
    return nesting_depth(raw, _STRING)


def parse_json(raw: bytes, max_depth: int = MAX_DEPTH):
    """The decoded body; RequestError 400 for text that is not JSON or nests deeper than `max_depth`."""
    depth = json_depth(raw)
    if depth > max_depth:
        raise RequestError(400, f"the body nests {depth} levels deep; at most {max_depth} are accepted")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(400, f"the body is not JSON: {err}") from None
    except RecursionError:  # the depth check makes this unreachable; kept so no nesting is ever a 500
        raise RequestError(400, "the body nests too deeply") from None


async def read_body(request, max_bytes: int) -> bytes:
    """The request body; RequestError 413 once it passes `max_bytes` (counted as it arrives: a false
    or missing Content-Length is no way round the limit)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
        raise RequestError(413, f"the body is over {max_bytes} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise RequestError(413, f"the body is over {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def json_response(payload, status: int = 200, headers=None):
    # json.dumps as `alpha-gym score --json` calls it, so both print the same text for the same score
    from starlette.responses import Response
    return Response(json_dumps(payload), status_code=status, media_type="application/json", headers=headers)


def _routes(app) -> str:
    """'GET /health, POST /score': what the server answers, for a 404's message."""
    out = []
    for route in getattr(app, "routes", []):
        methods = sorted((getattr(route, "methods", None) or set()) - {"HEAD"})
        out.append(f"{'|'.join(methods)} {getattr(route, 'path', '?')}".strip())
    return ", ".join(out)


def json_error_handlers() -> dict:
    """Starlette `exception_handlers`: every error status, the router's 404/405 included, as JSON {"error"}."""
    from starlette.exceptions import HTTPException

    async def refused(request, exc: RequestError):
        return json_response({"error": str(exc)}, exc.status)

    async def http_error(request, exc: HTTPException):
        if exc.status_code == 404:
            message = f"no {request.method} {request.url.path} here; this server answers {_routes(request.app)}"
        elif exc.status_code == 405:
            message = (f"{request.method} is not allowed on {request.url.path}; use "
                       f"{(exc.headers or {}).get('Allow', 'another method')}")
        else:
            message = str(exc.detail)
        return json_response({"error": message}, exc.status_code, exc.headers)

    async def bug(request, exc: Exception):  # a bug, not the client's input: still JSON, and uvicorn logs it
        return json_response({"error": f"internal error ({type(exc).__name__}); the server log has the "
                                       "traceback"}, 500)

    return {RequestError: refused, HTTPException: http_error, Exception: bug}
