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
    5. the batch: every group's answers padded to one length; the old log-probs and entropies are the sampler's
    6. entropy control: REPO-R's thermostat sets zeta, or ADAPO sets epsilon_high
    7. update (`trainers.update.policy_update`, the RL mutator's too): the reference log-probs (one no-grad pass,
       adapters off), then `num_iterations` passes over the batch, each split into `steps_per_generation`
       mini-batches (a slice of every group's answers), one AdamW step per mini-batch with the loss of
       `config.loss_type`'s row of `LOSS_TABLE` (+ beta * KL): from the second mini-batch on the policy is newer
       than the one that sampled, so the ratios leave 1
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

from alpha_gym.scoring.config import CHANNELS
from alpha_gym.settings import claim_run_dir, to_dict
from alpha_gym.search.task_prompts import task_prompts
from trainers.advantages import compute_advantages, nonzero_share
from trainers.checkpoints import (ARCHIVE_FILE, check_checkpoint_settings, checkpoint_verifier_calls,
                                  latest_checkpoint, load_checkpoint, save_checkpoint)
from trainers.config import OUTPUT_ONLY, RETIRED, TrainConfig, register_train_table
from trainers.refill import RefillCounts, distinct_forms, nonzero_by_group, refill
from trainers.repo_r import AdapoController, EntropyThermostat
from trainers.rollout import Group, sample_groups
from trainers.rollout import end_token_ids as _eos_ids
from trainers.rollout import prompt_ids as _prompt_ids
from trainers.run_book import ARCHIVE_LOG, append_admitted, truncate_admitted
from trainers.run_log import append_jsonl, completion_rows, step_record, truncate_jsonl, write_jsonl
from trainers.update import Batch, policy_update


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

    # verifier_calls: answers scored so far, refills included (a checkpoint keeps it)
    start, verifier_calls = _resume(out, policy, optimizer, thermostat, adapo, verifier) if resume else (0, 0)
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
        adv = _advantages(scores, priorities, config)

        # 5. one batch of the step's answers (the sampler's log-probs and entropies); 6. entropy control from them
        batch = Batch.of(groups, tokenizer.pad_token_id)
        mean_entropy = batch.mean_entropy()
        zeta = thermostat.update(mean_entropy) if thermostat else 0.0
        eps_high = adapo.update(mean_entropy) if adapo else config.resolved_epsilon_high

        # 7. the update (trainers/update.py): the reference pass, then num_iterations passes x steps_per_generation
        # mini-batches, one AdamW step each, at the schedule's learning rate (n optimizer steps per step)
        n = config.num_iterations * config.steps_per_generation
        stats = policy_update(policy, optimizer, params, config, batch, adv.flatten(), epsilon_high=eps_high, zeta=zeta,
                              passes=config.num_iterations, minibatches=config.steps_per_generation,
                              learning_rate=lambda j: _learning_rate(config, (step - 1) * n + j, steps * n))
        t_update = time.perf_counter() - t_update

        # 8. log, checkpoint
        forms = [distinct_forms(g.texts, verifier.config.limits) for g in groups]
        record = step_record(step, scores, verifier, nonzero_share(adv), {
            "kl": stats["kl"], "entropy": mean_entropy, "zeta": zeta, "epsilon_high": eps_high, "refills": refills,
            "form_refills": counts.collapsed, "form_swaps": counts.swapped, "verifier_calls": verifier_calls,
            "loss": stats["loss"], "clip_ratio": stats["clip"], "clipped_share": stats["clipped"],
            "ratio_mean": stats["ratio"], "learning_rate": stats["learning_rate"],
            "completion_length": (batch.mask.sum() / len(groups) / batch.sizes[0]).item(),
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


def _advantages(scores, priorities, config: TrainConfig) -> torch.Tensor:
    """(P, G) float32: GDPO/GRPO per group, then no positive advantage for an invalid or guarded answer (nor one under
    the floor, unless it meets its brief above `brief_floor`), sum 0."""
    channels = torch.as_tensor(np.stack([s.matrix for s in scores]))        # (P, G, K) float64
    valid = torch.as_tensor(np.stack([s.valid for s in scores]))
    guarded = torch.as_tensor(np.stack([s.guarded for s in scores]))
    core = torch.as_tensor(np.stack([s.core for s in scores]))
    meets_brief = torch.as_tensor(np.stack([s.meets_brief for s in scores]))
    return compute_advantages(channels, priorities, valid, core, mode=config.advantage_mode,
                              floor=config.advantage_floor, guarded=guarded, meets_brief=meets_brief,
                              brief_floor=config.brief_floor).float()


def _learning_rate(config: TrainConfig, update: int, total_updates: int) -> float:
    """TRL's schedules without warmup: linear goes from lr at update 0 to lr / total at the last one."""
    if config.lr_scheduler_type == "constant":
        return config.learning_rate
    return config.learning_rate * max(0.0, (total_updates - update) / total_updates)


def _resume(out: Path, policy, optimizer, thermostat, adapo, verifier) -> tuple[int, int]:
    """(steps done, verifier calls spent) of the run's latest checkpoint, whose adapters, optimizer, controllers
    and novelty archive it restores into the objects given."""
    ckpt = latest_checkpoint(out)
    if ckpt is None:
        raise FileNotFoundError(f"resume=True but {out} holds no checkpoint-N folder")
    start = load_checkpoint(ckpt, policy, optimizer, thermostat, adapo)
    if (ckpt / ARCHIVE_FILE).exists():
        verifier.load_archive(ckpt / ARCHIVE_FILE)
    return start, checkpoint_verifier_calls(ckpt)


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
