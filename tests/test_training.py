"""Training mechanics with the real SmolLM2-135M on CPU and the real verifier (us46 panel).

Tiny settings (2 prompts x 4 answers, 16 new tokens, short prompts) keep the file to a few minutes.
Out of the box SmolLM2 almost never writes a valid <alpha> answer, so every group would be all-invalid:
zero advantages after the validity projection, zero gradient, nothing to see. The recipe tests therefore
plant one known-valid answer (its tokens) in each sampled group: the model still samples the rest, and
log-probs, scoring, advantages, losses and updates all run for real. These tests check mechanics, not
learning.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from alpha_gym.threads import torch_threads
from oracles import padded_logps, recompute_logps, recomputing_sampler
from trainers.config import RECIPES, TrainConfig, recipe

# Valid on us46 with a core score above 0 (about 0.66: the ladder recipes' advantage floor is 0) and not
# caught by the motif guard, so GDPO ranks it first in a group of otherwise invalid answers.
VALID_ANSWER = "<alpha>rank(ts_std(volume, 8) / ts_std(close, 8))</alpha>"
TINY = dict(prompts_per_step=2, num_generations=4, max_completion_length=16, save_steps=1, log_completions=True)


@dataclass(frozen=True)
class TinyBrief:
    """A brief with a short prompt (the real ones are ~360 tokens: 10x the compute on a CPU)."""

    id: str
    text: str

    def prompt(self) -> str:
        return self.text


BRIEFS = [TinyBrief("tiny-0", "Write one trading formula."), TinyBrief("tiny-1", "Write an alpha for US stocks.")]


# ----------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One torch thread: on a shared 2-core machine two threads can be several times slower, not faster."""
    with torch_threads(int(os.environ.get("ALPHA_GYM_TEST_THREADS", "1"))):
        yield


@pytest.fixture(scope="module")
def verifier(real_us46):
    from alpha_gym.scoring.verifier import Verifier
    return Verifier(real_us46)


@pytest.fixture(scope="module")
def smollm():
    """The base model and tokenizer, loaded once; every run gets a deep copy with fresh adapters."""
    from trainers.models import load_base
    return load_base(None)


def fresh_policy(smollm, config):
    from trainers.models import add_adapters
    base, tokenizer = smollm
    return add_adapters(copy.deepcopy(base), config), tokenizer


def planting(valid_briefs=None, flat_text=None):
    """A wrapper of loop.sample_groups that plants VALID_ANSWER as answer 0 (of the briefs in `valid_briefs`,
    default all) and, when `flat_text` is set, makes every other answer that same invalid text.
    `calls` gets one entry per prompt sampled."""
    from trainers import loop
    real = loop.sample_groups
    calls = []

    def plant(model, tokenizer, prompt_ids, eos_ids, temperature, ids, mask, texts, *sampler_logps):
        # a planted group's log-probs are not the sampler's (they scored other tokens): one more no-grad pass
        # gives the sampling policy's (the oracle the loop's sampler is held to, tests/oracles.py)
        calls.append(prompt_ids)
        if flat_text is not None:
            texts = [flat_text] * len(texts)
        brief_text = tokenizer.decode(prompt_ids[0])
        if valid_briefs is None or any(b.text in brief_text for b in valid_briefs):
            planted = tokenizer(VALID_ANSWER, add_special_tokens=False).input_ids + [eos_ids[0]]
            T = max(ids.shape[1], len(planted))
            ids = torch.nn.functional.pad(ids, (0, T - ids.shape[1]), value=tokenizer.pad_token_id)
            mask = torch.nn.functional.pad(mask, (0, T - mask.shape[1]), value=0.0)
            ids[0] = tokenizer.pad_token_id
            ids[0, :len(planted)] = torch.tensor(planted)
            mask[0] = 0.0
            mask[0, :len(planted)] = 1.0
            texts = [VALID_ANSWER, *texts[1:]]
        elif flat_text is None:
            return ids, mask, texts, *sampler_logps
        return ids, mask, texts, *recompute_logps(model, prompt_ids, ids, mask, temperature)

    def sample_groups(model, tokenizer, prompts, config, eos_ids, **kw):
        return [plant(model, tokenizer, p, eos_ids, config.temperature, *group)
                for p, group in zip(prompts, real(model, tokenizer, prompts, config, eos_ids, **kw))]

    return sample_groups, calls


