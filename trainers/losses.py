"""Policy losses for group RL on completion tokens: GRPO, DAPO, CISPO, the k3 KL and top-entropy masking.

Inputs, B sequences of T completion tokens:
    logp      (B, T)  log-prob of each sampled token under the current policy (carries the gradient)
    old_logp  (B, T)  the same under the sampling policy (no gradient)
    adv       (B,) or (B, T)  advantages; (B, T) when REPO-R shaped them per token
    mask      (B, T)  1 for completion tokens, 0 for padding (bool or float)
    ref_logp  (B, T)  optional, reference policy, for the KL term (beta > 0)
    entropy   (B, T)  optional, per-token entropy, for `top_entropy_quantile < 1`

Each loss follows TRL 1.16 `GRPOTrainer._compute_loss` for one process, no gradient accumulation,
`importance_sampling_level="token"`, `delta=None` unless given:
    per_token = policy term, times the high-entropy mask (when used), plus beta * KL (never entropy-masked)
    then averaged with `mask`: per sequence then over sequences (grpo), or over all tokens (dapo, cispo).
    KL = k3, times the (differentiable) ratio r when `use_bias_correction_kl` (TRL 1.16's default: True).
Option names and defaults follow TRL's GRPOConfig: epsilon, epsilon_high, beta, delta,
top_entropy_quantile, use_bias_correction_kl. The one deliberate difference is cispo's epsilon_high
(see `cispo_loss`).
"""

from __future__ import annotations

import torch

from trainers.config import EPSILON_HIGH, LOSS_TABLE

__all__ = ["kl_penalty", "top_entropy_mask", "grpo_loss", "dapo_loss", "cispo_loss", "loss_function",
           "policy_loss", "LOSSES"]


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || pi_ref) per token, as TRL: exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """Keep the top-`quantile` share of completion tokens by entropy (TRL `top_entropy_quantile`, rho).

        threshold = torch.quantile(entropy[mask], 1 - quantile)   (linear interpolation, whole batch)
        keep      = mask & (entropy >= threshold)

    quantile 1.0 keeps every token (TRL then builds no mask at all); 0.2 keeps the 20 % highest-entropy
    tokens of the batch (ties at the threshold are kept); 0.0 keeps only the maximum. Returns bool (B, T).
    """
    mask = mask.to(torch.bool)
    if quantile >= 1.0:
        return mask
    values = entropy[mask].float()
    if values.numel() == 0:
        return torch.zeros_like(mask)
    threshold = torch.quantile(values, 1.0 - quantile)
    return (entropy >= threshold) & mask


def _prepare(logp, adv, mask, entropy, top_entropy_quantile):
    """(B,) advantages -> (B, 1); mask -> float; high-entropy mask or None (quantile 1.0)."""
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
    mask = mask.to(logp.dtype)
    keep = None
    if top_entropy_quantile < 1.0:
        if entropy is None:
            raise ValueError("top_entropy_quantile < 1 needs the per-token entropy")
        keep = top_entropy_mask(entropy, mask, top_entropy_quantile).to(logp.dtype)
    return adv, mask, keep


def _finish(per_token, logp, old_logp, keep, beta, ref_logp, use_bias_correction_kl):
    """TRL order: policy term * entropy mask, then + beta * KL on every completion token.

        KL_it = k3(logp_it, ref_it) * (r_it if use_bias_correction_kl else 1)

    The correction (DeepSeek-V3.2) makes the KL gradient the unbiased reverse-KL gradient for tokens
    sampled from the old policy; r keeps its gradient, so it changes the update even where r = 1.
    """
    if keep is not None:
        per_token = per_token * keep
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs ref_logp")
        kl = kl_penalty(logp, ref_logp)
        if use_bias_correction_kl:
            kl = kl * torch.exp(logp - old_logp)
        per_token = per_token + beta * kl
    return per_token


