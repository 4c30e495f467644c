"""One policy update (trainers/update.py) behind the loop and the RL mutator, each loss one row of LOSS_TABLE.

A tiny Llama (random weights, a 64-word tokenizer) and the real verifier on a small synthetic market keep the
file to seconds. Its random answers are all invalid, so each group gets one valid answer's TEXT in place of its
first (its tokens and log-probs stay the sampler's): the scoring then ranks it first, the advantages differ and
the update has a signal; sampling, log-probs, scoring, advantages, the loss and the AdamW step all run for real.
"""

from __future__ import annotations

import copy
import inspect
import json
from dataclasses import dataclass, fields, replace

import numpy as np
import pytest
import torch

from trainers import config as config_module
from trainers import losses
from trainers.config import (CLIPS, EPSILON_HIGH, LOSS_TABLE, LOSS_TYPES, LossRow, TrainConfig, recipe)

VALID_ANSWER = "<alpha>rank(ts_std(volume, 8) / ts_std(close, 8))</alpha>"
TINY = dict(prompts_per_step=2, num_generations=3, max_completion_length=6, steps_per_generation=2, save_steps=0,
            lora_r=4, lora_alpha=8, learning_rate=1e-2, advantage_floor=None, beta=0.08)
V = 64


@dataclass(frozen=True)
class TinyBrief:
    id: str
    text: str

    def prompt(self) -> str:
        return self.text


BRIEFS = [TinyBrief("tiny-0", "t5 t6 t7"), TinyBrief("tiny-1", "t8 t9 t10 t11")]


@pytest.fixture(scope="module")
def tiny():
    """A (model, tokenizer) pair: a 2-layer Llama with random weights and a word-level tokenizer of 64 words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1", unk_token="t2")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, pad_token_id=0,
                                         eos_token_id=1, bos_token_id=3)).eval()
    return model, tokenizer


@pytest.fixture(scope="module")
def verifier(small_synthetic):
    from alpha_gym.scoring.verifier import Verifier
    return Verifier(small_synthetic)


@pytest.fixture(autouse=True)
def _one_thread():
    from alpha_gym.threads import torch_threads
    with torch_threads(1):
        yield


def planted(real):
    """The loop's sampler, with answer 0 of every group reading as VALID_ANSWER (its text only)."""
    def sample_groups(model, tokenizer, prompts, config, eos_ids, **kw):
        return [(ids, mask, [VALID_ANSWER, *texts[1:]], *rest)
                for ids, mask, texts, *rest in real(model, tokenizer, prompts, config, eos_ids, **kw)]
    return sample_groups


def train(tiny, verifier, out, config, steps=1):
    """`loop.train` on the tiny model with fresh adapters; (summary, log lines, initial adapters)."""
    from trainers import loop
    from trainers.models import add_adapters, adapter_state
    from trainers.run_log import read_log
    model, tokenizer = tiny
    policy = add_adapters(copy.deepcopy(model), config)
    initial = adapter_state(policy)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "sample_groups", planted(loop.sample_groups))
        summary = loop.train(config, verifier.fork(), BRIEFS, out, model=(policy, tokenizer), steps=steps,
                             progress=False)
    return summary, read_log(out), initial


def moved(before: dict, after: dict) -> list[str]:
    return [k for k in before if not torch.equal(before[k], after[k])]


