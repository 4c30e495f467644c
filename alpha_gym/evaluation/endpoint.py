"""A model behind an OpenAI-compatible chat-completions endpoint, answering briefs (stdlib only: no torch).

`EndpointClient.complete(messages)` sends one `POST {base_url}/chat/completions` and returns a
`Completion`: the answer text, or the kind of error that ended it after its retries. It never
raises for what the endpoint does (HTTP 4xx/5xx, time-outs, refused connections, malformed JSON,
empty `choices`); each failed attempt is recorded, so a caller can count them.

`run_requests(client, items, raw_path, ...)` answers every (brief, sample) item with a thread pool
and appends one JSON line per finished item to `raw_path`, flushed as it lands: a killed run
resumes from that file without asking again for the items it holds, and a finished run asks
nothing. Items that failed are asked again on the next run.

Raw JSONL line (one per item, the last line for a key wins):
    {"key": "BRIEF#SAMPLE", "brief_id", "sample", "ok": bool, "completion": str | null,
     "finish_reason", "usage", "error": kind | null, "detail": str | null, "attempts": int,
     "attempt_errors": [kind, ...], "seconds": float}
Error kinds: "http_NNN" (status), "timeout", "connection", "protocol" (a cut-off or garbled HTTP
response), "malformed_json", "empty_choices".
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from alpha_gym.jsonable import json_dumps
from alpha_gym.errors import InputError

#: The `format` of an eval folder's eval.json (`alpha-gym eval --out`), which `alpha-gym compare --eval` reads.
EVAL_FORMAT = "alpha-gym/eval/v1"
#: Statuses worth asking again: rate limits, time-outs and server faults (other 4xx are the request's fault).
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
#: Longest wait between two attempts, also for a server's Retry-After.
MAX_BACKOFF_S = 60.0


#: Request fields `--extra-body` may not set: the client's own (it reads one non-streamed choice) and those
#: with a flag of their own, which the folder's stamp records.
CLIENT_FIELDS = {"model": "--model", "messages": "the brief", "n": "--samples", "stream": "the client",
                 "temperature": "--temperature", "max_tokens": "--max-tokens", "seed": "--seed"}


def extra_body(text: str | None) -> dict | None:
    """`--extra-body`'s JSON object: request fields a server reads beyond the OpenAI ones, e.g. llama.cpp's
    `{"repeat_penalty": 1.0}` (its default 1.1 makes temperature 0 differ from greedy decoding)."""
    if text is None:
        return None
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"--extra-body is not JSON ({err}): give an object, e.g. '{{\"repeat_penalty\": 1.0}}'")
    if not isinstance(fields, dict):
        raise InputError(f"--extra-body must be a JSON object of request fields, got {type(fields).__name__}")
    taken = sorted(k for k in fields if k in CLIENT_FIELDS)
    if taken:
        raise InputError("--extra-body may not set " + ", ".join(f"{k} (set by {CLIENT_FIELDS[k]})" for k in taken))
    return fields or None


@dataclass(frozen=True)
class EndpointConfig:
    """Where to ask and how: the key is the value itself, read by the caller from an environment variable."""

    base_url: str
    model: str
    api_key: str | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    timeout_s: float = 60.0
    retries: int = 3            # attempts after the first
    backoff_s: float = 1.0      # first wait; doubled each retry (plus up to 25% jitter)
    seed: int | None = None     # sent as `seed` (+ the sample's index) when given
    extra_body: dict | None = None  # more request fields for this server (see `extra_body`)

    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass
class Completion:
    """One item's outcome: `text` when ok, else `error` (the last attempt's kind) and a short `detail`."""

    ok: bool
    text: str | None = None
    finish_reason: str | None = None
    usage: dict | None = None
    error: str | None = None
    detail: str | None = None
    attempt_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def attempts(self) -> int:
        return len(self.attempt_errors) + (1 if self.ok else 0)


class _AttemptError(Exception):
    def __init__(self, kind: str, detail: str, retry: bool, wait_s: float | None = None):
        super().__init__(detail)
        self.kind, self.detail, self.retry, self.wait_s = kind, detail, retry, wait_s


def parse_completion(body: bytes) -> tuple[str, str | None, dict | None]:
    """(text, finish_reason, usage) of a chat-completions response body; `_AttemptError` when it holds none."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise _AttemptError("malformed_json", f"not JSON: {body[:80]!r}", retry=True) from None
    if not isinstance(data, dict):
        raise _AttemptError("malformed_json", "the response is not a JSON object", retry=True)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _AttemptError("empty_choices", "no choices in the response", retry=True)
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = first.get("message") if isinstance(first.get("message"), dict) else {}
    text = message.get("content")
    if not isinstance(text, str):
        raise _AttemptError("malformed_json", "choices[0].message.content is not a string", retry=True)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    return text, first.get("finish_reason"), usage