@pytest.fixture(scope="module")
def runs(smollm, verifier, tmp_path_factory):
    """Two planted steps of each recipe, run once on demand: name -> (out_dir, summary, initial adapters)."""
    from trainers import loop
    from trainers.models import adapter_state
    done = {}

    def run(name):
        if name not in done:
            config = recipe(name, **TINY)
            policy = fresh_policy(smollm, config)
            initial = adapter_state(policy[0])
            out = tmp_path_factory.mktemp(name)
            sample_group, _ = planting()
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(loop, "sample_groups", sample_group)
                summary = loop.train(config, verifier.fork(), BRIEFS, out, model=policy, steps=2, progress=False)
            done[name] = (out, summary, initial)
        return done[name]

    return run


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# ------------------------------------------------------------------------------------- the recipes
@pytest.mark.slow
@pytest.mark.real_data
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_two_steps_of_each_recipe(runs, name):
    from trainers.models import adapter_state
    from trainers.run_log import LOG_FIELDS, read_log
    out, summary, initial = runs(name)
    config = RECIPES[name]
    log = read_log(out)
    assert [r["step"] for r in log] == [1, 2]
    for rec in log:
        assert set(LOG_FIELDS) <= set(rec), f"missing {set(LOG_FIELDS) - set(rec)}"
        assert all(_finite(rec[k]) for k in LOG_FIELDS), rec
        assert rec["world_model"] == "off" or rec["world_model"].startswith("sha256:")  # what R3 used
        assert rec["valid_share"] > 0 and rec["nonzero_adv_share"] > 0  # the planted answers carry signal
        assert rec["entropy"] > 0
        assert rec["epsilon_high"] == pytest.approx(config.resolved_epsilon_high)
    # fresh adapters = the reference: at step 1 only the updates of that step's own earlier mini-batches
    # (steps_per_generation x num_iterations of them) separate the policy from it
    assert 0.0 <= log[0]["kl"] < 1e-3

    # the adapters changed (LoRA's B, or DoRA's magnitude too), and only the adapters train
    after = adapter_state(summary["policy"])
    assert after.keys() == initial.keys()
    changed = [k for k in after if not torch.equal(after[k], initial[k])]
    assert changed, "no adapter weight changed"
    assert all("lora_" in k for k in after)
    if config.use_dora:
        assert any("lora_magnitude_vector" in k for k in after)

    # the validity rule held on every answer: an invalid answer never got a positive advantage
    rows = [json.loads(ln) for ln in (out / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * TINY["prompts_per_step"] * TINY["num_generations"]
    assert all(r["advantage"] <= 1e-6 for r in rows if not r["valid"])
    assert any(r["valid"] for r in rows)

    # checkpoints and controller logs
    for step in (1, 2):
        ckpt = out / f"checkpoint-{step}"
        assert (ckpt / "adapter_model.safetensors").exists() and (ckpt / "trainer_state.pt").exists()
    if config.repo_r:
        thermo = [json.loads(ln) for ln in (out / "thermostat.jsonl").read_text().splitlines()]
        assert [t["step"] for t in thermo] == [1, 2] and all(t["zeta"] == 0.0 for t in thermo)  # calibrating
    import tomllib
    saved = tomllib.loads((out / "settings.toml").read_text())  # the run's exact settings, both halves
    assert saved["train"]["loss_type"] == config.loss_type and saved["verifier"]["turnover_cap"] == 0.5


@pytest.mark.slow
@pytest.mark.real_data
def test_a_dora_checkpoint_answers_over_its_base(runs):
    """A DoRA recipe's checkpoint loads for answering as the comparison's probe loads it (`load_for_inference`:
    the adapters over the base the checkpoint names) and gives the trained policy's logits; the probe's greedy
    answer comes from it. (The comparison's smoke test leaves its DoRA rung to this and the recipe test.)"""
    from trainers.answers import load_for_inference
    from trainers.rollout import generate_answers, prompt_ids
    out, summary, _ = runs("cispo_repo_r_dora")
    model, tokenizer = load_for_inference(str(out / "checkpoint-2"))
    assert any("lora_magnitude_vector" in name for name, _ in model.named_parameters())
    model.eval()
    policy = summary["policy"].eval()
    ids = prompt_ids(tokenizer, BRIEFS[0].prompt(), "cpu")
    with torch.no_grad():
        loaded, trained = model(ids).logits, policy(ids).logits
        with model.disable_adapter():
            base = model(ids).logits
    moved = (trained - base).abs().max().item()   # what two steps moved the logits: the adapters are read back
    assert moved > 0 and (loaded - trained).abs().max().item() <= moved / 100
    [[answer]] = generate_answers(model, tokenizer, [BRIEFS[0].prompt()], max_new_tokens=4)
    assert isinstance(answer, str)


@pytest.mark.slow
@pytest.mark.real_data
def test_run_report_shows_diagnostics_channels_and_answers(runs):
    """`alpha-gym report` on a real run: the diagnostics grid, every channel's curve, and per checkpoint the
    best and worst answers with their 12 channels, as read from completions.jsonl."""
    from alpha_gym.evaluation.report import write_report
    from alpha_gym.scoring.config import CHANNELS
    out, _, _ = runs("cispo_repo_r")
    html = write_report(out).read_text()
    assert html.count("data:image/png") == 2                       # diagnostics grid, channel curves
    assert "Checkpoint 1: steps 1..1" in html and "Checkpoint 2: steps 2..2" in html
    assert "cispo, gdpo, REPO-R" in html                           # the recipe, read from settings.toml
    assert "R3 world model" in html and "not recorded" not in html  # what R3 used, from log.jsonl
    rows = [json.loads(ln) for ln in (out / "completions.jsonl").read_text().splitlines()]
    best = max((r for r in rows if r["step"] == 1), key=lambda r: r["reward"])
    assert f"{best['reward']:+.2f}" in html and f"{best['channels'][CHANNELS[0]]:+.2f}" in html
    assert all(f"<th class=\"\">R{k}</th>" in html for k in range(1, 13))
    log = [json.loads(ln) for ln in (out / "log.jsonl").read_text().splitlines()]
    valid_forms = {r["answer"] for r in rows if r["step"] == 1 and r["valid"]}
    assert 1 <= log[0]["families"] <= len(valid_forms)


@pytest.mark.slow
@pytest.mark.real_data
def test_resume_from_step_1_reproduces_step_2(runs, smollm, verifier, tmp_path):
    """Restart from checkpoint-1 of the REPO-R + two-pass recipe: step 2 repeats exactly (log and weights)."""
    from safetensors.torch import load_file

    from trainers import loop
    name = "cispo_repo_r"
    out, summary, _ = runs(name)
    config = recipe(name, **TINY)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "checkpoint-1", resumed / "checkpoint-1")
    shutil.copy(out / "log.jsonl", resumed / "log.jsonl")  # holds step 2 too: resume must drop it
    shutil.copy(out / "archive.jsonl", resumed / "archive.jsonl")  # the same for the admitted formulas
    sample_group, _ = planting()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "sample_groups", sample_group)
        again = loop.train(config, verifier.fork(), BRIEFS, resumed, model=fresh_policy(smollm, config), steps=2,
                           resume=True, progress=False)
    assert again["start_step"] == 1
    # the copied folder had no settings.toml: the checkpoint's record was checked and the file rewritten from it
    assert (resumed / "settings.toml").read_text() == (out / "checkpoint-1" / "settings.toml").read_text() \
        == (out / "settings.toml").read_text()
    from trainers.run_log import read_log
    original, repeated = read_log(out), read_log(resumed)
    assert [r["step"] for r in repeated] == [1, 2]
    timing = {k for k in original[1] if k.startswith("seconds/")}
    assert {k: v for k, v in repeated[1].items() if k not in timing} == \
           {k: v for k, v in original[1].items() if k not in timing}
    first = load_file(str(out / "checkpoint-2" / "adapter_model.safetensors"))
    second = load_file(str(resumed / "checkpoint-2" / "adapter_model.safetensors"))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert (resumed / "thermostat.jsonl").read_text() == (out / "thermostat.jsonl").read_text()
    from trainers.run_book import read_admitted
    same = ("step", "formula", "train_cpcv", "turnover")  # "added" is the wall clock of the admission
    assert [{k: r[k] for k in same} for r in read_admitted(resumed / "archive.jsonl")] == \
        [{k: r[k] for k in same} for r in read_admitted(out / "archive.jsonl")]


