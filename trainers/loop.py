"""The training loop: sample answers, score them, turn scores into advantages, update the adapters.

One step of `train`, top to bottom:

    1. sample: take `prompts_per_step` briefs (a seeded order), chat-template each prompt, sample
       `num_generations` answers per prompt (one "group"; `trainers.rollout`: the step's prompts as one batch,
       with the sampling policy's log-probs and entropies)
    2. score each group with the verifier
    3. refill (`trainers.refill`, at most `refill_rounds` rounds): resample a group whose rewards have zero
       variance (DAPO), and swap the duplicates of a group holding fewer than `min_distinct_forms` canonical
       forms for fresh answers of new forms; then the step's valid answers above the archive threshold join the
       novelty archive (R8/R9). With `max_verifier_calls` set, refills stop where the cap would be passed and
       the run ends after the last step whose first scoring fits (refill paid for with steps, not extra calls)
    4. advantages: GDPO (or GRPO) per group, then the projection: no positive advantage for an invalid or
       motif-guarded (R10) answer, nor (optional floor) one whose core score is <= floor
    5. the reference log-probs: one no-grad pass with adapters off (`trainers.logprobs`); the old log-probs
       are the sampler's
    6. entropy control: REPO-R's thermostat sets zeta, or ADAPO sets epsilon_high
    7. update: `num_iterations` passes over the batch, each split into `steps_per_generation` mini-batches (a
       slice of every group's answers), one AdamW step per mini-batch (grpo | dapo | cispo, + beta * KL): from
       the second mini-batch on the policy is newer than the one that sampled, so the ratios leave 1
    8. log: one JSONL line to out_dir/log.jsonl (with the non-zero-advantage share and the distinct forms of
       each group), every answer to completions.jsonl (`trainers.run_log`); a
       checkpoint (adapters, optimizer, RNG, archive) every `save_steps` (`trainers.checkpoints`)

Every group's answers share its prompt: the prompt runs through the model once and its KV cache serves the
answers (sampling and every log-prob pass); each answer is computed only to its own end. The slower reference
paths (one prompt at a time, prompt + answer per row, every answer padded, recomputed old log-probs) are the
tests' oracles (tests/oracles.py), not settings.

Determinism: each step reseeds torch, numpy and random from (seed, step), so a run resumed from a
checkpoint repeats the uninterrupted run's later steps exactly (same machine, same thread count).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from alpha_gym.scoring.config import CHANNELS
from alpha_gym.settings import claim_run_dir, to_dict
from alpha_gym.search.task_prompts import task_prompts
from trainers.advantages import compute_advantages, nonzero_share
from trainers.checkpoints import (ARCHIVE_FILE, check_checkpoint_settings, checkpoint_verifier_calls,
                                  latest_checkpoint, load_checkpoint, save_checkpoint)
from trainers.config import OUTPUT_ONLY, RETIRED, TrainConfig, register_train_table
from trainers.logprobs import group_logps
from trainers.refill import RefillCounts, distinct_forms, nonzero_by_group, refill
from trainers.losses import policy_loss, top_entropy_mask
from trainers.repo_r import AdapoController, EntropyThermostat, shape_advantages
from trainers.rollout import Group, sample_groups
from trainers.rollout import end_token_ids as _eos_ids
from trainers.rollout import prompt_ids as _prompt_ids
from trainers.run_book import ARCHIVE_LOG, append_admitted, truncate_admitted
from trainers.run_log import append_jsonl, completion_rows, step_record, truncate_jsonl, write_jsonl


def train(config: TrainConfig, verifier, briefs: Sequence | None, out_dir, model=None, steps: int = 10,
          resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train for `steps` steps (the total, counting steps done before a resume). Returns a summary dict.

    The linear learning-rate schedule decays over `steps`: resume with the same value to repeat a run.
    The summary holds the trained model under "policy" (the rest is JSON-friendly).

    model: None (built-in SmolLM2-135M-Instruct), a model folder or Hub id, or a (model, tokenizer) pair
    (a PeftModel is used as it is; a plain model gets fresh adapters from `config`).
    briefs: `Brief`s, or objects with `.id` and their own `.prompt()` (default: the 450 training briefs,
    `brief_set("train")`); the prompts are `config.task`'s under the verifier's limits, as the Gym env renders
    them (`alpha_gym.search.task_prompts.task_prompts`; a step's prompts are `TaskPrompts.prompts(chosen, seed,
    step)`).
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
    ignore = tuple(f"train.{k}" for k in (*OUTPUT_ONLY, *RETIRED))
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
    task = task_prompts(config.task, verifier, owner="TrainConfig")  # the env's prompts under the verifier's limits

    start, verifier_calls = 0, 0  # verifier_calls: answers scored so far, refills included (a checkpoint keeps it)
    if resume:
        ckpt = latest_checkpoint(out)
        if ckpt is None:
            raise FileNotFoundError(f"resume=True but {out} holds no checkpoint-N folder")
        start = load_checkpoint(ckpt, policy, optimizer, thermostat, adapo)
        verifier_calls = checkpoint_verifier_calls(ckpt)
        if (ckpt / ARCHIVE_FILE).exists():
            verifier.load_archive(ckpt / ARCHIVE_FILE)
    for name in ("log.jsonl", "completions.jsonl"):  # drop lines past the restart point (or all, fresh run)
        truncate_jsonl(out / name, start)
    truncate_admitted(out / ARCHIVE_LOG, start)  # the archive's admitted formulas, as the restored archive holds

    summary = {"out_dir": str(out), "start_step": start, "steps": steps, "refills": 0, "checkpoint": None,
               "last": None}
    bar = tqdm(range(start + 1, steps + 1), initial=start, total=steps, disable=not progress, desc="train")
    cap = config.max_verifier_calls  # 0: no cap; else refills are paid for with the steps at the end
    first_scoring = config.prompts_per_step * config.num_generations
    for step in bar:
        if cap and verifier_calls + first_scoring > cap:  # a resumed run that had spent its calls
            summary["stopped_at_cap"] = step - 1
            break
        _seed_everything(config.seed, step)
        t_step = time.perf_counter()
        t = {"generation": 0.0, "scoring": 0.0}

        # 1. sample a group of answers per prompt, with the sampling policy's log-probs and entropies
        chosen = briefs_for_step(briefs, config, step)
        prompts = [_prompt_ids(tokenizer, text, device) for text in task.prompts(chosen, config.seed, step)]
        groups = _sample(policy, tokenizer, [b.id for b in chosen], prompts, config, eos_ids, t)

        # 2. score each group with the verifier, with its brief
        scores = _score(verifier, groups, chosen, t)

        # 3. refill (trainers/refill.py): resample a group with zero reward variance, and give one whose answers
        # collapsed onto fewer than min_distinct_forms canonical forms fresh forms for its duplicates
        counts = RefillCounts(scored=sum(len(g.texts) for g in groups))
        refill(groups, scores, config.refill_rounds, config.min_distinct_forms, verifier.config.limits,
               tokenizer.pad_token_id,
               sample=lambda idx: _sample(policy, tokenizer, [chosen[i].id for i in idx], [prompts[i] for i in idx],
                                          config, eos_ids, t),
               score=lambda idx, again: _score(verifier, again, [chosen[i] for i in idx], t), counts=counts,
               max_scored=cap - verifier_calls if cap else None)
        refills = counts.flat
        summary["refills"] += refills
        verifier_calls += counts.scored
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

        # 5. one length for the batch; old log-probs + entropies are the sampler's; the reference's (adapters off)
        completion_ids, mask = _pad_batch(groups, tokenizer.pad_token_id)   # (P, G, T)
        old_logp, entropy = _pad_like(groups, "old_logp", mask), _pad_like(groups, "entropy", mask)
        ref_logp = None
        if config.beta != 0.0:
            with torch.no_grad(), policy.disable_adapter():  # the reference is the base model: adapters off
                ref_logp = torch.stack([group_logps(policy, g.prompt_ids, ids, config.temperature,
                                                    lengths=_lengths(m))[0]
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
                                          lengths=_lengths(mb_mask[i]))
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
        forms = [distinct_forms(g.texts, verifier.config.limits) for g in groups]
        record = step_record(step, scores, verifier, nonzero_share(adv), {
            "kl": stats["kl"], "entropy": mean_entropy, "zeta": zeta, "epsilon_high": eps_high, "refills": refills,
            "form_refills": counts.collapsed, "form_swaps": counts.swapped, "verifier_calls": verifier_calls,
            "loss": stats["loss"], "clip_ratio": stats["clip"], "clipped_share": stats["clipped"],
            "ratio_mean": stats["ratio"], "learning_rate": lr,
            "completion_length": (n_tokens / mask.shape[0] / mask.shape[1]).item(),
        }, {**t, "update": t_update, "total": time.perf_counter() - t_step}, forms, nonzero_by_group(adv))
        if step % config.logging_steps == 0 or step == steps:
            append_jsonl(out / "log.jsonl", record)
        if config.log_completions:
            for row in completion_rows(step, groups, scores, adv):
                append_jsonl(out / "completions.jsonl", row)
        spent = bool(cap) and verifier_calls + first_scoring > cap  # no further step fits: this one is the last
        if (config.save_steps and step % config.save_steps == 0) or step == steps or spent:
            summary["checkpoint"] = str(save_checkpoint(out, step, policy, optimizer, thermostat, adapo, config,
                                                        verifier, verifier_calls))
        if thermostat is not None:
            write_jsonl(out / "thermostat.jsonl", thermostat.log)
        if adapo is not None:
            write_jsonl(out / "adapo.jsonl", adapo.log)
        summary["last"] = record
        bar.set_postfix(reward=f"{record['reward']:.3f}", valid=f"{record['valid_share']:.2f}",
                        kl=f"{record['kl']:.4f}")
        if spent and step < steps:
            summary["stopped_at_cap"] = step
            break
    summary["policy"] = policy
    return summary


# ------------------------------------------------------------------------------------ the step's pieces
def _sample(policy, tokenizer, brief_ids, prompts, config, eos_ids, t) -> list[Group]:
    """A group per prompt, all prompts in one batch, with the sampler's log-probs; adds to t["generation"]."""
    t0 = time.perf_counter()
    sampled = sample_groups(policy, tokenizer, prompts, config, eos_ids, with_logps=True)
    t["generation"] += time.perf_counter() - t0
    return [Group(b, p, *s) for b, p, s in zip(brief_ids, prompts, sampled)]


