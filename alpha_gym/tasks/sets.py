"""The named brief sets (`train`, `probe`, `fixed`): what every trainer, integration and the env draw from.

They live with the briefs, not in the Gym env, so a training loop gets its briefs without building an
environment.
"""

from __future__ import annotations

from functools import lru_cache

from alpha_gym.errors import InputError
from alpha_gym.tasks.briefs import FIXED_BRIEFS, Brief


@lru_cache(maxsize=2)
def brief_set(name: str) -> tuple[Brief, ...]:
    """Named brief sets: `train` and `probe` (the seeded 500 briefs split by template family), `fixed`."""
    if name == "fixed":
        return FIXED_BRIEFS
    from alpha_gym.tasks.generator import generate_briefs, split_briefs
    split = split_briefs(generate_briefs(500, seed=0), n_probe=50)
    if name == "train":
        return tuple(split.train)
    if name == "probe":
        return tuple(split.probe)
    raise ValueError(f"unknown brief set {name!r}; use 'train', 'probe', 'fixed' or a sequence of Brief")


@lru_cache(maxsize=1)
def _briefs_by_id() -> dict:
    return {b.id: b for name in ("fixed", "probe", "train") for b in brief_set(name)}


def brief_by_id(brief_id: str):
    """The seeded or fixed brief with this id (None if there is none, or for what is not a string); the index is built
    once per process."""
    return _briefs_by_id().get(brief_id) if isinstance(brief_id, str) else None


def require_brief(brief_id):
    """The seeded or fixed brief with this id, None for None (no brief given); InputError for any other id."""
    if brief_id is None:
        return None
    brief = brief_by_id(brief_id) if isinstance(brief_id, str) else None
    if brief is None:
        raise InputError(f"brief_id {str(brief_id)[:80]!r} is not a seeded or fixed brief (the train, probe and "
                         "fixed sets)")
    return brief