def _retry_after(headers) -> float | None:
    try:
        value = float(headers.get("Retry-After")) if headers is not None and headers.get("Retry-After") else None
    except (TypeError, ValueError):
        return None
    return None if value is None or value < 0 else min(value, MAX_BACKOFF_S)


class EndpointClient:
    """Thread-safe: each call opens its own connection."""

    def __init__(self, config: EndpointConfig, sleep=time.sleep):
        if not config.base_url.startswith(("http://", "https://")):
            raise InputError(f"--base-url {config.base_url!r}: expected http://HOST:PORT/v1 or https://...")
        self.config = config
        self._sleep = sleep

    def _headers(self) -> dict:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key:
            h["Authorization"] = f"Bearer {self.config.api_key}"
        return h

    def _attempt(self, payload: bytes) -> tuple[str, str | None, dict | None]:
        req = urllib.request.Request(self.config.url(), data=payload, headers=self._headers(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.config.timeout_s) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            code = err.code
            raise _AttemptError(f"http_{code}", f"HTTP {code} {err.reason}", retry=code in RETRY_STATUSES,
                                wait_s=_retry_after(err.headers)) from None
        except (TimeoutError, socket.timeout) as err:
            raise _AttemptError("timeout", f"no answer within {self.config.timeout_s:g} s", retry=True) from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, (TimeoutError, socket.timeout)):
                raise _AttemptError("timeout", f"no answer within {self.config.timeout_s:g} s", retry=True) from None
            raise _AttemptError("connection", f"cannot reach the endpoint: {err.reason}", retry=True) from None
        except (ConnectionError, OSError) as err:  # reset or closed mid-response
            raise _AttemptError("connection", f"connection failed: {err}", retry=True) from None
        except http.client.HTTPException as err:  # a cut-off body, a garbled status line
            raise _AttemptError("protocol", f"broken HTTP response: {type(err).__name__}", retry=True) from None
        return parse_completion(body)

    def backoff(self, retry: int, hint: float | None) -> float:
        """Seconds before retry number `retry` (0-based): the server's Retry-After, else doubling with jitter."""
        if hint is not None:
            return hint
        base = self.config.backoff_s * (2 ** retry)
        return min(MAX_BACKOFF_S, base * (1 + 0.25 * random.random()))

    def complete(self, messages: list[dict], sample: int = 0) -> Completion:
        body = {"model": self.config.model, "messages": messages, "max_tokens": self.config.max_tokens,
                "temperature": self.config.temperature, "n": 1, "stream": False}
        if self.config.seed is not None:
            body["seed"] = self.config.seed + sample
        body.update(self.config.extra_body or {})
        payload = json_dumps(body).encode()
        t0 = time.perf_counter()
        errors: list[str] = []
        for attempt in range(self.config.retries + 1):
            try:
                text, finish, usage = self._attempt(payload)
            except _AttemptError as err:
                errors.append(err.kind)
                if not err.retry or attempt == self.config.retries:
                    return Completion(False, error=err.kind, detail=err.detail, attempt_errors=errors,
                                      seconds=time.perf_counter() - t0)
                self._sleep(self.backoff(attempt, err.wait_s))
                continue
            return Completion(True, text=text, finish_reason=finish, usage=usage, attempt_errors=errors,
                              seconds=time.perf_counter() - t0)
        raise AssertionError("unreachable")


