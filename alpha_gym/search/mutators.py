"""The mutation operators of `evolve`, one row each, and the spec strings that name them.

    tree        the model-free one: the search's tree operators on the parents (`evolution.TreeMutator`)
    random      no search at all: a random formula from the grammar per parent set, the parents unread
                (`RandomMutator`; the comparison's `random` control)
    endpoint    any OpenAI-compatible chat endpoint, through the `alpha-gym eval` client
                (`alpha_gym.search.endpoint_mutator`: its options, and how it runs fast on llama.cpp's server)

The rows that sample a local model with torch (`model`, `rl`) stand a floor above, in `trainers.mutators`, whose
`MUTATORS` is the whole table: a spec is read against the table given (`rows=`, default this module's).

`make_mutator(spec, verifier=, limits=, brief=, seed=, rows=)` builds one from a spec string: "tree",
"endpoint:URL#MODEL" (e.g. "endpoint:http://127.0.0.1:8080/v1#smollm2") or, with the whole table, "model:PATH"
("model" alone: the built-in start model; PATH may be a packaged model's name, "model:gemma3-270m", as may `rl`'s
model=).
An endpoint spec may end in options: "endpoint:URL#MODEL,answers=4,concurrency=1,tokens=128".
Adding an operator is one row of `MUTATORS`.

The model-driven mutators write through the improve task (`alpha_gym.tasks.improve`): one prompt per parent
set, rendered by `render_prompt(brief, limits, {"parents": parents_context(parents)}, task="improve")`, the
(`alpha_gym.tasks.parents.improve_prompts`), the whole group's prompts asked together (the endpoint:
concurrent requests; the model: one batch), the answers
returned unparsed for `evolve` to read, reject or score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.evaluation.endpoint import redact_url
from alpha_gym.language import DEFAULT_LIMITS, Limits
from alpha_gym.ranges import check_fields, ints
from alpha_gym.search.database import Program
from alpha_gym.search.endpoint_mutator import PROBE_TIMEOUT_S, EndpointMutator, endpoint_mutator  # noqa: F401
from alpha_gym.search.evolution import Mutator, TreeMutator




class MutatorSpecError(InputError):
    """A mutator spec string that names no row, or a row's argument it cannot use."""


# ------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class MutatorRow:
    """One mutation operator.

    name  the spec's prefix ("tree", "endpoint:...", "model:...")
    make  `make(arg, *, verifier, limits, brief, seed) -> Mutator`, arg the spec after the first ":" ("" for
          none)
    spec  the spec's shape, for messages
    doc   one line: what proposes the children
    """

    name: str
    make: Callable[..., Mutator]
    spec: str
    doc: str = ""


def _tree(arg: str, *, verifier, limits: Limits, brief=None, seed: int = 0) -> TreeMutator:
    if arg:
        raise MutatorSpecError(f"the tree mutator takes no argument, got 'tree:{arg}'")
    return TreeMutator(limits=limits)


@dataclass(frozen=True)
class RandomMutator:
    """Random formulas from the grammar (`alpha_gym.language.sample.random_node`), one per parent set, the parents
    unread: the floor every other mutator is measured against at the same verifier calls. Each tree's depth is
    drawn in [min_depth, max_depth] from the run's generator (so a run repeats its draws) and the tree is redrawn
    until it reads back under every Limit (`tree.checked`, as the tree mutator's children are), at most
    `max_tries` times (then "", which the run rejects without a call)."""

    limits: Limits = DEFAULT_LIMITS
    min_depth: int = 2
    max_depth: int = 5
    max_tries: int = 1000
    name: str = "random"

    def __post_init__(self):
        # depth 16 at most, the Limits' default max_depth: a random tree's expected size grows geometrically
        # with depth, so a deeper draw costs time and memory for a tree the verifier would mostly refuse
        check_fields(self, {"min_depth": ints(2, 16), "max_depth": ints(2, 16), "max_tries": ints(1, 100_000)})
        if self.max_depth < self.min_depth:
            raise MutatorSpecError(f"max_depth {self.max_depth} < min_depth {self.min_depth}")

    def propose(self, parent_sets: list[list[Program]], rng: np.random.Generator) -> list[str]:
        return [self._one(rng) for _ in parent_sets]

    def _one(self, rng: np.random.Generator) -> str:
        from alpha_gym.language.sample import random_node
        from alpha_gym.search.tree import checked
        for _ in range(self.max_tries):
            ok = checked(random_node(rng, int(rng.integers(self.min_depth, self.max_depth + 1))), self.limits)
            if ok is not None:
                return ok[0]
        return ""


