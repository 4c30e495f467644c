"""The training loop: sample answers, score them, turn scores into advantages, update the adapters.

One step, top to bottom (`train`):

    1. take `prompts_per_step` briefs (a seeded order), chat-template each prompt
    2. sample `num_generations` answers per prompt (one "group"), score each group with the verifier
    3. DAPO-refill: resample a group whose rewards have zero variance (at most `refill_rounds` rounds);
       then the step's valid answers above the archive threshold join the novelty archive (R8/R9)
    4. advantages: GDPO (or GRPO) per group, then the projection: no positive advantage for an invalid or
       motif-guarded (R10) answer, nor (optional floor) one whose core score is <= floor
    5. old log-probs and entropies: the sampler's own (`sampler_logps`); one no-grad pass with adapters off:
       the reference
    6. entropy control: REPO-R's thermostat sets zeta, or ADAPO sets epsilon_high
    7. `num_iterations` passes over the batch, each split into `steps_per_generation` mini-batches (a slice of
       every group's answers), one AdamW step per mini-batch (grpo | dapo | cispo, + beta * KL): from the second
       mini-batch on the policy is newer than the one that sampled, so the ratios leave 1
    8. one JSONL line to out_dir/log.jsonl; a checkpoint (adapters, optimizer, RNG, archive) every `save_steps`

Every group's answers share its prompt: the prompt runs through the model once and its KV cache is
repeated for the answers (sampling and every log-prob pass, gradients through the shared prompt intact).
On a CPU that is ~4x less compute than running prompt + answer for each of the 12 answers, and it gives
the same numbers (to float rounding; `share_prompt_cache=False` runs the unshared way, for tests and the
benchmark). Sampling runs the step's prompts as one left-padded batch (`batch_generation`): decoding a
token reads every weight once however many rows it serves, so one batch of 48 rows costs about half
of 4 batches of 12 on a CPU (BENCHMARKS.md, issue 28). Nothing after an answer's end is computed: an
answer that has written its EOS leaves the sampling batch (`drop_finished`), and the log-prob passes run
each answer only to its own end, in batches of similar length (`trim_padding`).

Determinism: each step reseeds torch, numpy and random from (seed, step), so a run resumed from a
checkpoint repeats the uninterrupted run's later steps exactly (same machine, same thread count).
"""

from __future__ import annotations

import json
import random
import shutil
import time
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from alpha_gym.scoring.config import CHANNELS
from alpha_gym.jsonable import json_dumps
from alpha_gym.settings import SETTINGS_FILE, claim_run_dir, dumps, refuse_other_settings, to_dict
from alpha_gym.tasks.task import render_prompt
from trainers.advantages import compute_advantages, nonzero_share
from trainers.checkpoints import CheckpointError, load_state, load_tensors
from trainers.config import COMPUTE_ONLY, OUTPUT_ONLY, RECIPE_BASE, TrainConfig, register_train_table
from trainers.losses import policy_loss, top_entropy_mask
from trainers.repo_r import AdapoController, EntropyThermostat, shape_advantages
from trainers.run_book import ARCHIVE_LOG, append_admitted, truncate_admitted

#: Every key of a log.jsonl line (channel means are "rewards/<channel>").
#: "clipped_share": share of answer tokens where the trust region acted: clipped (grpo/dapo: the ratio left
#: the band in the direction of its advantage) or capped (cispo: ratio above the cap, either sign).
LOG_FIELDS = ("step", "reward", "reward_std", *(f"rewards/{c}" for c in CHANNELS), "core", "valid_share",
              "guarded_share", "families", "archive_size", "nonzero_adv_share", "kl", "entropy", "zeta", "epsilon_high",
              "refills", "loss", "clip_ratio", "clipped_share", "ratio_mean",
              "learning_rate", "completion_length", "seconds/generation", "seconds/scoring", "seconds/update",
              "seconds/total")
#: Labels a log.jsonl line also carries: "world_model", the identity of the world model R3 used ("off": none).
LOG_LABELS = ("world_model",)


@dataclass
class Group:
    """The answers to one prompt: token ids (G, T) right-padded, mask (G, T) incl. the EOS token, texts."""

    brief_id: str
    prompt_ids: torch.Tensor        # (1, L)
    completion_ids: torch.Tensor    # (G, T)
    mask: torch.Tensor              # (G, T) float, 1 on answer tokens (the first EOS included)
    texts: list[str]
    old_logp: torch.Tensor | None = None   # (G, T) the sampling policy's log-probs, when the sampler kept them
    entropy: torch.Tensor | None = None    # (G, T) its entropies, likewise


