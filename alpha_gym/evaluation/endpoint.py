"""A model behind an OpenAI-compatible chat-completions endpoint, answering briefs (stdlib only: no torch).

`EndpointClient.complete(messages)` sends one `POST {base_url}/chat/completions` and returns a
`Completion`: the answer text, or the kind of error that ended it. It never raises for what the endpoint
does; each failed attempt is recorded, so a caller can count them. What is asked again and what is not:

- retried (with backoff, or the server's Retry-After, capped at `MAX_BACKOFF_S`): a time-out, HTTP 408,
  429 and 5xx, and a reply cut off or garbled (malformed JSON, no choices, a connection reset mid-reply);
- not retried, the item fails: any other 4xx (400, 413, 422: this request's fault, e.g. a prompt too long);
- not retried, and the run stops (`Completion.fatal`; `run_requests` raises `EndpointFailure`): nothing
  listening, a host that does not resolve or cannot be reached, TLS refused, a server that does not
  answer in HTTP, HTTP 401/403/404/405/407, and any redirect. Asking the other items would fail the same way, so the run says why at once, in one line
  naming the URL and the server's own error message (`{"error": {"message": ...}}`); a 404 on a base URL
  that does not end in /v1 adds that hint.

Every attempt has a real deadline (`timeout_s`): a watchdog shuts the attempt's socket when it is up, so a
reply trickled a byte at a time cannot hold a request past it (a socket time-out alone only bounds each
read). Redirects are never followed, to the same host or another: the key is sent to the host the user
named and nowhere else. `user:password@` in the base URL is sent as HTTP Basic credentials and replaced by
`***` in everything the client reports (`redact_url`); a key with a control character, a space or a
non-ASCII character is refused before anything is sent, without showing it.

`served_models()` reads `GET {base_url}/models` where the server has one (None where it has not).

`run_requests(client, items, raw_path, ...)` answers every (brief, sample) item with a thread pool
and appends one JSON line per finished item to `raw_path`, flushed as it lands: a killed run
resumes from that file without asking again for the items it holds, and a finished run asks
nothing. Items that failed are asked again on the next run. Ctrl-C stops asking: the requests in
flight finish (their answers are written), a second Ctrl-C drops them; then `Interrupted` is raised.

Raw JSONL line (one per item, the last line for a key wins):
    {"key": "BRIEF#SAMPLE", "brief_id", "sample", "ok": bool, "completion": str | null,
     "finish_reason", "usage", "error": kind | null, "detail": str | null, "attempts": int,
     "attempt_errors": [kind, ...], "seconds": float}
Error kinds: "http_NNN" (status), "timeout", "connection", "protocol" (a cut-off or garbled HTTP
response), "malformed_json", "empty_choices", "redirect".
"""

from __future__ import annotations

import base64
import email.utils
import errno
import http.client
import json
import math
import os
import random
import socket
import ssl
import sys
import threading
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from alpha_gym.jsonable import json_dumps
from alpha_gym.errors import InputError

#: The `format` of an eval folder's eval.json (`alpha-gym eval --out`), which `alpha-gym compare --eval` reads.
EVAL_FORMAT = "alpha-gym/eval/v1"
#: Statuses worth asking again besides 5xx: a time-out and a rate limit (other 4xx are the request's fault).
RETRY_STATUSES = frozenset({408, 429})
#: Statuses that end the run: every other item would get the same (a bad key, a wrong URL or model).
FATAL_STATUSES = frozenset({401, 403, 404, 405, 407})
#: Longest wait between two attempts, also for a server's Retry-After.
MAX_BACKOFF_S = 60.0
#: The largest reply read (a chat completion of a few hundred tokens is a few KiB).
MAX_REPLY_BYTES = 16 << 20


class EndpointFailure(Exception):
    """The endpoint cannot answer any item (see the module docstring); the message is one line."""


class Interrupted(Exception):
    """Ctrl-C: `kept` items are in the raw file, `late` of them finished after it."""

    def __init__(self, kept: int, late: int, total: int):
        super().__init__(f"interrupted: {kept} of {total} items answered")
        self.kept, self.late, self.total = kept, late, total