@pytest.mark.slow
@pytest.mark.real_data
def test_loop_scores_as_score_group_and_grows_the_archive(runs, verifier):
    """The native loop's rewards are Verifier.score_group's for the same answers to one prompt, and the
    planted answer (core score > 0) joins the archive after step 1, which the checkpoint carries."""
    from alpha_gym.scoring.archive import Archive
    from trainers.run_log import read_log
    out, _, _ = runs("cispo")
    rows = [json.loads(ln) for ln in (out / "completions.jsonl").read_text().splitlines()]
    fresh = verifier.fork()  # the seeded archive the run started from
    seeded = len(fresh.archive)
    for brief in BRIEFS:
        group = [r for r in rows if r["step"] == 1 and r["brief_id"] == brief.id]
        direct = fresh.score_group([r["answer"] for r in group])
        assert [r["reward"] for r in group] == [s.reward for s in direct.scores]
        assert [r["channels"] for r in group] == [s.channels for s in direct.scores]
    log = read_log(out)
    assert log[0]["archive_size"] == seeded + 1 == log[1]["archive_size"]  # the same planted answer: once
    saved = Archive.load(out / "checkpoint-1" / "archive.npz", verifier.panel.fingerprint())
    assert len(saved) == seeded + 1 and not saved.seed[-1]
    step2 = [r for r in rows if r["step"] == 2 and r["answer"] == VALID_ANSWER]
    assert step2 and all(r["channels"]["novelty_pnl"] == pytest.approx(-0.4) for r in step2)  # now a duplicate
    from trainers.run_book import ARCHIVE_LOG, read_admitted
    admitted = read_admitted(out / ARCHIVE_LOG)  # the run's own book: the one admitted entry, from step 1
    assert [(r["step"], r["formula"], r["train_cpcv"]) for r in admitted] == [(1, saved.texts[-1], saved.cpcv[-1])]
    assert admitted[0]["turnover"] > 0