# ------------------------------------------------------------------------- (b) what the table derives
def test_loss_types_epsilon_high_and_the_formulas_follow_the_table():
    assert LOSS_TYPES == tuple(LOSS_TABLE) == ("grpo", "dapo", "cispo")
    assert EPSILON_HIGH == {n: r.epsilon_high for n, r in LOSS_TABLE.items() if r.epsilon_high is not None} \
        == {"dapo": 0.28, "cispo": 0.2}
    assert losses.LOSSES == {n: getattr(losses, r.formula) for n, r in LOSS_TABLE.items()}
    names = {f.name for f in fields(TrainConfig)}
    for name, row in LOSS_TABLE.items():
        formula = losses.loss_function(name)
        assert set(row.options) <= names and set(row.options) <= set(inspect.signature(formula).parameters)
        # a token-averaged formula takes the mini-batch's token count; a sequence-averaged one has none to take
        assert ("num_items_in_batch" in inspect.signature(formula).parameters) == (row.averaging == "token")
        config = TrainConfig(loss_type=name, epsilon_high=None, adapo=False)
        assert config.resolved_epsilon_high == (config.epsilon if row.epsilon_high is None else row.epsilon_high)
        # ADAPO steers a clip band: refused on every other clip, by the row, not by the loss's name
        if row.clip == "band":
            TrainConfig(loss_type=name, adapo=True)
        else:
            with pytest.raises(ValueError, match=f"adapo steers the clip band of grpo/dapo; with {name}"):
                TrainConfig(loss_type=name, adapo=True)
    with pytest.raises(ValueError, match="unknown loss 'ppo'"):
        losses.loss_function("ppo")


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(3, 5, generator=g) - 0.1
    old = logp + 0.5 * torch.randn(3, 5, generator=g)   # ratios e^(+-0.5): some leave every band and cap
    mask = torch.ones(3, 5)
    mask[1, 3:] = 0
    return logp, old, torch.tensor([1.0, -0.5, -0.5]), mask


@pytest.mark.parametrize("name", LOSS_TYPES)
def test_the_metrics_of_each_loss_are_its_rows(name):
    row = LOSS_TABLE[name]
    logp, old, adv, mask = _batch()
    _, m = losses.policy_loss(name, logp, old, adv, mask)
    assert tuple(m) == row.metrics and row.metrics[1:] == CLIPS[row.clip].metrics
    _, m = losses.policy_loss(name, logp, old, adv, mask, beta=0.1, ref_logp=logp - 0.2, entropy=torch.ones(3, 5))
    assert tuple(m) == (*row.metrics, "kl", "entropy")
    assert {row.clip_metric, row.clipped_metric} <= set(m) and m[row.clipped_metric] > 0   # the clip acts here


def test_a_row_must_name_a_known_averaging_clip_and_formula(monkeypatch):
    with pytest.raises(ValueError, match="LossRow.averaging = 'batch'"):
        LossRow("dapo_loss", ("epsilon",), None, "batch", "band")
    with pytest.raises(ValueError, match="LossRow.clip = 'soft'"):
        LossRow("dapo_loss", ("epsilon",), None, "token", "soft")
    for formula in ("ppo_loss", "Dapo_loss", "", "torch", "LOSSES", "EPSILON_HIGH"):   # none a loss function here
        monkeypatch.setitem(LOSS_TABLE, "odd", LossRow(formula, (), None, "token", "cap"))
        with pytest.raises(ValueError, match=f"names the formula {formula!r}, which trainers/losses.py does not"):
            losses.policy_loss("odd", *_batch())


# ---------------------------------------------------------------- (a) every loss trains on both paths
@pytest.mark.parametrize("name", LOSS_TYPES)
def test_every_loss_trains_through_the_loop(tiny, verifier, tmp_path, name):
    from trainers.models import adapter_state
    row = LOSS_TABLE[name]
    config = recipe("dapo" if row.clip == "band" else "cispo", **TINY, loss_type=name, top_entropy_quantile=0.5)
    summary, log, initial = train(tiny, verifier, tmp_path, config)
    rec = log[0]
    assert rec["nonzero_adv_share"] > 0 and all(np.isfinite(rec[k]) for k in ("loss", "kl", "clip_ratio", "ratio_mean"))
    assert rec["epsilon_high"] == config.resolved_epsilon_high
    assert rec["ratio_mean"] != 1.0    # the second mini-batch is scored by a newer policy than the sampler
    assert moved(initial, adapter_state(summary["policy"]))


