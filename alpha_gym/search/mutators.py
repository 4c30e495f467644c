"""The mutation operators an evolution run can use: one row per kind, and one way to build one from its spec.

A spec is what `alpha-gym evolve --mutator SPEC` takes (repeatable: with more than one, the bandit shares
the calls, `alpha_gym.search.bandit`). Its kind is the text before the first ":" (all of it where there is
none), and the row of that kind builds the mutator:

    tree        the model-free one: the search's tree operators on the parents (`evolution.TreeMutator`)

The mutators that a language model drives (an OpenAI-compatible endpoint, a local model folder) are rows of
the same table, built by the improve task's module. An unknown kind, or a spec its row cannot read, is a
`MutatorSpecError` naming the kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from alpha_gym.errors import InputError
from alpha_gym.search.evolution import Mutator, TreeMutator


class MutatorSpecError(InputError):
    """A --mutator spec of no known kind, or one its kind cannot read."""


@dataclass(frozen=True)
class MutatorKind:
    """One row: the kind's name, how its spec is written, what it is, and how it is built.

    `build(argument, verifier=, limits=, brief=, seed=)` gets the spec's text after "kind:" (None where
    the spec is the bare kind) and returns a `Mutator`."""

    name: str
    spec: str                   # how the spec is written, for the help and the errors
    about: str
    build: Callable[..., Mutator]


def _tree(argument: str | None, *, verifier, limits, brief=None, seed: int = 0) -> Mutator:
    if argument is not None:
        raise MutatorSpecError(f"--mutator tree takes no argument, got 'tree:{argument[:60]}'")
    return TreeMutator(limits)


MUTATORS: dict[str, MutatorKind] = {row.name: row for row in (
    MutatorKind("tree", "tree", "the model-free search's tree operators on the parents (no model)", _tree),
)}


def kinds_line() -> str:
    """The kinds and how each is written, for a help text or an error: "tree | endpoint:URL#MODEL | ..."."""
    return " | ".join(row.spec for row in MUTATORS.values())


def parse_spec(spec: str) -> tuple[MutatorKind, str | None]:
    """(the kind's row, the text after "kind:" or None): checks a spec before anything is loaded."""
    if not isinstance(spec, str) or not spec.strip():
        raise MutatorSpecError(f"--mutator {spec!r}: empty; the kinds are {kinds_line()}")
    kind, sep, argument = spec.strip().partition(":")
    row = MUTATORS.get(kind)
    if row is None:
        raise MutatorSpecError(f"--mutator {spec[:80]!r}: unknown kind {kind[:40]!r}; the kinds are {kinds_line()}")
    return row, (argument if sep else None)


def make_mutator(spec: str, *, verifier, limits, brief=None, seed: int = 0) -> Mutator:
    """The mutator a spec names (see the module docstring); `MutatorSpecError` for an unknown kind."""
    row, argument = parse_spec(spec)
    return row.build(argument, verifier=verifier, limits=limits, brief=brief, seed=seed)