@pytest.mark.slow
@pytest.mark.real_data
def test_dapo_and_cispo_take_different_steps_off_policy(smollm, verifier, tmp_path):
    """With two optimizer steps per rollout the second mini-batch is scored by a newer policy than the one
    that sampled it: ratios leave 1, DAPO clips and CISPO caps, and the two trainers end in different places
    from the same start and the same answers. (One step per rollout: identical, tests/test_losses.py.)"""
    from trainers import loop
    from trainers.models import adapter_state
    from trainers.run_log import read_log
    results = {}
    for name in ("dapo", "cispo"):
        # a large learning rate so that one optimizer step moves some token ratios past the 0.8-1.28 band
        config = recipe(name, **{**TINY, "learning_rate": 2e-2, "steps_per_generation": 2,
                                 "top_entropy_quantile": 1.0, "advantage_floor": None})
        sample_group, _ = planting()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(loop, "sample_groups", sample_group)
            summary = loop.train(config, verifier.fork(), BRIEFS, tmp_path / name,
                                 model=fresh_policy(smollm, config), steps=1, progress=False)
        results[name] = (adapter_state(summary["policy"]), read_log(tmp_path / name)[0])
    (dapo_w, dapo_log), (cispo_w, cispo_log) = results["dapo"], results["cispo"]
    rows = [json.loads(ln)["answer"] for ln in (tmp_path / "dapo" / "completions.jsonl").read_text().splitlines()]
    assert rows == [json.loads(ln)["answer"] for ln in
                    (tmp_path / "cispo" / "completions.jsonl").read_text().splitlines()]  # the same batch
    assert dapo_log["ratio_mean"] != 1.0 and cispo_log["ratio_mean"] != 1.0
    assert dapo_log["clipped_share"] > 0 or cispo_log["clipped_share"] > 0
    assert any(not torch.equal(dapo_w[k], cispo_w[k]) for k in dapo_w), "DAPO and CISPO took the same step"


