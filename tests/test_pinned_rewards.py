"""Refactors keep every reward: 304 answers x 2 configs scored as before (tests/data/pinned_rewards.json).

The file was written by `python tests/make_pinned_rewards.py` and is regenerated only when a reward
is meant to change. On the machine that wrote it the match is bit for bit (`--check` there); here a
relative 1e-12 leaves room for a CPU whose vector units sum in another order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import make_pinned_rewards as pinned  # noqa: E402

DATA = json.loads(pinned.OUT.read_text())


@pytest.mark.parametrize("name", sorted(DATA["configs"]))
def test_rewards_and_channels_as_pinned(name):
    assert DATA["answers"] == pinned.answers(), "the pinned answers changed: regenerate on purpose, or not at all"
    now = pinned.score_all(DATA["answers"], pinned.configs()[name])
    before = DATA["configs"][name]
    assert len(now) == len(before) == len(DATA["answers"])
    for i, (a, b) in enumerate(zip(now, before)):
        got = [float.fromhex(a["reward"])] + [float.fromhex(v) for v in a["channels"].values()]
        want = [float.fromhex(b["reward"])] + [float.fromhex(v) for v in b["channels"].values()]
        assert list(a["channels"]) == list(b["channels"])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"answer {i}: {DATA['answers'][i]}")