def redact_url(url: str) -> str:
    """The URL with any `user:password@` replaced by `***@` (what reports, files and messages show)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<an unparseable URL>"
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def key_problem(key: str) -> str | None:
    """Why a key cannot go into a header (None when it can): never says what the key is."""
    if any(not 0x20 < ord(c) < 0x7F for c in key):
        return ("it holds a control character (a pasted line break?), a space or a non-ASCII character; "
                "nothing was sent")
    return None


def _one_line(text: str, limit: int = 300) -> str:
    text = "".join(c if c.isprintable() else " " for c in " ".join(str(text).split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def server_message(body: bytes) -> str | None:
    """The server's own error message: OpenAI/vLLM `{"error": {"message"}}`, `{"error": "..."}`, FastAPI's
    `{"detail"}`, `{"message"}`, or a short plain-text body; None when it says nothing readable."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        text = body.decode("utf-8", "replace").strip()
        return _one_line(text) if text and not text.startswith("<") else None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"].strip():
            return _one_line(err["message"])
        for value in (err, data.get("detail"), data.get("message")):
            if isinstance(value, str) and value.strip():
                return _one_line(value)
    return None


#: Request fields `--extra-body` may not set: the client's own (it reads one non-streamed choice) and those
#: with a flag of their own, which the folder's stamp records.
CLIENT_FIELDS = {"model": "--model", "messages": "the brief", "n": "--samples", "stream": "the client",
                 "temperature": "--temperature", "max_tokens": "--max-tokens", "seed": "--seed"}
#: The answer's token limit under the names servers read it by, compared without case or separators (OpenAI's
#: max_tokens and max_completion_tokens, TGI's and transformers' max_new_tokens and max_length, llama.cpp's
#: n_predict, Ollama's num_predict, Anthropic's max_tokens_to_sample, Gemini's max_output_tokens): --max-tokens
#: sets the limit the stamp records, so a second one at any depth of `--extra-body` would make that record untrue.
TOKEN_LIMIT_NAMES = frozenset({"maxtokens", "maxcompletiontokens", "maxnewtokens", "maxlength", "npredict",
                               "numpredict", "maxtokenstosample", "maxoutputtokens"})
#: The deepest `--extra-body` read (request fields nest 1-3 deep); deeper is refused before decoding.
MAX_EXTRA_BODY_DEPTH = 32


def _squeezed(name: str) -> str:
    """A field name without case or separators: `Max-Tokens`, `max_tokens` and `maxTokens` are one name."""
    return "".join(c for c in name.casefold() if c.isalnum())


def _json_values(value):
    """(path, key, value) of `value` and everything inside it, depth first and without recursion; key is the
    name the value sits under in an object (None in an array and at the top), path reads `options.stop[1]`."""
    stack = [("", None, value)]
    while stack:
        path, key, v = stack.pop()
        yield path, key, v
        if isinstance(v, dict):
            stack.extend((f"{path}.{k}" if path else k, k, x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", None, x) for i, x in reversed(list(enumerate(v))))


def extra_body(text: str | None) -> dict | None:
    """`--extra-body`'s JSON object: request fields a server reads beyond the OpenAI ones, e.g. llama.cpp's
    `{"repeat_penalty": 1.0}` (its default 1.1 makes temperature 0 differ from greedy decoding).

    Refused: anything but an object, a field with a flag of its own (`CLIENT_FIELDS`) or another name for the
    token limit (`TOKEN_LIMIT_NAMES`, at any depth), and a number JSON cannot carry (NaN, Infinity, or a literal
    past the float range, which Python reads as infinity): it would be sent as null without a word."""
    if text is None:
        return None
    from alpha_gym.service.http_json import json_depth
    depth = json_depth(text.encode("utf-8", "surrogatepass"))
    if depth > MAX_EXTRA_BODY_DEPTH:
        raise InputError(f"--extra-body nests {depth} levels deep; request fields nest at most "
                         f"{MAX_EXTRA_BODY_DEPTH}")
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"--extra-body is not JSON ({err}): give an object, e.g. '{{\"repeat_penalty\": 1.0}}'")
    except ValueError as err:  # an integer of thousands of digits, past Python's limit on int conversion
        raise InputError(f"--extra-body holds a number no JSON reader takes ({str(err).split(';')[0]})") from None
    if not isinstance(fields, dict):
        raise InputError(f"--extra-body must be a JSON object of request fields, got {type(fields).__name__}")
    taken = sorted(k for k in fields if k in CLIENT_FIELDS)
    if taken:
        raise InputError("--extra-body may not set " + ", ".join(f"{k} (set by {CLIENT_FIELDS[k]})" for k in taken))
    for path, key, value in _json_values(fields):
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"--extra-body {path}: {value} is not a finite number (NaN, Infinity or past 1.8e308), "
                             "which no JSON request carries; give a finite one")
        if key is not None and _squeezed(key) in TOKEN_LIMIT_NAMES:
            raise InputError(f"--extra-body may not set {path}: it is the answer's token limit, set by --max-tokens")
    return fields or None