# ------------------------------------------------------------------------------------------- the loop
def train(config: TrainConfig, verifier, briefs: Sequence | None, out_dir, model=None, steps: int = 10,
          resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train for `steps` steps (the total, counting steps done before a resume). Returns a summary dict.

    The linear learning-rate schedule decays over `steps`: resume with the same value to repeat a run.
    The summary holds the trained model under "policy" (the rest is JSON-friendly).

    model: None (built-in SmolLM2-135M-Instruct), a model folder or Hub id, or a (model, tokenizer) pair
    (a PeftModel is used as it is; a plain model gets fresh adapters from `config`).
    briefs: `Brief`s, or objects with `.id` and their own `.prompt()` (default: the 450 training briefs,
    `brief_set("train")`); prompts are rendered by the task seam (`alpha_gym.tasks.task.render_prompt`).
    The verifier's novelty archive grows during the run; it is saved with every checkpoint and restored
    on resume, so a resumed run scores exactly as the uninterrupted one.
    """
    from tqdm.auto import tqdm
    register_train_table()  # the run folder's settings.toml holds a checked [train] table
    if briefs is None:
        from alpha_gym.tasks.sets import brief_set
        briefs = brief_set("train")
    briefs = list(briefs)
    if not briefs:
        raise ValueError("train needs at least one brief")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the exact settings of the run, beside its log and in each checkpoint; a resume with other settings
    # than either is refused, naming them (settings.toml alone can be lost, and would then be rewritten)
    tables = {"verifier": to_dict(verifier.config), "train": to_dict(config)}
    ignore = tuple(f"train.{k}" for k in (*OUTPUT_ONLY, *COMPUTE_ONLY))
    if resume:
        check_checkpoint_settings(out, tables, ignore)
    claim_run_dir(out, tables, resume=resume, ignore=ignore)

    policy, tokenizer = _policy(model, config)
    policy.eval()  # no dropout anywhere: sampling, old and new log-probs come from one deterministic function
    device = next(policy.parameters()).device
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    thermostat = EntropyThermostat() if config.repo_r else None
    adapo = AdapoController(epsilon_high=config.resolved_epsilon_high) if config.adapo else None
    priorities = [verifier.config.priorities[c] for c in CHANNELS]
    eos_ids = _eos_ids(policy, tokenizer)

    start = 0
    if resume:
        ckpt = latest_checkpoint(out)
        if ckpt is None:
            raise FileNotFoundError(f"resume=True but {out} holds no checkpoint-N folder")
        start = load_checkpoint(ckpt, policy, optimizer, thermostat, adapo)
        if (ckpt / ARCHIVE_FILE).exists():
            verifier.load_archive(ckpt / ARCHIVE_FILE)
    for name in ("log.jsonl", "completions.jsonl"):  # drop lines past the restart point (or all, fresh run)
        _truncate_jsonl(out / name, start)
    truncate_admitted(out / ARCHIVE_LOG, start)  # the archive's admitted formulas, as the restored archive holds

    summary = {"out_dir": str(out), "start_step": start, "steps": steps, "refills": 0, "checkpoint": None,
               "last": None}
    bar = tqdm(range(start + 1, steps + 1), initial=start, total=steps, disable=not progress, desc="train")
    for step in bar:
        _seed_everything(config.seed, step)
        t_step = time.perf_counter()
        t = {"generation": 0.0, "scoring": 0.0}

        # 1-2. sample a group per prompt and score it
        chosen = briefs_for_step(briefs, config, step)
        prompts = [_prompt_ids(tokenizer, render_prompt(b, verifier.config.limits), device) for b in chosen]
        groups, scores = _sample_and_score(policy, tokenizer, verifier, chosen, prompts, config,
                                           eos_ids, t)

        # 3. DAPO-refill: a group whose rewards are all equal carries no learning signal; sample it again
        refills = 0
        for _ in range(config.refill_rounds):
            flat = [i for i, s in enumerate(scores) if np.ptp(s.rewards) == 0]
            if flat:
                again = _sample_and_score(policy, tokenizer, verifier, [chosen[i] for i in flat],
                                          [prompts[i] for i in flat], config, eos_ids, t)
                for i, group, score in zip(flat, *again):
                    groups[i], scores[i] = group, score
            refills += len(flat)
            if not flat:
                break
        summary["refills"] += refills
        for score in scores:  # after the whole step: groups of one step never see each other's entries
            verifier.update_archive(score)
        append_admitted(out / ARCHIVE_LOG, verifier.archive, step, scores)  # the run's own book (run_book.py)

        # 4. advantages (P, G): GDPO/GRPO, then no positive advantage for an invalid or guarded answer, sum 0
        t_update = time.perf_counter()
        channels = torch.as_tensor(np.stack([s.matrix for s in scores]))        # (P, G, K) float64
        valid = torch.as_tensor(np.stack([s.valid for s in scores]))
        guarded = torch.as_tensor(np.stack([s.guarded for s in scores]))
        core = torch.as_tensor(np.stack([s.core for s in scores]))
        adv = compute_advantages(channels, priorities, valid, core, mode=config.advantage_mode,
                                 floor=config.advantage_floor, guarded=guarded).float()

        # 5. one length for the batch; old log-probs + entropies (sampling policy) and reference log-probs
        completion_ids, mask = _pad_batch(groups, tokenizer.pad_token_id)   # (P, G, T)
        with torch.no_grad():
            if all(g.old_logp is not None for g in groups):  # the sampler's own logits (sampler_logps)
                old_logp, entropy = _pad_like(groups, "old_logp", mask), _pad_like(groups, "entropy", mask)
            else:
                old_logp, entropy = zip(*(group_logps(policy, g.prompt_ids, ids, config.temperature,
                                                      with_entropy=True, share_prompt=config.share_prompt_cache,
                                                      lengths=_lengths(config, m))
                                          for g, ids, m in zip(groups, completion_ids, mask)))
                old_logp, entropy = torch.stack(old_logp), torch.stack(entropy)
            ref_logp = None
            if config.beta != 0.0:
                with policy.disable_adapter():  # the reference is the base model: adapters off
                    ref_logp = torch.stack([group_logps(policy, g.prompt_ids, ids, config.temperature,
                                                        share_prompt=config.share_prompt_cache,
                                                        lengths=_lengths(config, m))[0]
                                            for g, ids, m in zip(groups, completion_ids, mask)])
        n_tokens = mask.sum()
        mean_entropy = ((entropy * mask).sum() / n_tokens).item()

        # 6. entropy control, once per rollout batch, from the sampling policy's entropy
        zeta = thermostat.update(mean_entropy) if thermostat else 0.0
        eps_high = adapo.update(mean_entropy) if adapo else config.resolved_epsilon_high
        # The high-entropy mask over the whole batch, folded into per-token advantages: every loss is linear
        # in A and the KL term is never masked, so A * keep is the same as masking the policy term.
        keep = top_entropy_mask(entropy.flatten(0, 1), mask.flatten(0, 1), config.top_entropy_quantile)
        token_adv = adv.to(mask.device)[..., None] * keep.view_as(mask).to(adv.dtype)    # (P, G, T)

        # 7. num_iterations passes x steps_per_generation mini-batches, one AdamW step each. A mini-batch takes
        # a slice of every group's answers (TRL splits its generation batch the same way). Every mini-batch
        # is scored against old_logp, the SAMPLING policy: after the first step the ratios leave 1.
        updates_per_step = config.num_iterations * config.steps_per_generation
        rows = [torch.as_tensor(x, device=mask.device) for x in np.array_split(np.arange(mask.shape[1]),
                                                                            config.steps_per_generation)]
        stats = {"loss": 0.0, "kl": 0.0, "clip": 0.0, "clipped": 0.0, "ratio": 0.0}
        for it in range(config.num_iterations):
            for k, r in enumerate(rows):
                update = (step - 1) * updates_per_step + it * config.steps_per_generation + k
                lr = _learning_rate(config, update, steps * updates_per_step)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                mb_mask = mask[:, r]
                kw = _loss_kwargs(config, eps_high, mb_mask.sum())
                scale = 1.0 / len(groups) if config.loss_type == "grpo" else 1.0  # grpo averages sequences;
                optimizer.zero_grad(set_to_none=True)                               # dapo/cispo divide by tokens
                for i, g in enumerate(groups):
                    logp, _ = group_logps(policy, g.prompt_ids, completion_ids[i, r], config.temperature,
                                          share_prompt=config.share_prompt_cache,
                                          lengths=_lengths(config, mb_mask[i]))
                    a = token_adv[i, r]
                    a = shape_advantages(a, logp.detach(), zeta) if config.repo_r else a
                    loss, m = policy_loss(config.loss_type, logp, old_logp[i, r], a, mb_mask[i],
                                          ref_logp=None if ref_logp is None else ref_logp[i, r], **kw)
                    (loss * scale).backward()
                    share = mb_mask[i].sum().item() / n_tokens.item() / config.num_iterations  # of the whole step
                    stats["loss"] += loss.item() * scale / updates_per_step
                    stats["kl"] += m.get("kl", 0.0) * share
                    stats["clip"] += m.get("cispo_clip_ratio", m.get("clip_ratio/region_mean", 0.0)) * share
                    stats["clipped"] += m.get("clip_ratio/capped", m.get("clip_ratio/region_mean", 0.0)) * share
                    stats["ratio"] += m["ratio/mean"] * share
                if config.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
        t_update = time.perf_counter() - t_update

        # 8. log, checkpoint
        rewards = np.concatenate([s.rewards for s in scores])
        matrix = np.concatenate([s.matrix for s in scores])
        record = {
            "step": step,
            "reward": float(rewards.mean()),
            "reward_std": float(rewards.std(ddof=1)) if rewards.size > 1 else 0.0,
            **{f"rewards/{c}": float(matrix[:, k].mean()) for k, c in enumerate(CHANNELS)},
            "core": float(np.concatenate([s.core for s in scores]).mean()),
            "valid_share": float(np.concatenate([s.valid for s in scores]).mean()),
            "guarded_share": float(np.concatenate([s.guarded for s in scores]).mean()),
            # distinct formula families (canonical form, windows bucketed) among the step's valid answers
            "families": len({ev.form for s in scores for ev, ok in zip(s.evaluated, s.valid) if ok and ev}),
            "archive_size": len(verifier.archive),
            "nonzero_adv_share": nonzero_share(adv),
            "kl": stats["kl"],
            "entropy": mean_entropy,
            "zeta": zeta,
            "epsilon_high": eps_high,
            "refills": refills,
            "loss": stats["loss"],
            "clip_ratio": stats["clip"],
            "clipped_share": stats["clipped"],
            "ratio_mean": stats["ratio"],
            "learning_rate": lr,
            "completion_length": (n_tokens / mask.shape[0] / mask.shape[1]).item(),
            "seconds/generation": t["generation"],
            "seconds/scoring": t["scoring"],
            "seconds/update": t_update,
            "seconds/total": time.perf_counter() - t_step,
            "world_model": verifier.world_model,  # what R3 used: a content hash, or "off"
        }
        if step % config.logging_steps == 0 or step == steps:
            _append_jsonl(out / "log.jsonl", record)
        if config.log_completions:
            for g, s, a in zip(groups, scores, adv):
                for text, sc, ai in zip(g.texts, s.scores, a.tolist()):
                    _append_jsonl(out / "completions.jsonl", {"step": step, "brief_id": g.brief_id, "answer": text,
                                                               "valid": sc.valid, "reason": sc.reason,
                                                               "reward": sc.reward, "advantage": ai,
                                                               "channels": sc.channels})
        if (config.save_steps and step % config.save_steps == 0) or step == steps:
            summary["checkpoint"] = str(save_checkpoint(out, step, policy, optimizer, thermostat, adapo, config,
                                                        verifier))
        if thermostat is not None:
            _write_jsonl(out / "thermostat.jsonl", thermostat.log)
        if adapo is not None:
            _write_jsonl(out / "adapo.jsonl", adapo.log)
        summary["last"] = record
        bar.set_postfix(reward=f"{record['reward']:.3f}", valid=f"{record['valid_share']:.2f}",
                        kl=f"{record['kl']:.4f}")
    summary["policy"] = policy
    return summary


# ------------------------------------------------------------------------------------ model pieces
def _policy(model, config: TrainConfig):
    from trainers.models import add_adapters, load_policy
    if isinstance(model, tuple):
        policy, tokenizer = model
        if not hasattr(policy, "disable_adapter"):  # a plain model: give it adapters
            policy = add_adapters(policy, config)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return policy, tokenizer
    return load_policy(model, config)


def _eos_ids(model, tokenizer) -> list[int]:
    """Every id that ends an answer: the tokenizer's EOS and the model's (an end-of-turn token), as TRL."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return sorted({tokenizer.eos_token_id, *ids} - {None})


def _cache_arg(model, cache) -> dict:
    """The KV cache as the model's forward names it: `cache` from transformers 5.2x on, `past_key_values`
    before (an older transformers ignores `cache=` silently through **kwargs and leaves the cache empty)."""
    return {_cache_kwarg(type(model.get_base_model() if hasattr(model, "get_base_model") else model)): cache}


@lru_cache(maxsize=None)
def _cache_kwarg(model_class) -> str:
    import inspect
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def _prompt_ids(tokenizer, text: str, device) -> torch.Tensor:
    """The chat-templated prompt (one user turn, then the assistant header), as (1, L) ids."""
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer(chat, add_special_tokens=False, return_tensors="pt").input_ids.to(device)


def _prompt_cache(model, prompt_ids: torch.Tensor, repeats: int, upto: int):
    """Run prompt_ids[:, :upto] once and repeat its KV cache `repeats` times. Returns (cache, logits of the last)."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    logits = model(prompt_ids[:, :upto], **_cache_arg(model, cache), use_cache=True, logits_to_keep=1).logits
    cache.batch_repeat_interleave(repeats)
    return cache, logits


def _left_pad(prompts: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, L) ids and attention mask of prompts (1, L_i), left-padded so that every prompt ends at column L."""
    L = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), L), pad_id, dtype=prompts[0].dtype, device=prompts[0].device)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, L - p.shape[1]:] = p[0]
        mask[i, L - p.shape[1]:] = 1
    return ids, mask


