"""The slow, plain reference implementations the training loop's fast paths are held to (as tests/test_ops.py
holds the kernels' references). None of them runs in the product; each was once a `TrainConfig` switch.

    unshared_logps         prompt + answer run as G full sequences (was share_prompt_cache=False)
    padded_logps           the prompt shared, every answer run to the longest (was trim_padding=False)
    per_prompt_groups      one prompt's group at a time with transformers' `generate` and its own cache,
                           every row run to the longest answer (was batch_generation=False)
    recomputing_sampler    a sampler whose old log-probs and entropies come from one more no-grad pass over
                           the sampled answers, not from the sampler's logits (was sampler_logps=False)

`trainers.logprobs.group_logps` must give `unshared_logps`' and `padded_logps`' numbers (log-probs,
entropies, every loss's adapter gradients) and `trainers.rollout.sample_groups` must pick
`per_prompt_groups`' tokens at a near-zero temperature (tests/test_shared_prompt.py); a training step with
`recomputing_sampler` or `padded_logps` must log the product's step (tests/test_training.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def unshared_logps(model, prompt_ids: torch.Tensor, completion_ids: torch.Tensor, temperature: float,
                   with_entropy: bool = False, lengths=None):
    """Per-token log-probs (G, T) and entropies of G answers, each run as prompt + answer (no cache shared).
    The logits at positions L-1 .. L+T-2 predict answer tokens 0 .. T-1. `lengths` is ignored: every answer
    runs to T (what lies after an answer's end is masked by the caller)."""
    G, T = completion_ids.shape
    full = torch.cat([prompt_ids.expand(G, -1), completion_ids[:, :-1]], dim=1)
    logits = model(full, use_cache=False, logits_to_keep=T).logits
    return _logps(logits, completion_ids, temperature, with_entropy)


def padded_logps(model, prompt_ids: torch.Tensor, completion_ids: torch.Tensor, temperature: float,
                 with_entropy: bool = False, lengths=None):
    """The prompt run once, its KV cache repeated for the G answers, every answer run to T (`lengths` ignored)."""
    from trainers.logprobs import prompt_cache
    from trainers.rollout import cache_arg
    G, T = completion_ids.shape
    L = prompt_ids.shape[1]
    cache, head = prompt_cache(model, prompt_ids, G, L)          # head predicts answer token 0
    logits = head.expand(G, -1, -1)
    if T > 1:
        positions = torch.arange(L, L + T - 1, device=prompt_ids.device).expand(G, -1)
        rest = model(completion_ids[:, :-1], **cache_arg(model, cache), use_cache=True,
                     position_ids=positions).logits
        logits = torch.cat([logits, rest], dim=1)
    return _logps(logits, completion_ids, temperature, with_entropy)


def _logps(logits, completion_ids, temperature, with_entropy):
    G, T = completion_ids.shape
    logits = logits.float() / temperature
    logp = -F.cross_entropy(logits.reshape(G * T, -1), completion_ids.reshape(-1), reduction="none").view(G, T)
    entropy = None
    if with_entropy:
        logp_all = torch.log_softmax(logits, dim=-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@torch.no_grad()
def per_prompt_groups(model, tokenizer, prompts, config, eos_ids: list[int]):
    """`config.num_generations` answers to each prompt, one prompt at a time, by transformers' `generate` with
    its own cache (no padding, nothing preallocated, every row run to the group's longest answer): a list of
    (completion ids (G, T), mask (G, T), texts)."""
    from trainers.rollout import answer_mask
    out = []
    for prompt in prompts:
        G, L = config.num_generations, prompt.shape[1]
        gen = model.generate(input_ids=prompt.repeat_interleave(G, 0), attention_mask=torch.ones_like(prompt).repeat(G, 1),
                             do_sample=True, temperature=config.temperature, top_k=0, top_p=1.0,
                             max_new_tokens=config.max_completion_length, eos_token_id=eos_ids,
                             pad_token_id=tokenizer.pad_token_id)
        completion = gen[:, L:]
        mask, texts = answer_mask(completion, eos_ids, tokenizer)
        out.append((completion, mask, texts))
    return out


def recompute_logps(model, prompt_ids: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, temperature: float):
    """The old log-probs and entropies of one sampled group by one more no-grad pass (the product's
    `group_logps`, each answer to its own end), as the loop computed them before the sampler kept its own."""
    from trainers.logprobs import group_logps
    with torch.no_grad():
        return group_logps(model, prompt_ids, ids, temperature, with_entropy=True,
                           lengths=[int(n) for n in mask.sum(-1).tolist()])


def recomputing_sampler(sampler):
    """A `sample_groups` whose log-probs and entropies come from `recompute_logps`, not from the sampling pass."""
    def sample_groups(model, tokenizer, prompts, config, eos_ids, **kw):
        groups = sampler(model, tokenizer, prompts, config, eos_ids, **kw)
        return [(ids, mask, texts, *recompute_logps(model, p, ids, mask, config.temperature))
                for p, (ids, mask, texts, *_) in zip(prompts, groups)]
    return sample_groups