def model_problem(model: str) -> str | None:
    """Why a model name cannot be sent, recorded or shown (None when it can): empty, or holding a character no
    model name has (a control character such as a pasted line break or an escape sequence, a line or paragraph
    separator, a zero-width or bidirectional mark, a lone surrogate). Never prints the name itself."""
    if not model.strip():
        return "it is empty"
    odd = next((c for c in model if not (c.isprintable() or c == " ")), None)
    if odd is None:
        return None
    what = "a line break, pasted?" if odd in "\r\n" else unicodedata.name(odd, "a control character").lower()
    return f"it holds U+{ord(odd):04X} ({what}), which no model name has"


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

    def url(self, path: str = "/chat/completions") -> str:
        """The URL of `path` under the base URL, credentials removed (they go in a header)."""
        parts = urllib.parse.urlsplit(self.base_url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, path=parts.path.rstrip("/") + path))


@dataclass
class Completion:
    """One item's outcome: `text` when ok, else `error` (the last attempt's kind) and a short `detail`.

    `fatal`: the error ends the run (see the module docstring); `interrupted`: Ctrl-C cut it, not the endpoint.
    """

    ok: bool
    text: str | None = None
    finish_reason: str | None = None
    usage: dict | None = None
    error: str | None = None
    detail: str | None = None
    attempt_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    fatal: bool = False
    interrupted: bool = False

    @property
    def attempts(self) -> int:
        return len(self.attempt_errors) + (1 if self.ok else 0)


class _AttemptError(Exception):
    def __init__(self, kind: str, detail: str, retry: bool, wait_s: float | None = None, fatal: bool = False):
        super().__init__(detail)
        self.kind, self.detail, self.retry, self.wait_s, self.fatal = kind, detail, retry, wait_s, fatal


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


def retry_after(headers) -> float | None:
    """Seconds a server asks to wait (a number or an HTTP date), within [0, MAX_BACKOFF_S]; None when
    absent or meaningless (nan, negative, garbled), and the caller's own backoff applies."""
    raw = headers.get("Retry-After") if headers is not None else None
    if not raw:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        try:
            when = email.utils.parsedate_to_datetime(raw)
            value = when.timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if math.isnan(value) or value < 0:
        return None
    return min(value, MAX_BACKOFF_S)


# ------------------------------------------------------------------------------ one attempt, with a deadline
def _shut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Deadline:
    """Shuts every socket of one attempt when its time is up (or on `cancel`): a blocked read returns."""

    def __init__(self, seconds: float):
        self.expired = self.cancelled = False
        self._socks, self._lock = [], threading.Lock()
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()

    def add(self, sock) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                _shut(sock)

    def expire(self, cancelled: bool = False) -> None:
        with self._lock:
            self.expired = True
            self.cancelled = self.cancelled or cancelled
            for s in self._socks:
                _shut(s)


class _DeadlineConnect:
    """A connection whose socket (TLS-wrapped for HTTPS) the attempt's deadline watches once it connects."""

    def __init__(self, *a, deadline: _Deadline, **k):
        super().__init__(*a, **k)
        self._deadline = deadline

    def connect(self):
        super().connect()
        self._deadline.add(self.sock)


class _HTTP(_DeadlineConnect, http.client.HTTPConnection):
    pass


class _HTTPS(_DeadlineConnect, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(_HTTP, req, deadline=self.deadline)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        return self.do_open(_HTTPS, req, context=self._context, deadline=self.deadline)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow: the 3xx reaches the caller as an HTTPError (the key stays with the host named)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _unreachable(reason) -> str | None:
    """Why a host cannot be reached at all (the run stops), or None for a fault worth another attempt."""
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the server running, on that port?)"
    if isinstance(reason, socket.gaierror):
        return f"the host does not resolve ({reason.strerror or reason})"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed ({_one_line(reason, 120)})"
    if isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL):
        return f"the host cannot be reached ({reason.strerror})"
    return None


def base_url_flag(url: str) -> str:
    """How `alpha-gym eval` is given a base URL (what an `EndpointClient`'s messages tell the user to pass)."""
    return f"--base-url {url}"


def _v1_hint(base_url: str, address=base_url_flag) -> str:
    """For a 404: the base URL most servers want (up to and with /v1), when the one given is not it."""
    parts = urllib.parse.urlsplit(redact_url(base_url))
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        return ""
    cut = path.find("/v1/")
    wanted = path[: cut + 3] if cut >= 0 else path + "/v1"
    return (f" (the base URL usually ends in /v1: try "
            f"{address(urllib.parse.urlunsplit(parts._replace(path=wanted, query='', fragment='')))})")


class EndpointClient:
    """Thread-safe: each call opens its own connection. `stop_retrying()` and `cancel()` serve Ctrl-C.
    `address(url)`: how the user passes a base URL, for the messages that suggest one (eval's --base-url)."""

    def __init__(self, config: EndpointConfig, sleep=None, address=base_url_flag):
        shown = redact_url(config.base_url)
        if any(not c.isprintable() or c.isspace() for c in config.base_url):
            raise InputError(f"--base-url {shown!r}: holds a space or a control character")
        try:
            parts = urllib.parse.urlsplit(config.base_url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        except ValueError as err:
            raise InputError(f"--base-url {shown!r}: {err}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"--base-url {shown!r}: expected http://HOST:PORT/v1 or https://...")
        self._auth = None
        if config.api_key:
            problem = key_problem(config.api_key)
            if problem:
                raise InputError(f"the API key cannot be sent: {problem}")
            self._auth = f"Bearer {config.api_key}"
        if parts.username is not None:
            if config.api_key:
                raise InputError("give the key by --api-key-env or as user:password in --base-url, not both")
            user = urllib.parse.unquote(parts.username) + ":" + urllib.parse.unquote(parts.password or "")
            if key_problem(user):
                raise InputError(f"--base-url {shown!r}: the user or password cannot be sent: {key_problem(user)}")
            self._auth = "Basic " + base64.b64encode(user.encode()).decode()
        self.config = config
        self.shown_url = shown
        self.address = address
        self._stopping = threading.Event()   # Ctrl-C once: no new attempts
        self._cancelled = threading.Event()  # Ctrl-C twice: cut the attempts in flight
        self._live: set[_Deadline] = set()
        self._live_lock = threading.Lock()
        self._sleep = sleep if sleep is not None else self._stopping.wait

    def _headers(self) -> dict:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._auth:
            h["Authorization"] = self._auth
        return h

    def stop_retrying(self) -> None:
        """The attempts in flight go on; no item starts another (Ctrl-C once)."""
        self._stopping.set()

    def cancel(self) -> None:
        """Cut every attempt in flight now (Ctrl-C twice): they end as `interrupted`, never written."""
        self._stopping.set()
        self._cancelled.set()
        with self._live_lock:
            for d in list(self._live):
                d.expire(cancelled=True)

    def _request(self, method: str, path: str, payload: bytes | None) -> bytes:
        """One attempt: the reply's body, or `_AttemptError` saying what went wrong and what it means."""
        url = self.config.url(path)
        shown = redact_url(url)
        timeout = self.config.timeout_s
        req = urllib.request.Request(url, data=payload, headers=self._headers(), method=method)
        with _Deadline(timeout) as deadline:
            with self._live_lock:
                self._live.add(deadline)
            if self._cancelled.is_set():
                deadline.expire(cancelled=True)
            opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline), _NoRedirect())
            try:
                try:
                    with opener.open(req, timeout=timeout) as resp:
                        body = resp.read(MAX_REPLY_BYTES + 1)
                        if len(body) > MAX_REPLY_BYTES:
                            raise _AttemptError("protocol", f"{shown}: a reply over {MAX_REPLY_BYTES >> 20} MiB",
                                                retry=False)
                        if resp.length:  # fewer bytes than its Content-Length: cut off
                            raise http.client.IncompleteRead(body, resp.length)
                    if deadline.expired:
                        raise TimeoutError
                    return body
                except urllib.error.HTTPError as err:
                    try:
                        raise self._http_error(err, shown, deadline) from None
                    finally:
                        err.close()
                except _AttemptError:
                    raise
                except (OSError, http.client.HTTPException, ValueError) as err:
                    reason = err.reason if isinstance(err, urllib.error.URLError) else err
                    if deadline.cancelled:
                        raise _AttemptError("interrupted", "cut by Ctrl-C", retry=False) from None
                    if deadline.expired or isinstance(reason, (TimeoutError, socket.timeout)):
                        raise _AttemptError("timeout", f"{shown}: no complete answer within {timeout:g} s",
                                            retry=True) from None
                    why = _unreachable(reason)
                    if why is not None:
                        raise _AttemptError("connection", f"cannot reach {shown}: {why}", retry=False,
                                            fatal=True) from None
                    if isinstance(err, http.client.BadStatusLine) and not isinstance(err, ConnectionError):
                        raise _AttemptError("protocol", f"{shown}: the server does not answer in HTTP (its first "
                                            f"line: {_one_line(err.line, 60)!r}; another service on that port, or "
                                            "an https server asked with http://?)", retry=False, fatal=True) from None
                    if isinstance(err, http.client.HTTPException):  # a cut-off body
                        raise _AttemptError("protocol", f"{shown}: broken HTTP response: {type(err).__name__}",
                                            retry=True) from None
                    raise _AttemptError("connection", f"{shown}: connection failed: {_one_line(reason, 160)}",
                                        retry=True) from None
            finally:
                with self._live_lock:
                    self._live.discard(deadline)

    def _http_error(self, err: urllib.error.HTTPError, shown: str, deadline: _Deadline) -> _AttemptError:
        code = err.code
        try:
            said = server_message(err.read(64 << 10)) if not deadline.expired else None
        except (OSError, http.client.HTTPException, ValueError):
            said = None
        if said:
            said = self._scrub(said)
        text = f"{shown}: HTTP {code} {_one_line(err.reason or '', 60)}".rstrip() + (f": {said}" if said else "")
        if 300 <= code < 400:
            target = redact_url(err.headers.get("Location") or "") if err.headers is not None else ""
            return _AttemptError("redirect", f"{shown}: the server redirects (HTTP {code}) to {target or '?'}; "
                                 "alpha-gym follows no redirect (the key is sent to the host you named, "
                                 f"nowhere else): pass the final address, {self.address('URL')}", retry=False,
                                 fatal=True)
        if code == 404:
            text += _v1_hint(self.config.base_url, self.address)
        retry = code in RETRY_STATUSES or 500 <= code < 600
        return _AttemptError(f"http_{code}", text, retry=retry, wait_s=retry_after(err.headers) if retry else None,
                             fatal=code in FATAL_STATUSES)

    def _scrub(self, text: str) -> str:
        """A server's message with the key or password blanked out, should it echo them."""
        parts = urllib.parse.urlsplit(self.config.base_url)
        for secret in (self.config.api_key, parts.password and urllib.parse.unquote(parts.password)):
            if secret:
                text = text.replace(secret, "***")
        return text

    def _attempt(self, payload: bytes) -> tuple[str, str | None, dict | None]:
        return parse_completion(self._request("POST", "/chat/completions", payload))

    def served_models(self) -> list[str] | None:
        """The model ids `GET {base_url}/models` lists; None where the server has no such list (404, not
        JSON, a time-out). Raises `EndpointFailure` for what ends a run (nothing listening, 401, ...)."""
        try:
            body = self._request("GET", "/models", None)
        except _AttemptError as err:
            if err.fatal and err.kind != "http_404" and err.kind != "http_405":
                raise EndpointFailure(err.detail) from None
            return None
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return None
        rows = data.get("data") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            return None
        return [str(r["id"]) for r in rows if isinstance(r, dict) and isinstance(r.get("id"), (str, int))]

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
                if err.kind == "interrupted":
                    return Completion(False, error="interrupted", detail=err.detail, attempt_errors=errors,
                                      seconds=time.perf_counter() - t0, interrupted=True)
                errors.append(err.kind)
                if not err.retry or attempt == self.config.retries or self._stopping.is_set():
                    return Completion(False, error=err.kind, detail=err.detail, attempt_errors=errors,
                                      seconds=time.perf_counter() - t0, fatal=err.fatal)
                self._sleep(self.backoff(attempt, err.wait_s))
                if self._stopping.is_set():
                    return Completion(False, error=err.kind, detail=err.detail, attempt_errors=errors,
                                      seconds=time.perf_counter() - t0)
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
        self.t0, self.new, self._line_open = time.perf_counter(), 0, False

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
            self._line_open = True

    def close(self) -> None:
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False