@pytest.mark.slow
def test_old_logps_from_the_sampler_give_the_recomputed_step(smollm, verifier, tmp_path):
    """The sampler's own old log-probs (the product) and the oracle's recomputed ones (one more no-grad pass):
    the same answers and rewards, and the step's old log-probs and entropies (ratio, entropy, KL, loss of the
    log line) agree to float rounding."""
    from trainers import loop
    from trainers.run_log import read_log
    logs = {}
    for on in (True, False):
        config = recipe("cispo", **{**TINY, "steps_per_generation": 2})
        with pytest.MonkeyPatch.context() as mp:
            if not on:
                mp.setattr(loop, "sample_groups", recomputing_sampler(loop.sample_groups))
            loop.train(config, verifier.fork(), BRIEFS, tmp_path / str(on), model=fresh_policy(smollm, config),
                       steps=1, progress=False)
        logs[on] = read_log(tmp_path / str(on))[0]
    answers = [[json.loads(ln)["answer"] for ln in (tmp_path / str(on) / "completions.jsonl").read_text().splitlines()]
               for on in (True, False)]
    assert answers[0] == answers[1] and len(answers[0]) == 8
    a, b = logs[True], logs[False]
    assert a["reward"] == b["reward"] and a["entropy"] > 0
    for key in ("entropy", "ratio_mean", "kl", "loss"):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_trimmed_answers_give_the_padded_step(smollm, verifier, tmp_path):
    """Each answer scored to its own end (the product) and every answer padded to the batch's longest (the
    oracle `padded_logps`, in every log-prob pass of the step): the same answers and rewards, and the step's
    ratio, entropy, KL and loss to float rounding, and adapters that moved alike (two mini-batches, the KL
    term on; a planted valid answer, longer than the sampled ones, in each group)."""
    from trainers import loop, update
    from trainers.run_log import read_log
    logs, weights = {}, {}
    for on in (True, False):
        config = recipe("cispo", **{**TINY, "steps_per_generation": 2})
        with pytest.MonkeyPatch.context() as mp:  # a valid answer in each group: advantages, so an update
            mp.setattr(loop, "sample_groups", planting()[0])
            if not on:  # the update's log-prob passes (reference and policy)
                mp.setattr(update, "group_logps", padded_logps)
            summary = loop.train(config, verifier.fork(), BRIEFS, tmp_path / str(on),
                                 model=fresh_policy(smollm, config), steps=1, progress=False)
        logs[on] = read_log(tmp_path / str(on))[0]
        weights[on] = {n: p.detach().clone() for n, p in summary["policy"].named_parameters() if p.requires_grad}
    rows = {on: [json.loads(ln) for ln in (tmp_path / str(on) / "completions.jsonl").read_text().splitlines()]
            for on in (True, False)}
    assert [r["answer"] for r in rows[True]] == [r["answer"] for r in rows[False]] and len(rows[True]) == 8
    a, b = logs[True], logs[False]
    assert a["reward"] == b["reward"] and a["kl"] > 0
    for key in ("entropy", "ratio_mean", "kl", "loss"):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    # B starts at 0, so after one step each B is that step's update: the two updates agree
    b_on = torch.cat([w.flatten() for n, w in weights[True].items() if "lora_B" in n])
    b_off = torch.cat([w.flatten() for n, w in weights[False].items() if "lora_B" in n])
    assert b_on.norm() > 0 and (b_on - b_off).norm() < 1e-3 * b_on.norm()


