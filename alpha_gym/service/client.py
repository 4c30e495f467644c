"""A small client for the scoring service, on the standard library only (rollout workers need nothing else)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from alpha_gym.jsonable import json_dumps


def request_json(method: str, url: str, payload=None, timeout: float = 120.0):
    """One JSON request with the standard library; an error status raises ServiceError with the server's message."""
    data = None if payload is None else json_dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        body = err.read().decode(errors="replace")
        try:
            payload = json.loads(body)
            message = payload.get("error", body)
            if "status" in payload:  # /health: say the state, then why
                message = f"verifier {payload['status']}" + (f": {payload['error']}" if "error" in payload else "")
        except (json.JSONDecodeError, AttributeError):
            message = body
        raise ServiceError(err.code, message) from None


class ServiceError(RuntimeError):
    """The service answered with an error status."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class ScoringClient:
    """`ScoringClient("http://127.0.0.1:8000").score(answer)` -> the dict of `Score.to_dict()`."""

    def __init__(self, url: str, timeout: float = 120.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, payload=None):
        return request_json(method, self.url + path, payload, self.timeout)

    def health(self) -> dict:
        """The /health object (raises ServiceError 503 while the verifier is starting)."""
        return self._call("GET", "/health")

    def wait_ready(self, timeout: float = 300.0) -> dict:
        """Poll /health until the verifier is ready."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.health()
            except (ServiceError, urllib.error.URLError, ConnectionError) as err:
                if isinstance(err, ServiceError) and "failed" in str(err):
                    raise
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the scoring service at {self.url} was not ready in {timeout:.0f} s") from err
                time.sleep(0.1)

    def score(self, answer: str, brief_id: str | None = None) -> dict:
        return self._call("POST", "/score", _with_brief({"answer": answer}, brief_id))

    def score_formula(self, formula: str, brief_id: str | None = None) -> dict:
        return self._call("POST", "/score", _with_brief({"formula": formula}, brief_id))

    def score_group(self, answers: list[str], brief_id: str | None = None) -> list[dict]:
        return self._call("POST", "/score", _with_brief({"answers": list(answers)}, brief_id))


def _with_brief(body: dict, brief_id: str | None) -> dict:
    """The request body, with the brief the answers were written for when one is named."""
    return body if brief_id is None else {**body, "brief_id": brief_id}