# ------------------------------------------------------------------------------ the raw JSONL
def item_key(brief_id: str, sample: int) -> str:
    return f"{brief_id}#{sample}"


def read_raw(path: Path) -> dict[str, dict]:
    """Key -> the last row for it; a line cut short by a killed run (not JSON) is dropped."""
    rows: dict[str, dict] = {}
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "key" in row:
            rows[row["key"]] = row
    return rows


def _raw_row(brief_id: str, sample: int, c: Completion) -> dict:
    return {"key": item_key(brief_id, sample), "brief_id": brief_id, "sample": sample, "ok": c.ok,
            "completion": c.text, "finish_reason": c.finish_reason, "usage": c.usage, "error": c.error,
            "detail": c.detail, "attempts": c.attempts, "attempt_errors": c.attempt_errors,
            "seconds": round(c.seconds, 3)}


class Progress:
    """One status line on stderr: done/total, failed, errors, rate."""

    def __init__(self, total: int, done: int, enabled: bool = True, stream=None):
        self.total, self.done, self.failed, self.errors = total, done, 0, 0
        self.enabled, self.stream = enabled, stream or sys.stderr
        self.t0, self.new = time.perf_counter(), 0

    def update(self, row: dict) -> None:
        self.done += 1
        self.new += 1
        self.failed += not row["ok"]
        self.errors += len(row["attempt_errors"])
        if self.enabled:
            s = time.perf_counter() - self.t0
            width = 30
            fill = int(width * self.done / max(self.total, 1))
            self.stream.write(f"\reval [{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total}  "
                              f"failed {self.failed}  errors {self.errors}  {self.new / max(s, 1e-9):.2f} req/s ")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.new:
            self.stream.write("\n")
            self.stream.flush()


def run_requests(client: EndpointClient, items: list[tuple[str, int, list[dict]]], raw_path: Path,
                 concurrency: int = 4, progress: bool = True) -> dict:
    """Answer the items not yet finished in `raw_path` (ok rows); returns {"asked", "reused", "total"}.

    Workers only talk to the endpoint; this thread alone writes the file, one flushed line per item.
    """
    raw_path = Path(raw_path)
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    have = read_raw(raw_path)
    # rewrite without a torn last line before appending to it
    tmp = raw_path.with_name(raw_path.name + ".tmp")
    tmp.write_text("".join(json_dumps(r) + "\n" for r in have.values()), encoding="utf-8")
    tmp.replace(raw_path)
    todo = [(b, s, m) for b, s, m in items if not have.get(item_key(b, s), {}).get("ok")]
    bar = Progress(len(items), len(items) - len(todo), enabled=progress)
    stop = threading.Event()

    def work(brief_id, sample, messages):
        if stop.is_set():
            return None
        return brief_id, sample, client.complete(messages, sample)

    with open(raw_path, "a", encoding="utf-8") as out, ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = [pool.submit(work, b, s, m) for b, s, m in todo]
        try:
            for fut in as_completed(futures):
                got = fut.result()
                if got is None:
                    continue
                row = _raw_row(got[0], got[1], got[2])
                out.write(json_dumps(row) + "\n")
                out.flush()
                os.fsync(out.fileno())
                bar.update(row)
        except KeyboardInterrupt:
            stop.set()  # the lines written so far stay; the next run asks for the rest
            for f in futures:
                f.cancel()
            raise
        finally:
            bar.close()
    return {"asked": len(todo), "reused": len(items) - len(todo), "total": len(items)}