def _score(verifier, groups: list[Group], briefs, t) -> list:
    """Each group's answers scored together with its brief (`Verifier.score_group`); adds to t["scoring"]."""
    t0 = time.perf_counter()
    scores = [verifier.score_group(g.texts, brief=b) for g, b in zip(groups, briefs)]
    t["scoring"] += time.perf_counter() - t0
    return scores


def _lengths(mask: torch.Tensor) -> list[int]:
    """Each answer's length (its mask's sum, EOS included): the log-prob passes stop there."""
    return [int(n) for n in mask.sum(-1).tolist()]


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


# ------------------------------------------------------------------------------------ the policy
def _policy(model, config: TrainConfig):
    from trainers.models import Bf16FrozenLinear, add_adapters, load_policy
    if isinstance(model, tuple):
        policy, tokenizer = model
        if not hasattr(policy, "disable_adapter"):  # a plain model: give it adapters
            policy = add_adapters(policy, config)
        elif (config.bf16_base and not next(policy.parameters()).is_cuda  # on CUDA the base is bf16 or NF4 already
              and not any(isinstance(m, Bf16FrozenLinear) for m in policy.modules())):
            # the run would record bf16_base = true over an fp32 base: refuse rather than mislabel it
            raise ValueError("bf16_base=True with a model that already has adapters over an fp32 base: pass the "
                             "plain base model (the loop adds the adapters), or leave bf16_base off")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return policy, tokenizer
    return load_policy(model, config)
