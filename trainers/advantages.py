"""Group advantages for multi-reward RL: GRPO, GDPO, the validity projection and the advantage floor.

Shapes: P prompts, G answers per prompt (a "group"), K reward channels.
A 1-D input of shape (B,) is read as one group of B answers.
Every function is pure: it returns a new tensor and never edits its input.

Pipeline used by the training loop (`compute_advantages`):

    channels (P, G, K) --gdpo or grpo--> A (P, G) --projection--> A (P, G)

The projection enforces two hard rules on every group:
    1. an answer that may not be rewarded (invalid, caught by the motif guard R10, or core score <= floor,
       unless it meets every check of its brief and clears the lower `brief_floor`) never gets A > 0;
    2. the advantages of a group sum to zero.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from alpha_gym.scoring.advantage_rule import answers_may_win, project_advantages

__all__ = [
    "grpo_advantages",
    "gdpo_advantages",
    "enforce_validity",
    "advantage_floor",
    "nonzero_share",
    "compute_advantages",
]


def _as_groups(x: torch.Tensor) -> torch.Tensor:
    """(B,) -> (1, B); (P, G, ...) unchanged."""
    return x.unsqueeze(0) if x.dim() == 1 else x


def _standardise(x: torch.Tensor, dim: int, eps: float, scale: bool = True) -> torch.Tensor:
    """z = (x - mean) / (std + eps) along `dim`, std with Bessel's correction (n - 1), as TRL's `nanstd`.

    A slice that is constant along `dim` gets exactly 0 (not a 1e-13 rounding residue divided by eps).
    A slice of one element has no spread and also gets 0.
    """
    centred = x - x.mean(dim=dim, keepdim=True)
    if x.shape[dim] < 2:
        return torch.zeros_like(x)
    if scale:
        centred = centred / (x.std(dim=dim, keepdim=True, correction=1) + eps)
    constant = x.amax(dim=dim, keepdim=True) == x.amin(dim=dim, keepdim=True)
    return centred.masked_fill(constant, 0.0)


def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-4, scale: bool | str = True) -> torch.Tensor:
    """GRPO: standardise one scalar reward inside each group.

        A[p, g] = (r[p, g] - mean_g r[p, :]) / (std_g r[p, :] + eps)

    std is the sample std (Bessel, n - 1) of the group, like TRL's default `scale_rewards="group"`;
    eps = 1e-4 as in TRL. `scale` takes TRL's `scale_rewards` values:
    True / "group" (divide by the group std), "batch" (divide by the std of all P*G rewards),
    False / "none" (only subtract the group mean: Dr. GRPO).
    rewards: (B,) one group, or (P, G). Returns the same shape.
    """
    scale = {True: "group", False: "none"}.get(scale, scale)
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be True/False/'group'/'batch'/'none', got {scale!r}")
    r = _as_groups(rewards)
    adv = _standardise(r, dim=1, eps=eps, scale=scale == "group")
    if scale == "batch" and r.numel() > 1:
        adv = adv / (r.std(correction=1) + eps)
    return adv.reshape(rewards.shape)


def gdpo_advantages(channels: torch.Tensor, priorities: torch.Tensor | Sequence[float],
                    eps: float = 1e-4, batch_normalize: bool = False) -> torch.Tensor:
    """GDPO: standardise each channel inside its group first, then add with priorities.

        z[p, g, k] = (c[p, g, k] - mean_g c[p, :, k]) / (std_g c[p, :, k] + eps)
        A[p, g]    = sum_k w[k] * z[p, g, k]

    A channel that is constant within a group contributes exactly 0 there, so a wide-range channel
    cannot drown the others and a flat channel adds no noise. The result is not rescaled: its size
    grows with the priorities (up to sum_k w_k * sqrt(G - 1)), so the learning rate sees priorities.
    `batch_normalize=True` adds TRL's last step of `multi_objective_aggregation="normalize_then_sum"`:
    A <- (A - mean_all A) / (std_all A + eps) over the whole batch.
    channels: (P, G, K) or (G, K) for one group. Returns (P, G) or (G,).
    """
    c = channels.unsqueeze(0) if channels.dim() == 2 else channels
    if not torch.isfinite(c).all():
        raise ValueError("reward channels must be finite (map a failed channel to a number first)")
    w = torch.as_tensor(priorities, dtype=c.dtype, device=c.device)
    if w.shape != (c.shape[-1],):
        raise ValueError(f"priorities shape {tuple(w.shape)} does not match {c.shape[-1]} channels")
    adv = (_standardise(c, dim=1, eps=eps) * w).sum(-1)
    if batch_normalize and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std(correction=1) + eps)
    return adv.reshape(channels.shape[:-1])


def _project(adv: torch.Tensor, may_win: torch.Tensor) -> torch.Tensor:
    """Projection onto {A_i <= 0 where not may_win, sum_g A = 0}, moving only the answers that may win.

        step 1: A_i <- min(A_i, 0)                for every i that may not win
        step 2: A_i <- A_i - S / n                for every i that may win,
                S = sum_g A (after step 1), n = number of answers in the group that may win
        if n = 0: every A in the group <- 0

    The rule is `alpha_gym.scoring.advantage_rule.project_advantages` (numpy), the one the verl guard
    applies too, so every trainer holds answers to the same rule; advantages carry no gradient.
    """
    x = adv.detach().cpu()
    if x.dtype in (torch.bfloat16, torch.float16):  # numpy has no bfloat16
        x = x.float()
    out = project_advantages(x.numpy(), may_win.detach().cpu().to(torch.bool).numpy())
    return torch.from_numpy(out).to(device=adv.device, dtype=adv.dtype)


def enforce_validity(adv: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Hard rules: an invalid answer never gets A > 0, and each group still sums to zero.

        A_i <- min(A_i, 0)                        for invalid i
        A_j <- A_j - (sum_g A) / n_valid           for valid j (uniform shift of the surplus)
        all-invalid group -> all zeros

    Invalid answers are clamped, never shifted, so they stay <= 0 whatever the shift. An all-valid group
    that already sums to zero comes back unchanged (up to float rounding of the zero shift).
    adv, valid: (B,) or (P, G).
    """
    return _project(adv, valid)