@pytest.mark.slow
@pytest.mark.real_data
def test_refill_resamples_only_flat_groups(smollm, verifier, tmp_path):
    """A group whose answers are all the same invalid text has zero reward variance: it is sampled again,
    each round, up to refill_rounds; a group with a valid answer is not."""
    from trainers import loop
    config = recipe("dapo_refill", **{**TINY, "max_completion_length": 8})
    sample_group, calls = planting(valid_briefs=[BRIEFS[0]], flat_text="I would rather not answer.")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "sample_groups", sample_group)
        summary = loop.train(config, verifier.fork(), BRIEFS, tmp_path, model=fresh_policy(smollm, config), steps=1,
                             progress=False)
    from trainers.run_log import read_log
    rec = read_log(tmp_path)[0]
    assert rec["refills"] == 2 == summary["refills"]  # brief tiny-1 flat in both rounds, tiny-0 never
    assert len(calls) == 2 + 2
    rows = [json.loads(ln) for ln in (tmp_path / "completions.jsonl").read_text().splitlines()]
    flat = [r for r in rows if r["brief_id"] == "tiny-1"]
    assert flat and all(r["advantage"] == 0.0 and r["reward"] == verifier.config.invalid_reward("missing_tag")
                        for r in flat)
    assert rec["nonzero_adv_share"] == pytest.approx(0.5)  # the other group has signal in every answer


# ---------------------------------------------------------------------------------------- TRL
@pytest.mark.slow
@pytest.mark.real_data
def test_trl_alpha_grpo_trainer_one_step(smollm, verifier, tmp_path):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    from trainers.models import adapter_state
    from trainers.trl_adapter import AlphaGRPOTrainer, reward_weights

    base, tokenizer = smollm
    planted = tokenizer(VALID_ANSWER, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    seen = {}

    class Planted(AlphaGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kw):
            ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, **kw)
            for i in range(0, len(ids), num_generations):
                ids[i] = list(planted)  # one valid answer per group
            return ids, logprobs

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            seen["advantages"], seen["valid"] = out["advantages"].clone(), self._valid.clone()
            return out

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": b.text}]} for b in BRIEFS])
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=16, learning_rate=1e-5, beta=0.08, loss_type="cispo", epsilon_high=1.2,
                      multi_objective_aggregation="normalize_then_sum", seed=42, bf16=False,
                      gradient_checkpointing=False, use_cpu=True, report_to="none", save_strategy="no",
                      logging_steps=1, disable_tqdm=True)
    peft_config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = Planted(copy.deepcopy(base), verifier.fork(), args=args, train_dataset=dataset, processing_class=tokenizer,
                      peft_config=peft_config, repo_r=True)
    assert args.reward_weights == reward_weights(verifier)
    initial = adapter_state(trainer.model)
    trainer.train()
    after = adapter_state(trainer.model)
    assert any(not torch.equal(after[k], initial[k]) for k in after), "no adapter weight changed"

    logs = trainer.state.log_history[0]
    assert math.isfinite(logs["loss"]) and "rewards/cpcv/mean" in logs and "repo_r/zeta" in logs
    adv, valid = seen["advantages"], seen["valid"]
    assert adv.dim() == 2  # REPO-R: per-token advantages
    seq_adv = adv.sum(-1)
    assert valid.view(-1, 4)[:, 0].all()  # the planted answers
    assert (seq_adv[~valid] <= 1e-6).all()  # invalid answers never pushed up
    assert (adv[valid] >= 0).all() and (seq_adv[valid] > 0).all()


# ------------------------------------------------------------------------- reward functions (fast)
def test_reward_funcs_plain_and_conversational(small_synthetic):
    from alpha_gym.scoring.config import CHANNELS
    from alpha_gym.scoring.verifier import Verifier
    from trainers.trl_adapter import completion_text, reward_funcs, reward_weights

    v = Verifier(small_synthetic)
    funcs = reward_funcs(v)
    funcs[0].scorer.grow = False  # the same answers in three forms must score alike: no archive growth between
    assert [f.__name__ for f in funcs] == list(CHANNELS)
    assert reward_weights(v) == [v.config.priorities[c] for c in CHANNELS]
    plain = [VALID_ANSWER, "no tag here", "<alpha>rank(close -)</alpha>"]
    chat = [[{"role": "assistant", "content": t}] for t in plain]
    blocks = [[{"role": "assistant", "content": [{"type": "text", "text": t}]}] for t in plain]
    assert [completion_text(c) for c in chat] == plain == [completion_text(c) for c in blocks]
    prompts = ["p"] * 3
    for completions in (plain, chat, blocks):
        columns = [f(prompts=prompts, completions=completions, completion_ids=None) for f in funcs]
        assert all(len(col) == 3 and all(isinstance(x, float) and math.isfinite(x) for x in col) for col in columns)
        direct = v.score_group(plain).scores  # the prompt's answers are one group
        assert columns[0] == [s.channels["cpcv"] for s in direct]
    assert funcs[0].scorer.calls == 1  # 12 channels x 3 forms of the same texts: one scoring


