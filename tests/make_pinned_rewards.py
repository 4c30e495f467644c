"""Regenerate tests/data/pinned_rewards.json: a few hundred answers' rewards and channels, bit for bit.

    python tests/make_pinned_rewards.py

Run it only when a reward is MEANT to change (and say so in the commit): `test_pinned_rewards.py`
checks that refactors leave every reward as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PANEL = {"n_stocks": 20, "n_days": 600, "seed": 5}
GROUP = 6
OUT = Path(__file__).with_name("data") / "pinned_rewards.json"


def answers() -> list[str]:
    from alpha_gym.alpha101 import formulas
    from alpha_gym.language.sample import random_formula
    rng = np.random.default_rng(2026)
    out = [f"<alpha>{random_formula(rng, depth=int(rng.integers(2, 6)))}</alpha>" for _ in range(216)]
    out += [f"<alpha>{f}</alpha>" for f in formulas().values()]
    out += ["no tag", "<alpha>rank(close -)</alpha>", "<alpha>rank(ts_mean(close, 250))</alpha>",
            "<think>reversal</think><alpha>rank(-ts_delta(close, 5))</alpha>",
            "<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(-ts_delta(close, 5))</alpha>"]
    return out


def score_all(answers: list[str], config) -> list[dict]:
    from alpha_gym.market import synthetic_panel
    from alpha_gym.scoring.verifier import Verifier
    verifier = Verifier(synthetic_panel(**PANEL), config)
    rows = []
    for i in range(0, len(answers), GROUP):
        group = verifier.score_group(answers[i:i + GROUP])
        for s in group.scores:
            rows.append({"reward": float(s.reward).hex(),
                         "channels": {k: float(v).hex() for k, v in s.channels.items()}})
    return rows


def configs():
    from alpha_gym.scoring.config import VerifierConfig
    return {"default": VerifierConfig(),
            "reference": VerifierConfig.reference(format_enabled=True, min_turnover_free=0.06)}


def check() -> int:
    """Exact comparison with the file (the bit-for-bit check on the machine that wrote it)."""
    data = json.loads(OUT.read_text())
    bad = 0
    for name, cfg in configs().items():
        now = score_all(data["answers"], cfg)
        bad += sum(a != b for a, b in zip(now, data["configs"][name]))
    print(f"{bad} of {len(data['answers']) * len(data['configs'])} answers differ in any bit")
    return int(bad > 0)


if __name__ == "__main__":
    import sys
    if "--check" in sys.argv:
        sys.exit(check())
    texts = answers()
    data = {"panel": PANEL, "group": GROUP, "answers": texts,
            "configs": {name: score_all(texts, cfg) for name, cfg in configs().items()}}
    OUT.write_text(json.dumps(data, indent=0))
    print(f"wrote {OUT}: {len(texts)} answers x {len(data['configs'])} configs")
