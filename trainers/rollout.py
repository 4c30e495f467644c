"""Rollout: a policy's answers to chat-templated prompts, sampled as one batch, with their log-probs.

    ids = prompt_ids(tokenizer, brief.prompt(), device)          # the one chat template (`chat_prompt`)
    groups = sample_groups(model, tokenizer, [ids, ...], sampling, end_token_ids(model, tokenizer))

`sample_groups` serves the training loop (`trainers.loop`, a group per prompt) and the best-of-N control
(`trainers.compare.arms.best_of_n`); `generate_answers` (greedy probe and holdout answers, the difficulty filter, SFT's
probe, `alpha-gym eval --model`) templates its prompts with the same `chat_prompt`.

The sampler is plain multinomial sampling at the config's temperature (top_k=0, top_p=1). The step's
prompts run as one left-padded batch: decoding a token reads every weight once however many rows it
serves, so one batch of 48 rows costs about half of 4 batches of 12 on a CPU (BENCHMARKS.md, issue 28).
Each prompt but its last token is cached once and repeated for its answers, in preallocated room
(`RoomyLayer`: the stock layer concatenates the whole cache for every token). An answer that has written
its EOS leaves the batch (`drop_finished`, our decode loop); the sampled tokens' log-probs and entropies
are kept from the logits the sampler computed anyway (the old log-probs of the loss).
The slower reference paths these replaced (one prompt at a time with transformers' own cache, a
recomputed old-log-prob pass) live in tests/oracles.py, which the tests compare this sampler against.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import torch


@dataclass
class Group:
    """The answers to one prompt: token ids (G, T) right-padded, mask (G, T) incl. the EOS token, texts, and the
    sampling policy's log-probs and entropies of the answer tokens (0 after each answer's end)."""

    brief_id: str
    prompt_ids: torch.Tensor        # (1, L)
    completion_ids: torch.Tensor    # (G, T)
    mask: torch.Tensor              # (G, T) float, 1 on answer tokens (the first EOS included)
    texts: list[str]
    old_logp: torch.Tensor          # (G, T) the sampling policy's log-probs, from the sampler's logits
    entropy: torch.Tensor           # (G, T) its entropies, likewise


# ------------------------------------------------------------------------------------ the prompt
def chat_prompt(tokenizer, text: str) -> str:
    """The brief as a one-turn chat with the assistant's header appended: the one chat template of every
    local model (loop, best-of-N, SFT probe, eval, difficulty filter).

    A tokenizer without a chat template (a base model, a tiny test model) gets the plain text and a newline:
    the answer starts on the next line, as a base model continues a document. (The loop used to fail there
    while the greedy paths fell back; one rule now. An endpoint applies its own template server-side.)
    """
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    return text + "\n"


def prompt_ids(tokenizer, text: str, device) -> torch.Tensor:
    """The chat-templated prompt (`chat_prompt`) as (1, L) ids."""
    return tokenizer(chat_prompt(tokenizer, text), add_special_tokens=False, return_tensors="pt").input_ids.to(device)


def end_token_ids(model, tokenizer) -> list[int]:
    """Every id that ends an answer: the tokenizer's EOS and the model's (an end-of-turn token), as TRL."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return sorted({tokenizer.eos_token_id, *ids} - {None})


# ------------------------------------------------------------------------------------ one answer a prompt
@torch.no_grad()
def generate_answers(model, tokenizer, prompts: Sequence[str], n: int = 1, temperature: float = 0.0,
                     max_new_tokens: int = 128, batch_size: int = 8, seed: int = 0) -> list[list[str]]:
    """`n` answers per prompt. temperature 0 -> greedy (then n is 1). Left-padded batches; deterministic for a seed.

    The probe and holdout answers (greedy), the difficulty filter (sampled), SFT's probe and `alpha-gym eval
    --model` answer this way: transformers' `generate` with the model's own generation settings, prompts
    templated by `chat_prompt` as the loop's are. It stays beside `sample_groups` rather than on it: the
    kept comparisons' probe answers and filtered briefs were drawn by it, and another decoder (or batching)
    would draw them differently."""
    greedy = temperature <= 0
    n = 1 if greedy else n
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out: list[list[str]] = []
    try:
        texts = [chat_prompt(tokenizer, p) for p in prompts]
        for start in range(0, len(texts), batch_size):
            chunk = texts[start:start + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            torch.manual_seed(seed + start)
            gen = model.generate(**enc, do_sample=not greedy, temperature=temperature if not greedy else None,
                                 top_p=None, top_k=None, max_new_tokens=max_new_tokens, num_return_sequences=n,
                                 pad_token_id=tokenizer.pad_token_id)
            completions = tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            for i in range(len(chunk)):
                out.append(completions[i * n:(i + 1) * n])
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return out


# ------------------------------------------------------------------------------------ the KV cache
def cache_arg(model, cache) -> dict:
    """The KV cache as the model's forward names it: `cache` from transformers 5.2x on, `past_key_values`
    before (an older transformers ignores `cache=` silently through **kwargs and leaves the cache empty)."""
    return {_cache_kwarg(type(model.get_base_model() if hasattr(model, "get_base_model") else model)): cache}


@lru_cache(maxsize=None)
def _cache_kwarg(model_class) -> str:
    import inspect
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


# ------------------------------------------------------------------------------------ the sampler
@torch.no_grad()
def sample_groups(model, tokenizer, prompts: Sequence[torch.Tensor], config, eos_ids: list[int],
                  with_logps: bool = False, drop_finished: bool = True):
    """`config.num_generations` answers to each prompt (1, L_i), all prompts in one batch: a list of
    (completion ids (G, T), mask (G, T), texts), one per prompt; with_logps adds (log-probs (G, T),
    entropies (G, T)) of the sampled tokens at `config.temperature`, from the logits the sampler computed:
    what `trainers.logprobs.group_logps` computes for the same answers, to float rounding.

    config: anything with num_generations, temperature and max_completion_length (a TrainConfig, or
    best-of-N's `Sampling`). Plain multinomial sampling (top_k=0, top_p=1: transformers' default top_k=50
    would sample from another distribution than the one the loss scores). Every row stops at its own first
    EOS and, with `drop_finished`, leaves the batch (`_decode`); the batch stops when all have (answers are
    padded after their EOS and masked). drop_finished=False: transformers' `generate` runs every row to the
    longest answer, which is how best-of-N's kept control drew its samples (a rerun draws them again draw
    for draw; the shrinking batch draws other random numbers once a row has left).
    """
    G, P = config.num_generations, len(prompts)
    ids, attention = _left_pad(prompts, tokenizer.pad_token_id)
    L = ids.shape[1]
    with _dora_cached(model):
        cache = _sampling_cache(model, ids, attention, G, config.max_completion_length + 1)
        if drop_finished:
            completion, logp, entropy = _decode(model, ids.repeat_interleave(G, 0), attention.repeat_interleave(G, 0),
                                                cache, config, eos_ids, tokenizer.pad_token_id, with_logps)
        else:
            out = model.generate(input_ids=ids.repeat_interleave(G, 0),
                                 attention_mask=attention.repeat_interleave(G, 0), **cache_arg(model, cache),
                                 do_sample=True, temperature=config.temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=config.max_completion_length, eos_token_id=eos_ids,
                                 pad_token_id=tokenizer.pad_token_id, return_dict_in_generate=True,
                                 output_logits=with_logps)
            completion = out.sequences[:, L:]
            if with_logps:
                logp, entropy = _sampled_logps(out.logits, completion, config.temperature)
    # The answer runs up to and including its first EOS (as TRL); what generate pads after it is masked.
    mask, texts = answer_mask(completion, eos_ids, tokenizer)
    groups = [(completion[k * G:(k + 1) * G], mask[k * G:(k + 1) * G], texts[k * G:(k + 1) * G]) for k in range(P)]
    if not with_logps:
        return groups
    return [(*g, logp[k * G:(k + 1) * G], entropy[k * G:(k + 1) * G]) for k, g in enumerate(groups)]


def answer_mask(completion: torch.Tensor, eos_ids: list[int], tokenizer) -> tuple[torch.Tensor, list[str]]:
    """The mask (B, T) of each sampled row up to and including its first EOS, and the texts before it."""
    is_eos = torch.isin(completion, torch.tensor(eos_ids, device=completion.device))
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), completion.shape[1])
    mask = (torch.arange(completion.shape[1], device=completion.device)[None] <= first[:, None]).float()
    texts = [tokenizer.decode(c[:f], skip_special_tokens=True) for c, f in zip(completion, first.tolist())]
    return mask, texts


def sample_group(model, tokenizer, prompt_ids: torch.Tensor, config, eos_ids: list[int], drop_finished: bool = True):
    """`num_generations` answers to one prompt: (completion ids (G, T), mask (G, T), texts); see `sample_groups`."""
    return sample_groups(model, tokenizer, [prompt_ids], config, eos_ids, drop_finished=drop_finished)[0]


def _left_pad(prompts: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, L) ids and attention mask of prompts (1, L_i), left-padded so that every prompt ends at column L."""
    L = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), L), pad_id, dtype=prompts[0].dtype, device=prompts[0].device)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, L - p.shape[1]:] = p[0]
        mask[i, L - p.shape[1]:] = 1
    return ids, mask


def _sampling_cache(model, ids: torch.Tensor, attention: torch.Tensor, repeats: int, room: int):
    """The KV cache of every prompt but its last token, computed once per prompt, repeated for its answers.

    Left padding: positions count real tokens only (as `generate` counts them from the attention mask),
    so a padded prompt sees the same positions as alone. The layers write new tokens into preallocated
    room: the stock DynamicLayer concatenates the whole cache for every token, about 2/3 of sampling time
    on a CPU at 400-token prompts.
    """
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    head = ids[:, :-1]
    if bool(attention.all()):  # no padding: the plain call (as the per-prompt sampler always made)
        model(head, **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
    else:
        positions = (attention.long().cumsum(-1) - 1).clamp(min=0)[:, :-1]
        model(head, attention_mask=attention[:, :-1], position_ids=positions, **cache_arg(model, cache),
              use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(repeats)
    roomy = _roomy_layer_class()
    cache.layers = [roomy(layer.keys, layer.values, room) for layer in cache.layers]
    return cache


@lru_cache(maxsize=None)
def _roomy_layer_class():
    """The RoomyLayer class, built on first use (this module imports transformers lazily)."""
    from transformers.cache_utils import DynamicLayer

    class RoomyLayer(DynamicLayer):
        """A DynamicLayer with preallocated room: `update` writes in place instead of concatenating.
        No-grad use only (sampling): writing into a buffer that autograd saved would break backward."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int):
            super().__init__()
            self.device, self.is_initialized = keys.device, True
            self._n = keys.shape[-2]
            self._k = keys.new_empty(*keys.shape[:-2], self._n + room, keys.shape[-1])
            self._v = values.new_empty(*values.shape[:-2], self._n + room, values.shape[-1])
            self._k[..., :self._n, :], self._v[..., :self._n, :] = keys, values
            self.keys, self.values = self._k[..., :self._n, :], self._v[..., :self._n, :]

        def update(self, key_states, value_states, *args, **kwargs):
            m = key_states.shape[-2]
            if self._n + m > self._k.shape[-2]:  # out of room (not expected): grow by concatenation
                self._k = torch.cat([self._k[..., :self._n, :], key_states], dim=-2)
                self._v = torch.cat([self._v[..., :self._n, :], value_states], dim=-2)
            else:
                self._k[..., self._n:self._n + m, :] = key_states
                self._v[..., self._n:self._n + m, :] = value_states
            self._n += m
            self.keys, self.values = self._k[..., :self._n, :], self._v[..., :self._n, :]
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor):
            """Keep only these rows (the answers still being written), room included."""
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[..., :self._n, :], self._v[..., :self._n, :]

    return RoomyLayer


