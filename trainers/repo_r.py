"""REPO-R token advantage shaping with its entropy thermostat, and the ADAPO upper-clip controller.

REPO-R (Part 3 section 5): in a better-than-average answer, rare tokens get more credit; in a
worse-than-average answer, rare tokens get less blame. The strength zeta follows the policy entropy:
it grows while entropy sits below a calibrated target (the policy is collapsing) and shrinks above it.

Typical step:
    H    = masked mean entropy of this batch's completion tokens (a float)
    zeta = thermostat.update(H)
    adv  = shape_advantages(adv, logp.detach(), zeta)         # (B, T), feed to cispo_loss / dapo_loss
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from trainers.config import EPSILON_HIGH

__all__ = ["shape_advantages", "EntropyThermostat", "AdapoController"]


def shape_advantages(adv: torch.Tensor, logp: torch.Tensor, zeta: float) -> torch.Tensor:
    """REPO-R shaping: scale each token's advantage by how rare the token is (log p <= 0).

        A > 0:  A' = A * (1 - zeta * log p)     >= A      rare token, more credit
        A < 0:  A' = A * max(0, 1 + zeta * log p)  in [A, 0]  rare token, less blame
        A = 0:  A' = 0

    log p is the token's log-prob under the current policy, detached here: shaping changes how much
    each token is pushed, never the direction of the gradient through log p. A confident token
    (log p ~ 0) keeps its advantage; at zeta = 0.05 a 1-in-1,000 token gets x1.35 or x0.65.
    The max(0, .) is ours: without it a token with log p < -1/zeta (p < 2e-9 at zeta = 0.05) in a bad
    answer would flip from blame to credit; the reference formula has no such case in its range.
    adv: (B,) or (B, T); logp: (B, T). Returns (B, T); zeta = 0 returns A broadcast, unchanged.
    """
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
    lp = logp.detach()
    credit = 1 - zeta * lp
    blame = (1 + zeta * lp).clamp(min=0.0)
    return adv * torch.where(adv > 0, credit, blame)


def _calibrate(ctrl, entropy: float) -> None:
    """Record `entropy`; once `window` values are in, target = their mean."""
    ctrl.history.append(entropy)
    if len(ctrl.history) == ctrl.window:
        ctrl.target = sum(ctrl.history) / ctrl.window


class _Resumable:
    """Exact save/restore of a controller's whole state (for resuming a run bit for bit)."""

    def state_dict(self) -> dict:
        return copy.deepcopy(self.__dict__)

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(copy.deepcopy(state))


@dataclass
class EntropyThermostat(_Resumable):
    """Entropy-driven zeta for REPO-R ("w5": a five-update calibration window).

        updates 1..window:  zeta = 0; target = mean of their entropies (set at update `window`)
        first update after: zeta_prev = zeta_init (doubling 0 would stay 0)
        every later update: zeta = 2 * zeta_prev   if H < target   (entropy falling: push rare tokens)
                            zeta = zeta_prev / 2   if H > target
                            zeta = zeta_prev       if H == target
                            zeta = min(max(zeta, 0), zeta_max)

    Pass `target` to skip calibration. `update(H)` returns the zeta to use for this update's loss.
    `log` holds one dict per update: step, entropy, target, zeta.
    `state_dict()` / `load_state_dict()` restore the controller exactly for resumed runs.
    """

    window: int = 5
    zeta_init: float = 0.005
    zeta_max: float = 0.05
    target: float | None = None
    zeta: float = 0.0
    step: int = 0
    started: bool = False
    history: list = field(default_factory=list)
    log: list = field(default_factory=list)

    def update(self, entropy) -> float:
        entropy = float(entropy)
        self.step += 1
        if self.target is None:
            _calibrate(self, entropy)
            self.zeta = 0.0
        else:
            prev = self.zeta if self.started else self.zeta_init
            self.started = True
            factor = 2.0 if entropy < self.target else 0.5 if entropy > self.target else 1.0
            self.zeta = min(max(prev * factor, 0.0), self.zeta_max)
        self.log.append({"step": self.step, "entropy": entropy, "target": self.target, "zeta": self.zeta})
        return self.zeta


@dataclass
class AdapoController(_Resumable):
    """ADAPO-style entropy feedback on the upper clip epsilon_high of the clipped surrogate (dapo/grpo).

        updates 1..window:  epsilon_high unchanged; target = mean entropy (as `EntropyThermostat`)
        later updates:      epsilon_high += step_size   if H < target
                            epsilon_high -= step_size   if H > target
                            epsilon_high = min(max(epsilon_high, epsilon_high_min), epsilon_high_max)

    Why up when entropy falls: a larger upper clip lets a positive-advantage token whose probability is
    still low grow further before its gradient is switched off (DAPO's "clip-higher"), which feeds
    probability mass to alternatives and slows entropy collapse; above target the clip tightens back.
    Defaults start at DAPO's 0.28 and stay in [0.2, 0.4]. Not for cispo: there epsilon_high is a weight
    cap, not a clip band. `update(H)` returns the epsilon_high to use for this update's loss.
    """

    epsilon_high: float = EPSILON_HIGH["dapo"]
    epsilon_high_min: float = 0.2
    epsilon_high_max: float = 0.4
    step_size: float = 0.01
    window: int = 5
    target: float | None = None
    step: int = 0
    history: list = field(default_factory=list)
    log: list = field(default_factory=list)

    def update(self, entropy) -> float:
        entropy = float(entropy)
        self.step += 1
        if self.target is None:
            _calibrate(self, entropy)
        else:
            delta = self.step_size if entropy < self.target else -self.step_size if entropy > self.target else 0.0
            self.epsilon_high = min(max(self.epsilon_high + delta, self.epsilon_high_min), self.epsilon_high_max)
        self.log.append({"step": self.step, "entropy": entropy, "target": self.target,
                         "epsilon_high": self.epsilon_high})
        return self.epsilon_high