def _seq_mean(x, mask):
    """mean_i ( sum_t x_it m_it / max(1, sum_t m_it) ): each sequence weighs the same."""
    return ((x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def _token_mean(x, mask, num_items_in_batch=None):
    """sum_it x_it m_it / N, N = number of completion tokens (or `num_items_in_batch`): each token weighs the same."""
    n = mask.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch, dtype=x.dtype,
                                                                       device=x.device)
    return (x * mask).sum() / n.clamp(min=1.0)


def _clipped_surrogate(logp, old_logp, adv, eps_low, eps_high, delta):
    """-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), r = exp(logp - old_logp); `delta` caps r first (INTELLECT-2)."""
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    return -torch.min(ratio * adv, clipped * adv)


def grpo_loss(logp, old_logp, adv, mask, *, epsilon=0.2, epsilon_high=None, beta=0.0, ref_logp=None,
              entropy=None, top_entropy_quantile=1.0, delta=None, use_bias_correction_kl=True):
    """GRPO (TRL `loss_type="grpo"`): clipped surrogate, averaged per sequence, then over sequences.

        l_it = -min(r_it A_i, clip(r_it, 1 - eps, 1 + eps_high) A_i) + beta * KL_it
        L    = mean_i ( sum_t l_it m_it / sum_t m_it )

    epsilon_high defaults to epsilon (symmetric), as in TRL. Short answers weigh more per token.
    """
    adv, mask, keep = _prepare(logp, adv, mask, entropy, top_entropy_quantile)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    per_token = _clipped_surrogate(logp, old_logp, adv, epsilon, eps_high, delta)
    return _seq_mean(_finish(per_token, logp, old_logp, keep, beta, ref_logp, use_bias_correction_kl), mask)


def dapo_loss(logp, old_logp, adv, mask, *, epsilon=0.2, epsilon_high=EPSILON_HIGH["dapo"], beta=0.0,
              ref_logp=None, entropy=None, top_entropy_quantile=1.0, delta=None, num_items_in_batch=None,
              use_bias_correction_kl=True):
    """DAPO (TRL `loss_type="dapo"`): asymmetric clip ("clip-higher"), token-level averaging.

        l_it = -min(r_it A_i, clip(r_it, 1 - eps, 1 + eps_high) A_i) + beta * KL_it
        L    = sum_it l_it m_it / N

    TRL 1.16 sets N = `num_items_in_batch`, the completion tokens of the whole generation batch (all
    processes, all accumulation steps), so each micro-batch is divided by the global count. With one
    process and one micro-batch N = sum(mask), the default here; pass `num_items_in_batch` to split a
    batch into micro-batches whose losses add up to the full-batch loss.
    """
    adv, mask, keep = _prepare(logp, adv, mask, entropy, top_entropy_quantile)
    eps_high = epsilon if epsilon_high is None else epsilon_high
    per_token = _clipped_surrogate(logp, old_logp, adv, epsilon, eps_high, delta)
    per_token = _finish(per_token, logp, old_logp, keep, beta, ref_logp, use_bias_correction_kl)
    return _token_mean(per_token, mask, num_items_in_batch)


def cispo_loss(logp, old_logp, adv, mask, *, epsilon_high=EPSILON_HIGH["cispo"], beta=0.0, ref_logp=None,
               entropy=None, top_entropy_quantile=1.0, num_items_in_batch=None, use_bias_correction_kl=True):
    """CISPO (MiniMax-M1): cap the importance weight, keep every token in the gradient; token averaging.

        w_it = stopgrad(min(r_it, 1 + epsilon_high))
        l_it = -w_it * A_i * logp_it + beta * KL_it
        L    = sum_it l_it m_it / N                  (N as in `dapo_loss`)

    The gradient flows only through logp: d l / d logp = -w A. No token is switched off when its ratio
    leaves a band, which is what keeps the few "fork" tokens learning (Part 3 section 4). The loss value
    is -w A logp, not a ratio surrogate, so it is not comparable across loss types.

    TRL mapping, the trap: TRL's `loss_type="cispo"` computes `clamp(r, max=epsilon_high)`, an ABSOLUTE
    cap (ScaleRL's eps_max, docs recommend 5.0), while `epsilon_high` here is the margin over 1 (as in
    the DAPO clip and MiniMax-M1). Ours `epsilon_high = e` equals TRL `epsilon_high = 1 + e`; the
    reference's cap 1.2 is ours 0.2, TRL's 1.2. TRL's `epsilon_high` also defaults to `epsilon` (0.2):
    left unset, TRL caps the weight of nearly every token (r ~ 1) at 0.2, a silent ~5x smaller step,
    and reports nearly every positive-advantage token as clipped. Always set it explicitly.
    """
    adv, mask, keep = _prepare(logp, adv, mask, entropy, top_entropy_quantile)
    weight = torch.clamp(torch.exp(logp - old_logp), max=1.0 + epsilon_high).detach()
    per_token = -weight * adv * logp
    per_token = _finish(per_token, logp, old_logp, keep, beta, ref_logp, use_bias_correction_kl)
    return _token_mean(per_token, mask, num_items_in_batch)


def loss_function(name: str):
    """The formula of the loss `name`: the function of this module its row of `LOSS_TABLE` names."""
    if name not in LOSS_TABLE:
        raise ValueError(f"unknown loss {name!r}; choose from {sorted(LOSS_TABLE)}")
    formula = globals().get(LOSS_TABLE[name].formula)
    if not callable(formula):
        raise ValueError(f"the row of loss {name!r} names the formula {LOSS_TABLE[name].formula!r}, which "
                         "trainers/losses.py does not define")
    return formula


LOSSES = {name: loss_function(name) for name in LOSS_TABLE}  # name -> formula, as the table names them


@torch.no_grad()
def _metrics(name, logp, old_logp, adv, mask, kw, ref_logp, entropy):
    """Telemetry with TRL's metric names (`LossRow.metrics`); token shares are masked means over completion tokens."""
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    share = lambda b: _token_mean(b.to(logp.dtype), mask).item()  # noqa: E731
    out = {"ratio/mean": _token_mean(ratio, mask).item()}
    row = LOSS_TABLE[name]
    eps_high = kw.get("epsilon_high", row.epsilon_high)
    if row.clip == "cap":
        cap = 1.0 + eps_high
        out["cispo_clip_ratio"] = share((ratio > cap) & (adv > 0))  # TRL counts A > 0 only
        out["clip_ratio/capped"] = share(ratio > cap)  # any sign: the cap acts on both
    else:  # a band
        eps_low = kw.get("epsilon", 0.2)
        eps_high = eps_low if eps_high is None else eps_high
        low, high = (ratio < 1 - eps_low) & (adv < 0), (ratio > 1 + eps_high) & (adv > 0)
        out.update({"clip_ratio/low_mean": share(low), "clip_ratio/high_mean": share(high),
                    "clip_ratio/region_mean": share(low | high)})
    if ref_logp is not None:  # as TRL logs it: with the ratio when use_bias_correction_kl
        kl = kl_penalty(logp, ref_logp) * (ratio if kw.get("use_bias_correction_kl", True) else 1.0)
        out["kl"] = _token_mean(kl, mask).item()
    if entropy is not None:
        out["entropy"] = _token_mean(entropy, mask).item()
    return out


def policy_loss(name, logp, old_logp, adv, mask, *, ref_logp=None, entropy=None, **kw):
    """The loss of `LOSS_TABLE[name]` (`grpo_loss`, `dapo_loss`, `cispo_loss`, ...); returns (loss, metrics).

    kw are the chosen loss's options (epsilon, epsilon_high, beta, top_entropy_quantile, ...).
    metrics (`LossRow.metrics`): "ratio/mean"; a band (grpo, dapo) "clip_ratio/{low,high,region}_mean" (TRL's
    names: low = r < 1 - eps with A < 0, high = r > 1 + eps_high with A > 0); a cap (cispo) "cispo_clip_ratio"
    (r > cap with A > 0, TRL's definition) and "clip_ratio/capped" (r > cap, any A); "kl" and "entropy" when given.
    """
    loss = loss_function(name)(logp, old_logp, adv, mask, ref_logp=ref_logp, entropy=entropy, **kw)
    return loss, _metrics(name, logp, old_logp, adv, mask, kw, ref_logp, entropy)
