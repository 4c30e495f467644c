"""A model behind an OpenAI-compatible chat endpoint as a mutator of `evolve` (the "endpoint" row of
`alpha_gym.search.mutators`), built to run fast against llama.cpp's server on one CPU core:

    taskset -c 0 python -m llama_cpp.server --model MODEL.gguf --host 127.0.0.1 --port 8080 --n_threads 1 \\
        --n_ctx 2048 --model_alias smollm2
    taskset -c 1 alpha-gym evolve ... --mutator "endpoint:http://127.0.0.1:8080/v1#smollm2,answers=4,concurrency=1"

The spec is `endpoint:URL#MODEL` with optional `,KEY=VALUE` options after the model name (`ENDPOINT_OPTIONS`):

    answers      K answers to each parent set (default 1): the run asks each parent set it draws K times in a row
                 (`evolution`'s `answers_per_set`; such a mutator is the run's only one). The K requests of one
                 prompt are sent one after the other, so every one after the first finds the whole prompt in the
                 server's KV cache and costs only its answer's tokens. K requests, not one request with `n=K`:
                 llama-cpp-python's server drops `n` (its chat handler excludes the field and answers one choice;
                 checked on 0.3.36), so asking for several choices would return one
    concurrency  prompts in flight at a time (default 4, for servers that batch concurrent requests such as vLLM);
                 1 for llama.cpp's server, which answers one request at a time: requests that overlap there only
                 make each evict the other's prompt from its cache
    tokens       the longest answer in tokens (default 128, the answer contract's limit)

Two more things keep the server's work down whatever the options: the improve prompt holds its fixed text first
(the DSL reference, the contract and the request) and the parents last (`alpha_gym.tasks.improve`), so llama.cpp,
which keeps the last prompt's KV cache, evaluates only the parents of each new prompt; and each request stops at
"</alpha>" (`STOP`), so no token is generated after the formula; the tag, which the server leaves out of the
text, is put back (`closed_answer`).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.evaluation.endpoint import Completion, EndpointClient, EndpointConfig, EndpointFailure, redact_url
from alpha_gym.language import DEFAULT_LIMITS, Limits
from alpha_gym.ranges import check_fields, ints
from alpha_gym.search.database import Program

#: The longest a check's chat request of one token may take an attempt (a run's requests wait up to 120 s).
PROBE_TIMEOUT_S = 30.0
#: Where an answer ends: the answer contract's closing tag (the server stops there and leaves it out).
STOP = "</alpha>"
#: The options a spec may give after its model name, each with its range and default.
ENDPOINT_OPTIONS = {"answers": (ints(1, 64), 1), "concurrency": (ints(1, 256), 4), "tokens": (ints(1, 4096), 128)}


def closed_answer(text: str, finish_reason: str | None) -> str:
    """`text` with the `STOP` tag put back where the server stopped at it: a reply that stopped ("stop") with an
    `<alpha>` opened after the last `</alpha>`. An answer cut at its token limit ("length") stays as it came (an
    unfinished formula is the model's, not the stop's)."""
    if finish_reason == "stop" and text.rfind("<alpha>") > text.rfind(STOP):
        return text + STOP
    return text


def parse_options(text: str) -> dict[str, int]:
    """`answers=4,concurrency=1` -> {"answers": 4, "concurrency": 1, "tokens": 128}: every option, the defaults
    filled in. InputError naming the option for an unknown key, a value that is not a plain decimal integer in its
    range, or an option given twice."""
    chosen: dict[str, int] = {}
    for item in text.split(",") if text else []:
        key, eq, value = item.partition("=")
        if key not in ENDPOINT_OPTIONS or not eq:
            raise InputError(f"endpoint option {item[:40]!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(ENDPOINT_OPTIONS)}")
        if key in chosen:
            raise InputError(f"endpoint option {key} given twice")
        allowed, _ = ENDPOINT_OPTIONS[key]
        # ASCII digits only: int() would also read "+4", "4_0", " 4" and other scripts' digits
        if not re.fullmatch(r"[0-9]{1,9}", value) or int(value) not in allowed:
            raise InputError(f"endpoint option {key}={value[:40]!r}: must be {allowed}")
        chosen[key] = int(value)
    return {key: chosen.get(key, default) for key, (_, default) in ENDPOINT_OPTIONS.items()}


def _prompt_runs(prompts: list[str], samples: list[int]) -> list[tuple[str, list[int]]]:
    """Consecutive equal prompts as one (prompt, their samples): the run asks a parent set K times in a row."""
    runs: list[tuple[str, list[int]]] = []
    for prompt, sample in zip(prompts, samples):
        if runs and runs[-1][0] == prompt:
            runs[-1][1].append(sample)
        else:
            runs.append((prompt, [sample]))
    return runs


@dataclass
class EndpointMutator:
    """A model behind an OpenAI-compatible chat endpoint as a mutator: one improve-task prompt per parent set,
    `concurrency` prompts in flight at a time (`EndpointClient.complete`: retries, deadlines, no redirects), the
    requests of a prompt asked `answers_per_set` times in a row sent one after the other (see the module
    docstring).

    Each request's `seed` is drawn from the run's generator (`config.seed` + the draw), one per answer whatever
    the replies, so a run is as repeatable as the server's sampling. A request that fails after its retries
    gives "" (the run rejects it without a verifier call); an error that would fail every request (nothing
    listening, a server that died, 401/403/404, ...) raises `EndpointFailure` in one line naming the URL. `stats`
    counts prompts, answers, failures and seconds (answers per second = answered / seconds). `check()` asks
    before a run whether the endpoint answers at all. An interrupt (Ctrl-C, a SIGTERM made one) cuts the
    requests in flight rather than waiting out their time-outs.
    """

    config: EndpointConfig
    limits: Limits = DEFAULT_LIMITS
    brief: Any = None
    concurrency: int = 4
    answers_per_set: int = 1
    name: str = "endpoint"
    stats: dict = field(default_factory=lambda: {"prompts": 0, "answered": 0, "failed": 0, "seconds": 0.0})

    def __post_init__(self):
        check_fields(self, {"concurrency": ints(1, 256), "answers_per_set": ints(1, 64)})
        if self.config.seed is None:
            raise InputError("EndpointMutator needs config.seed (an integer): each request's seed is drawn from it")
        self.client = self._client(self.config)

    def _client(self, config: EndpointConfig) -> EndpointClient:
        model = config.model        # its messages suggest a URL in this mutator's spec, not eval's --base-url
        return EndpointClient(config, address=lambda url: f"--mutator endpoint:{url}#{model}")

    def _ask(self, run: tuple[str, list[int]]) -> list[Completion]:
        """The answers to one prompt, one request after the other (the server finds the prompt cached); stops at
        the first failure that ends the run."""
        prompt, samples = run
        done = []
        for sample in samples:
            done.append(self.client.complete([{"role": "user", "content": prompt}], sample=sample))
            if done[-1].fatal or done[-1].interrupted:
                done += [done[-1]] * (len(samples) - len(done))
                break
        return done

    def propose(self, parent_sets: list[list[Program]], rng: np.random.Generator) -> list[str]:
        from alpha_gym.tasks.parents import improve_prompts
        prompts = improve_prompts(parent_sets, self.limits, self.brief)
        samples = [int(s) for s in rng.integers(0, 2**30, size=len(prompts))]
        if not prompts:
            return []
        runs = _prompt_runs(prompts, samples)
        t0 = time.perf_counter()
        pool = ThreadPoolExecutor(min(self.concurrency, len(runs)))
        try:
            done = [c for answers in pool.map(self._ask, runs) for c in answers]
        except BaseException:
            self.client.cancel()          # the interrupted run stops now, not after the requests' time-outs
            self.client = self._client(self.config)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        self.stats["seconds"] += time.perf_counter() - t0
        self.stats["prompts"] += len(prompts)
        fatal = next((c for c in done if c.fatal), None)
        if fatal is not None:
            raise EndpointFailure(f"{redact_url(self.config.url())}: {fatal.error}: {fatal.detail}")
        self.stats["answered"] += sum(c.ok for c in done)
        self.stats["failed"] += sum(not c.ok for c in done)
        return [closed_answer(c.text, c.finish_reason) if c.ok and isinstance(c.text, str) else "" for c in done]

    def check(self) -> None:
        """`EndpointFailure` in one line when the endpoint cannot answer this mutator's requests: what `alpha-gym
        eval` asks first (`GET /models`: nothing listening, a host that does not resolve, not HTTP, 401/403, a
        redirect), then one chat request of a token (PROBE_TIMEOUT_S at most an attempt, retried as any request
        is), which a wrong path, a model name the server refuses or a reply that is no chat completion fails.
        Run before anything is scored: without it, such an endpoint is found out after the seeds are scored."""
        served = self.client.served_models()
        probe = replace(self.config, max_tokens=1, timeout_s=min(self.config.timeout_s, PROBE_TIMEOUT_S))
        got = self._client(probe).complete([{"role": "user", "content": "Reply with OK."}])
        if got.ok:
            return
        url, detail = redact_url(self.config.url()), got.detail or got.error
        listed = ""
        if served and self.config.model not in served:
            listed = f" (its /models lists {', '.join(served[:10])}{', ...' if len(served) > 10 else ''})"
        raise EndpointFailure(f"model {self.config.model!r} does not answer{'' if url in detail else ' at ' + url}"
                              f"{listed}: {detail}")


def endpoint_mutator(url: str, model: str, options: str, *, limits: Limits, brief=None, seed: int = 0
                     ) -> EndpointMutator:
    """The mutator of a spec's parts (`endpoint:URL#MODEL,OPTIONS`): sampled at temperature 1, each request
    stopped at `STOP`, waiting up to 120 s an attempt (a loaded CPU server takes tens of seconds an answer)."""
    chosen = parse_options(options)
    config = EndpointConfig(base_url=url, model=model, max_tokens=chosen["tokens"], temperature=1.0,
                            timeout_s=120.0, seed=int(seed), extra_body={"stop": [STOP]})
    return EndpointMutator(config, limits=limits, brief=brief, concurrency=chosen["concurrency"],
                           answers_per_set=chosen["answers"])
