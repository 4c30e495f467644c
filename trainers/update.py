"""One policy update, for the training loop (`trainers.loop`, steps 5 and 7) and the RL mutator (`trainers.evolve_rl`).

    batch = Batch.of(groups, tokenizer.pad_token_id)          # each group: one prompt's answers, as sampled
    stats = policy_update(policy, optimizer, params, config, batch, advantages, epsilon_high=eps, zeta=zeta,
                          passes=config.num_iterations, minibatches=config.steps_per_generation, learning_rate=lr)

What a loss is comes from its row of `trainers.config.LOSS_TABLE`: the options handed to its formula
(`loss_options`), how a group's loss is scaled (`group_scale`: "sequence" averaging gives each group the same
weight, "token" divides every group by the mini-batch's token count) and which metrics are its clip shares
(`LossRow.clip_metric`, `LossRow.clipped_metric`). Nothing here names a loss: a new row trains as it is.

`policy_update`, top to bottom:

    1. the reference log-probs (one no-grad pass with the adapters off) when beta != 0
    2. the high-entropy token mask (`top_entropy_quantile`) over the whole batch, folded into the advantages:
       every loss is linear in A and the KL term is never masked, so A * keep is masking the policy term
    3. `passes` x `minibatches` AdamW steps; mini-batch k takes slice k of every group's answers (as TRL splits
       its generation batch), scored against the SAMPLING policy's log-probs, so after the first step the
       ratios leave 1; per group: log-probs with gradient, REPO-R's shaping (when on), the loss, backward
    4. the statistics: the mean loss of the steps, and KL, clip share, clipped share and mean ratio weighted by
       each group's share of the batch's tokens
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from trainers.config import LOSS_TABLE, LossRow, TrainConfig
from trainers.logprobs import group_logps
from trainers.losses import policy_loss, top_entropy_mask
from trainers.repo_r import shape_advantages


@dataclass(frozen=True)
class Batch:
    """The answers of one update: every group's rows stacked, right-padded to the batch's longest answer T."""

    prompt_ids: list[torch.Tensor]   # one (1, L) per group
    sizes: list[int]                 # answers per group, in order: group i holds the next sizes[i] rows
    completion_ids: torch.Tensor     # (N, T)
    mask: torch.Tensor               # (N, T) float, 1 on answer tokens (the EOS included)
    old_logp: torch.Tensor           # (N, T) the sampling policy's log-probs
    entropy: torch.Tensor            # (N, T) its entropies

    @classmethod
    def of(cls, groups, pad_id: int) -> "Batch":
        """From groups with prompt_ids, completion_ids, mask, old_logp and entropy (`trainers.rollout.Group`)."""
        T = max(g.completion_ids.shape[1] for g in groups)

        def stacked(field, value):
            return torch.cat([F.pad(getattr(g, field), (0, T - getattr(g, field).shape[1]), value=value)
                              for g in groups])

        return cls([g.prompt_ids for g in groups], [g.completion_ids.shape[0] for g in groups],
                   stacked("completion_ids", pad_id), stacked("mask", 0.0), stacked("old_logp", 0.0),
                   stacked("entropy", 0.0))

    def rows(self, minibatches: int = 1) -> list[list[torch.Tensor]]:
        """[mini-batch k][group i]: the batch rows of slice k of group i's answers."""
        starts = np.cumsum([0, *self.sizes[:-1]])
        split = [np.array_split(np.arange(n), minibatches) for n in self.sizes]
        return [[torch.as_tensor(s + part[k], device=self.mask.device) for s, part in zip(starts, split)]
                for k in range(minibatches)]

    def mean_entropy(self) -> float:
        """The sampling policy's mean token entropy: what the entropy controllers read."""
        return ((self.entropy * self.mask).sum() / self.mask.sum()).item()


def lengths(mask: torch.Tensor) -> list[int]:
    """Each answer's length (its mask's sum, EOS included): the log-prob passes stop there."""
    return [int(n) for n in mask.sum(-1).tolist()]