def _sampling_cache(model, ids: torch.Tensor, attention: torch.Tensor, repeats: int, room: int | None):
    """The KV cache of every prompt but its last token, computed once per prompt, repeated for its answers.

    Left padding: positions count real tokens only (as `generate` counts them from the attention mask),
    so a padded prompt sees the same positions as alone. The layers write new tokens into preallocated
    room: the stock DynamicLayer concatenates the whole cache for every token, about 2/3 of sampling time
    on a CPU at 400-token prompts. room None: the stock layers (the sampler as it was before).
    """
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    head = ids[:, :-1]
    if bool(attention.all()):  # no padding: the plain call (as the per-prompt sampler always made)
        model(head, **_cache_arg(model, cache), use_cache=True, logits_to_keep=1)
    else:
        positions = (attention.long().cumsum(-1) - 1).clamp(min=0)[:, :-1]
        model(head, attention_mask=attention[:, :-1], position_ids=positions, **_cache_arg(model, cache),
              use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(repeats)
    if room is not None:
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


@torch.no_grad()
def sample_groups(model, tokenizer, prompts: Sequence[torch.Tensor], config: TrainConfig, eos_ids: list[int],
                  preallocate: bool = True, with_logps: bool = False):
    """`num_generations` answers to each prompt (1, L_i), all prompts in one batch: a list of
    (completion ids (G, T), mask (G, T), texts), one per prompt; with_logps adds (log-probs (G, T),
    entropies (G, T)) of the sampled tokens at `temperature`, from the logits the sampler computed:
    what `group_logps` computes for the same answers, to float rounding (the batch is left-padded).

    Plain multinomial sampling at `temperature` (top_k=0, top_p=1: transformers' default top_k=50 would
    sample from a different distribution than the one the loss scores). Prompts are left-padded to one
    length; each prompt but its last token is cached once and repeated for its G answers; the decoder
    feeds the last tokens and continues. Every row stops at its own first EOS, and with `drop_finished`
    leaves the batch (`_decode`); the batch stops when all have (answers are padded after their EOS and
    masked). drop_finished off: transformers' `generate` runs every row to the longest answer.
    preallocate=False keeps transformers' own cache layers and `generate` (`batch_generation=False`
    samples that way, one prompt at a time: the sampler as it was).
    """
    G, P = config.num_generations, len(prompts)
    ids, attention = _left_pad(prompts, tokenizer.pad_token_id)
    L = ids.shape[1]
    with _dora_cached(model):
        cache = _sampling_cache(model, ids, attention, G, config.max_completion_length + 1 if preallocate else None)
        if preallocate and config.drop_finished:
            completion, logp, entropy = _decode(model, ids.repeat_interleave(G, 0), attention.repeat_interleave(G, 0),
                                                cache, config, eos_ids, tokenizer.pad_token_id, with_logps)
        else:
            out = model.generate(input_ids=ids.repeat_interleave(G, 0),
                                 attention_mask=attention.repeat_interleave(G, 0), **_cache_arg(model, cache),
                                 do_sample=True, temperature=config.temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=config.max_completion_length, eos_token_id=eos_ids,
                                 pad_token_id=tokenizer.pad_token_id, return_dict_in_generate=True,
                                 output_logits=with_logps)
            completion = out.sequences[:, L:]
            if with_logps:
                logp, entropy = _sampled_logps(out.logits, completion, config.temperature)
    # The answer runs up to and including its first EOS (as TRL); what generate pads after it is masked.
    is_eos = torch.isin(completion, torch.tensor(eos_ids, device=completion.device))
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), completion.shape[1])
    mask = (torch.arange(completion.shape[1], device=completion.device)[None] <= first[:, None]).float()
    texts = [tokenizer.decode(c[:f], skip_special_tokens=True) for c, f in zip(completion, first.tolist())]
    groups = [(completion[k * G:(k + 1) * G], mask[k * G:(k + 1) * G], texts[k * G:(k + 1) * G]) for k in range(P)]
    if not with_logps:
        return groups
    return [(*g, logp[k * G:(k + 1) * G], entropy[k * G:(k + 1) * G]) for k, g in enumerate(groups)]