def _sampled_logps(logits: Sequence[torch.Tensor], completion: torch.Tensor, temperature: float):
    """Log-probs and entropies (B, T) of the sampled tokens from `generate`'s raw logits, one (B, V) tensor a
    position; one position at a time keeps the log-softmax's memory at one row of the batch."""
    logp, entropy = [], []
    for t, raw in enumerate(logits):
        lp = torch.log_softmax(raw.float() / temperature, dim=-1)
        logp.append(lp.gather(-1, completion[:, t:t + 1]).squeeze(-1))
        entropy.append(-(lp.exp() * lp).sum(-1))
    return torch.stack(logp, 1), torch.stack(entropy, 1)


def _decode(model, ids: torch.Tensor, attention: torch.Tensor, cache, config, eos_ids: list[int],
            pad_id: int, with_logps: bool):
    """Sample up to max_completion_length tokens after each row of `ids` (B, L), left-padded, whose every token
    but the last is in `cache` (preallocated layers). What `generate` does at top_k=0, top_p=1, except that a
    row which has written its EOS leaves the batch: the batch shrinks as answers end, instead of running every
    row to the longest answer (the cpu preset's answers average ~25 tokens of 64). The same distribution;
    other random numbers once a row has left. Returns completion (B, T) padded after each EOS, and the
    sampled tokens' log-probs and entropies at `temperature` (0 after the EOS), or None, None."""
    B, T_max = ids.shape[0], config.max_completion_length
    completion = torch.full((B, T_max), pad_id, dtype=ids.dtype, device=ids.device)
    logp = torch.zeros(B, T_max, device=ids.device) if with_logps else None
    entropy = torch.zeros(B, T_max, device=ids.device) if with_logps else None
    eos = torch.tensor(eos_ids, device=ids.device)
    rows = torch.arange(B, device=ids.device)           # batch position -> row of the output
    position = attention.long().sum(-1, keepdim=True) - 1  # real tokens only, as generate counts them
    token, steps = ids[:, -1:], 0
    ended = torch.zeros(B, dtype=torch.bool, device=ids.device)
    for t in range(T_max):
        logits = model(token, attention_mask=attention, position_ids=position, **cache_arg(model, cache),
                       use_cache=True).logits[:, -1].float() / config.temperature
        new = torch.multinomial(torch.softmax(logits, dim=-1), 1).squeeze(1)
        new = torch.where(ended, pad_id, new)             # rows that ended but have not yet left
        completion[rows, t] = new
        if with_logps:
            lp = torch.log_softmax(logits, dim=-1)
            live = ~ended
            logp[rows[live], t] = lp[live].gather(-1, new[live, None]).squeeze(-1)
            entropy[rows[live], t] = -(lp[live].exp() * lp[live]).sum(-1)
        ended = ended | torch.isin(new, eos)
        steps = t + 1
        if bool(ended.all()):
            break
        if int(ended.sum()) * 8 >= len(rows):  # an eighth of the batch has ended: it leaves (a copy of the cache)
            keep = (~ended).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            rows, new, attention, position, ended = rows[keep], new[keep], attention[keep], position[keep], ended[keep]
        attention = torch.cat([attention, attention.new_ones(len(rows), 1)], dim=1)
        position, token = position + 1, new[:, None]
    completion = completion[:, :steps]
    if with_logps:
        logp, entropy = logp[:, :steps], entropy[:, :steps]
    return completion, logp, entropy


@contextmanager
def _dora_cached(model):
    """DoRA recomputes every layer's weight norm on each forward, i.e. per sampled token; the weights do not
    change while sampling, so let PEFT cache them (about half the sampling time), then drop the cache."""
    from peft.helpers import DoraCaching
    try:
        with DoraCaching():
            yield
    finally:
        for module in model.modules():
            if hasattr(module, "_cache_clear"):
                module._cache_clear()