# ------------------------------------------------------------------------------- config and CLI
def test_a_step_too_large_for_any_machine_is_refused():
    from alpha_gym.ranges import SettingError
    for key, value in (("num_generations", 1025), ("prompts_per_step", 1025), ("max_completion_length", 32769)):
        with pytest.raises(SettingError, match=rf"TrainConfig\.{key} = {value}: must be an integer in"):
            TrainConfig(**{key: value})
    TrainConfig(num_generations=1024, prompts_per_step=1024, max_completion_length=32768)  # the bounds pass


def test_config_validation_and_recipes():
    for name, cfg in RECIPES.items():
        assert isinstance(cfg, TrainConfig), name
    assert RECIPES["cispo"].resolved_epsilon_high == 0.2 and RECIPES["dapo"].resolved_epsilon_high == 0.28
    assert RECIPES["grpo"].resolved_epsilon_high == 0.2 and RECIPES["grpo"].advantage_mode == "grpo"
    assert RECIPES["cispo_repo_r"].num_iterations == 2 and RECIPES["cispo_repo_r"].top_entropy_quantile == 1.0
    assert RECIPES["cispo"].top_entropy_quantile == 0.2 and RECIPES["cispo_repo_r_dora"].use_dora
    # recipes as the reference ran them: refill only in its own arm, the ladder with the floor at 0,
    # off-policy mini-batches everywhere
    # (and in cispo_distinct_forms, whose collapse refill runs in the refill rounds: issue 39.3)
    assert [n for n, c in RECIPES.items() if c.refill_rounds] == ["dapo_refill", "cispo_distinct_forms"]
    assert {n for n, c in RECIPES.items() if c.advantage_floor == 0.0} == \
        {"dapo", "cispo", "cispo_repo_r", "cispo_repo_r_dora", "dapo_repo_r_dora", "cispo_distinct_forms"}
    assert RECIPES["grpo"].advantage_floor is None and RECIPES["dapo_refill"].advantage_floor is None
    assert all(c.steps_per_generation == 2 for c in RECIPES.values())
    base = TrainConfig()
    assert (base.learning_rate, base.beta, base.num_generations, base.prompts_per_step, base.seed,
            base.lora_r, base.lora_alpha, base.advantage_floor) == (1e-5, 0.08, 12, 4, 42, 32, 64, 0.0)
    bad = [dict(loss_type="ppo"), dict(num_generations=1), dict(learning_rate=0), dict(epsilon=1.5),
           dict(top_entropy_quantile=1.2), dict(advantage_mode="sum"), dict(refill_rounds=-1),
           dict(temperature=0.0), dict(adapo=True, loss_type="cispo"), dict(advantage_floor=float("nan")),
           dict(num_iterations=0), dict(load_in_4bit="yes"), dict(prompts_per_step=2.5),
           dict(steps_per_generation=0), dict(steps_per_generation=13)]
    for change in bad:
        with pytest.raises(ValueError):
            base.with_(**change)
    with pytest.raises(ValueError, match="unknown"):
        base.with_(lr=1e-4)
    with pytest.raises(ValueError, match="unknown recipe"):
        recipe("ppo")


def test_the_default_config_is_the_default_recipe():
    """`TrainConfig()` trains what `alpha-gym train` with no --recipe trains, and what the settings file defaults to."""
    from trainers.config import DEFAULT_RECIPE, RECIPE_BASE
    assert DEFAULT_RECIPE == "cispo_repo_r"
    assert TrainConfig() == RECIPES["cispo_repo_r"] == recipe(DEFAULT_RECIPE)
    # the recipes' own base keeps the settings they were defined against (it was TrainConfig() before)
    assert (RECIPE_BASE.loss_type, RECIPE_BASE.epsilon_high, RECIPE_BASE.num_iterations, RECIPE_BASE.repo_r,
            RECIPE_BASE.advantage_floor) == ("dapo", None, 1, False, None)
    assert RECIPES["dapo"] == RECIPE_BASE.with_(advantage_floor=0.0, epsilon_high=0.28, top_entropy_quantile=0.2)