def _sampled_logps(logits: Sequence[torch.Tensor], completion: torch.Tensor, temperature: float):
    """Log-probs and entropies (B, T) of the sampled tokens from `generate`'s raw logits, one (B, V) tensor a
    position; one position at a time keeps the log-softmax's memory at one row of the batch."""
    logp, entropy = [], []
    for t, raw in enumerate(logits):
        lp = torch.log_softmax(raw.float() / temperature, dim=-1)
        logp.append(lp.gather(-1, completion[:, t:t + 1]).squeeze(-1))
        entropy.append(-(lp.exp() * lp).sum(-1))
    return torch.stack(logp, 1), torch.stack(entropy, 1)


def _decode(model, ids: torch.Tensor, attention: torch.Tensor, cache, config: TrainConfig, eos_ids: list[int],
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
        logits = model(token, attention_mask=attention, position_ids=position, **_cache_arg(model, cache),
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


def sample_group(model, tokenizer, prompt_ids: torch.Tensor, config: TrainConfig, eos_ids: list[int]):
    """`num_generations` answers to one prompt: (completion ids (G, T), mask (G, T), texts); see `sample_groups`."""
    return sample_groups(model, tokenizer, [prompt_ids], config, eos_ids)[0]


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


def _sample_and_score(policy, tokenizer, verifier, briefs, prompts, config, eos_ids, t):
    """Sample a group per prompt (all prompts in one batch, or, with `batch_generation` off, one prompt at a
    time with transformers' own cache: the sampler as it was) and score each group with its brief.
    Returns (groups, scores)."""
    t0 = time.perf_counter()
    kw = {"with_logps": config.sampler_logps}
    if config.batch_generation:
        sampled = sample_groups(policy, tokenizer, prompts, config, eos_ids, **kw)
    else:
        sampled = [sample_groups(policy, tokenizer, [p], config, eos_ids, preallocate=False, **kw)[0] for p in prompts]
    t1 = time.perf_counter()
    scores = [verifier.score_group(s[2], brief=b) for s, b in zip(sampled, briefs)]
    t["generation"] += t1 - t0
    t["scoring"] += time.perf_counter() - t1
    groups = [Group(b.id, p, *s) for b, p, s in zip(briefs, prompts, sampled)]
    return groups, scores


def group_logps(model, prompt_ids: torch.Tensor, completion_ids: torch.Tensor, temperature: float,
                with_entropy: bool = False, share_prompt: bool = True, lengths: Sequence[int] | None = None):
    """Per-token log-probs (G, T) of G answers to one prompt at `temperature`, and entropies when asked.

        logp[g, t] = log softmax(logits / temperature)[answer token t]   (TRL scores at the same temperature)

    share_prompt (default): the prompt runs once; its cache is repeated for the G answers, which continue
    at positions L, L+1, ... Answers are right-padded, so no real token attends to padding (causal
    attention) and no attention mask is needed. Gradients flow through the shared prompt too (the adapters
    act on it; the repeat sums the G answers' gradients back onto it). share_prompt=False runs prompt +
    answer as G full sequences: the same numbers to float rounding, at ~4x the compute for long prompts.

    lengths (with share_prompt): answer g ends after lengths[g] tokens; nothing after its end is computed
    (`_trimmed_logps`) and its log-probs and entropies there are 0. Without, every answer runs to T.
    """
    G, T = completion_ids.shape
    L = prompt_ids.shape[1]
    if share_prompt and lengths is not None:
        return _trimmed_logps(model, prompt_ids, completion_ids, temperature, with_entropy, lengths)
    if share_prompt:
        cache, head = _prompt_cache(model, prompt_ids, G, L)          # head predicts answer token 0
        logits = head.expand(G, -1, -1)
        if T > 1:
            positions = torch.arange(L, L + T - 1, device=prompt_ids.device).expand(G, -1)
            rest = model(completion_ids[:, :-1], **_cache_arg(model, cache), use_cache=True,
                         position_ids=positions).logits
            logits = torch.cat([logits, rest], dim=1)
    else:  # the logits at positions L-1 .. L+T-2 predict answer tokens 0 .. T-1
        full = torch.cat([prompt_ids.expand(G, -1), completion_ids[:, :-1]], dim=1)
        logits = model(full, use_cache=False, logits_to_keep=T).logits
    logits = logits.float() / temperature
    logp = -F.cross_entropy(logits.reshape(G * T, -1), completion_ids.reshape(-1), reduction="none").view(G, T)
    entropy = None
    if with_entropy:
        logp_all = torch.log_softmax(logits, dim=-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


#: What one more forward call costs, in answer tokens of compute: SmolLM2-135M with LoRA, forward and
#: backward after a 432-token prompt, one CPU thread: ~0.25 s a call plus ~0.012 s an answer token (timed
#: once on the 2026-12-03 Xeon; the split is cost-optimal for any value, only its speed depends on it).
CALL_COST_TOKENS = 20


def length_chunks(lengths: Sequence[int], call_cost: int | None = None) -> list[list[int]]:
    """Rows of a group split into batches of similar length: each batch runs to its longest row, so what it
    computes is rows x longest; one more batch costs `call_cost` tokens. Sorted by length, the best split
    into contiguous runs is a small dynamic programme (G is ~12). Returns row indices, shortest first."""
    call_cost = CALL_COST_TOKENS if call_cost is None else call_cost
    order = sorted(range(len(lengths)), key=lambda g: (lengths[g], g))
    n = len(order)
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)   # best[j]: cost of the first j sorted rows
    for j in range(1, n + 1):
        for i in range(j):  # rows i..j-1 in one batch, as long as row j-1
            cost = best[i] + (j - i) * lengths[order[j - 1]] + call_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    chunks, j = [], n
    while j > 0:
        chunks.append(order[cut[j]:j])
        j = cut[j]
    return chunks[::-1]


def _trimmed_logps(model, prompt_ids, completion_ids, temperature, with_entropy, lengths):
    """`group_logps` with the prompt shared and each answer computed only up to its own end: the answers run
    in batches of similar length (`length_chunks`), each batch continuing one copy of the prompt's cache.
    On the cpu preset's answers (~25 tokens, padded to 64) this skips over half the answer compute."""
    from transformers import DynamicCache
    G, T = completion_ids.shape
    L = prompt_ids.shape[1]
    lengths = [int(n) for n in lengths]
    if min(lengths) < 1 or max(lengths) > T:
        raise ValueError(f"answer lengths must lie in 1..{T}, got {lengths}")
    prompt, head = _prompt_cache(model, prompt_ids, 1, L)     # head predicts answer token 0
    kv = [(layer.keys, layer.values) for layer in prompt.layers]
    logp, entropy = [None] * G, [None] * G
    for rows in length_chunks(lengths):
        n, longest = len(rows), max(lengths[g] for g in rows)
        logits = head.expand(n, -1, -1)
        if longest > 1:
            cache = DynamicCache(config=model.config)
            for k, (keys, values) in enumerate(kv):  # this batch's own copy: the forward appends to it
                cache.update(keys.expand(n, -1, -1, -1), values.expand(n, -1, -1, -1), k)
            positions = torch.arange(L, L + longest - 1, device=prompt_ids.device).expand(n, -1)
            rest = model(completion_ids[rows, :longest - 1], **_cache_arg(model, cache), use_cache=True,
                         position_ids=positions).logits
            logits = torch.cat([logits, rest], dim=1)
        logits = logits.float() / temperature
        for j, g in enumerate(rows):
            m = lengths[g]
            lp_all = torch.log_softmax(logits[j, :m], dim=-1)
            logp[g] = F.pad(lp_all.gather(-1, completion_ids[g, :m, None]).squeeze(-1), (0, T - m))
            if with_entropy:
                entropy[g] = F.pad(-(lp_all.exp() * lp_all).sum(-1), (0, T - m))
    return torch.stack(logp), (torch.stack(entropy) if with_entropy else None)


def _lengths(config: TrainConfig, mask: torch.Tensor) -> list[int] | None:
    """Each answer's length (its mask's sum, EOS included) when `trim_padding` is on, else None."""
    return [int(n) for n in mask.sum(-1).tolist()] if config.trim_padding else None


def _pad_batch(groups: list[Group], pad_id: int):
    """(P, G, T) ids and mask, every group right-padded to the longest answer of the batch."""
    T = max(g.completion_ids.shape[1] for g in groups)
    ids = torch.stack([F.pad(g.completion_ids, (0, T - g.completion_ids.shape[1]), value=pad_id) for g in groups])
    mask = torch.stack([F.pad(g.mask, (0, T - g.mask.shape[1]), value=0.0) for g in groups])
    return ids, mask


def _pad_like(groups: list[Group], field: str, mask: torch.Tensor) -> torch.Tensor:
    """(P, G, T) of a per-token field of every group, right-padded with 0 (masked) to the batch's T."""
    T = mask.shape[-1]
    return torch.stack([F.pad(getattr(g, field), (0, T - getattr(g, field).shape[1]), value=0.0) for g in groups])


def _loss_kwargs(config: TrainConfig, eps_high: float, n_tokens: torch.Tensor) -> dict:
    kw = {"beta": config.beta, "epsilon_high": eps_high}
    if config.loss_type in ("grpo", "dapo"):
        kw["epsilon"] = config.epsilon
    if config.loss_type in ("dapo", "cispo"):
        kw["num_items_in_batch"] = n_tokens  # every group divides by the batch's token count
    return kw


def _learning_rate(config: TrainConfig, update: int, total_updates: int) -> float:
    """TRL's schedules without warmup: linear goes from lr at update 0 to lr / total at the last one."""
    if config.lr_scheduler_type == "constant":
        return config.learning_rate
    return config.learning_rate * max(0.0, (total_updates - update) / total_updates)


# -------------------------------------------------------------------------------- order and seeds
def briefs_for_step(briefs: Sequence, config: TrainConfig, step: int) -> list:
    """The briefs of a step (1-based): a fresh seeded permutation per pass over the briefs, read in order."""
    n, P = len(briefs), config.prompts_per_step
    chosen = []
    for k in range((step - 1) * P, step * P):
        epoch, pos = divmod(k, n)
        order = np.random.default_rng([config.seed, epoch]).permutation(n)
        chosen.append(briefs[order[pos]])
    return chosen


def _seed_everything(seed: int, step: int) -> None:
    s = int(np.random.SeedSequence([seed, step]).generate_state(1)[0])
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


# ----------------------------------------------------------------------------------- checkpoints
ARCHIVE_FILE = "archive.npz"


def save_checkpoint(out: Path, step: int, policy, optimizer, thermostat, adapo, config: TrainConfig,
                    verifier=None) -> Path:
    """out/checkpoint-{step}: adapters (PEFT format), optimizer, RNG states, controller states, step, and the
    verifier's novelty archive (archive.npz), which `train(resume=True)` restores."""
    target = out / f"checkpoint-{step}"
    tmp = out / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)
    torch.save({"step": step, "optimizer": optimizer.state_dict(),
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
                "thermostat": thermostat.state_dict() if thermostat else None,
                "adapo": adapo.state_dict() if adapo else None}, tmp / "trainer_state.pt")
    (tmp / "trainer_state.json").write_text(json_dumps({"step": step, "config": config.to_dict()}, indent=2))
    if (out / SETTINGS_FILE).is_file():  # what the checkpoint was trained with, for a resume to check against
        shutil.copyfile(out / SETTINGS_FILE, tmp / SETTINGS_FILE)
    if thermostat is not None:
        _write_jsonl(tmp / "thermostat.jsonl", thermostat.log)
    if verifier is not None:
        verifier.save_archive(tmp / ARCHIVE_FILE)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def check_checkpoint_settings(out: Path, tables: dict, ignore=()) -> None:
    """Refuse to resume the latest checkpoint in `out` with other settings than it was trained with.

    Its own settings.toml holds them; checkpoints written before that record have the TrainConfig in
    trainer_state.json. No checkpoint: nothing to compare (`train` says so itself).
    """
    ckpt = latest_checkpoint(out)
    if ckpt is None:
        return
    if (ckpt / SETTINGS_FILE).is_file():
        recorded = tomllib.loads((ckpt / SETTINGS_FILE).read_text(encoding="utf-8"))
    else:
        state = json.loads((ckpt / "trainer_state.json").read_text()) if (ckpt / "trainer_state.json").is_file() else {}
        if not isinstance(state.get("config"), dict):
            return
        known = {f.name for f in fields(TrainConfig)}
        # fields the record lacks take the defaults of its time, RECIPE_BASE's
        recorded = {"train": tomllib.loads(dumps({"t": to_dict(RECIPE_BASE.with_(
            **{k: v for k, v in state["config"].items() if k in known}))}))["t"]}
        tables = {"train": tables["train"]}
    refuse_other_settings(recorded, tables, ignore, f"{ckpt} was trained")


def latest_checkpoint(out: Path) -> Path | None:
    found = [(int(p.name.split("-")[1]), p) for p in Path(out).glob("checkpoint-*")
             if p.is_dir() and p.name.split("-")[1].isdigit() and (p / "trainer_state.pt").exists()]
    return max(found)[1] if found else None


def load_checkpoint(ckpt: Path, policy, optimizer, thermostat, adapo) -> int:
    """Restore everything `save_checkpoint` wrote; returns the step it was taken after."""
    from peft import set_peft_model_state_dict
    # both files read before anything is restored: a damaged one (CheckpointError) leaves the run untouched
    weights = load_tensors(Path(ckpt) / "adapter_model.safetensors", device=str(next(policy.parameters()).device))
    state = load_state(Path(ckpt) / "trainer_state.pt", keys=("step", "optimizer", "rng", "thermostat", "adapo"))
    result = set_peft_model_state_dict(policy, weights)
    mismatch = list(result.unexpected_keys) + [k for k in result.missing_keys if "lora_" in k]
    if mismatch:
        raise CheckpointError(f"checkpoint {ckpt} does not match the model's adapters (e.g. {mismatch[:3]}): "
                              "resume with the recipe and model the run started with")
    optimizer.load_state_dict(state["optimizer"])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    for controller, key in ((thermostat, "thermostat"), (adapo, "adapo")):
        if (controller is None) != (state[key] is None):
            raise CheckpointError(f"checkpoint {ckpt} was written with {key} "
                                  f"{'off' if state[key] is None else 'on'}; resume with the same config")
        if controller is not None:
            controller.load_state_dict(state[key])
    return int(state["step"])


# ---------------------------------------------------------------------------------------- files
def _append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json_dumps(record) + "\n")


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json_dumps(r) + "\n" for r in records))


def _truncate_jsonl(path: Path, last_step: int) -> None:
    """Keep the lines of steps <= last_step (0: none)."""
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln).get("step", 0) <= last_step]
    path.write_text("".join(ln + "\n" for ln in keep))


def read_log(out_dir) -> list[dict]:
    """The log.jsonl records of a run."""
    path = Path(out_dir) / "log.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []
