"""The named brief sets (`train`, `probe`, `probe_seen`, `fixed`): what every trainer, integration and the env draw
from.

They live with the briefs, not in the Gym env, so a training loop gets its briefs without building an
environment.
"""

from __future__ import annotations

from functools import lru_cache

from alpha_gym.errors import InputError
from alpha_gym.tasks.briefs import FIXED_BRIEFS, Brief


#: The named sets, for messages and loops over them.
SET_NAMES = ("train", "probe", "probe_seen", "fixed")
#: `probe_seen`'s size and the generator seed it is drawn with (the training and probe sets are seed 0's).
SEEN_PROBE_N, SEEN_PROBE_SEED = 50, 1


@lru_cache(maxsize=len(SET_NAMES))
def brief_set(name: str) -> tuple[Brief, ...]:
    """Named brief sets: `train` and `probe` (the seeded 500 briefs split by template family: the probe's two
    families never reach training, so it measures transfer to unseen mechanisms), `probe_seen` (50 briefs of the
    training families that no training brief equals: new combinations of the parts training shows, ids `g1-...`)
    and `fixed`."""
    if name == "fixed":
        return FIXED_BRIEFS
    from alpha_gym.tasks.generator import generate_briefs, split_briefs, unseen_briefs_of_seen_families
    if name == "probe_seen":
        return unseen_briefs_of_seen_families(brief_set("train"), n=SEEN_PROBE_N, seed=SEEN_PROBE_SEED)
    split = split_briefs(generate_briefs(500, seed=0), n_probe=50)
    if name == "train":
        return tuple(split.train)
    if name == "probe":
        return tuple(split.probe)
    raise ValueError(f"unknown brief set {name!r}; use {', '.join(map(repr, SET_NAMES))} or a sequence of Brief")


@lru_cache(maxsize=1)
def _briefs_by_id() -> dict:
    return {b.id: b for name in SET_NAMES for b in brief_set(name)}


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
        raise InputError(f"brief_id {str(brief_id)[:80]!r} is not a seeded or fixed brief (the train, probe, "
                         "probe_seen and fixed sets)")
    return brief