def loss_options(config: TrainConfig, row: LossRow, epsilon_high: float, n_tokens: torch.Tensor) -> dict:
    """The keyword options of the row's formula: beta and the options it reads (epsilon_high as this update
    uses it), and for token averaging the mini-batch's token count (every group divides by it)."""
    kw = {"beta": config.beta}
    for name in row.options:
        kw[name] = epsilon_high if name == "epsilon_high" else getattr(config, name)
    if row.averaging == "token":
        kw["num_items_in_batch"] = n_tokens
    return kw


def group_scale(row: LossRow, n_groups: int) -> float:
    """What each group's loss is multiplied by: a sequence-averaged loss is a mean over the groups' means,
    a token-averaged one is already divided by the mini-batch's tokens."""
    return 1.0 / n_groups if row.averaging == "sequence" else 1.0


def reference_logps(policy, batch: Batch, temperature: float) -> torch.Tensor:
    """(N, T) log-probs of the reference policy: the base model, adapters off, no gradient."""
    out = []
    with torch.no_grad(), policy.disable_adapter():
        for prompt, rows in zip(batch.prompt_ids, batch.rows()[0]):
            out.append(group_logps(policy, prompt, batch.completion_ids[rows], temperature,
                                   lengths=lengths(batch.mask[rows]))[0])
    return torch.cat(out)


def policy_update(policy, optimizer, params, config: TrainConfig, batch: Batch, advantages: torch.Tensor, *,
                  epsilon_high: float, zeta: float = 0.0, passes: int = 1, minibatches: int = 1,
                  learning_rate: Callable[[int], float] | None = None) -> dict:
    """`passes` x `minibatches` AdamW steps of `config.loss_type` on the batch; advantages (N,), one per answer.

    epsilon_high: as this update uses it (the config's resolved value, or ADAPO's); zeta: REPO-R's (used when
    config.repo_r); learning_rate(j): the rate of the update's j-th optimizer step (None: leave the optimizer's).
    Returns {"loss", "kl", "clip", "clipped", "ratio", "learning_rate"} (see the module's step 4).
    """
    row = LOSS_TABLE[config.loss_type]
    # 1. the reference: the base model, adapters off
    ref_logp = reference_logps(policy, batch, config.temperature) if config.beta != 0.0 else None
    # 2. the high-entropy mask over the whole batch, folded into per-token advantages
    keep = top_entropy_mask(batch.entropy, batch.mask, config.top_entropy_quantile)
    token_adv = advantages.to(batch.mask.device)[:, None] * keep.to(advantages.dtype)   # (N, T)

    # 3. passes x mini-batches, one AdamW step each
    n_tokens, steps = batch.mask.sum().item(), passes * minibatches
    scale = group_scale(row, len(batch.sizes))
    stats = {"loss": 0.0, "kl": 0.0, "clip": 0.0, "clipped": 0.0, "ratio": 0.0,
             "learning_rate": optimizer.param_groups[0]["lr"]}
    for it in range(passes):
        for k, groups in enumerate(batch.rows(minibatches)):
            if learning_rate is not None:
                stats["learning_rate"] = learning_rate(it * minibatches + k)
                for group in optimizer.param_groups:
                    group["lr"] = stats["learning_rate"]
            kw = loss_options(config, row, epsilon_high, batch.mask[torch.cat(groups)].sum())
            optimizer.zero_grad(set_to_none=True)
            for prompt, rows in zip(batch.prompt_ids, groups):
                mask = batch.mask[rows]
                logp, _ = group_logps(policy, prompt, batch.completion_ids[rows], config.temperature,
                                      lengths=lengths(mask))
                adv = shape_advantages(token_adv[rows], logp.detach(), zeta) if config.repo_r else token_adv[rows]
                loss, m = policy_loss(config.loss_type, logp, batch.old_logp[rows], adv, mask,
                                      ref_logp=None if ref_logp is None else ref_logp[rows], **kw)
                (loss * scale).backward()
                # 4. the statistics, each group weighted by its share of the batch's tokens
                share = mask.sum().item() / n_tokens / passes
                stats["loss"] += loss.item() * scale / steps
                stats["kl"] += m.get("kl", 0.0) * share
                stats["clip"] += m[row.clip_metric] * share
                stats["clipped"] += m[row.clipped_metric] * share
                stats["ratio"] += m["ratio/mean"] * share
            if config.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
    return stats