def run_requests(client: EndpointClient, items: list[tuple[str, int, list[dict]]], raw_path: Path,
                 concurrency: int = 4, progress: bool = True, say=None) -> dict:
    """Answer the items not yet finished in `raw_path` (ok rows); returns {"asked", "reused", "total"}.

    Workers only talk to the endpoint; this thread alone writes the file, one flushed line per item.
    Raises `EndpointFailure` when an answer says the endpoint cannot answer any (the lines written so far
    stay, the requests in flight are let finish), and `Interrupted` on Ctrl-C (see the module docstring).
    `say(text)` prints a status line (default: stderr).
    """
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
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
    fatal: list[Completion] = []

    def work(brief_id, sample, messages):
        if stop.is_set():
            return None
        got = client.complete(messages, sample)
        if got.fatal:  # here, not in the writing thread: the next queued item must not start
            stop.set()
            client.stop_retrying()
        return brief_id, sample, got

    def stop_asking(futures):
        stop.set()
        client.stop_retrying()
        for f in futures:
            f.cancel()

    def keep(fut, out, futures) -> bool:
        """Write a finished item's line; False when there was none to write (cancelled, cut by Ctrl-C)."""
        got = None if fut.cancelled() else fut.result()
        if got is None or got[2].interrupted:
            return False
        row = _raw_row(got[0], got[1], got[2])
        out.write(json_dumps(row) + "\n")
        out.flush()
        os.fsync(out.fileno())
        bar.update(row)
        if got[2].fatal and not fatal:
            fatal.append(got[2])
            stop_asking(futures)
        return True

    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    interrupted, late = False, 0
    with open(raw_path, "a", encoding="utf-8") as out:
        futures = [pool.submit(work, b, s, m) for b, s, m in todo]
        try:
            for fut in as_completed(futures):
                keep(fut, out, futures)
        except KeyboardInterrupt:
            interrupted = True
            stop_asking(futures)
            flying = [f for f in futures if not f.done()]
            bar.close()
            if flying:
                say(f"alpha-gym eval: interrupted; waiting for the {len(flying)} request(s) in flight to finish "
                    "and keeping their answers (Ctrl-C again to drop them)")
            try:
                for fut in as_completed(flying):
                    late += keep(fut, out, futures)
            except KeyboardInterrupt:
                client.cancel()  # shuts their sockets: the workers end at once, nothing more is written
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
    if interrupted:
        kept = read_raw(raw_path)
        done = sum(1 for b, s, _ in items if kept.get(item_key(b, s), {}).get("ok"))
        raise Interrupted(kept=done, late=late, total=len(items))
    if fatal:
        raise EndpointFailure(fatal[0].detail)
    return {"asked": len(todo), "reused": len(items) - len(todo), "total": len(items)}