def _random(arg: str, *, verifier, limits: Limits, brief=None, seed: int = 0) -> RandomMutator:
    if arg:
        raise MutatorSpecError(f"the random mutator takes no argument, got 'random:{arg}'")
    return RandomMutator(limits=limits)


def _endpoint(arg: str, *, verifier, limits: Limits, brief=None, seed: int = 0) -> EndpointMutator:
    url, _, rest = arg.rpartition("#")
    model, _, options = rest.partition(",")
    if not url.startswith(("http://", "https://")) or not model:
        raise MutatorSpecError(f"an endpoint mutator is 'endpoint:URL#MODEL[,OPTION=N...]' (e.g. "
                               f"'endpoint:http://127.0.0.1:8080/v1#smollm2,answers=4,concurrency=1'), got "
                               f"{'endpoint:' + redact_url(arg)!r}")
    try:
        return endpoint_mutator(url, model, options, limits=limits, brief=brief, seed=seed)
    except InputError as err:
        raise MutatorSpecError(f"{err} (in {'endpoint:' + redact_url(arg)!r})") from None


MUTATORS: tuple[MutatorRow, ...] = (
    MutatorRow("tree", _tree, "tree", doc="the search's tree operators on the parents (no model)"),
    MutatorRow("endpoint", _endpoint, "endpoint:URL#MODEL",
               doc="any OpenAI-compatible chat endpoint, asked with improve-task prompts (options after the "
                   "model: ,answers=K ,concurrency=C ,tokens=T)"),
    MutatorRow("random", _random, "random", doc="random formulas from the grammar, the parents unread (no search)"),
)


def kinds_line(rows: Sequence[MutatorRow] = MUTATORS) -> str:
    """The specs' shapes, for a help text or an error: "tree, endpoint:URL#MODEL, random"."""
    return ", ".join(row.spec for row in rows)


def parse_spec(spec: str, rows: Sequence[MutatorRow] = MUTATORS) -> tuple[MutatorRow, str]:
    """(the row of `rows` a spec names, the text after its first ":"; "" for none): checks a spec before anything
    loads."""
    if not isinstance(spec, str):
        raise MutatorSpecError(f"a mutator spec is a string, got {type(spec).__name__}")
    name, _, arg = spec.partition(":")
    named = {row.name: row for row in rows}
    if name not in named:
        raise MutatorSpecError(f"unknown mutator {spec[:80]!r}; known: {kinds_line(rows)}")
    return named[name], arg


def check_endpoints(specs: Sequence[str], seed: int = 0, rows: Sequence[MutatorRow] = MUTATORS) -> None:
    """`EndpointMutator.check()` of each endpoint spec among `specs` (the others need no network): before a run
    scores anything, an endpoint that cannot answer is named in one line (`EndpointFailure`)."""
    for spec in specs:
        row, arg = parse_spec(spec, rows)
        if row.name == "endpoint":
            _endpoint(arg, verifier=None, limits=DEFAULT_LIMITS, seed=seed).check()


def make_mutator(spec: str, *, verifier, limits: Limits, brief=None, seed: int = 0,
                 rows: Sequence[MutatorRow] = MUTATORS) -> Mutator:
    """The mutator a spec string names in `rows` (see the module docstring); MutatorSpecError for a spec no row
    reads.

    verifier: the run's (a row may read its config; these three read `limits` only); limits: the Limits the
    prompts state and answers are held to; brief: shown in every prompt of a model-driven mutator (None: none);
    seed: the endpoint's base request seed (the tree and model mutators draw from the run's generator); rows: the
    table (`trainers.mutators.MUTATORS` for the model rows too)."""
    row, arg = parse_spec(spec, rows)
    return row.make(arg, verifier=verifier, limits=limits, brief=brief, seed=seed)