def advantage_floor(adv: torch.Tensor, core: torch.Tensor, floor: float | None,
                    valid: torch.Tensor | None = None) -> torch.Tensor:
    """No positive advantage for answers whose core score (R1 cpcv) is <= floor; re-zero the group sum.

        may_win_i = (core_i > floor) [and valid_i]
        A <- _project(A, may_win)                 (same projection as `enforce_validity`)

    `floor=None` means off and returns `adv` itself, untouched: no second clamp hides behind "off".
    Pass `valid` so the re-zeroing cannot lift an invalid answer above 0 (`compute_advantages` does).

    Why the default floor is None (or far below the score range, e.g. -1e9): a floor is an assumption
    about the reward distribution. At floor = 0 a group in which no answer clears 0 gets all zeros, so
    when a fresh policy rarely scores above 0 (a harsh market, high costs) almost every group is silent:
    Part 3 section 7 measured 3-4 % of answers with any signal and a flat reward curve, against ~100 %
    and a climbing reward with the floor removed. Log `nonzero_share` every step to see it.
    """
    if floor is None:
        return adv
    may_win = _as_groups(core) > floor
    if valid is not None:
        may_win = may_win & _as_groups(valid.to(torch.bool))
    return _project(adv, may_win.reshape(adv.shape))


def nonzero_share(adv: torch.Tensor, atol: float = 1e-8) -> float:
    """Share of answers that carry a learning signal: mean(|A_i| > atol). Healthy runs sit well above 0.5."""
    if adv.numel() == 0:
        return 0.0
    return (adv.abs() > atol).float().mean().item()


def compute_advantages(channels: torch.Tensor, priorities: torch.Tensor | Sequence[float],
                       valid: torch.Tensor, core: torch.Tensor, *, mode: str = "gdpo",
                       floor: float | None = None, eps: float = 1e-4,
                       guarded: torch.Tensor | None = None, meets_brief: torch.Tensor | None = None,
                       brief_floor: float | None = None) -> torch.Tensor:
    """The one entry point of the training loop: channels (P, G, K) -> advantages (P, G).

        gdpo: A = gdpo_advantages(channels, w)
        grpo: A = grpo_advantages(sum_k w_k * channels[..., k])   (= the verifier's scalar reward)
        then  A = _project(A, valid & ~guarded & (core > floor | meets_brief & core > brief_floor))
              (no floor term when floor is None; no exemption when brief_floor is None)

    The validity projection always runs; R10's guard (`GroupScore.guarded`) and the floor only narrow who
    may win; `brief_floor` lets an answer that meets every check of its brief (`GroupScore.meets_brief`) past
    the floor down to that lower core score (`alpha_gym.scoring.advantage_rule.answers_may_win`, the rule the
    TRL adapter reads too). One joint projection (not validity then floor) so no re-zeroing can raise an
    excluded answer.
    """
    if mode == "gdpo":
        adv = gdpo_advantages(channels, priorities, eps=eps)
    elif mode == "grpo":
        w = torch.as_tensor(priorities, dtype=channels.dtype, device=channels.device)
        adv = grpo_advantages((channels * w).sum(-1), eps=eps)
    else:
        raise ValueError(f"mode must be 'gdpo' or 'grpo', got {mode!r}")
    no_guard = torch.zeros_like(valid, dtype=torch.bool)
    may_win = answers_may_win(_host(valid.to(torch.bool)), _host(no_guard if guarded is None else guarded.to(torch.bool)),
                              _host(core), None if meets_brief is None else _host(meets_brief.to(torch.bool)),
                              floor=floor, brief_floor=brief_floor)
    return _project(adv, torch.from_numpy(np.ascontiguousarray(may_win)))


def _host(x: torch.Tensor) -> np.ndarray:
    """A tensor for the numpy rule (the env imports no torch); numpy has no bfloat16, so a half core goes as float32."""
    if x.dtype in (torch.bfloat16, torch.float16):
        x = x.float()
    return x.detach().cpu().numpy()