@pytest.mark.parametrize("name", LOSS_TYPES)
def test_every_loss_trains_through_the_rl_mutator(tiny, name):
    from alpha_gym.language import parse
    from alpha_gym.search.database import DatabaseConfig, ProgramDatabase
    from trainers.evolve_rl import TrainedMutator
    from trainers.models import adapter_state
    db = ProgramDatabase(DatabaseConfig(n_islands=1))
    seed = "rank(-ts_delta(close, 5))"
    db.add(seed, parse(seed), 0.3, 0.1, 0.5, 0.2, 0.01, 0.1)
    mutator = TrainedMutator(loaded=copy.deepcopy(tiny), recipe="dapo", loss_type=name, answers_per_set=3,
                             max_new_tokens=6, learning_rate=1e-2, lora_r=4, lora_alpha=8, beta=0.08)
    start = adapter_state(mutator.policy)
    mutator.propose([db.programs] * 3, np.random.default_rng(0))
    rec = mutator.observe([(0.4, True), (-1.0, True), (-0.2, True)])
    assert rec["update"] == 1 and rec["nonzero_adv"] == 1.0 and np.isfinite(rec["loss"]) and rec["kl"] == 0.0
    assert moved(start, adapter_state(mutator.policy))


# --------------------------------------------------------------------- (c) a new loss is one new row
def test_a_new_row_is_accepted_by_the_settings_and_trains_as_its_original(tiny, verifier, tmp_path, monkeypatch):
    """A copy of dapo's row under a new name, added to the table and nowhere else: the settings accept it (and
    still refuse a name with no row), the loop trains with it, and its run is dapo's run bit for bit."""
    from alpha_gym.ranges import SettingError
    with pytest.raises(SettingError, match="loss_type = 'dapo_copy': must be one of grpo, dapo, cispo$"):
        TrainConfig(loss_type="dapo_copy")
    monkeypatch.setitem(LOSS_TABLE, "dapo_copy", replace(LOSS_TABLE["dapo"]))
    config = recipe("dapo", **TINY, loss_type="dapo_copy", adapo=True)      # a band: ADAPO may steer it
    assert config.resolved_epsilon_high == 0.28
    runs = {}
    for name in ("dapo", "dapo_copy"):
        summary, log, _ = train(tiny, verifier, tmp_path / name, config.with_(loss_type=name), steps=2)
        timing = {k for k in log[0] if k.startswith("seconds/")}
        runs[name] = ([{k: v for k, v in r.items() if k not in timing} for r in log], summary["policy"])
    (dapo_log, dapo_policy), (copy_log, copy_policy) = runs["dapo"], runs["dapo_copy"]
    assert copy_log == dapo_log and copy_log[1]["clip_ratio"] >= 0 and copy_log[0]["loss"] != 0.0
    from trainers.models import adapter_state
    assert not moved(adapter_state(dapo_policy), adapter_state(copy_policy))
    assert "loss_type = \"dapo_copy\"" in (tmp_path / "dapo_copy" / "settings.toml").read_text()


def test_a_new_row_with_its_own_formula(tiny, verifier, tmp_path, monkeypatch):
    """A loss of its own: a formula added to trainers/losses.py (here at run time) and its row; the update hands it
    the options its row names, and the log's clip share is the metric its row's clip names."""
    seen = []

    def half_cispo_loss(logp, old_logp, adv, mask, *, epsilon_high, beta, ref_logp=None, entropy=None,
                        num_items_in_batch=None):
        seen.append((epsilon_high, beta, num_items_in_batch is not None))
        return 0.5 * losses.cispo_loss(logp, old_logp, adv, mask, epsilon_high=epsilon_high, beta=beta,
                                       ref_logp=ref_logp, num_items_in_batch=num_items_in_batch)

    monkeypatch.setattr(losses, "half_cispo_loss", half_cispo_loss, raising=False)
    monkeypatch.setitem(LOSS_TABLE, "half_cispo", LossRow("half_cispo_loss", ("epsilon_high",), 0.3, "token", "cap"))
    config = recipe("cispo", **TINY, loss_type="half_cispo", epsilon_high=None)
    _, log, _ = train(tiny, verifier, tmp_path, config)
    assert log[0]["epsilon_high"] == 0.3 and seen and set(seen) == {(0.3, 0.08, True)}
    assert config_module.LOSS_TABLE["half_cispo"].clip_metric == "cispo_clip_ratio" and log[0]["clip_ratio"] >= 0
    assert len(seen) == TINY["prompts_per_step"] * TINY["steps_per_generation"]   # one call per group and mini-batch
    settings = json.dumps(config.to_dict())
    assert '"loss_type": "half_cispo"' in settings
