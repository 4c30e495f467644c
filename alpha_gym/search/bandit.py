"""A bandit that shares an evolution run's proposals among its mutation operators.

Each arm is a mutator (the model-free tree operators, a local model, an endpoint). After a proposal is
scored, its arm is paid the improvement it brought: max(0, child's reward - its best parent's reward), 0
for an invalid answer and for a proposal rejected before its call (a duplicate or unparseable answer
brings nothing). Two rules choose the arm of each of a group's proposals:

    ucb1      the highest  mean_i / scale + exploration * sqrt(2 ln t / n_i)  (Auer et al. 2002), where
              mean_i is the arm's mean payment, scale the largest payment seen so far (payments in [0, 1],
              as UCB1 assumes) and t the pulls of all arms. An arm never pulled goes first. The proposals
              of one group are chosen before any is scored, so each choice counts as a pull already
              (n_i + pending), and a group spreads over near-tied arms instead of sending all to one
    thompson  a draw from each arm's Beta(prior + improved, prior + not improved) posterior on "the
              proposal improved on its best parent" (Thompson 1933); the highest draw wins

`decay` (ShinkaEvolve's auto-decay; 1: none) multiplies every arm's counts and sums before each update, so
an arm that was good early and stopped paying loses its lead. Deterministic given the Generator passed to
`choose` (ties go to the first arm); `to_dict` / `from_dict` restore it exactly.

Source (ideas, not code): ShinkaEvolve (Lange et al. 2025, SakanaAI/ShinkaEvolve, shinka/llm/
dynamic_sampling.py): a bandit over the LLMs of an ensemble, paid the improvement of a child over its
parent clipped at zero, scaled by the largest seen, with an exponential decay of old observations.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.ranges import Range, SettingError, check_fields, check_value, closed, shown

BANDIT_FORMAT = "alpha-gym/mutator-bandit/v1"
BANDIT_METHODS = ("ucb1", "thompson")


@dataclass(frozen=True)
class BanditConfig:
    """How the calls are shared: the rule (`ucb1` or `thompson`) and its constants."""

    method: str = "ucb1"
    exploration: float = 1.0     # UCB1's c
    prior: float = 1.0           # Thompson's Beta(prior, prior) before any observation
    decay: float = 1.0           # per update, on every arm's counts and sums (1: no decay)

    def __post_init__(self):
        check_fields(self, BANDIT_RANGES)
        if self.method not in BANDIT_METHODS:
            raise SettingError("BanditConfig", "method", self.method, f"one of {', '.join(BANDIT_METHODS)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


BANDIT_RANGES = {
    "exploration": closed(0.0, 1e3),
    "prior": Range(0.0, 1e6, lo_open=True),
    "decay": Range(0.0, 1.0, lo_open=True),
}


class Bandit:
    """Arms by name; `choose(n, rng)` names the arm of each of n proposals, `update(arm, improvement)` pays one."""

    def __init__(self, arms: Sequence[str], config: BanditConfig = BanditConfig()):
        arms = list(arms)
        if not arms or len(set(arms)) != len(arms) or not all(isinstance(a, str) and a for a in arms):
            raise InputError(f"a bandit needs distinct non-empty arm names, got {arms!r}")
        self.arms, self.config = arms, config
        self.pulls = np.zeros(len(arms))        # decayed number of payments
        self.paid = np.zeros(len(arms))         # decayed sum of payments
        self.improved = np.zeros(len(arms))     # decayed number of payments > 0
        self.chosen = np.zeros(len(arms), dtype=np.int64)  # proposals sent to each arm (never decayed)
        self.scale = 0.0                        # the largest payment seen

    def _index(self, arm: str) -> int:
        try:
            return self.arms.index(arm)
        except ValueError:
            raise InputError(f"unknown arm {arm!r}; the arms are {self.arms}") from None

    def choose(self, n: int, rng: np.random.Generator) -> list[str]:
        """The arm of each of `n` proposals scored together."""
        pending = np.zeros(len(self.arms))
        out = []
        for _ in range(n):
            if self.config.method == "thompson":
                a = self._beta(self.improved)
                b = self._beta(self.pulls - self.improved)
                k = int(np.argmax(rng.beta(a, b)))
            else:
                k = self._ucb1(pending)
            pending[k] += 1
            self.chosen[k] += 1
            out.append(self.arms[k])
        return out

    def _beta(self, counts: np.ndarray) -> np.ndarray:
        return self.config.prior + np.maximum(counts, 0.0)

    def _ucb1(self, pending: np.ndarray) -> int:
        n = self.pulls + pending
        if (n <= 0).any():
            return int(np.flatnonzero(n <= 0)[0])
        mean = np.where(self.pulls > 0, self.paid / np.maximum(self.pulls, 1e-300), 0.0)
        if self.scale > 0:
            mean = mean / self.scale
        bonus = self.config.exploration * np.sqrt(2.0 * math.log(max(n.sum(), 2.0)) / n)
        return int(np.argmax(mean + bonus))

    def update(self, arm: str, improvement: float) -> None:
        """Pay `arm` for one proposal: its improvement over its best parent (negative and non-finite count 0)."""
        k = self._index(arm)
        x = float(improvement)
        x = x if math.isfinite(x) and x > 0 else 0.0
        if self.config.decay < 1.0:
            for arr in (self.pulls, self.paid, self.improved):
                arr *= self.config.decay
        self.pulls[k] += 1.0
        self.paid[k] += x
        self.improved[k] += 1.0 if x > 0 else 0.0
        self.scale = max(self.scale, x)

    def shares(self) -> dict[str, float]:
        """The share of proposals each arm was sent."""
        total = int(self.chosen.sum())
        return {a: (int(c) / total if total else 0.0) for a, c in zip(self.arms, self.chosen)}

    def to_dict(self) -> dict[str, Any]:
        return {"format": BANDIT_FORMAT, "arms": list(self.arms), "config": self.config.to_dict(),
                "pulls": self.pulls.tolist(), "paid": self.paid.tolist(), "improved": self.improved.tolist(),
                "chosen": self.chosen.tolist(), "scale": self.scale}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Bandit":
        """The bandit `to_dict` wrote, every field checked (a state read back may have been edited): InputError
        naming the field otherwise."""
        if not isinstance(d, Mapping) or d.get("format") != BANDIT_FORMAT:
            got = d.get("format") if isinstance(d, Mapping) else type(d).__name__
            raise InputError(f"not a bandit state (format {shown(got)}, expected {BANDIT_FORMAT!r})")
        keys = {"format", "arms", "config", "pulls", "paid", "improved", "chosen", "scale"}
        if set(d) != keys:
            odd = sorted(set(d) ^ keys)[0]
            raise InputError(f"the bandit state {'has no' if odd in keys else 'has an unknown field'} {odd!r}")
        config = d["config"]
        if not isinstance(config, Mapping) or not set(config) <= {f.name for f in fields(BanditConfig)}:
            raise InputError(f"the bandit's config = {shown(config)}: must be an object of BanditConfig's fields")
        if not isinstance(d["arms"], list):
            raise InputError(f"bandit.arms = {shown(d['arms'])}: must be a list of arm names")
        out = cls(d["arms"], BanditConfig(**config))
        for name, tp in (("pulls", float), ("paid", float), ("improved", float), ("chosen", int)):
            values = d[name]
            if not isinstance(values, list) or len(values) != len(out.arms):
                raise InputError(f"bandit.{name} = {shown(values)}: must be a list of one number per arm")
            for k, v in enumerate(values):
                check_value("bandit", f"{name}[{k}]", v, Range(0.0, 1e15, integer=tp is int), tp)
            setattr(out, name, np.array(values, dtype=np.int64 if tp is int else np.float64))
        check_value("bandit", "scale", d["scale"], closed(0.0, 1e15))
        out.scale = float(d["scale"])
        return out