def test_cli_parses_and_applies_overrides():
    from alpha_gym.commands.train import cmd_train, config_from_args, register
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["train", "--recipe", "cispo_repo_r", "--steps", "3", "--out", "x",
                              "--prompts-per-step", "2", "--num-generations", "6", "--max-completion-length", "32",
                              "--resume"])
    assert args.func is cmd_train and args.steps == 3 and args.resume and args.model is None
    cfg = config_from_args(args)
    assert (cfg.prompts_per_step, cfg.num_generations, cfg.max_completion_length) == (2, 6, 32)
    assert cfg.repo_r and cfg.loss_type == "cispo"
    bad = parser.parse_args(["train", "--recipe", "dapo", "--num-generations", "1"])
    assert cmd_train(bad) == 2  # refused before any loading
    assert cmd_train(parser.parse_args(["train", "--recipe", "dapo", "--briefs", "nowhere.jsonl"])) == 2

    from alpha_gym.commands.train import briefs_from_args, verifier_config_from_args
    args = parser.parse_args(["train", "--recipe", "cispo", "--advantage-floor", "none", "--format-reward", "on",
                              "--stress-checkpoint", "models/w", "--steps-per-generation", "4"])
    cfg = config_from_args(args)
    assert cfg.advantage_floor is None and cfg.steps_per_generation == 4
    vcfg = verifier_config_from_args(args)
    assert vcfg.format_enabled and vcfg.stress_checkpoint == "models/w"
    defaults = parser.parse_args(["train", "--recipe", "cispo"])
    assert config_from_args(defaults).advantage_floor == 0.0 and not verifier_config_from_args(defaults).format_enabled
    assert len(briefs_from_args(defaults.briefs)) == 450  # the training briefs by default
    assert config_from_args(parser.parse_args(["train", "--recipe", "dapo", "--advantage-floor", "-0.5"])) \
        .advantage_floor == -0.5
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--recipe", "dapo", "--advantage-floor", "low"])
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--recipe", "nope"])


@pytest.mark.slow
def test_cli_train_end_to_end(tmp_path, capsys):
    """`train` through the CLI on the embedded synthetic market: the default model, real briefs, one step."""
    from alpha_gym.commands.main import main
    code = main(["train", "--recipe", "grpo", "--steps", "1", "--out", str(tmp_path), "--prompts-per-step", "1",
                 "--num-generations", "2", "--max-completion-length", "4", "--no-progress", "--threads", "1"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 1 and (tmp_path / "checkpoint-1" / "adapter_model.safetensors").exists()
    rec = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])
    assert np.isfinite(rec["loss"]) and rec["step"] == 1


def test_load_in_4bit_refused_on_cpu():
    from trainers.models import resolve_4bit
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert resolve_4bit(TrainConfig()) is False
    with pytest.raises(ValueError, match="CUDA"):
        resolve_4bit(TrainConfig(load_in_4bit=True))


def test_missing_model_is_a_clear_error(tmp_path):
    from trainers.models import load_base
    with pytest.raises(FileNotFoundError, match="not found"):
        load_base(str(tmp_path / "nowhere" / "model"))


def test_model_cache_is_the_user_cache_folder(tmp_path, monkeypatch):
    """The dense default model lives in the same cache folder as the seed books and world models,
    and `ALPHA_GYM_CACHE=off` writes nothing there (a per-process folder instead of one named "off")."""
    from alpha_gym.user_cache import cache_dir
    from trainers.models import default_model_dir
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "c"))
    assert default_model_dir() == cache_dir() / "models" / "smollm2-135m-instruct"
    monkeypatch.setenv("ALPHA_GYM_CACHE", "off")
    monkeypatch.chdir(tmp_path)
    off = default_model_dir()
    assert "off" not in off.parts and off.parent.parent.is_dir() and off == default_model_dir()
